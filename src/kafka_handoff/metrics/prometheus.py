"""Prometheus export of every client metric (optional extra: ``pip install kafka-handoff[prometheus]``).

Java's metric names map to Prometheus conventions the way Kafka's JMX exporters do: ``kafka_`` + the group
without its ``-metrics`` suffix + ``_`` + the name, dashes and dots turned into underscores, tags as labels
(``client-id`` becomes ``client_id``)::

    consumer-fetch-manager-metrics / records-lag-max {client-id, topic, partition}
      -> kafka_consumer_fetch_manager_records_lag_max{client_id="...",topic="...",partition="..."}

Metrics whose Java name ends in ``-total`` are counters (``..._total``); everything else is a gauge.
A value that is not a number (NaN, as Java reports a windowed stat with no samples) is left out.

Usage::

    from kafka_handoff.metrics.prometheus import KafkaCollector, start_http_server

    collector = KafkaCollector()
    collector.add(consumer)                       # any Consumer or Producer (or a Metrics registry)
    start_http_server(9464, collector)            # or REGISTRY.register(collector) yourself
"""

from __future__ import annotations

import math
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kafka_handoff.metrics import MetricName, Metrics

__all__ = ["KafkaCollector", "prometheus_name", "start_http_server"]

_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")


def prometheus_name(name: MetricName) -> str:
    """The Prometheus family name of a Java metric name (without a counter's ``_total``)."""
    group = name.group.removesuffix("-metrics")
    base = name.name.removesuffix("-total") if name.name.endswith("-total") else name.name
    return _UNSAFE.sub("_", f"kafka_{group}_{base}")


def _label(key: str) -> str:
    return _UNSAFE.sub("_", key)


def _registry_of(client: Any) -> Metrics:
    if isinstance(client, Metrics):
        return client
    registry = getattr(client, "metric_registry", None)
    if callable(registry):
        result = registry()
        if isinstance(result, Metrics):
            return result
    raise TypeError(
        f"{type(client).__name__} has no metric registry (expected a Consumer, Producer or Metrics)"
    )


class KafkaCollector:
    """A ``prometheus_client`` collector over the metric registries of any number of clients.

    Clients are held weakly: a closed and dropped client disappears from the scrape.  Extra gauges (e.g. the
    pipeline worker's counters) are added with :meth:`add_gauges`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._registries: weakref.WeakSet[Metrics] = weakref.WeakSet()
        self._gauges: list[tuple[str, str, Mapping[str, str], Callable[[], Mapping[str, float]]]] = []

    def add(self, client: Any) -> None:
        """Export ``client``'s metrics (a Consumer, Producer, or a
        :class:`~kafka_handoff.metrics.Metrics` registry)."""
        with self._lock:
            self._registries.add(_registry_of(client))

    def remove(self, client: Any) -> None:
        with self._lock:
            self._registries.discard(_registry_of(client))

    def add_gauges(
        self, prefix: str, help_text: str, labels: Mapping[str, str], read: Callable[[], Mapping[str, float]]
    ) -> None:
        """Export ``read()``'s ``{name: value}`` as gauges ``<prefix>_<name>`` (``*_total``: counters)."""
        with self._lock:
            self._gauges.append((prefix, help_text, dict(labels), read))

    def samples(self) -> dict[tuple[str, str], list[tuple[dict[str, str], float]]]:
        """``{(family, type): [(labels, value), ...]}`` as the next scrape will see it."""
        with self._lock:
            registries = list(self._registries)
            gauges = list(self._gauges)
        out: dict[tuple[str, str], list[tuple[dict[str, str], float]]] = {}
        for registry in registries:
            for name, value in registry.snapshot().items():
                if not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value):
                    continue
                kind = "counter" if name.name.endswith("-total") else "gauge"
                labels = {_label(k): str(v) for k, v in name.tags.items()}
                out.setdefault((prometheus_name(name), kind), []).append((labels, float(value)))
        for prefix, _help, fixed, read in gauges:
            for key, value in read().items():
                if math.isnan(value):
                    continue
                kind = "counter" if key.endswith("_total") else "gauge"
                family = _UNSAFE.sub("_", f"{prefix}_{key.removesuffix('_total')}")
                out.setdefault((family, kind), []).append((dict(fixed), float(value)))
        return out

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for (family, kind), rows in sorted(self.samples().items()):
            label_names = sorted({k for labels, _ in rows for k in labels})
            metric: Any
            if kind == "counter":
                metric = CounterMetricFamily(family, f"Kafka client metric {family}", labels=label_names)
            else:
                metric = GaugeMetricFamily(family, f"Kafka client metric {family}", labels=label_names)
            for labels, value in rows:
                metric.add_metric([labels.get(k, "") for k in label_names], value)
            yield metric

    def describe(self) -> list[Any]:
        return []  # families vary with assignments: nothing fixed to describe


def start_http_server(port: int, collector: KafkaCollector, addr: str = "127.0.0.1") -> Any:
    """Serve ``collector`` (on its own registry) at ``http://addr:port/metrics``; returns the server object
    (``server.shutdown()`` stops it)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client import start_http_server as _start

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server, _thread = _start(port, addr=addr, registry=registry)
    return server
