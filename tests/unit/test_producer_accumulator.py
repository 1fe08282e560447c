"""The record accumulator: batching by batch.size, linger, readiness, draining, the memory bound, expiry,
retry order, sticky partitioning of unkeyed records and network-thread wakeups."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future

import pytest

from kafka_handoff.errors import IllegalStateError, KafkaTimeoutError
from kafka_handoff.producer.accumulator import RecordAccumulator
from kafka_handoff.producer.batch import RECORD_OVERHEAD_ESTIMATE, Entry, ProducerBatch
from kafka_handoff.protocol.compression import CompressionType
from kafka_handoff.protocol.records import RECORD_BATCH_OVERHEAD
from kafka_handoff.types import RecordMetadata, TopicPartition

pytestmark = pytest.mark.unit

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
VALUE = b"x" * 88  # + 12 bytes estimated overhead = 100 bytes per record
SIZE = len(VALUE) + RECORD_OVERHEAD_ESTIMATE


def entry(value: bytes = VALUE) -> Entry:
    fut: Future[RecordMetadata] = Future()
    return (None, value, 0, None, fut, None)


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Clock:
    """A settable clock for the accumulator (milliseconds)."""

    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def make(**kwargs: object) -> RecordAccumulator:
    params: dict[str, object] = {
        "batch_size": 1000,
        "linger_ms": 10,
        "rng": random.Random(1),
        "clock": Clock(),
    }
    params.update(kwargs)
    acc = RecordAccumulator(**params)  # type: ignore[arg-type]
    acc.update_topic("t", 2, [0, 1])
    return acc


LEADERS = {T0: 1, T1: 2}
BY_NODE = {1: [T0], 2: [T1]}


def test_records_fill_a_batch_up_to_batch_size() -> None:
    acc = make()
    for _ in range(9):
        acc.append("t", 0, entry(), SIZE, 0)
    (batch,) = acc.queued_batches(T0)
    assert batch.record_count == 9 and not batch.closed
    acc.append("t", 0, entry(), SIZE, 0)  # 61 + 10 x 100 > 1000: a new batch
    first, second = acc.queued_batches(T0)
    assert first.closed and first.record_count == 9 and second.record_count == 1
    assert first.size <= 1000


def test_a_record_larger_than_batch_size_gets_its_own_batch() -> None:
    acc = make()
    acc.append("t", 0, entry(), SIZE, 0)
    acc.append("t", 0, entry(b"y" * 5000), 5000 + RECORD_OVERHEAD_ESTIMATE, 0)
    acc.append("t", 0, entry(), SIZE, 0)
    counts = [b.record_count for b in acc.queued_batches(T0)]
    assert counts == [1, 1, 1]


def test_linger_then_ready() -> None:
    acc = make(linger_ms=10, clock=Clock(1000))
    acc.append("t", 0, entry(), SIZE)
    check = acc.ready(LEADERS, 1005)
    assert check.nodes == set() and check.next_ready_ms == 1010
    assert acc.ready(LEADERS, 1010).nodes == {1}


def test_full_batch_is_ready_before_linger() -> None:
    acc = make(linger_ms=10_000)
    for _ in range(10):
        acc.append("t", 0, entry(), SIZE, 0)
    assert acc.ready(LEADERS, 1).nodes == {1}


def test_flush_and_close_make_everything_ready() -> None:
    acc = make(linger_ms=10_000)
    acc.append("t", 0, entry(), SIZE, 0)
    assert acc.ready(LEADERS, 1).nodes == set()
    acc.begin_flush()
    assert acc.ready(LEADERS, 1).nodes == {1}
    acc.end_flush()
    assert acc.ready(LEADERS, 1).nodes == set()
    acc.close()
    assert acc.ready(LEADERS, 1).nodes == {1}
    with pytest.raises(IllegalStateError):
        acc.append("t", 0, entry(), SIZE, 0)


def test_unknown_leader_is_reported() -> None:
    acc = make(linger_ms=0)
    acc.append("t", 1, entry(), SIZE, 0)
    check = acc.ready({T0: 1}, 5)
    assert check.nodes == set() and check.unknown_leader_topics == {"t"}


def test_drain_takes_one_batch_per_partition_and_closes_it() -> None:
    acc = make(linger_ms=0)
    for _ in range(25):
        acc.append("t", 0, entry(), SIZE, 0)
    drained = acc.drain({1: [T0]}, [1], 1_000_000, 0)
    (batch,) = drained[1]
    assert batch.closed and batch.record_count == 9
    assert len(acc.queued_batches(T0)) == 2
    # The open batch is no longer appendable once drained.
    acc.drain({1: [T0]}, [1], 1_000_000, 0)
    (last,) = acc.queued_batches(T0)
    acc.drain({1: [T0]}, [1], 1_000_000, 0)
    assert last.closed
    acc.append("t", 0, entry(), SIZE, 0)
    assert acc.queued_batches(T0)[0] is not last


def test_drain_respects_max_request_size_but_always_takes_one() -> None:
    acc = make(linger_ms=0, batch_size=100_000)
    acc.update_topic("t", 3, [0, 1, 2])
    tps = [TopicPartition("t", p) for p in range(3)]
    for p in range(3):
        for _ in range(20):
            acc.append("t", p, entry(), SIZE, 0)
    drained = acc.drain({1: tps}, [1], 4500, 0)
    assert len(drained[1]) == 2  # ~2061 bytes each
    drained = acc.drain({1: tps}, [1], 10, 0)
    assert len(drained[1]) == 1  # one batch even if larger than the limit


def test_drain_rotates_the_starting_partition() -> None:
    acc = make(linger_ms=0, batch_size=100_000)
    acc.update_topic("t", 3, [0, 1, 2])
    tps = [TopicPartition("t", p) for p in range(3)]
    for _round in range(3):
        for p in range(3):
            acc.append("t", p, entry(), SIZE, 0)
    firsts = []
    for _ in range(3):
        drained = acc.drain({1: tps}, [1], 150, 0)  # room for one batch per request
        firsts.append(drained[1][0].partition)
        for p in range(3):
            acc.append("t", p, entry(), SIZE, 0)
    assert sorted(firsts) == [0, 1, 2]


def test_memory_bound_times_out_send() -> None:
    acc = make(buffer_memory=3300, batch_size=1000)
    for p in (0, 1, 0):
        acc.append("t", p, entry(b"z" * 1000), 1000 + RECORD_OVERHEAD_ESTIMATE, 0)
    assert acc.used_memory == 3 * (1000 + RECORD_OVERHEAD_ESTIMATE + RECORD_BATCH_OVERHEAD)
    with pytest.raises(KafkaTimeoutError, match=r"buffer\.memory"):
        acc.append("t", 1, entry(b"z" * 1000), 1000 + RECORD_OVERHEAD_ESTIMATE, 0, max_block_ms=0)


def test_blocked_send_proceeds_when_memory_is_freed() -> None:
    acc = make(buffer_memory=2200, batch_size=1000, linger_ms=0, clock=now_ms)
    for p in (0, 1):
        acc.append("t", p, entry(b"z" * 950), 950 + RECORD_OVERHEAD_ESTIMATE, 0)
    woken = threading.Event()
    acc.waker = woken.set
    outcome: list[object] = []

    def blocked() -> None:
        try:
            acc.append(
                "t",
                0,
                entry(b"z" * 950),
                950 + RECORD_OVERHEAD_ESTIMATE,
                now_ms(),
                30_000,
            )
            outcome.append("appended")
        except Exception as exc:  # pragma: no cover - reported through the assertion
            outcome.append(exc)

    t = threading.Thread(target=blocked)
    t.start()
    assert woken.wait(10)  # the network thread is woken: memory pressure makes everything sendable
    assert acc.ready(LEADERS, 0).nodes == {1, 2}
    (batch,) = acc.drain(BY_NODE, [1], 1_000_000, 0)[1]
    assert t.is_alive()
    acc.deallocate(batch)  # its outcome was delivered: memory returns
    t.join(10)
    assert outcome == ["appended"]


def test_close_wakes_blocked_senders() -> None:
    acc = make(buffer_memory=1100, batch_size=1000, clock=now_ms)
    acc.append("t", 0, entry(b"z" * 950), 950 + RECORD_OVERHEAD_ESTIMATE, 0)
    outcome: list[BaseException] = []

    def blocked() -> None:
        try:
            acc.append("t", 1, entry(), SIZE, now_ms(), 60_000)
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=blocked)
    t.start()
    deadline = time.monotonic() + 10
    while acc.waiting_threads == 0:
        assert time.monotonic() < deadline, "the sender never blocked"
        time.sleep(0.001)
    acc.close()
    t.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], IllegalStateError)


def test_queued_batches_expire_after_delivery_timeout() -> None:
    clock = Clock(0)
    acc = make(delivery_timeout_ms=1000, linger_ms=0, clock=clock)
    acc.append("t", 0, entry(), SIZE)
    clock.now = 500
    acc.append("t", 1, entry(), SIZE)
    check = acc.ready({}, 999)
    assert check.expired == [] and check.next_expiry_ms == 1000
    check = acc.ready({}, 1000)
    assert [b.tp for b in check.expired] == [T0] and check.next_expiry_ms == 1500
    assert acc.queued_batches(T0) == []


def test_reenqueue_keeps_sequence_order_and_backs_off() -> None:
    acc = make(linger_ms=0, retry_backoff_ms=100)
    batches = []
    for seq in (0, 10, 20):
        b = ProducerBatch(T0, 0, 1000, 0)
        b.entries.extend(entry() for _ in range(10))
        b.set_producer_state(1, 0, seq)
        b.closed = True
        batches.append(b)
    acc.reenqueue(batches[1], 1000, in_sequence_order=True)
    acc.reenqueue(batches[2], 1000, in_sequence_order=True)
    acc.reenqueue(batches[0], 1000, in_sequence_order=True)
    assert [b.base_sequence for b in acc.queued_batches(T0)] == [0, 10, 20]
    assert all(b.attempts == 1 for b in batches)
    assert acc.ready(LEADERS, 1010).nodes == set()  # backing off (100 ms +- 20%)
    assert acc.ready(LEADERS, 1121).nodes == {1}


def test_unkeyed_records_stick_to_a_partition() -> None:
    acc = make(batch_size=1000, linger_ms=10_000)
    acc.update_topic("t", 4, [0, 1, 2, 3])
    for _ in range(9):
        acc.append("t", None, entry(), SIZE, 0)
    used = [p for p in range(4) if acc.queued_batches(TopicPartition("t", p))]
    assert len(used) == 1
    # Keep going: after about 2 x batch.size the partition switches.
    for _ in range(200):
        acc.append("t", None, entry(), SIZE, 0)
    used = [p for p in range(4) if acc.queued_batches(TopicPartition("t", p))]
    assert len(used) > 1
    for p in used:
        # Sticky batching: every batch but the last of a partition is full-sized.
        sizes = [b.record_count for b in acc.queued_batches(TopicPartition("t", p))]
        assert all(n == 9 for n in sizes[:-1])


def test_wakeup_only_when_the_network_thread_would_sleep_past_readiness() -> None:
    clock = Clock(0)
    acc = make(linger_ms=10, clock=clock)
    acc.ready(LEADERS, 0)
    assert not acc.finish_poll(5000)  # the network thread plans to sleep until 5000
    assert acc.append("t", 0, entry(), SIZE, 0)  # new batch ready at 10 < 5000: wake it
    assert not acc.append("t", 0, entry(), SIZE, 0)  # appending to that batch: no
    clock.now = 1
    acc.ready(LEADERS, 1)
    assert not acc.finish_poll(10)
    assert not acc.append("t", 1, entry(), SIZE)  # ready at 11: it looks at 10 anyway


def test_batch_created_during_a_poll_forces_another_look() -> None:
    acc = make(linger_ms=10)
    acc.ready(LEADERS, 0)
    acc.append("t", 0, entry(), SIZE, 0)  # between ready() and finish_poll()
    assert acc.finish_poll(5000)  # -> look again at once


def test_compressed_batches_grow_with_the_ratio_estimate() -> None:
    acc = make(compression=CompressionType.ZSTD, batch_size=1000)
    acc.append("t", 0, entry(), SIZE, 0)
    assert acc.queued_batches(T0)[0].limit == 1000
    for _ in range(200):
        acc.update_compression_ratio("t", 0.1)
    acc.append("t", 1, entry(), SIZE, 0)
    limit = acc.queued_batches(T1)[0].limit
    assert 9000 <= limit <= 1000 / (0.1 * 1.05) + 1


def test_no_wakeup_while_the_network_thread_coalesces() -> None:
    clock = Clock(0)
    acc = make(linger_ms=10, clock=clock)
    acc.ready(LEADERS, 0)
    assert not acc.finish_poll(2, coalescing=True)  # requests in flight: it looks again at 2 anyway
    assert not acc.append("t", 0, entry(), SIZE, 0)  # a new batch: no wake-up
    acc.ready(LEADERS, 0)
    assert not acc.finish_poll(5000)  # nothing in flight: it would sleep until 5000
    assert acc.append("t", 1, entry(), SIZE, 0)  # so a new batch wakes it
