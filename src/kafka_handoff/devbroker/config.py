"""Pure helpers for the dev broker: cluster ids, ``server.properties`` rendering and java command lines.

Nothing here starts processes; :mod:`kafka_handoff.devbroker.cluster` does.  Every node is a combined
KRaft node (``process.roles=broker,controller``) on 127.0.0.1 with a static quorum
(``controller.quorum.voters`` naming every node), which needs no quorum flags when formatting.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kafka_handoff.errors import ConfigError

__all__ = [
    "JVM_HEAP_OPTS",
    "JVM_PERFORMANCE_OPTS",
    "NodeSpec",
    "broker_settings",
    "format_command",
    "generate_cluster_id",
    "is_valid_cluster_id",
    "java_argfile",
    "java_executable",
    "render_properties",
    "server_command",
]

ALLOWED_NODE_COUNTS = (1, 3)

#: Heap per broker JVM (the issue asks for <= 512 MB).
JVM_HEAP_OPTS = ("-Xms256m", "-Xmx512m")
#: kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS (4.x), minus JMX and GC logging.
JVM_PERFORMANCE_OPTS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)
#: The one-shot storage format tool only needs a fast start.
_TOOL_OPTS = ("-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")

# Kafka's Uuid.METADATA_TOPIC_ID (0, 1) and ZERO_UUID are reserved; randomUuid() never returns them.
_RESERVED_IDS = frozenset({bytes(16), bytes(15) + b"\x01"})


def generate_cluster_id() -> str:
    """A random Kafka ``Uuid`` in its string form (URL-safe base64 of 16 bytes, no padding), like
    ``kafka-storage.sh random-uuid``: never a reserved id and never starting with ``-``."""
    while True:
        raw = secrets.token_bytes(16)
        if raw in _RESERVED_IDS:
            continue
        text = base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


def is_valid_cluster_id(value: str) -> bool:
    if len(value) != 22 or value.startswith("-"):
        return False
    try:
        raw = base64.urlsafe_b64decode(value + "==")
    except ValueError:
        return False
    return len(raw) == 16 and raw not in _RESERVED_IDS


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One combined broker+controller node."""

    node_id: int
    port: int
    controller_port: int
    node_dir: Path
    host: str = "127.0.0.1"

    @property
    def data_dir(self) -> Path:
        return self.node_dir / "data"

    @property
    def logs_dir(self) -> Path:
        return self.node_dir / "logs"

    @property
    def properties_path(self) -> Path:
        return self.node_dir / "server.properties"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


def broker_settings(num_nodes: int) -> dict[str, str]:
    """The settings made for tests, sized for ``num_nodes`` (1 or 3).  Java defaults in comments."""
    if num_nodes not in ALLOWED_NODE_COUNTS:
        raise ConfigError(f"nodes: {num_nodes!r} is not allowed; allowed values: 1, 3")
    rf = str(num_nodes)
    min_isr = str(min(2, num_nodes))
    return {
        "auto.create.topics.enable": "true",  # default true
        "num.partitions": "1",  # default 1
        "default.replication.factor": rf,  # default 1
        # Internal topics: few partitions (they load faster), replicated on every node.
        "offsets.topic.num.partitions": "3",  # default 50
        "offsets.topic.replication.factor": rf,  # default 3
        "transaction.state.log.num.partitions": "3",  # default 50
        "transaction.state.log.replication.factor": rf,  # default 3
        "transaction.state.log.min.isr": min_isr,  # default 2
        "share.coordinator.state.topic.num.partitions": "3",  # default 50
        "share.coordinator.state.topic.replication.factor": rf,  # default 3
        "share.coordinator.state.topic.min.isr": min_isr,  # default 2
        # Classic groups: no join delay, short sessions allowed.
        "group.initial.rebalance.delay.ms": "0",  # default 3000
        "group.min.session.timeout.ms": "1000",  # default 6000
        # KIP-848 consumer groups (enabled by default in 4.x): short sessions and heartbeats.
        # Validation: min <= value <= max for each, and heartbeat interval < session timeout.
        "group.consumer.min.session.timeout.ms": "1000",  # default 45000
        "group.consumer.session.timeout.ms": "6000",  # default 45000 (max 60000)
        "group.consumer.min.heartbeat.interval.ms": "100",  # default 5000
        "group.consumer.heartbeat.interval.ms": "500",  # default 5000 (max 15000)
        # KIP-932 share groups (GA in 4.2, enabled by default): short sessions and heartbeats as for
        # consumer groups, and group configs allowed to set short acquisition locks / low delivery limits
        # (`share.record.lock.duration.ms`, `share.delivery.count.limit`) for redelivery tests.
        "group.share.min.session.timeout.ms": "1000",  # default 45000
        "group.share.session.timeout.ms": "6000",  # default 45000 (max 60000)
        "group.share.min.heartbeat.interval.ms": "100",  # default 5000
        "group.share.heartbeat.interval.ms": "500",  # default 5000 (max 15000)
        "group.share.min.record.lock.duration.ms": "1000",  # default 15000
        "group.share.min.delivery.count.limit": "2",  # default 2
        # Small machine: 2 MiB cleaner buffer (KafkaClusterTestKit does the same), fast teardown.
        "log.cleaner.dedupe.buffer.size": "2097152",  # default 134217728
        "controlled.shutdown.enable": "false",  # default true
    }


