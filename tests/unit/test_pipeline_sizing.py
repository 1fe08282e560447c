"""The adaptive batch-size policy (sans-I/O): growth under lag, the byte cap, the latency-sized batches once
caught up, and when a batch is cut -- driven by a fake clock (ages and durations passed in)."""

from __future__ import annotations

import pytest

from kafka_handoff.errors import ConfigError
from kafka_handoff.pipeline.config import parse_config
from kafka_handoff.pipeline.sizing import TAIL_WAIT_MS, BatchSizer, CutDecision

pytestmark = pytest.mark.unit

MB = 1024 * 1024


class FakeClock:
    def __init__(self) -> None:
        self.ms = 0.0

    def advance(self, ms: float) -> None:
        self.ms += ms


def sizer(**kw: int | bool) -> BatchSizer:
    args: dict[str, int | bool] = {
        "max_records": 500_000,
        "min_records": 1_000,
        "max_bytes": 256 * MB,
        "target_latency_ms": 1_000,
        "max_interval_ms": 2_000,
    }
    args.update(kw)
    return BatchSizer(**args)  # type: ignore[arg-type]


def test_grows_to_the_lag_up_to_max_records_while_there_is_a_backlog() -> None:
    s = sizer()
    assert s.target == 1_000
    s.observe_lag(120_000)
    assert s.target == 120_000 and s.mode == "backlog"
    s.observe_lag(2_000_000)
    assert s.target == 500_000  # batch.max_records stays the cap
    assert s.should_cut(499_999, age_ms=10, spark_free=True).cut is False  # backlog: fill the batch
    assert s.should_cut(500_000, age_ms=10, spark_free=True).reason == "full"
    s.observe_lag(1_500_000)
    s.batch_cut()
    assert s.target == 500_000  # still lagging: stays large


def test_the_target_counts_what_is_already_accumulated() -> None:
    s = sizer()
    s.observe_lag(10_000, accumulated=10_000)  # 20,000 available: one batch of 20,000, not two of 10,000
    assert s.target == 20_000
    assert s.should_cut(10_000, age_ms=5, spark_free=True).cut is False
    s.observe_lag(0, accumulated=20_000)
    assert s.should_cut(20_000, age_ms=5, spark_free=True).reason == "full"


def test_the_byte_bound_caps_the_batch() -> None:
    s = sizer(max_bytes=10 * MB)
    s.observe_batch(records=10_000, nbytes=10_000 * 200, process_s=0.5)  # 200 B per record
    assert s.bytes_per_record == 200
    s.observe_lag(10_000_000)
    assert s.cap == (10 * MB) // 200 and s.target == s.cap
    # bigger records on the next batch shrink the cap (a moving average)
    s.observe_batch(records=10_000, nbytes=10_000 * 600, process_s=0.5)
    assert s.bytes_per_record == 400
    assert s.target == (10 * MB) // 400


def test_caught_up_the_target_shrinks_to_meet_the_latency_target() -> None:
    clock = FakeClock()
    s = sizer(target_latency_ms=1_000)
    s.observe_lag(1_000_000)
    # Spark: 0.4 s fixed + 2 us per record (a fake cost: durations passed in, no wall clock)
    for n in (100_000, 400_000, 200_000):
        clock.advance(0.4 * 1000 + n * 0.002)
        s.observe_batch(records=n, nbytes=n * 250, process_s=0.4 + n * 2e-6)
    fixed, per_record = s.cost_model() or (0.0, 0.0)
    assert fixed == pytest.approx(0.4) and per_record == pytest.approx(2e-6)
    s.observe_lag(900)  # caught up: at most min_records wait
    assert s.batch_cut() == 300_000  # (1.0 s - 0.4 s) / 2 us
    assert s.mode == "caught-up"
    # caught up and Spark free: cut at once, whatever has accumulated
    assert s.should_cut(5, age_ms=0, spark_free=True).reason == "caught-up"
    # Spark busy: keep accumulating until the target or max_interval_ms
    assert s.should_cut(5, age_ms=1_999, spark_free=False).cut is False
    clock.advance(2_000)
    assert s.should_cut(5, age_ms=clock.ms, spark_free=False).reason == "interval"


def test_a_backlog_left_after_a_cut_keeps_the_large_target() -> None:
    s = sizer()
    s.observe_batch(records=50_000, nbytes=50_000 * 250, process_s=2.0)  # 40 us/record -> 25,000 in 1 s
    s.observe_lag(40_000)
    assert s.mode == "backlog" and s.target == 40_000
    s.observe_lag(39_000)
    s.batch_cut()
    assert s.target == 40_000 and s.mode == "backlog"
    s.observe_lag(10)
    s.batch_cut()
    assert s.target == pytest.approx(25_000, abs=1) and s.mode == "caught-up"


def test_never_below_min_records_even_when_spark_is_slow() -> None:
    s = sizer(min_records=5_000, target_latency_ms=100)
    s.observe_batch(records=10_000, nbytes=1, process_s=5.0)
    s.observe_lag(0)
    assert s.batch_cut() == 5_000


