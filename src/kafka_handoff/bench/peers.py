"""The consumers under test, one per child process: ``python -m kafka_handoff.bench.peers CLIENT ...``.

Each runner reads every record of a topic from the beginning (all partitions assigned, no group, no
commits), touches every record the way an application would (counts it and adds up its value's length;
the batch API adds up a column) and prints one JSON line::

    {"client": ..., "records": N, "value_bytes": B, "startup_s": ..., "consume_s": ..., "cpu_s": ...}

``startup_s`` runs from creating the consumer to the first record, ``consume_s`` from the first record to
the last, and ``cpu_s`` is the CPU time the whole process (every thread, librdkafka's included) used in that
window.  The parent (:mod:`kafka_handoff.bench.throughput`) runs each client in a fresh process and takes
its peak RSS and total CPU from ``wait4()``.

With ``HANDOFF_BENCH_CLIENT_CONFIG`` naming a JSON file of client settings in librdkafka's names (the
secured dev broker's ``client-<mode>.json``: ``handoff bench throughput --security MODE``), the
kafka-handoff and confluent-kafka runners add those settings (its ``bootstrap.servers`` wins); the other
runners refuse to run.

The Java consumer is Apache Kafka's own ``ConsumerPerformance`` tool (``kafka-tools``), run by
:func:`java_command`; :func:`ensure_tools_jar` resolves that one jar with Maven into the dev broker's jar
cache (the broker's runtime jars supply its dependencies).  The Java member of ``handoff bench rebalance``
(``bench/java/SlowLoopMember.java``) is compiled with ``javac`` against the broker's cached jars by
:func:`slow_loop_member_classes` and started by :func:`slow_loop_member_command`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka_handoff.bench.runs import peak_rss_mb

__all__ = [
    "CLIENTS",
    "CLIENT_CONFIG_ENV",
    "ClientSpec",
    "JavaResult",
    "client_settings",
    "ensure_tools_jar",
    "java_command",
    "main",
    "parse_java_output",
    "slow_loop_member_classes",
    "slow_loop_member_command",
]

#: Records per poll/consume call for every Python client (Java's and kafka-handoff's max.poll.records).
BATCH = 500
#: Environment variable naming a JSON file of extra client settings (security), see the module doc.
CLIENT_CONFIG_ENV = "HANDOFF_BENCH_CLIENT_CONFIG"
#: The runners that take the settings of ``CLIENT_CONFIG_ENV``.
SECURITY_RUNNERS = frozenset(
    {
        "handoff",
        "handoff_batch",
        "handoff_aio",
        "confluent",
        "confluent_tuned",
        "confluent_aio",
        "handoff_compat",
        "confluent_poll",
        "handoff_compat_poll",
    }
)


SERIALIZER_ENV = "HANDOFF_BENCH_SERIALIZER"
"""``handoff bench throughput|produce --serializer``: the kafka-handoff children's (de)serializer."""


def _identity(value: Any) -> Any:
    return value


def _identity_ctx(value: Any, ctx: Any) -> Any:
    return value


def bench_serializer() -> Callable[..., Any] | None:
    """The (de)serializer ``--serializer`` chose (``HANDOFF_BENCH_SERIALIZER``): None, a one-argument
    identity or a ``(value, ctx)`` identity -- the cost of the hook itself."""
    name = os.environ.get(SERIALIZER_ENV, "none")
    return {"none": None, "identity": _identity, "identity-ctx": _identity_ctx}[name]


def client_settings() -> dict[str, Any]:
    """The extra client settings named by ``HANDOFF_BENCH_CLIENT_CONFIG`` (empty when unset)."""
    path = os.environ.get(CLIENT_CONFIG_ENV)
    if not path:
        return {}
    settings: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    return settings


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class _Meter:
    """Times a consume loop: call :meth:`first` when the first records arrive, :meth:`done` at the end."""

    records: int
    t0: float = 0.0
    t_first: float = 0.0
    cpu_first: float = 0.0
    t_end: float = 0.0
    cpu_end: float = 0.0
    count: int = 0
    value_bytes: int = 0

    def start(self) -> None:
        self.t0 = time.perf_counter()

    def first(self) -> None:
        if not self.t_first:
            self.t_first = time.perf_counter()
            self.cpu_first = _cpu()

    def done(self) -> None:
        self.t_end = time.perf_counter()
        self.cpu_end = _cpu()

    def result(self, client: str) -> dict[str, Any]:
        return {
            "client": client,
            "records": self.count,
            "value_bytes": self.value_bytes,
            "startup_s": self.t_first - self.t0,
            "consume_s": self.t_end - self.t_first,
            "cpu_s": self.cpu_end - self.cpu_first,
        }


