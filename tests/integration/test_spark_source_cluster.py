"""The ``kafka-handoff`` data source on a Spark standalone cluster (master + 2 workers, separate processes,
the session's ``spark_standalone`` fixture): the read runs in executor processes on the workers, with the
package they import from ``PYTHONPATH``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_spark_source import expected, produce, reader, rows

from kafka_handoff.spark import register

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture(scope="module")
def cluster_spark(spark_standalone: Any) -> Iterator[Any]:
    from kafka_handoff.pipeline.config import SparkConfig
    from kafka_handoff.pipeline.spark import build_session

    conf = {"spark.executor.memory": "512m", "spark.cores.max": "2"}
    session = build_session(
        SparkConfig(master=spark_standalone.url, app_name="handoff-source-cluster", conf=conf)
    )
    register(session)
    yield session
    session.stop()


def test_batch_read_on_executors_of_a_standalone_cluster(
    cluster_spark: Any, spark_standalone: Any, broker: Any, topic_factory: Any
) -> None:
    bs = broker.bootstrap_servers
    topic = topic_factory(partitions=4)
    sent = produce(bs, topic, 400, 4, headers=True)
    df = reader(cluster_spark, bs, subscribe=topic, minPartitions="8")
    assert df.rdd.getNumPartitions() == 8
    assert rows(df) == expected(sent)
    # the tasks ran in executor processes: their Python workers' process ids are not this process's
    pids = set(df.rdd.mapPartitions(lambda _it: [os.getpid()]).collect())
    assert os.getpid() not in pids
    if spark_standalone.directory is not None:
        assert list(Path(spark_standalone.directory).glob("worker-*/app-*")), "no executor was launched"
