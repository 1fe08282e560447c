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
from typing import Any, cast

import pytest

from kafka_handoff import devbroker
from kafka_handoff.consumer import Consumer
from kafka_handoff.errors import IllegalStateError, KafkaTimeoutError
from kafka_handoff.producer import Producer
from kafka_handoff.types import RecordMetadata

pytestmark = pytest.mark.integration


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


Logged = tuple[int, int, bytes | None, bytes]
"""A record read back: (partition, offset, key, value)."""


def read_log(bootstrap: str, topic: str, total: int) -> list[Logged]:
    """Everything in ``topic`` (until ``total`` records and then a quiet second), read by confluent-kafka
    -- an independent reader, so a bug in our consumer cannot hide one in our producer -- when it is
    installed, else by our own consumer (CI always has confluent-kafka: see tests/conftest.py)."""
    got: list[Logged] = []
    deadline = time.monotonic() + 120
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": f"check-{topic}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    try:
        import confluent_kafka
    except ImportError:
        with Consumer(config) as consumer:
            consumer.subscribe([topic])
            while time.monotonic() < deadline:
                records = consumer.poll(1.0)
                got.extend((r.partition, r.offset, r.key, r.value or b"") for r in records)
                if len(got) >= total and not records:
                    break
        return got
    oracle = confluent_kafka.Consumer(config)
    oracle.subscribe([topic])
    try:
        while time.monotonic() < deadline:
            batch = oracle.consume(2000, 1.0)
            got.extend(
                cast(Logged, (m.partition(), m.offset(), m.key(), m.value()))
                for m in batch
                if m.error() is None
            )
            if len(got) >= total and not batch:
                break
    finally:
        oracle.close()
    return got


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def closes(producer: Producer, timeout: float) -> None:
    """``producer.close(timeout)`` on another thread, awaited for 60 s: far above ``timeout`` even on a
    loaded machine, far below the 10-minute delivery.timeout.ms a close ignoring its timeout would wait."""
    closer = threading.Thread(target=producer.close, args=(timeout,), daemon=True)
    closer.start()
    closer.join(60)
    assert not closer.is_alive(), f"close({timeout}) did not return"


def test_close_is_bounded_with_the_broker_down(broker_up: devbroker.Cluster) -> None:
    topic = new_topic(broker_up, 2)
    producer = Producer(
        {"bootstrap.servers": broker_up.bootstrap_servers, "linger.ms": 0, "delivery.timeout.ms": 600_000}
    )
    producer.send(topic, b"first").result(30)
    broker_up.stop_node(1, kill=True)
    futures = [producer.send(topic, b"x%d" % i) for i in range(200)]
    closes(producer, 2.0)
    for fut in futures:  # failed by the close (not by their delivery timeout, which is far away)
        error = fut.exception(5)
        assert isinstance(error, IllegalStateError)
        assert "closed before the record could be delivered" in str(error)


def test_close_is_bounded_when_no_broker_was_ever_reachable() -> None:
    producer = Producer(
        {"bootstrap.servers": "127.0.0.1:1", "max.block.ms": 500, "delivery.timeout.ms": 600_000}
    )
    fut = producer.send("nowhere", b"x")  # waits max.block.ms for metadata
    assert isinstance(fut.exception(0), KafkaTimeoutError)
    assert "not present in metadata after 500 ms" in str(fut.exception(0))
    closes(producer, 1.0)


def test_flush_times_out_naming_the_records_not_delivered(broker_up: devbroker.Cluster) -> None:
    """flush(timeout) raises KafkaTimeoutError when the records cannot be delivered by then (the broker is
    down); the records stay pending (their delivery timeout is far away) until close fails them."""
    topic = new_topic(broker_up, 1)
    config = {
        "bootstrap.servers": broker_up.bootstrap_servers,
        "linger.ms": 0,
        "delivery.timeout.ms": 600_000,
    }
    producer = Producer(config)
    try:
        producer.send(topic, b"first").result(30)  # metadata and producer id are known
        broker_up.stop_node(1, kill=True)
        futures = [producer.send(topic, b"x%d" % i) for i in range(3)]
        with pytest.raises(KafkaTimeoutError, match=r"flush timed out after 1\.0 s with 3 record\(s\) not"):
            producer.flush(1.0)
        assert not any(f.done() for f in futures)  # flush gave up waiting; it failed no record
    finally:
        closes(producer, 0)
    for f in futures:
        assert isinstance(f.exception(0), IllegalStateError)  # failed by the close


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
        error = fut.exception(60)  # an event wait: a record retried for ever would never fail
        elapsed = time.monotonic() - start
        assert isinstance(error, KafkaTimeoutError)
        assert "Expiring 1 record(s)" in str(error) and "delivery.timeout.ms=3000" in str(error)
        # Not before its delivery timeout (a lower bound: a slow machine only makes it later).
        assert elapsed >= 2.9  # (less the client clock's millisecond rounding)
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

    got = read_log(broker_up.bootstrap_servers, topic, total)
    values = [value for _p, _o, _k, value in got]
    assert len(values) == total, f"{len(values)} records in the log for {total} sent (dups or losses)"
    assert sorted(values) == [b"%08d" % i for i in range(total)]
    # Offsets in the futures are where the records are.
    at = {(p, o): value for p, o, _k, value in got}
    for i, md in enumerate(metadata):
        assert at[(md.partition, md.offset)] == b"%08d" % i
    # Per key (one partition each) the log order is the send order.
    by_key: dict[bytes | None, list[int]] = defaultdict(list)
    for _p, _o, key, value in sorted(got):
        by_key[key].append(int(value))
    for key, seq in by_key.items():
        assert seq == sorted(seq), f"key {key!r} out of order"
