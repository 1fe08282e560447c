"""Prometheus and OpenTelemetry export of the client metric registries (no broker)."""

from __future__ import annotations

import urllib.request

import pytest

from kafka_handoff.metrics import CumulativeSum, Max, MetricName, Metrics
from kafka_handoff.metrics.prometheus import KafkaCollector, prometheus_name, start_http_server
from kafka_handoff.protocol.requests import FakeClock

pytestmark = pytest.mark.unit


def registry() -> tuple[Metrics, FakeClock]:
    clock = FakeClock()
    metrics = Metrics(clock=clock, default_tags={"client-id": "c-1"})
    return metrics, clock


def test_java_names_map_to_prometheus_conventions() -> None:
    lag = MetricName("records-lag-max", "consumer-fetch-manager-metrics", {"client-id": "c"})
    total = MetricName("records-consumed-total", "consumer-fetch-manager-metrics")
    assert prometheus_name(lag) == "kafka_consumer_fetch_manager_records_lag_max"
    assert prometheus_name(total) == "kafka_consumer_fetch_manager_records_consumed"  # + _total as a counter


def test_collector_exports_tags_as_labels_and_totals_as_counters() -> None:
    metrics, _clock = registry()
    sensor = metrics.sensor("lag")
    tags = {"topic": "t", "partition": "3"}
    sensor.add(metrics.metric_name("records-lag-max", "consumer-fetch-manager-metrics", tags=tags), Max())
    sensor.add(
        metrics.metric_name("records-consumed-total", "consumer-fetch-manager-metrics"), CumulativeSum()
    )
    sensor.record(42)
    collector = KafkaCollector()
    collector.add(metrics)
    samples = collector.samples()
    assert samples[("kafka_consumer_fetch_manager_records_lag_max", "gauge")] == [
        ({"client_id": "c-1", "topic": "t", "partition": "3"}, 42.0)
    ]
    assert samples[("kafka_consumer_fetch_manager_records_consumed", "counter")] == [
        ({"client_id": "c-1"}, 42.0)
    ]
    sensor.record(8)
    assert collector.samples()[("kafka_consumer_fetch_manager_records_consumed", "counter")][0][1] == 50.0


def test_nan_values_are_left_out() -> None:
    metrics, _clock = registry()
    metrics.add_gauge(
        metrics.metric_name("fetch-latency-avg", "consumer-fetch-manager-metrics"), lambda: float("nan")
    )
    collector = KafkaCollector()
    collector.add(metrics)
    assert collector.samples() == {}


def test_http_endpoint_serves_the_text_format() -> None:
    metrics, _clock = registry()
    metrics.add_gauge(metrics.metric_name("assigned-partitions", "consumer-coordinator-metrics"), lambda: 6.0)
    collector = KafkaCollector()
    collector.add(metrics)
    collector.add_gauges(
        "kafka_handoff_pipeline", "worker", {"member": "m"}, lambda: {"records_in_total": 7.0}
    )
    server = start_http_server(0, collector)
    try:
        port = server.server_address[1]
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert 'kafka_consumer_coordinator_assigned_partitions{client_id="c-1"} 6.0' in body
    assert 'kafka_handoff_pipeline_records_in_total{member="m"} 7.0' in body


def test_otel_bridge_uses_semantic_conventions_and_picks_up_new_families() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from kafka_handoff.metrics.otel import instrument

    metrics, _clock = registry()
    consumed = metrics.sensor("consumed")
    consumed.add(
        metrics.metric_name("records-consumed-total", "consumer-fetch-manager-metrics", tags={"topic": "t"}),
        CumulativeSum(),
    )
    consumed.record(5)

    class Client:
        group_id = "g"

        def metric_registry(self) -> Metrics:
            return metrics

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    bridge = instrument(Client(), provider)

    def read() -> dict[str, list[tuple[dict[str, object], float]]]:
        data = reader.get_metrics_data()
        out: dict[str, list[tuple[dict[str, object], float]]] = {}
        assert data is not None
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    out[m.name] = [
                        (dict(p.attributes or {}), float(getattr(p, "value", float("nan"))))
                        for p in m.data.data_points
                    ]
        return out

    first = read()
    assert first["messaging.client.consumed.messages"] == [
        (
            {
                "messaging.system": "kafka",
                "messaging.destination.name": "t",
                "messaging.client.id": "c-1",
                "messaging.consumer.group.name": "g",
            },
            5.0,
        )
    ]
    metrics.add_gauge(metrics.metric_name("assigned-partitions", "consumer-coordinator-metrics"), lambda: 3.0)
    assert "kafka.consumer_coordinator.assigned_partitions" not in read()  # appeared after instrument()
    bridge.wait_discovered()
    assert read()["kafka.consumer_coordinator.assigned_partitions"] == [({"client_id": "c-1"}, 3.0)]
