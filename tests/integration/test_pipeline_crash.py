"""Crashes and shutdowns of worker *processes* (``handoff pipeline run``, each with its own Spark driver).

* A worker killed between its sink commit and its Kafka commit (the ``HANDOFF_PIPELINE_CRASH_AFTER_SINK``
  hook: ``os._exit`` right after the sink commit) and restarted: no row missing, none twice -- the restart
  resumes from the sink's marks, which are ahead of Kafka's committed offsets.
* SIGTERM: the worker finishes its running batch, commits, leaves the group and exits 0; a restart finishes
  the input exactly once.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff.consumer import Consumer
from kafka_handoff.pipeline import load_config
from kafka_handoff.pipeline import testing as pt
from kafka_handoff.pipeline.sinks import make_sink
from kafka_handoff.pipeline.worker import CRASH_ENV, CRASH_EXIT_CODE
from kafka_handoff.sample import generate_events
from kafka_handoff.types import TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.spark]

NO_RETENTION = {"retention.ms": "-1"}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def write_config(tmp_path: Path, bootstrap: str, topic: str, *, max_records: int) -> Path:
    return pt.write_config_toml(
        tmp_path / "pipeline.toml",
        {
            "kafka": {"topics": [topic], "bootstrap.servers": bootstrap, "group.id": f"g-{topic}"},
            "batch": {"max_records": max_records, "max_interval_ms": 500},
            "transform": {"function": "kafka_handoff.pipeline.testing:records"},
            "sink": {"format": "delta", "path": str(tmp_path / "out")},
            "spark": {"master": "local[1]"},
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


def test_crash_between_sink_commit_and_kafka_commit_then_restart(
    broker: Any, topic_factory: Any, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(3, configs=NO_RETENTION)
    events = generate_events(3000, seed=81, malformed_share=0.01, start_ms=now_ms())
    pt.produce(bootstrap, topic, events)
    cfg_path = write_config(tmp_path, bootstrap, topic, max_records=1000)
    config = load_config(cfg_path)
    sink = make_sink(config.sink)
    tps = [TopicPartition(topic, p) for p in range(3)]
    log = tmp_path / "worker.log"

    crashing = pt.start_worker_process(cfg_path, member="crasher", env={CRASH_ENV: "1"}, log_path=log)
    assert wait(crashing, 240, log) == CRASH_EXIT_CODE, log.read_text()[-4000:]
    assert f"{CRASH_ENV}: exiting after sink commit" in log.read_text()
    # The crash hit the window: the sink holds a batch whose offsets Kafka never got.
    marks = sink.read_marks(tps)
    kafka = committed(bootstrap, f"g-{topic}", tps)
    ahead = []
    for tp in tps:
        mark, offset = marks[tp], kafka[tp]
        if mark is not None and (offset is None or offset < mark):
            ahead.append(tp)
    assert ahead, (marks, kafka)
    written_before_restart = sink.read_table().num_rows
    assert written_before_restart > 0

    summary_path = tmp_path / "summary.json"
    restarted = pt.start_worker_process(
        cfg_path, member="restarted", until_idle_s=4, summary_json=summary_path, log_path=log
    )
    assert wait(restarted, 300, log) == 0, log.read_text()[-4000:]
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "idle"
    assert summary["records_committed"] < 3000  # it did not redo the crashed batch
    report = pt.exactly_once_report(pt.valid_event_ids(events), pt.output_event_ids(sink.read_table()))
    assert report == ""
    assert committed(bootstrap, f"g-{topic}", tps) == sink.read_marks(tps)


def test_sigterm_finishes_the_batch_and_leaves_then_a_restart_completes(
    broker: Any, topic_factory: Any, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(2, configs=NO_RETENTION)
    events = generate_events(6000, seed=91, malformed_share=0.01, start_ms=now_ms())
    pt.produce(bootstrap, topic, events)
    cfg_path = write_config(tmp_path, bootstrap, topic, max_records=500)
    config = load_config(cfg_path)
    sink = make_sink(config.sink)
    log = tmp_path / "worker.log"
    summary_path = tmp_path / "first.json"
    proc = pt.start_worker_process(cfg_path, member="first", summary_json=summary_path, log_path=log)
    deadline = time.monotonic() + 240
    while not sink.exists() or sink.read_table().num_rows == 0:  # wait for its first committed batch
        assert proc.poll() is None, log.read_text()[-4000:]
        assert time.monotonic() < deadline, log.read_text()[-4000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert wait(proc, 120, log) == 0, log.read_text()[-4000:]
    first = json.loads(summary_path.read_text())
    assert first["status"] == "stopped"
    assert 0 < first["records_committed"] < 6000
    assert first["batches_discarded"] == 0

    summary_path2 = tmp_path / "second.json"
    second = pt.start_worker_process(
        cfg_path, member="second", until_idle_s=4, summary_json=summary_path2, log_path=log
    )
    assert wait(second, 300, log) == 0, log.read_text()[-4000:]
    total = first["records_committed"] + json.loads(summary_path2.read_text())["records_committed"]
    assert total == 6000
    report = pt.exactly_once_report(pt.valid_event_ids(events), pt.output_event_ids(sink.read_table()))
    assert report == ""
