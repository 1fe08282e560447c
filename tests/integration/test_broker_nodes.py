"""Per-node control of a running 3-node cluster: ``handoff broker stop-node|kill-node|restart-node|pause-node|
resume-node`` on a cluster from ``handoff broker start --nodes 3``, and ``devbroker.attach(data_dir)`` from
Python (a process that did not start the cluster)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_handoff import devbroker
from kafka_handoff.devbroker.cluster import _pid_alive
from kafka_handoff.devbroker.probe import ProbeConnection

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafka_handoff.cli.main", "broker", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def node_states(data_dir: Path) -> dict[int, str]:
    """``handoff broker status``: node id -> up/down/paused."""
    out = run_cli("status", "--data-dir", str(data_dir)).stdout
    states = {}
    for line in out.splitlines():
        parts = line.split()
        if parts[:1] == ["node"]:
            states[int(parts[1])] = parts[-1]
    return states


def brokers_listed(node: devbroker.Node) -> set[int]:
    with ProbeConnection(node.host, node.port, 5.0) as conn:
        return set(conn.metadata([]).brokers)


@pytest.fixture
def cli_cluster(tmp_path: Path) -> Iterator[Path]:
    data_dir = tmp_path / "nodes"
    started = run_cli(
        "start", "--nodes", "3", "--data-dir", str(data_dir), "--override", "controlled.shutdown.enable=true"
    )
    assert started.returncode == 0, started.stderr
    try:
        yield data_dir
    finally:
        stopped = run_cli("stop", "--data-dir", str(data_dir))
        assert stopped.returncode == 0, stopped.stderr


def test_node_commands_on_a_cli_cluster(cli_cluster: Path) -> None:
    d = str(cli_cluster)
    assert node_states(cli_cluster) == {1: "up", 2: "up", 3: "up"}
    assert "controlled.shutdown.enable=true" in (cli_cluster / "node-1" / "server.properties").read_text()

    # SIGSTOP / SIGCONT
    assert run_cli("pause-node", "2", "--data-dir", d).returncode == 0
    assert node_states(cli_cluster)[2] == "paused"
    assert run_cli("resume-node", "2", "--data-dir", d).returncode == 0
    assert node_states(cli_cluster)[2] == "up"

    # kill -9, then restart on the same storage and ports, from another process than the one that started it
    before = devbroker.attach(cli_cluster)
    old_pid = before.node(3).pid
    assert old_pid is not None
    assert run_cli("kill-node", "3", "--data-dir", d).returncode == 0
    assert not _pid_alive(old_pid)
    assert node_states(cli_cluster) == {1: "up", 2: "up", 3: "down"}
    restarted = run_cli("restart-node", "3", "--data-dir", d)
    assert restarted.returncode == 0, restarted.stderr
    after = devbroker.attach(cli_cluster)
    assert after.node(3).pid not in (None, old_pid)
    assert after.node(3).port == before.node(3).port
    # The CLI process that restarted it has exited; the node keeps running (launched detached).
    assert node_states(cli_cluster) == {1: "up", 2: "up", 3: "up"}
    assert brokers_listed(after.node(3)) == {1, 2, 3}

    # A running node restarted with --kill gets a new JVM
    pid = after.node(1).pid
    assert run_cli("restart-node", "1", "--kill", "--data-dir", d).returncode == 0
    assert devbroker.attach(cli_cluster).node(1).pid != pid

    # Controlled stop (SIGTERM) through the CLI, restart through the Python handle
    assert run_cli("stop-node", "2", "--data-dir", d).returncode == 0
    assert node_states(cli_cluster)[2] == "down"
    handle = devbroker.attach(cli_cluster)
    assert not handle.is_alive(2)
    handle.restart_node(2)
    assert handle.is_alive(2)
    assert brokers_listed(handle.node(2)) == {1, 2, 3}
    assert node_states(cli_cluster) == {1: "up", 2: "up", 3: "up"}


def test_node_commands_reject_bad_input(tmp_path: Path) -> None:
    missing = run_cli("kill-node", "1", "--data-dir", str(tmp_path / "none"))
    assert missing.returncode == 1
    assert "no broker recorded" in missing.stderr
