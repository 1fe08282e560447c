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
  so tests use :class:`~kafka_handoff.clock.FakeClock`.  Whoever passes ``now_ms`` explicitly to
  ``record`` (e.g. the membership calling ``RebalanceMetrics``) must use the same clock.

The clients' metric sets with the Java client's names live with their clients: ``producer.metrics`` and
``consumer.metrics`` (``RebalanceMetrics``, ``FetchMetrics``): this registry depends on no client.
"""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol, cast

from kafka_handoff.clock import Clock, MonotonicClock

__all__ = [
    "Avg",
    "CumulativeCount",
    "CumulativeSum",
    "KafkaMetric",
    "Max",
    "Measurable",
    "MetricConfig",
    "MetricName",
    "Metrics",
    "Min",
    "Rate",
    "Sensor",
    "Stat",
    "TimeUnit",
    "Value",
    "WindowedCount",
    "WindowedSum",
]


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
