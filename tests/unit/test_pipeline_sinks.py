"""Sinks: data and per-partition marks committed atomically; commits conditional on the marks.

Both sinks are exercised without Spark (Arrow input): the Delta table through deltalake, the Parquet
sink with pyarrow-written files and manifests.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kafka_handoff.pipeline.errors import MarkConflictError
from kafka_handoff.pipeline.sinks import DeltaSink, MarkUpdate, ParquetSink, Sink, mark_key
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit

P0, P1, P2 = TopicPartition("ev", 0), TopicPartition("ev", 1), TopicPartition("ev", 2)


@pytest.fixture(params=["delta", "parquet"])
def sink(request: pytest.FixtureRequest, tmp_path: Path) -> Sink:
    if request.param == "delta":
        return DeltaSink(str(tmp_path / "t"), "grp")
    return ParquetSink(str(tmp_path / "t"), "grp")


def rows(*values: int) -> Any:
    return pa.table({"v": pa.array(list(values), pa.int64())})


def values(sink: Sink) -> list[int]:
    table = sink.read_table()
    return sorted(table.column("v").to_pylist()) if table.num_columns else []


def test_mark_key_names_group_topic_partition() -> None:
    assert mark_key("clickstream", TopicPartition("events", 7)) == "clickstream-events-7"


def test_marks_are_stored_with_the_data(sink: Sink) -> None:
    assert sink.read_marks([P0, P1]) == {P0: None, P1: None}
    assert not sink.exists()
    info = sink.commit(rows(1, 2), {P0: MarkUpdate(None, 10), P1: MarkUpdate(None, 4)})
    assert info.rows == 2
    assert sink.exists()
    assert sink.read_marks([P0, P1, P2]) == {P0: 10, P1: 4, P2: None}
    sink.commit(rows(3), {P0: MarkUpdate(10, 25)})
    assert sink.read_marks([P0, P1]) == {P0: 25, P1: 4}
    assert values(sink) == [1, 2, 3]


def test_a_commit_whose_expected_mark_moved_is_rejected_and_writes_nothing(sink: Sink) -> None:
    sink.commit(rows(1), {P0: MarkUpdate(None, 10)})
    with pytest.raises(MarkConflictError) as info:
        sink.commit(rows(99), {P0: MarkUpdate(None, 20), P1: MarkUpdate(None, 5)})
    assert info.value.conflicts == {P0: (None, 10)}
    assert "ev-0 (expected None, found 10)" in str(info.value)
    assert sink.read_marks([P0, P1]) == {P0: 10, P1: None}  # P1 was not advanced either
    assert values(sink) == [1]


def test_empty_output_still_moves_the_marks(sink: Sink) -> None:
    sink.commit(rows(1), {P0: MarkUpdate(None, 3)})
    sink.commit(pa.table({"v": pa.array([], pa.int64())}), {P0: MarkUpdate(3, 8)})
    assert sink.read_marks([P0]) == {P0: 8}
    assert values(sink) == [1]


def test_concurrent_writers_of_one_partition_exactly_one_wins(sink: Sink) -> None:
    """Two members both believe they own P0 at mark None (a zombie and the new owner): only one commit
    may land, whichever order the races go in; repeated to shake the interleavings."""
    for round_ in range(4):
        expected = sink.read_marks([P0])[P0]
        barrier = threading.Barrier(2)
        outcomes: list[str] = []

        def write(
            value: int,
            expected: int | None = expected,
            barrier: threading.Barrier = barrier,
            outcomes: list[str] = outcomes,
        ) -> None:
            barrier.wait()
            try:
                sink.commit(rows(value), {P0: MarkUpdate(expected, (expected or 0) + 10)})
                outcomes.append("ok")
            except MarkConflictError:
                outcomes.append("conflict")

        threads = [threading.Thread(target=write, args=(100 * round_ + i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["conflict", "ok"]
    assert len(values(sink)) == 4


def test_concurrent_writers_of_different_partitions_all_succeed(sink: Sink) -> None:
    parts = [TopicPartition("ev", i) for i in range(4)]
    barrier = threading.Barrier(len(parts))
    errors: list[BaseException] = []

    def write(tp: TopicPartition) -> None:
        barrier.wait()
        try:
            sink.commit(rows(tp.partition), {tp: MarkUpdate(None, 100 + tp.partition)})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(tp,)) for tp in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sink.read_marks(parts) == {tp: 100 + tp.partition for tp in parts}
    assert values(sink) == [0, 1, 2, 3]


def test_delta_conflict_is_detected_against_a_stale_snapshot(tmp_path: Path) -> None:
    """The mark check and the write are one atomic step: a writer that checked the marks on a snapshot
    taken before another writer's commit is still rejected (delta-rs's app-transaction conflict)."""
    sink = DeltaSink(str(tmp_path / "t"), "grp")
    sink.commit(rows(1), {P0: MarkUpdate(None, 5)})
    stale = sink._load()
    sink.commit(rows(2), {P0: MarkUpdate(5, 9)})  # another member moves the mark
    real_load = sink._load
    calls = {"n": 0}

    def load_once_stale() -> Any:
        calls["n"] += 1
        return stale if calls["n"] == 1 else real_load()

    sink._load = load_once_stale  # type: ignore[method-assign]
    with pytest.raises(MarkConflictError):
        sink.commit(rows(3), {P0: MarkUpdate(5, 12)})
    sink._load = real_load  # type: ignore[method-assign]
    assert sink.read_marks([P0]) == {P0: 9}
    assert values(sink) == [1, 2]


def test_parquet_readers_see_only_manifest_listed_files(tmp_path: Path) -> None:
    sink = ParquetSink(str(tmp_path / "t"), "grp")
    sink.commit(rows(1, 2), {P0: MarkUpdate(None, 2)})
    # A crashed writer's files (written, never published) and a rejected commit's files:
    orphan = tmp_path / "t" / "data" / "deadbeef"
    orphan.mkdir(parents=True)
    import pyarrow.parquet as pq

    pq.write_table(rows(666), orphan / "part-00000.parquet")
    with pytest.raises(MarkConflictError):
        sink.commit(rows(777), {P0: MarkUpdate(None, 4)})
    assert values(sink) == [1, 2]
    assert {p.name for p in sink.orphans()} >= {"deadbeef"}
    assert len(sink.orphans()) == 2
    manifest = json.loads((tmp_path / "t" / "_manifests" / f"{1:020d}.json").read_text())
    assert manifest["marks"] == {"grp-ev-0": 2}
    assert manifest["ranges"] == {"grp-ev-0": [None, 2]}


def test_parquet_manifest_race_on_the_same_sequence_number_retries_for_other_partitions(
    tmp_path: Path,
) -> None:
    """If another commit takes sequence N+1 between our read and our link, the link fails, the marks are
    re-checked against the new manifest and the commit lands at N+2."""
    sink = ParquetSink(str(tmp_path / "t"), "grp")
    sink.commit(rows(1), {P0: MarkUpdate(None, 1)})
    other = ParquetSink(str(tmp_path / "t"), "grp")
    real_latest = sink._latest
    state = {"raced": False}

    def latest_then_race() -> tuple[int, dict[str, int]]:
        result = real_latest()
        if not state["raced"]:
            state["raced"] = True
            other.commit(rows(2), {P1: MarkUpdate(None, 7)})  # takes seq 2 first
        return result

    sink._latest = latest_then_race  # type: ignore[method-assign]
    info = sink.commit(rows(3), {P0: MarkUpdate(1, 5)})
    assert info.version == 3
    assert sink.read_marks([P0, P1]) == {P0: 5, P1: 7}
    assert values(sink) == [1, 2, 3]
