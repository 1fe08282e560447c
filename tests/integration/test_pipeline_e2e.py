"""The pipeline against the real broker and a real local Spark (one SparkSession for the module).

Each test produces a few thousand ``produce-sample`` events (event times = now, topics without retention)
and compares the output table with the ground truth computed from the generated events: the clickstream
page-view counts, or -- with the ``records`` transform -- every well-formed event exactly once.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from oracle_helpers import read_confluent

from kafka_handoff.consumer import Consumer
from kafka_handoff.pipeline import (
    MalformedRecordError,
    PipelineError,
    TransformError,
    load_config,
    run_worker,
)
from kafka_handoff.pipeline import testing as pt
from kafka_handoff.pipeline.show import aggregate, read_output
from kafka_handoff.pipeline.sinks import MarkUpdate, make_sink
from kafka_handoff.pipeline.worker import Worker
from kafka_handoff.sample import generate_events
from kafka_handoff.types import TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.spark]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clickstream.toml"
NO_RETENTION = {"retention.ms": "-1"}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: (om.offset if om is not None else None) for tp, om in got.items()}


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap})
    try:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: off for tp, off in ends.items()}


# ------------------------------------------------------------------------------------------------ e2e
def test_clickstream_example_matches_ground_truth(
    broker: Any, topic_factory: Any, spark: Any, tmp_path: Path
) -> None:
    """examples/clickstream.toml end to end (KIP-848 group, Delta sink, dead-letter table): the merged
    page views per page per minute equal the counts from the generated events; every malformed record is
    in the dead-letter table once; Kafka's committed offsets reach the end of every partition."""
    topic = topic_factory(4, configs=NO_RETENTION)
    events = generate_events(3000, seed=11, malformed_share=0.03, start_ms=now_ms())
    pt.produce(broker.bootstrap_servers, topic, events)
    config = load_config(
        EXAMPLE,
        [
            f"kafka.bootstrap.servers={broker.bootstrap_servers}",
            f'kafka.topics=["{topic}"]',
            f"kafka.group.id=g-{topic}",
            f"sink.path={tmp_path / 'out'}",
            f"errors.dead_letter_path={tmp_path / 'dead'}",
            "batch.max_records=1000",
            "batch.max_interval_ms=500",
        ],
    )
    summary = run_worker(config, spark=spark, until_idle_s=3)
    assert summary.status == "idle"
    assert summary.records_committed == 3000

    merged = aggregate(read_output(config), config.show)
    got = {(row["page"], int(row["minute"].timestamp() * 1000)): row["views"] for row in merged.to_pylist()}
    assert got == dict(pt.page_views(events))

    dead = read_output(config, dead_letter=True)
    malformed = [e for e in events if e.malformed]
    assert Counter(dead.column("value").to_pylist()) == Counter(e.value for e in malformed)
    assert summary.malformed == summary.dead_lettered == len(malformed)
    assert set(dead.column("error").to_pylist()) <= {
        "invalid JSON (not an object matching the schema)",
        *(f"missing required field(s): {f}" for f in ("user", "page", "timestamp", "event_id")),
    }
    assert committed(broker.bootstrap_servers, f"g-{topic}", topic, 4) == end_offsets(
        broker.bootstrap_servers, topic, 4
    )
    assert summary.latency_p50_ms is not None and summary.records_per_s > 0


