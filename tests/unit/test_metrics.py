"""Metrics registry math (fake clock), and the consumer's rebalance / fetch metrics."""

from __future__ import annotations

import math
import threading

import pytest

from kafka_handoff.config import parse_consumer_config
from kafka_handoff.consumer.metrics import (
    COORDINATOR_METRICS_GROUP,
    FETCH_MANAGER_METRICS_GROUP,
    FetchMetrics,
    RebalanceMetrics,
)
from kafka_handoff.group.membership import CallbackKind, RebalanceMetricsSink
from kafka_handoff.metrics import (
    Avg,
    CumulativeCount,
    CumulativeSum,
    Max,
    MetricConfig,
    MetricName,
    Metrics,
    Min,
    Rate,
    TimeUnit,
    Value,
    WindowedCount,
    WindowedSum,
)
from kafka_handoff.protocol.requests import FakeClock
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit

WINDOW = 30_000  # Java's default metrics.sample.window.ms; 2 samples


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(0)


@pytest.fixture
def metrics(clock: FakeClock) -> Metrics:
    return Metrics(MetricConfig(samples=2, time_window_ms=WINDOW), clock, {"client-id": "c1"})


def read(metrics: Metrics, name: str, group: str = "g") -> float:
    return metrics.value(name, group)


# ---------------------------------------------------------------------------------------------------------
# MetricName and registry
# ---------------------------------------------------------------------------------------------------------


def test_metric_name_identity() -> None:
    a = MetricName("n", "g", {"x": "1", "y": "2"}, "one description")
    b = MetricName("n", "g", {"y": "2", "x": "1"}, "another description")
    assert a == b and hash(a) == hash(b)
    assert a != MetricName("n", "g", {"x": "1"})
    assert a != MetricName("n", "other", {"x": "1", "y": "2"})
    assert dict(a.tags) == {"x": "1", "y": "2"}
    with pytest.raises(TypeError):
        a.tags["z"] = "3"  # type: ignore[index]
    with pytest.raises(ValueError):
        MetricName("", "g")


def test_metric_name_carries_default_tags(metrics: Metrics) -> None:
    name = metrics.metric_name("n", "g", tags={"topic": "t"})
    assert dict(name.tags) == {"client-id": "c1", "topic": "t"}


def test_duplicate_registration_is_rejected(metrics: Metrics) -> None:
    name = metrics.metric_name("n", "g")
    metrics.sensor("s").add(name, CumulativeSum())
    with pytest.raises(ValueError, match="already registered"):
        metrics.sensor("t").add(name, Max())
    with pytest.raises(ValueError, match="already registered"):
        metrics.add_gauge(name, lambda: 1.0)


def test_sensor_is_created_once(metrics: Metrics) -> None:
    assert metrics.sensor("s") is metrics.sensor("s")
    assert metrics.get_sensor("s") is metrics.sensor("s")
    assert metrics.get_sensor("missing") is None


def test_remove_sensor_removes_its_metrics(metrics: Metrics) -> None:
    metrics.sensor("s").add(metrics.metric_name("a", "g"), CumulativeSum()).add(
        metrics.metric_name("b", "g"), Max()
    )
    metrics.add_gauge(metrics.metric_name("c", "g"), lambda: 3.0)
    assert len(metrics) == 3
    metrics.remove_sensor("s")
    assert metrics.get_sensor("s") is None
    assert list(metrics.as_dict()) == ["g:c"]
    assert metrics.remove_metric(metrics.metric_name("c", "g")) is not None
    assert len(metrics) == 0


def test_value_of_missing_metric_raises(metrics: Metrics) -> None:
    with pytest.raises(KeyError, match="g:nope"):
        metrics.value("nope", "g")


