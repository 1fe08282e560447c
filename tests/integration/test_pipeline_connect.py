"""The pipeline worker through Spark Connect: the connect server of the pyspark package
(:class:`kafka_handoff.devbroker.spark.SparkConnectServer`, its own ``local[1]`` Spark) and a worker with
``spark.remote = "sc://..."`` (driver mode: batches go over gRPC), once end to end, exactly once."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff.pipeline import testing as pt
from kafka_handoff.pipeline.config import parse_config
from kafka_handoff.pipeline.sinks import make_sink
from kafka_handoff.pipeline.worker import Worker
from kafka_handoff.sample import generate_events

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(autouse=True, scope="module")
def _keep_the_environment() -> Iterator[None]:
    """A Spark Connect session sets ``SPARK_CONNECT_MODE_ENABLED``/``SPARK_REMOTE`` in ``os.environ``: left
    there, every later classic session of this test process -- and every ``handoff pipeline run`` it starts
    -- fails at once (JAVA_GATEWAY_EXITED).  The environment is restored after the module."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="module")
def connect_server() -> Iterator[str]:
    pytest.importorskip("grpc")  # pyspark[connect]
    from kafka_handoff.devbroker.spark import SparkConnectServer

    server = SparkConnectServer(master="local[1]").start()
    try:
        yield server.url
    finally:
        server.stop()


def test_worker_runs_through_spark_connect(
    broker: Any, topic_factory: Any, connect_server: str, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(2, configs={"retention.ms": "-1"})
    events = generate_events(1200, seed=221, malformed_share=0.02, start_ms=time.time_ns() // 1_000_000)
    pt.produce(bootstrap, topic, events)
    config = parse_config(
        {
            "kafka": {"topics": [topic], "bootstrap.servers": bootstrap, "group.id": f"g-{topic}"},
            "batch": {"max_records": 600, "max_interval_ms": 500},
            "spark": {"remote": connect_server},
            "transform": {"function": "kafka_handoff.pipeline.testing:records"},
            "sink": {"format": "delta", "path": str(tmp_path / "out")},
        }
    )
    worker = Worker(config, max_records=1200, until_idle_s=120)
    summary = worker.run()
    assert summary.records_committed == 1200
    assert type(worker.spark).__module__.startswith("pyspark.sql.connect")  # it really went through Connect
    sink = make_sink(config.sink)
    assert pt.exactly_once_report(pt.valid_event_ids(events), pt.output_event_ids(sink.read_table())) == ""
