"""Worker statistics: per-batch progress lines (rich), the summary at exit, latency percentiles.

End-to-end latency of a record = wall-clock time of the sink commit that made it visible minus when the
record reached the pipeline's view: its Kafka timestamp when that is plausible as the append time (between
the worker's start and the record's first fetch), else the time the worker first fetched it (backlogs and
synthetic event times, see :func:`kafka_handoff.pipeline.worker.latency_origins`).  Kept in a log-spaced
histogram (~1.5 % resolution from 1 ms to ~28 h) so p50/p99 cost nothing per record.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = ["BatchReport", "LatencyHistogram", "WorkerStats", "WorkerSummary"]

_BINS = np.concatenate(([0.0], np.logspace(0, 8, 1200)))  # ms


class LatencyHistogram:
    def __init__(self) -> None:
        self.counts = np.zeros(len(_BINS) + 1, dtype=np.int64)
        self.total = 0
        self.max_ms = 0.0

    def add(self, latencies_ms: Any) -> None:
        values = np.asarray(latencies_ms, dtype=np.float64)
        if values.size == 0:
            return
        values = np.maximum(values, 0.0)
        idx = np.searchsorted(_BINS, values, side="right")
        self.counts += np.bincount(idx, minlength=len(self.counts))[: len(self.counts)]
        self.total += int(values.size)
        self.max_ms = max(self.max_ms, float(values.max()))

    def percentile(self, p: float) -> float | None:
        """The ``p``-th percentile (0..100) in ms: the upper edge of the bin holding it."""
        if self.total == 0:
            return None
        rank = max(1, math.ceil(self.total * p / 100.0))
        cumulative = np.cumsum(self.counts)
        i = int(np.searchsorted(cumulative, rank))
        if i >= len(_BINS):
            return self.max_ms
        return float(min(_BINS[i], self.max_ms))


@dataclass
class BatchReport:
    """What one batch did (``status``: committed, conflict, cancelled, failed)."""

    batch_id: int
    status: str
    records: int
    partitions: int
    output_rows: int = 0
    malformed: int = 0
    dead_lettered: int = 0
    build_s: float = 0.0
    spark_s: float = 0.0
    sink_s: float = 0.0
    total_s: float = 0.0
    version: int | None = None
    detail: str = ""
    target: int = 0
    """The record count the sizer aimed at when the batch was cut."""
    cut_reason: str = ""
    """Why it was cut: full, caught-up, interval (see :class:`~kafka_handoff.pipeline.sizing.CutDecision`)."""
    bytes: int = 0
    """Size of the batch's Arrow table."""
    transform_s: float = 0.0
    """Part of ``spark_s``: ``createDataFrame`` of the input and the transform call (with a native JSON
    parse, that parse); the rest of ``spark_s`` is computing the transform's results."""
    native_records: int = 0
    """Records the native JSON parse judged without Spark (transform.py, "Native JSON parse")."""


@dataclass
class WorkerSummary:
    """The summary a worker prints (and ``--summary-json`` writes) at exit."""

    member: str
    group: str
    status: str
    records_in: int
    records_committed: int
    output_rows: int
    malformed: int
    dead_lettered: int
    batches_committed: int
    batches_discarded: int
    mark_conflicts: int
    kafka_commit_failures: int
    partitions_assigned: int
    partitions_revoked: int
    partitions_lost: int
    revokes_delayed: int
    elapsed_s: float
    busy_s: float
    records_per_s: float
    records_per_busy_s: float
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    latency_max_ms: float | None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