def test_snapshot_and_as_dict(metrics: Metrics) -> None:
    sensor = metrics.sensor("s")
    sensor.add(metrics.metric_name("total", "g"), CumulativeSum())
    sensor.add(metrics.metric_name("total", "g", tags={"topic": "t"}), CumulativeCount())
    sensor.record(5)
    sensor.record(7)
    snap = metrics.snapshot()
    assert snap[metrics.metric_name("total", "g")] == 12.0
    assert snap[MetricName("total", "g", {"client-id": "c1", "topic": "t"})] == 2.0
    assert metrics.as_dict() == {"g:total": 12.0, "g:total{topic=t}": 2.0}


# ---------------------------------------------------------------------------------------------------------
# Stats
# ---------------------------------------------------------------------------------------------------------


def test_cumulative_stats_and_value_never_expire(metrics: Metrics, clock: FakeClock) -> None:
    s = metrics.sensor("s")
    s.add(metrics.metric_name("sum", "g"), CumulativeSum())
    s.add(metrics.metric_name("count", "g"), CumulativeCount())
    s.add(metrics.metric_name("last", "g"), Value())
    assert read(metrics, "last") == 0.0
    for v in (3, 4, 5):
        s.record(v)
    clock.advance(10 * WINDOW)
    s.record(1.5)
    assert read(metrics, "sum") == 13.5
    assert read(metrics, "count") == 4.0
    assert read(metrics, "last") == 1.5


def test_avg_max_min_are_nan_without_samples(metrics: Metrics) -> None:
    s = metrics.sensor("s")
    for stat_name, stat in (("avg", Avg()), ("max", Max()), ("min", Min())):
        s.add(metrics.metric_name(stat_name, "g"), stat)
    assert all(math.isnan(read(metrics, n)) for n in ("avg", "max", "min"))


def test_avg_max_min_over_windows_and_expiry(metrics: Metrics, clock: FakeClock) -> None:
    s = metrics.sensor("s")
    s.add(metrics.metric_name("avg", "g"), Avg())
    s.add(metrics.metric_name("max", "g"), Max())
    s.add(metrics.metric_name("min", "g"), Min())
    s.record(10)  # window 1 starts at t=0
    s.record(20)
    clock.advance(WINDOW)  # t=30000: the first window is complete, a second one starts
    s.record(60)
    assert read(metrics, "avg") == 30.0  # (10 + 20 + 60) / 3
    assert read(metrics, "max") == 60.0
    assert read(metrics, "min") == 10.0
    clock.advance(WINDOW)  # t=60000: window 1 (started at 0) is 2 windows old and is dropped
    assert read(metrics, "avg") == 60.0
    assert read(metrics, "min") == 60.0
    s.record(-4)  # reuses the oldest slot
    assert read(metrics, "avg") == 28.0
    assert read(metrics, "max") == 60.0
    clock.advance(2 * WINDOW)  # everything has expired
    assert math.isnan(read(metrics, "avg"))
    assert math.isnan(read(metrics, "max"))


def test_windowed_sum_and_count(metrics: Metrics, clock: FakeClock) -> None:
    s = metrics.sensor("s")
    s.add(metrics.metric_name("sum", "g"), WindowedSum())
    s.add(metrics.metric_name("count", "g"), WindowedCount())
    s.record(100)
    clock.advance(WINDOW + 1)
    s.record(50)
    s.record(50)
    assert (read(metrics, "sum"), read(metrics, "count")) == (200.0, 3.0)
    clock.advance(WINDOW)  # t=60001: the window started at 0 expired, the one at 30001 has not
    assert (read(metrics, "sum"), read(metrics, "count")) == (100.0, 2.0)


