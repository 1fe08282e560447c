"""Collector: decoding completed fetches on the application thread, max.poll.records, position advance,
stale/paused data dropping, corrupt batches and deserializer errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kafka_handoff.consumer.collector import Collector
from kafka_handoff.consumer.fetcher import CompletedFetch, FetchBuffer
from kafka_handoff.consumer.subscription import FetchPosition, SubscriptionState
from kafka_handoff.errors import CorruptRecordError, OffsetOutOfRangeError, SerializationError
from kafka_handoff.group.membership import Subscription
from kafka_handoff.protocol.records import ControlType, encode_batch, encode_control_batch
from kafka_handoff.types import ConsumerRecord, TopicPartition

pytestmark = pytest.mark.unit

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def batch(base: int, n: int, *, epoch: int = -1, pid: int = -1, txn: bool = False) -> bytes:
    return encode_batch(
        [(b"k%d" % (base + i), b"v%d" % (base + i), 1000 + base + i) for i in range(n)],
        base_offset=base,
        partition_leader_epoch=epoch,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        transactional=txn,
    )


def corrupt(data: bytes) -> bytes:
    """Flip a bit in the records section: the batch fails its CRC."""
    buf = bytearray(data)
    buf[-3] ^= 0x01
    return bytes(buf)


class Harness:
    def __init__(
        self,
        *parts: TopicPartition,
        max_poll_records: int = 500,
        read_committed: bool = False,
        key_deserializer: Callable[[bytes | None], Any] | None = None,
        value_deserializer: Callable[[bytes | None], Any] | None = None,
    ) -> None:
        self.subs = SubscriptionState("latest")
        self.subs.assign_from_user(parts or (A0,))
        self.buffer = FetchBuffer()
        self.counted: list[tuple[TopicPartition, int, int]] = []
        self.collector = Collector(
            self.subs,
            self.buffer,
            max_poll_records=max_poll_records,
            check_crcs=True,
            read_committed=read_committed,
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
            on_records=lambda tp, n, size: self.counted.append((tp, n, size)),
        )

    def fetched(self, tp: TopicPartition, offset: int, data: bytes | None, **kw: Any) -> CompletedFetch:
        """Data fetched at ``offset`` for the partition's current position (seeks there first)."""
        st = self.subs.state(tp)
        if st.position is None or st.position.offset != offset:
            self.subs.seek(tp, offset)
        f = CompletedFetch(tp, offset, self.subs.state(tp).position_epoch, data, **kw)
        self.buffer.add([f])
        return f

    def collect(self) -> dict[TopicPartition, list[ConsumerRecord]]:
        return self.collector.collect()

    def offsets(self) -> dict[TopicPartition, list[int]]:
        return {tp: [r.offset for r in rs] for tp, rs in self.collect().items()}

    def position(self, tp: TopicPartition = A0) -> int | None:
        pos = self.subs.position(tp)
        return None if pos is None else pos.offset


# ---------------------------------------------------------------------------------------------- records


def test_records_are_decoded_and_position_advanced() -> None:
    h = Harness()
    data = batch(10, 3, epoch=4)
    h.fetched(A0, 10, data)
    records = h.collect()[A0]
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (10, b"k10", b"v10", 1010),
        (11, b"k11", b"v11", 1011),
        (12, b"k12", b"v12", 1012),
    ]
    assert records[0].leader_epoch == 4
    assert h.subs.position(A0) == FetchPosition(13, 4)
    assert h.counted == [(A0, 3, len(data))]  # bytes consumed = batch bytes, as Java's fetch metrics
    assert not h.collector.has_data()
    assert h.buffer.buffered_partitions() == set()  # may be fetched again