def _deadline(records: int) -> float:
    return time.monotonic() + 60.0 + records / 5_000.0


def consume_loop(
    m: _Meter,
    deadline: float,
    poll: Callable[[], Any],
    visit: Callable[[Any], tuple[int, int]],
    close: Callable[[], object],
    finish: Callable[[], object] | None = None,
) -> _Meter:
    """The measured loop of every runner: ``poll()`` until the meter's records came or ``deadline``
    (monotonic) passed; ``visit(batch)`` touches each record of a non-empty batch and returns its records
    and value bytes.  Then ``finish()`` (e.g. a final acknowledgement) before the meter stops, and
    ``close()`` the consumer in any case."""
    records = m.records
    count = nbytes = 0
    try:
        while count < records and time.monotonic() < deadline:
            batch = poll()
            if not batch:
                continue
            m.first()
            n, b = visit(batch)
            count += n
            nbytes += b
        if finish is not None:
            finish()
        m.done()
    finally:
        close()
    m.count, m.value_bytes = count, nbytes
    return m


async def consume_loop_async(
    m: _Meter,
    records: int,
    deadline: float,
    poll: Callable[[], Awaitable[Any]],
    visit: Callable[[Any], tuple[int, int]],
) -> None:
    """:func:`consume_loop` for the asyncio clients (``poll()`` is awaited)."""
    count = nbytes = 0
    while count < records and time.monotonic() < deadline:
        batch = await poll()
        if not batch:
            continue
        m.first()
        n, b = visit(batch)
        count += n
        nbytes += b
    m.count, m.value_bytes = count, nbytes


def visit_records(batch: Any) -> tuple[int, int]:
    """Records with ``.value`` (kafka-handoff's, aiokafka's and kafka-python's): counted, values summed."""
    count = nbytes = 0
    for record in batch:
        count += 1
        nbytes += len(record.value)
    return count, nbytes


def visit_confluent(msgs: Any) -> tuple[int, int]:
    """confluent-kafka messages: an error message fails the run."""
    count = nbytes = 0
    for msg in msgs:
        if msg.error() is not None:
            raise RuntimeError(f"confluent-kafka: {msg.error()}")
        count += 1
        nbytes += len(msg.value() or b"")
    return count, nbytes


def _visit_per_partition(polled: Any) -> tuple[int, int]:
    """kafka-python's and aiokafka's ``{partition: [records]}``."""
    count = nbytes = 0
    for batch in polled.values():
        n, b = visit_records(batch)
        count += n
        nbytes += b
    return count, nbytes


def _visit_columns(result: Any) -> tuple[int, int]:
    """kafka-handoff's ``poll_columns()``: a column chunk per partition, its value bytes summed."""
    got = nbytes = 0
    for chunk in result:
        got += len(chunk)
        nbytes += chunk.value_bytes()
    return got, nbytes


# ============================================================================================ kafka-handoff
def _handoff_consumer(bootstrap: str, topic: str, partitions: int) -> Any:
    from kafka_handoff.consumer import Consumer
    from kafka_handoff.types import TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "max.poll.records": BATCH,
            "value.deserializer": bench_serializer(),
            **client_settings(),
        }
    )
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    return consumer


def run_handoff(bootstrap: str, topic: str, partitions: int, records: int) -> _Meter:
    """kafka-handoff's record API: ``poll()``, every record visited."""
    return _run_handoff(bootstrap, topic, partitions, records, lambda c: c.poll(1.0), visit_records)


