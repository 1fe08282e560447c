"""Starting, probing and stopping real Apache Kafka (KRaft) brokers for tests and demos.

``start(nodes=1|3, data_dir=...)`` formats storage (static quorum, cluster id generated here), launches
every node at once on 127.0.0.1 with free ports, and returns once each node answers an ApiVersions
request and a Metadata response from each node lists every node id.  The pids and ports are written to
``<data_dir>/state.json`` so that ``stop(data_dir)`` and ``status(data_dir)`` work from any process.

Two ownership modes:

* ``supervised=True`` (tests, ``handoff demo``): each JVM runs under a tiny supervisor process
  (``_supervisor.py``) that kills it when this Python process goes away, even by SIGKILL (and then
  deletes a temporary data dir); an ``atexit`` hook stops what is still running at a normal exit.
  We chose a supervisor over ``prctl(PR_SET_PDEATHSIG)`` in the owner's ``preexec_fn`` because
  PDEATHSIG fires when the *thread* that forked exits (a broker started from a helper thread would die
  with that thread) and cannot run a graceful SIGTERM-then-SIGKILL; the supervisor itself does use
  PDEATHSIG on its JVM, where it is single-threaded and safe.
* ``supervised=False`` (``handoff broker start``): the JVM is detached into its own session and outlives
  the starting process; ``handoff broker stop`` ends it.

Broker JVMs map a class-data-sharing archive (:mod:`.cds`) to cut start-up CPU.  Stopping sends
SIGTERM to every JVM at once and SIGKILL to whatever is still alive after a bound
(default 10 s).  Before signalling a pid from ``state.json`` its command line is checked (it must be
``kafka.Kafka`` with this node's properties file), so a reused pid is never signalled.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

from kafka_handoff.devbroker import _posix, cds
from kafka_handoff.devbroker import registry as _registry
from kafka_handoff.devbroker import security as _security
from kafka_handoff.devbroker._procs import pid_alive, process_args
from kafka_handoff.devbroker.config import (
    ALLOWED_NODE_COUNTS,
    NodeSpec,
    format_command,
    generate_cluster_id,
    java_argfile,
    java_executable,
    render_properties,
    server_command,
)
from kafka_handoff.devbroker.jars import KAFKA_VERSION, ResolvedJars, ensure_jars
from kafka_handoff.devbroker.probe import ProbeConnection, create_topic, fetch_metadata
from kafka_handoff.errors import ConfigError, KafkaError, KafkaTimeoutError
from kafka_handoff.protocol.wire import ProtocolError
from kafka_handoff.types import ClusterMetadata

__all__ = [
    "DEFAULT_STOP_TIMEOUT_S",
    "BrokerAlreadyRunningError",
    "BrokerStartError",
    "Cluster",
    "ClusterStatus",
    "Node",
    "NodeStatus",
    "attach",
    "start",
    "status",
    "stop",
]

log = logging.getLogger("kafka_handoff.devbroker")

DEFAULT_STOP_TIMEOUT_S = 10.0
DEFAULT_START_TIMEOUT_S = 120.0
#: A file path: while it is set, :func:`start` holds an exclusive lock on that file until its brokers serve
#: clients, so that the processes sharing the path (the pytest-xdist
#: workers of one test run, tests/conftest.py) start one cluster at a time: JVMs starting together on a
#: small machine starve each other past the start timeout.  The start timeout counts from the lock.
START_LOCK_ENV = "HANDOFF_DEVBROKER_START_LOCK"
STATE_FILE = "state.json"
#: Where a registry started with the broker (``start(schema_registry=True)``) keeps its state and log.
REGISTRY_DIR = "schema-registry"
_MARKER_FILE = ".kafka-handoff-devbroker"
_STATE_FORMAT = 1
_BIND_RETRIES = 3
_SUPERVISOR = Path(__file__).with_name("_supervisor.py")
_LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")


class BrokerStartError(KafkaError):
    """The broker could not be started (format failed, JVM died, not ready in time)."""


class BrokerAlreadyRunningError(BrokerStartError):
    """``start`` was asked to use a data dir whose broker is still running."""

    def __init__(self, message: str, bootstrap_servers: str) -> None:
        super().__init__(message)
        self.bootstrap_servers = bootstrap_servers


@dataclass(slots=True)
class Node:
    """One running (or stopped) node of a :class:`Cluster`."""

    node_id: int
    host: str
    port: int
    controller_port: int
    node_dir: Path
    pid: int | None = None
    supervisor_pid: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def properties_path(self) -> Path:
        return self.node_dir / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.node_dir / "logs" / "server.log"

    @property
    def stdout_path(self) -> Path:
        return self.node_dir / "logs" / "stdout.log"

    def spec(self) -> NodeSpec:
        return NodeSpec(self.node_id, self.port, self.controller_port, self.node_dir, self.host)


@dataclass(frozen=True, slots=True)
class NodeStatus:
    node_id: int
    bootstrap: str
    pid: int | None
    alive: bool
    paused: bool = False  # SIGSTOPped (Cluster.pause_node)


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    data_dir: Path
    bootstrap_servers: str
    kafka_version: str
    cluster_id: str
    supervised: bool
    nodes: tuple[NodeStatus, ...]

    @property
    def running(self) -> bool:
        return any(n.alive for n in self.nodes)

    @property
    def all_running(self) -> bool:
        return all(n.alive for n in self.nodes)


# --------------------------------------------------------------------------------------------------
# Process helpers (Linux /proc; plain kill(0) elsewhere)


_pid_alive = pid_alive


def _is_node_jvm(pid: int, properties_path: Path) -> bool:
    """True when ``pid`` is alive and is the Kafka JVM of the node with ``properties_path``."""
    args = process_args(pid)
    if args is None:
        return True  # no /proc: trust the pid
    return b"kafka.Kafka" in args and str(properties_path).encode() in args


def _pid_stopped(pid: int) -> bool:
    """True when ``pid`` is in the stopped state (SIGSTOP); False when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"T"


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------------------------------
# Ports

