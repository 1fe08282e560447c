"""``handoff bench compare``'s report logic: medians per build, the ratios, callgrind totals (no broker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_handoff.bench.compare import Result, Side, callgrind_total, format_table, summarize

pytestmark = pytest.mark.unit

A, B = "this tree", "ref"


def _consume(side: str, round_no: int, seconds: float, cpu: float) -> Result:
    data = {"records": 1000, "value_bytes": 100_000, "startup_s": 0.5, "consume_s": seconds, "cpu_s": cpu,
            "peak_rss_mb": 50.0}  # fmt: skip
    return Result("consume-records", side, round_no, data)


def test_summary_takes_medians_per_build_and_ratios_this_over_ref() -> None:
    results = [
        _consume(A, 1, 0.001, 0.0002),
        _consume(A, 2, 0.002, 0.0004),
        _consume(A, 3, 0.004, 0.0003),
        _consume(B, 1, 0.004, 0.0006),
        _consume(B, 2, 0.004, 0.0006),
        _consume(B, 3, 0.004, 0.0006),
    ]
    [row] = summarize(results, [A, B])
    assert row[A]["runs"] == 3 and row[B]["runs"] == 3
    assert row[A]["records_per_s"] == pytest.approx(500_000)  # median of 1M, 500k, 250k
    assert row[A]["cpu_s_per_million"] == pytest.approx(0.3)
    assert row[B]["records_per_s"] == pytest.approx(250_000)
    assert row["ratio_records_per_s"] == pytest.approx(2.0)
    assert row["ratio_cpu_s_per_million"] == pytest.approx(0.5)
    table = format_table([row], [A, B])
    assert "records/s 2.00x" in table and "CPU/M 0.50x" in table


def test_a_build_without_the_api_is_reported_as_such_without_a_ratio() -> None:
    produce = {"records": 100, "value_bytes": 10_000, "seconds": 0.01, "cpu_s": 0.01, "peak_rss_mb": 40.0}
    results = [
        Result("produce-nowait", A, 1, produce),
        Result("produce-nowait", B, 1, error="ref: no send_nowait", unsupported=True),
    ]
    [row] = summarize(results, [A, B])
    assert row[B] == {"runs": 0, "errors": ["ref: no send_nowait"], "unsupported": True}
    assert "ratio_records_per_s" not in row
    table = format_table([row], [A, B])
    assert "not in this build" in table and "no ratio" in table


def test_callgrind_total_reads_the_summary_line(tmp_path: Path) -> None:
    out = tmp_path / "callgrind.out.1"
    out.write_text("version: 1\nevents: Ir\nfn=main\n1 5\nsummary: 123456789\ntotals: 123456789\n")
    assert callgrind_total(out) == 123456789


def test_the_ref_side_runs_the_runner_by_path_in_isolated_mode() -> None:
    ref = Side("ref", "/venv/bin/python", isolated=True)
    this = Side("this", "/usr/bin/python3", isolated=False)
    assert ref.command(["consume"])[:2] == ["/venv/bin/python", "-I"]
    assert ref.command(["consume"])[2].endswith("compare_runner.py")
    assert this.command(["consume"]) == [
        "/usr/bin/python3",
        "-m",
        "kafka_handoff.bench.compare_runner",
        "consume",
    ]
