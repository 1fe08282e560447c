"""The idempotent producer across partition leader failures on the 3-node cluster (issue 13, item 4).

An ``acks=all`` idempotent producer writes steadily to a 3-partition topic (replication factor 3,
``min.insync.replicas=2``) while the partition leaders are SIGKILLed and restarted one at a time.  Then
everything is read back with librdkafka (an independent oracle): every acknowledged record is in the log
exactly once, at the offset its future reported, and each partition holds the records in send order.
After each kill the admin client's ``list_offsets`` must find the partitions' new leader within its timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from kafka_handoff import devbroker
from kafka_handoff.admin import AdminClient, OffsetSpec
from kafka_handoff.producer import Producer
from kafka_handoff.types import RecordMetadata, TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

PARTITIONS = 3
KILLS = 3


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.05)


def _partitions(cluster: devbroker.Cluster, topic: str) -> Any:
    try:
        return cluster.metadata([topic]).partitions.get(topic, ())
    except ConnectionError:
        return ()


def _leaders(cluster: devbroker.Cluster, topic: str) -> dict[int, int]:
    return {p.partition: p.leader for p in _partitions(cluster, topic)}


def _fully_replicated(cluster: devbroker.Cluster, topic: str) -> bool:
    parts = _partitions(cluster, topic)
    return len(parts) == PARTITIONS and all(p.leader >= 0 and len(p.isr) == 3 for p in parts)


def _read_back(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of the topic as (offset, value) per partition, read with librdkafka in assign mode (the
    test skips here, after the checks of our producer ran, without confluent-kafka)."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"oracle-{topic}", "enable.auto.commit": False}
    )
    try:
        ends = {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), 30)[1]
                for p in range(PARTITIONS)}  # fmt: skip
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(PARTITIONS)
            ]
        )
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 120
        while any((got[p][-1][0] + 1 if got[p] else 0) < ends[p] for p in range(PARTITIONS)):
            assert time.monotonic() < deadline, "the oracle did not reach the end offsets"
            for m in consumer.consume(5000, 1.0):
                assert m.error() is None, m.error()
                got[m.partition()].append((m.offset(), m.value()))
        return got
    finally:
        consumer.close()


def _bounce(
    cluster: devbroker.Cluster,
    topic: str,
    victim: int,
    led: list[int],
    acked: Callable[[], int],
    admin: AdminClient,
) -> None:
    """SIGKILL ``victim`` (the leader of ``led``), let the stream go on without it, restart it and wait
    until it is back in every ISR (so that the next kill keeps ``min.insync.replicas``).

    Right after the kill the admin client lists the partitions' end offsets: the metadata still names the
    dead leader for a while, and the call must follow the leadership to the new leader within its timeout."""
    before = acked()
    cluster.stop_node(victim, kill=True)  # SIGKILL: in-flight requests die with the connections
    ends = admin.list_offsets([TopicPartition(topic, p) for p in led], OffsetSpec.LATEST, timeout=60)
    assert sorted(tp.partition for tp in ends) == sorted(led) and all(o >= 0 for o in ends.values())
    wait_until(
        lambda: all(_leaders(cluster, topic).get(p, victim) not in (victim, -1) for p in led),
        60,
        f"new leaders for partitions {led} after node {victim} was killed",
    )
    wait_until(lambda: acked() >= before + 1500, 90, "the stream to go on without the dead leader")
    cluster.restart_node(victim)
    wait_until(lambda: _fully_replicated(cluster, topic), 120, f"node {victim} to rejoin every ISR")
    after = acked()
    wait_until(lambda: acked() >= after + 500, 60, "the stream to go on after the restart")


def test_idempotent_producer_across_leader_kills_loses_and_duplicates_nothing(
    cluster: devbroker.Cluster, topic_factory: Callable[..., str]
) -> None:
    if not isinstance(cluster, devbroker.Cluster):
        pytest.skip("needs a cluster started by the test run (nodes are killed)")
    topic = topic_factory(PARTITIONS, 3, {"min.insync.replicas": "2"}, on=cluster)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "request.timeout.ms": 5000,
            "reconnect.backoff.max.ms": 500,
        }
    )
    sent: list[tuple[int, int, Future[RecordMetadata]]] = []  # (partition, sequence, future)
    stop = threading.Event()
    stream_error: list[BaseException] = []

    def stream() -> None:
        seq = [0] * PARTITIONS
        try:
            while not stop.is_set():
                for p in range(PARTITIONS):
                    sent.append((p, seq[p], producer.send(topic, b"%d:%08d" % (p, seq[p]), partition=p)))
                    seq[p] += 1
                time.sleep(0.003)  # a steady stream: roughly a thousand records a second
        except BaseException as exc:  # surfaced by the assertion below
            stream_error.append(exc)

    def acked() -> int:
        return sum(1 for _, _, f in list(sent) if f.done() and f.exception() is None)

    thread = threading.Thread(target=stream, name="leader-failover-stream")
    thread.start()
    killed: list[int] = []
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        wait_until(lambda: acked() >= 1000, 60, "the stream to start")
        for round_ in range(KILLS):
            leaders = _leaders(cluster, topic)
            victim = leaders[round_ % PARTITIONS]
            if victim in killed:  # prefer a leader that was not killed yet
                victim = next((n for n in leaders.values() if n not in killed), victim)
            killed.append(victim)
            _bounce(cluster, topic, victim, [p for p, n in leaders.items() if n == victim], acked, admin)
        stop.set()
        thread.join(30)
        assert not thread.is_alive() and not stream_error, stream_error
        producer.flush(120)
        assert producer.metrics()["producer-metrics:record-retry-total"] > 0  # the kills hit the stream
    finally:
        stop.set()
        thread.join(30)
        producer.close(30)
        admin.close(10)
        cluster.heal()

    failed = [(p, s, f.exception()) for p, s, f in sent if f.exception() is not None]
    assert not failed, f"{len(failed)} of {len(sent)} sends failed, e.g. {failed[:3]}"
    acknowledged = {(p, s): f.result(0) for p, s, f in sent}

    log = _read_back(cluster.bootstrap_servers, topic)
    for p in range(PARTITIONS):
        values = [v for _, v in log[p]]
        sequences = [int(v.split(b":")[1]) for v in values]
        assert all(v.startswith(b"%d:" % p) for v in values)
        assert len(sequences) == len(set(sequences)), f"partition {p}: duplicated records"
        assert sequences == sorted(sequences), f"partition {p}: the log order is not the send order"
        expected = sorted(s for (q, s) in acknowledged if q == p)
        assert sequences == expected, (
            f"partition {p}: {len(set(expected) - set(sequences))} acknowledged missing"
        )
        offsets = dict(log[p])
        for s in expected:
            md = acknowledged[(p, s)]
            assert offsets[md.offset] == b"%d:%08d" % (p, s), f"partition {p}: future offset of {s} is wrong"