def test_rate_counts_at_least_samples_minus_one_windows(metrics: Metrics, clock: FakeClock) -> None:
    s = metrics.sensor("s")
    s.add(metrics.metric_name("rate", "g"), Rate(TimeUnit.SECONDS, WindowedSum()))
    s.add(metrics.metric_name("per-hour", "g"), Rate(TimeUnit.HOURS, WindowedCount()))
    for _ in range(6):
        s.record(5)  # 30 in total at t=0
    # elapsed 0 ms, but at least (2 - 1) full windows = 30 s
    assert read(metrics, "rate") == pytest.approx(30 / 30)
    assert read(metrics, "per-hour") == pytest.approx(6 / (30_000 / 3_600_000))
    clock.advance(45_000)  # one full window elapsed: 45 s
    assert read(metrics, "rate") == pytest.approx(30 / 45)
    s.record(15)  # a second window starts at t=45000
    clock.advance(10_000)  # t=55000, oldest window started at 0
    assert read(metrics, "rate") == pytest.approx(45 / 55)
    clock.advance(10_000)  # t=65000: the window from t=0 expired; the oldest is now t=45000
    # 20 s elapsed is less than one full window: one window (30 s) is added, as in Java
    assert read(metrics, "rate") == pytest.approx(15 / 50)
    clock.advance(100_000)
    assert read(metrics, "rate") == 0.0


def test_rate_with_one_sample_is_at_least_one_millisecond() -> None:
    clock = FakeClock(0)
    m = Metrics(MetricConfig(samples=1, time_window_ms=1_000), clock)
    m.sensor("s").add(m.metric_name("r", "g"), Rate(TimeUnit.MILLISECONDS)).record(4)
    assert m.value("r", "g") == 4.0  # 4 per ms over the minimum 1 ms window
    clock.advance(500)
    assert m.value("r", "g") == pytest.approx(4 / 500)


def test_meter_registers_rate_and_total(metrics: Metrics, clock: FakeClock) -> None:
    s = metrics.sensor("bytes")
    s.add_meter(metrics.metric_name("bytes-rate", "g"), metrics.metric_name("bytes-total", "g"))
    c = metrics.sensor("ops")
    c.add_meter(metrics.metric_name("op-rate", "g"), metrics.metric_name("op-total", "g"), count=True)
    s.record(300)
    s.record(300)
    c.record(123)
    assert read(metrics, "bytes-total") == 600.0
    assert read(metrics, "bytes-rate") == pytest.approx(600 / 30)
    assert read(metrics, "op-total") == 1.0
    assert read(metrics, "op-rate") == pytest.approx(1 / 30)


def test_gauge_reads_its_callable_on_each_read(metrics: Metrics) -> None:
    box = [1]
    metrics.add_gauge(metrics.metric_name("gauge", "g"), lambda: box[0])
    assert read(metrics, "gauge") == 1.0
    box[0] = 7
    assert read(metrics, "gauge") == 7.0


def test_explicit_now_overrides_clock(metrics: Metrics) -> None:
    s = metrics.sensor("s").add(metrics.metric_name("avg", "g"), Avg())
    s.record(1, now_ms=0)
    s.record(3, now_ms=WINDOW)
    metric = metrics.metric(metrics.metric_name("avg", "g"))
    assert metric is not None
    assert metric.value(now_ms=WINDOW) == 2.0
    assert metric.value(now_ms=2 * WINDOW) == 3.0


def test_concurrent_recording_loses_nothing(metrics: Metrics) -> None:
    s = metrics.sensor("s")
    s.add(metrics.metric_name("count", "g"), CumulativeCount())
    s.add(metrics.metric_name("sum", "g"), CumulativeSum())
    s.add(metrics.metric_name("wcount", "g"), WindowedCount())
    threads, per_thread = 4, 2_000
    start = threading.Barrier(threads)

    def work() -> None:
        start.wait()
        for i in range(per_thread):
            s.record(2)
            if i % 500 == 0:
                metrics.snapshot()  # reads interleaved with writes

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert read(metrics, "count") == threads * per_thread
    assert read(metrics, "sum") == 2 * threads * per_thread
    assert read(metrics, "wcount") == threads * per_thread


def test_metric_config_validation_and_client_config() -> None:
    with pytest.raises(ValueError):
        MetricConfig(samples=0)
    cfg = parse_consumer_config({"bootstrap.servers": "a:1", "metrics.num.samples": "3"})
    mc = MetricConfig(samples=cfg.metrics_num_samples, time_window_ms=cfg.metrics_sample_window_ms)
    assert (mc.samples, mc.time_window_ms) == (3, 30_000)


