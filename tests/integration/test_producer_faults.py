"""The producer when the broker fails: close is bounded with the broker down, undeliverable records fail
after delivery.timeout.ms, and with idempotence a SIGKILL + restart of the broker mid-stream loses nothing
and duplicates nothing.

These tests use a private single-node broker (the session broker must stay up for other tests) that they
kill and restart on the same data directory and ports.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff import devbroker
from kafka_handoff.errors import IllegalStateError, KafkaTimeoutError
from kafka_handoff.producer import Producer
from kafka_handoff.types import RecordMetadata

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def private_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[devbroker.Cluster]:
    data_dir: Path = tmp_path_factory.mktemp("producer-faults")
    cluster = devbroker.start(nodes=1, data_dir=data_dir)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def broker_up(private_broker: devbroker.Cluster) -> devbroker.Cluster:
    """The private broker, running (a previous test may have left it stopped)."""
    if not private_broker.is_alive(1):
        private_broker.restart_node(1)
    return private_broker


def new_topic(cluster: devbroker.Cluster, partitions: int) -> str:
    name = f"faults-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(name, partitions)
    return name


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_close_is_bounded_with_the_broker_down(broker_up: devbroker.Cluster) -> None:
    topic = new_topic(broker_up, 2)
    producer = Producer({"bootstrap.servers": broker_up.bootstrap_servers, "linger.ms": 0})
    producer.send(topic, b"first").result(30)
    broker_up.stop_node(1, kill=True)
    futures = [producer.send(topic, b"x%d" % i) for i in range(200)]
    start = time.monotonic()
    producer.close(2.0)
    elapsed = time.monotonic() - start
    assert elapsed < 2.0 + 1.5
    for fut in futures:
        error = fut.exception(5)
        assert isinstance(error, IllegalStateError)
        assert "closed before the record could be delivered" in str(error)


def test_close_is_bounded_when_no_broker_was_ever_reachable() -> None:
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "max.block.ms": 500})
    start = time.monotonic()
    fut = producer.send("nowhere", b"x")  # waits max.block.ms for metadata
    assert isinstance(fut.exception(0), KafkaTimeoutError)
    assert "not present in metadata after 500 ms" in str(fut.exception(0))
    producer.close(1.0)
    assert time.monotonic() - start < 0.5 + 1.0 + 1.5


def test_undeliverable_record_fails_after_delivery_timeout(broker_up: devbroker.Cluster) -> None:
    topic = new_topic(broker_up, 1)
    config = {
        "bootstrap.servers": broker_up.bootstrap_servers,
        "linger.ms": 0,
        "request.timeout.ms": 1000,
        "delivery.timeout.ms": 3000,
    }
    with Producer(config) as producer:
        producer.send(topic, b"first").result(30)  # metadata and producer id are known
        broker_up.stop_node(1, kill=True)
        start = time.monotonic()
        fut = producer.send(topic, b"lost")
        error = fut.exception(20)
        elapsed = time.monotonic() - start
        assert isinstance(error, KafkaTimeoutError)
        assert "Expiring 1 record(s)" in str(error) and "delivery.timeout.ms=3000" in str(error)
        assert 2.5 <= elapsed <= 6.0
        producer.close(0)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_broker_kill_and_restart_mid_stream_loses_and_duplicates_nothing(
    broker_up: devbroker.Cluster, codec: str
) -> None:
    partitions = 3
    topic = new_topic(broker_up, partitions)
    total = 30_000
    futures: list[Future[RecordMetadata]] = []
    config = {
        "bootstrap.servers": broker_up.bootstrap_servers,
        "compression.type": codec,
        "linger.ms": 5,
        "request.timeout.ms": 5000,
        "reconnect.backoff.max.ms": 200,
    }
    producer = Producer(config)
    sent = threading.Event()

    def stream() -> None:
        for i in range(total):
            futures.append(producer.send(topic, b"%08d" % i, key=b"key-%d" % (i % 40)))
            if i % 500 == 499:
                time.sleep(0.02)  # spread the stream over the kill and the restart
        sent.set()

    thread = threading.Thread(target=stream)
    thread.start()
    try:
        wait_until(
            lambda: len(futures) > total // 4 and futures[total // 8].done(), 60, "the stream to start"
        )
        broker_up.stop_node(1, kill=True)  # SIGKILL: in-flight requests die with their connections
        time.sleep(1.5)  # the outage's length (fault injection), not synchronisation
        broker_up.restart_node(1)
        thread.join(120)
        assert sent.is_set()
        producer.flush(120)
        # The kill really hit the stream: requests failed and their batches were sent again.
        assert producer.metrics()["producer-metrics:record-retry-total"] > 0
    finally:
        producer.close(10)
    metadata = [f.result(0) for f in futures]  # every record was acknowledged

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker_up.bootstrap_servers,
            "group.id": f"check-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(2000, 1.0)
            got.extend(m for m in batch if m.error() is None)
            if len(got) >= total and not batch:
                break
    finally:
        consumer.close()

    values = [m.value() for m in got]
    assert len(values) == total, f"{len(values)} records in the log for {total} sent (dups or losses)"
    assert sorted(values) == [b"%08d" % i for i in range(total)]
    # Offsets in the futures are where the records are.
    at = {(m.partition(), m.offset()): m.value() for m in got}
    for i, md in enumerate(metadata):
        assert at[(md.partition, md.offset)] == b"%08d" % i
    # Per key (one partition each) the log order is the send order.
    by_key: dict[bytes, list[int]] = defaultdict(list)
    for m in sorted(got, key=lambda m: (m.partition(), m.offset())):
        by_key[m.key()].append(int(m.value()))
    for key, seq in by_key.items():
        assert seq == sorted(seq), f"key {key!r} out of order"
