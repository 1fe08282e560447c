"""The consumer's fetch path across a partition leader failure on the 3-node cluster (issue 13).

Before the fix, a consumer kept sending the epoch of the last record batch it consumed as the fetch's
``current_leader_epoch``: after the leader was killed the new leader answered FENCED_LEADER_EPOCH to every
fetch, the client re-sent at once, forever, and no record after the failover was ever returned.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from kafka_handoff import devbroker
from kafka_handoff.consumer import Consumer
from kafka_handoff.producer import Producer
from kafka_handoff.types import TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

FAILOVER_DEADLINE_S = 90.0
"""Bound on consuming the records produced after the kill: the controller fences a killed broker after
``broker.session.timeout.ms`` (9 s) and a new controller may have to be elected first (the nodes are
combined broker+controllers); the rest is this client's retry backoff (at most 1 s) on a loaded machine."""


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    """``count`` records with values ``start..start+count-1``, acks=all, each acknowledged; written by
    confluent-kafka (a producer independent of the consumer under test) when installed, else by ours."""
    try:
        import confluent_kafka
    except ImportError:
        config = {"bootstrap.servers": bootstrap, "acks": "all", "delivery.timeout.ms": 120_000}
        with Producer(config) as ours:
            futures = [ours.send(topic, b"%06d" % i, partition=0) for i in range(start, start + count)]
            ours.flush(150)
        assert [f.exception(0) for f in futures if f.exception(0) is not None] == []
        return
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": 120_000,
        }
    )
    failed: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    for i in range(start, start + count):
        producer.produce(topic, value=b"%06d" % i, partition=0, on_delivery=report)
    assert producer.flush(150) == 0
    assert failed == []


def consume(consumer: Consumer, into: list[int], until: int, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while len(into) < until:
        assert time.monotonic() < deadline, f"consumed {len(into)} of {until} records within {deadline_s} s"
        for record in consumer.poll(0.5):
            into.append(int(record.value))


def leader_of(cluster: devbroker.Cluster, tp: TopicPartition) -> int:
    deadline = time.monotonic() + 30
    while True:
        leader = cluster.metadata([tp.topic]).leader_for(tp)
        if leader is not None:
            return leader
        assert time.monotonic() < deadline, f"no leader for {tp}"
        time.sleep(0.2)


def test_consumer_follows_the_new_leader_after_the_leader_is_killed(
    cluster: Any, topic_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Consume 100, SIGKILL the partition leader, produce 100 more with acks=all: all 200 are consumed,
    each once and in order, and the lag afterwards comes from the new leader."""
    if not isinstance(cluster, devbroker.Cluster):
        pytest.skip("needs a cluster started by the test run (HANDOFF_CLUSTER_BOOTSTRAP is set)")
    caplog.set_level(logging.WARNING, logger="kafka_handoff")
    topic = topic_factory(partitions=1, replication=3, configs={"min.insync.replicas": "2"}, on=cluster)
    tp = TopicPartition(topic, 0)
    produce(cluster.bootstrap_servers, topic, 0, 100)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "auto.offset.reset": "earliest",
            "client.id": "failover-fetch",
            "max.poll.records": 5,
        }
    )
    values: list[int] = []
    try:
        consumer.assign([tp])
        consume(consumer, values, 100, 60)
        leader = leader_of(cluster, tp)
        cluster.stop_node(leader, kill=True)
        killed_at = time.monotonic()
        produce(cluster.bootstrap_servers, topic, 100, 100)
        consume(consumer, values, 200, FAILOVER_DEADLINE_S - (time.monotonic() - killed_at))
        assert values == list(range(200))  # every acknowledged record, once, in order
        assert consumer.position(tp) == 200
        new_leader = leader_of(cluster, tp)
        assert new_leader != leader
        # Lag comes from the current (new) leader's high watermark: 10 more records show as lag 10 (the
        # network thread fetches them ahead of poll()), and the records-lag metric follows.
        produce(cluster.bootstrap_servers, topic, 200, 10)
        deadline = time.monotonic() + 30
        while consumer.current_lag(tp) != 10:
            assert time.monotonic() < deadline, f"lag {consumer.current_lag(tp)}, expected 10"
            time.sleep(0.05)
        got: list[int] = []
        while not got:
            got = [int(r.value) for r in consumer.poll(5.0)]
        assert got == list(range(200, 205))  # max.poll.records=5
        lag_key = f"consumer-fetch-manager-metrics:records-lag{{partition=0,topic={topic}}}"
        assert consumer.metrics()[lag_key] == 5
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    finally:
        consumer.close(10)
        cluster.heal()


def test_consumer_leaves_a_hung_leader_for_the_new_one(cluster: Any, topic_factory: Any) -> None:
    """SIGSTOP the partition leader (a hung peer: its connection stays open, nothing is answered): once the
    controller fenced it and elected a new leader, the consumer fetches from that one -- without waiting
    for its fetch to the hung broker to time out -- and every acknowledged record is consumed once."""
    if not isinstance(cluster, devbroker.Cluster):
        pytest.skip("needs a cluster started by the test run (HANDOFF_CLUSTER_BOOTSTRAP is set)")
    topic = topic_factory(partitions=1, replication=3, configs={"min.insync.replicas": "2"}, on=cluster)
    tp = TopicPartition(topic, 0)
    produce(cluster.bootstrap_servers, topic, 0, 100)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "auto.offset.reset": "earliest"})
    values: list[int] = []
    try:
        consumer.assign([tp])
        consume(consumer, values, 100, 60)
        leader = leader_of(cluster, tp)
        cluster.pause_node(leader)
        paused_at = time.monotonic()
        produce(cluster.bootstrap_servers, topic, 100, 100)
        consume(consumer, values, 200, FAILOVER_DEADLINE_S - (time.monotonic() - paused_at))
        assert values == list(range(200))
    finally:
        consumer.close(10)
        cluster.heal()
