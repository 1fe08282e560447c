"""OpenTelemetry metrics bridge (optional extra: ``pip install kafka-handoff[otel]``).

:func:`instrument` registers observable instruments on a ``MeterProvider`` that read a client's metric
registry at each collection:

* the OpenTelemetry messaging semantic conventions where they define the metric --
  ``messaging.client.consumed.messages`` (from the consumer's ``records-consumed-total`` per topic) and
  ``messaging.client.sent.messages`` (from the producer's ``record-send-total`` per topic), with
  ``messaging.system=kafka``, ``messaging.destination.name``, ``messaging.client.id`` and, for a group
  consumer, ``messaging.consumer.group.name``;
* every other metric under its Java name as ``kafka.<group>.<name>`` (group without ``-metrics``; dashes
  become underscores), its tags as attributes, a counter where the Java name ends in ``-total``.

Metric families that appear later (per-partition lag after an assignment) are noticed at a collection
and get their instruments right after it (the SDK forbids creating instruments inside a collection), so
they are exported from the collection after that.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from typing import Any

from kafka_handoff.metrics import MetricName, Metrics
from kafka_handoff.metrics.prometheus import _registry_of

__all__ = ["SEMCONV", "OtelBridge", "instrument", "otel_name"]

#: Java (group, name) -> (OpenTelemetry semantic-convention instrument, unit).
SEMCONV: dict[tuple[str, str], tuple[str, str]] = {
    ("consumer-fetch-manager-metrics", "records-consumed-total"): (
        "messaging.client.consumed.messages",
        "{message}",
    ),
    ("producer-topic-metrics", "record-send-total"): ("messaging.client.sent.messages", "{message}"),
}


def otel_name(name: MetricName) -> str:
    """The instrument name of a Java metric without a semantic-convention equivalent."""
    group = name.group.removesuffix("-metrics").replace("-", "_")
    return f"kafka.{group}.{name.name.replace('-', '_')}"


def _attributes(name: MetricName, group_id: str | None, semconv: bool) -> dict[str, str]:
    if not semconv:
        return {k.replace("-", "_"): str(v) for k, v in name.tags.items()}
    attrs = {"messaging.system": "kafka"}
    tags = name.tags
    if "topic" in tags:
        attrs["messaging.destination.name"] = str(tags["topic"])
    if "partition" in tags:
        attrs["messaging.destination.partition.id"] = str(tags["partition"])
    if "client-id" in tags:
        attrs["messaging.client.id"] = str(tags["client-id"])
    if group_id:
        attrs["messaging.consumer.group.name"] = group_id
    return attrs


def _family(name: MetricName) -> tuple[str, str]:
    semconv = SEMCONV.get((name.group, name.name))
    return (semconv[0], semconv[1]) if semconv else (otel_name(name), "")


class OtelBridge:
    """The instruments of one client (what :func:`instrument` returns)."""

    def __init__(self, meter: Any, registry: Metrics, group_id: str | None) -> None:
        self._meter = meter
        self._registry = registry
        self._group_id = group_id
        self._lock = threading.Lock()
        self._families: set[str] = set()
        self._pending: threading.Thread | None = None
        self.discover()

    def discover(self) -> None:
        """Create an instrument for every metric family the registry has now and had none yet (never call
        it from inside a collection: the SDK holds its lock there)."""
        with self._lock:
            for metric in self._registry:
                key = (metric.name.group, metric.name.name)
                semconv = SEMCONV.get(key)
                family, unit = _family(metric.name)
                if family in self._families:
                    continue
                self._families.add(family)
                callback = self._callback(key, semconv is not None)
                if metric.name.name.endswith("-total"):
                    self._meter.create_observable_counter(family, callbacks=[callback], unit=unit)
                else:
                    self._meter.create_observable_gauge(family, callbacks=[callback], unit=unit)

    def _callback(self, key: tuple[str, str], semconv: bool) -> Any:
        from opentelemetry.metrics import Observation

        def observe(options: Any) -> Iterable[Any]:
            now = self._registry.now_ms()
            out = []
            for metric in self._registry:
                if (metric.name.group, metric.name.name) != key:
                    continue
                value = metric.value(now)
                if math.isnan(value) or math.isinf(value):
                    continue
                out.append(Observation(value, _attributes(metric.name, self._group_id, semconv)))
            self._discover_later()
            return out

        return observe

    def _discover_later(self) -> None:
        """New families since the last discovery get instruments once the running collection is over."""
        with self._lock:
            if self._pending is not None and self._pending.is_alive():
                return
            new = any(_family(m.name)[0] not in self._families for m in self._registry)
            if not new:
                return
            self._pending = threading.Thread(target=self.discover, name="handoff-otel-discover", daemon=True)
            self._pending.start()

    def wait_discovered(self, timeout: float = 10.0) -> None:
        """Wait until instruments for the families noticed at the last collection exist."""
        with self._lock:
            pending = self._pending
        if pending is not None:
            pending.join(timeout)


def instrument(client: Any, meter_provider: Any = None) -> OtelBridge:
    """Export ``client``'s metrics (a Consumer or Producer) through ``meter_provider`` (default: the global
    one from ``opentelemetry.metrics.get_meter_provider()``)."""
    from opentelemetry import metrics as otel_metrics

    provider = meter_provider if meter_provider is not None else otel_metrics.get_meter_provider()
    from kafka_handoff import __version__

    meter = provider.get_meter("kafka_handoff", __version__)
    group_id = getattr(client, "group_id", None)
    return OtelBridge(meter, _registry_of(client), group_id if isinstance(group_id, str) else None)