def test_max_poll_records_respected_across_calls() -> None:
    h = Harness(max_poll_records=2)
    h.fetched(A0, 10, batch(10, 3) + batch(13, 2))
    assert h.offsets() == {A0: [10, 11]}
    assert h.position() == 12
    assert h.buffer.has_buffered(A0)  # not fetched again while records are left
    assert h.offsets() == {A0: [12, 13]}
    assert h.position() == 14
    assert h.offsets() == {A0: [14]}
    assert h.position() == 15
    assert h.offsets() == {}
    assert not h.buffer.has_buffered(A0)


def test_max_poll_records_spans_partitions() -> None:
    h = Harness(A0, B0, max_poll_records=4)
    h.fetched(A0, 0, batch(0, 3))
    h.fetched(B0, 5, batch(5, 3))
    assert h.offsets() == {A0: [0, 1, 2], B0: [5]}
    assert (h.position(A0), h.position(B0)) == (3, 6)
    assert h.offsets() == {B0: [6, 7]}
    assert h.position(B0) == 8


def test_records_before_the_fetch_offset_are_skipped() -> None:
    h = Harness()
    h.fetched(A0, 12, batch(10, 4))  # the batch starts before the position
    assert h.offsets() == {A0: [12, 13]}
    assert h.position() == 14


def test_control_only_data_moves_the_position() -> None:
    h = Harness()
    marker = encode_control_batch(
        ControlType.COMMIT, base_offset=20, producer_id=9, producer_epoch=0, timestamp=1
    )
    h.fetched(A0, 20, marker)
    assert h.collect() == {}
    assert h.position() == 21
    assert not h.buffer.has_buffered(A0)


def test_position_moves_past_a_trailing_marker() -> None:
    h = Harness()
    data = batch(0, 2, pid=9, txn=True) + encode_control_batch(
        ControlType.COMMIT, base_offset=2, producer_id=9, producer_epoch=0, timestamp=1
    )
    h.fetched(A0, 0, data)
    assert h.offsets() == {A0: [0, 1]}
    assert h.position() == 3


def test_aborted_transaction_skipped_with_read_committed() -> None:
    h = Harness(read_committed=True)
    data = (
        batch(0, 2, pid=9, txn=True)
        + encode_control_batch(ControlType.ABORT, base_offset=2, producer_id=9, producer_epoch=0, timestamp=1)
        + batch(3, 1)
    )
    h.fetched(A0, 0, data, aborted_transactions=((9, 0),))
    assert h.offsets() == {A0: [3]}
    assert h.position() == 4


def test_empty_fetch_is_finished_without_moving() -> None:
    h = Harness()
    h.fetched(A0, 5, b"")
    assert h.collect() == {}
    assert h.position() == 5
    assert not h.buffer.has_buffered(A0)


# ---------------------------------------------------------------------------------------------- corrupt data


def test_corrupt_batch_after_two_good_ones() -> None:
    h = Harness()
    h.fetched(A0, 10, batch(10, 2) + batch(12, 2) + corrupt(batch(14, 2)))
    assert h.offsets() == {A0: [10, 11, 12, 13]}  # the good records first
    assert h.position() == 14
    with pytest.raises(CorruptRecordError) as info:
        h.collect()
    err = info.value
    assert (err.topic, err.partition, err.offset) == ("a", 0, 14)
    message = str(err)
    assert "topic a" in message and "partition 0" in message and "offset 14" in message
    assert "CRC" in message
    assert h.position() == 14  # not past the bad batch
    # Fetched again from the bad batch, the error comes again: the consumer never skips data silently.
    assert not h.buffer.has_buffered(A0)
    h.fetched(A0, 14, corrupt(batch(14, 2)))
    with pytest.raises(CorruptRecordError, match="offset 14"):
        h.collect()
    assert h.position() == 14


def test_corrupt_batch_with_max_poll_records_smaller_than_the_good_data() -> None:
    h = Harness(max_poll_records=3)
    h.fetched(A0, 10, batch(10, 2) + batch(12, 2) + corrupt(batch(14, 2)))
    assert h.offsets() == {A0: [10, 11, 12]}
    assert h.offsets() == {A0: [13]}
    assert h.position() == 14
    with pytest.raises(CorruptRecordError, match="offset 14"):
        h.collect()
    assert h.position() == 14


