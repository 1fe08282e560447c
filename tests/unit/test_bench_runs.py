"""What the benchmarks share (bench/runs.py, the runners' measured loop in bench/peers.py): no broker."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafka_handoff.bench.peers import _Meter, consume_loop, visit_records
from kafka_handoff.bench.runs import load_note, unknown_clients
from kafka_handoff.bench.throughput import Sample, sample_line

pytestmark = pytest.mark.unit


class _Rec:
    def __init__(self, value: bytes) -> None:
        self.value = value


def test_consume_loop_counts_until_the_records_came_then_finishes_stops_and_closes() -> None:
    batches: list[list[_Rec]] = [[], [_Rec(b"ab"), _Rec(b"c")], [], [_Rec(b"defg")], [_Rec(b"never")]]
    calls: list[str] = []
    m = _Meter(3)
    m.start()

    def poll() -> list[_Rec]:
        calls.append("poll")
        return batches.pop(0)

    result = consume_loop(
        m,
        time.monotonic() + 60,
        poll,
        visit_records,
        close=lambda: calls.append("close"),
        finish=lambda: calls.append(f"finish done={m.t_end != 0.0}"),
    )
    assert result is m
    assert (m.count, m.value_bytes) == (3, 7)
    assert calls == ["poll"] * 4 + ["finish done=False", "close"]  # the 5th batch is never polled
    assert m.t_first > 0 and m.t_end >= m.t_first  # the first record's time is taken at the first batch


def test_consume_loop_closes_the_consumer_when_a_record_fails_the_run() -> None:
    closed: list[bool] = []

    def visit(batch: Any) -> tuple[int, int]:
        raise RuntimeError("confluent-kafka: broker down")

    with pytest.raises(RuntimeError, match="broker down"):
        consume_loop(_Meter(1), time.monotonic() + 60, lambda: [1], visit, close=lambda: closed.append(True))
    assert closed == [True]


def test_consume_loop_gives_up_at_the_deadline() -> None:
    m = _Meter(10)
    consume_loop(m, time.monotonic() - 1, lambda: [_Rec(b"x")], visit_records, close=lambda: None)
    assert m.count == 0 and m.t_first == 0.0


def test_unknown_clients_names_them_and_the_allowed_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert not unknown_clients(["a"], {"a": 1, "b": 2})
    assert capsys.readouterr().err == ""
    assert unknown_clients(["a", "x", "y"], {"a": 1, "b": 2}, "share client")
    assert capsys.readouterr().err == "error: unknown share client(s) x, y (allowed: a, b)\n"


def test_load_note_and_sample_line() -> None:
    env = {
        "cpus": 2,
        "load_avg_start": (1.25, 0, 0),
        "load_avg_end": (3.0, 0, 0),
        "broker": "Apache Kafka 4.3.1",
    }
    assert load_note(env) == "2 CPUs, load 1.2-3.0; Apache Kafka 4.3.1 on loopback"
    ok = Sample("c", "C", 2_000_000, 200_000_000, 2.0, 1.0, 1.5, 80.0, 0.3, 1.5)
    assert sample_line("round 1/3 c", ok) == (
        "round 1/3 c   1,000,000 rec/s   100.0 MB/s  cpu/M  0.50 s  rss     80 MB  (load 1.5)"
    )
    failed = Sample("c", "C", 10, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, ok=False, error="exit 1")
    assert sample_line("round 2/3 c", failed) == "round 2/3 c FAILED: exit 1"
