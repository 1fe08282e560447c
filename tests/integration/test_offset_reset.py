"""Offset reset against the real broker (issue 14 item 11): ``auto.offset.reset=none`` raises from every
poll() until the application seeks; ``by_duration`` with no record newer than the duration starts at the
end instead of retrying forever."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafka_handoff.consumer import Consumer
from kafka_handoff.errors import NoOffsetForPartitionError
from kafka_handoff.producer import Producer
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.integration


def _produce(bootstrap: str, topic: str, count: int) -> None:
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(count):
            producer.send(topic, b"v%d" % i, partition=0)
        producer.flush(30)


def test_no_offset_is_raised_by_every_poll_until_the_application_seeks(
    broker: Any, topic_factory: Any
) -> None:
    topic = topic_factory(partitions=1)
    _produce(broker.bootstrap_servers, topic, 10)
    tp = TopicPartition(topic, 0)
    config = {
        "bootstrap.servers": broker.bootstrap_servers,
        "auto.offset.reset": "none",
        "group.id": f"g-{topic}",
    }
    with Consumer(config) as consumer:
        consumer.assign([tp])
        deadline = time.monotonic() + 30
        raised = 0
        while raised < 3:  # the first once the committed-offset lookup found nothing, then every poll
            assert time.monotonic() < deadline, f"raised only {raised} times"
            try:
                consumer.poll(0.2)
            except NoOffsetForPartitionError as exc:
                assert exc.partitions == {tp}
                raised += 1
        consumer.seek(tp, 4)
        offsets: list[int] = []
        while len(offsets) < 6:
            assert time.monotonic() < deadline, f"after the seek got only {offsets}"
            offsets.extend(r.offset for r in consumer.poll(0.2))
        assert offsets == list(range(4, 10))


def test_by_duration_without_a_newer_record_starts_at_the_end(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    _produce(broker.bootstrap_servers, topic, 10)
    tp = TopicPartition(topic, 0)
    time.sleep(0.05)  # the records' timestamps must lie before "now - 0 s"
    config = {"bootstrap.servers": broker.bootstrap_servers, "auto.offset.reset": "by_duration:PT0S"}
    with Consumer(config) as consumer:
        consumer.assign([tp])
        assert consumer.position(tp, timeout=30) == 10