# ---------------------------------------------------------------------------------------------------------
# consumer-coordinator-metrics
# ---------------------------------------------------------------------------------------------------------

JAVA_COORDINATOR_NAMES = {
    "rebalance-latency-avg",
    "rebalance-latency-max",
    "rebalance-latency-total",
    "rebalance-total",
    "rebalance-rate-per-hour",
    "failed-rebalance-total",
    "failed-rebalance-rate-per-hour",
    "last-rebalance-seconds-ago",
    "partition-revoked-latency-avg",
    "partition-revoked-latency-max",
    "partition-assigned-latency-avg",
    "partition-assigned-latency-max",
    "partition-lost-latency-avg",
    "partition-lost-latency-max",
    "partitions-revoked-latency-avg",
    "partitions-revoked-latency-max",
    "partitions-assigned-latency-avg",
    "partitions-assigned-latency-max",
    "partitions-lost-latency-avg",
    "partitions-lost-latency-max",
    "commit-latency-avg",
    "commit-latency-max",
    "commit-rate",
    "commit-total",
    "assigned-partitions",
}


def coord(metrics: Metrics, name: str) -> float:
    return metrics.value(name, COORDINATOR_METRICS_GROUP)


def test_coordinator_metric_names_match_java(metrics: Metrics) -> None:
    RebalanceMetrics(metrics)
    names = {n.name for n in metrics.snapshot() if n.group == COORDINATOR_METRICS_GROUP}
    assert names == JAVA_COORDINATOR_NAMES
    assert all(dict(n.tags) == {"client-id": "c1"} for n in metrics.snapshot())


def test_rebalance_metrics_is_a_membership_sink(metrics: Metrics) -> None:
    sink: RebalanceMetricsSink = RebalanceMetrics(metrics)
    sink.rebalance_started(0)
    sink.rebalance_completed(10)
    assert coord(metrics, "rebalance-total") == 1.0


def test_rebalance_latency_total_count_and_last_seconds_ago(metrics: Metrics, clock: FakeClock) -> None:
    rm = RebalanceMetrics(metrics)
    assert coord(metrics, "last-rebalance-seconds-ago") == -1.0
    assert math.isnan(coord(metrics, "rebalance-latency-avg"))
    rm.rebalance_started(1_000)
    assert rm.rebalance_in_progress
    rm.rebalance_completed(1_400)
    rm.rebalance_started(5_000)
    rm.rebalance_completed(5_800)
    assert not rm.rebalance_in_progress
    assert coord(metrics, "rebalance-latency-avg") == 600.0
    assert coord(metrics, "rebalance-latency-max") == 800.0
    assert coord(metrics, "rebalance-latency-total") == 1_200.0
    assert coord(metrics, "rebalance-total") == 2.0
    clock.advance(5_800)  # now == the last completion
    assert coord(metrics, "last-rebalance-seconds-ago") == 0.0
    clock.advance(2_999)
    assert coord(metrics, "last-rebalance-seconds-ago") == 2.0  # whole seconds, truncated
    clock.advance(1)
    assert coord(metrics, "last-rebalance-seconds-ago") == 3.0


def test_rebalance_rate_per_hour(metrics: Metrics, clock: FakeClock) -> None:
    rm = RebalanceMetrics(metrics)
    for t in (0, 100, 200):
        rm.rebalance_started(t)
        rm.rebalance_completed(t + 50)
    clock.advance(250)
    # 3 rebalances; the window opened at t=50: 200 ms elapsed plus one padding window of 30 s
    assert coord(metrics, "rebalance-rate-per-hour") == pytest.approx(3 / (30_200 / 3_600_000))
    clock.advance(120_000)
    assert coord(metrics, "rebalance-rate-per-hour") == 0.0
    assert coord(metrics, "rebalance-total") == 3.0  # cumulative


