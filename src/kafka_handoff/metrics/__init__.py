"""A small, thread-safe metrics registry modelled on the Java client's ``org.apache.kafka.common.metrics``.

* :class:`MetricName` -- ``(name, group, tags)``; equal names are the same metric.
* :class:`Sensor` -- a named recording point; each ``record(value)`` feeds all of its stats.
* Stats: :class:`Avg`, :class:`Max`, :class:`Min` (over the sample windows), :class:`CumulativeSum`
  (Java's ``CumulativeSum``, "total"), :class:`CumulativeCount` ("count"), :class:`Rate` (per second, per
  hour, ... over the sample windows), :class:`Value` (the last recorded value), and gauges (a callable
  read when the metric is read, :meth:`Metrics.add_gauge`).
* Windowed stats keep ``metrics.num.samples`` windows of ``metrics.sample.window.ms`` each (Java: 2 x 30 s).
  A window starts at its first record; windows older than ``samples x window`` are reset when read or
  written.  A :class:`Rate` divides the windowed total by the time covered by the retained windows, but by
  at least ``(samples - 1)`` whole windows so that a burst right after start-up does not read as a huge
  rate (the same rule as Java's ``Rate.windowSize``).
* Time comes from an injectable clock (an object with ``now_ms()`` or a callable, integer milliseconds),
  so tests use :class:`~kafka_handoff.protocol.requests.FakeClock`.  Whoever passes ``now_ms`` explicitly to
  ``record`` (e.g. the membership calling :class:`RebalanceMetrics`) must use the same clock.

On top: :class:`RebalanceMetrics` (``consumer-coordinator-metrics``, implementing
``group.membership.RebalanceMetricsSink``) and :class:`FetchMetrics` (``consumer-fetch-manager-metrics``),
registering the Java client's metric names.
"""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Protocol, cast

from kafka_handoff.group.membership import CallbackKind
from kafka_handoff.protocol.requests import Clock, MonotonicClock
from kafka_handoff.types import TopicPartition

if TYPE_CHECKING:
    from kafka_handoff.group.membership import RebalanceMetricsSink

__all__ = [
    "COORDINATOR_METRICS_GROUP",
    "FETCH_MANAGER_METRICS_GROUP",
    "Avg",
    "CumulativeCount",
    "CumulativeSum",
    "FetchMetrics",
    "KafkaMetric",
    "Max",
    "Measurable",
    "MetricConfig",
    "MetricName",
    "Metrics",
    "Min",
    "Rate",
    "RebalanceMetrics",
    "Sensor",
    "Stat",
    "TimeUnit",
    "Value",
    "WindowedCount",
    "WindowedSum",
]

COORDINATOR_METRICS_GROUP: Final = "consumer-coordinator-metrics"
FETCH_MANAGER_METRICS_GROUP: Final = "consumer-fetch-manager-metrics"


class MetricName:
    """A metric's identity: name, group and tags.  ``description`` is not part of the identity."""

    __slots__ = ("_hash", "_key", "description", "group", "name")

    def __init__(
        self, name: str, group: str, tags: Mapping[str, str] | None = None, description: str = ""
    ) -> None:
        if not name or not group:
            raise ValueError("a metric needs a non-empty name and group")
        self.name = name
        self.group = group
        self.description = description
        self._key: tuple[str, str, tuple[tuple[str, str], ...]] = (
            name,
            group,
            tuple(sorted((tags or {}).items())),
        )
        self._hash = hash(self._key)

    @property
    def tags(self) -> Mapping[str, str]:
        return MappingProxyType(dict(self._key[2]))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MetricName) and self._key == other._key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        tags = ",".join(f"{k}={v}" for k, v in self._key[2])
        return f"MetricName({self.group}:{self.name}{{{tags}}})"


@dataclass(frozen=True, slots=True)
class MetricConfig:
    """Sampling configuration (Java: ``metrics.num.samples`` = 2, ``metrics.sample.window.ms`` = 30000)."""

    samples: int = 2
    time_window_ms: int = 30_000

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"samples must be at least 1, got {self.samples}")
        if self.time_window_ms < 1:
            raise ValueError(f"time_window_ms must be at least 1, got {self.time_window_ms}")


