"""A tiny run of ``handoff bench pipeline``: both engines read every record, the JSON is sane.

Speed is not asserted (that is what the benchmark is for).  Needs Spark's Kafka source from Maven Central
the first time (then Ivy's cache under ``~/.cache/kafka-handoff/ivy``); skipped when it cannot be had.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


def test_pipeline_bench_reports_both_engines(broker: Any, tmp_path: Path) -> None:
    from kafka_handoff.bench.pipeline import spark_kafka_jars

    try:
        spark_kafka_jars()
    except OSError as exc:  # no cache and no network
        pytest.skip(f"Spark's Kafka source is not available: {exc}")
    events = 3000
    # Its own process: Spark's Kafka source is put on the classpath when the driver JVM starts, and an
    # earlier test module of this process may have started that JVM already.
    run = subprocess.run(
        [
            sys.executable, "-c", "import sys; from kafka_handoff.cli.main import main; sys.exit(main())",
            "bench", "pipeline", "--bootstrap-servers", broker.bootstrap_servers,
            "--events", str(events), "--partitions", "2", "--out", str(tmp_path),
        ],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads((tmp_path / "pipeline.json").read_text())
    assert data["events"] == events
    rows = {r["engine"]: r for r in data["results"]}
    assert set(rows) == {"kafka-handoff", "spark-kafka"}
    for engine, row in rows.items():
        assert row["error"] is None, engine
        assert row["records"] == events, engine
        assert row["records_per_s"] > 0, engine
        assert row["output_commits"] >= 1, engine
        assert 0 < row["latency_p50_ms"] <= row["latency_p99_ms"] <= row["wall_s"] * 1000 + 1, engine
    ours = rows["kafka-handoff"]["detail"]
    assert ours["handover"].startswith("Parquet files in "), ours  # a local Spark: the files handover
    # the same transform on the same data: the same number of malformed records rejected
    assert rows["kafka-handoff"]["detail"]["malformed"] == rows["spark-kafka"]["detail"]["malformed"]
    assert data["malformed_produced"] == rows["spark-kafka"]["detail"]["malformed"]
