"""The 3-node KRaft cluster: all nodes in Metadata, replicated topics, single-node faults, clean stop."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff import devbroker
from kafka_handoff.devbroker.cluster import _pid_alive
from kafka_handoff.devbroker.probe import ProbeConnection

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def confluent() -> Any:
    """confluent-kafka, the neutral client writing to and reading from the cluster in the fault test (only
    that test skips without it)."""
    return pytest.importorskip("confluent_kafka")


def brokers_seen_by_each_node(cluster: devbroker.Cluster) -> dict[int, set[int]]:
    seen = {}
    for node in cluster.nodes:
        with ProbeConnection(node.host, node.port, 5.0) as conn:
            seen[node.node_id] = set(conn.metadata([]).brokers)
    return seen


def test_start_and_stop_three_node_cluster(tmp_path: Path) -> None:
    cluster = devbroker.start(nodes=3, data_dir=tmp_path / "c3")
    try:
        assert cluster.node_ids == [1, 2, 3]
        assert len(set(cluster.bootstrap_servers.split(","))) == 3
        assert brokers_seen_by_each_node(cluster) == {1: {1, 2, 3}, 2: {1, 2, 3}, 3: {1, 2, 3}}
        meta = cluster.metadata()
        assert meta.cluster_id == cluster.cluster_id
        assert meta.controller_id in {1, 2, 3}
        pids = cluster.pids()
        assert len(pids) == 6 and all(_pid_alive(p) for p in pids)
    finally:
        # All three nodes go down together (quorum lost): stop() sends SIGTERM, then SIGKILL after 10 s.
        # Awaited for 120 s on another thread, far above that bound, far below a hang.
        stopper = threading.Thread(target=cluster.stop, daemon=True)
        stopper.start()
        stopper.join(120)
    assert not stopper.is_alive(), "cluster.stop() did not return"
    assert [p for p in pids if _pid_alive(p)] == []


def test_replicated_topic_survives_a_node_restart(cluster: Any, topic_factory: Any) -> None:
    if not isinstance(cluster, devbroker.Cluster):
        pytest.skip("needs a cluster started by the test run (HANDOFF_CLUSTER_BOOTSTRAP is set)")
    confluent_kafka = confluent()
    topic = topic_factory(partitions=3, replication=3, configs={"min.insync.replicas": "2"}, on=cluster)
    parts = cluster.metadata([topic]).partitions_for(topic)
    assert parts is not None and all(sorted(p.replicas) == [1, 2, 3] for p in parts)

    cluster.stop_node(2, kill=True)
    try:
        assert not cluster.is_alive(2)
        deadline = time.monotonic() + 60  # the controller fences node 2 after broker.session.timeout.ms
        while 2 in cluster.metadata().brokers:
            assert time.monotonic() < deadline, "node 2 still listed 60 s after it was killed"
            time.sleep(0.2)

        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        values = [uuid.uuid4().bytes for _ in range(300)]
        for v in values:
            producer.produce(topic, value=v)
        assert producer.flush(60) == 0  # 2 of 3 replicas in sync still satisfy min.insync.replicas=2
    finally:
        cluster.heal()
    assert brokers_seen_by_each_node(cluster) == {1: {1, 2, 3}, 2: {1, 2, 3}, 3: {1, 2, 3}}

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    assert sorted(got) == sorted(values)
