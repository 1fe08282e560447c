"""A compressed batch that expands beyond ``max.decompressed.batch.bytes`` (a decompression bomb: zstd of
zeros reaches thousands to one) reaches the application from ``poll()`` as a ``CorruptRecordError`` naming
topic, partition and offset -- the consumer does not allocate what the batch expands to (issue 34 item 3).

The batch is produced through the real broker (which accepts it: it is a valid batch) by a producer allowed
to send large records; the consumer's limit is set low so the test stays small (the default, 64 MiB, is
checked on a 100 MiB batch by tests/unit/test_decompression_bound.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from kafka_handoff import devbroker
from kafka_handoff.consumer import Consumer
from kafka_handoff.errors import CorruptRecordError
from kafka_handoff.producer import Producer
from kafka_handoff.types import ConsumerRecord, TopicPartition

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


def _poll_until(consumer: Consumer, done: Callable[[list[ConsumerRecord]], bool]) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + 60
    while not done(got):
        assert time.monotonic() < deadline, f"only {len(got)} records"
        got.extend(consumer.poll(0.2))
    return got


def test_zstd_bomb_is_refused_naming_topic_partition_offset(
    broker: devbroker.Cluster, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(1, 1)
    config = {
        "bootstrap.servers": broker.bootstrap_servers,
        "compression.type": "zstd",
        "linger.ms": 60_000,  # each group below is one batch, sent by flush()
        "batch.size": 16 * MIB,
        "max.request.size": 16 * MIB,
    }
    zeros = bytes(MIB)
    with Producer(config) as producer:
        for i in range(3):  # offsets 0-2: a small batch
            producer.send(topic, b"before-%d" % i, partition=0)
        producer.flush(30)
        for _ in range(8):  # offsets 3-10: 8 MiB of zeros, a few KiB compressed
            producer.send(topic, zeros, partition=0)
        producer.flush(60)
        for i in range(3):  # offsets 11-13
            producer.send(topic, b"after-%d" % i, partition=0)
        producer.flush(30)

    tp = TopicPartition(topic, 0)
    consumer_config = {
        "bootstrap.servers": broker.bootstrap_servers,
        "auto.offset.reset": "earliest",
        "max.decompressed.batch.bytes": 4 * MIB,
        "max.partition.fetch.bytes": 64 * 1024,
    }
    with Consumer(consumer_config) as consumer:
        consumer.assign([tp])
        good = _poll_until(consumer, lambda got: len(got) >= 3)
        assert [r.value for r in good] == [b"before-0", b"before-1", b"before-2"]
        deadline = time.monotonic() + 60
        with pytest.raises(CorruptRecordError) as info:
            while time.monotonic() < deadline:
                assert not consumer.poll(0.2), "records of the bomb batch were delivered"
        error = info.value
        assert (error.topic, error.partition, error.offset) == (topic, 0, 3)
        assert f"topic {topic}, partition 0, batch at offset 3" in str(error)
        assert "more than 4194304 bytes" in str(error) and "max.decompressed.batch.bytes" in str(error)
        assert consumer.position(tp) == 3
        consumer.seek(tp, 11)
        rest = _poll_until(consumer, lambda got: len(got) >= 3)
        assert [r.value for r in rest] == [b"after-0", b"after-1", b"after-2"]