@pytest.mark.parametrize(("sink_format", "protocol"), [("parquet", "classic"), ("delta", "consumer")])
def test_stop_and_restart_is_exactly_once(
    broker: Any, topic_factory: Any, spark: Any, tmp_path: Path, sink_format: str, protocol: str
) -> None:
    """A worker stops after ~half the input; more input arrives; a new worker finishes: every well-formed
    event is in the output exactly once (the second run resumes from the committed offsets / marks)."""
    topic = topic_factory(3, configs=NO_RETENTION)
    first = generate_events(2400, seed=21, malformed_share=0.02, start_ms=now_ms())
    pt.produce(broker.bootstrap_servers, topic, first)
    config = pt.pipeline_config(
        broker.bootstrap_servers,
        topic,
        f"g-{topic}",
        str(tmp_path / "out"),
        sink_format=sink_format,
        protocol=protocol,
        max_records=500,
    )
    one = run_worker(config, spark=spark, max_records=1000)
    assert one.status == "max-records"
    assert 1000 <= one.records_committed < 2400
    second = generate_events(1200, seed=22, malformed_share=0.02, start_ms=now_ms())
    pt.produce(broker.bootstrap_servers, topic, second)
    two = run_worker(config, spark=spark, until_idle_s=3)
    assert one.records_committed + two.records_committed == 3600
    out = make_sink(config.sink).read_table()
    report = pt.exactly_once_report(pt.valid_event_ids(first + second), pt.output_event_ids(out))
    assert report == ""
    assert committed(broker.bootstrap_servers, f"g-{topic}", topic, 3) == end_offsets(
        broker.bootstrap_servers, topic, 3
    )


def test_a_conflicting_commit_discards_the_batch_and_resumes_from_the_sink_mark(
    broker: Any, topic_factory: Any, spark: Any, tmp_path: Path
) -> None:
    """Another member commits partition 0 up to offset 100 while this worker's first batch runs (as a
    zombie or a new owner would): the batch is rejected by the conditional commit, partition 0 resumes at
    100, and the output holds every other record exactly once and nothing of partition 0 below 100."""
    topic = topic_factory(2, configs=NO_RETENTION)
    events = generate_events(1500, seed=31, malformed_share=0.0, start_ms=now_ms())
    pt.produce(broker.bootstrap_servers, topic, events)
    config = pt.pipeline_config(
        broker.bootstrap_servers,
        topic,
        f"g-{topic}",
        str(tmp_path / "out"),
        function="kafka_handoff.pipeline.testing:records_with_conflict",
        max_records=5000,
    )
    sink = make_sink(config.sink)
    p0 = TopicPartition(topic, 0)
    import pyarrow as pa

    empty = pa.table(
        {
            "event_id": pa.array([], pa.string()),
            "page": pa.array([], pa.string()),
            "action": pa.array([], pa.string()),
            "src_topic": pa.array([], pa.string()),
            "src_partition": pa.array([], pa.int32()),
            "src_offset": pa.array([], pa.int64()),
        }
    )
    pt.CONFLICT_HOOK.append(lambda: sink.commit(empty, {p0: MarkUpdate(None, 100)}))
    try:
        summary = run_worker(config, spark=spark, until_idle_s=3)
    finally:
        pt.CONFLICT_HOOK.clear()
    assert summary.mark_conflicts == 1
    out = sink.read_table()
    pairs = Counter(
        zip(out.column("src_partition").to_pylist(), out.column("src_offset").to_pylist(), strict=True)
    )
    assert max(pairs.values()) == 1
    ends = end_offsets(broker.bootstrap_servers, topic, 2)
    expected = {(0, o) for o in range(100, ends[0])} | {(1, o) for o in range(ends[1])}
    assert set(pairs) == expected
    assert sink.read_marks([p0]) == {p0: ends[0]}


# ------------------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    ("function", "needle"),
    [
        ("kafka_handoff.pipeline.testing:failing", "the transform failed on purpose"),
        ("kafka_handoff.pipeline.testing:failing_in_spark", "failed while Spark computed"),
    ],
)
def test_a_failing_transform_names_the_batch_and_commits_nothing(
    broker: Any, topic_factory: Any, spark: Any, tmp_path: Path, function: str, needle: str
) -> None:
    topic = topic_factory(2, configs=NO_RETENTION)
    pt.produce(broker.bootstrap_servers, topic, generate_events(400, seed=41, start_ms=now_ms()))
    config = pt.pipeline_config(
        broker.bootstrap_servers, topic, f"g-{topic}", str(tmp_path / "out"), function=function
    )
    worker = Worker(config, spark=spark, until_idle_s=3)
    with pytest.raises(TransformError) as info:
        worker.run()
    text = str(info.value)
    assert needle in text
    assert f"transform {function}" in text
    ends = end_offsets(broker.bootstrap_servers, topic, 2)
    for p in (0, 1):
        assert f"{topic}-{p} offsets 0..{ends[p] - 1}" in text
        assert info.value.ranges[TopicPartition(topic, p)] == (0, ends[p] - 1)
    assert not make_sink(config.sink).exists()
    assert committed(broker.bootstrap_servers, f"g-{topic}", topic, 2) == {0: None, 1: None}


