"""The pure parts of ``examples/async_processing.py``: the in-order commit tracker (the library's
``consumer/offset_tracker.py``, which the example uses), abandon-on-lost, and the poll loop's KIP-983
decisions (driven with a scripted fake consumer; no broker)."""

from __future__ import annotations

import importlib.util
import random
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import Future
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_handoff.consumer import Consumer
from kafka_handoff.consumer.offset_tracker import OffsetTracker
from kafka_handoff.consumer.records import ConsumerRecords
from kafka_handoff.types import ConsumerRecord, OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "async_processing.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("examples_async_processing", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ap = _load()
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def rec(tp: TopicPartition, offset: int) -> ConsumerRecord:
    return ConsumerRecord(tp.topic, tp.partition, offset, 0, 0, b"k%d" % offset, b"v")


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached before the deadline"
        time.sleep(0.001)


# ============================================================================================ OffsetTracker
class TestOffsetTracker:
    def test_the_example_uses_the_library_tracker(self) -> None:
        assert ap.OffsetTracker is OffsetTracker

    def test_nothing_committable_until_the_first_record_finishes(self) -> None:
        t = OffsetTracker()
        t.started(10)
        t.started(11)
        assert t.committable is None
        assert t.in_flight == 2
        assert t.finished(10) is True
        assert t.committable == 11
        assert t.in_flight == 1

    def test_a_later_record_finishing_first_does_not_skip_the_running_one(self) -> None:
        t = OffsetTracker()
        for offset in (0, 1, 2, 3):
            t.started(offset)
        assert t.finished(2) is False
        assert t.finished(3) is False
        assert t.committable is None  # 0 still running: committing 4 would skip it
        assert t.finished(0) is True
        assert t.committable == 1  # 1 still running
        assert t.finished(1) is True
        assert t.committable == 4  # the finished 2 and 3 join the prefix at once
        assert t.in_flight == 0

    def test_offsets_with_gaps_commit_one_past_the_last_finished(self) -> None:
        t = OffsetTracker()
        for offset in (5, 9, 20):  # compaction / transaction markers leave gaps
            t.started(offset)
        t.finished(9)
        assert t.committable is None
        t.finished(5)
        assert t.committable == 10
        t.finished(20)
        assert t.committable == 21

    def test_offsets_must_be_started_in_increasing_order(self) -> None:
        t = OffsetTracker()
        t.started(3)
        with pytest.raises(ValueError, match="increasing order: 3 after 3"):
            t.started(3)
        with pytest.raises(ValueError, match="increasing order: 2 after 3"):
            t.started(2)

    def test_finishing_an_unknown_or_finished_offset_is_an_error(self) -> None:
        t = OffsetTracker()
        t.started(0)
        with pytest.raises(ValueError, match="offset 7 was not started"):
            t.finished(7)
        t.finished(0)
        with pytest.raises(ValueError, match="offset 0 was not started, or was finished already"):
            t.finished(0)

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=40), st.randoms())
    def test_committable_is_always_one_past_the_longest_finished_prefix(
        self, steps: list[int], rnd: random.Random
    ) -> None:
        offsets: list[int] = []
        position = 0
        for step in steps:
            position += step
            offsets.append(position)
        t = OffsetTracker()
        for offset in offsets:
            t.started(offset)
        finished: set[int] = set()
        order = offsets[:]
        rnd.shuffle(order)
        for offset in order:
            t.finished(offset)
            finished.add(offset)
            prefix = 0
            while prefix < len(offsets) and offsets[prefix] in finished:
                prefix += 1
            expected = offsets[prefix - 1] + 1 if prefix else None
            assert t.committable == expected
            assert t.in_flight == len(offsets) - len(finished)

    def test_concurrent_completions_from_many_threads(self) -> None:
        t = OffsetTracker()
        offsets = list(range(2000))
        for offset in offsets:
            t.started(offset)
        rnd = random.Random(7)
        rnd.shuffle(offsets)
        chunks = [offsets[i::8] for i in range(8)]
        threads = [threading.Thread(target=lambda c=c: [t.finished(o) for o in c]) for c in chunks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert t.committable == 2000
        assert t.in_flight == 0


# ============================================================================================ PartitionWork
class TestPartitionWork:
    def test_complete_delivers_then_advances(self) -> None:
        work = ap.PartitionWork(TP0)
        delivered: list[int] = []
        for offset in (0, 1):
            work.start(rec(TP0, offset))
        assert work.complete(rec(TP0, 1), lambda: delivered.append(1)) is True
        assert work.commit_position() is None
        assert work.complete(rec(TP0, 0), lambda: delivered.append(0)) is True
        assert delivered == [1, 0]
        assert work.commit_position() == 2
        work.commit_sent = 2
        assert work.commit_position() is None  # already sent: no second commit of the same offset

    def test_a_failing_delivery_still_finishes_the_record(self) -> None:
        work = ap.PartitionWork(TP0)
        work.start(rec(TP0, 0))

        def boom() -> None:
            raise RuntimeError("sink down")

        with pytest.raises(RuntimeError):
            work.complete(rec(TP0, 0), boom)
        assert work.in_flight() == 0

    def test_abandon_discards_later_results_and_never_commits(self) -> None:
        work = ap.PartitionWork(TP0)
        delivered: list[int] = []
        for offset in (0, 1, 2):
            work.start(rec(TP0, offset))
        work.complete(rec(TP0, 0), lambda: delivered.append(0))
        assert work.commit_position() == 1
        work.abandon()
        assert work.abandoned
        assert work.complete(rec(TP0, 1), lambda: delivered.append(1)) is False
        assert work.complete(rec(TP0, 2), lambda: delivered.append(2)) is False
        assert delivered == [0]
        assert work.discarded == 2
        assert work.commit_position() is None  # nothing is ever committed for a lost partition
        assert work.tracker.committable == 1  # and the tracker did not move after the loss

    def test_abandon_cancels_what_has_not_started_and_drops_the_queue(self) -> None:
        work = ap.PartitionWork(TP0)
        running: Future[None] = Future()
        assert running.set_running_or_notify_cancel()
        queued_in_pool: Future[None] = Future()
        work.futures = [running, queued_in_pool]
        work.queued.extend([rec(TP0, 5), rec(TP0, 6)])
        assert work.abandon() == 1
        assert queued_in_pool.cancelled()
        assert not running.cancelled()
        assert not work.queued and not work.futures


# ============================================================================================ the poll loop
class FakeConsumer:
    """Scripted stand-in for :class:`Consumer`: ``poll`` returns the queued results in order (then empty
    ones); everything the processor does to the consumer is recorded."""

    def __init__(self) -> None:
        self.results: list[ConsumerRecords] = []
        self.delay_calls: list[list[TopicPartition]] = []
        self.delay_answer = True
        self.async_commits: list[dict[TopicPartition, OffsetAndMetadata]] = []
        self.sync_commits: list[dict[TopicPartition, OffsetAndMetadata]] = []
        self.commit_log: list[dict[TopicPartition, OffsetAndMetadata]] = []  # both kinds, in order
        self.paused_parts: set[TopicPartition] = set()
        self.listener: Any = None
        self.closed = False
        self.assigned: set[TopicPartition] = set()

    def poll(self, timeout: float | None = 0.0) -> ConsumerRecords:
        return self.results.pop(0) if self.results else ConsumerRecords()

    def delay_revoke(self, partitions: Iterable[TopicPartition]) -> bool:
        self.delay_calls.append(list(partitions))
        return self.delay_answer

    def commit_async(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], callback: Any = None
    ) -> Future[None]:
        self.async_commits.append(dict(offsets))
        self.commit_log.append(dict(offsets))
        if callback is not None:
            callback(dict(offsets), None)
        done: Future[None] = Future()
        done.set_result(None)
        return done

    def commit_sync(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], timeout: Any = None) -> None:
        self.sync_commits.append(dict(offsets))
        self.commit_log.append(dict(offsets))

    def last_committed(self, tp: TopicPartition) -> int | None:
        found = [c[tp].offset for c in self.commit_log if tp in c]
        return found[-1] if found else None

    def pause(self, partitions: Collection[TopicPartition]) -> None:
        self.paused_parts.update(partitions)

    def resume(self, partitions: Collection[TopicPartition]) -> None:
        self.paused_parts.difference_update(partitions)

    def assignment(self) -> frozenset[TopicPartition]:
        return frozenset(self.assigned)

    def set_rebalance_listener(self, listener: Any) -> None:
        self.listener = listener

    def subscribe(self, topics: Any) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class Gate:
    """``process`` for the processor: each record blocks until the test releases its offset."""

    def __init__(self) -> None:
        self._events: dict[tuple[int, int], threading.Event] = {}
        self._lock = threading.Lock()

    def _event(self, partition: int, offset: int) -> threading.Event:
        with self._lock:
            return self._events.setdefault((partition, offset), threading.Event())

    def __call__(self, record: ConsumerRecord) -> None:
        assert self._event(record.partition, record.offset).wait(10)

    def release(self, tp: TopicPartition, *offsets: int) -> None:
        for offset in offsets:
            self._event(tp.partition, offset).set()