class WorkerStats:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.first_record: float | None = None
        self.records_in = 0
        self.records_committed = 0
        self.output_rows = 0
        self.malformed = 0
        self.dead_lettered = 0
        self.batches_committed = 0
        self.batches_discarded = 0
        self.mark_conflicts = 0
        self.kafka_commit_failures = 0
        self.assigned = 0
        self.revoked = 0
        self.lost = 0
        self.revokes_delayed = 0
        self.busy_s = 0.0
        self.latency = LatencyHistogram()

    def metric_values(self) -> dict[str, float]:
        """The worker's counters and latency percentiles for the metrics exporters (``*_total``: counters)."""
        values = {
            "records_in_total": float(self.records_in),
            "records_committed_total": float(self.records_committed),
            "output_rows_total": float(self.output_rows),
            "malformed_total": float(self.malformed),
            "dead_lettered_total": float(self.dead_lettered),
            "batches_committed_total": float(self.batches_committed),
            "batches_discarded_total": float(self.batches_discarded),
            "mark_conflicts_total": float(self.mark_conflicts),
            "kafka_commit_failures_total": float(self.kafka_commit_failures),
            "partitions_assigned_total": float(self.assigned),
            "partitions_revoked_total": float(self.revoked),
            "partitions_lost_total": float(self.lost),
            "revokes_delayed_total": float(self.revokes_delayed),
        }
        for p in (50, 99):
            q = self.latency.percentile(p)
            values[f"latency_p{p}_ms"] = float("nan") if q is None else q
        return values

    def saw_records(self, n: int) -> None:
        if n and self.first_record is None:
            self.first_record = time.monotonic()
        self.records_in += n

    def add_batch(self, report: BatchReport) -> None:
        self.busy_s += report.total_s
        if report.status == "committed":
            self.batches_committed += 1
            self.records_committed += report.records
            self.output_rows += report.output_rows
            self.malformed += report.malformed
            self.dead_lettered += report.dead_lettered
        else:
            self.batches_discarded += 1
            if report.status == "conflict":
                self.mark_conflicts += 1

    def summary(self, member: str, group: str, status: str, error: str | None = None) -> WorkerSummary:
        elapsed = time.monotonic() - self.started
        active = time.monotonic() - self.first_record if self.first_record is not None else 0.0
        return WorkerSummary(
            member=member,
            group=group,
            status=status,
            records_in=self.records_in,
            records_committed=self.records_committed,
            output_rows=self.output_rows,
            malformed=self.malformed,
            dead_lettered=self.dead_lettered,
            batches_committed=self.batches_committed,
            batches_discarded=self.batches_discarded,
            mark_conflicts=self.mark_conflicts,
            kafka_commit_failures=self.kafka_commit_failures,
            partitions_assigned=self.assigned,
            partitions_revoked=self.revoked,
            partitions_lost=self.lost,
            revokes_delayed=self.revokes_delayed,
            elapsed_s=round(elapsed, 3),
            busy_s=round(self.busy_s, 3),
            records_per_s=round(self.records_committed / active, 1) if active > 0 else 0.0,
            records_per_busy_s=round(self.records_committed / self.busy_s, 1) if self.busy_s > 0 else 0.0,
            latency_p50_ms=self.latency.percentile(50),
            latency_p99_ms=self.latency.percentile(99),
            latency_max_ms=self.latency.max_ms if self.latency.total else None,
            error=error,
        )


def format_batch_line(report: BatchReport) -> str:
    colour = {"committed": "green", "conflict": "yellow", "cancelled": "yellow"}.get(report.status, "red")
    rate = report.records / report.total_s if report.total_s > 0 else 0.0
    parts = [
        f"batch {report.batch_id:>4}",
        f"[{colour}]{report.status:<9}[/{colour}]",
        f"{report.records:>8,} rec",
        f"{report.partitions:>3} part",
        f"{report.output_rows:>7,} rows out",
    ]
    if report.malformed:
        parts.append(f"{report.malformed:,} malformed")
    if report.target:
        parts.append(f"target {report.target:,} ({report.cut_reason})")
    parts.append(f"spark {report.spark_s:5.2f}s sink {report.sink_s:5.2f}s total {report.total_s:5.2f}s")
    parts.append(f"{rate:>9,.0f} rec/s")
    if report.version is not None:
        parts.append(f"v{report.version}")
    if report.detail:
        parts.append(report.detail)
    return "  ".join(parts)


def summary_rows(s: WorkerSummary) -> list[tuple[str, str]]:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:,.0f} ms"

    return [
        ("status", s.status),
        ("records consumed", f"{s.records_in:,}"),
        ("records committed to the sink", f"{s.records_committed:,}"),
        ("output rows written", f"{s.output_rows:,}"),
        ("malformed records", f"{s.malformed:,} ({s.dead_lettered:,} dead-lettered)"),
        ("batches committed / discarded", f"{s.batches_committed:,} / {s.batches_discarded:,}"),
        ("mark conflicts (fenced writes)", f"{s.mark_conflicts:,}"),
        ("partitions assigned / revoked / lost", f"{s.partitions_assigned} / {s.partitions_revoked} / "
         f"{s.partitions_lost}"),
        ("revokes delayed (KIP-983)", f"{s.revokes_delayed:,}"),
        ("elapsed", f"{s.elapsed_s:,.1f} s (busy in batches {s.busy_s:,.1f} s)"),
        ("throughput", f"{s.records_per_s:,.0f} rec/s since the first record; "
         f"{s.records_per_busy_s:,.0f} rec/s while processing"),
        ("latency record -> sink commit", f"p50 {ms(s.latency_p50_ms)}  p99 {ms(s.latency_p99_ms)}  "
         f"max {ms(s.latency_max_ms)}"),
    ]  # fmt: skip