def test_a_transform_that_cannot_be_imported_is_a_config_error(
    broker: Any, topic_factory: Any, spark: Any, tmp_path: Path
) -> None:
    from kafka_handoff.errors import ConfigError

    config = pt.pipeline_config(
        broker.bootstrap_servers, "unused", "g-unused", str(tmp_path / "out"), function="no_such_module:fn"
    )
    with pytest.raises(ConfigError, match=r"transform\.function: cannot import module 'no_such_module'"):
        Worker(config, spark=spark).run()


def test_malformed_fail_policy_stops_naming_the_records(
    broker: Any, topic_factory: Any, spark: Any, tmp_path: Path
) -> None:
    topic = topic_factory(1, configs=NO_RETENTION)
    events = generate_events(300, seed=51, malformed_share=0.05, start_ms=now_ms())
    pt.produce(broker.bootstrap_servers, topic, events)
    first_bad = next(i for i, e in enumerate(events) if e.malformed)  # one partition: index = offset
    config = pt.pipeline_config(
        broker.bootstrap_servers, topic, f"g-{topic}", str(tmp_path / "out"), malformed="fail"
    )
    with pytest.raises(MalformedRecordError) as info:
        Worker(config, spark=spark, until_idle_s=3).run()
    assert f"{topic}-0@{first_bad} (" in str(info.value)
    assert "errors.malformed = 'fail'" in str(info.value)
    assert not make_sink(config.sink).exists()
    assert committed(broker.bootstrap_servers, f"g-{topic}", topic, 1) == {0: None}


def test_malformed_skip_policy_counts_them(
    broker: Any, topic_factory: Any, spark: Any, tmp_path: Path
) -> None:
    topic = topic_factory(2, configs=NO_RETENTION)
    events = generate_events(600, seed=61, malformed_share=0.05, start_ms=now_ms())
    pt.produce(broker.bootstrap_servers, topic, events)
    config = pt.pipeline_config(
        broker.bootstrap_servers, topic, f"g-{topic}", str(tmp_path / "out"), malformed="skip"
    )
    summary = run_worker(config, spark=spark, until_idle_s=3)
    assert summary.malformed == sum(1 for e in events if e.malformed) > 0
    assert summary.dead_lettered == 0
    out = make_sink(config.sink).read_table()
    assert pt.exactly_once_report(pt.valid_event_ids(events), pt.output_event_ids(out)) == ""


def test_malformed_records_to_a_dead_letter_topic(
    broker: Any, topic_factory: Any, spark: Any, tmp_path: Path
) -> None:
    """Malformed records go to the dead-letter topic through the project's producer, with headers naming
    their source partition and offset and the error."""
    topic = topic_factory(2, configs=NO_RETENTION)
    dead_topic = topic_factory(1, configs=NO_RETENTION)
    events = generate_events(600, seed=71, malformed_share=0.05, start_ms=now_ms())
    pt.produce(broker.bootstrap_servers, topic, events)
    config = pt.pipeline_config(
        broker.bootstrap_servers,
        topic,
        f"g-{topic}",
        str(tmp_path / "out"),
        malformed="dead-letter-topic",
        dead_letter_topic=dead_topic,
    )
    summary = run_worker(config, spark=spark, until_idle_s=3)
    malformed = [e for e in events if e.malformed]
    assert summary.dead_lettered == len(malformed) > 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(dead_topic, 0)])
    got: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < len(malformed) and time.monotonic() < deadline:
            got.extend(consumer.poll(0.5))
    finally:
        consumer.close()
    assert Counter(r.value for r in got) == Counter(e.value for e in malformed)
    headers = dict(got[0].headers)
    assert headers["handoff.source.topic"] == topic.encode()
    assert {"handoff.source.partition", "handoff.source.offset", "handoff.error"} <= set(headers)