class TimeUnit(enum.Enum):
    """The unit a :class:`Rate` is expressed in (value = milliseconds per unit)."""

    MILLISECONDS = 1
    SECONDS = 1_000
    MINUTES = 60_000
    HOURS = 3_600_000
    DAYS = 86_400_000


class Measurable(Protocol):
    def measure(self, config: MetricConfig, now_ms: int) -> float: ...


class Stat(Measurable, Protocol):
    def record(self, config: MetricConfig, value: float, now_ms: int) -> None: ...


# ---------------------------------------------------------------------------------------------------------
# Stats
# ---------------------------------------------------------------------------------------------------------


class CumulativeSum:
    """The sum of all recorded values ("-total" metrics)."""

    def __init__(self) -> None:
        self._total = 0.0

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self._total += value

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self._total


class CumulativeCount:
    """The number of recordings, whatever their values."""

    def __init__(self) -> None:
        self._count = 0

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self._count += 1

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return float(self._count)


class Value:
    """The last recorded value (0 before the first recording)."""

    def __init__(self) -> None:
        self._value = 0.0

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self._value = value

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self._value


class _Gauge:
    def __init__(self, fn: Callable[[], float]) -> None:
        self._fn = fn

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return float(self._fn())


class _Sample:
    __slots__ = ("event_count", "initial", "start_ms", "value")

    def __init__(self, initial: float, now_ms: int) -> None:
        self.initial = initial
        self.value = initial
        self.event_count = 0
        self.start_ms = now_ms

    def reset(self, now_ms: int) -> None:
        self.value = self.initial
        self.event_count = 0
        self.start_ms = now_ms