def run_handoff_batch(bootstrap: str, topic: str, partitions: int, records: int) -> _Meter:
    """kafka-handoff's batch API: ``poll_columns()``, a column added up per partition."""
    return _run_handoff(bootstrap, topic, partitions, records, lambda c: c.poll_columns(1.0), _visit_columns)


def _run_handoff(
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    poll: Callable[[Any], Any],
    visit: Callable[[Any], tuple[int, int]],
) -> _Meter:
    import kafka_handoff.consumer  # noqa: F401  (imported before the clock starts, as for the peers)

    m = _Meter(records)
    m.start()
    consumer = _handoff_consumer(bootstrap, topic, partitions)
    return consume_loop(m, _deadline(records), lambda: poll(consumer), visit, consumer.close)


def run_handoff_aio(bootstrap: str, topic: str, partitions: int, records: int) -> _Meter:
    """kafka-handoff's asyncio record API: ``await AsyncConsumer.poll()`` batches, every record visited (as
    aiokafka's ``getmany`` and confluent-kafka's ``AIOConsumer.consume`` below)."""
    import kafka_handoff.aio  # noqa: F401

    m = _Meter(records)

    async def consume() -> None:
        from kafka_handoff.aio import AsyncConsumer
        from kafka_handoff.types import TopicPartition

        m.start()
        consumer = AsyncConsumer(
            {
                "bootstrap.servers": bootstrap,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "max.poll.records": BATCH,
                **client_settings(),
            }
        )
        try:
            await consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
            consumer.seek_to_beginning()
            await consume_loop_async(
                m, records, _deadline(records), lambda: consumer.poll(1.0), visit_records
            )
            m.done()
        finally:
            await consumer.close()

    _run_loop(consume())
    return m


def _run_loop(coro: Any) -> None:
    """``asyncio.run``, on uvloop when ``HANDOFF_BENCH_UVLOOP=1`` (and it is installed)."""
    if os.environ.get("HANDOFF_BENCH_UVLOOP") == "1":
        import uvloop

        uvloop.run(coro)
    else:
        asyncio.run(coro)


# ============================================================================================ peers
def run_confluent_aio(bootstrap: str, topic: str, partitions: int, records: int) -> _Meter:
    """confluent-kafka's asyncio consumer (``confluent_kafka.aio.AIOConsumer``: blocking calls on a thread
    pool), with its recommended batch call ``consume()``."""
    import confluent_kafka
    from confluent_kafka.aio import AIOConsumer

    m = _Meter(records)

    async def consume() -> None:
        m.start()
        consumer = AIOConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-confluent-aio-{os.getpid()}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                **client_settings(),
            }
        )
        try:
            await consumer.assign(
                [
                    confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                    for p in range(partitions)
                ]
            )
            await consume_loop_async(
                m,
                records,
                _deadline(records),
                lambda: consumer.consume(num_messages=BATCH, timeout=1.0),
                visit_confluent,
            )
            m.done()
        finally:
            await consumer.close()

    _run_loop(consume())
    return m


def run_confluent(
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    extra: dict[str, Any] | None = None,
    compat: bool = False,
    single: bool = False,
) -> _Meter:
    """confluent-kafka's ``consume()`` loop (``single``: the ``poll()`` loop, one message per call); with
    ``compat`` the very same program on kafka-handoff's confluent-kafka compatibility layer
    (``kafka_handoff.compat.confluent_kafka``: one import changed)."""
    if compat:
        from kafka_handoff.compat import confluent_kafka
    else:
        import confluent_kafka  # type: ignore[no-redef]

    m = _Meter(records)
    m.start()
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-confluent-{os.getpid()}",  # required by the client; assign() joins nothing
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **(extra or {}),
            **client_settings(),
        }
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(partitions)
        ]
    )

    def poll_one() -> list[Any] | None:
        msg = consumer.poll(1.0)
        return None if msg is None else [msg]

    return consume_loop(
        m,
        _deadline(records),
        poll_one if single else lambda: consumer.consume(num_messages=BATCH, timeout=1.0),
        visit_confluent,
        consumer.close,
    )