def new_sink() -> list[tuple[int, int]]:
    return []


def make_processor(fake: FakeConsumer, gate: Gate, sink: list[tuple[int, int]], **kwargs: Any) -> Any:
    lock = threading.Lock()

    def deliver(record: ConsumerRecord) -> None:
        with lock:
            sink.append((record.partition, record.offset))

    return ap.AsyncProcessor(
        cast(Consumer, fake),
        ["t"],
        process=gate,
        sink=deliver,
        workers=4,
        commit_interval_s=0.0,
        **kwargs,
    )


def records(by_tp: dict[TopicPartition, list[int]], **sets: frozenset[TopicPartition]) -> ConsumerRecords:
    return ConsumerRecords({tp: [rec(tp, o) for o in offs] for tp, offs in by_tp.items()}, **sets)


class TestProcessorLoop:
    def test_revoke_is_delayed_while_records_are_in_flight_and_then_completes(self) -> None:
        fake, gate, sink = FakeConsumer(), Gate(), new_sink()
        proc = make_processor(fake, gate, sink)
        fake.results = [
            records({TP0: [0, 1, 2], TP1: [0, 1]}),
            records({TP1: [2]}, to_be_revoked=frozenset({TP0})),
        ]
        proc.poll_once()
        gate.release(TP0, 1, 2)  # 0 still running
        gate.release(TP1, 0, 1)
        proc.poll_once()
        assert fake.delay_calls == [[TP0]]  # in flight: delayed
        wait_for(lambda: proc._work[TP0].in_flight() == 1)
        # Next poll: the consumer reports TP0 again (moved back to revoke-next); still in flight.
        fake.results = [records({}, to_be_revoked=frozenset({TP0}))]
        proc.poll_once()
        assert fake.delay_calls == [[TP0], [TP0]]
        gate.release(TP0, 0)
        wait_for(lambda: proc._work[TP0].in_flight() == 0)
        fake.results = [records({}, to_be_revoked=frozenset({TP0}))]
        proc.poll_once()
        assert fake.delay_calls == [[TP0], [TP0]]  # done: not delayed, the revoke completes next poll
        # The consumer completes the revoke at the start of the next poll: the listener commits.
        proc.on_partitions_revoked(frozenset({TP0}), fake)
        assert fake.last_committed(TP0) == 3
        assert TP0 not in proc._work
        assert sorted(o for p, o in sink if p == 0) == [0, 1, 2]
        gate.release(TP1, 2)
        proc.close(drain_timeout_s=5)

    def test_a_revoke_requested_partition_starts_nothing_new_and_drops_its_queue(self) -> None:
        fake, gate, sink = FakeConsumer(), Gate(), new_sink()
        proc = make_processor(fake, gate, sink, max_in_flight_per_partition=2)
        fake.results = [records({TP0: [0, 1, 2, 3, 4]}), records({}, to_be_revoked=frozenset({TP0}))]
        proc.poll_once()
        assert proc._work[TP0].in_flight() == 2 and len(proc._work[TP0].queued) == 3
        proc.poll_once()
        work = proc._work[TP0]
        assert work.revoking and not work.queued
        gate.release(TP0, 0, 1, 2, 3, 4)
        wait_for(lambda: work.in_flight() == 0)
        proc.poll_once()
        assert work.tracker.committable == 2  # 2..4 were never started: the next owner processes them
        proc.on_partitions_revoked(frozenset({TP0}), fake)
        assert fake.last_committed(TP0) == 2
        assert sorted(o for _, o in sink) == [0, 1]
        proc.close(drain_timeout_s=5)

    def test_lost_partition_work_is_abandoned_and_never_committed(self) -> None:
        fake, gate, sink = FakeConsumer(), Gate(), new_sink()
        proc = make_processor(fake, gate, sink, max_in_flight_per_partition=8)
        fake.results = [records({TP0: [0, 1, 2], TP1: [0]})]
        proc.poll_once()
        gate.release(TP0, 0)
        wait_for(lambda: proc._work[TP0].tracker.committable == 1)
        proc.poll_once()
        assert {TP0: OffsetAndMetadata(1)} in [{TP0: c[TP0]} for c in fake.async_commits if TP0 in c]
        work = proc._work[TP0]
        # The consumer runs on_partitions_lost inside poll(), then reports the loss in the result.
        proc.on_partitions_lost(frozenset({TP0}), fake)
        fake.results = [records({}, lost=frozenset({TP0}))]
        proc.poll_once()
        assert TP0 not in proc._work and work.abandoned
        commits_before = len(fake.async_commits)
        gate.release(TP0, 1, 2)  # finish after the loss: discarded
        gate.release(TP1, 0)
        wait_for(lambda: work.discarded == 2)
        proc.poll_once()
        assert sorted(sink) == [(0, 0), (1, 0)]
        assert all(TP0 not in c for c in fake.async_commits[commits_before:])
        assert all(TP0 not in c for c in fake.sync_commits)
        assert proc.stats.lost == 1
        proc.close(drain_timeout_s=5)

    def test_refused_delay_abandons_what_still_runs_and_commits_the_finished_prefix(self) -> None:
        fake, gate, sink = FakeConsumer(), Gate(), new_sink()
        proc = make_processor(fake, gate, sink)
        fake.delay_answer = False
        fake.results = [records({TP0: [0, 1]}), records({}, to_be_revoked=frozenset({TP0}))]
        proc.poll_once()
        gate.release(TP0, 0)
        wait_for(lambda: proc._work[TP0].tracker.committable == 1)
        proc.poll_once()
        assert proc.stats.delay_refused == 1
        proc.on_partitions_revoked(frozenset({TP0}), fake)
        assert fake.last_committed(TP0) == 1
        gate.release(TP0, 1)
        wait_for(lambda: proc.stats.discarded == 1)
        assert sink == [(0, 0)]
        assert fake.last_committed(TP0) == 1  # the abandoned record is never committed
        proc.close(drain_timeout_s=5)

    def test_block_mode_never_delays_and_waits_in_the_callback(self) -> None:
        fake, gate, sink = FakeConsumer(), Gate(), new_sink()
        proc = make_processor(fake, gate, sink, revocation="block")
        fake.results = [records({TP0: [0, 1]}), records({}, to_be_revoked=frozenset({TP0}))]
        proc.poll_once()
        proc.poll_once()
        assert fake.delay_calls == []
        threading.Timer(0.05, gate.release, args=(TP0, 0, 1)).start()
        proc.on_partitions_revoked(frozenset({TP0}), fake)  # returns only once both finished
        assert sorted(sink) == [(0, 0), (0, 1)]
        assert fake.sync_commits[-1] == {TP0: OffsetAndMetadata(2)}
        proc.close(drain_timeout_s=5)

    def test_backpressure_pauses_a_full_partition_and_resumes_it(self) -> None:
        fake, gate, sink = FakeConsumer(), Gate(), new_sink()
        proc = make_processor(fake, gate, sink, max_in_flight_per_partition=1, max_queued_per_partition=4)
        fake.results = [records({TP0: list(range(6))})]
        proc.poll_once()
        assert TP0 in fake.paused_parts  # 1 running, 5 queued >= 4
        gate.release(TP0, 0, 1, 2)
        wait_for(lambda: proc._work[TP0].tracker.committable == 1)
        for _ in range(200):
            proc.poll_once()
            if TP0 not in fake.paused_parts:
                break
            time.sleep(0.005)
        assert TP0 not in fake.paused_parts
        gate.release(TP0, 3, 4, 5)
        wait_for(lambda: proc._work[TP0].tracker.committable == 4)
        # close() starts nothing new: 4 and 5 were queued, never started, so the commit stops before them.
        proc.close(drain_timeout_s=5)
        assert sorted(o for _, o in sink) == [0, 1, 2, 3]
        assert fake.last_committed(TP0) == 4

    def test_close_drains_in_flight_work_and_commits(self) -> None:
        fake, gate, sink = FakeConsumer(), Gate(), new_sink()
        proc = make_processor(fake, gate, sink)
        fake.results = [records({TP0: [0, 1, 2]})]
        proc.poll_once()
        threading.Timer(0.05, gate.release, args=(TP0, 0, 1, 2)).start()
        proc.close(drain_timeout_s=5)
        assert fake.closed
        assert fake.last_committed(TP0) == 3
        assert sorted(sink) == [(0, 0), (0, 1), (0, 2)]


