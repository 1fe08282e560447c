"""Pipeline pieces on a real local Spark, no broker: JSON parsing into good/rejected rows, the clickstream
transform against its ground truth, and cancelling a running batch's Spark jobs when its partitions are
lost (the batch's output is discarded, nothing is committed)."""

from __future__ import annotations

import concurrent.futures
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff.consumer.batch import ColumnChunk
from kafka_handoff.pipeline import testing as pt
from kafka_handoff.pipeline.arrow import chunks_to_table
from kafka_handoff.pipeline.sinks import make_sink
from kafka_handoff.pipeline.transform import normalize_result, parse_json
from kafka_handoff.pipeline.worker import Batch, PartitionRange, Worker
from kafka_handoff.sample import generate_events
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.spark

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def kafka_table(values: list[bytes | None], timestamps: list[int] | None = None) -> Any:
    n = len(values)
    chunk = ColumnChunk("ev", 0, list(range(n)), timestamps or [0] * n, [None] * n, values, [()] * n)
    return chunks_to_table([chunk])


def test_parse_json_splits_good_and_rejected_records(spark: Any) -> None:
    values = [
        b'{"a": "x", "b": 1}',
        b'{"a": "y"}',  # b missing
        b"{not json",
        None,
        b'{"a": null, "b": 2}',  # a null
        b'{"a": "z", "b": 3, "extra": true}',
    ]
    df = spark.createDataFrame(kafka_table(values))
    good, rejected = parse_json(df, "a STRING, b INT", required=("a", "b"))
    assert sorted((r["offset"], r["a"], r["b"]) for r in good.collect()) == [(0, "x", 1), (5, "z", 3)]
    assert "partition" in good.columns and "timestamp" in good.columns
    errors = {r["offset"]: r["error"] for r in rejected.collect()}
    assert errors == {
        1: "missing required field(s): b",
        2: "invalid JSON (not an object matching the schema)",
        3: "null value",
        4: "missing required field(s): a",
    }
    with pytest.raises(ValueError, match="required field 'c' is not in the schema"):
        parse_json(df, "a STRING", required=("c",))


def test_clickstream_transform_counts_page_views_per_minute(spark: Any) -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import clickstream
    finally:
        sys.path.remove(str(EXAMPLES))
    events = generate_events(2000, seed=5, malformed_share=0.05, start_ms=1_800_000_000_000)
    df = spark.createDataFrame(kafka_table([e.value for e in events], [e.timestamp for e in events]))
    result = normalize_result(clickstream.transform(df), "clickstream:transform")
    got = {
        (r["page"], int(r["minute"].timestamp() * 1000)): r["views"]
        for r in result.output.toArrow().to_pylist()
    }
    assert got == dict(pt.page_views(events))
    assert result.rejected.count() == sum(1 for e in events if e.malformed)


def test_normalize_result_rejects_what_is_not_a_dataframe(spark: Any) -> None:
    with pytest.raises(TypeError, match="returned int, expected a DataFrame"):
        normalize_result(3, "m:f")
    df = spark.createDataFrame(kafka_table([b"{}"]))
    with pytest.raises(TypeError, match="lacks column"):
        normalize_result((df, df.select("offset")), "m:f")


def test_lost_partitions_cancel_the_running_spark_job_and_discard_the_output(
    spark: Any, tmp_path: Path
) -> None:
    config = pt.pipeline_config(
        "unused:9092", "ev", "g", str(tmp_path / "out"), function="kafka_handoff.pipeline.testing:slow"
    )
    worker = Worker(config, spark=spark)
    worker._setup()
    tp = TopicPartition("ev", 0)
    chunk = ColumnChunk("ev", 0, [0, 1], [0, 0], [None, None], [b"{}", b"{}"], [(), ()])
    batch = Batch(1, [chunk], {tp: PartitionRange(None, 0, 1, 2)}, 2, "test-cancel-batch-1")
    pool = concurrent.futures.ThreadPoolExecutor(1)
    future = pool.submit(worker._process, batch)
    try:
        worker._inflight = (batch, future)
        tracker = spark.sparkContext.statusTracker()
        deadline = time.monotonic() + 120
        while not tracker.getActiveJobsIds():  # the batch's job is running
            assert time.monotonic() < deadline and not future.done(), future
            time.sleep(0.05)
        worker._on_lost(frozenset({tp}))  # the consumer reports the batch's partition lost
        assert batch.cancelled.is_set()
        # Awaited for 60 s: the job would take hours, so only the cancellation ends it by then.
        outcome = future.result(timeout=60)
    finally:
        spark.sparkContext.cancelAllJobs()  # never leave an hours-long job behind
        pool.shutdown(wait=True)
    assert outcome.report.status == "cancelled"
    assert outcome.updates == {}
    assert not make_sink(config.sink).exists()