def run_kafka_python(bootstrap: str, topic: str, partitions: int, records: int) -> _Meter:
    import kafka

    m = _Meter(records)
    m.start()
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest", group_id=None
    )
    consumer.assign([kafka.TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    return consume_loop(
        m,
        _deadline(records),
        lambda: consumer.poll(timeout_ms=1000, max_records=BATCH),
        _visit_per_partition,
        consumer.close,
    )


def run_aiokafka(bootstrap: str, topic: str, partitions: int, records: int) -> _Meter:
    import aiokafka
    from aiokafka.structs import TopicPartition as AioTopicPartition

    m = _Meter(records)

    async def consume() -> None:
        m.start()
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition(topic, p) for p in range(partitions)])
            await consumer.seek_to_beginning()
            await consume_loop_async(
                m,
                records,
                _deadline(records),
                lambda: consumer.getmany(timeout_ms=1000, max_records=BATCH),
                _visit_per_partition,
            )
            m.done()
        finally:
            await consumer.stop()

    _run_loop(consume())
    return m


@dataclass(frozen=True)
class ClientSpec:
    """One consumer under test: ``runner`` (None for Java) and the environment its process gets."""

    name: str
    label: str
    runner: str | None
    env: tuple[tuple[str, str], ...] = ()


#: Every client, in the order of the report.  Keys are the ``--clients`` names.
CLIENTS: dict[str, ClientSpec] = {
    spec.name: spec
    for spec in (
        ClientSpec("handoff", "kafka-handoff (C decode)", "handoff", (("KAFKA_HANDOFF_PURE_PYTHON", "0"),)),
        ClientSpec(
            "handoff-py", "kafka-handoff (pure Python)", "handoff", (("KAFKA_HANDOFF_PURE_PYTHON", "1"),)
        ),
        ClientSpec(
            "handoff-batch", "kafka-handoff batch", "handoff_batch", (("KAFKA_HANDOFF_PURE_PYTHON", "0"),)
        ),
        ClientSpec("confluent", "confluent-kafka consume()", "confluent"),
        ClientSpec(
            "confluent-tuned", "confluent-kafka consume() (fetch.queue.backoff.ms=0)", "confluent_tuned"
        ),
        ClientSpec(
            "handoff-compat",
            "kafka-handoff confluent-kafka layer consume()",
            "handoff_compat",
            (("KAFKA_HANDOFF_PURE_PYTHON", "0"),),
        ),
        ClientSpec("confluent-poll", "confluent-kafka poll()", "confluent_poll"),
        ClientSpec(
            "handoff-compat-poll",
            "kafka-handoff confluent-kafka layer poll()",
            "handoff_compat_poll",
            (("KAFKA_HANDOFF_PURE_PYTHON", "0"),),
        ),
        ClientSpec("kafka-python", "kafka-python 3", "kafka_python"),
        ClientSpec(
            "handoff-aio", "kafka-handoff asyncio", "handoff_aio", (("KAFKA_HANDOFF_PURE_PYTHON", "0"),)
        ),
        ClientSpec("aiokafka", "aiokafka", "aiokafka"),
        ClientSpec("confluent-aio", "confluent-kafka AIOConsumer consume()", "confluent_aio"),
        ClientSpec("java", "Java ConsumerPerformance", None),
    )
}

_RUNNERS: dict[str, Callable[[str, str, int, int], _Meter]] = {
    "handoff": run_handoff,
    "handoff_batch": run_handoff_batch,
    "confluent": run_confluent,
    # librdkafka postpones a partition's next fetch by fetch.queue.backoff.ms (default 1000) once its local
    # queue is over queued.min.messages; reading a backlog, that leaves it idle much of the time.
    "confluent_tuned": lambda b, t, p, r: run_confluent(b, t, p, r, {"fetch.queue.backoff.ms": 0}),
    "handoff_compat": lambda b, t, p, r: run_confluent(b, t, p, r, compat=True),
    "confluent_poll": lambda b, t, p, r: run_confluent(b, t, p, r, single=True),
    "handoff_compat_poll": lambda b, t, p, r: run_confluent(b, t, p, r, compat=True, single=True),
    "kafka_python": run_kafka_python,
    "aiokafka": run_aiokafka,
    "handoff_aio": run_handoff_aio,
    "confluent_aio": run_confluent_aio,
}


