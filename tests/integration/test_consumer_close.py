"""close(timeout) returns within its timeout even when the broker is gone (issue: consumer core)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_handoff import devbroker
from kafka_handoff.consumer import Consumer
from kafka_handoff.producer import Producer
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.integration


@pytest.fixture
def private_broker() -> Iterator[Any]:
    cluster = devbroker.start(1)
    try:
        yield cluster
    finally:
        cluster.stop()


def _wait_for_records(consumer: Consumer, count: int, timeout_s: float = 60.0) -> int:
    got = 0
    deadline = time.monotonic() + timeout_s
    while got < count:
        assert time.monotonic() < deadline, f"consumed only {got} of {count} records"
        got += len(consumer.poll(0.5))
    return got


@pytest.mark.parametrize("protocol", ["classic", "consumer", None])
def test_close_is_bounded_with_the_broker_stopped(private_broker: Any, protocol: str | None) -> None:
    bootstrap = private_broker.bootstrap_servers
    topic = f"close-{protocol or 'assign'}"
    private_broker.create_topic(topic, partitions=2)
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(20):
            producer.send(topic, b"v%d" % i, partition=i % 2)
        producer.flush(30)

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "auto.offset.reset": "earliest",
        "group.id": f"g-{topic}",
        "enable.auto.commit": True,
        "default.api.timeout.ms": 600_000,
        "request.timeout.ms": 600_000,
    }
    consumer = Consumer(config if protocol is None else {**config, "group.protocol": protocol})
    if protocol is None:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    else:
        consumer.subscribe([topic])
    _wait_for_records(consumer, 20)

    private_broker.stop()  # the consumer now has a commit and (for groups) a leave it cannot send

    # close(3.0) on another thread, awaited for 60 s: far above 3 s even on a loaded machine, far below the
    # 10 minutes the commit or leave could be retried for (default.api.timeout.ms and request.timeout.ms
    # are set that long above) if close ignored its own timeout.
    closer = threading.Thread(target=consumer.close, kwargs={"timeout": 3.0}, daemon=True)
    closer.start()
    closer.join(60)
    assert not closer.is_alive(), "close(3.0) did not return with the broker stopped"
    assert not consumer._thread.alive, "the network thread outlived close()"