def test_second_start_keeps_the_first(metrics: Metrics) -> None:
    rm = RebalanceMetrics(metrics)
    rm.rebalance_started(1_000)
    rm.rebalance_started(1_500)  # e.g. a new target assignment while still reconciling
    rm.rebalance_completed(2_000)
    assert coord(metrics, "rebalance-latency-max") == 1_000.0


def test_completion_without_start_only_stamps_the_time(metrics: Metrics, clock: FakeClock) -> None:
    rm = RebalanceMetrics(metrics)
    rm.rebalance_completed(0)
    assert coord(metrics, "rebalance-total") == 0.0
    assert rm.last_rebalance_end_ms == 0
    clock.advance(4_000)
    assert coord(metrics, "last-rebalance-seconds-ago") == 4.0


def test_failed_rebalance_counts_and_clears_the_start(metrics: Metrics, clock: FakeClock) -> None:
    rm = RebalanceMetrics(metrics)
    rm.rebalance_started(0)
    rm.rebalance_failed(300)
    clock.advance(300)
    assert not rm.rebalance_in_progress
    assert coord(metrics, "failed-rebalance-total") == 1.0
    assert coord(metrics, "failed-rebalance-rate-per-hour") == pytest.approx(1 / (30_000 / 3_600_000))
    assert coord(metrics, "rebalance-total") == 0.0
    assert coord(metrics, "last-rebalance-seconds-ago") == -1.0
    rm.rebalance_started(1_000)  # the retry
    rm.rebalance_completed(1_250)
    assert coord(metrics, "rebalance-latency-max") == 250.0  # measured from the retry's start


@pytest.mark.parametrize(
    ("kind", "word"),
    [
        (CallbackKind.REVOKE, "revoked"),
        (CallbackKind.ASSIGN, "assigned"),
        (CallbackKind.LOST, "lost"),
        ("revoked", "revoked"),
        ("assigned", "assigned"),
        ("lost", "lost"),
    ],
)
def test_callback_latency_and_kip429_aliases(metrics: Metrics, kind: CallbackKind | str, word: str) -> None:
    rm = RebalanceMetrics(metrics)
    rm.record_callback(kind, 4)
    rm.record_callback(kind, 10)
    assert coord(metrics, f"partition-{word}-latency-avg") == 7.0
    assert coord(metrics, f"partition-{word}-latency-max") == 10.0
    assert coord(metrics, f"partitions-{word}-latency-avg") == 7.0
    assert coord(metrics, f"partitions-{word}-latency-max") == 10.0
    others = {"revoked", "assigned", "lost"} - {word}
    assert all(math.isnan(coord(metrics, f"partition-{o}-latency-avg")) for o in others)


def test_unknown_callback_kind(metrics: Metrics) -> None:
    with pytest.raises(ValueError, match="revoked, assigned, lost"):
        RebalanceMetrics(metrics).record_callback("moved", 1)


def test_commit_metrics(metrics: Metrics, clock: FakeClock) -> None:
    rm = RebalanceMetrics(metrics)
    rm.record_commit(5)
    rm.record_commit(15)
    rm.record_commit(10)
    assert coord(metrics, "commit-latency-avg") == 10.0
    assert coord(metrics, "commit-latency-max") == 15.0
    assert coord(metrics, "commit-total") == 3.0
    assert coord(metrics, "commit-rate") == pytest.approx(3 / 30)
    clock.advance(60_000)
    assert coord(metrics, "commit-rate") == 0.0
    assert coord(metrics, "commit-total") == 3.0


def test_assigned_partitions_gauge(metrics: Metrics) -> None:
    owned = {"t-0", "t-1"}
    rm = RebalanceMetrics(metrics, assigned_partitions=lambda: len(owned))
    assert coord(metrics, "assigned-partitions") == 2.0
    owned.add("t-2")
    assert coord(metrics, "assigned-partitions") == 3.0
    rm.set_assigned_partitions_source(lambda: 0)
    assert coord(metrics, "assigned-partitions") == 0.0


