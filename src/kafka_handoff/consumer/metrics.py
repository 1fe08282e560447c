"""The consumer's metrics, with the Java client's names: :class:`RebalanceMetrics`
(``consumer-coordinator-metrics``, implementing ``group.membership.RebalanceMetricsSink``) and
:class:`FetchMetrics` (``consumer-fetch-manager-metrics``), built on the registry in
:mod:`kafka_handoff.metrics`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from kafka_handoff.group.membership import CallbackKind
from kafka_handoff.metrics import (
    Avg,
    CumulativeCount,
    CumulativeSum,
    Max,
    MetricConfig,
    MetricName,
    Metrics,
    Rate,
    Sensor,
    TimeUnit,
    Value,
    WindowedCount,
)
from kafka_handoff.types import TopicPartition

if TYPE_CHECKING:
    from kafka_handoff.group.membership import RebalanceMetricsSink

__all__ = ["COORDINATOR_METRICS_GROUP", "FETCH_MANAGER_METRICS_GROUP", "FetchMetrics", "RebalanceMetrics"]

COORDINATOR_METRICS_GROUP: Final = "consumer-coordinator-metrics"
FETCH_MANAGER_METRICS_GROUP: Final = "consumer-fetch-manager-metrics"

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