def render_properties(
    node: NodeSpec,
    voters: Sequence[NodeSpec],
    *,
    overrides: Mapping[str, str] | None = None,
) -> str:
    """The ``server.properties`` text of ``node`` in a static quorum of ``voters`` (all the nodes)."""
    if node not in voters:
        raise ConfigError(f"node.id: node {node.node_id} is not among the voters")
    ids = [v.node_id for v in voters]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"node.id: duplicate node ids in {ids}")
    settings: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": ",".join(f"{v.node_id}@{v.host}:{v.controller_port}" for v in voters),
        "listeners": f"PLAINTEXT://{node.host}:{node.port},CONTROLLER://{node.host}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{node.host}:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(node.data_dir),
    }
    settings.update(broker_settings(len(voters)))
    for key, value in (overrides or {}).items():
        if not key or any(c in key for c in " =:\n\r"):
            raise ConfigError(f"{key!r}: not a valid broker config name")
        settings[key] = str(value)
    lines = ["# Written by kafka_handoff.devbroker; regenerated on every start."]
    lines += [f"{key}={_escape_value(value)}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def _escape_value(value: str) -> str:
    """Escape a value for java.util.Properties (backslashes, line breaks, leading blanks)."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    if out[:1] in (" ", "\t", "\f"):
        out = "\\" + out
    return out


def java_executable() -> str:
    """``$JAVA_HOME/bin/java`` when set, else ``java`` from PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise ConfigError("JAVA_HOME: no java executable found (need Java 17+ on PATH or in JAVA_HOME)")
    return found


def _log_opts(node: NodeSpec, log4j_config: Path) -> list[str]:
    return [f"-Dkafka.logs.dir={node.logs_dir}", f"-Dlog4j2.configurationFile={log4j_config}"]


def format_command(
    node: NodeSpec,
    cluster_id: str,
    classpath: str,
    log4j_config: Path,
    java: str,
    extra_jvm_opts: Sequence[str] = (),
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``kafka-storage.sh format -t <id> -c <props>`` without the scripts (static quorum: no flags).

    ``extra_args``: more ``format`` arguments (``--add-scram ...`` for the secured dev broker)."""
    return [
        java,
        *_TOOL_OPTS,
        *extra_jvm_opts,
        *_log_opts(node, log4j_config),
        "-cp",
        classpath,
        "kafka.tools.StorageTool",
        "format",
        "-t",
        cluster_id,
        "-c",
        str(node.properties_path),
        *extra_args,
    ]


def java_argfile(args: Sequence[str]) -> str:
    """``args`` as the text of a java launcher argument file (``java @FILE``): one quoted argument a line.

    Arguments in such a file -- the main class and its arguments too -- are not on the process's command
    line, which every local user can read in ``/proc/<pid>/cmdline``."""
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}
    return "".join('"' + "".join(escapes.get(c, c) for c in arg) + '"\n' for arg in args)


def server_command(
    node: NodeSpec, classpath: str, log4j_config: Path, java: str, extra_jvm_opts: Sequence[str] = ()
) -> list[str]:
    """``kafka-server-start.sh server.properties`` without the scripts."""
    return [
        java,
        *JVM_HEAP_OPTS,
        *JVM_PERFORMANCE_OPTS,
        *extra_jvm_opts,
        *_log_opts(node, log4j_config),
        "-cp",
        classpath,
        "kafka.Kafka",
        str(node.properties_path),
    ]