def test_corrupt_first_batch_raises_at_once() -> None:
    h = Harness()
    h.fetched(A0, 10, corrupt(batch(10, 2)) + batch(12, 2))
    with pytest.raises(CorruptRecordError, match="offset 10"):
        h.collect()
    assert h.position() == 10


def test_other_partitions_records_are_not_lost_when_a_batch_is_corrupt() -> None:
    h = Harness(A0, B0)
    h.fetched(A0, 0, batch(0, 2))
    h.fetched(B0, 7, corrupt(batch(7, 2)))
    assert h.offsets() == {A0: [0, 1]}
    assert h.position(A0) == 2
    with pytest.raises(CorruptRecordError, match="offset 7"):
        h.collect()
    assert h.position(B0) == 7


def test_seek_past_a_corrupt_batch_drops_it() -> None:
    h = Harness()
    h.fetched(A0, 10, batch(10, 2) + corrupt(batch(12, 2)))
    assert h.offsets() == {A0: [10, 11]}
    h.subs.seek(A0, 14)
    assert h.collect() == {}
    assert h.position() == 14


def test_error_fetch_after_records_of_another_partition_loses_nothing() -> None:
    h = Harness(A0, B0)
    h.fetched(A0, 0, batch(0, 2))
    h.fetched(B0, 50, None, error=OffsetOutOfRangeError("fetch position 50 is out of range for b-0"))
    assert h.offsets() == {A0: [0, 1]}  # handed out, not lost to the exception
    with pytest.raises(OffsetOutOfRangeError):
        h.collect()
    assert h.position(A0) == 2 and h.position(B0) == 50


def test_error_fetch_alone_raises() -> None:
    h = Harness()
    h.fetched(A0, 50, None, error=OffsetOutOfRangeError("out of range"))
    with pytest.raises(OffsetOutOfRangeError):
        h.collect()
    assert not h.buffer.has_buffered(A0)


# ---------------------------------------------------------------------------------------------- deserializers


def strict_key(raw: bytes | None) -> str:
    assert isinstance(raw, bytes), f"key deserialized twice: {raw!r}"
    return raw.decode()


def value_failing_at(bad: int) -> Callable[[bytes | None], str]:
    def deserialize(raw: bytes | None) -> str:
        assert isinstance(raw, bytes), f"value deserialized twice: {raw!r}"
        if raw == b"v%d" % bad:
            raise ValueError("not JSON")
        return raw.decode()

    return deserialize


def test_deserializers_applied() -> None:
    h = Harness(key_deserializer=strict_key, value_deserializer=value_failing_at(-1))
    h.fetched(A0, 0, batch(0, 2))
    records = h.collect()[A0]
    assert [(r.key, r.value) for r in records] == [("k0", "v0"), ("k1", "v1")]


def test_deserializer_error_names_the_offset_and_keeps_the_position() -> None:
    h = Harness(key_deserializer=strict_key, value_deserializer=value_failing_at(12))
    h.fetched(A0, 10, batch(10, 5))
    records = h.collect()[A0]
    assert [(r.offset, r.value) for r in records] == [(10, "v10"), (11, "v11")]  # the good ones first
    assert h.position() == 12
    for _ in range(2):  # raised again until the application seeks past it
        with pytest.raises(SerializationError) as info:
            h.collect()
        message = str(info.value)
        assert "offset 12" in message and "a-0" in message and "not JSON" in message
        assert h.position() == 12
    h.subs.seek(A0, 13)
    assert h.collect() == {}  # the fetch for the old position is dropped
    h.fetched(A0, 13, batch(13, 2))
    assert [(r.offset, r.key, r.value) for r in h.collect()[A0]] == [(13, "k13", "v13"), (14, "k14", "v14")]


