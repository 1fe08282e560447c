"""The pipeline worker: one consumer-group member feeding micro-batches through Spark into a sink.

Threads
-------
* **main thread** -- owns the :class:`~kafka_handoff.consumer.Consumer` (it is not thread-safe): polls
  continuously (records as columns, :func:`~kafka_handoff.consumer.batch.poll_columns`), runs the rebalance
  callbacks, accumulates the next batch, decides KIP-983 delays, commits offsets to Kafka.
* **build thread** (one) -- turns a cut batch's columns into its Arrow table
  (:func:`~kafka_handoff.pipeline.arrow.chunks_to_table`).
* **spark thread** (one) -- runs one batch at a time: ``createDataFrame`` -> transform -> dead-letter
  handling -> conditional sink commit.

``poll()`` never stops while Spark works, so the member keeps heartbeating and reacting to rebalances (under
KIP-848 not polling for ``max.poll.interval.ms`` fences it).  Overlap (``batch.overlap``, default on): while
Spark runs one batch the next one accumulates, is cut when it reaches its target size and its Arrow table is
built meanwhile; at most one batch waits (cut, not yet in Spark) -- while it waits the owned partitions are
paused (poll keeps running, nothing is fetched), so at most two batches are in memory.  Batch sizes come from
:class:`~kafka_handoff.pipeline.sizing.BatchSizer` (``batch.adaptive``): grown while the consumer lags,
sized to ``batch.target_latency_ms`` and cut as soon as Spark is free once caught up.

Exactly-once
------------
The sink is the source of truth.  Every sink commit stores, atomically with the data, a mark per input
partition (the offset after the batch's last record) and succeeds only if the stored marks still equal the
ones this member read (:mod:`kafka_handoff.pipeline.sinks.base`).  On assignment the member resumes each
partition at max(committed offset, sink mark); records below the mark are dropped (also when a batch is
cut).  The Kafka commit after the sink commit is an optimisation (restart position, lag tools).

Rebalances
----------
* revoke requested for partitions of the running batch -> ``delay_revoke`` on every poll until the batch
  is committed (and its Kafka offsets with it); accumulated records of revoked partitions are dropped, and
  so are they from the waiting batch (its Arrow table is filtered before Spark sees it).
* partitions lost -> the running batch's Spark jobs are cancelled (job tag) and its output discarded; its
  other partitions are re-read from their marks.  Everything else keeps flowing.
* a mark conflict (another member wrote first) -> the batch is discarded, its partitions resume from the
  sink's marks.

Errors: a transform that raises, a wrong config, a sink failure or malformed records under
``errors.malformed = "fail"`` stop the worker with an error naming the batch's partitions and offsets;
nothing is committed for that batch (neither to the sink nor to Kafka).

Latency (record -> sink commit) is measured from the record's timestamp only when that is plausible as
its append time (not older than the worker's start, not later than the fetch); otherwise -- backlogs,
synthetic event times -- from the time the worker first fetched the record.

Executors mode
--------------
With ``spark.read_on = "executors"`` (the default on a cluster master) the member reads no records: its
owned partitions stay paused (``poll()`` keeps running for membership, callbacks and KIP-983 delays) and a
batch is an offset range ``[start, end)`` per partition -- ``start`` the partition's next offset (its mark),
``end`` at most the consumer's ``end_offsets`` (the last stable offset under ``read_committed``).  Spark
tasks read the ranges themselves (:mod:`kafka_handoff.pipeline.ranges`, large ranges split across tasks),
the transform runs on that DataFrame, executors write the sink's data files (Parquet; Delta data files
committed by this process with delta-rs) and the sink commit stores ``end`` as each partition's mark:
exactly the ranges the tasks read.  One batch runs at a time (no overlap); batch sizes follow the lag seen
in ``end_offsets`` (the same :class:`BatchSizer`).  Not measured there: bytes and latency per record.

Test hook: ``HANDOFF_PIPELINE_CRASH_AFTER_SINK=N`` makes the process ``os._exit(86)`` right after its
N-th sink commit, before the Kafka commit.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_handoff.consumer.batch import ColumnChunk, poll_columns
from kafka_handoff.errors import KafkaError
from kafka_handoff.pipeline.arrow import chunks_to_table
from kafka_handoff.pipeline.config import PipelineConfig
from kafka_handoff.pipeline.deadletter import DeadLetter, make_dead_letter
from kafka_handoff.pipeline.errors import (
    MarkConflictError,
    PipelineError,
    SinkError,
    TransformError,
)
from kafka_handoff.pipeline.handover import BatchSpool, Handover
from kafka_handoff.pipeline.ranges import OffsetRange, executor_consumer_config, range_frame, split_ranges
from kafka_handoff.pipeline.sinks import MarkUpdate, Sink, make_sink
from kafka_handoff.pipeline.sizing import BatchSizer
from kafka_handoff.pipeline.spark import JobControl, build_session
from kafka_handoff.pipeline.stats import BatchReport, WorkerStats, WorkerSummary, format_batch_line
from kafka_handoff.pipeline.transform import (
    AvroSource,
    NativeInput,
    avro_source,
    load_transform,
    native_input,
    normalize_result,
)
from kafka_handoff.types import OffsetAndMetadata, TopicPartition

__all__ = ["CRASH_ENV", "Worker", "describe_ranges"]

log = logging.getLogger(__name__)

CRASH_ENV = "HANDOFF_PIPELINE_CRASH_AFTER_SINK"
CRASH_EXIT_CODE = 86
#: Backoff of retried Kafka commits (after a sink commit whose Kafka commit failed).
COMMIT_RETRY_MIN_S = 1.0
COMMIT_RETRY_MAX_S = 30.0
#: ``until_idle_s`` before the first assignment: how long a member may wait for the group to give it
#: partitions before it counts as idle (the join is not idleness; see ``Worker._idle``).
UNASSIGNED_IDLE_S = 60.0


@dataclass(frozen=True, slots=True)
class PartitionRange:
    expected: int | None
    """The sink mark this member believed when the batch was cut (None: no mark yet)."""
    first: int
    last: int
    count: int


def describe_ranges(ranges: Mapping[TopicPartition, Any]) -> str:
    """``events-0 offsets 100..199, events-3 offsets 5..88`` (values: PartitionRange or (first, last))."""
    parts = []
    for tp in sorted(ranges):
        r = ranges[tp]
        first, last = (r.first, r.last) if isinstance(r, PartitionRange) else r
        parts.append(f"{tp.topic}-{tp.partition} offsets {first}..{last}")
    return ", ".join(parts)


#: Per partition: (first offset, wall-clock ms) of each polled chunk -- when its records were first fetched.
Segments = dict[TopicPartition, list[tuple[int, float]]]


@dataclass
class Batch:
    id: int
    chunks: list[ColumnChunk]
    ranges: dict[TopicPartition, PartitionRange]
    records: int
    tag: str
    cut_at: float = field(default_factory=time.monotonic)
    cancelled: threading.Event = field(default_factory=threading.Event)
    segments: Segments = field(default_factory=dict)
    table: concurrent.futures.Future[Built] | None = None
    """The Arrow table (and its spooled file), built by the build thread (None: build it in the spark
    thread)."""
    spool: BatchSpool | None = None
    """Where the batch's DataFrames come from (:mod:`~kafka_handoff.pipeline.handover`); closed when the
    batch is done."""
    dropped: set[TopicPartition] = field(default_factory=set)
    """Partitions taken out after the cut (revoked, rewound): filtered from the table before Spark."""
    target: int = 0
    reason: str = ""

    def describe(self) -> str:
        return f"batch {self.id} ({describe_ranges(self.ranges)})"

    def first_last(self) -> dict[TopicPartition, tuple[int, int]]:
        return {tp: (r.first, r.last) for tp, r in self.ranges.items()}

    def drop(self, partitions: Collection[TopicPartition]) -> None:
        """Take ``partitions`` out of a batch that is not running yet."""
        for tp in partitions:
            r = self.ranges.pop(tp, None)
            if r is not None:
                self.records -= r.count
                self.dropped.add(tp)
                self.segments.pop(tp, None)


@dataclass(frozen=True)
class Built:
    table: Any
    """The batch's Arrow table."""
    path: Path | None = None
    """The table as a spooled Parquet file (``spark.handover`` files), or None."""


