"""The pure helpers of ``handoff bench pipeline``: record-weighted percentiles, Maven version choice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kafka_handoff.bench.pipeline import _best, _percentiles

pytestmark = pytest.mark.unit


def test_percentiles_are_weighted_by_records_per_commit() -> None:
    # 90 records visible at 1 s, 10 at 5 s: the median record waited 1 s, the 99th 5 s
    assert _percentiles([(5000.0, 10), (1000.0, 90)]) == (1000.0, 5000.0)
    assert _percentiles([(1000.0, 50), (2000.0, 50)]) == (1000.0, 2000.0)


def test_percentiles_ignore_empty_commits_and_handle_none() -> None:
    assert _percentiles([]) == (None, None)
    assert _percentiles([(3000.0, 0)]) == (None, None)
    assert _percentiles([(3000.0, 0), (4000.0, 7)]) == (4000.0, 4000.0)


def test_best_version_is_newest_release_not_after_wanted_in_same_major() -> None:
    available = ["3.5.4", "4.0.0", "4.1.1", "4.2.0", "4.10.0", "5.0.0"]
    assert _best(available, "4.3.0") == "4.2.0"
    assert _best(available, "4.2.0") == "4.2.0"
    assert _best(available, "4.11.0") == "4.10.0"
    assert _best(["3.5.4", "5.0.0"], "4.3.0") is None


def test_plot_and_table_show_every_engine_run(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="plots need the bench extra: pip install 'kafka-handoff[bench]'")
    from kafka_handoff.bench.pipeline import plot_pipeline, results_table

    def run(engine: str, limit: int | None, batches: list[tuple[float, int]]) -> dict[str, Any]:
        detail: dict[str, Any] = {"max_offsets_per_trigger": limit} if limit else {}
        return {
            "engine": engine, "records": sum(n for _, n in batches), "output_commits": len(batches),
            "wall_s": batches[-1][0], "records_per_s": 1.0, "latency_p50_ms": 1.0, "latency_p99_ms": 2.0,
            "detail": detail,
            "batches": [{"t_s": t, "records": n, "target": n, "reason": "full"} for t, n in batches],
        }  # fmt: skip

    data = {
        "mode": "backlog", "events": 300, "partitions": 2, "rate": None, "duration_s": None,
        "load_avg_start": (1.0, 1.0, 1.0), "load_avg_end": (2.0, 1.0, 1.0),
        "results": [run("kafka-handoff", None, [(1.0, 100), (2.0, 200)]),
                    run("spark-kafka", 100, [(1.5, 100), (3.0, 100), (4.5, 100)])],
    }  # fmt: skip
    png = tmp_path / "p.png"
    plot_pipeline(data, png)
    assert png.stat().st_size > 1000
    table = results_table(data, "t")
    assert table.row_count == 2
