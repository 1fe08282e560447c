"""The pipeline on a Spark standalone cluster brought up from pyspark's own launcher.

The session's ``spark_standalone`` fixture (tests/conftest.py, :mod:`kafka_handoff.devbroker.spark`) runs a
master and two workers.  The pipeline worker process (``handoff pipeline run``) connects with
``spark.master = "spark://..."``; its Spark jobs run in executors the standalone workers launched.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff.pipeline import load_config
from kafka_handoff.pipeline import testing as pt
from kafka_handoff.pipeline.sinks import make_sink
from kafka_handoff.sample import generate_events

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


def test_pipeline_runs_on_a_standalone_cluster(
    broker: Any, topic_factory: Any, spark_standalone: Any, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(2, configs={"retention.ms": "-1"})
    events = generate_events(2000, seed=101, malformed_share=0.02, start_ms=time.time_ns() // 1_000_000)
    pt.produce(bootstrap, topic, events)
    cfg_path = pt.write_config_toml(
        tmp_path / "pipeline.toml",
        {
            "kafka": {"topics": [topic], "bootstrap.servers": bootstrap, "group.id": f"g-{topic}"},
            "batch": {"max_records": 1000, "max_interval_ms": 500},
            "spark": {"master": spark_standalone.url},
            "spark.conf": {"spark.executor.memory": "512m", "spark.cores.max": "1"},
            "transform": {"function": "kafka_handoff.pipeline.testing:records"},
            "sink": {"format": "parquet", "path": str(tmp_path / "out")},
        },
    )
    summary_path = tmp_path / "summary.json"
    log = tmp_path / "driver.log"
    proc = pt.start_worker_process(
        cfg_path, member="on-cluster", until_idle_s=5, summary_json=summary_path, log_path=log
    )
    try:
        assert proc.wait(300) == 0, log.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    summary = json.loads(summary_path.read_text())
    assert summary["records_committed"] == 2000
    sink = make_sink(load_config(cfg_path).sink)
    assert pt.exactly_once_report(pt.valid_event_ids(events), pt.output_event_ids(sink.read_table())) == ""
    # The jobs ran in an executor of a standalone worker (it made an application directory for it).
    if spark_standalone.directory is not None:
        assert list(Path(spark_standalone.directory).glob("worker-*/app-*")), "no executor was launched"