def test_the_demo_function_prints_the_table(
    broker: Any, topic_factory: Any, spark: Any, tmp_path: Path
) -> None:
    """What ``make demo`` runs after starting the broker: produce, run until idle, print the table."""
    import io

    from rich.console import Console

    from kafka_handoff.pipeline.demo import run_pipeline_demo

    topic = topic_factory(3, configs=NO_RETENTION)
    buffer = io.StringIO()
    status = run_pipeline_demo(
        broker.bootstrap_servers,
        topic=topic,
        count=2000,
        work_dir=tmp_path,
        until_idle_s=3,
        overrides=[f"kafka.group.id=g-{topic}"],
        console=Console(file=buffer, width=200),
        spark=spark,
    )
    text = buffer.getvalue()
    assert status == 0, text
    assert "produced 2,000 clickstream events" in text
    assert "page views per page per minute" in text and "views" in text
    assert "dead-letter table" in text


def test_pipeline_errors_are_pipeline_errors() -> None:
    assert issubclass(TransformError, PipelineError) and issubclass(MalformedRecordError, PipelineError)


# ------------------------------------------------------------------------------------------------ Kafka sink
def test_kafka_sink_and_dead_letter_topic_are_exactly_once_across_a_crash_mid_transaction(
    broker: Any, topic_factory: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sink.format = "kafka"``: each batch's output, its dead letters and the input offsets are one
    transaction.  A worker dies in the middle of one (its output and dead letters are on the log, the
    commit never comes); the restarted worker (same member name: same transactional id) fences it, the
    transaction is aborted, and the output and dead-letter topics read with read_committed hold every
    valid / malformed event exactly once."""
    import json

    from kafka_handoff.pipeline.errors import SinkError
    from kafka_handoff.producer import Producer

    bootstrap = broker.bootstrap_servers
    topic = topic_factory(2, configs=NO_RETENTION)
    out_topic = topic_factory(2, configs=NO_RETENTION)
    dead_topic = topic_factory(1, configs=NO_RETENTION)
    events = generate_events(400, seed=83, malformed_share=0.04, start_ms=now_ms())
    pt.produce(bootstrap, topic, events)
    config = pt.pipeline_config(
        bootstrap,
        topic,
        f"g-{topic}",
        out_topic,
        sink_format="kafka",
        malformed="dead-letter-topic",
        dead_letter_topic=dead_topic,
        max_records=200,
    )
    commits = []
    original = Producer.commit_transaction

    def dying_commit(self: Producer, timeout: float | None = None) -> None:
        commits.append(1)
        if len(commits) == 2:
            self.flush()  # the batch's output and dead letters reach the log ...
            raise RuntimeError("simulated crash in the middle of a transaction")  # ... and no commit follows
        original(self, timeout)

    monkeypatch.setattr(Producer, "commit_transaction", dying_commit)
    with pytest.raises(SinkError, match="simulated crash"):
        Worker(config, spark=spark, member="w1", until_idle_s=2).run()
    monkeypatch.setattr(Producer, "commit_transaction", original)
    summary = Worker(config, spark=spark, member="w1", until_idle_s=2).run()
    assert summary.batches_committed >= 1

    written = read_confluent(bootstrap, out_topic, "read_uncommitted")
    output = Counter(json.loads(v)["event_id"] for v in read_confluent(bootstrap, out_topic))
    assert pt.exactly_once_report(pt.valid_event_ids(events), output) == ""
    shown = read_output(config)  # the sink's own reader: read_committed up to the last stable offsets
    assert pt.exactly_once_report(pt.valid_event_ids(events), pt.output_event_ids(shown)) == ""
    assert len(written) > sum(output.values()), "the aborted transaction's output was on the log"
    malformed = Counter(e.value for e in events if e.malformed)
    assert Counter(read_confluent(bootstrap, dead_topic)) == malformed
    assert committed(bootstrap, f"g-{topic}", topic, 2) == end_offsets(bootstrap, topic, 2)