def test_default_assigned_partitions_is_zero(metrics: Metrics) -> None:
    RebalanceMetrics(metrics)
    assert coord(metrics, "assigned-partitions") == 0.0


# ---------------------------------------------------------------------------------------------------------
# consumer-fetch-manager-metrics
# ---------------------------------------------------------------------------------------------------------


def fetch(metrics: Metrics, name: str) -> float:
    return metrics.value(name, FETCH_MANAGER_METRICS_GROUP)


def test_fetch_metrics(metrics: Metrics, clock: FakeClock) -> None:
    fm = FetchMetrics(metrics)
    fm.record_fetch(num_bytes=10_000, records=100, latency_ms=20)
    fm.record_fetch(num_bytes=5_000, records=50, latency_ms=40)
    fm.record_fetch_latency(60)
    tp = TopicPartition("orders.eu", 0)
    fm.record_consumed(tp, 100, 10_000)
    fm.record_consumed(TopicPartition("other", 1), 40, 4_000)
    fm.record_consumed(None, 10, 1_000)
    fm.record_lag(7)
    fm.record_lag(3)
    assert fetch(metrics, "fetch-latency-avg") == 40.0
    assert fetch(metrics, "fetch-latency-max") == 60.0
    assert fetch(metrics, "fetch-total") == 3.0
    assert fetch(metrics, "fetch-rate") == pytest.approx(3 / 30)
    assert fetch(metrics, "fetch-size-avg") == 7_500.0
    assert fetch(metrics, "fetch-size-max") == 10_000.0
    assert fetch(metrics, "records-per-request-avg") == 75.0
    assert fetch(metrics, "records-consumed-total") == 150.0
    assert fetch(metrics, "records-consumed-rate") == pytest.approx(150 / 30)
    assert fetch(metrics, "bytes-consumed-total") == 15_000.0
    assert fetch(metrics, "bytes-consumed-rate") == pytest.approx(15_000 / 30)
    # per topic, tagged like Java (dots replaced by underscores)
    topic_tags = {"topic": "orders_eu"}
    assert metrics.value("records-consumed-total", FETCH_MANAGER_METRICS_GROUP, topic_tags) == 100.0
    assert metrics.value("bytes-consumed-total", FETCH_MANAGER_METRICS_GROUP, topic_tags) == 10_000.0
    assert metrics.value("records-consumed-total", FETCH_MANAGER_METRICS_GROUP, {"topic": "other"}) == 40.0
    assert metrics.as_dict()["consumer-fetch-manager-metrics:records-consumed-rate{topic=orders_eu}"] == (
        pytest.approx(100 / 30)
    )
    assert fetch(metrics, "records-lag-max") == 7.0
    clock.advance(60_000)
    fm.record_lag(2)
    assert fetch(metrics, "records-lag-max") == 2.0  # the old maximum aged out
    assert fetch(metrics, "records-consumed-total") == 150.0


def test_coordinator_and_fetch_metrics_share_a_registry(metrics: Metrics) -> None:
    RebalanceMetrics(metrics)
    FetchMetrics(metrics)
    keys = metrics.as_dict()
    assert "consumer-coordinator-metrics:rebalance-total" in keys
    assert "consumer-fetch-manager-metrics:records-consumed-total" in keys


def test_client_id_tag_and_callable_clock() -> None:
    now = [5_000]
    m = Metrics(clock=lambda: now[0])
    rm = RebalanceMetrics(m, client_id="consumer-g-1")
    FetchMetrics(m, client_id="consumer-g-1")
    rm.rebalance_completed(5_000)
    now[0] = 9_000
    tags = {"client-id": "consumer-g-1"}
    assert m.value("last-rebalance-seconds-ago", COORDINATOR_METRICS_GROUP, tags) == 4.0
    assert all(dict(n.tags) == tags for n in m.snapshot())
    assert "consumer-coordinator-metrics:rebalance-total{client-id=consumer-g-1}" in m.as_dict()
