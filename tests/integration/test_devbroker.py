"""The dev broker's life cycle: readiness, side-by-side brokers, the CLI, and no JVM left behind --
after a stop, after a CLI stop, and after an interrupted or killed test run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff import devbroker
from kafka_handoff.devbroker import cds, config
from kafka_handoff.devbroker.cluster import _pid_alive, ensure_cds_archive
from kafka_handoff.devbroker.probe import ProbeConnection, parse_bootstrap

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def wait_until_gone(pids: list[int], timeout: float) -> list[int]:
    """Poll until none of ``pids`` is alive; return the ones still alive at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if _pid_alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def kafka_jvm_pids() -> set[int]:
    """Every process on the machine whose command line runs ``kafka.Kafka``."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"kafka.Kafka" in args and _pid_alive(int(entry.name)):
                out.add(int(entry.name))
    return out


def api_versions_ok(bootstrap: str) -> bool:
    host, port = parse_bootstrap(bootstrap)[0]
    with ProbeConnection(host, port, 5.0) as conn:
        return 18 in conn.api_versions()


def test_second_broker_side_by_side_then_stop_leaves_no_jvm(broker: Any, tmp_path: Path) -> None:
    other = devbroker.start(nodes=1, data_dir=tmp_path / "other")
    try:
        state = json.loads((tmp_path / "other" / "state.json").read_text())
        assert state["bootstrap_servers"] == other.bootstrap_servers
        assert [n["pid"] for n in state["nodes"]] == [n.pid for n in other.nodes]
        assert other.bootstrap_servers != broker.bootstrap_servers
        ours, theirs = other.metadata(), devbroker.fetch_metadata(broker.bootstrap_servers)
        assert ours.cluster_id == other.cluster_id != theirs.cluster_id
        assert set(ours.brokers) == {1}
        pids = other.pids()
        assert len(pids) == 2  # the JVM and its supervisor
        assert all(_pid_alive(p) for p in pids)
        status = devbroker.status(tmp_path / "other")
        assert status is not None and status.all_running
    finally:
        other.stop()
    assert wait_until_gone(pids, 0) == [], "stop() returned while a JVM or supervisor was alive"
    assert not (tmp_path / "other" / "state.json").exists()
    assert devbroker.status(tmp_path / "other") is None
    assert api_versions_ok(broker.bootstrap_servers)  # the session broker is untouched


def run_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafka_handoff.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def cli_data_dir(tmp_path: Path) -> Iterator[Path]:
    data_dir = tmp_path / "cli-broker"
    yield data_dir
    devbroker.stop(data_dir)  # never leave a detached broker behind, even when the test fails


def test_cli_broker_outlives_the_cli_and_stops_cleanly(cli_data_dir: Path) -> None:
    d = str(cli_data_dir)
    started = run_cli("broker", "start", "--data-dir", d)
    assert started.returncode == 0, started.stderr
    bootstrap = started.stdout.strip()
    assert bootstrap.startswith("127.0.0.1:")
    status = devbroker.status(cli_data_dir)
    assert status is not None and status.all_running and not status.supervised
    pids = [n.pid for n in status.nodes if n.pid is not None]
    assert api_versions_ok(bootstrap)  # still serving after the starting process exited

    again = run_cli("broker", "start", "--data-dir", d)
    assert again.returncode == 0 and again.stdout.strip() == bootstrap
    assert "already running" in again.stderr

    shown = run_cli("broker", "status", "--data-dir", d)
    assert shown.returncode == 0 and bootstrap in shown.stdout and "running" in shown.stdout

    stopped = run_cli("broker", "stop", "--data-dir", d)
    assert stopped.returncode == 0, stopped.stderr
    assert wait_until_gone(pids, 0) == []
    assert run_cli("broker", "status", "--data-dir", d).returncode == 1


TINY_CONFTEST = """
import importlib.util, sys
_spec = importlib.util.spec_from_file_location("handoff_real_conftest", {conftest!r})
_mod = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _mod
_spec.loader.exec_module(_mod)
globals().update({{k: v for k, v in vars(_mod).items() if not k.startswith("__")}})
"""

TINY_TEST = """
import json, os, time

