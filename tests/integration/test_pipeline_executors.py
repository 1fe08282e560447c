"""Exactly-once in executors mode on a Spark standalone cluster (master + 2 workers, the session's
``spark_standalone``): the worker process is the group member, Spark tasks on the cluster's executors read
its offset ranges from Kafka and write the sink's data files, the worker commits them with the marks.

* a worker killed between its sink commit and its Kafka commit, then restarted: every valid event once
  (Delta sink: data files written by the executors, committed by delta-rs with the marks);
* scale 1 -> 2 workers (each its own Spark application on the cluster): the second joins mid-stream, takes
  partitions (KIP-848), both commit; every valid event once (Parquet sink).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff.admin import AdminClient
from kafka_handoff.consumer import Consumer
from kafka_handoff.pipeline import load_config
from kafka_handoff.pipeline import testing as pt
from kafka_handoff.pipeline.sinks import make_sink
from kafka_handoff.pipeline.worker import CRASH_ENV, CRASH_EXIT_CODE
from kafka_handoff.sample import generate_events
from kafka_handoff.types import TopicPartition

# Two Spark applications (a crashed worker and its restart; two workers) each start a driver and executors on
# the cluster: on a 2-core machine shared with other jobs a test can take longer than the default 600 s.
pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1800)]

NO_RETENTION = {"retention.ms": "-1"}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def write_config(tmp_path: Path, bootstrap: str, topic: str, master: str, sink: dict[str, str]) -> Path:
    return pt.write_config_toml(
        tmp_path / "pipeline.toml",
        {
            "kafka": {"topics": [topic], "bootstrap.servers": bootstrap, "group.id": f"g-{topic}"},
            "batch": {"max_records": 1000, "max_interval_ms": 500},
            "spark": {"master": master, "read_on": "executors"},
            # Two applications share the cluster's two cores: one core and a small executor each.
            "spark.conf": {
                "spark.executor.memory": "512m",
                "spark.cores.max": "1",
                "spark.driver.memory": "1g",
            },
            "transform": {"function": "kafka_handoff.pipeline.testing:records"},
            "sink": sink,
        },
    )


def committed(bootstrap: str, group: str, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = consumer.committed(tps, timeout=30)
    finally:
        consumer.close()
    return {tp: (om.offset if om is not None else None) for tp, om in got.items()}


def wait(proc: Any, timeout: float, log: Path) -> int:
    try:
        return int(proc.wait(timeout))
    except Exception:
        proc.kill()
        proc.wait(10)
        raise AssertionError(
            f"worker did not exit within {timeout}s; log:\n{log.read_text()[-4000:]}"
        ) from None


def test_executors_crash_between_sink_and_kafka_commit_then_restart(
    broker: Any, topic_factory: Any, spark_standalone: Any, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(3, configs=NO_RETENTION)
    events = generate_events(3000, seed=181, malformed_share=0.01, start_ms=now_ms())
    pt.produce(bootstrap, topic, events)
    out = tmp_path / "out"
    cfg_path = write_config(
        tmp_path, bootstrap, topic, spark_standalone.url, {"format": "delta", "path": str(out)}
    )
    sink = make_sink(load_config(cfg_path).sink)
    tps = [TopicPartition(topic, p) for p in range(3)]
    log = tmp_path / "worker.log"

    crashing = pt.start_worker_process(cfg_path, member="crasher", env={CRASH_ENV: "1"}, log_path=log)
    assert wait(crashing, 600, log) == CRASH_EXIT_CODE, log.read_text()[-4000:]
    marks = sink.read_marks(tps)
    kafka = committed(bootstrap, f"g-{topic}", tps)
    ahead = [tp for tp, m in marks.items() if m is not None and ((k := kafka[tp]) is None or k < m)]
    assert ahead, (marks, kafka)
    assert sink.read_table().num_rows > 0
    # The data files came from the executors (staged under the table), not from a collected Arrow table.
    assert list(out.glob("_handoff-*/*.parquet")), sorted(p.name for p in out.iterdir())

    summary_path = tmp_path / "summary.json"
    restarted = pt.start_worker_process(
        cfg_path, member="restarted", until_idle_s=6, summary_json=summary_path, log_path=log
    )
    assert wait(restarted, 600, log) == 0, log.read_text()[-4000:]
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "idle"
    assert summary["records_committed"] < 3000  # it did not redo the crashed batch
    report = pt.exactly_once_report(pt.valid_event_ids(events), pt.output_event_ids(sink.read_table()))
    assert report == ""
    assert committed(bootstrap, f"g-{topic}", tps) == sink.read_marks(tps)
    # Kafka's offsets and the marks are the ends of the ranges the tasks read: the log's end.
    with Consumer({"bootstrap.servers": bootstrap}) as c:
        assert sink.read_marks(tps) == c.end_offsets(tps, timeout=30)


def member_owns_partitions(bootstrap: str, group: str, client_id: str) -> bool:
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        try:
            description = admin.describe_groups([group], timeout=30)[group]
        except Exception:
            return False
    return any(m.client_id == client_id and m.assignment for m in description.members)


def test_executors_scale_from_one_worker_to_two(
    broker: Any, topic_factory: Any, spark_standalone: Any, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(4, configs=NO_RETENTION)
    first = generate_events(3000, seed=191, malformed_share=0.01, start_ms=now_ms())
    pt.produce(bootstrap, topic, first)
    cfg_path = write_config(
        tmp_path, bootstrap, topic, spark_standalone.url, {"format": "parquet", "path": str(tmp_path / "out")}
    )
    sink = make_sink(load_config(cfg_path).sink)
    log = tmp_path / "workers.log"
    w1 = pt.start_worker_process(cfg_path, member="w1", summary_json=tmp_path / "w1.json", log_path=log)
    procs = [w1]
    try:
        deadline = time.monotonic() + 1500
        while not sink.exists():  # w1's first batch is committed
            assert w1.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.5)
        w2 = pt.start_worker_process(
            cfg_path, member="w2", until_idle_s=10, summary_json=tmp_path / "w2.json", log_path=log
        )
        procs.append(w2)
        while not member_owns_partitions(bootstrap, f"g-{topic}", "handoff-pipeline-w2"):
            assert w2.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(1)
        second = generate_events(3000, seed=192, malformed_share=0.01, start_ms=now_ms())
        pt.produce(bootstrap, topic, second)
        truth = pt.valid_event_ids(first + second)
        while len(sink.read_table(columns=["event_id"])) < sum(truth.values()):  # both wrote theirs
            assert w1.poll() is None and w2.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline + 900, log.read_text()[-4000:]
            time.sleep(1)
        w1.send_signal(signal.SIGTERM)
        assert wait(w1, 600, log) == 0, log.read_text()[-4000:]
        assert wait(w2, 600, log) == 0, log.read_text()[-4000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    s1, s2 = (json.loads((tmp_path / f"w{i}.json").read_text()) for i in (1, 2))
    assert s1["records_committed"] > 0 and s2["records_committed"] > 0, (s1, s2)
    assert s1["records_committed"] + s2["records_committed"] == 6000
    assert pt.exactly_once_report(truth, pt.output_event_ids(sink.read_table())) == ""
