"""``devbroker.attach(data_dir)``: a handle from the state file, and its limits (no JVM started here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafka_handoff import devbroker

pytestmark = pytest.mark.unit


def write_state(data_dir: Path, *, supervised: bool, owner_pid: int) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    nodes = [
        {
            "node_id": i,
            "host": "127.0.0.1",
            "port": 40000 + i,
            "controller_port": 41000 + i,
            "node_dir": str(data_dir / f"node-{i}"),
            "pid": None,
            "supervisor_pid": None,
        }
        for i in (1, 2, 3)
    ]
    state = {
        "format": 1,
        "cluster_id": "AAAAAAAAAAAAAAAAAAAAAA",
        "supervised": supervised,
        "ephemeral": False,
        "owner_pid": owner_pid,
        "started_at": 0.0,
        "overrides": {},
        "jvm_opts": ["-Xshare:auto"],
        "nodes": nodes,
    }
    (data_dir / "state.json").write_text(json.dumps(state))


def test_attach_reads_the_state_file(tmp_path: Path) -> None:
    write_state(tmp_path, supervised=False, owner_pid=1)
    cluster = devbroker.attach(tmp_path)
    assert cluster.node_ids == [1, 2, 3]
    assert cluster.bootstrap_servers == "127.0.0.1:40001,127.0.0.1:40002,127.0.0.1:40003"
    assert cluster.jvm_opts == ["-Xshare:auto"]  # a restart uses the same JVM options as the start
    assert cluster.owner_pid == 1
    assert not cluster.is_alive(2) and not cluster.is_paused(2)


def test_attach_without_a_broker_names_the_dir(tmp_path: Path) -> None:
    with pytest.raises(devbroker.BrokerStartError, match="no broker recorded in"):
        devbroker.attach(tmp_path / "empty")


def test_a_supervised_cluster_is_restarted_only_by_its_owner(tmp_path: Path) -> None:
    # Its JVMs die with the owner; a restart from here would tie the node to this process instead.
    write_state(tmp_path, supervised=True, owner_pid=1)
    cluster = devbroker.attach(tmp_path)
    with pytest.raises(devbroker.BrokerStartError, match="supervised by process 1"):
        cluster.restart_node(2)