def build_table(batch: Batch) -> Built:
    """The batch's Arrow table and its spooled file (run in the build thread); frees the Python columns."""
    table = chunks_to_table(batch.chunks)
    batch.chunks = []
    path = batch.spool.write(table) if batch.spool is not None else None
    return Built(table, path)


def without_partitions(table: Any, partitions: Collection[TopicPartition]) -> Any:
    """``table`` minus the rows of ``partitions``."""
    drop = None
    for tp in partitions:
        cond = pc.and_(pc.equal(table["topic"], tp.topic), pc.equal(table["partition"], tp.partition))
        drop = cond if drop is None else pc.or_(drop, cond)
    return table if drop is None else table.filter(pc.invert(drop))


def latency_origins(table: Any, segments: Segments, run_start_ms: float) -> Any:
    """Per row of ``table``: when the record entered the pipeline's view, in ms since the epoch -- its
    timestamp if that lies between the worker's start and the record's first fetch (CreateTime of a live
    producer, or LogAppendTime), else the first fetch (a backlog, or synthetic event times)."""
    ts = table.column("timestamp").cast(pa.int64()).to_numpy().astype(np.float64)
    fetched = np.full(len(ts), time.time() * 1000.0)
    if segments and len(ts):
        offsets = table.column("offset").to_numpy()
        for tp, segs in segments.items():
            if not segs:
                continue
            if len(segments) == 1:
                mask = np.ones(len(ts), dtype=bool)
            else:
                mask = np.asarray(
                    pc.and_(pc.equal(table["topic"], tp.topic), pc.equal(table["partition"], tp.partition)),
                    dtype=bool,
                )
            firsts = np.array([f for f, _ in segs], dtype=np.int64)
            times = np.array([t for _, t in segs], dtype=np.float64)
            idx = np.clip(np.searchsorted(firsts, offsets[mask], side="right") - 1, 0, None)
            fetched[mask] = times[idx]
    honest = (ts >= run_start_ms) & (ts <= fetched)
    return np.where(honest, ts, fetched)


@dataclass
class _Outcome:
    report: BatchReport
    updates: dict[TopicPartition, MarkUpdate] = field(default_factory=dict)
    conflicts: dict[TopicPartition, tuple[int | None, int | None]] = field(default_factory=dict)


