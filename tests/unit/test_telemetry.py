"""KIP-714 client telemetry: the request manager with a fake clock, and the OTLP encoding (decoded with
the official opentelemetry-proto classes as the oracle)."""

from __future__ import annotations

import datetime
import uuid
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.proto.metrics.v1 import metrics_pb2

from kafka_handoff.errors import IllegalStateError, UnsupportedVersionError
from kafka_handoff.metrics import CumulativeSum, Max, MetricName, Metrics
from kafka_handoff.protocol.compression import decompress
from kafka_handoff.protocol.otlp import OtlpMetric, OtlpPoint, encode_metrics_data
from kafka_handoff.protocol.requests import FakeClock, UnsentRequest
from kafka_handoff.protocol.telemetry import TelemetryManager, client_instance_id, telemetry_name
from kafka_handoff.protocol.versions import ApiKey

pytestmark = pytest.mark.unit

ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def subscription(requested: tuple[str, ...] = ("",), *, interval_ms: int = 1000, delta: bool = False,
                 compression: tuple[int, ...] = (), code: int = 0) -> Any:  # fmt: skip
    return SimpleNamespace(
        error_code=code,
        client_instance_id=ID,
        subscription_id=7,
        accepted_compression_types=compression,
        push_interval=datetime.timedelta(milliseconds=interval_ms),
        telemetry_max_bytes=1 << 20,
        delta_temporality=delta,
        requested_metrics=requested,
    )


def setup(enabled: bool = True) -> tuple[TelemetryManager, Metrics, FakeClock]:
    clock = FakeClock()
    metrics = Metrics(clock=clock, default_tags={"client-id": "c1"})
    sensor = metrics.sensor("consumed")
    sensor.add(
        metrics.metric_name("records-consumed-total", "consumer-fetch-manager-metrics"), CumulativeSum()
    )
    tags = {"topic": "t", "partition": "0"}
    sensor.add(metrics.metric_name("records-lag-max", "consumer-fetch-manager-metrics", tags=tags), Max())
    sensor.record(10)
    manager = TelemetryManager(metrics, enabled=enabled, rand=lambda: 0.5, now_unix_nanos=lambda: 10**18)
    return manager, metrics, clock


def only(requests: list[UnsentRequest], api_key: int) -> UnsentRequest:
    assert [r.api_key for r in requests] == [api_key]
    return requests[0]


def decode(payload: bytes) -> dict[str, Any]:
    data = metrics_pb2.MetricsData()
    data.ParseFromString(payload)
    out: dict[str, Any] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            assert sm.scope.name == "kafka_handoff"
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                points = m.sum.data_points if kind == "sum" else m.gauge.data_points
                out[m.name] = (
                    kind,
                    [({a.key: a.value.string_value for a in p.attributes}, p.as_double) for p in points],
                    m.sum.aggregation_temporality if kind == "sum" else None,
                )
    return out


def test_names_follow_kip_714() -> None:
    name = MetricName("records-lag-max", "consumer-fetch-manager-metrics")
    assert telemetry_name(name) == "org.apache.kafka.consumer.fetch.manager.records.lag.max"


def test_otlp_encoding_decodes_with_the_official_schema() -> None:
    payload = encode_metrics_data(
        [
            OtlpMetric("a.gauge", [OtlpPoint(1.5, {"topic": "t"}, 5, 0)]),
            OtlpMetric("a.sum", [OtlpPoint(42.0, {}, 6, 1)], is_sum=True),
        ],
        {"group_id": "g"},
        "kafka_handoff",
        "0.1.0",
    )
    data = metrics_pb2.MetricsData()
    data.ParseFromString(payload)
    rm = data.resource_metrics[0]
    assert {a.key: a.value.string_value for a in rm.resource.attributes} == {"group_id": "g"}
    gauge, total = rm.scope_metrics[0].metrics
    assert gauge.name == "a.gauge" and gauge.gauge.data_points[0].as_double == 1.5
    assert gauge.gauge.data_points[0].time_unix_nano == 5
    assert total.sum.is_monotonic and total.sum.aggregation_temporality == 2
    assert total.sum.data_points[0].as_double == 42.0