def test_hold_a_broker(broker):
    info = {"pids": broker.pids(), "data_dir": str(broker.data_dir)}
    path = os.environ["HANDOFF_TEST_PIDFILE"]
    with open(path + ".tmp", "w") as f:
        json.dump(info, f)
    os.replace(path + ".tmp", path)
    time.sleep(600)  # held until the outer test interrupts or kills this run
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_interrupted_test_run_leaves_no_kafka_jvm(tmp_path: Path, sig: signal.Signals) -> None:
    (tmp_path / "conftest.py").write_text(TINY_CONFTEST.format(conftest=str(REPO / "tests" / "conftest.py")))
    (tmp_path / "test_tiny.py").write_text(textwrap.dedent(TINY_TEST))
    pidfile = tmp_path / "pids.json"
    # The inner run is a run of its own: not the outer run's broker, options or start lock (a wait for the
    # lock while another xdist worker starts a cluster would count against the deadline below).
    outer = ("HANDOFF_BOOTSTRAP", "PYTEST_ADDOPTS", devbroker.START_LOCK_ENV)
    env = {k: v for k, v in os.environ.items() if k not in outer}
    env["HANDOFF_TEST_PIDFILE"] = str(pidfile)
    log = open(tmp_path / "inner.log", "wb")  # noqa: SIM115 - closed in finally
    inner = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_tiny.py"],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    info: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 180
        while not pidfile.exists():
            assert inner.poll() is None, (tmp_path / "inner.log").read_text()
            assert time.monotonic() < deadline, "inner test run never started its broker"
            time.sleep(0.1)
        info = json.loads(pidfile.read_text())
        pids = info["pids"]
        assert len(pids) == 2 and all(_pid_alive(p) for p in pids)
        assert set(pids) & kafka_jvm_pids()

        inner.send_signal(sig)
        code = inner.wait(60)
        output = (tmp_path / "inner.log").read_text()
        if sig == signal.SIGKILL:
            assert code == -signal.SIGKILL
            # Nothing in the dead process could clean up: the supervisors' death-watch must.
            # (SIGTERM to the JVM, SIGKILL after 10 s; usually gone in 1-2 s.)
            assert wait_until_gone(pids, 30) == [], "JVM outlived a SIGKILLed test run"
            data_dir = Path(info["data_dir"])
            deadline = time.monotonic() + 10  # the supervisors delete the temporary data dir
            while data_dir.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not data_dir.exists()
        else:
            assert code == 2, output  # pytest's "interrupted" exit status
            assert "KeyboardInterrupt" in output
            # Orderly teardown happened before pytest exited.
            assert wait_until_gone(pids, 0) == [], f"JVM still alive after the interrupted run:\n{output}"
            assert not Path(info["data_dir"]).exists()
    finally:
        if inner.poll() is None:
            inner.kill()
            inner.wait()
        log.close()
        for pid in info.get("pids", []):
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        if info:
            shutil.rmtree(info["data_dir"], ignore_errors=True)


def test_a_broken_cds_archive_is_discarded_and_the_broker_starts_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = devbroker.ensure_jars()
    java = config.java_executable()
    trained = ensure_cds_archive(real, java)
    if trained is None:
        pytest.skip("no class-data-sharing archive on this JDK")
    # A private cache holding the real jars and a truncated archive (what a crash mid-write would leave).
    version_dir = tmp_path / "cache" / f"kafka-{devbroker.KAFKA_VERSION}"
    version_dir.mkdir(parents=True)
    (version_dir / "libs").symlink_to(real.libs)
    shutil.copy(real.libs.parent / ".resolved", version_dir / ".resolved")
    monkeypatch.setenv("HANDOFF_CACHE_DIR", str(tmp_path / "cache"))
    jars = devbroker.ensure_jars()
    assert not jars.resolved_now and jars.libs == version_dir / "libs"
    archive = cds.archive_path(jars, java)
    archive.write_bytes(trained.read_bytes()[: 1 << 20])

    cluster = devbroker.start(nodes=1)
    try:
        assert api_versions_ok(cluster.bootstrap_servers)
        assert not any("SharedArchiveFile" in opt for opt in cluster.jvm_opts)
        assert not archive.exists()
        assert archive.with_suffix(".jsa.failed").exists()
        assert cds.jvm_opts(jars, java) == []
    finally:
        cluster.stop()
