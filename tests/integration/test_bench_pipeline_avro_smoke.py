"""A tiny run of ``handoff bench pipeline --format avro``: registry-framed Avro events (the real registry
of the ``schema_registry`` fixture), read by kafka-handoff's ``parse_avro`` and by Spark's Kafka source with
``from_avro``; both engines read every record and reject the same malformed ones.

Speed is not asserted.  Needs Spark's Kafka source and spark-avro from Maven Central the first time (then
Ivy's cache under ``~/.cache/kafka-handoff/ivy``); skipped when they cannot be had.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def registry_url(schema_registry: str) -> str:
    """The real registry's URL (tests/conftest.py's ``schema_registry``: Apicurio Registry started by the
    project's tooling, or $HANDOFF_SCHEMA_REGISTRY_URL)."""
    return schema_registry


def test_pipeline_bench_avro_reports_both_engines(broker: Any, tmp_path: Path, registry_url: str) -> None:
    from kafka_handoff.bench.pipeline import spark_kafka_jars

    try:
        spark_kafka_jars(avro=True)
    except OSError as exc:  # no cache and no network
        pytest.skip(f"Spark's Kafka source / spark-avro is not available: {exc}")
    events = 3000
    run = subprocess.run(
        [
            sys.executable, "-c", "import sys; from kafka_handoff.cli.main import main; sys.exit(main())",
            "bench", "pipeline", "--format", "avro", "--schema-registry", registry_url,
            "--bootstrap-servers", broker.bootstrap_servers,
            "--events", str(events), "--partitions", "2", "--out", str(tmp_path),
        ],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "from_avro(substring(value, 6, length(value) - 5))" in run.stdout
    data = json.loads((tmp_path / "pipeline.json").read_text())
    assert data["events"] == events and data["format"] == "avro"
    rows = {r["engine"]: r for r in data["results"]}
    assert set(rows) == {"kafka-handoff", "spark-kafka"}
    for engine, row in rows.items():
        assert row["error"] is None, engine
        assert row["records"] == events, engine
        assert row["records_per_s"] > 0, engine
    assert rows["kafka-handoff"]["detail"]["transform"] == "clickstream_avro:transform"
    assert "Confluent framing" in rows["spark-kafka"]["detail"]["value_decoding"]
    assert data["malformed_produced"] == rows["kafka-handoff"]["detail"]["malformed"]
    assert data["malformed_produced"] == rows["spark-kafka"]["detail"]["malformed"]