def test_subscription_then_pushes_of_the_requested_metrics_every_interval() -> None:
    manager, _metrics, clock = setup()
    get = only(manager.poll(clock.now_ms()).unsent, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
    assert get.values == {"client_instance_id": uuid.UUID(int=0)}
    assert manager.poll(clock.now_ms()).unsent == []  # one request at a time
    assert get.on_response is not None
    get.on_response(subscription(("org.apache.kafka.consumer.fetch.manager.records",)), 0, clock.now_ms())
    assert manager.instance_id == ID and manager.instance_id_known.is_set()
    # first push after 0.5 + rand() = 1.0 x the interval
    assert manager.poll(clock.advance(999)).unsent == []
    push = only(manager.poll(clock.advance(1)).unsent, ApiKey.PUSH_TELEMETRY)
    assert push.values is not None
    assert push.values["client_instance_id"] == ID and push.values["subscription_id"] == 7
    assert push.values["terminating"] is False and push.values["compression_type"] == 0
    pushed = decode(push.values["metrics"])
    assert pushed == {
        "org.apache.kafka.consumer.fetch.manager.records.consumed.total": ("sum", [({}, 10.0)], 2),
        "org.apache.kafka.consumer.fetch.manager.records.lag.max": (
            "gauge",
            [({"topic": "t", "partition": "0"}, 10.0)],
            None,
        ),
    }
    assert push.on_response is not None
    push.on_response(SimpleNamespace(error_code=0), 0, clock.now_ms())
    assert manager.pushes == 1
    assert manager.poll(clock.advance(999)).unsent == []
    only(manager.poll(clock.advance(1)).unsent, ApiKey.PUSH_TELEMETRY)


def test_no_requested_metrics_means_no_push_and_a_new_subscription_after_the_interval() -> None:
    manager, _metrics, clock = setup()
    get = only(manager.poll(clock.now_ms()).unsent, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
    assert get.on_response is not None
    get.on_response(subscription(()), 0, clock.now_ms())
    assert manager.poll(clock.advance(999)).unsent == []
    again = only(manager.poll(clock.advance(1)).unsent, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
    assert again.values == {"client_instance_id": ID}  # the id it was given


def test_counters_as_deltas_when_the_broker_asks_and_compression_it_accepts() -> None:
    manager, metrics, clock = setup()
    get = only(manager.poll(clock.now_ms()).unsent, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
    assert get.on_response is not None
    get.on_response(subscription(("",), delta=True, compression=(9, 3, 1)), 0, clock.now_ms())
    push = only(manager.poll(clock.advance(1000)).unsent, ApiKey.PUSH_TELEMETRY)
    assert push.values is not None and push.values["compression_type"] == 3  # lz4: first it knows
    first = decode(decompress(3, push.values["metrics"]))
    assert first["org.apache.kafka.consumer.fetch.manager.records.consumed.total"] == ("sum", [({}, 10.0)], 1)
    assert push.on_response is not None
    push.on_response(SimpleNamespace(error_code=0), 0, clock.now_ms())
    metrics.sensor("consumed").record(5)
    push2 = only(manager.poll(clock.advance(1000)).unsent, ApiKey.PUSH_TELEMETRY)
    assert push2.values is not None
    second = decode(decompress(3, push2.values["metrics"]))
    assert second["org.apache.kafka.consumer.fetch.manager.records.consumed.total"][1] == [({}, 5.0)]


def test_unknown_subscription_fetches_the_subscription_again_at_once() -> None:
    manager, _metrics, clock = setup()
    get = only(manager.poll(clock.now_ms()).unsent, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
    assert get.on_response is not None
    get.on_response(subscription(), 0, clock.now_ms())
    push = only(manager.poll(clock.advance(1000)).unsent, ApiKey.PUSH_TELEMETRY)
    assert push.on_response is not None
    push.on_response(SimpleNamespace(error_code=117), 0, clock.now_ms())
    only(manager.poll(clock.now_ms()).unsent, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)


def test_subscription_errors_retry_with_backoff() -> None:
    manager, _metrics, clock = setup()
    for attempt in range(3):
        get = only(manager.poll(clock.now_ms()).unsent, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
        assert get.on_failure is not None
        get.on_failure(ConnectionError("gone"), clock.now_ms())
        result = manager.poll(clock.now_ms())
        assert result.unsent == [] and result.wait_ms >= 80 * 2**attempt  # backoff grows (jitter 20 %)
        clock.advance(result.wait_ms)


def test_unsupported_broker_disables_telemetry_and_the_id_is_none() -> None:
    manager, _metrics, clock = setup()
    get = only(manager.poll(clock.now_ms()).unsent, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
    assert get.on_failure is not None
    get.on_failure(UnsupportedVersionError("no api 71"), clock.now_ms())
    assert manager.poll(clock.advance(10**6)).unsent == []
    assert client_instance_id(manager, 0.0) is None


def test_client_instance_id_raises_when_telemetry_is_off() -> None:
    manager, _metrics, _clock = setup(enabled=False)
    with pytest.raises(IllegalStateError, match=r"enable\.metrics\.push"):
        client_instance_id(manager, 1.0)
    with pytest.raises(ValueError):
        client_instance_id(setup()[0], -1.0)


def test_close_sends_a_terminating_push_and_completes_after_its_answer() -> None:
    manager, _metrics, clock = setup()
    get = only(manager.poll(clock.now_ms()).unsent, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
    assert get.on_response is not None
    get.on_response(subscription(), 0, clock.now_ms())
    done: Future[None] = Future()
    manager.terminate(clock.now_ms(), done)
    push = only(manager.poll(clock.now_ms()).unsent, ApiKey.PUSH_TELEMETRY)  # not waiting for the interval
    assert push.values is not None and push.values["terminating"] is True
    assert not done.done()
    assert push.on_response is not None
    push.on_response(SimpleNamespace(error_code=0), 0, clock.now_ms())
    assert done.done()
    assert manager.poll(clock.advance(10**6)).unsent == []


def test_close_while_a_push_is_in_flight_follows_it_with_the_terminating_push() -> None:
    manager, _metrics, clock = setup()
    get = only(manager.poll(clock.now_ms()).unsent, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
    assert get.on_response is not None
    get.on_response(subscription(), 0, clock.now_ms())
    push = only(manager.poll(clock.advance(1000)).unsent, ApiKey.PUSH_TELEMETRY)
    done: Future[None] = Future()
    manager.terminate(clock.now_ms(), done)
    assert push.on_response is not None
    push.on_response(SimpleNamespace(error_code=0), 0, clock.now_ms())
    final = only(manager.poll(clock.now_ms()).unsent, ApiKey.PUSH_TELEMETRY)
    assert final.values is not None and final.values["terminating"] is True
    assert final.on_failure is not None
    final.on_failure(ConnectionError("gone"), clock.now_ms())
    assert done.done()


def test_close_without_subscribed_metrics_completes_at_once() -> None:
    manager, _metrics, clock = setup()
    done: Future[None] = Future()
    manager.terminate(clock.now_ms(), done)
    assert done.done() and manager.poll(clock.now_ms()).unsent == []


@pytest.mark.parametrize(
    ("asked_ms", "used_ms"), [(1, 100), (99, 100), (100, 100), (0, 300_000), (-5, 300_000)]
)
def test_a_broker_cannot_make_the_client_push_more_often_than_every_100_ms(
    asked_ms: int, used_ms: int
) -> None:
    """Issue 34: a broker asking for a 1 ms push interval would have the client push a thousand times a
    second; the interval is bounded below by the broker's own minimum of a subscription's interval.ms."""
    manager, _metrics, clock = setup()
    get = only(manager.poll(clock.now_ms()).unsent, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
    assert get.on_response is not None
    get.on_response(subscription(("org.apache",), interval_ms=asked_ms), 0, clock.now_ms())
    # The first push comes after (0.5 + rand()) x the interval = 1.0 x the interval.
    assert manager.poll(clock.advance(used_ms - 1)).unsent == []
    push = only(manager.poll(clock.advance(1)).unsent, ApiKey.PUSH_TELEMETRY)
    assert push.on_response is not None
    push.on_response(SimpleNamespace(error_code=0), 0, clock.now_ms())
    assert manager.poll(clock.advance(used_ms - 1)).unsent == []
    only(manager.poll(clock.advance(1)).unsent, ApiKey.PUSH_TELEMETRY)