def test_not_adaptive_is_the_fixed_size_behaviour() -> None:
    s = sizer(adaptive=False, max_records=50_000)
    s.observe_lag(10_000_000)
    assert s.target == 50_000 and s.batch_cut() == 50_000
    assert s.should_cut(10, age_ms=0, spark_free=True).cut is False  # no early cut when caught up
    assert s.should_cut(50_000, age_ms=0, spark_free=True).cut is True


def test_unknown_lag_is_not_a_backlog() -> None:
    s = sizer()
    s.observe_lag(None)
    assert not s.backlog and s.should_cut(1, age_ms=0, spark_free=True).cut


BASE = {
    "kafka": {"topics": ["ev"], "bootstrap.servers": "h:1", "group.id": "g"},
    "transform": {"function": "m:f"},
    "sink": {"path": "/tmp/x"},
}


def test_batch_config_defaults_and_validation() -> None:
    b = parse_config(BASE).batch
    assert (b.adaptive, b.overlap, b.max_records, b.min_records, b.max_bytes, b.target_latency_ms) == (
        True, True, 500_000, 1_000, 128 * MB, 1_000)  # fmt: skip
    b = parse_config({**BASE, "batch": {"max_records": 500}}).batch
    assert b.min_records == 500  # the default floor follows a smaller cap
    for batch, needle in (
        ({"adaptive": "yes"}, "batch.adaptive: 'yes' is not allowed (allowed: true, false)"),
        ({"overlap": 1}, "batch.overlap: 1 is not allowed (allowed: true, false)"),
        ({"max_bytes": 10}, "batch.max_bytes: expected an integer >= 1048576, got 10"),
        ({"target_latency_ms": 0}, "batch.target_latency_ms: expected an integer >= 1"),
        ({"min_records": 10, "max_records": 5}, "batch.min_records: expected an integer <= batch.max_rec"),
        ({"max_recs": 5}, "batch.max_recs: unknown key (allowed: adaptive, max_records, min_records"),
    ):
        with pytest.raises(ConfigError) as info:
            parse_config({**BASE, "batch": batch})
        assert needle in str(info.value)


def test_a_live_streams_lag_below_the_latency_size_is_not_a_backlog() -> None:
    s = sizer(target_latency_ms=1_000)
    s.observe_lag(5_000)
    assert s.backlog  # before any batch: anything above min_records
    s.observe_batch(records=100_000, nbytes=1, process_s=2.0)  # 20 us/record: 50,000 within 1 s
    s.observe_lag(20_000, accumulated=30_000)  # 1 s of a 20k/s stream between fetches
    assert not s.backlog and s.backlog_threshold == 50_000
    s.batch_cut()
    assert s.mode == "caught-up" and s.target == 50_000
    s.observe_lag(60_000)
    assert s.backlog and s.target == 60_000


def test_a_free_spark_waits_briefly_for_the_last_few_records_of_a_backlog() -> None:
    s = sizer(target_latency_ms=1_000)
    s.observe_lag(1_000_000)  # a backlog: the target grows to the cap
    s.observe_batch(records=500_000, nbytes=1, process_s=1.0)  # 2 us/record: 500,000 within 1 s
    assert s.target == 500_000
    s.observe_lag(1_305, accumulated=489_259)  # the tail of a backlog is still being fetched
    assert not s.backlog
    clock = FakeClock()
    assert s.should_cut(489_259, age_ms=300, spark_free=True, free_ms=clock.ms) == CutDecision(False, "tail")
    clock.advance(TAIL_WAIT_MS - 1)
    assert not s.should_cut(489_259, age_ms=400, spark_free=True, free_ms=clock.ms).cut
    clock.advance(1)  # it did not come in time: no longer held back
    assert s.should_cut(489_259, age_ms=400, spark_free=True, free_ms=clock.ms).reason == "caught-up"
    s.observe_lag(0, accumulated=490_564)  # it came: cut with it
    assert s.should_cut(490_564, age_ms=350, spark_free=True, free_ms=50).reason == "caught-up"


def test_a_live_streams_lag_is_no_tail_to_wait_for() -> None:
    s = sizer(target_latency_ms=1_000)
    s.observe_batch(records=500_000, nbytes=1, process_s=1.0)
    s.batch_cut()  # caught up: the target is what Spark does within 1 s
    assert s.target == 500_000
    s.observe_lag(300, accumulated=8_000)  # 3.75% of the batch: a stream keeps coming, do not wait
    assert s.should_cut(8_000, age_ms=100, spark_free=True, free_ms=0).reason == "caught-up"
    s.observe_lag(60, accumulated=8_000)
    assert s.should_cut(8_000, age_ms=100, spark_free=False, free_ms=0) == CutDecision(False, "wait")
    # No room for the tail in the target: cut now.
    t = sizer(target_latency_ms=1_000, max_records=10_000, min_records=100)
    t.observe_batch(records=10_000, nbytes=1, process_s=0.01)
    t.batch_cut()
    assert t.target == 10_000
    t.observe_lag(90, accumulated=9_950)
    assert t.should_cut(9_950, age_ms=100, spark_free=True, free_ms=0).reason == "caught-up"
