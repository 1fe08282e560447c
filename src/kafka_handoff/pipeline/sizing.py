"""Adaptive micro-batch sizing: how many records the next batch should hold, and when to cut it.

A pure policy (no I/O, no clock of its own: callers pass ``now_ms`` and what they observed), so it is
unit-tested with a fake clock.  The worker asks it after every poll.

* **Backlog** (the consumer's lag -- records on the broker not yet fetched for the owned partitions -- is
  above ``batch.min_records``, and above the records Spark processes within the latency target once a batch
  has been measured): the target grows to what is available (accumulated + lag), up to the
  *cap*, and a batch is cut when it reaches its target.  Bigger batches spread Spark's fixed per-batch cost
  (job scheduling, planning, the sink commit) over more records.
* **Caught up** (lag at most that): when a batch is cut, the target shrinks to the records
  Spark is expected to process within ``batch.target_latency_ms`` (from a cost model
  ``seconds = fixed + per_record * records`` fitted to the last batches); and a batch is cut as soon as
  Spark is free -- waiting for more records would only add latency.
* **Cap** = min(``batch.max_records``, ``batch.max_bytes`` / bytes per record of the recent batches' Arrow
  tables); never below ``batch.min_records``.
* **Tail**: caught up with a few records still on the broker -- at most 1% of the accumulated batch, and
  the batch has room for them -- Spark waits for them up to :data:`TAIL_WAIT_MS` (one fetch, typically)
  rather than running them as a batch of their own (the end of a backlog; a live stream's lag is a larger
  share of its small batches).
* A batch is also cut once its oldest record has waited ``batch.max_interval_ms``.

With ``batch.adaptive = false`` the target is always ``batch.max_records`` (the fixed-size behaviour).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = ["BatchSizer", "CutDecision"]

#: Batches kept for the cost model.
_HISTORY = 8
#: Weight of the newest batch in the bytes-per-record average.
_ALPHA = 0.5
#: Caught up: how long a free Spark waits for a small tail (a lag of at most 1/TAIL_SHARE of the batch).
TAIL_WAIT_MS = 100
TAIL_SHARE = 100


@dataclass(frozen=True, slots=True)
class CutDecision:
    cut: bool
    reason: str
    """``full`` (reached the target), ``caught-up`` (Spark free, no backlog), ``interval`` (max_interval_ms),
    or (not cut) ``wait`` / ``tail`` (the last few records of a backlog are on their way)."""


class BatchSizer:
    """The adaptive policy; see the module docstring."""

    def __init__(
        self,
        *,
        max_records: int,
        min_records: int,
        max_bytes: int,
        target_latency_ms: int,
        max_interval_ms: int,
        adaptive: bool = True,
        initial_records: int | None = None,
    ) -> None:
        if min_records > max_records:
            raise ValueError(f"min_records ({min_records}) > max_records ({max_records})")
        self.max_records = max_records
        self.min_records = min_records
        self.max_bytes = max_bytes
        self.target_latency_ms = target_latency_ms
        self.max_interval_ms = max_interval_ms
        self.adaptive = adaptive
        start = initial_records if initial_records is not None else min_records
        self._target = max_records if not adaptive else max(min_records, min(start, max_records))
        self._bytes_per_record: float | None = None
        self._history: deque[tuple[int, float]] = deque(maxlen=_HISTORY)
        self.mode = "fixed" if not adaptive else "start"
        self.lag: int | None = None

    # ------------------------------------------------------------------------------------- observations
    def observe_batch(self, records: int, nbytes: int, process_s: float) -> None:
        """A batch of ``records`` records (``nbytes``: its Arrow table's size) took ``process_s`` seconds
        in Spark and the sink."""
        if records <= 0:
            return
        bpr = nbytes / records
        if self._bytes_per_record is None:
            self._bytes_per_record = bpr
        else:
            self._bytes_per_record = _ALPHA * bpr + (1 - _ALPHA) * self._bytes_per_record
        self._history.append((records, max(0.0, process_s)))

    def observe_lag(self, lag: int | None, accumulated: int = 0) -> None:
        """Records on the broker not yet fetched for the owned partitions (None: unknown), and records
        accumulated for the next batch.  A backlog -- more available than the target -- grows the target
        to what is available (up to the cap)."""
        self.lag = lag
        if self.adaptive and self.backlog and lag is not None and accumulated + lag > self._target:
            self._target = max(self._target, min(self.cap, accumulated + lag))
            self.mode = "backlog"

    # ------------------------------------------------------------------------------------- model
    @property
    def bytes_per_record(self) -> float | None:
        return self._bytes_per_record

    @property
    def cap(self) -> int:
        cap = self.max_records
        if self._bytes_per_record:
            cap = min(cap, int(self.max_bytes // self._bytes_per_record))
        return max(self.min_records, cap)

    def cost_model(self) -> tuple[float, float] | None:
        """(fixed seconds per batch, seconds per record) fitted to the recent batches; None before the
        first batch."""
        if not self._history:
            return None
        ns = [float(n) for n, _ in self._history]
        ts = [t for _, t in self._history]
        mean_n, mean_t = sum(ns) / len(ns), sum(ts) / len(ts)
        var = sum((n - mean_n) ** 2 for n in ns)
        if var > 0 and max(ns) >= 1.5 * min(ns):
            slope = sum((n - mean_n) * (t - mean_t) for n, t in zip(ns, ts, strict=True)) / var
            if slope > 0:
                fixed = mean_t - slope * mean_n
                if fixed >= 0:
                    return fixed, slope
                return 0.0, mean_t / mean_n
        # One batch size only: cannot separate the parts; attribute it all to the records (a pessimistic
        # per-record cost, so a latency-sized batch errs on the small side).
        return 0.0, mean_t / mean_n

    def latency_records(self) -> int:
        """Records Spark is expected to process within ``target_latency_ms`` (the cap before any batch)."""
        model = self.cost_model()
        if model is None:
            return self.cap
        fixed, per_record = model
        budget = self.target_latency_ms / 1000.0 - fixed
        if per_record <= 0:
            return self.cap
        return int(max(0.0, budget) / per_record + 1e-6)  # (1e-6: float noise, not a record)

    # ------------------------------------------------------------------------------------- decisions
    @property
    def target(self) -> int:
        """Records the batch being accumulated should hold."""
        if not self.adaptive:
            return self.max_records
        return max(self.min_records, min(self._target, self.cap))

    @property
    def backlog_threshold(self) -> int:
        """Lag above which the group is behind: ``min_records`` before the first batch, then the records
        Spark processes within the latency target (at least ``min_records``) -- a live stream's lag between
        two fetches is not a backlog."""
        if not self._history:
            return self.min_records
        return max(self.min_records, self.latency_records())

    @property
    def backlog(self) -> bool:
        """More than :attr:`backlog_threshold` records wait on the broker (as of the last observed lag)."""
        return self.lag is not None and self.lag > self.backlog_threshold

    def should_cut(
        self, accumulated: int, age_ms: float, spark_free: bool, free_ms: float = float("inf")
    ) -> CutDecision:
        """Whether to close the accumulating batch now (``age_ms``: since its first record arrived;
        ``spark_free``: no batch running or waiting; ``free_ms``: for how long)."""
        if accumulated <= 0:
            return CutDecision(False, "wait")
        if accumulated >= self.target:
            return CutDecision(True, "full")
        if age_ms >= self.max_interval_ms:
            return CutDecision(True, "interval")
        if self.adaptive and spark_free and not self.backlog:
            lag = self.lag or 0
            if (
                0 < lag * TAIL_SHARE <= accumulated
                and accumulated + lag <= self.target
                and free_ms < TAIL_WAIT_MS
            ):
                return CutDecision(False, "tail")
            return CutDecision(True, "caught-up")
        return CutDecision(False, "wait")

    def batch_cut(self) -> int:
        """A batch was cut: choose the next target (returned) from the lag seen last."""
        if not self.adaptive:
            return self.max_records
        if not self.backlog:
            self.mode = "caught-up"
            self._target = self.latency_records()
        return self.target
