"""Malformed-record policies, latency percentiles, and ``pipeline show``'s merging."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from kafka_handoff.pipeline.config import ShowConfig
from kafka_handoff.pipeline.deadletter import (
    CountingDeadLetter,
    FailingDeadLetter,
    TableDeadLetter,
    describe_rejects,
)
from kafka_handoff.pipeline.errors import MalformedRecordError
from kafka_handoff.pipeline.show import aggregate
from kafka_handoff.pipeline.sinks import DeltaSink, ParquetSink, Sink
from kafka_handoff.pipeline.stats import LatencyHistogram
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit

P0, P1 = TopicPartition("ev", 0), TopicPartition("ev", 1)


def rejects(*rows: tuple[int, int]) -> pa.Table:
    return pa.table(
        {
            "topic": ["ev"] * len(rows),
            "partition": pa.array([p for p, _ in rows], pa.int32()),
            "offset": pa.array([o for _, o in rows], pa.int64()),
            "value": [b"{bad" for _ in rows],
            "error": ["invalid JSON" for _ in rows],
        }
    )


@pytest.fixture(params=["delta", "parquet"])
def dl_sink(request: pytest.FixtureRequest, tmp_path: Path) -> Sink:
    if request.param == "delta":
        return DeltaSink(str(tmp_path / "dl"), "g")
    return ParquetSink(str(tmp_path / "dl"), "g")


def test_dead_letter_table_is_exactly_once_by_offset(dl_sink: Sink) -> None:
    dead = TableDeadLetter(dl_sink)
    ranges = {P0: (0, 99), P1: (0, 49)}
    assert dead.handle(rejects((0, 5), (1, 7)), ranges, "batch 1") == 2
    # The same range again (the output commit failed and the batch was redone), now with more records:
    assert dead.handle(rejects((0, 5), (1, 7), (0, 120)), {P0: (0, 130), P1: (0, 49)}, "batch 2") == 1
    table = dl_sink.read_table()
    assert sorted(zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True)) == [
        (0, 5), (0, 120), (1, 7)
    ]  # fmt: skip
    assert table.column_names == ["topic", "partition", "offset", "timestamp", "key", "value", "error"]
    assert dl_sink.read_marks([P0, P1]) == {P0: 131, P1: 50}


def test_no_malformed_records_no_write(dl_sink: Sink) -> None:
    assert TableDeadLetter(dl_sink).handle(rejects(), {P0: (0, 9)}, "batch 1") == 0
    assert not dl_sink.exists()


def test_fail_policy_names_the_records_and_the_batch() -> None:
    with pytest.raises(MalformedRecordError) as info:
        FailingDeadLetter().handle(rejects((0, 5), (1, 7)), {P0: (0, 9), P1: (0, 9)}, "batch 3 (ev-0 ...)")
    text = str(info.value)
    assert "2 malformed record(s) in batch 3" in text
    assert "ev-0@5 (invalid JSON)" in text and "ev-1@7" in text
    assert "nothing was committed" in text
    assert info.value.ranges == {P0: (0, 9), P1: (0, 9)}
    assert FailingDeadLetter().handle(rejects(), {P0: (0, 9)}, "b") == 0


def test_skip_policy_counts_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kafka_handoff.pipeline.deadletter"):
        assert CountingDeadLetter().handle(rejects((0, 5)), {P0: (0, 9)}, "batch 1") == 0
    assert "skipping 1 malformed record(s) in batch 1: ev-0@5 (invalid JSON)" in caplog.text


def test_describe_rejects_truncates() -> None:
    text = describe_rejects(rejects(*[(0, i) for i in range(8)]), limit=2)
    assert text == "ev-0@0 (invalid JSON), ev-0@1 (invalid JSON) and 6 more"


def test_latency_percentiles() -> None:
    h = LatencyHistogram()
    assert h.percentile(50) is None
    h.add([10.0] * 98 + [1000.0, 5000.0])
    p50, p99 = h.percentile(50), h.percentile(99)
    assert p50 is not None and 10.0 <= p50 <= 10.5
    assert p99 is not None and 1000.0 <= p99 <= 1020.0
    assert h.percentile(100) == 5000.0
    h.add([-3.0])  # clock skew: counted as 0
    assert h.total == 101


def test_show_merges_partial_aggregates() -> None:
    table = pa.table({"page": ["/a", "/b", "/a"], "minute": [1, 1, 1], "views": [2, 1, 3]})
    merged = aggregate(table, ShowConfig(group_by=("page", "minute"), sum=("views",), sort_by=("page",)))
    assert merged.to_pylist() == [
        {"page": "/a", "minute": 1, "views": 5},
        {"page": "/b", "minute": 1, "views": 1},
    ]
    with pytest.raises(KeyError, match="nope"):
        aggregate(table, ShowConfig(group_by=("nope",), sum=("views",)))
