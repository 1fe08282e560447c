"""A record batch corrupted on the broker's disk reaches the application from ``poll()`` as a
``CorruptRecordError`` naming topic, partition and offset (the Collector path, issue 13 item 7).

The broker does not check CRCs when it serves a fetch, so a byte flipped in a segment file (the broker
reads it through the same page cache) arrives as-is; the consumer's CRC check must catch it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kafka_handoff import devbroker
from kafka_handoff.consumer import Consumer
from kafka_handoff.errors import CorruptRecordError
from kafka_handoff.producer import Producer
from kafka_handoff.protocol.records import iter_batch_headers
from kafka_handoff.types import ConsumerRecord, TopicPartition

pytestmark = pytest.mark.integration


def _segment(broker: devbroker.Cluster, topic: str) -> Path:
    (node,) = broker.nodes
    (segment,) = (node.spec().data_dir / f"{topic}-0").glob("*.log")
    return segment


def _poll_until(consumer: Consumer, done: Callable[[list[ConsumerRecord]], bool]) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + 30
    while not done(got):
        assert time.monotonic() < deadline, f"only {len(got)} records"
        got.extend(consumer.poll(0.2))
    return got


def test_corrupt_batch_on_disk_raises_from_poll_naming_topic_partition_offset(
    broker: devbroker.Cluster, topic_factory: Callable[..., str]
) -> None:
    if not isinstance(broker, devbroker.Cluster):
        pytest.skip("needs the broker started by the test run (its segment files are edited)")
    topic = topic_factory(1, 1)
    # A long linger keeps each group of five in one batch until flush() sends it, however busy the machine.
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 60_000}) as producer:
        for base in (0, 5, 10):  # three batches: offsets 0-4, 5-9, 10-14
            for i in range(base, base + 5):
                producer.send(topic, b"value-%d" % i, partition=0)
            producer.flush(30)
    segment = _segment(broker, topic)
    data = bytearray(segment.read_bytes())
    headers = list(iter_batch_headers(bytes(data)))
    assert [h.base_offset for h in headers] == [0, 5, 10]
    position = headers[0].size_in_bytes
    last = position + headers[1].size_in_bytes - 1  # the last byte of the second batch's records
    with segment.open("r+b") as f:
        f.seek(last)
        f.write(bytes([data[last] ^ 0x5A]))

    tp = TopicPartition(topic, 0)
    config = {"bootstrap.servers": broker.bootstrap_servers, "auto.offset.reset": "earliest"}
    with Consumer(config) as consumer:
        consumer.assign([tp])
        good = _poll_until(consumer, lambda got: len(got) >= 5)
        assert [r.offset for r in good] == [0, 1, 2, 3, 4]
        for _ in range(2):  # raised again until the application moves past it
            deadline = time.monotonic() + 30
            with pytest.raises(CorruptRecordError) as info:
                while time.monotonic() < deadline:
                    assert not consumer.poll(0.2), "records past the corrupt batch"
            error = info.value
            assert (error.topic, error.partition, error.offset) == (topic, 0, 5)
            assert f"topic {topic}, partition 0, batch at offset 5" in str(error)
            assert "CRC" in str(error)
            assert consumer.position(tp) == 5
        consumer.seek(tp, 10)
        rest = _poll_until(consumer, lambda got: len(got) >= 5)
        assert [r.offset for r in rest] == [10, 11, 12, 13, 14]