class SampledStat:
    """A stat over ``config.samples`` rolling windows of ``config.time_window_ms`` each."""

    initial_value = 0.0

    def __init__(self) -> None:
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms >= sample.start_ms + config.time_window_ms:
            sample = self._advance(config, now_ms)
        self._update(sample, value)
        sample.event_count += 1

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        self.purge_obsolete(config, now_ms)
        return self._combine(self._samples)

    def purge_obsolete(self, config: MetricConfig, now_ms: int) -> None:
        """Reset windows that started ``samples x window`` or longer ago."""
        expire_age = config.samples * config.time_window_ms
        for sample in self._samples:
            if now_ms - sample.start_ms >= expire_age:
                sample.reset(now_ms)

    def oldest_start_ms(self, now_ms: int) -> int:
        if not self._samples:
            self._samples.append(_Sample(self.initial_value, now_ms))
        return min(sample.start_ms for sample in self._samples)

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(self.initial_value, now_ms))
        return self._samples[self._current]

    def _advance(self, config: MetricConfig, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % config.samples
        if self._current >= len(self._samples):
            sample = _Sample(self.initial_value, now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    def _update(self, sample: _Sample, value: float) -> None:
        raise NotImplementedError

    def _combine(self, samples: list[_Sample]) -> float:
        raise NotImplementedError


class Avg(SampledStat):
    """The average of the values recorded in the retained windows (NaN if none)."""

    def _update(self, sample: _Sample, value: float) -> None:
        sample.value += value

    def _combine(self, samples: list[_Sample]) -> float:
        count = sum(s.event_count for s in samples)
        return sum(s.value for s in samples) / count if count else math.nan


class Max(SampledStat):
    """The largest value recorded in the retained windows (NaN if none)."""

    initial_value = -math.inf

    def _update(self, sample: _Sample, value: float) -> None:
        sample.value = max(sample.value, value)

    def _combine(self, samples: list[_Sample]) -> float:
        live = [s.value for s in samples if s.event_count]
        return max(live) if live else math.nan


class Min(SampledStat):
    """The smallest value recorded in the retained windows (NaN if none)."""

    initial_value = math.inf

    def _update(self, sample: _Sample, value: float) -> None:
        sample.value = min(sample.value, value)

    def _combine(self, samples: list[_Sample]) -> float:
        live = [s.value for s in samples if s.event_count]
        return min(live) if live else math.nan


class WindowedSum(SampledStat):
    """The sum of the values recorded in the retained windows."""

    def _update(self, sample: _Sample, value: float) -> None:
        sample.value += value

    def _combine(self, samples: list[_Sample]) -> float:
        return sum(s.value for s in samples)


class WindowedCount(SampledStat):
    """The number of recordings in the retained windows."""

    def _update(self, sample: _Sample, value: float) -> None:
        sample.value += 1

    def _combine(self, samples: list[_Sample]) -> float:
        return sum(s.value for s in samples)


class Rate:
    """Recorded values (or, with a :class:`WindowedCount`, recordings) per ``unit`` over the sample windows.

    The elapsed time is measured from the start of the oldest retained window, but counts as at least
    ``samples - 1`` whole windows, and at least 1 ms.
    """

    def __init__(self, unit: TimeUnit = TimeUnit.SECONDS, stat: SampledStat | None = None) -> None:
        self.unit = unit
        self.stat: SampledStat = stat if stat is not None else WindowedSum()

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self.stat.record(config, value, now_ms)

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        total = self.stat.measure(config, now_ms)
        return total / (self.window_size_ms(config, now_ms) / self.unit.value)

    def window_size_ms(self, config: MetricConfig, now_ms: int) -> int:
        self.stat.purge_obsolete(config, now_ms)
        elapsed = now_ms - self.stat.oldest_start_ms(now_ms)
        full_windows = elapsed // config.time_window_ms
        min_full_windows = config.samples - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * config.time_window_ms
        return max(elapsed, 1)


# ---------------------------------------------------------------------------------------------------------
# Metrics, sensors, registry
# ---------------------------------------------------------------------------------------------------------


class KafkaMetric:
    """A registered metric: a name and the measurable behind it.  ``value()`` reads it now."""

    def __init__(
        self,
        name: MetricName,
        measurable: Measurable,
        lock: threading.Lock | threading.RLock,
        registry: Metrics,
    ) -> None:
        self.name = name
        self.measurable = measurable
        self._lock = lock
        self._registry = registry

    def value(self, now_ms: int | None = None) -> float:
        now = self._registry.now_ms() if now_ms is None else now_ms
        with self._lock:
            return self.measurable.measure(self._registry.config, now)

    def __repr__(self) -> str:
        return f"KafkaMetric({self.name!r})"


class Sensor:
    """A recording point; every ``record()`` updates all stats added to it, under one lock."""

    def __init__(self, name: str, registry: Metrics) -> None:
        self.name = name
        self._registry = registry
        self._lock = threading.Lock()
        self._stats: list[Stat] = []
        self._metrics: list[KafkaMetric] = []

    def add(self, name: MetricName, stat: Stat, aliases: tuple[MetricName, ...] = ()) -> Sensor:
        """Add ``stat`` and register it as ``name`` (and under each alias: same value, recorded once)."""
        for metric_name in (name, *aliases):
            metric = self._registry._register(metric_name, stat, self._lock)
            self._metrics.append(metric)
        with self._lock:
            self._stats.append(stat)
        return self

    def add_meter(
        self,
        rate_name: MetricName,
        total_name: MetricName,
        *,
        count: bool = False,
        unit: TimeUnit = TimeUnit.SECONDS,
    ) -> Sensor:
        """A rate and its cumulative total (Java's ``Meter``): of the recorded values, or with
        ``count=True`` of the number of recordings."""
        if count:
            self.add(rate_name, Rate(unit, WindowedCount()))
            self.add(total_name, CumulativeCount())
        else:
            self.add(rate_name, Rate(unit, WindowedSum()))
            self.add(total_name, CumulativeSum())
        return self

    def record(self, value: float = 1.0, now_ms: int | None = None) -> None:
        now = self._registry.now_ms() if now_ms is None else now_ms
        with self._lock:
            for stat in self._stats:
                stat.record(self._registry.config, float(value), now)

    @property
    def metrics(self) -> tuple[KafkaMetric, ...]:
        return tuple(self._metrics)


class Metrics:
    """The registry of one client: sensors, metrics and the clock and sampling config they share."""

    def __init__(
        self,
        config: MetricConfig | None = None,
        clock: Clock | Callable[[], int] | None = None,
        default_tags: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config if config is not None else MetricConfig()
        if clock is None:
            clock = MonotonicClock()
        method = getattr(clock, "now_ms", None)  # a Clock object, or a plain callable returning ms
        self._now: Callable[[], int] = method if callable(method) else cast("Callable[[], int]", clock)
        self.default_tags: Mapping[str, str] = MappingProxyType(dict(default_tags or {}))
        self._lock = threading.RLock()
        self._metrics: dict[MetricName, KafkaMetric] = {}
        self._sensors: dict[str, Sensor] = {}

    def now_ms(self) -> int:
        return self._now()

    def metric_name(
        self, name: str, group: str, description: str = "", tags: Mapping[str, str] | None = None
    ) -> MetricName:
        """A name carrying this registry's default tags (e.g. ``client-id``) plus ``tags``."""
        return MetricName(name, group, {**self.default_tags, **(tags or {})}, description)

    # sensors -------------------------------------------------------------------------------------------

    def sensor(self, name: str) -> Sensor:
        """The sensor called ``name``, created on first use."""
        with self._lock:
            sensor = self._sensors.get(name)
            if sensor is None:
                sensor = self._sensors[name] = Sensor(name, self)
            return sensor

    def get_sensor(self, name: str) -> Sensor | None:
        with self._lock:
            return self._sensors.get(name)

    def remove_sensor(self, name: str) -> None:
        """Remove a sensor and every metric it registered."""
        with self._lock:
            sensor = self._sensors.pop(name, None)
            if sensor is not None:
                for metric in sensor.metrics:
                    self._metrics.pop(metric.name, None)

    # metrics -------------------------------------------------------------------------------------------

    def _register(
        self, name: MetricName, measurable: Measurable, lock: threading.Lock | threading.RLock
    ) -> KafkaMetric:
        with self._lock:
            if name in self._metrics:
                raise ValueError(f"a metric named {name!r} is already registered")
            metric = self._metrics[name] = KafkaMetric(name, measurable, lock, self)
            return metric

    def add_metric(self, name: MetricName, measurable: Measurable) -> KafkaMetric:
        """Register a measurable that is not fed by a sensor (read with the registry's clock)."""
        return self._register(name, measurable, threading.Lock())

    def add_gauge(self, name: MetricName, fn: Callable[[], float]) -> KafkaMetric:
        """Register a gauge: ``fn()`` is called each time the metric is read."""
        return self._register(name, _Gauge(fn), threading.Lock())

    def remove_metric(self, name: MetricName) -> KafkaMetric | None:
        with self._lock:
            return self._metrics.pop(name, None)

    def metric(self, name: MetricName) -> KafkaMetric | None:
        with self._lock:
            return self._metrics.get(name)

    def value(self, name: str, group: str, tags: Mapping[str, str] | None = None) -> float:
        """Read one metric by name and group (with the default tags plus ``tags``); KeyError if absent."""
        metric = self.metric(self.metric_name(name, group, tags=tags))
        if metric is None:
            raise KeyError(f"no metric {group}:{name}")
        return metric.value()

    def __iter__(self) -> Iterator[KafkaMetric]:
        with self._lock:
            return iter(list(self._metrics.values()))

    def __len__(self) -> int:
        with self._lock:
            return len(self._metrics)

    def snapshot(self) -> dict[MetricName, float]:
        """Every metric's current value, all read at the same ``now``."""
        now = self.now_ms()
        return {metric.name: metric.value(now) for metric in self}

    def as_dict(self) -> dict[str, float]:
        """:meth:`snapshot` keyed ``"group:name"`` (plus ``{k=v,...}`` for tags beyond the default tags)."""
        defaults = dict(self.default_tags)
        out: dict[str, float] = {}
        for name, value in self.snapshot().items():
            key = f"{name.group}:{name.name}"
            extra = {k: v for k, v in name.tags.items() if defaults.get(k) != v}
            if extra:
                key += "{" + ",".join(f"{k}={v}" for k, v in sorted(extra.items())) + "}"
            out[key] = value
        return out


# ---------------------------------------------------------------------------------------------------------
# consumer-coordinator-metrics
# ---------------------------------------------------------------------------------------------------------

_CALLBACK_KINDS: Final = {
    "revoke": "revoked",
    "revoked": "revoked",
    "assign": "assigned",
    "assigned": "assigned",
    "lost": "lost",
}


class _SecondsSince:
    """Whole seconds since the last completed rebalance; -1 before the first (last-rebalance-seconds-ago)."""

    def __init__(self, owner: RebalanceMetrics) -> None:
        self._owner = owner

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        end = self._owner.last_rebalance_end_ms
        if end is None:
            return -1.0
        return float(max(0, now_ms - end) // 1000)


class RebalanceMetrics:
    """The rebalance, callback and commit metrics of ``consumer-coordinator-metrics``.

    Implements ``group.membership.RebalanceMetricsSink``:

    * ``rebalance_started(now_ms)`` marks the start (a second call before completion keeps the first start,
      so the latency covers the whole rebalance);
    * ``rebalance_completed(now_ms)`` records the latency since the start into ``rebalance-latency-*``,
      ``rebalance-total`` and ``rebalance-rate-per-hour`` and stamps ``last-rebalance-seconds-ago``; without
      a start it only stamps the time;
    * ``rebalance_failed(now_ms)`` counts one failed rebalance and clears the start; a retry either calls
      ``rebalance_started`` again (measured from the retry) or completes without doing so -- the classic
      membership treats a retried JoinGroup/SyncGroup as the same rebalance, as Java does -- and is then
      measured from the failed attempt's start.

    Callback latencies are registered under the names the Java code uses (``partition-revoked-latency-avg``)
    and, as aliases of the same values, the names KIP-429 and the Kafka docs list
    (``partitions-revoked-latency-avg``).
    """

    def __init__(
        self,
        metrics: Metrics,
        *,
        assigned_partitions: Callable[[], int] | None = None,
        client_id: str | None = None,
        group: str = COORDINATOR_METRICS_GROUP,
    ) -> None:
        self._metrics = metrics
        self._lock = threading.Lock()
        self._start_ms: int | None = None
        self._failed_start_ms: int | None = None  # the start of the last failed attempt, for a retry
        self._last_end_ms: int | None = None
        self._assigned: Callable[[], int] = (
            assigned_partitions if assigned_partitions is not None else lambda: 0
        )

        tags = {"client-id": client_id} if client_id is not None else None

        def name(metric: str, description: str) -> MetricName:
            return metrics.metric_name(metric, group, description, tags)

        self._rebalance = (
            metrics.sensor("rebalance-latency")
            .add(name("rebalance-latency-avg", "Average time taken for a group rebalance (ms)"), Avg())
            .add(name("rebalance-latency-max", "Maximum time taken for a group rebalance (ms)"), Max())
            .add(
                name("rebalance-latency-total", "Total time spent in group rebalances (ms)"), CumulativeSum()
            )
            .add(name("rebalance-total", "Number of completed group rebalances"), CumulativeCount())
            .add(
                name("rebalance-rate-per-hour", "Completed group rebalances per hour"),
                Rate(TimeUnit.HOURS, WindowedCount()),
            )
        )
        self._failed = (
            metrics.sensor("failed-rebalance")
            .add(name("failed-rebalance-total", "Number of failed group rebalances"), CumulativeCount())
            .add(
                name("failed-rebalance-rate-per-hour", "Failed group rebalances per hour"),
                Rate(TimeUnit.HOURS, WindowedCount()),
            )
        )
        metrics.add_metric(
            name("last-rebalance-seconds-ago", "Seconds since the last completed rebalance (-1: none yet)"),
            _SecondsSince(self),
        )
        self._callbacks: dict[str, Sensor] = {}
        for kind in ("revoked", "assigned", "lost"):
            sensor = metrics.sensor(f"partition-{kind}-latency")
            for stat_name, stat in (("avg", Avg()), ("max", Max())):
                word = "Average" if stat_name == "avg" else "Maximum"
                description = f"{word} time taken by the rebalance listener's partitions-{kind} callback (ms)"
                sensor.add(
                    name(f"partition-{kind}-latency-{stat_name}", description),
                    stat,
                    aliases=(name(f"partitions-{kind}-latency-{stat_name}", description),),
                )
            self._callbacks[kind] = sensor
        self._commit = (
            metrics.sensor("commit-latency")
            .add(name("commit-latency-avg", "Average time taken for a commit request (ms)"), Avg())
            .add(name("commit-latency-max", "Maximum time taken for a commit request (ms)"), Max())
            .add_meter(
                name("commit-rate", "Commit requests per second"),
                name("commit-total", "Number of commit requests"),
                count=True,
            )
        )
        metrics.add_gauge(
            name("assigned-partitions", "Number of partitions currently assigned to this consumer"),
            lambda: float(self._assigned()),
        )

    # RebalanceMetricsSink --------------------------------------------------------------------------------

    def rebalance_started(self, now_ms: int) -> None:
        with self._lock:
            if self._start_ms is None:
                self._start_ms = now_ms
                self._failed_start_ms = None

    def rebalance_completed(self, now_ms: int) -> None:
        with self._lock:
            start, self._start_ms = self._start_ms, None
            if start is None:
                start = self._failed_start_ms
            self._failed_start_ms = None
            self._last_end_ms = now_ms
        if start is not None:
            self._rebalance.record(now_ms - start, now_ms)

    def rebalance_failed(self, now_ms: int) -> None:
        with self._lock:
            if self._start_ms is not None:
                self._failed_start_ms = self._start_ms
            self._start_ms = None
        self._failed.record(1.0, now_ms)

    # callbacks and commits -------------------------------------------------------------------------------

    def record_callback(self, kind: CallbackKind | str, latency_ms: float, now_ms: int | None = None) -> None:
        """Record how long a rebalance listener callback took: ``kind`` is a ``CallbackKind`` or one of
        ``revoked``/``assigned``/``lost``."""
        raw = kind.value if isinstance(kind, CallbackKind) else kind
        try:
            normalised = _CALLBACK_KINDS[raw]
        except KeyError:
            raise ValueError(f"unknown callback kind {kind!r} (allowed: revoked, assigned, lost)") from None
        self._callbacks[normalised].record(latency_ms, now_ms)

    def record_commit(self, latency_ms: float, now_ms: int | None = None) -> None:
        """Record one completed commit request and its latency."""
        self._commit.record(latency_ms, now_ms)

    def set_assigned_partitions_source(self, fn: Callable[[], int]) -> None:
        """Where ``assigned-partitions`` reads the current count from."""
        self._assigned = fn

    @property
    def rebalance_in_progress(self) -> bool:
        with self._lock:
            return self._start_ms is not None

    @property
    def last_rebalance_end_ms(self) -> int | None:
        with self._lock:
            return self._last_end_ms


# ---------------------------------------------------------------------------------------------------------
# consumer-fetch-manager-metrics
# ---------------------------------------------------------------------------------------------------------


class FetchMetrics:
    """The consumer's fetch metrics (``consumer-fetch-manager-metrics``).

    * :meth:`record_fetch` once per fetch response: ``fetch-latency-avg/max``, ``fetch-rate``,
      ``fetch-total``, ``fetch-size-avg/max`` (bytes per response), ``records-per-request-avg``;
    * :meth:`record_consumed` whenever records of a partition are handed to the application:
      ``records-consumed-rate/total``, ``bytes-consumed-rate/total``, plus the same four per topic (tag
      ``topic``, dots replaced by underscores as the Java client does);
    * :meth:`record_lag` with a partition's lag after a fetch: ``records-lag-max``;
    * :meth:`record_partition_lag` with a partition's lag whenever its records are handed out: the above,
      plus per partition (tags ``topic``, ``partition``) ``records-lag``, ``records-lag-avg`` and
      ``records-lag-max``, as the Java client; :meth:`retain_partitions` drops partitions no longer assigned.
    """

    def __init__(
        self, metrics: Metrics, *, client_id: str | None = None, group: str = FETCH_MANAGER_METRICS_GROUP
    ) -> None:
        self._metrics = metrics
        self._group = group
        self._tags: dict[str, str] = {"client-id": client_id} if client_id is not None else {}
        self._topics: dict[str, tuple[Sensor, Sensor]] = {}
        self._topics_lock = threading.Lock()
        self._partition_lag: dict[TopicPartition, Sensor] = {}

        def name(metric: str, description: str) -> MetricName:
            return metrics.metric_name(metric, group, description, self._tags)

        self._latency = (
            metrics.sensor("fetch-latency")
            .add(name("fetch-latency-avg", "Average time taken for a fetch request (ms)"), Avg())
            .add(name("fetch-latency-max", "Maximum time taken for a fetch request (ms)"), Max())
            .add_meter(
                name("fetch-rate", "Fetch requests per second"),
                name("fetch-total", "Number of fetch requests"),
                count=True,
            )
        )
        self._fetch_size = (
            metrics.sensor("fetch-size")
            .add(name("fetch-size-avg", "Average bytes fetched per request"), Avg())
            .add(name("fetch-size-max", "Maximum bytes fetched per request"), Max())
        )
        self._records_per_request = metrics.sensor("records-per-request").add(
            name("records-per-request-avg", "Average number of records per fetch request"), Avg()
        )
        self._bytes, self._records = self._consumed_sensors("", name)
        self._lag = metrics.sensor("records-lag").add(
            name("records-lag-max", "Maximum lag in records of any partition in the sample windows"), Max()
        )

    def _consumed_sensors(self, prefix: str, name: Callable[[str, str], MetricName]) -> tuple[Sensor, Sensor]:
        bytes_sensor = self._metrics.sensor(f"{prefix}bytes-consumed").add_meter(
            name("bytes-consumed-rate", "Bytes consumed per second"),
            name("bytes-consumed-total", "Total bytes consumed"),
        )
        records_sensor = self._metrics.sensor(f"{prefix}records-consumed").add_meter(
            name("records-consumed-rate", "Records consumed per second"),
            name("records-consumed-total", "Total records consumed"),
        )
        return bytes_sensor, records_sensor

    def _topic_sensors(self, topic: str) -> tuple[Sensor, Sensor]:
        with self._topics_lock:
            sensors = self._topics.get(topic)
            if sensors is None:
                tags = {**self._tags, "topic": topic.replace(".", "_")}

                def name(metric: str, description: str) -> MetricName:
                    return self._metrics.metric_name(metric, self._group, f"{description} (topic)", tags)

                sensors = self._topics[topic] = self._consumed_sensors(f"topic.{topic}.", name)
            return sensors

    def record_fetch(
        self, num_bytes: int, records: int, latency_ms: float, now_ms: int | None = None
    ) -> None:
        """One fetch response: its size in bytes, its record count (an estimate is fine) and latency."""
        self._latency.record(latency_ms, now_ms)
        self._fetch_size.record(num_bytes, now_ms)
        self._records_per_request.record(records, now_ms)

    def record_fetch_latency(self, latency_ms: float, now_ms: int | None = None) -> None:
        """A fetch response whose size is not known: latency, rate and total only."""
        self._latency.record(latency_ms, now_ms)

    def record_consumed(
        self, tp: TopicPartition | None, records: int, num_bytes: int, now_ms: int | None = None
    ) -> None:
        """Records of ``tp`` (None: not attributed to a topic) handed to the application."""
        self._records.record(records, now_ms)
        self._bytes.record(num_bytes, now_ms)
        if tp is not None:
            topic_bytes, topic_records = self._topic_sensors(tp.topic)
            topic_records.record(records, now_ms)
            topic_bytes.record(num_bytes, now_ms)

    def record_lag(self, lag: int, now_ms: int | None = None) -> None:
        self._lag.record(lag, now_ms)

    def record_partition_lag(self, tp: TopicPartition, lag: int, now_ms: int | None = None) -> None:
        """``tp``'s lag (high watermark, or last stable offset under read_committed, minus the position)."""
        with self._topics_lock:
            sensor = self._partition_lag.get(tp)
            if sensor is None:
                tags = {**self._tags, "topic": tp.topic.replace(".", "_"), "partition": str(tp.partition)}

                def name(metric: str, description: str) -> MetricName:
                    return self._metrics.metric_name(metric, self._group, description, tags)

                sensor = self._partition_lag[tp] = (
                    self._metrics.sensor(f"{tp.topic}-{tp.partition}.records-lag")
                    .add(name("records-lag", "Latest lag of the partition"), Value())
                    .add(name("records-lag-avg", "Average lag of the partition"), Avg())
                    .add(name("records-lag-max", "Maximum lag of the partition"), Max())
                )
        sensor.record(lag, now_ms)
        self._lag.record(lag, now_ms)

    def retain_partitions(self, assigned: frozenset[TopicPartition]) -> None:
        """Remove the per-partition metrics of partitions not in ``assigned``."""
        with self._topics_lock:
            gone = [tp for tp in self._partition_lag if tp not in assigned]
            for tp in gone:
                del self._partition_lag[tp]
                self._metrics.remove_sensor(f"{tp.topic}-{tp.partition}.records-lag")


if TYPE_CHECKING:

    def _is_sink(metrics: RebalanceMetrics) -> RebalanceMetricsSink:
        return metrics  # mypy checks that RebalanceMetrics satisfies the membership's sink protocol