def test_deserializer_error_on_the_first_record_raises_at_once() -> None:
    h = Harness(value_deserializer=value_failing_at(10))
    h.fetched(A0, 10, batch(10, 2))
    with pytest.raises(SerializationError, match="offset 10"):
        h.collect()
    assert h.position() == 10


# ---------------------------------------------------------------------------------------------- dropping


def test_paused_partition_data_is_kept_until_resume() -> None:
    h = Harness(A0, B0, max_poll_records=1)
    h.fetched(A0, 0, batch(0, 3))
    h.fetched(B0, 0, batch(0, 2))
    assert h.offsets() == {A0: [0]}  # A0 is current, partly consumed
    h.subs.pause([A0])
    assert h.offsets() == {B0: [0]}
    assert h.offsets() == {B0: [1]}
    assert h.offsets() == {}
    assert h.position(A0) == 1
    assert h.buffer.has_buffered(A0)  # kept: the fetcher does not fetch it again
    h.subs.resume([A0])
    h.collector.unpark([A0])
    assert h.offsets() == {A0: [1]}
    assert h.offsets() == {A0: [2]}
    assert h.position(A0) == 3


def test_parked_data_of_a_seeked_partition_is_dropped() -> None:
    h = Harness(A0)
    h.fetched(A0, 0, batch(0, 2))
    h.subs.pause([A0])
    assert h.offsets() == {}
    h.subs.seek(A0, 1)
    h.collector.drop_partitions(lambda tp: tp != A0)
    h.subs.resume([A0])
    h.collector.unpark([A0])
    assert h.offsets() == {}
    assert not h.buffer.has_buffered(A0)


def test_excluded_partition_data_is_dropped() -> None:
    h = Harness(A0, B0)
    h.collector.excluded = lambda tp: tp == B0
    h.fetched(A0, 0, batch(0, 1))
    h.fetched(B0, 0, batch(0, 1))
    assert h.offsets() == {A0: [0]}
    assert h.position(B0) == 0


def test_unassigned_partition_data_is_dropped() -> None:
    h = Harness(A0, B0)
    h.fetched(A0, 0, batch(0, 1))
    h.fetched(B0, 0, batch(0, 1))
    h.subs.assign_from_user([B0])
    assert h.offsets() == {B0: [0]}


def test_pending_revocation_and_awaiting_callback_data_is_dropped() -> None:
    h = Harness()
    h.subs.unsubscribe()
    h.subs.subscribe(Subscription(topics=frozenset({"a"})))
    h.subs.set_group_assignment([A0, A1], awaiting=[])
    h.fetched(A0, 0, batch(0, 1))
    h.fetched(A1, 0, batch(0, 1))
    h.subs.mark_pending_revocation([A0])
    h.subs.set_group_assignment([A0, A1], awaiting=[A1])
    assert h.collect() == {}
    assert (h.position(A0), h.position(A1)) == (0, 0)


def test_stale_fetch_for_an_old_position_is_dropped() -> None:
    h = Harness()
    h.fetched(A0, 0, batch(0, 3))
    h.subs.seek(A0, 0)  # same offset, but a new seek: the data may be from before it
    assert h.collect() == {}
    assert h.position() == 0


def test_partially_consumed_fetch_is_dropped_after_a_seek() -> None:
    h = Harness(max_poll_records=1)
    h.fetched(A0, 0, batch(0, 3))
    assert h.offsets() == {A0: [0]}
    h.subs.seek(A0, 100)
    assert h.collect() == {}
    assert h.position() == 100
    assert not h.buffer.has_buffered(A0)


def test_drop_partitions_drops_current_and_queued() -> None:
    h = Harness(A0, B0, max_poll_records=1)
    h.fetched(A0, 0, batch(0, 3))
    h.fetched(B0, 0, batch(0, 3))
    assert h.offsets() == {A0: [0]}
    assert h.collector.has_data()
    h.collector.drop_partitions(lambda tp: False)
    assert not h.collector.has_data()
    assert h.buffer.buffered_partitions() == set()
    assert h.collect() == {}
