"""The consumer in assign mode against the real broker (issue: consumer core)."""

from __future__ import annotations

import hashlib
import sys
import threading
import time
from collections import defaultdict
from typing import Any

import pytest

from kafka_handoff import IllegalStateError, WakeupError
from kafka_handoff.consumer import Consumer
from kafka_handoff.producer import Producer
from kafka_handoff.types import OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.integration


def confluent() -> Any:
    """confluent-kafka, the independent writer of the interop tests (they alone skip without it)."""
    return pytest.importorskip("confluent_kafka")


def produce_small(bootstrap: str, topic: str, count: int, *, partitions: int) -> None:
    """``count`` small records round-robin over partitions, with our producer (setup only)."""
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
        for i in range(count):
            producer.send(topic, b"%012d" % i + b"x" * 8, key=b"k%d" % i, partition=i % partitions)
        producer.flush(60)


def produce(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    partitions: int,
    value_bytes: int = 100,
    compression: str = "none",
    extra: dict[str, Any] | None = None,
) -> dict[int, str]:
    """Produce ``count`` records round-robin over partitions with librdkafka; return per-partition digests."""
    conf = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 20,
        "batch.num.messages": 5000,
        "compression.type": compression,
        "enable.idempotence": True,  # strict order per partition, so the digests compare log order
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
    }
    conf.update(extra or {})
    producer = confluent().Producer(conf)
    digests = {p: hashlib.sha256() for p in range(partitions)}
    pad = b"x" * max(0, value_bytes - 12)
    for i in range(count):
        p = i % partitions
        value = b"%012d" % i + pad
        key = b"k%d" % i
        while True:
            try:
                producer.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=p,
                    headers=[("h", b"%d" % (i % 7))] if i % 97 == 0 else None,
                )
                break
            except BufferError:
                producer.poll(0.05)
        digests[p].update(key + b"|" + value)
        if i % 10000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return {p: d.hexdigest() for p, d in digests.items()}


def consume_all(consumer: Consumer, expected: int, timeout_s: float = 180.0) -> dict[int, list[Any]]:
    by_partition: dict[int, list[Any]] = defaultdict(list)
    got = 0
    deadline = time.monotonic() + timeout_s
    while got < expected:
        assert time.monotonic() < deadline, f"consumed only {got} of {expected} records"
        records = consumer.poll(1.0)
        for r in records:
            by_partition[r.partition].append(r)
        got += len(records)
    return by_partition


def check_order_and_digests(by_partition: dict[int, list[Any]], digests: dict[int, str]) -> None:
    for p, expected_digest in digests.items():
        records = by_partition.get(p, [])
        offsets = [r.offset for r in records]
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not contiguous from 0"
        d = hashlib.sha256()
        for r in records:
            d.update(r.key + b"|" + r.value)
        assert d.hexdigest() == expected_digest, f"partition {p}: content differs"