class _Listener:
    """The worker's rebalance listener (KIP-1306 form: partitions and a restricted consumer view)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def on_partitions_assigned(self, partitions: Collection[TopicPartition], consumer: Any) -> None:
        self.worker._on_assigned(frozenset(partitions), consumer)

    def on_partitions_revoked(self, partitions: Collection[TopicPartition], consumer: Any) -> None:
        self.worker._on_revoked(frozenset(partitions))

    def on_partitions_lost(self, partitions: Collection[TopicPartition], consumer: Any) -> None:
        self.worker._on_lost(frozenset(partitions))


class Worker:
    """One pipeline member.  ``run()`` blocks until stopped (signal, :meth:`stop`, ``max_records``,
    ``until_idle_s``) and returns the :class:`WorkerSummary`; it raises :class:`PipelineError` (after a
    clean shutdown) when a batch fails."""

    def __init__(
        self,
        config: PipelineConfig,
        *,
        console: Any = None,
        max_records: int | None = None,
        until_idle_s: float | None = None,
        spark: Any = None,
        member: str | None = None,
        on_batch: Callable[[BatchReport], None] | None = None,
        metrics: Any = None,
    ) -> None:
        """``metrics``: a :class:`kafka_handoff.metrics.prometheus.KafkaCollector` (or anything with its
        ``add``/``add_gauges``) that gets the worker's consumer and counters."""
        self.config = config
        self.console = console
        self.max_records = max_records
        self.until_idle_s = until_idle_s
        self.member = member or f"{socket.gethostname()}-{os.getpid()}"
        self.on_batch = on_batch
        self._given_spark = spark
        self.spark: Any = spark
        self.stats = WorkerStats()
        self._metrics = metrics
        if metrics is not None:
            metrics.add_gauges(
                "kafka_handoff_pipeline",
                "pipeline worker",
                {"member": self.member, "group": config.group_id},
                self.stats.metric_values,
            )
        self._stop = threading.Event()
        self._signals = 0
        crash = os.environ.get(CRASH_ENV, "").strip()
        self._crash_after = int(crash) if crash.isdigit() and int(crash) > 0 else None
        self._sink_commits = 0
        # main-thread state
        self._owned: set[TopicPartition] = set()
        self._marks: dict[TopicPartition, int | None] = {}
        self._acc: dict[TopicPartition, ColumnChunk] = {}
        self._acc_segments: Segments = {}
        self._acc_count = 0
        self._acc_started: float | None = None
        self._ready: Batch | None = None
        self._inflight: tuple[Batch, concurrent.futures.Future[_Outcome]] | None = None
        # Sink marks whose Kafka commit failed, retried after a backoff (_commit_to_kafka).
        self._commit_pending: dict[TopicPartition, OffsetAndMetadata] = {}
        self._commit_retry_at = 0.0
        self._commit_backoff = COMMIT_RETRY_MIN_S
        self._builder: concurrent.futures.ThreadPoolExecutor | None = None
        self._run_start_ms = time.time() * 1000.0
        b = config.batch
        self.sizer = BatchSizer(
            max_records=b.max_records,
            min_records=b.min_records,
            max_bytes=b.max_bytes,
            target_latency_ms=b.target_latency_ms,
            max_interval_ms=b.max_interval_ms,
            adaptive=b.adaptive,
        )
        self._batch_ids = 0
        self._last_activity = self._spark_free_since = time.monotonic()
        self._consumer: Any = None
        self._sink: Sink | None = None
        self._dead: DeadLetter | None = None
        self._transform: Callable[[Any], Any] | None = None
        self._avro: AvroSource | None = None
        self._jobs: JobControl | None = None
        self._handover: Handover | None = None
        self._executors = config.spark.on_executors
        self._next: dict[TopicPartition, int] = {}
        """Executors mode: the next offset of each owned partition (where its next range starts)."""
        self._tasks = 2

    # ------------------------------------------------------------------------------------------- control
    def stop(self) -> None:
        """Ask the worker to stop (thread-safe): the running batch finishes and is committed, then the
        member leaves the group."""
        self._stop.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}: stopping now")
        log.warning("%s: finishing the running batch, then leaving the group", signal.Signals(signum).name)
        self.stop()

    # ------------------------------------------------------------------------------------------- setup
    def _setup(self) -> None:
        cfg = self.config
        self._transform = load_transform(cfg.transform)
        self._avro = avro_source(cfg)
        self._sink = make_sink(cfg.sink, pipeline=cfg)
        self._dead = make_dead_letter(cfg, self._sink)
        if self.spark is None:
            self._say(f"[dim]starting Spark ({cfg.spark.remote or cfg.spark.master}) ...[/dim]")
            self.spark = build_session(cfg.spark)
        self._jobs = JobControl(self.spark)
        if self._executors:
            bind_writes = getattr(self._sink, "write_on_executors", None)
            if bind_writes is not None:
                bind_writes(True)
            try:
                self._tasks = max(1, int(self.spark.sparkContext.defaultParallelism))
            except Exception:  # Spark Connect: no SparkContext
                self._tasks = max(1, int(self.spark.conf.get("spark.default.parallelism", "2") or 2))
        self._handover = Handover(
            self.spark,
            mode=cfg.spark.handover,
            local=cfg.spark.local and not self._jobs.connect,
            spool_dir=cfg.spark.spool_dir,
            owner=f"{cfg.name}-{self.member}",
        )

    def _say(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text, highlight=False)

    def run(self) -> WorkerSummary:
        """Run until stopped; see the class docstring."""
        installed: list[tuple[signal.Signals, Any]] = []
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                installed.append((sig, signal.signal(sig, self._on_signal)))
        executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="handoff-spark")
        self._builder = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="handoff-build")
        self._run_start_ms = time.time() * 1000.0
        status, error_text = "stopped", None
        failure: BaseException | None = None
        try:
            self._setup()
            from kafka_handoff.consumer import Consumer

            consumer_config = dict(self.config.consumer)
            consumer_config.setdefault("client.id", f"handoff-pipeline-{self.member}")
            self._consumer = Consumer(consumer_config)
            if self._metrics is not None:
                self._metrics.add(self._consumer)
            bind = getattr(self._sink, "bind_consumer", None)
            if bind is not None:  # the Kafka sink commits the group's offsets in its transactions
                bind(self._consumer, self.member)
            self._consumer.set_rebalance_listener(_Listener(self))
            self._consumer.subscribe(list(self.config.topics))
            self._last_activity = time.monotonic()
            handover = self._handover.describe() if self._handover else "-"
            if self._executors:
                handover = "offset ranges read by the executors"
            self._say(
                f"[bold]{self.member}[/bold] joining group [bold]{self.config.group_id}[/bold] "
                f"({self.config.consumer['group.protocol']} protocol) for {', '.join(self.config.topics)}; "
                f"sink: {self._sink.describe() if self._sink else '-'}; batches reach Spark as "
                f"{handover}"
            )
            status = self._loop_ranges(executor) if self._executors else self._loop(executor)
        except BaseException as exc:
            failure = exc
            status = "failed" if not isinstance(exc, KeyboardInterrupt) else "interrupted"
            error_text = str(exc)
        finally:
            self._shutdown(executor, abandon=failure is not None)
            for sig, previous in installed:
                signal.signal(sig, previous)
        summary = self.stats.summary(self.member, self.config.group_id, status, error_text)
        if failure is not None:
            if isinstance(failure, PipelineError | KafkaError | KeyboardInterrupt):
                failure.summary = summary  # type: ignore[union-attr]
                raise failure
            raise PipelineError(f"the pipeline worker failed: {_describe_failure(failure)}") from failure
        return summary

    def _shutdown(self, executor: concurrent.futures.ThreadPoolExecutor, abandon: bool) -> None:
        if self._inflight is not None:
            batch, future = self._inflight
            if abandon:
                batch.cancelled.set()
                if self._jobs is not None:
                    self._jobs.cancel(batch.tag)
            try:
                future.result(timeout=120)
            except BaseException:
                pass
            self._inflight = None
        self._ready = None
        executor.shutdown(wait=True)
        if self._builder is not None:
            self._builder.shutdown(wait=True, cancel_futures=True)
        if self._handover is not None:
            self._handover.close()
        if self._consumer is not None:
            try:
                self._consumer.close(timeout=30)
            except Exception:
                log.warning("closing the consumer failed", exc_info=True)
        if self._dead is not None:
            self._dead.close()
        close_sink = getattr(self._sink, "close", None)
        if close_sink is not None:
            close_sink()
        if self._given_spark is None and self.spark is not None:
            try:
                self.spark.stop()
            except Exception:
                log.debug("stopping Spark failed", exc_info=True)

    # ------------------------------------------------------------------------------------------- loop
    def _loop(self, executor: concurrent.futures.ThreadPoolExecutor) -> str:
        consumer = self._consumer
        timeout = self.config.batch.poll_timeout_ms / 1000.0
        while True:
            stopping = self._stop.is_set() or self._done_by_count()
            if stopping and self._acc_count:
                self._drop_accumulated(set(self._acc))
            if stopping and self._ready is not None:
                # Cut but never run: nothing of it was committed; a restart or the next owner re-reads it.
                self._ready = None
            if stopping and self._inflight is None:
                self._last_kafka_commit()
                return "stopped" if self._stop.is_set() else "max-records"
            if self._idle():
                self._last_kafka_commit()
                return "idle"
            self._reconcile_pause(stopping)
            records = poll_columns(consumer, timeout)
            if records:
                self._last_activity = time.monotonic()
                if not stopping:
                    self._accumulate(records.by_partition())
                else:
                    self.stats.saw_records(len(records))
            self._check_inflight()
            self._retry_kafka_commit()
            self._delay_revokes(records.to_be_revoked_partitions)
            if not stopping:
                self.sizer.observe_lag(self._lag(), self._acc_count)
                self._maybe_cut()
                self._maybe_submit(executor)

    def _loop_ranges(self, executor: concurrent.futures.ThreadPoolExecutor) -> str:
        """Executors mode (module docstring): poll for membership only, cut offset-range batches."""
        consumer = self._consumer
        timeout = self.config.batch.poll_timeout_ms / 1000.0
        next_look = 0.0
        while True:
            stopping = self._stop.is_set() or self._done_by_count()
            if stopping and self._inflight is None:
                self._last_kafka_commit()
                return "stopped" if self._stop.is_set() else "max-records"
            if self._idle():
                self._last_kafka_commit()
                return "idle"
            assigned = consumer.assignment()
            unpaused = assigned - consumer.paused()
            if unpaused:
                consumer.pause(unpaused)
            # (Records fetched before the pause took effect are dropped: the executors read those offsets.)
            records = poll_columns(consumer, timeout)
            self._check_inflight()
            self._retry_kafka_commit()
            self._delay_revokes(records.to_be_revoked_partitions)
            if not stopping and self._inflight is None and time.monotonic() >= next_look:
                next_look = time.monotonic() + timeout
                self._cut_ranges(executor)

    def _cut_ranges(self, executor: concurrent.futures.ThreadPoolExecutor) -> None:
        """Look at the owned partitions' end offsets; submit a batch of ranges if any partition has more."""
        consumer = self._consumer
        owned = sorted(self._owned)
        if not owned:
            return
        for tp in owned:
            if tp not in self._next:
                position = consumer.position(tp, timeout=30)
                mark = self._marks.get(tp)
                self._next[tp] = position if mark is None else max(mark, position)
        ends = consumer.end_offsets(owned, timeout=30)
        lag = {tp: ends[tp] - self._next[tp] for tp in owned if tp in ends and ends[tp] > self._next[tp]}
        total = sum(lag.values())
        self.sizer.observe_lag(total, 0)
        if not lag or any(tp not in self._owned for tp in lag):  # (revoked during end_offsets)
            return
        target = self.sizer.target
        ranges: dict[TopicPartition, PartitionRange] = {}
        for tp, available in lag.items():
            take = min(available, max(1, -(-target * available // total)))
            start = self._next[tp]
            ranges[tp] = PartitionRange(self._marks.get(tp), start, start + take - 1, take)
        self._batch_ids += 1
        batch = Batch(
            id=self._batch_ids,
            chunks=[],
            ranges=ranges,
            records=sum(r.count for r in ranges.values()),
            tag=f"handoff-{self.config.name}-{self.member}-batch-{self._batch_ids}",
            target=target,
            reason="backlog" if self.sizer.backlog else "caught-up",
        )
        self.sizer.batch_cut()
        self.stats.saw_records(batch.records)  # offsets in the ranges (markers and aborted ones included)
        self._last_activity = time.monotonic()
        self._inflight = (batch, executor.submit(self._process, batch))

    def _done_by_count(self) -> bool:
        return self.max_records is not None and self.stats.records_committed >= self.max_records

    def _idle(self) -> bool:
        if self.until_idle_s is None or self._acc_count:
            return False
        if self._inflight is not None or self._ready is not None:
            return False
        quiet = time.monotonic() - self._last_activity
        if not self.stats.assigned:
            # Still joining: a member waiting for its first assignment is not idle, or a slow join (a busy
            # machine, a rebalance in progress) would end the run before it read anything.  Bounded, for a
            # member that the group leaves without partitions.
            return quiet >= max(self.until_idle_s, UNASSIGNED_IDLE_S)
        return quiet >= self.until_idle_s

    def _backpressure(self) -> bool:
        """Stop fetching: a batch is waiting for Spark, or the accumulating one is full."""
        return self._ready is not None or self._acc_count >= self.sizer.target

    def _lag(self) -> int | None:
        """Records on the broker not yet fetched, over the owned partitions (from the last fetch
        responses; None if unknown for all)."""
        lag_of = getattr(self._consumer, "current_lag", None)
        if lag_of is None:
            return None
        total, known = 0, False
        for tp in self._owned:
            try:
                lag = lag_of(tp)
            except Exception:  # e.g. not assigned any more
                lag = None
            if lag is not None:
                total += lag
                known = True
        return total if known else None

    def _reconcile_pause(self, stopping: bool) -> None:
        consumer = self._consumer
        assigned = consumer.assignment()
        want = (assigned & self._owned) if (stopping or self._backpressure()) else frozenset()
        current = consumer.paused()
        if want - current:
            consumer.pause(want - current)
        if (current - want) & assigned:
            consumer.resume((current - want) & assigned)

    def _accumulate(self, chunks: Mapping[TopicPartition, ColumnChunk]) -> None:
        fetched_ms = time.time() * 1000.0
        for tp, chunk in chunks.items():
            n = len(chunk)
            self.stats.saw_records(n)
            if tp not in self._owned:
                continue
            mark = self._marks.get(tp)
            if mark is not None:
                n -= chunk.drop_below(mark)
            if not n:
                continue
            acc = self._acc.get(tp)
            self._acc_segments.setdefault(tp, []).append((chunk.first_offset(), fetched_ms))
            if acc is None:
                self._acc[tp] = chunk
            else:
                acc.extend(chunk)
            self._acc_count += n
            if self._acc_started is None:
                self._acc_started = time.monotonic()

    def _drop_accumulated(self, partitions: Collection[TopicPartition]) -> None:
        for tp in partitions:
            chunk = self._acc.pop(tp, None)
            self._acc_segments.pop(tp, None)
            if chunk is not None:
                self._acc_count -= len(chunk)
        if self._ready is not None:
            # The waiting batch holds records before the accumulated ones: they go together.
            self._ready.drop(partitions)
        if not self._acc:
            self._acc_count = 0
            self._acc_started = None

    def _inflight_partitions(self) -> frozenset[TopicPartition]:
        if self._inflight is None:
            return frozenset()
        return frozenset(self._inflight[0].ranges)

    def _delay_revokes(self, to_be_revoked: frozenset[TopicPartition]) -> None:
        if not to_be_revoked:
            return
        # Not-yet-submitted records of partitions on their way out: the next owner re-reads them.
        self._drop_accumulated(to_be_revoked)
        busy = to_be_revoked & self._inflight_partitions()
        if busy:
            if self._consumer.delay_revoke(busy):
                self.stats.revokes_delayed += len(busy)
                log.info("delaying the revoke of %s until batch %d is committed", sorted(busy),
                         self._inflight[0].id if self._inflight else -1)  # fmt: skip
            else:
                log.warning(
                    "could not delay the revoke of %s any longer; the running batch's commit stays "
                    "conditional on the sink marks",
                    sorted(busy),
                )

    # ------------------------------------------------------------------------------------------- batches
    def _maybe_cut(self) -> None:
        """Close the accumulating batch when the sizer says so (at most one batch waits for Spark); its
        Arrow table is built in the build thread meanwhile."""
        if self._ready is not None or not self._acc_count:
            return
        spark_free = self._inflight is None
        if not spark_free and not self.config.batch.overlap:
            return
        started = self._acc_started or time.monotonic()
        now = time.monotonic()
        free_ms = (now - self._spark_free_since) * 1000 if spark_free else 0.0
        decision = self.sizer.should_cut(self._acc_count, (now - started) * 1000, spark_free, free_ms)
        if not decision.cut:
            return
        target = self.sizer.target
        chunks: list[ColumnChunk] = []
        ranges: dict[TopicPartition, PartitionRange] = {}
        segments: Segments = {}
        for tp, chunk in self._acc.items():
            if tp not in self._owned:
                continue
            mark = self._marks.get(tp)
            if mark is not None:
                chunk.drop_below(mark)
            if not len(chunk):
                continue
            chunks.append(chunk)
            # ``expected`` is filled in when the batch is submitted: the running batch may move the mark.
            ranges[tp] = PartitionRange(mark, chunk.first_offset(), chunk.last_offset(), len(chunk))
            segments[tp] = self._acc_segments.get(tp, [])
        self._acc.clear()
        self._acc_segments.clear()
        self._acc_count = 0
        self._acc_started = None
        if not chunks:
            return
        self._batch_ids += 1
        batch = Batch(
            id=self._batch_ids,
            chunks=chunks,
            ranges=ranges,
            records=sum(len(c) for c in chunks),
            tag=f"handoff-{self.config.name}-{self.member}-batch-{self._batch_ids}",
            segments=segments,
            target=target,
            reason=decision.reason,
        )
        if self._handover is not None:
            batch.spool = self._handover.batch(batch.tag)
        if self._builder is not None:
            batch.table = self._builder.submit(build_table, batch)
        self._ready = batch
        self.sizer.batch_cut()

    def _maybe_submit(self, executor: concurrent.futures.ThreadPoolExecutor) -> None:
        """Hand the waiting batch to Spark once the running one is done, with the marks as they are now."""
        if self._inflight is not None or self._ready is None:
            return
        batch, self._ready = self._ready, None
        for tp, r in list(batch.ranges.items()):
            mark = self._marks.get(tp)
            if tp not in self._owned:
                batch.drop([tp])
            elif mark is not None and mark > r.first:
                # Should not happen (the mark moves only by this member's commits, which end before the
                # batch); if it does, the safe course: re-read the partition from its mark.
                log.warning("%s: sink mark %d is past the waiting batch's first offset %d; re-reading",
                            tp, mark, r.first)  # fmt: skip
                batch.drop([tp])
                self._drop_accumulated([tp])
                self._consumer.seek(tp, mark)
            else:
                batch.ranges[tp] = dataclasses.replace(r, expected=mark)
        if not batch.ranges:
            if batch.table is not None:
                batch.table.cancel()
            if batch.spool is not None and (batch.table is None or batch.table.cancelled()):
                batch.spool.close()  # (if the build thread is writing, the worker's close removes it)
            return
        self._inflight = (batch, executor.submit(self._process, batch))

    def _check_inflight(self) -> None:
        if self._inflight is None:
            return
        batch, future = self._inflight
        if not future.done():
            return
        self._inflight = None
        self._last_activity = self._spark_free_since = time.monotonic()
        try:
            outcome = future.result()
        except BaseException as exc:
            self._report(
                BatchReport(batch.id, "failed", batch.records, len(batch.ranges), detail=str(exc)[:200])
            )
            raise
        report = outcome.report
        if report.status == "committed":
            self.sizer.observe_batch(report.records, report.bytes, report.total_s)
            self._after_commit(batch, outcome)
        else:
            self._rewind(batch, outcome)
        self._report(report)

    def _report(self, report: BatchReport) -> None:
        self.stats.add_batch(report)
        self._say(format_batch_line(report))
        if self.on_batch is not None:
            self.on_batch(report)

    def _after_commit(self, batch: Batch, outcome: _Outcome) -> None:
        for tp, update in outcome.updates.items():
            if tp in self._owned:
                self._marks[tp] = update.new
                if self._executors:
                    self._next[tp] = update.new
                self._commit_pending[tp] = OffsetAndMetadata(update.new)
        self._commit_to_kafka(f"batch {batch.id}")

    def _commit_to_kafka(self, what: str) -> None:
        """Commit the sink's new marks of owned partitions to Kafka.  A failure (the group coordinator
        moving, a broker down) keeps them pending: they are committed again after a backoff (1 s, doubling
        up to 30 s) until Kafka has them -- else Kafka's committed offsets would stay behind the sink's
        marks for good when no later batch touches the partition.  (Correctness never depends on it: the
        sink holds the marks and every owner resumes from them.)"""
        pending = {tp: om for tp, om in self._commit_pending.items() if tp in self._owned}
        self._commit_pending = pending
        if not pending:
            return
        try:
            self._consumer.commit_sync(pending, timeout=30)
        except KafkaError as exc:
            self.stats.kafka_commit_failures += 1
            self._commit_retry_at = time.monotonic() + self._commit_backoff
            log.warning(
                "committing the offsets of %s to Kafka failed (the sink has them; retrying in %.0f s): %s",
                what,
                self._commit_backoff,
                exc,
            )
            self._commit_backoff = min(self._commit_backoff * 2, COMMIT_RETRY_MAX_S)
            return
        self._commit_pending = {}
        self._commit_backoff = COMMIT_RETRY_MIN_S

    def _last_kafka_commit(self) -> None:
        """Before leaving the group: one more try for pending Kafka commits, without waiting for the
        backoff."""
        if self._commit_pending:
            self._commit_retry_at = 0.0
            self._retry_kafka_commit()

    def _retry_kafka_commit(self) -> None:
        if self._commit_pending and time.monotonic() >= self._commit_retry_at:
            self._commit_to_kafka("earlier batches")

    def _rewind(self, batch: Batch, outcome: _Outcome) -> None:
        """The batch was not committed: its still-owned partitions resume from the sink's marks."""
        owned = [tp for tp in batch.ranges if tp in self._owned]
        if not owned:
            return
        fresh = self._sink.read_marks(owned) if self._sink is not None else {}
        self._drop_accumulated(owned)  # and from the waiting batch: everything after is re-read
        for tp in owned:
            mark = fresh.get(tp)
            resume = batch.ranges[tp].first if mark is None else max(batch.ranges[tp].first, mark)
            self._marks[tp] = mark
            self._consumer.seek(tp, resume)
            if self._executors:
                self._next[tp] = resume
        log.info("batch %d %s; %s resume from the sink marks", batch.id, outcome.report.status,
                 ", ".join(f"{tp.topic}-{tp.partition}" for tp in owned))  # fmt: skip

    # ------------------------------------------------------------------------------------------- spark thread
    def _process(self, batch: Batch) -> _Outcome:
        try:
            return self._process_batch(batch)
        finally:
            if batch.spool is not None:
                batch.spool.close()

    def _process_batch(self, batch: Batch) -> _Outcome:
        assert self._sink is not None and self._dead is not None and self._jobs is not None
        assert self._transform is not None
        fn = self.config.transform.function
        t0 = time.monotonic()
        report = BatchReport(batch.id, "cancelled", batch.records, len(batch.ranges))
        report.target, report.cut_reason = batch.target, batch.reason
        if batch.cancelled.is_set():
            return _Outcome(report)
        if self._executors:
            return self._process_ranges(batch, report, t0)
        built = batch.table.result() if batch.table is not None else build_table(batch)
        batch.table = None
        table, path = built.table, built.path
        if batch.dropped:
            table, path = without_partitions(table, batch.dropped), None
        spool = batch.spool or BatchSpool(self.spark, None)
        report.bytes = int(table.nbytes)
        origins = latency_origins(table, batch.segments, self._run_start_ms)
        t1 = time.monotonic()
        report.build_s = t1 - t0
        desc = batch.describe()
        with self._jobs.tagged(batch.tag):
            try:
                df = spool.frame(table) if path is None else spool.read(path, table)
                # parse_json on this very DataFrame parses the values from ``table`` with pyarrow
                # (transform.py, "Native JSON parse"); the rejected rows it returns are known as Arrow.
                with native_input(self.spark, df, table, enabled=self.config.transform.native_json,
                                  to_frame=spool.frame, avro=self._avro) as native:  # fmt: skip
                    result = normalize_result(self._transform(df), fn)
            except Exception as exc:
                if batch.cancelled.is_set():
                    return self._finish(report, t0)
                raise TransformError(f"transform {fn} failed on {desc}: {exc}", batch.first_last()) from exc
            report.transform_s = time.monotonic() - t1
            report.native_records = native.native
            # Not cached: caching the input for the rejected-records job and the output job measured 3x
            # slower on a 200,000-record batch (docs/benchmarks.md, section 3).
            return self._compute_and_commit(batch, report, table, origins, result, native, t0, t1)

    def _process_ranges(self, batch: Batch, report: BatchReport, t0: float) -> _Outcome:
        """Executors mode: Spark tasks read the batch's offset ranges; no record passes through here."""
        assert self._transform is not None and self._jobs is not None
        fn = self.config.transform.function
        pieces = split_ranges(
            [
                OffsetRange(tp.topic, tp.partition, r.first, r.last + 1)
                for tp, r in sorted(batch.ranges.items())
            ],
            self._tasks,
        )
        reader = executor_consumer_config(self.config.consumer, f"handoff-pipeline-{self.member}-reader")
        t1 = time.monotonic()
        report.build_s = t1 - t0
        with self._jobs.tagged(batch.tag):
            try:
                df = range_frame(self.spark, reader, pieces)
                with native_input(self.spark, df, None, enabled=False) as native:
                    result = normalize_result(self._transform(df), fn)
            except Exception as exc:
                if batch.cancelled.is_set():
                    return self._finish(report, t0)
                raise TransformError(
                    f"transform {fn} failed on {batch.describe()}: {exc}", batch.first_last()
                ) from exc
            report.transform_s = time.monotonic() - t1
            return self._compute_and_commit(batch, report, None, None, result, native, t0, t1)

    def _compute_and_commit(
        self,
        batch: Batch,
        report: BatchReport,
        table: Any,
        origins: Any,
        result: Any,
        native: NativeInput,
        t0: float,
        t1: float,
    ) -> _Outcome:
        assert self._sink is not None and self._dead is not None
        fn = self.config.transform.function
        desc = batch.describe()
        # (still inside _process's job tag: same thread)
        try:
            rejected = None
            if result.rejected is not None:
                # No Spark job for rejected rows the native JSON parse already holds as Arrow.
                rejected = native.rejected_arrow(result.rejected)
                if rejected is None:
                    rejected = result.rejected.toArrow()
            arrow_sink = self._sink.kind == "kafka" or (self._sink.kind == "delta" and not self._executors)
            output = result.output.toArrow() if arrow_sink else result.output
        except Exception as exc:
            if batch.cancelled.is_set():
                return self._finish(report, t0)
            raise TransformError(
                f"transform {fn} failed while Spark computed {desc}: {exc}", batch.first_last()
            ) from exc
        t2 = time.monotonic()
        report.spark_s = t2 - t1
        if rejected is not None and rejected.num_rows:
            report.malformed = int(rejected.num_rows)
            report.dead_lettered = self._dead.handle(rejected, batch.first_last(), desc)
        if batch.cancelled.is_set():
            return self._finish(report, t0)
        updates = {tp: MarkUpdate(r.expected, r.last + 1) for tp, r in batch.ranges.items()}
        try:
            info = self._sink.commit(output, updates)
        except MarkConflictError as exc:
            report.status = "conflict"
            report.detail = str(exc)
            return self._finish(report, t0, conflicts=exc.conflicts)
        except Exception as exc:
            if batch.cancelled.is_set():
                return self._finish(report, t0)
            if self._sink.kind == "parquet" and _is_spark_error(exc):
                raise TransformError(
                    f"Spark failed computing or writing {desc} (transform {fn}): {exc}",
                    batch.first_last(),
                ) from exc
            raise SinkError(f"writing {desc} to the {self._sink.describe()} failed: {exc}",
                            batch.first_last()) from exc  # fmt: skip
        commit_ms = time.time() * 1000.0
        self._sink_commits += 1
        if self._crash_after is not None and self._sink_commits >= self._crash_after:
            os.write(2, f"{CRASH_ENV}: exiting after sink commit {info.version} of {desc}\n".encode())
            os._exit(CRASH_EXIT_CODE)
        if origins is not None:
            self.stats.latency.add(commit_ms - origins)
        report.status = "committed"
        report.output_rows = info.rows
        report.version = info.version
        report.sink_s = time.monotonic() - t2
        return self._finish(report, t0, updates=updates)

    @staticmethod
    def _finish(
        report: BatchReport,
        t0: float,
        *,
        updates: dict[TopicPartition, MarkUpdate] | None = None,
        conflicts: dict[TopicPartition, tuple[int | None, int | None]] | None = None,
    ) -> _Outcome:
        report.total_s = time.monotonic() - t0
        return _Outcome(report, dict(updates or {}), dict(conflicts or {}))

    # ------------------------------------------------------------------------------------------- callbacks
    def _on_assigned(self, partitions: frozenset[TopicPartition], consumer: Any) -> None:
        if not partitions:
            return
        assert self._sink is not None
        marks = self._sink.read_marks(partitions)
        committed = consumer.committed(partitions, timeout=30)
        behind: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp in partitions:
            mark = marks.get(tp)
            om = committed.get(tp)
            candidates = [x for x in (mark, om.offset if om is not None else None) if x is not None]
            if candidates:
                consumer.seek(tp, max(candidates))
            if mark is not None and (om is None or om.offset < mark):
                behind[tp] = OffsetAndMetadata(mark)
            self._marks[tp] = mark
            self._owned.add(tp)
        if behind:
            # A crash between a sink commit and its Kafka commit left Kafka behind: catch it up, so lag
            # tools see the truth even if no new record arrives for these partitions.
            try:
                consumer.commit_sync(behind, timeout=30)
            except KafkaError as exc:
                log.warning("could not bring Kafka's committed offsets up to the sink marks: %s", exc)
        self.stats.assigned += len(partitions)
        self._last_activity = time.monotonic()
        log.info("assigned %s (sink marks %s)", sorted(partitions), {f"{t.topic}-{t.partition}": m
                 for t, m in marks.items()})  # fmt: skip

    def _on_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self._forget(partitions)
        self.stats.revoked += len(partitions)

    def _on_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self._forget(partitions)
        self.stats.lost += len(partitions)
        if self._inflight is not None:
            batch, future = self._inflight
            if not future.done() and partitions & set(batch.ranges):
                log.warning("partitions %s lost: cancelling %s", sorted(partitions), batch.describe())
                batch.cancelled.set()
                if self._jobs is not None:
                    self._jobs.cancel(batch.tag)

    def _forget(self, partitions: frozenset[TopicPartition]) -> None:
        self._owned.difference_update(partitions)
        for tp in partitions:
            self._marks.pop(tp, None)
            self._next.pop(tp, None)
        self._drop_accumulated(partitions)


def _is_spark_error(exc: BaseException) -> bool:
    module = type(exc).__module__ or ""
    return module.startswith(("pyspark", "py4j"))


def _describe_failure(failure: BaseException) -> str:
    """``repr`` of an unexpected failure, with what a PySpark error keeps out of its repr (its error class
    and message parameters: ``PySparkRuntimeError()`` alone says nothing)."""
    text = repr(failure)
    error_class = getattr(failure, "getCondition", None) or getattr(failure, "getErrorClass", None)
    parameters = getattr(failure, "getMessageParameters", None)
    if callable(error_class):
        details = [f"error class {error_class()}"]
        if callable(parameters):
            details.append(f"parameters {parameters()}")
        message = str(failure)
        if message:
            details.append(message)
        text += " (" + "; ".join(details) + ")"
    return text