def test_simulated_work_durations() -> None:
    work = ap.SimulatedWork(work_ms=20, slow_every=50, slow_ms=1000)
    assert work.duration_s(rec(TP0, 0)) == pytest.approx(0.02)
    assert work.duration_s(rec(TP0, 49)) == pytest.approx(1.0)
    assert work.duration_s(rec(TP0, 50)) == pytest.approx(0.02)
    assert ap.SimulatedWork().duration_s(rec(TP0, 49)) == pytest.approx(0.02)


def test_invalid_revocation_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="revocation must be 'delay' or 'block'"):
        ap.AsyncProcessor(cast(Consumer, FakeConsumer()), ["t"], revocation=cast(Any, "eager"))


def test_member_config_turns_auto_commit_off_and_picks_cooperative_sticky() -> None:
    classic = ap.member_config("h:1", "g", "classic")
    assert classic["enable.auto.commit"] is False
    assert classic["partition.assignment.strategy"] == "cooperative-sticky"
    assert "partition.assignment.strategy" not in ap.member_config("h:1", "g", "consumer")


class TestFinishStep:
    def test_delay_covers_the_finish_step_which_starts_after_the_last_record(self) -> None:
        fake, gate, sink = FakeConsumer(), Gate(), new_sink()
        finish_started = threading.Event()
        finish_release = threading.Event()
        finished: list[TopicPartition] = []

        def finish(tp: TopicPartition) -> None:
            finish_started.set()
            assert finish_release.wait(10)
            finished.append(tp)

        proc = make_processor(fake, gate, sink, finish_partition=finish)
        fake.results = [records({TP0: [0]}), records({}, to_be_revoked=frozenset({TP0}))]
        proc.poll_once()
        proc.poll_once()
        assert fake.delay_calls == [[TP0]]
        assert not finish_started.is_set()  # a record is still in flight: no finish yet
        gate.release(TP0, 0)
        wait_for(lambda: proc._work[TP0].in_flight() == 0)
        fake.results = [records({}, to_be_revoked=frozenset({TP0}))]
        proc.poll_once()
        assert finish_started.wait(5)
        assert fake.delay_calls == [[TP0], [TP0]]  # finishing: still delayed
        finish_release.set()
        wait_for(lambda: not proc._work[TP0].busy())
        fake.results = [records({}, to_be_revoked=frozenset({TP0}))]
        proc.poll_once()
        assert fake.delay_calls == [[TP0], [TP0]]  # done: the revoke may complete
        assert finished == [TP0]
        proc.on_partitions_revoked(frozenset({TP0}), fake)
        assert fake.last_committed(TP0) == 1
        proc.close(drain_timeout_s=5)

    def test_block_mode_runs_the_finish_step_inside_the_callback(self) -> None:
        fake, gate, sink = FakeConsumer(), Gate(), new_sink()
        order: list[str] = []
        proc = make_processor(
            fake, gate, sink, revocation="block", finish_partition=lambda tp: order.append(f"finish {tp}")
        )
        fake.results = [records({TP0: [0, 1]})]
        proc.poll_once()
        threading.Timer(0.05, gate.release, args=(TP0, 0, 1)).start()
        proc.on_partitions_revoked(frozenset({TP0}), fake)
        assert order == ["finish t-0"]
        assert sorted(sink) == [(0, 0), (0, 1)]
        assert fake.last_committed(TP0) == 2
        proc.close(drain_timeout_s=5)

    def test_lost_partition_cancels_its_pending_finish(self) -> None:
        work = ap.PartitionWork(TP0)
        pending: Future[None] = Future()
        work.finish_future = pending
        assert work.busy()
        work.abandon()
        assert pending.cancelled()
        assert not work.busy()