_ports_lock = threading.Lock()
_handed_out: set[int] = set()


def _free_ports(count: int) -> list[int]:
    """Ports the kernel picked as free on 127.0.0.1; never the same port twice in this process."""
    with _ports_lock:
        socks: list[socket.socket] = []
        ports: list[int] = []
        try:
            while len(ports) < count:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
                if port not in _handed_out:
                    ports.append(port)
        finally:
            for s in socks:
                s.close()
        _handed_out.update(ports)
        return ports


# --------------------------------------------------------------------------------------------------
# The cluster handle

_live_lock = threading.Lock()
_live: set[Cluster] = set()


@atexit.register
def _stop_owned_clusters() -> None:
    with _live_lock:
        clusters = list(_live)
    for cluster in clusters:
        with contextlib.suppress(Exception):
            cluster.stop()


class Cluster:
    """A running dev broker (1 node) or cluster (3 nodes).  Use :func:`start` to get one."""

    def __init__(
        self,
        data_dir: Path,
        cluster_id: str,
        nodes: list[Node],
        *,
        supervised: bool,
        ephemeral: bool,
        overrides: Mapping[str, str] | None = None,
        started_at: float | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.cluster_id = cluster_id
        self.nodes = nodes
        self.supervised = supervised
        self.ephemeral = ephemeral
        self.overrides = dict(overrides or {})
        self.started_at = started_at if started_at is not None else time.time()
        #: Seconds from launching the JVMs until ready (set by :func:`start`).
        self.start_seconds: float = 0.0
        #: Extra JVM options of the broker processes (CDS archive, ...), reused by :meth:`restart_node`.
        self.jvm_opts: list[str] = []
        self._procs: dict[int, subprocess.Popen[bytes]] = {}  # node id -> supervisor or detached JVM
        self._lock = threading.RLock()
        self._stopped = False
        #: The pid of the process that started the cluster (from ``state.json`` for an attached handle).
        self.owner_pid: int = os.getpid()
        #: The secured listeners, users and client settings (``start(security=...)``); None: plaintext only.
        self.security: _security.DevSecurity | None = None
        #: The Schema Registry started beside the broker (``start(schema_registry=True)``); None: none.
        self.schema_registry: _registry.SchemaRegistry | None = None

    # -- plain facts ---------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def node_ids(self) -> list[int]:
        return [n.node_id for n in self.nodes]

    @property
    def kafka_version(self) -> str:
        return KAFKA_VERSION

    def node(self, node_id: int) -> Node:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id} in cluster (nodes: {self.node_ids})")

    def pids(self) -> list[int]:
        """The JVM pids (and supervisor pids) this cluster started, alive or not."""
        out: list[int] = []
        for n in self.nodes:
            out += [p for p in (n.pid, n.supervisor_pid) if p is not None]
        return out

    def is_alive(self, node_id: int) -> bool:
        n = self.node(node_id)
        return n.pid is not None and _is_node_jvm(n.pid, n.properties_path)

    def metadata(self, topics: Iterable[str] | None = None, timeout: float = 5.0) -> ClusterMetadata:
        return fetch_metadata(self.bootstrap_servers, topics, timeout)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication: int | None = None,
        configs: Mapping[str, str] | None = None,
        *,
        exist_ok: bool = False,
    ) -> ClusterMetadata:
        """Create a topic (CreateTopics through the probe client) and wait for its leaders."""
        rf = len(self.nodes) if replication is None else replication
        return create_topic(self.bootstrap_servers, name, partitions, rf, configs, exist_ok=exist_ok)

    def __repr__(self) -> str:
        return f"Cluster({self.bootstrap_servers!r}, data_dir={str(self.data_dir)!r})"

    def __enter__(self) -> Cluster:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- launching -----------------------------------------------------------------------------

    def _launch(self, node: Node, classpath: str, java: str) -> None:
        node.stdout_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = server_command(node.spec(), classpath, _LOG4J_CONFIG, java, self.jvm_opts)
        previous = self._procs.pop(node.node_id, None)
        if previous is not None:  # an earlier process of this node that died: reap it
            _close_pipes(previous)
            previous.poll()
        if self.supervised:
            sup = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    str(_SUPERVISOR),
                    str(DEFAULT_STOP_TIMEOUT_S),
                    str(node.stdout_path),
                    str(node.node_dir) if self.ephemeral else "-",
                    "--",
                    *cmd,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=node.node_dir,  # a JVM crash file (hs_err_pid*.log) lands next to the node's logs
                start_new_session=True,  # a terminal's Ctrl-C reaches the owner only; it tears down in order
            )
            node.supervisor_pid = sup.pid
            node.pid = _read_child_pid(sup, node)
            self._procs[node.node_id] = sup
        else:
            with open(node.stdout_path, "ab") as out:
                jvm = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=node.node_dir,
                )
            node.pid = jvm.pid
            node.supervisor_pid = None
            self._procs[node.node_id] = jvm

    def _wait_ready(self, node_ids: Iterable[int], deadline: float) -> None:
        """ApiVersions on every node, then Metadata on every node listing all node ids."""
        expected = set(self.node_ids)
        pending = list(node_ids)
        while pending:
            still = []
            for nid in pending:
                self._check_running(nid)
                if not _probe_api_versions(self.node(nid)):
                    still.append(nid)
            pending = still
            if pending:
                self._check_deadline(deadline, f"no ApiVersions answer from node(s) {pending}")
                time.sleep(0.1)
        pending = list(node_ids)
        while pending:
            still = []
            for nid in pending:
                self._check_running(nid)
                listed = _probe_metadata_brokers(self.node(nid))
                if listed is None or not expected <= listed:
                    still.append(nid)
            pending = still
            if pending:
                self._check_deadline(
                    deadline, f"Metadata from node(s) {pending} does not list all of {sorted(expected)}"
                )
                time.sleep(0.1)

    def _check_running(self, node_id: int) -> None:
        node = self.node(node_id)
        proc = self._procs.get(node_id)
        dead = not (node.pid is not None and _pid_alive(node.pid))
        if proc is not None and proc.poll() is not None:
            dead = True
        if dead:
            raise _NodeDiedError(node, _tail(node.stdout_path, 20) + "\n" + _tail(node.log_path, 40))

    def _check_deadline(self, deadline: float, what: str) -> None:
        if time.monotonic() >= deadline:
            logs = "\n".join(
                f"--- node {n.node_id} ({n.log_path}):\n{_tail(n.log_path, 15)}" for n in self.nodes
            )
            raise BrokerStartError(f"broker not ready in time: {what}\n{logs}")

    # -- stopping ------------------------------------------------------------------------------

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        """SIGTERM every JVM, SIGKILL after ``timeout`` seconds; wait until all are gone."""
        with self._lock:
            if self._stopped:
                return
            if self.schema_registry is not None or (self.data_dir / REGISTRY_DIR).is_dir():
                _registry.stop_registry(self.data_dir / REGISTRY_DIR)
            self._terminate(self.nodes, timeout)
            if self.security is not None or (self.data_dir / "security").is_dir():
                _security.stop_services(self.data_dir)
            self._stopped = True
            with _live_lock:
                _live.discard(self)
            if self.ephemeral:
                shutil.rmtree(self.data_dir, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    (self.data_dir / STATE_FILE).unlink()

    def _terminate(self, nodes: Iterable[Node], timeout: float, sig: int = signal.SIGTERM) -> None:
        nodes = list(nodes)
        targets = [n for n in nodes if n.pid is not None and _is_node_jvm(n.pid, n.properties_path)]
        for n in targets:
            assert n.pid is not None
            _signal(n.pid, sig)
            _signal(n.pid, signal.SIGCONT)  # a paused (SIGSTOPped) JVM must see the signal
        if not self._wait_gone(targets, timeout):
            for n in targets:
                if n.pid is not None and _pid_alive(n.pid):
                    log.warning(
                        "node %d (pid %d) ignored SIGTERM for %.0fs; SIGKILL", n.node_id, n.pid, timeout
                    )
                    _signal(n.pid, signal.SIGKILL)
            if not self._wait_gone(targets, 10.0):
                raise KafkaTimeoutError(f"Kafka JVMs {[n.pid for n in targets]} still alive after SIGKILL")
        # Supervisors exit once their JVM is gone; reap them (and detached JVMs we started).
        for n in nodes:
            proc = self._procs.pop(n.node_id, None)
            if proc is not None:
                try:
                    proc.wait(5.0)  # before closing its stdin: EOF there means "owner gone, clean up"
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                _close_pipes(proc)
            elif n.supervisor_pid is not None and _pid_alive(n.supervisor_pid):
                _wait_pid_gone(n.supervisor_pid, 5.0)

    def _wait_gone(self, nodes: list[Node], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            for n in nodes:
                proc = self._procs.get(n.node_id)
                if proc is not None:
                    proc.poll()  # reap a detached JVM we are the parent of
            if not any(n.pid is not None and _pid_alive(n.pid) for n in nodes):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    # -- fault injection on single nodes -------------------------------------------------------

    def stop_node(self, node_id: int, *, kill: bool = False, timeout: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        """Stop one node: SIGTERM (then SIGKILL after ``timeout``), or SIGKILL right away (``kill=True``)."""
        with self._lock:
            node = self.node(node_id)
            self._terminate([node], timeout, signal.SIGKILL if kill else signal.SIGTERM)
            node.pid = None
            node.supervisor_pid = None
            self._write_state()

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node (``kill -9``: no shutdown hook, connections reset, leaders move after the
        controller fences it)."""
        self.stop_node(node_id, kill=True)

    def is_paused(self, node_id: int) -> bool:
        """True when the node's JVM is stopped by SIGSTOP (:meth:`pause_node`)."""
        n = self.node(node_id)
        return n.pid is not None and _is_node_jvm(n.pid, n.properties_path) and _pid_stopped(n.pid)

    def restart_node(self, node_id: int, timeout: float = DEFAULT_START_TIMEOUT_S) -> None:
        """Start a stopped node again with its storage and ports; wait until it is back in Metadata.

        On a handle from :func:`attach` in another process than the one that started the cluster, the
        JVM is launched detached (it outlives this process, like the others of a ``handoff broker start``
        cluster).  A *supervised* cluster's nodes die with their owner, so only the owner may restart them.
        """
        with self._lock:
            node = self.node(node_id)
            if self.is_alive(node_id):
                raise BrokerStartError(f"node {node_id} is still running")
            if self.supervised and self.owner_pid != os.getpid():
                raise BrokerStartError(
                    f"node {node_id}: the cluster in {self.data_dir} is supervised by process "
                    f"{self.owner_pid} (its nodes die with it); only that process can restart nodes"
                )
            jars = ensure_jars()
            self._launch(node, jars.classpath, java_executable())
            self._write_state()
        self._wait_ready([node_id], time.monotonic() + timeout)

    def heal(self, timeout: float = DEFAULT_START_TIMEOUT_S) -> None:
        """Resume paused nodes and restart stopped ones; return once every node serves Metadata again."""
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            self.resume_node(node.node_id)
            if not self.is_alive(node.node_id):
                self.restart_node(node.node_id, max(1.0, deadline - time.monotonic()))
        self._wait_ready(self.node_ids, deadline)

    def pause_node(self, node_id: int) -> None:
        """SIGSTOP the node's JVM (a hung broker: connections stay open, nothing is answered)."""
        node = self.node(node_id)
        if node.pid is not None and _is_node_jvm(node.pid, node.properties_path):
            _signal(node.pid, signal.SIGSTOP)

    def resume_node(self, node_id: int) -> None:
        node = self.node(node_id)
        if node.pid is not None and _is_node_jvm(node.pid, node.properties_path):
            _signal(node.pid, signal.SIGCONT)

    # -- state file ----------------------------------------------------------------------------

    def _write_state(self) -> None:
        state = {
            "format": _STATE_FORMAT,
            "kafka_version": KAFKA_VERSION,
            "cluster_id": self.cluster_id,
            "supervised": self.supervised,
            "ephemeral": self.ephemeral,
            "started_at": self.started_at,
            "bootstrap_servers": self.bootstrap_servers,
            "overrides": self.overrides,
            "jvm_opts": self.jvm_opts,
            "owner_pid": self.owner_pid,
            "nodes": [{**asdict(n), "node_dir": str(n.node_dir)} for n in self.nodes],
        }
        path = self.data_dir / STATE_FILE
        tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def _from_state(cls, data_dir: Path) -> Cluster | None:
        try:
            state = json.loads((data_dir / STATE_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise BrokerStartError(f"{data_dir / STATE_FILE}: unreadable broker state: {exc}") from exc
        nodes = [
            Node(
                node_id=int(n["node_id"]),
                host=str(n["host"]),
                port=int(n["port"]),
                controller_port=int(n["controller_port"]),
                node_dir=Path(n["node_dir"]),
                pid=n.get("pid"),
                supervisor_pid=n.get("supervisor_pid"),
            )
            for n in state["nodes"]
        ]
        cluster = cls(
            data_dir,
            str(state["cluster_id"]),
            nodes,
            supervised=bool(state.get("supervised", False)),
            ephemeral=bool(state.get("ephemeral", False)),
            overrides=state.get("overrides") or {},
            started_at=float(state.get("started_at", 0.0)),
        )
        cluster.jvm_opts = [str(o) for o in state.get("jvm_opts") or []]
        cluster.owner_pid = int(state.get("owner_pid") or 0)
        return cluster


class _FormatFailedError(BrokerStartError):
    pass


class _NodeDiedError(BrokerStartError):
    def __init__(self, node: Node, output: str) -> None:
        super().__init__(
            f"Kafka node {node.node_id} (pid {node.pid}) exited during startup:\n{output.strip()}"
        )
        self.node = node
        self.output = output

    @property
    def port_in_use(self) -> bool:
        return "Address already in use" in self.output or "BindException" in self.output


def _read_child_pid(sup: subprocess.Popen[bytes], node: Node) -> int:
    """The JVM pid that the supervisor prints as its first line."""
    assert sup.stdout is not None
    ready, _, _ = select.select([sup.stdout], [], [], 30.0)
    line = sup.stdout.readline() if ready else b""
    try:
        return int(line.strip())
    except ValueError:
        sup.kill()
        sup.wait()
        raise BrokerStartError(
            f"supervisor for node {node.node_id} did not report a JVM pid:\n{_tail(node.stdout_path)}"
        ) from None


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def _wait_pid_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _probe_api_versions(node: Node) -> bool:
    try:
        with ProbeConnection(node.host, node.port, 2.0) as conn:
            conn.api_versions()
        return True
    except (OSError, ProtocolError, KafkaError):
        return False


def _probe_metadata_brokers(node: Node) -> set[int] | None:
    try:
        with ProbeConnection(node.host, node.port, 2.0) as conn:
            return set(conn.metadata([]).brokers)
    except (OSError, ProtocolError, KafkaError):
        return None


# --------------------------------------------------------------------------------------------------
# Module-level API


def _prepare_data_dir(data_dir: Path) -> None:
    """Make ``data_dir`` ours and empty of previous node storage (refuse foreign non-empty dirs)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    marker = data_dir / _MARKER_FILE
    if not marker.exists():
        if any(data_dir.iterdir()):
            raise BrokerStartError(
                f"{data_dir}: not empty and not a kafka-handoff broker dir; pick another --data-dir"
            )
        marker.write_text("kafka-handoff devbroker data dir; safe to delete when no broker runs\n")
    for child in data_dir.iterdir():
        if child.is_dir() and child.name.startswith("node-"):
            shutil.rmtree(child)
    with contextlib.suppress(FileNotFoundError):
        (data_dir / STATE_FILE).unlink()


def write_private(path: Path, text: str) -> None:
    """Write ``path`` readable by its owner only (mode 0600, also when it existed; never through a link)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        if hasattr(os, "fchmod"):
            os.fchmod(f.fileno(), 0o600)
        f.write(text)


def _format_all(
    specs: list[NodeSpec],
    cluster_id: str,
    classpath: str,
    java: str,
    timeout: float,
    jvm_opts: Sequence[str] = (),
    extra_args: Sequence[str] = (),
) -> None:
    """``kafka-storage format`` on every node at once.  ``extra_args`` (SCRAM credentials with their
    passwords) reach the tool through a java argument file (0600, removed right after), never the command
    line other local users can read in ``/proc``."""
    procs = []
    argfiles: list[Path] = []
    try:
        for spec in specs:
            spec.logs_dir.mkdir(parents=True, exist_ok=True)
            cmd = format_command(spec, cluster_id, classpath, _LOG4J_CONFIG, java, jvm_opts, extra_args)
            if extra_args:
                tail = cmd.index("-cp")
                argfile = spec.node_dir / "format.args"
                argfiles.append(argfile)
                write_private(argfile, java_argfile(cmd[tail:]))
                cmd = [*cmd[:tail], f"@{argfile}"]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=spec.node_dir)
            procs.append((spec, proc))
        outputs = []
        for spec, proc in procs:
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            outputs.append((spec, proc, out))
    finally:
        for argfile in argfiles:
            with contextlib.suppress(FileNotFoundError):
                argfile.unlink()
    failures = []
    for spec, proc, out in outputs:
        (spec.logs_dir / "format.log").write_bytes(out)
        if proc.returncode != 0:
            failures.append(
                f"node {spec.node_id}: exit {proc.returncode}\n{out.decode('utf-8', 'replace')[-3000:]}"
            )
    if failures:
        raise _FormatFailedError("formatting Kafka storage failed:\n" + "\n".join(failures))


def _cds_training_run(jvm_opts: list[str]) -> None:
    """The workload the class-data-sharing archive is trained on: a 1-node broker creating a topic."""
    cluster = start(1, jvm_opts=jvm_opts, use_cds=False)
    try:
        cluster.create_topic("cds-training", partitions=2)
    finally:
        cluster.stop(timeout=120.0)  # the JVM writes the archive while it exits


def ensure_cds_archive(jars: ResolvedJars, java: str, *, wait: bool = True) -> Path | None:
    """:func:`.cds.ensure_archive`, trained on a short broker run."""
    return cds.ensure_archive(jars, java, _cds_training_run, wait=wait)


def start(
    nodes: int = 1,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    supervised: bool = True,
    timeout: float = DEFAULT_START_TIMEOUT_S,
    overrides: Mapping[str, str] | None = None,
    jvm_opts: Sequence[str] = (),
    use_cds: bool = True,
    node_overrides: Callable[[NodeSpec], Mapping[str, str]] | None = None,
    security: str | Sequence[str] | None = None,
    connections_max_reauth_ms: int | None = None,
    schema_registry: bool = False,
) -> Cluster:
    """Start a 1- or 3-node KRaft cluster on 127.0.0.1 and wait until it serves clients.

    ``data_dir`` ``None``: a fresh temporary directory, removed again by :meth:`Cluster.stop`.
    ``overrides``: extra or replaced broker settings (dotted Kafka names).
    ``jvm_opts``: extra JVM options for the broker processes.
    ``use_cds``: map the class-data-sharing archive (:mod:`.cds`; trained on first use).
    ``node_overrides``: per-node settings on top of ``overrides``, e.g. an extra listener
    (:func:`kafka_handoff.devbroker.proxy.start_proxied` uses it to advertise proxy ports to clients).
    ``security``: secured listeners beside the plaintext one -- ``"all"``, a mode or several of
    :data:`.security.ALL_MODES` (``ssl``, ``mtls``, ``sasl_plaintext``, ``sasl_ssl``, ...); see
    :mod:`.security`.  The handle's ``security`` then gives each mode's client settings, and
    ``<data_dir>/client.json`` (+ ``client-<mode>.json``) holds them.
    ``connections_max_reauth_ms``: session lifetime on the SASL listeners (KIP-368 re-authentication).
    ``schema_registry``: also start a Confluent-compatible Schema Registry (:mod:`.registry`, supervised or
    detached like the brokers, stopped with them); its URL is ``cluster.schema_registry.url`` and
    ``<data_dir>/client.json`` gets ``schema.registry.url``.
    """
    with _start_slot():
        return _start(
            nodes,
            data_dir,
            supervised=supervised,
            timeout=timeout,
            overrides=overrides,
            jvm_opts=jvm_opts,
            use_cds=use_cds,
            node_overrides=node_overrides,
            security=security,
            connections_max_reauth_ms=connections_max_reauth_ms,
            schema_registry=schema_registry,
        )


_start_lock_path: str | None = None


def set_start_lock(path: str | os.PathLike[str] | None) -> None:
    """Like :data:`START_LOCK_ENV`, for this process only (its subprocesses do not inherit it)."""
    global _start_lock_path
    _start_lock_path = None if path is None else os.fspath(path)


@contextlib.contextmanager
def _start_slot() -> Iterator[None]:
    """Hold the lock :func:`set_start_lock` or :data:`START_LOCK_ENV` names, if any."""
    path = _start_lock_path or os.environ.get(START_LOCK_ENV, "")
    if not path:
        yield
        return
    with open(path, "ab") as file:
        _posix.lock(file)
        try:
            yield
        finally:
            _posix.unlock(file)


def _start(
    nodes: int = 1,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    supervised: bool = True,
    timeout: float = DEFAULT_START_TIMEOUT_S,
    overrides: Mapping[str, str] | None = None,
    jvm_opts: Sequence[str] = (),
    use_cds: bool = True,
    node_overrides: Callable[[NodeSpec], Mapping[str, str]] | None = None,
    security: str | Sequence[str] | None = None,
    connections_max_reauth_ms: int | None = None,
    schema_registry: bool = False,
) -> Cluster:
    """:func:`start` without the start lock."""
    _posix.require_posix("the dev broker (kafka_handoff.devbroker.start)")
    if nodes not in ALLOWED_NODE_COUNTS:
        raise ConfigError(f"nodes: {nodes!r} is not allowed; allowed values: 1, 3")
    modes = _security.normalize_modes(security) if security is not None else ()
    if connections_max_reauth_ms is not None and not modes:
        raise ConfigError("connections.max.reauth.ms: needs a secured broker (security=...)")
    jars = ensure_jars()
    java = java_executable()
    if schema_registry:
        _registry.ensure_registry()  # a build failure stops us before any broker runs
    cds_opts: list[str] = []
    if use_cds:
        ensure_cds_archive(jars, java)
        cds_opts = cds.jvm_opts(jars, java)
    jvm_opts = [*cds_opts, *jvm_opts]
    ephemeral = data_dir is None
    root = Path(tempfile.mkdtemp(prefix="handoff-broker-")) if data_dir is None else Path(data_dir).resolve()
    if not ephemeral:
        existing = Cluster._from_state(root) if (root / STATE_FILE).exists() else None
        if existing is not None:
            alive = [
                n for n in existing.nodes if n.pid is not None and _is_node_jvm(n.pid, n.properties_path)
            ]
            if alive:
                raise BrokerAlreadyRunningError(
                    f"a broker is already running from {root} at {existing.bootstrap_servers}",
                    existing.bootstrap_servers,
                )
    _prepare_data_dir(root)
    sec: _security.DevSecurity | None = None
    format_args: list[str] = []
    if not modes and not ephemeral:
        _security.clear(root)  # no stale client.json from an earlier secured start
    if modes:
        try:
            sec = _security.prepare(
                root,
                modes,
                oidc_port=_free_ports(1)[0],
                reauth_ms=connections_max_reauth_ms,
                supervised=supervised,
            )
        except BaseException:
            _security.stop_services(root)  # a KDC started before the failure
            if ephemeral:
                shutil.rmtree(root, ignore_errors=True)
            raise
        jvm_opts = [*jvm_opts, *sec.jvm_opts()]
        format_args = sec.format_args()
    cluster_id = generate_cluster_id()
    last_error: BrokerStartError | None = None
    cds_suspect = ""
    for attempt in range(1, _BIND_RETRIES + 1):
        ports = _free_ports(2 * nodes)
        members = [
            Node(i + 1, "127.0.0.1", ports[2 * i], ports[2 * i + 1], root / f"node-{i + 1}")
            for i in range(nodes)
        ]
        cluster = Cluster(
            root, cluster_id, members, supervised=supervised, ephemeral=ephemeral, overrides=overrides
        )
        cluster.jvm_opts = list(jvm_opts)
        cluster.security = sec
        specs = [m.spec() for m in members]
        if sec is not None:
            sec.assign_ports(_free_ports(len(sec.modes) * nodes), nodes)
            sec.save()
        for index, spec in enumerate(specs):
            spec.node_dir.mkdir(parents=True, exist_ok=True)
            props = dict(overrides or {})
            if sec is not None:
                props = {**sec.broker_overrides(spec, index), **props}
            if node_overrides is not None:
                props.update(node_overrides(spec))
            # 0600: with security, the listeners' JAAS lines hold every PLAIN user's password.
            write_private(spec.properties_path, render_properties(spec, specs, overrides=props))
        try:
            _format_all(specs, cluster_id, jars.classpath, java, timeout, cds_opts, format_args)
            launched = time.monotonic()
            if supervised:
                with _live_lock:
                    _live.add(cluster)
            try:
                for m in members:  # all nodes at once: a KRaft quorum needs a majority to elect a leader
                    cluster._launch(m, jars.classpath, java)
            finally:
                cluster._write_state()
            cluster._wait_ready(cluster.node_ids, launched + timeout)
            if sec is not None:
                sec.start_token_endpoint(supervised=supervised)
                sec.write_client_files()
            if schema_registry:
                cluster.schema_registry = _registry.start_registry(root / REGISTRY_DIR, supervised=supervised)
                _add_registry_to_client_json(cluster)
            cluster.start_seconds = time.monotonic() - launched
            if cds_suspect:
                cds.discard(jars, java, cds_suspect)
            log.info(
                "Kafka %s: %d node(s) ready at %s in %.1fs",
                KAFKA_VERSION,
                nodes,
                cluster.bootstrap_servers,
                cluster.start_seconds,
            )
            return cluster
        except (_NodeDiedError, _FormatFailedError) as exc:
            _abandon(cluster)
            last_error = exc
            port_in_use = isinstance(exc, _NodeDiedError) and exc.port_in_use
            if cds_opts and not port_in_use:
                # Retry once without the CDS archive; if that works, the archive was to blame.
                cds_suspect = f"a broker JVM failed with it: {str(exc)[:300]}"
                jvm_opts = [o for o in jvm_opts if o not in cds_opts]
                cds_opts = []
            elif port_in_use:
                log.warning("port collision on attempt %d; retrying with new ports", attempt)
            else:
                break
            for m in members:
                shutil.rmtree(m.node_dir, ignore_errors=True)
        except BaseException:
            _abandon(cluster)
            if ephemeral:
                shutil.rmtree(root, ignore_errors=True)
            raise
    if ephemeral:
        shutil.rmtree(root, ignore_errors=True)
    assert last_error is not None
    raise last_error


def _add_registry_to_client_json(cluster: Cluster) -> None:
    """``schema.registry.url`` into ``<data_dir>/client.json`` (made with ``bootstrap.servers`` when the
    broker is not secured and so wrote none)."""
    assert cluster.schema_registry is not None
    path = cluster.data_dir / "client.json"
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        settings = {"bootstrap.servers": cluster.bootstrap_servers}
    settings["schema.registry.url"] = cluster.schema_registry.url
    write_private(path, json.dumps(settings, indent=2) + "\n")


def _abandon(cluster: Cluster) -> None:
    """Stop whatever a failed start launched."""
    with contextlib.suppress(Exception):
        cluster._terminate(cluster.nodes, 5.0)
    if cluster.security is not None:
        with contextlib.suppress(Exception):
            _security.stop_services(cluster.data_dir)
    with contextlib.suppress(Exception):
        _registry.stop_registry(cluster.data_dir / REGISTRY_DIR)
    cluster._stopped = True
    with _live_lock:
        _live.discard(cluster)


def stop(data_dir: str | os.PathLike[str], timeout: float = DEFAULT_STOP_TIMEOUT_S) -> bool:
    """Stop the broker whose state is in ``data_dir``; False when none was recorded there."""
    root = Path(data_dir).resolve()
    cluster = Cluster._from_state(root)
    if cluster is None:
        return _registry.stop_registry(root / REGISTRY_DIR)
    with _live_lock:
        for live in _live:
            if live.data_dir == root:  # started by this process: use the handle (reaps children)
                cluster = live
                break
    cluster.stop(timeout)
    return True


def attach(data_dir: str | os.PathLike[str]) -> Cluster:
    """A handle on the running cluster whose state is in ``data_dir`` (started by ``handoff broker start``
    or by :func:`start` in any process), for per-node control: :meth:`Cluster.stop_node`,
    :meth:`Cluster.kill_node`, :meth:`Cluster.restart_node`, :meth:`Cluster.pause_node`,
    :meth:`Cluster.resume_node`.  In the process that started it, the very same handle is returned.

    Raises :class:`BrokerStartError` when no broker is recorded in ``data_dir``.
    """
    root = Path(data_dir).resolve()
    with _live_lock:
        for live in _live:
            if live.data_dir == root:
                return live
    cluster = Cluster._from_state(root)
    if cluster is None:
        raise BrokerStartError(f"no broker recorded in {root} (no {STATE_FILE}); start one first")
    return cluster


def status(data_dir: str | os.PathLike[str]) -> ClusterStatus | None:
    """What ``data_dir``'s state file says and which of its JVMs are alive; None when there is no state."""
    root = Path(data_dir).resolve()
    cluster = Cluster._from_state(root)
    if cluster is None:
        return None
    return ClusterStatus(
        data_dir=root,
        bootstrap_servers=cluster.bootstrap_servers,
        kafka_version=KAFKA_VERSION,
        cluster_id=cluster.cluster_id,
        supervised=cluster.supervised,
        nodes=tuple(
            NodeStatus(
                n.node_id,
                n.bootstrap,
                n.pid,
                n.pid is not None and _is_node_jvm(n.pid, n.properties_path),
                n.pid is not None and _is_node_jvm(n.pid, n.properties_path) and _pid_stopped(n.pid),
            )
            for n in cluster.nodes
        ),
    )