def client_version(name: str) -> str:
    """The installed version of a client (for the report)."""
    from importlib import metadata

    dist = {
        "handoff": "kafka-handoff",
        "handoff-py": "kafka-handoff",
        "handoff-batch": "kafka-handoff",
        "confluent": "confluent-kafka",
        "confluent-tuned": "confluent-kafka",
        "handoff-compat": "kafka-handoff",
        "confluent-poll": "confluent-kafka",
        "handoff-compat-poll": "kafka-handoff",
        "kafka-python": "kafka-python",
        "aiokafka": "aiokafka",
        "handoff-aio": "kafka-handoff",
        "confluent-aio": "confluent-kafka",
    }.get(name)
    if dist is None:
        from kafka_handoff.devbroker import KAFKA_VERSION

        return KAFKA_VERSION
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


# ============================================================================================ Java
def ensure_tools_jar() -> Path:
    """``kafka-tools-<version>.jar`` (which holds ``ConsumerPerformance``), resolved once with Maven into
    ``<cache>/kafka-<version>/tools/``; its dependencies are the broker's runtime jars."""
    from kafka_handoff.devbroker import KAFKA_VERSION, JarResolutionError, cache_root

    tools = cache_root() / f"kafka-{KAFKA_VERSION}" / "tools"
    jar = tools / f"kafka-tools-{KAFKA_VERSION}.jar"
    if jar.is_file():
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarResolutionError("Maven ('mvn') is needed once to fetch kafka-tools for the Java consumer")
    staging = tools.with_name(f"tools.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [
        mvn,
        "-B",
        "-q",
        "dependency:copy",
        f"-Dartifact=org.apache.kafka:kafka-tools:{KAFKA_VERSION}",
        f"-DoutputDirectory={staging}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0 or not (staging / jar.name).is_file():
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise JarResolutionError(
            f"Maven could not fetch kafka-tools {KAFKA_VERSION} (exit {proc.returncode}):\n{tail}"
        )
    tools.parent.mkdir(parents=True, exist_ok=True)
    if not jar.is_file():
        shutil.rmtree(tools, ignore_errors=True)
        staging.rename(tools)
    shutil.rmtree(staging, ignore_errors=True)
    return jar


#: JVM flags of Kafka's ``kafka-consumer-perf-test.sh`` / ``kafka-run-class.sh`` defaults.
JVM_FLAGS = (
    "-Xmx512M",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)


def java_command(bootstrap: str, topic: str, records: int, group: str) -> list[str]:
    """The command line that consumes ``records`` records of ``topic`` with ``ConsumerPerformance``."""
    from kafka_handoff.devbroker import ensure_jars

    libs = ensure_jars().libs
    jar = ensure_tools_jar()
    java = shutil.which("java") or os.path.join(os.environ.get("JAVA_HOME", ""), "bin", "java")
    return [
        java,
        *JVM_FLAGS,
        "-cp",
        f"{jar}:{libs}/*",
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--group",
        group,
        "--timeout",
        "30000",
        "--command-property",
        f"max.poll.records={BATCH}",
    ]


@dataclass(frozen=True)
class JavaResult:
    records: int
    mb: float
    rebalance_ms: float
    fetch_ms: float


def parse_java_output(text: str) -> JavaResult:
    """Parse ``ConsumerPerformance``'s CSV report (header line + one data line)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        if line.startswith("start.time"):
            header = [h.strip() for h in line.split(",")]
            if i + 1 >= len(lines):
                break
            values = [v.strip() for v in lines[i + 1].split(",")]
            row = dict(zip(header, values, strict=False))
            return JavaResult(
                records=int(row["data.consumed.in.nMsg"]),
                mb=float(row["data.consumed.in.MB"]),
                rebalance_ms=float(row["rebalance.time.ms"]),
                fetch_ms=float(row["fetch.time.ms"]),
            )
    raise ValueError(f"no ConsumerPerformance report in the output:\n{text[-2000:]}")


SLOW_LOOP_MEMBER_SOURCE = Path(__file__).with_name("java") / "SlowLoopMember.java"


def slow_loop_member_classes() -> Path:
    """The directory of ``SlowLoopMember``'s compiled classes: ``javac`` against the dev broker's cached jars
    (``kafka-clients`` and its dependencies), once per source version, into
    ``<cache>/kafka-<version>/java-members/<source sha256>/``."""
    import hashlib

    from kafka_handoff.devbroker import KAFKA_VERSION, JarResolutionError, cache_root, ensure_jars

    source = SLOW_LOOP_MEMBER_SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    classes = cache_root() / f"kafka-{KAFKA_VERSION}" / "java-members" / digest
    if (classes / "SlowLoopMember.class").is_file():
        return classes
    libs = ensure_jars().libs
    javac = shutil.which("javac") or os.path.join(os.environ.get("JAVA_HOME", ""), "bin", "javac")
    if not os.path.isfile(javac):
        raise JarResolutionError("a JDK ('javac') is needed to compile the rebalance bench's Java member")
    staging = classes.with_name(f"{digest}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    cmd = [javac, "-nowarn", "-cp", f"{libs}/*", "-d", str(staging), str(SLOW_LOOP_MEMBER_SOURCE)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0 or not (staging / "SlowLoopMember.class").is_file():
        shutil.rmtree(staging, ignore_errors=True)
        raise JarResolutionError(
            f"javac could not compile {SLOW_LOOP_MEMBER_SOURCE.name} (exit {proc.returncode}):\n"
            + (proc.stdout + proc.stderr)[-2000:]
        )
    if not (classes / "SlowLoopMember.class").is_file():
        shutil.rmtree(classes, ignore_errors=True)
        staging.rename(classes)
    shutil.rmtree(staging, ignore_errors=True)
    return classes


def slow_loop_member_command(options: dict[str, str]) -> list[str]:
    """The command line of one Java member of ``handoff bench rebalance``; ``options`` are its
    ``--name value`` pairs (see ``SlowLoopMember.main``)."""
    from kafka_handoff.devbroker import ensure_jars

    classes = slow_loop_member_classes()
    libs = ensure_jars().libs
    java = shutil.which("java") or os.path.join(os.environ.get("JAVA_HOME", ""), "bin", "java")
    pairs = [item for key, value in options.items() for item in (f"--{key}", value)]
    return [java, *JVM_FLAGS, "-cp", f"{classes}:{libs}/*", "SlowLoopMember", *pairs]


# ============================================================================================ CLI
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_handoff.bench.peers", description=__doc__)
    parser.add_argument("runner", choices=sorted(_RUNNERS))
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--client-name", default=None, help="the name in the JSON line (default: runner)")
    parser.add_argument(
        "--profile", default=None, metavar="FILE", help="pyinstrument profile to FILE (.html/.txt)"
    )
    args = parser.parse_args(argv)
    if os.environ.get(CLIENT_CONFIG_ENV) and args.runner not in SECURITY_RUNNERS:
        print(f"{args.runner}: security settings ({CLIENT_CONFIG_ENV}) are not supported", file=sys.stderr)
        return 2
    runner = _RUNNERS[args.runner]
    profiler: Any = None
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.001, async_mode="disabled")
        profiler.start()
    meter = runner(args.bootstrap_servers, args.topic, args.partitions, args.records)
    if profiler is not None:
        profiler.stop()
        out = Path(args.profile)
        if out.suffix == ".html":
            out.write_text(profiler.output_html(), encoding="utf-8")
        else:
            out.write_text(profiler.output_text(unicode=True, show_all=False), encoding="utf-8")
    result = meter.result(args.client_name or args.runner)
    result["peak_rss_mb"] = peak_rss_mb()
    if args.runner.startswith("handoff"):
        from kafka_handoff.protocol import records as records_mod

        result["implementation"] = records_mod.IMPLEMENTATION
    print(json.dumps(result), flush=True)
    return 0 if meter.count >= args.records else 1


if __name__ == "__main__":
    sys.exit(main())
