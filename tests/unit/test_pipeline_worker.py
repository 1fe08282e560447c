"""The worker's bookkeeping with a fake consumer and fake Spark: resume positions, mark filtering, KIP-983
delays, cancelling on loss, Kafka commits only for owned partitions, rewinding after a discarded batch."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kafka_handoff.consumer.batch import ColumnChunk
from kafka_handoff.errors import KafkaError
from kafka_handoff.pipeline.config import parse_config
from kafka_handoff.pipeline.sinks import MarkUpdate
from kafka_handoff.pipeline.sizing import TAIL_WAIT_MS
from kafka_handoff.pipeline.stats import BatchReport
from kafka_handoff.pipeline.worker import Batch, PartitionRange, Worker, _Outcome, describe_ranges
from kafka_handoff.types import OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.unit

P0, P1, P2 = TopicPartition("ev", 0), TopicPartition("ev", 1), TopicPartition("ev", 2)


class FakeConsumer:
    def __init__(
        self, assigned: Iterable[TopicPartition] = (), committed: dict[Any, Any] | None = None
    ) -> None:
        self.assigned = set(assigned)
        self._committed = committed or {}
        self.seeks: list[tuple[TopicPartition, int]] = []
        self.commits: list[dict[TopicPartition, OffsetAndMetadata]] = []
        self.delayed: list[frozenset[TopicPartition]] = []
        self.paused_set: set[TopicPartition] = set()
        self.allow_delay = True
        self.lag: dict[TopicPartition, int] = {}

    def assignment(self) -> frozenset[TopicPartition]:
        return frozenset(self.assigned)

    def committed(self, parts: Iterable[TopicPartition], timeout: float | None = None) -> dict[Any, Any]:
        return {tp: self._committed.get(tp) for tp in parts}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))

    def commit_sync(
        self, offsets: dict[TopicPartition, OffsetAndMetadata], timeout: float | None = None
    ) -> None:
        self.commits.append(dict(offsets))

    def delay_revoke(self, parts: Iterable[TopicPartition]) -> bool:
        self.delayed.append(frozenset(parts))
        return self.allow_delay

    def current_lag(self, tp: TopicPartition) -> int | None:
        return self.lag.get(tp)

    def paused(self) -> frozenset[TopicPartition]:
        return frozenset(self.paused_set)

    def pause(self, parts: Iterable[TopicPartition]) -> None:
        self.paused_set |= set(parts)

    def resume(self, parts: Iterable[TopicPartition]) -> None:
        self.paused_set -= set(parts)


class FakeJobs:
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def cancel(self, tag: str) -> None:
        self.cancelled.append(tag)


def make_worker(tmp_path: Path, consumer: FakeConsumer, **batch: Any) -> Worker:
    cfg = parse_config(
        {
            "kafka": {"topics": ["ev"], "bootstrap.servers": "h:1", "group.id": "g"},
            "transform": {"function": "kafka_handoff.pipeline.testing:records"},
            "sink": {"path": str(tmp_path / "sink")},
            "batch": {"max_records": 5, "max_interval_ms": 60_000, **batch},
        }
    )
    worker = Worker(cfg, spark=object())
    from kafka_handoff.pipeline.sinks import make_sink

    worker._sink = make_sink(cfg.sink)
    worker._consumer = consumer
    worker._jobs = FakeJobs()  # type: ignore[assignment]
    return worker


def chunk(tp: TopicPartition, *offsets: int) -> ColumnChunk:
    n = len(offsets)
    return ColumnChunk(tp.topic, tp.partition, list(offsets), [0] * n, [None] * n, [b"x"] * n, [()] * n)


def write_marks(worker: Worker, marks: dict[TopicPartition, int]) -> None:
    assert worker._sink is not None
    worker._sink.commit(pa.table({"v": pa.array([], pa.int64())}),
                        {tp: MarkUpdate(None, m) for tp, m in marks.items()})  # fmt: skip


def test_assignment_resumes_at_the_larger_of_committed_offset_and_sink_mark(tmp_path: Path) -> None:
    consumer = FakeConsumer(committed={P0: OffsetAndMetadata(50), P1: OffsetAndMetadata(5)})
    worker = make_worker(tmp_path, consumer)
    write_marks(worker, {P0: 40, P1: 30})
    worker._on_assigned(frozenset({P0, P1, P2}), consumer)
    assert sorted(consumer.seeks) == [(P0, 50), (P1, 30)]  # P2: neither -> auto.offset.reset
    assert worker._marks == {P0: 40, P1: 30, P2: None}
    assert worker._owned == {P0, P1, P2}
    # Kafka was behind the sink for P1 (a crash after a sink commit): it is caught up at once.
    assert consumer.commits == [{P1: OffsetAndMetadata(30)}]


class Executor:
    """Runs nothing: records what was submitted."""

    def __init__(self) -> None:
        self.submitted: list[Batch] = []

    def submit(self, fn: Any, batch: Batch) -> concurrent.futures.Future[_Outcome]:
        self.submitted.append(batch)
        return concurrent.futures.Future()


def test_records_below_the_mark_are_dropped_and_a_batch_carries_the_expected_marks(tmp_path: Path) -> None:
    consumer = FakeConsumer(assigned={P0, P1})
    worker = make_worker(tmp_path, consumer, adaptive=False)
    write_marks(worker, {P0: 12})
    worker._on_assigned(frozenset({P0, P1}), consumer)
    worker._accumulate({P0: chunk(P0, 10, 11, 12, 13), P1: chunk(P1, 0, 1)})
    assert worker._acc_count == 4  # 10 and 11 are already in the sink
    executor = Executor()
    worker._maybe_cut()
    worker._maybe_submit(executor)  # type: ignore[arg-type]
    assert len(executor.submitted) == 0  # 4 < max_records and the interval has not passed
    worker._accumulate({P1: chunk(P1, 2)})
    worker._marks[P0] = 13  # e.g. a batch of an earlier owner committed meanwhile
    worker._maybe_cut()
    worker._maybe_submit(executor)  # type: ignore[arg-type]
    (batch,) = executor.submitted
    assert batch.ranges == {P0: PartitionRange(13, 13, 13, 1), P1: PartitionRange(None, 0, 2, 3)}
    assert describe_ranges(batch.ranges) == "ev-0 offsets 13..13, ev-1 offsets 0..2"
    assert worker._acc_count == 0


def test_revoke_of_a_partition_in_the_running_batch_is_delayed(tmp_path: Path) -> None:
    consumer = FakeConsumer(assigned={P0, P1, P2})
    worker = make_worker(tmp_path, consumer)
    worker._on_assigned(frozenset({P0, P1, P2}), consumer)
    running = Batch(1, [], {P0: PartitionRange(None, 0, 9, 10)}, 10, "tag-1")
    worker._inflight = (running, concurrent.futures.Future())
    worker._accumulate({P1: chunk(P1, 0, 1), P2: chunk(P2, 0)})
    worker._delay_revokes(frozenset({P0, P1}))
    assert consumer.delayed == [frozenset({P0})]  # only the running batch's partition
    assert set(worker._acc) == {P2} and worker._acc_count == 1  # P1's unsubmitted records dropped
    assert worker.stats.revokes_delayed == 1


def test_lost_partitions_cancel_the_running_batch(tmp_path: Path) -> None:
    consumer = FakeConsumer(assigned={P0, P1})
    worker = make_worker(tmp_path, consumer)
    worker._on_assigned(frozenset({P0, P1}), consumer)
    running = Batch(3, [], {P0: PartitionRange(None, 0, 9, 10)}, 10, "tag-3")
    worker._inflight = (running, concurrent.futures.Future())
    worker._on_lost(frozenset({P1}))  # not in the batch: it keeps running
    assert not running.cancelled.is_set()
    worker._on_lost(frozenset({P0}))
    assert running.cancelled.is_set()
    assert getattr(worker._jobs, "cancelled", None) == ["tag-3"]
    assert worker._owned == set() and worker.stats.lost == 2


def test_after_a_commit_only_owned_partitions_are_committed_to_kafka(tmp_path: Path) -> None:
    consumer = FakeConsumer(assigned={P0, P1})
    worker = make_worker(tmp_path, consumer)
    worker._on_assigned(frozenset({P0, P1}), consumer)
    batch = Batch(1, [], {P0: PartitionRange(None, 0, 9, 10), P1: PartitionRange(None, 0, 4, 5)}, 15, "t")
    done: concurrent.futures.Future[_Outcome] = concurrent.futures.Future()
    done.set_result(
        _Outcome(BatchReport(1, "committed", 15, 2), {P0: MarkUpdate(None, 10), P1: MarkUpdate(None, 5)})
    )
    worker._inflight = (batch, done)
    worker._on_revoked(frozenset({P1}))  # revoked before the result was handled
    worker._check_inflight()
    assert consumer.commits == [{P0: OffsetAndMetadata(10)}]
    assert worker._marks == {P0: 10}
    assert worker.stats.batches_committed == 1 and worker.stats.records_committed == 15


def test_a_discarded_batch_rewinds_its_partitions_to_the_sink_marks(tmp_path: Path) -> None:
    consumer = FakeConsumer(assigned={P0, P1})
    worker = make_worker(tmp_path, consumer)
    worker._on_assigned(frozenset({P0, P1}), consumer)
    # Another member committed P0 up to 7 meanwhile; P1 is untouched.
    write_marks(worker, {P0: 7})
    batch = Batch(2, [], {P0: PartitionRange(None, 0, 9, 10), P1: PartitionRange(None, 3, 8, 6)}, 16, "t")
    worker._accumulate({P1: chunk(P1, 9, 10)})  # the next batch's records: re-read after the rewind
    done: concurrent.futures.Future[_Outcome] = concurrent.futures.Future()
    done.set_result(_Outcome(BatchReport(2, "conflict", 16, 2), conflicts={P0: (None, 7)}))
    worker._inflight = (batch, done)
    worker._check_inflight()
    assert sorted(consumer.seeks) == [(P0, 7), (P1, 3)]
    assert worker._marks == {P0: 7, P1: None}
    assert worker._acc_count == 0 and consumer.commits == []
    assert worker.stats.mark_conflicts == 1 and worker.stats.batches_discarded == 1


def test_a_failed_batch_raises_and_commits_nothing(tmp_path: Path) -> None:
    consumer = FakeConsumer(assigned={P0})
    worker = make_worker(tmp_path, consumer)
    worker._on_assigned(frozenset({P0}), consumer)
    batch = Batch(4, [], {P0: PartitionRange(None, 0, 9, 10)}, 10, "t")
    failed: concurrent.futures.Future[_Outcome] = concurrent.futures.Future()
    failed.set_exception(RuntimeError("boom"))
    worker._inflight = (batch, failed)
    with pytest.raises(RuntimeError, match="boom"):
        worker._check_inflight()
    assert consumer.commits == [] and worker.stats.batches_discarded == 1


def test_a_batch_waits_while_spark_runs_and_backpressure_pauses_until_it_is_submitted(
    tmp_path: Path,
) -> None:
    consumer = FakeConsumer(assigned={P0, P1})
    worker = make_worker(tmp_path, consumer, max_records=3)
    worker._on_assigned(frozenset({P0, P1}), consumer)
    running = Batch(1, [], {P1: PartitionRange(None, 0, 4, 5)}, 5, "t")
    worker._inflight = (running, concurrent.futures.Future())
    worker._accumulate({P0: chunk(P0, 0, 1, 2)})
    worker._maybe_cut()  # full while Spark runs: cut, waiting (overlap)
    assert worker._ready is not None and worker._ready.ranges == {P0: PartitionRange(None, 0, 2, 3)}
    assert worker._acc_count == 0
    worker._accumulate({P0: chunk(P0, 3)})
    worker._maybe_cut()  # at most one batch waits
    assert worker._ready.id == 1 and worker._acc_count == 1
    worker._reconcile_pause(stopping=False)
    assert consumer.paused_set == {P0, P1}
    executor = Executor()
    worker._maybe_submit(executor)  # type: ignore[arg-type]
    assert executor.submitted == []  # Spark still busy
    worker._inflight = None
    worker._marks[P0] = 0  # as if the running batch had moved it
    worker._maybe_submit(executor)  # type: ignore[arg-type]
    (batch,) = executor.submitted
    assert batch.ranges == {P0: PartitionRange(0, 0, 2, 3)}  # expected mark taken at submit time
    assert worker._ready is None
    worker._reconcile_pause(stopping=False)
    assert consumer.paused_set == set()


def test_without_overlap_nothing_is_cut_while_spark_runs(tmp_path: Path) -> None:
    consumer = FakeConsumer(assigned={P0})
    worker = make_worker(tmp_path, consumer, max_records=3, overlap=False)
    worker._on_assigned(frozenset({P0}), consumer)
    worker._inflight = (Batch(1, [], {}, 0, "t"), concurrent.futures.Future())
    worker._accumulate({P0: chunk(P0, 0, 1, 2)})
    worker._maybe_cut()
    assert worker._ready is None and worker._acc_count == 3


def test_revoked_and_rewound_partitions_leave_the_waiting_batch(tmp_path: Path) -> None:
    consumer = FakeConsumer(assigned={P0, P1, P2})
    worker = make_worker(tmp_path, consumer, max_records=4)
    worker._on_assigned(frozenset({P0, P1, P2}), consumer)
    running = Batch(1, [], {P2: PartitionRange(None, 0, 9, 10)}, 10, "t")
    worker._inflight = (running, concurrent.futures.Future())
    worker._accumulate({P0: chunk(P0, 0, 1), P1: chunk(P1, 0, 1), P2: chunk(P2, 10)})
    worker._maybe_cut()
    ready = worker._ready
    assert ready is not None and set(ready.ranges) == {P0, P1, P2} and ready.records == 5
    worker._delay_revokes(frozenset({P1}))
    assert set(ready.ranges) == {P0, P2} and ready.dropped == {P1} and ready.records == 3
    # The running batch is discarded: its partition P2 is re-read from the mark, so the waiting batch's
    # later P2 records must go too.
    done: concurrent.futures.Future[_Outcome] = concurrent.futures.Future()
    done.set_result(_Outcome(BatchReport(1, "conflict", 10, 1), conflicts={P2: (None, 3)}))
    worker._inflight = (running, done)
    worker._check_inflight()
    assert set(ready.ranges) == {P0} and ready.dropped == {P1, P2}
    assert (P2, 0) in consumer.seeks


def test_without_partitions_filters_the_table() -> None:
    from kafka_handoff.pipeline.arrow import chunks_to_table
    from kafka_handoff.pipeline.worker import without_partitions

    table = chunks_to_table([chunk(P0, 0, 1), chunk(P1, 5), chunk(P2, 7, 8)])
    left = without_partitions(table, {P1, P2})
    assert left.column("partition").to_pylist() == [0, 0]
    assert without_partitions(table, set()).num_rows == 5


def test_latency_origins_use_the_timestamp_only_when_it_is_plausible() -> None:
    from kafka_handoff.pipeline.arrow import chunks_to_table
    from kafka_handoff.pipeline.worker import latency_origins

    start = 1_000_000.0
    c0 = ColumnChunk("ev", 0, [0, 1, 2, 3], [1_000_500, 5, 1_000_900, 9_999_999], [None] * 4, [b"x"] * 4,
                     [()] * 4)  # fmt: skip
    c1 = ColumnChunk("ev", 1, [7], [1_000_100], [None], [b"x"], [()])
    table = chunks_to_table([c0, c1])
    segments = {P0: [(0, 1_000_600.0), (2, 1_001_000.0)], P1: [(7, 1_000_200.0)]}
    origins = latency_origins(table, segments, start).tolist()
    # 0: live record (timestamp used); 1: synthetic old time -> fetch time of its segment; 2: live, second
    # segment; 3: a timestamp in the future -> fetch time; P1: live.
    assert origins == [1_000_500, 1_000_600, 1_000_900, 1_001_000, 1_000_100]


def test_backpressure_pauses_owned_partitions_while_the_next_batch_is_full(tmp_path: Path) -> None:
    consumer = FakeConsumer(assigned={P0, P1})
    worker = make_worker(tmp_path, consumer, max_records=3, overlap=False)
    worker._on_assigned(frozenset({P0, P1}), consumer)
    worker._inflight = (Batch(1, [], {}, 0, "t"), concurrent.futures.Future())
    worker._accumulate({P0: chunk(P0, 0, 1, 2)})
    worker._reconcile_pause(stopping=False)
    assert consumer.paused_set == {P0, P1}
    worker._inflight = None
    worker._maybe_cut()
    worker._maybe_submit(Executor())  # type: ignore[arg-type]
    worker._reconcile_pause(stopping=False)
    assert consumer.paused_set == set()


def test_a_free_spark_waits_briefly_for_the_tail_of_a_backlog_then_cuts(tmp_path: Path) -> None:
    consumer = FakeConsumer(assigned={P0})
    worker = make_worker(tmp_path, consumer, max_records=1000, min_records=10)
    worker._on_assigned(frozenset({P0}), consumer)
    consumer.lag = {P0: 5000}
    worker.sizer.observe_lag(worker._lag(), 0)  # a backlog: the target grows to the cap
    worker.sizer.observe_batch(1000, 1000, 1.0)  # 1 ms per record: 1,000 within the latency target
    worker._spark_free_since -= 60  # Spark was last free a minute ago, before the running batch
    # The running batch ends: Spark is free from now on.
    done: concurrent.futures.Future[_Outcome] = concurrent.futures.Future()
    done.set_result(_Outcome(BatchReport(1, "cancelled", 0, 0)))
    worker._inflight = (Batch(1, [], {}, 0, "t"), done)
    worker._check_inflight()
    worker._accumulate({P0: chunk(P0, *range(200))})
    consumer.lag = {P0: 1}  # the last record of the backlog is still being fetched
    worker.sizer.observe_lag(worker._lag(), worker._acc_count)
    worker._maybe_cut()
    assert worker._ready is None and worker._acc_count == 200  # waits for it
    worker._spark_free_since -= TAIL_WAIT_MS / 1000  # it did not come within the wait
    worker._maybe_cut()
    assert worker._ready is not None and worker._ready.records == 200 and worker._ready.reason == "caught-up"


def test_a_failed_kafka_commit_after_a_sink_commit_is_retried_until_kafka_has_the_marks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The group coordinator's node was killed: the Kafka commit after the sink commit fails.  Without a
    # retry, Kafka's committed offset of P0 would stay behind the sink's mark for good (no later batch).
    consumer = FailingCommits(assigned={P0, P1}, failures=2)
    worker = make_worker(tmp_path, consumer)
    worker._on_assigned(frozenset({P0, P1}), consumer)
    clock = [1000.0]
    monkeypatch.setattr("kafka_handoff.pipeline.worker.time.monotonic", lambda: clock[0])
    batch = Batch(1, [], {P0: PartitionRange(None, 0, 9, 10)}, 10, "t")
    done: concurrent.futures.Future[_Outcome] = concurrent.futures.Future()
    done.set_result(_Outcome(BatchReport(1, "committed", 10, 1), {P0: MarkUpdate(None, 10)}))
    worker._inflight = (batch, done)
    worker._check_inflight()
    assert consumer.commits == [] and worker.stats.kafka_commit_failures == 1
    worker._retry_kafka_commit()  # not before the backoff (1 s)
    assert consumer.attempts == 1
    clock[0] += 1.0
    worker._retry_kafka_commit()  # fails again: the backoff doubles
    assert consumer.attempts == 2 and consumer.commits == []
    clock[0] += 1.5
    worker._retry_kafka_commit()
    assert consumer.attempts == 2
    clock[0] += 0.5
    worker._retry_kafka_commit()
    assert consumer.commits == [{P0: OffsetAndMetadata(10)}]
    clock[0] += 60
    worker._retry_kafka_commit()  # nothing pending any more
    assert consumer.attempts == 3


def test_a_pending_kafka_commit_of_a_partition_no_longer_owned_is_dropped(tmp_path: Path) -> None:
    consumer = FailingCommits(assigned={P0}, failures=1)
    worker = make_worker(tmp_path, consumer)
    worker._on_assigned(frozenset({P0}), consumer)
    batch = Batch(1, [], {P0: PartitionRange(None, 0, 9, 10)}, 10, "t")
    done: concurrent.futures.Future[_Outcome] = concurrent.futures.Future()
    done.set_result(_Outcome(BatchReport(1, "committed", 10, 1), {P0: MarkUpdate(None, 10)}))
    worker._inflight = (batch, done)
    worker._check_inflight()
    worker._on_revoked(frozenset({P0}))  # the next owner catches Kafka up to the sink's mark itself
    worker._last_kafka_commit()
    assert consumer.attempts == 1 and consumer.commits == []


class FailingCommits(FakeConsumer):
    def __init__(self, *, assigned: Iterable[TopicPartition], failures: int) -> None:
        super().__init__(assigned)
        self.failures = failures
        self.attempts = 0

    def commit_sync(
        self, offsets: dict[TopicPartition, OffsetAndMetadata], timeout: float | None = None
    ) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise KafkaError("the group coordinator is not available")
        super().commit_sync(offsets, timeout)


def test_a_member_waiting_for_its_first_assignment_is_not_idle_until_a_bound(tmp_path: Path) -> None:
    """``until_idle_s`` counts quiet time once the member owns partitions: a slow join (a busy machine) is
    not idleness -- a restarted worker used to give up before its first assignment and read nothing."""
    import time

    from kafka_handoff.pipeline.worker import UNASSIGNED_IDLE_S

    consumer = FakeConsumer()
    worker = make_worker(tmp_path, consumer)
    worker.until_idle_s = 2.0
    worker._last_activity = time.monotonic() - 10.0  # quiet for longer than until_idle_s
    assert not worker._idle()  # no assignment yet: still joining
    worker._last_activity = time.monotonic() - UNASSIGNED_IDLE_S - 1.0
    assert worker._idle()  # a member the group leaves without partitions does stop
    worker._on_assigned(frozenset({P0}), consumer)
    assert not worker._idle()  # the assignment is activity
    worker._last_activity = time.monotonic() - 10.0
    assert worker._idle()  # owning partitions, quiet for longer than until_idle_s


def test_an_unexpected_pyspark_failure_names_its_error_class() -> None:
    from pyspark.errors import PySparkRuntimeError

    from kafka_handoff.pipeline.worker import _describe_failure

    text = _describe_failure(PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={}))
    assert "JAVA_GATEWAY_EXITED" in text and "Java gateway process exited" in text
    assert _describe_failure(ValueError("x")) == "ValueError('x')"
