"""Shared fixtures: a real Kafka broker (session), a 3-node cluster (one per session, healed between
modules), unique topics (function).

Brokers come from :mod:`kafka_handoff.devbroker` in supervised mode, so no JVM outlives the test run:

* normal end, failure, Ctrl-C (SIGINT) -> pytest tears the fixtures down (SIGTERM, SIGKILL after 10 s);
* SIGTERM / SIGHUP to pytest -> turned into KeyboardInterrupt below, so the same orderly teardown runs
  (``make test`` passes a SIGTERM/SIGINT it gets on to pytest: .ci/test); a SIGINT that the shell starting
  pytest in the background set to "ignored" is made Ctrl-C again;
* anything that skips teardown -> devbroker's ``atexit`` hook; and if the process dies without running
  Python at all (SIGKILL, OOM killer), each JVM's supervisor sees its owner vanish and kills the JVM.

Environment:

* ``HANDOFF_BOOTSTRAP=host:port[,...]`` -- use that running broker for ``broker`` instead of starting one.
* ``HANDOFF_CLUSTER_BOOTSTRAP=host:port,...`` -- the same for ``cluster`` (3 brokers expected).
* ``HANDOFF_SCHEMA_REGISTRY_URL=http://...`` -- use that Confluent-compatible registry (``schema_registry``).
* ``HANDOFF_SPARK_MASTER=spark://host:port`` -- use that standalone cluster for ``spark_standalone``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from kafka_handoff import devbroker


@dataclass(frozen=True)
class ExternalBroker:
    """A broker (or cluster) the test run did not start; only its address is known."""

    bootstrap_servers: str
    managed: bool = False


BrokerLike = devbroker.Cluster | ExternalBroker
TopicFactory = Callable[..., str]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"received signal {signal.Signals(signum).name}")


# Under CI=true what the suite would otherwise skip for lack of it is an error: the C record loops and the
# peer/engine libraries the oracle, pipeline and bench tests need (each in an extra of pyproject.toml).
CI_REQUIRED_MODULES = (
    "confluent_kafka",
    "pyspark",
    "pyarrow",
    "deltalake",
    "hypothesis",
    "cryptography",
    "gssapi",
    "matplotlib",
    "rich",
)


def ci_missing_requirements() -> list[str]:
    """What this run lacks of what CI requires (empty when all is there)."""
    import importlib.util

    from kafka_handoff._build import missing_fast_paths

    missing = [m for m in CI_REQUIRED_MODULES if importlib.util.find_spec(m) is None]
    return missing + missing_fast_paths()


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        missing = ci_missing_requirements()
        if missing:
            raise pytest.UsageError("CI=true but this environment lacks: " + ", ".join(missing))
    # Make SIGTERM/SIGHUP behave like Ctrl-C so fixture teardown stops the brokers.  Only when nobody
    # else has claimed these signals (pytest itself handles SIGINT).
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, _interrupt)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:  # the controller (or a run without xdist)
        # Its xdist workers tell the scheduler the groups of their tests (XDIST_GROUPS_ENV).
        run = Path(tempfile.gettempdir()) / f"handoff-test-run-{os.getpid()}"
        groups, lock = run.with_suffix(".groups.json"), run.with_suffix(".lock")
        os.environ[XDIST_GROUPS_ENV] = str(groups)
        config.add_cleanup(lambda: groups.unlink(missing_ok=True))
        config.add_cleanup(lambda: lock.unlink(missing_ok=True))
    else:
        # The workers of one run (children of the controller) start their brokers one cluster at a time
        # (devbroker.set_start_lock: process-local, so a broker that a test starts in a subprocess, e.g.
        # through the CLI, does not wait for it).
        devbroker.cluster.set_start_lock(
            Path(tempfile.gettempdir()) / f"handoff-test-run-{os.getppid()}.lock"
        )
    # A shell without job control starts its background commands (`pytest ... &` in a script or a CI
    # step) with SIGINT ignored, and Python keeps it ignored: Ctrl-C, and the SIGINT with which an xdist
    # worker is told to stop, would then be lost and the worker killed without tearing its brokers down.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# -- Parallel runs (pytest-xdist, ``-n N --dist loadgroup``; docs/testing.md) ------------------------------
#
# Every xdist worker is its own pytest session, so the session fixtures below (``broker``, the 3-node
# ``cluster``, ``secured``) are per worker: a worker's tests share its brokers exactly as a serial run's do,
# and a test that changes broker-wide state (ACLs, configs, SCRAM users, quotas, bounces) only meets the
# tests of its own worker, one at a time.  Which tests share a worker is decided here, by xdist groups:
#
# * unit tests (``unit``/``threads``) are not grouped: spread one by one, they fill the gaps;
# * a test that uses the shared 3-node ``cluster`` -> group "cluster" (the cluster starts once per run);
# * a test that uses ``secured`` -> group "secured" (the secured broker starts once per run);
# * any other test -> the group of its module, so a module's own broker/Spark fixtures start once.
#
# A test may name its group itself with ``@pytest.mark.xdist_group("name")``; that wins over the rules.
#
# The groups are applied by the scheduler below, not by xdist's own ``--dist loadgroup``: that one appends
# "@group" to ``item._nodeid``, which pytest 9 no longer reads, so with pytest 9.2 it grouped nothing.
# Each worker writes the groups it computed (the same on every worker) to the file HANDOFF_XDIST_GROUPS
# names; the controller's scheduler reads it once all workers have collected.
SHARED_FIXTURE_GROUPS = ("cluster", "secured", "spark_standalone", "schema_registry")
XDIST_GROUPS_ENV = "HANDOFF_XDIST_GROUPS"


def xdist_group_of(item: pytest.Item) -> str | None:
    """The xdist group of ``item`` (None: not grouped, scheduled on its own)."""
    named = sorted(
        {
            str(m.args[0] if m.args else m.kwargs.get("name", "default"))
            for m in item.iter_markers("xdist_group")
        }
    )
    if named:
        return "_".join(named)  # named by the test itself
    if item.get_closest_marker("unit") is not None or item.get_closest_marker("threads") is not None:
        return None
    if "tests/unit/" in item.nodeid.replace("\\", "/"):
        return None
    fixtures = set(getattr(item, "fixturenames", ()))
    for name in SHARED_FIXTURE_GROUPS:
        if name in fixtures:
            return name
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups: dict[str, str] = {}
    for item in items:
        group = xdist_group_of(item)
        if group is not None:
            groups[item.nodeid] = group
    path = os.environ.get(XDIST_GROUPS_ENV, "")
    if path and hasattr(config, "workerinput"):
        tmp = f"{path}.{os.getpid()}"
        Path(tmp).write_text(json.dumps(groups))
        os.replace(tmp, path)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: xdist's scope scheduling over the groups of :func:`xdist_group_of`."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    path = os.environ.get(XDIST_GROUPS_ENV, "")

    class GroupScheduling(LoadGroupScheduling):  # type: ignore[misc]  # xdist has no type information
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                try:
                    self.groups = json.loads(Path(path).read_text()) if path else {}
                except (OSError, ValueError):
                    self.groups = {}
            group = self.groups.get(nodeid)
            return group if group is not None else str(super()._split_scope(nodeid))

    return GroupScheduling(config, log)


def _hypothesis_profile() -> None:
    """Property tests check behaviour, not speed: no per-example deadline (hypothesis's 200 ms default
    fails an example that a busy 2-core machine happens to run slowly)."""
    try:
        from hypothesis import settings
    except ImportError:  # an error under CI=true (pytest_configure); elsewhere those tests skip
        return
    settings.register_profile("handoff", deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "handoff"))


_hypothesis_profile()


def _external(var: str) -> ExternalBroker | None:
    value = os.environ.get(var, "").strip()
    return ExternalBroker(value) if value else None


@pytest.fixture(scope="session")
def broker() -> Iterator[BrokerLike]:
    """A single-node Kafka broker for the whole session (``.bootstrap_servers``)."""
    external = _external("HANDOFF_BOOTSTRAP")
    if external is not None:
        yield external
        return
    cluster = devbroker.start(nodes=1)
    try:
        yield cluster
    finally:
        cluster.stop()


@dataclass(frozen=True)
class SparkCluster:
    """A Spark standalone cluster for the session: ``url`` (``spark://...``), its ``directory`` (logs,
    ``worker-N/app-*`` executor dirs; None for an external one) and ``workers``."""

    url: str
    directory: Any
    workers: int


@pytest.fixture(scope="session")
def spark_standalone() -> Iterator[SparkCluster]:
    """A master and 2 workers (separate JVMs, 1 core each) from the pyspark package, started once per run
    and supervised like the brokers (:mod:`kafka_handoff.devbroker.spark`)."""
    external = os.environ.get("HANDOFF_SPARK_MASTER", "").strip()
    if external:
        yield SparkCluster(external, None, 2)
        return
    pytest.importorskip("pyspark")
    from kafka_handoff.devbroker.spark import SparkStandalone

    cluster = SparkStandalone(workers=2, cores_per_worker=1, memory_per_worker="1g").start()
    try:
        yield SparkCluster(cluster.url, cluster.directory, cluster.workers)
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def _session_cluster() -> Iterator[dict[str, devbroker.Cluster]]:
    """Holds the one 3-node cluster of the run (started by the first module that asks for ``cluster``)."""
    holder: dict[str, devbroker.Cluster] = {}
    try:
        yield holder
    finally:
        started = holder.pop("cluster", None)
        if started is not None:
            started.stop()


@pytest.fixture(scope="module")
def cluster(_session_cluster: dict[str, devbroker.Cluster]) -> Iterator[BrokerLike]:
    """A 3-node KRaft cluster (nodes 1, 2, 3; combined broker+controller), started once per run and shared
    by the modules that use it (each start costs ~30 s).

    Fault tests may stop/kill/pause nodes through the :class:`kafka_handoff.devbroker.Cluster` methods;
    call ``cluster.heal()`` to bring every node back for the next test.  After each module the cluster is
    healed again (every node resumed or restarted and serving Metadata), so the next module gets it whole;
    one that cannot be healed is stopped and the next module starts a fresh one.
    """
    external = _external("HANDOFF_CLUSTER_BOOTSTRAP")
    if external is not None:
        yield external
        return
    started = _session_cluster.get("cluster")
    if started is None:
        started = _session_cluster["cluster"] = devbroker.start(nodes=3)
    yield started
    try:
        started.heal()
    except Exception as exc:
        warnings.warn(
            f"the shared 3-node cluster could not be healed ({exc}); the next module starts another",
            stacklevel=1,
        )
        _session_cluster.pop("cluster", None)
        started.stop()


@pytest.fixture(scope="session")
def secured() -> Iterator[devbroker.Cluster]:
    """A single-node broker with every secured listener (SSL, mTLS, SASL_PLAINTEXT, SASL_SSL, the test-only
    hostname-mismatch and short-session listeners), shared by the security test modules."""
    pytest.importorskip("cryptography")
    from kafka_handoff.devbroker import security

    cluster = devbroker.start(nodes=1, security=security.ALL_MODES)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a real Confluent-compatible Schema Registry (Apicurio Registry's ``/apis/ccompat/v7``,
    in-memory storage; :mod:`kafka_handoff.devbroker.registry`), started once per run by the first test that
    asks for it and stopped at the end (supervised: it dies with the test run).  Independent of ``broker``.

    Tests share it: use subject names of their own (``registry_helpers.unique_subject``).  When the registry
    cannot be built (no Maven, no network) the tests that need it skip, except under CI=true (an error)."""
    external = os.environ.get("HANDOFF_SCHEMA_REGISTRY_URL", "").strip()
    if external:
        yield external
        return
    from kafka_handoff.devbroker import JarResolutionError, registry

    try:
        registry.ensure_registry()
    except JarResolutionError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            raise
        pytest.skip(f"the dev Schema Registry cannot be built here: {exc}")
    started = registry.start_registry(tmp_path_factory.mktemp("schema-registry"), supervised=True)
    try:
        yield started.url
    finally:
        started.stop()