@pytest.mark.slow
def test_one_million_uncompressed_records_in_order(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=8)
    count = 1_000_000
    digests = produce(broker.bootstrap_servers, topic, count, partitions=8)
    with Consumer({"bootstrap.servers": broker.bootstrap_servers, "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition(topic, p) for p in range(8)])
        by_partition = consume_all(c, count)
        assert sum(len(v) for v in by_partition.values()) == count
        check_order_and_digests(by_partition, digests)
        assert c.poll(0.2).count() == 0  # nothing beyond what was produced


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_records_in_order(broker: Any, topic_factory: Any, codec: str) -> None:
    topic = topic_factory(partitions=8)
    count = 100_000
    digests = produce(broker.bootstrap_servers, topic, count, partitions=8, compression=codec)
    with Consumer({"bootstrap.servers": broker.bootstrap_servers, "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition(topic, p) for p in range(8)])
        by_partition = consume_all(c, count)
        check_order_and_digests(by_partition, digests)


def test_headers_keys_timestamps_roundtrip(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    p = confluent().Producer({"bootstrap.servers": broker.bootstrap_servers})
    p.produce(
        topic,
        value=b"v1",
        key=None,
        partition=0,
        timestamp=1_600_000_000_123,
        headers=[("a", b"1"), ("b", None), ("a", b"2")],
    )
    p.produce(topic, value=None, key=b"tombstone", partition=0)
    assert p.flush(30) == 0
    with Consumer({"bootstrap.servers": broker.bootstrap_servers, "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition(topic, 0)])
        records = list(consume_all(c, 2)[0])
    first, second = records
    assert (first.key, first.value, first.timestamp) == (None, b"v1", 1_600_000_000_123)
    assert list(first.headers) == [("a", b"1"), ("b", None), ("a", b"2")]
    assert (second.key, second.value) == (b"tombstone", None)
    assert first.leader_epoch is not None and first.leader_epoch >= 0


def test_read_committed_hides_aborted_transactions(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    tp = TopicPartition(topic, 0)
    producer = confluent().Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"tx-{topic}"}
    )
    producer.init_transactions(30)
    for txn, commit in enumerate([True, False, True, False, True]):
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, value=b"%d-%d-%s" % (txn, i, b"c" if commit else b"a"), partition=0)
        producer.flush(30)  # write the records before the marker, so aborted data is really in the log
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    committed_expected = [b"%d-%d-c" % (t, i) for t in (0, 2, 4) for i in range(10)]

    with Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    ) as c:
        c.assign([tp])
        values = [r.value for r in consume_all(c, 30)[0]]
        assert values == committed_expected
        # The position moved past the final commit marker, and nothing else arrives.
        assert c.poll(0.5).count() == 0
        end = c.end_offsets([tp])[tp]
        assert c.position(tp) == end

    with Consumer({"bootstrap.servers": broker.bootstrap_servers, "auto.offset.reset": "earliest"}) as c:
        c.assign([tp])
        values = [r.value for r in consume_all(c, 50)[0]]
        assert len(values) == 50  # read_uncommitted sees aborted records too
        assert sum(1 for v in values if v.endswith(b"-a")) == 20


def test_seek_pause_resume_and_commit(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    produce_small(broker.bootstrap_servers, topic, 200, partitions=2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    group = f"g-{topic}"
    with Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    ) as c:
        c.assign([tp0, tp1])
        assert c.assignment() == {tp0, tp1}
        assert c.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert c.end_offsets([tp0, tp1]) == {tp0: 100, tp1: 100}
        assert c.position(tp0) == 0

        c.pause([tp1])
        assert c.paused() == {tp1}
        got = consume_all(c, 100)
        assert set(got) == {0}, "a paused partition returned records"
        assert c.poll(0.3).count() == 0
        c.resume([tp1])
        got = consume_all(c, 100)
        assert [r.offset for r in got[1]] == list(range(100))

        c.seek(tp0, 42)
        assert c.position(tp0) == 42
        got = consume_all(c, 58)
        assert [r.offset for r in got[0]] == list(range(42, 100))

        c.seek_to_beginning([tp1])
        assert c.position(tp1) == 0
        c.seek_to_end([tp0])
        assert c.position(tp0) == 100

        c.commit_sync({tp0: OffsetAndMetadata(17, "meta"), tp1: 33})
        committed = c.committed([tp0, tp1])
        c0, c1 = committed[tp0], committed[tp1]
        assert c0 is not None and c0.offset == 17
        assert c0.metadata == "meta"
        assert c1 is not None and c1.offset == 33

        results: list[Any] = []
        c.commit_async({tp0: 18}, callback=lambda offsets, err: results.append((offsets, err)))
        deadline = time.monotonic() + 30
        while not results:
            assert time.monotonic() < deadline
            c.poll(0.1)
        assert results[0][1] is None
        assert c.committed([tp0])[tp0].offset == 18  # type: ignore[union-attr]

    # A new consumer in the same group starts at the committed offsets.
    with Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest"}
    ) as c:
        c.assign([tp0, tp1])
        assert c.position(tp0) == 18
        assert c.position(tp1) == 33


def test_auto_offset_reset_latest_and_none(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    produce_small(broker.bootstrap_servers, topic, 10, partitions=1)
    tp = TopicPartition(topic, 0)
    with Consumer({"bootstrap.servers": broker.bootstrap_servers}) as c:  # default: latest
        c.assign([tp])
        assert c.position(tp) == 10
    with Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "auto.offset.reset": "none",
            "group.id": f"none-{topic}",
        }
    ) as c:
        c.assign([tp])
        from kafka_handoff.errors import NoOffsetForPartitionError

        with pytest.raises(NoOffsetForPartitionError, match=str(tp)):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                c.poll(0.2)


def _waiting_in(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` is inside ``function`` and blocked deeper down, in a ``wait``."""
    frame = sys._current_frames().get(thread.ident or -1)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return function in names and "wait" in names[: names.index(function)]


def test_wakeup_interrupts_blocking_poll(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    with Consumer({"bootstrap.servers": broker.bootstrap_servers}) as c:
        c.assign([TopicPartition(topic, 0)])
        c.poll(0)  # the position is known: nothing left but to wait for records
        outcome: list[BaseException | int] = []

        def poll() -> None:
            try:
                outcome.append(c.poll(600).count())  # no records come: only wakeup() ends this early
            except BaseException as exc:
                outcome.append(exc)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        deadline = time.monotonic() + 30
        while not _waiting_in(poller, "_poll"):  # the poll is blocking (waiting for records) ...
            assert time.monotonic() < deadline and poller.is_alive(), f"poll() never blocked: {outcome}"
            time.sleep(0.01)
        c.wakeup()  # ... when the wakeup arrives
        poller.join(30)
        assert not poller.is_alive(), "wakeup() did not interrupt the blocking poll(600)"
        assert len(outcome) == 1 and isinstance(outcome[0], WakeupError), outcome
        assert c.poll(0).count() == 0  # usable afterwards


def test_closed_consumer_rejects_calls(broker: Any) -> None:
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers})
    c.close()
    with pytest.raises(IllegalStateError):
        c.poll(0)
    c.close()  # idempotent


def test_list_topics_and_partitions_for(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=3)
    with Consumer({"bootstrap.servers": broker.bootstrap_servers}) as c:
        parts = c.partitions_for(topic)
        assert sorted(p.partition for p in parts) == [0, 1, 2]
        assert all(p.leader >= 0 for p in parts)
        topics = c.list_topics()
        assert topic in topics
        assert "__consumer_offsets" not in topics
