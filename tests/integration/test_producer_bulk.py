"""``send_many()`` and ``send_nowait()`` against the real broker: every record arrives once, in order per
partition, keyed ones where ``send()`` (and Java) put them; callbacks run; a delivery failure of records
without a future or callback reaches the application once, from the next ``flush()``."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import pytest

from kafka_handoff.consumer import Consumer
from kafka_handoff.errors import DeliveryFailedError, MessageTooLargeError
from kafka_handoff.producer import Producer, key_partition
from kafka_handoff.types import RecordMetadata, TopicPartition

pytestmark = pytest.mark.integration


def read_ours(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60) -> list[Any]:
    got: list[Any] = []
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(got) < expected:
            assert time.monotonic() < deadline, f"read {len(got)} of {expected} records"
            got.extend(consumer.poll(0.5))
        got.extend(consumer.poll(0.5))  # nothing more may come
    return got


def test_send_many_and_send_nowait_deliver_every_record_in_order(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=3)
    unkeyed = [b"u-%05d" % i for i in range(3000)]
    keys = [b"key-%d" % (i % 40) for i in range(600)]
    keyed = [b"k-%05d" % i for i in range(600)]
    nowait = [b"n-%03d" % i for i in range(200)]
    called: list[RecordMetadata] = []
    lock = threading.Lock()

    def callback(md: RecordMetadata | None, error: BaseException | None) -> None:
        assert error is None and md is not None
        with lock:
            called.append(md)

    with Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5, "batch.size": 4096}) as p:
        for start in range(0, len(unkeyed), 700):  # several calls, batches spanning them
            p.send_many(topic, unkeyed[start : start + 700])
        p.send_many(topic, keyed, keys, callback=callback)
        for i, value in enumerate(nowait):
            p.send_nowait(topic, value, partition=i % 3, callback=callback if i % 2 else None)
        p.send_many(topic, [b"explicit"] * 5, partition=2, timestamp=1_700_000_000_000)
        p.flush(60)
    assert len(called) == len(keyed) + len(nowait) // 2

    records = read_ours(broker.bootstrap_servers, topic, 3, len(unkeyed) + len(keyed) + len(nowait) + 5)
    by_partition: dict[int, list[Any]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        by_partition[r.partition].append(r)
    values = [r.value for r in records]
    assert sorted(values) == sorted(unkeyed + keyed + nowait + [b"explicit"] * 5)  # each once
    for part, rs in by_partition.items():
        for prefix in (b"u-", b"k-", b"n-"):
            seq = [r.value for r in rs if r.value.startswith(prefix)]
            assert seq == sorted(seq), (part, prefix)  # send order kept within the partition
    for r in records:
        if r.value.startswith(b"k-"):
            assert r.key == keys[int(r.value[2:])]
            assert r.partition == key_partition(r.key, 3)  # where send() and Java put it
        if r.value.startswith(b"n-"):
            assert r.partition == int(r.value[2:]) % 3
    assert {r.timestamp for r in records if r.value == b"explicit"} == {1_700_000_000_000}
    assert {r.partition for r in records if r.value == b"explicit"} == {2}
    # The callbacks got the records' real offsets.
    offsets = {(r.partition, r.offset): r.value for r in records}
    assert all(offsets[(md.partition, md.offset)].startswith((b"k-", b"n-")) for md in called)


def test_failed_delivery_without_future_is_raised_once_by_the_next_flush(
    broker: Any, topic_factory: Any
) -> None:
    # The broker refuses batches over 1000 bytes; the producer builds bigger ones.
    topic = topic_factory(partitions=1, configs={"max.message.bytes": "1000"})
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "batch.size": 16384, "linger.ms": 20}) as p:
        p.send_many(topic, [b"x" * 300] * 20)
        with pytest.raises(DeliveryFailedError) as info:
            p.flush(60)
        assert info.value.failed == 20
        assert isinstance(info.value.cause, MessageTooLargeError)
        p.flush(10)  # reported once: nothing more to raise
        # A record that can never be sent fails at once, in the caller, without a callback.
        with pytest.raises(MessageTooLargeError, match=r"max\.request\.size"):
            p.send_nowait(topic, b"y" * 2_000_000)
        with pytest.raises(MessageTooLargeError):
            p.send_many(topic, [b"small", b"z" * 2_000_000])
        with pytest.raises(MessageTooLargeError):  # 600,000 characters, 1.2 MB of UTF-8
            p.send_many(topic, ["é" * 600_000])
        p.flush(10)  # nothing of the refused calls was queued, nothing failed later