def _topic_name(test_name: str) -> str:
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", test_name).strip("-.")[:60] or "topic"
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic_factory(request: pytest.FixtureRequest) -> Iterator[TopicFactory]:
    """``topic_factory(partitions=8, replication=1, configs=None, *, on=None) -> unique topic name``.

    Creates the topic with the project's own admin client on ``on`` (a broker/cluster fixture value or a
    bootstrap string; default: the session ``broker``) and returns once every broker's Metadata shows a
    leader for every partition.  Topics are deleted again after the test.
    """
    from kafka_handoff.admin import AdminClient, NewTopic

    created: list[tuple[str, str]] = []

    def make(
        partitions: int = 8,
        replication: int = 1,
        configs: Mapping[str, str] | None = None,
        *,
        on: BrokerLike | str | None = None,
    ) -> str:
        target: Any = request.getfixturevalue("broker") if on is None else on
        bootstrap = target if isinstance(target, str) else target.bootstrap_servers
        name = _topic_name(request.node.name)
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topics([NewTopic(name, partitions, replication, dict(configs or {}))], timeout=60)
        created.append((bootstrap, name))
        return name

    yield make

    by_bootstrap: dict[str, list[str]] = {}
    for bootstrap, name in created:
        by_bootstrap.setdefault(bootstrap, []).append(name)
    for bootstrap, names in by_bootstrap.items():
        try:
            with AdminClient({"bootstrap.servers": bootstrap}) as admin:
                admin.delete_topics(names, if_exists=True, wait=False, timeout=15)
        except Exception:  # best effort: the broker may be gone (fault tests) or the topic deleted already
            pass


@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A real local SparkSession with the pipeline's defaults, one per test module (stopped after it)."""
    pytest.importorskip("pyspark")
    from kafka_handoff.pipeline.config import SparkConfig
    from kafka_handoff.pipeline.spark import build_session

    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_").replace("_", "-")
    session = build_session(SparkConfig(app_name=f"handoff-{name}-tests"))
    yield session
    session.stop()
