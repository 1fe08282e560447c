"""The producer's metrics (``producer-metrics``), with the Java client's names.

Recorded per batch or per request on the network thread (never per record in ``send()``), so they cost
nothing on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from kafka_handoff.metrics import Avg, Max, MetricName, Metrics

__all__ = ["PRODUCER_METRICS_GROUP", "ProducerMetrics"]

PRODUCER_METRICS_GROUP: Final = "producer-metrics"


class ProducerMetrics:
    def __init__(self, metrics: Metrics, *, group: str = PRODUCER_METRICS_GROUP) -> None:
        self._metrics = metrics
        self._group = group

        def name(metric: str, description: str) -> MetricName:
            return metrics.metric_name(metric, group, description)

        self._name = name
        self._batch_size = (
            metrics.sensor("batch-size")
            .add(name("batch-size-avg", "Average bytes sent per partition per request"), Avg())
            .add(name("batch-size-max", "Maximum bytes sent per partition per request"), Max())
        )
        self._compression = metrics.sensor("compression-rate").add(
            name(
                "compression-rate-avg", "Average compression rate of record batches (compressed/uncompressed)"
            ),
            Avg(),
        )
        self._records_per_request = metrics.sensor("records-per-request").add(
            name("records-per-request-avg", "Average number of records per request"), Avg()
        )
        self._record_send = metrics.sensor("record-send").add_meter(
            name("record-send-rate", "Records sent per second"),
            name("record-send-total", "Total records sent"),
        )
        self._bytes = metrics.sensor("outgoing-bytes").add_meter(
            name("outgoing-byte-rate", "Record batch bytes sent per second"),
            name("outgoing-byte-total", "Total record batch bytes sent"),
        )
        self._retries = metrics.sensor("record-retries").add_meter(
            name("record-retry-rate", "Retried record sends per second"),
            name("record-retry-total", "Total retried record sends"),
        )
        self._errors = metrics.sensor("record-errors").add_meter(
            name("record-error-rate", "Record sends that failed per second"),
            name("record-error-total", "Total record sends that failed"),
        )
        self._latency = (
            metrics.sensor("request-latency")
            .add(name("request-latency-avg", "Average produce request latency (ms)"), Avg())
            .add(name("request-latency-max", "Maximum produce request latency (ms)"), Max())
        )
        self._requests = metrics.sensor("requests").add_meter(
            name("request-rate", "Produce requests sent per second"),
            name("request-total", "Total produce requests sent"),
            count=True,
        )
        self._throttle = (
            metrics.sensor("produce-throttle-time")
            .add(name("produce-throttle-time-avg", "Average broker throttle time (ms)"), Avg())
            .add(name("produce-throttle-time-max", "Maximum broker throttle time (ms)"), Max())
        )

    def add_gauge(self, metric: str, description: str, fn: Callable[[], float]) -> None:
        self._metrics.add_gauge(self._name(metric, description), fn)

    def record_request(self, records: int, batch_bytes: list[int], now_ms: int) -> None:
        self._requests.record(1.0, now_ms)
        self._records_per_request.record(records, now_ms)
        self._record_send.record(records, now_ms)
        total = 0
        for size in batch_bytes:
            self._batch_size.record(size, now_ms)
            total += size
        self._bytes.record(total, now_ms)

    def record_compression(self, ratio: float, now_ms: int) -> None:
        self._compression.record(ratio, now_ms)

    def record_latency(self, latency_ms: float, now_ms: int) -> None:
        self._latency.record(latency_ms, now_ms)

    def record_throttle(self, throttle_ms: float, now_ms: int) -> None:
        self._throttle.record(throttle_ms, now_ms)

    def record_retry(self, records: int, now_ms: int) -> None:
        self._retries.record(records, now_ms)

    def record_errors(self, records: int, now_ms: int | None = None) -> None:
        self._errors.record(records, now_ms)
