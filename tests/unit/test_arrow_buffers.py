"""Arrow without Python objects (issue 15, item 3): ``poll_columns`` chunks carry the decoder's Arrow-layout
buffers and ``chunks_to_table`` wraps them.

The C builder (``_fastrecords.records_to_buffers``) and the pure-Python one must give the same table on the
same bytes, equal to the table built from :class:`ConsumerRecord` objects, with the consumer's rules
unchanged: control batches and aborted transactions skipped, records below the fetch offset dropped, the
``max.poll.records`` cut, positions, and corrupt batches reported with topic/partition/offset after the good
records before them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest

from kafka_handoff.consumer.batch import ColumnChunk
from kafka_handoff.consumer.collector import Collector
from kafka_handoff.consumer.fetcher import CompletedFetch, FetchBuffer
from kafka_handoff.consumer.subscription import SubscriptionState
from kafka_handoff.errors import CorruptRecordError
from kafka_handoff.pipeline.arrow import KAFKA_SCHEMA, chunks_to_table, records_to_table
from kafka_handoff.protocol import records
from kafka_handoff.protocol.compression import CompressionType
from kafka_handoff.protocol.records import (
    ControlType,
    TimestampType,
    decode_batches,
    decode_batches_buffers,
    encode_batch,
    encode_control_batch,
)
from kafka_handoff.types import ConsumerRecord, TopicPartition

pytestmark = pytest.mark.unit

IMPLS = records.available_implementations()
TP = TopicPartition("events", 3)
T0 = 1_700_000_000_000


@contextmanager
def implementation(name: str) -> Iterator[None]:
    previous = records.IMPLEMENTATION
    records._use_implementation(name)  # type: ignore[arg-type]
    try:
        yield
    finally:
        records._use_implementation(previous)


def rows(base: int, n: int) -> list[Any]:
    """Null keys and values, empty and non-empty headers (null header values, a non-ASCII header key)."""
    out: list[Any] = []
    for i in range(n):
        o = base + i
        key = None if o % 3 == 0 else b"k%d" % o
        value = None if o % 5 == 0 else b"v" * (o % 40)
        headers = [] if o % 2 else [("h", b"x%d" % o), ("ключ", None)][: 1 + o % 4 // 2]
        out.append((key, value, T0 + o, headers))
    return out


def payload(codec: CompressionType = CompressionType.NONE) -> bytes:
    """Three batches: plain, LogAppendTime, and one with an empty value and many headers."""
    return (
        encode_batch(rows(0, 9), base_offset=0, compression=codec, partition_leader_epoch=4)
        + encode_batch(
            rows(9, 6),
            base_offset=9,
            compression=codec,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            log_append_time=T0 + 999,
        )
        + encode_batch([(b"", b"", T0, [("a", b""), ("b", b"1")] * 5)], base_offset=15, compression=codec)
    )


def collect_all(data: bytes, fetch_offset: int, max_poll_records: int, **kw: Any) -> tuple[Any, list[int]]:
    """All records of one fetch through the columnar collector as one table; the position after each call."""
    subs = SubscriptionState("earliest")
    subs.assign_from_user([TP])
    subs.seek(TP, fetch_offset)
    buffer = FetchBuffer()
    buffer.add([CompletedFetch(TP, fetch_offset, subs.state(TP).position_epoch, data, **kw)])
    collector = Collector(
        subs,
        buffer,
        max_poll_records=max_poll_records,
        check_crcs=True,
        read_committed="aborted_transactions" in kw,
    )
    acc: ColumnChunk | None = None
    positions: list[int] = []
    while collector.has_data():
        got = collector.collect(columnar=True)
        position = subs.state(TP).position
        assert position is not None
        positions.append(position.offset)
        chunk = got.get(TP)
        if chunk is None:
            continue
        assert len(chunk) <= max_poll_records
        if acc is None:
            acc = chunk
        else:
            acc.extend(chunk)
    table = chunks_to_table([acc] if acc is not None else [])
    table.validate(full=True)
    return table, positions


def objects_table(data: bytes, start_offset: int, **kw: Any) -> Any:
    res = decode_batches(data, topic=TP.topic, partition=TP.partition, start_offset=start_offset, **kw)
    res.raise_error()
    return records_to_table(res.records)


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
@pytest.mark.parametrize("fetch_offset", [0, 4, 9, 12])
def test_c_and_python_build_the_object_paths_table(codec: CompressionType, fetch_offset: int) -> None:
    data = payload(codec)
    expected = objects_table(data, fetch_offset)
    assert expected.num_rows == 16 - fetch_offset
    for impl in IMPLS:
        with implementation(impl):
            table, positions = collect_all(data, fetch_offset, max_poll_records=4)
        assert table.schema == KAFKA_SCHEMA
        assert table.equals(expected), impl
        assert positions[-1] == 16
    got = table.to_pylist()
    by_offset = {r["offset"]: r for r in got}
    if fetch_offset <= 10:
        assert by_offset[10]["timestamp"] == pa.scalar(T0 + 999, pa.timestamp("ms", tz="UTC")).as_py()
        assert by_offset[10]["key"] == b"k10" and by_offset[10]["value"] is None
        assert by_offset[10]["headers"] == [{"key": "h", "value": b"x10"}, {"key": "ключ", "value": None}]
    assert by_offset[15]["key"] == b"" and by_offset[15]["value"] == b""
    assert len(by_offset[15]["headers"]) == 10
    if fetch_offset == 0:
        assert by_offset[0]["key"] is None and by_offset[0]["value"] is None


@pytest.mark.parametrize("impl", IMPLS)
def test_max_poll_records_cut_and_positions_mid_batch(impl: str) -> None:
    data = payload()
    with implementation(impl):
        table, positions = collect_all(data, fetch_offset=2, max_poll_records=3)
    # 14 records from offset 2, three at a time: the position follows the last record handed out
    assert positions == [5, 8, 11, 14, 16]
    assert table["offset"].to_pylist() == list(range(2, 16))
    assert table.equals(objects_table(data, 2))


@pytest.mark.parametrize("impl", IMPLS)
def test_control_batches_and_aborted_transactions_are_skipped(impl: str) -> None:
    data = (
        encode_batch(rows(0, 3), base_offset=0, producer_id=7, producer_epoch=0, transactional=True)
        + encode_batch(rows(3, 2), base_offset=3, producer_id=8, producer_epoch=0, transactional=True)
        + encode_control_batch(
            ControlType.ABORT, base_offset=5, producer_id=7, producer_epoch=0, timestamp=T0
        )
        + encode_control_batch(
            ControlType.COMMIT, base_offset=6, producer_id=8, producer_epoch=0, timestamp=T0
        )
        + encode_batch(rows(7, 2), base_offset=7)
    )
    aborted = ((7, 0),)
    with implementation(impl):
        table, positions = collect_all(data, 0, 100, aborted_transactions=aborted)
        res = decode_batches_buffers(
            data, topic=TP.topic, partition=TP.partition, read_committed=True, aborted_transactions=aborted
        )
    assert table["offset"].to_pylist() == [3, 4, 7, 8]
    assert table.equals(objects_table(data, 0, read_committed=True, aborted_transactions=aborted))
    assert positions[-1] == 9
    assert (res.control_batches, res.aborted_batches, res.aborted_records) == (2, 1, 3)


@pytest.mark.parametrize("impl", IMPLS)
def test_corrupt_batch_after_good_records_names_topic_partition_offset(impl: str) -> None:
    bad = bytearray(encode_batch(rows(5, 3), base_offset=5))
    bad[-2] ^= 0x40
    data = encode_batch(rows(0, 5), base_offset=0) + bytes(bad)
    subs = SubscriptionState("earliest")
    subs.assign_from_user([TP])
    subs.seek(TP, 0)
    buffer = FetchBuffer()
    buffer.add([CompletedFetch(TP, 0, subs.state(TP).position_epoch, data)])
    collector = Collector(subs, buffer, max_poll_records=100, check_crcs=True, read_committed=False)
    with implementation(impl):
        first = collector.collect(columnar=True)
        assert first[TP].offsets == [0, 1, 2, 3, 4]
        with pytest.raises(CorruptRecordError) as info:
            collector.collect(columnar=True)
    err = info.value
    assert (err.topic, err.partition, err.offset) == (TP.topic, TP.partition, 5)
    assert "topic events, partition 3, batch at offset 5" in str(err)
    position = subs.state(TP).position
    assert position is not None and position.offset == 5


@pytest.mark.parametrize("impl", IMPLS)
def test_an_offset_outside_int64_is_a_corrupt_batch_in_both_implementations(impl: str) -> None:
    data = encode_batch(rows(0, 2), base_offset=0) + encode_batch(rows(0, 3), base_offset=2**63 - 2)
    with implementation(impl):
        res = decode_batches_buffers(data, topic=TP.topic, partition=TP.partition)
    assert len(res.columns) == 2
    assert res.error is not None and res.error.offset == 2**63 - 2
    assert "a record's offset is outside the int64 range" in str(res.error)


def buffers_chunk(data: bytes, start: int = 0, stop: int | None = None) -> ColumnChunk:
    res = decode_batches_buffers(data, topic=TP.topic, partition=TP.partition)
    res.raise_error()
    return ColumnChunk.from_buffers(TP.topic, TP.partition, res.columns, start, stop)


def test_chunk_length_offsets_drop_and_extend_build_no_lists() -> None:
    data = payload()
    a = buffers_chunk(data, 0, 9)
    b = buffers_chunk(data, 9, 16)
    a.extend(b)
    assert len(a) == 16 and a.first_offset() == 0 and a.last_offset() == 15
    assert a.drop_below(11) == 11
    assert len(a) == 5 and a.first_offset() == 11
    assert a.lists() == {} and len(a.segments()) == 1
    table = chunks_to_table([a])
    assert table["offset"].to_pylist() == [11, 12, 13, 14, 15]
    assert table.equals(objects_table(data, 11))


def test_reading_a_list_attribute_builds_that_column_and_changes_to_it_count() -> None:
    data = payload()
    chunk = buffers_chunk(data, 2, 9)
    chunk.extend(buffers_chunk(data, 9, 12))
    assert chunk.offsets == list(range(2, 12))
    assert set(chunk.lists()) == {"offsets"}
    chunk.values[0] = b"changed"  # the column is now this list
    assert set(chunk.lists()) == {"offsets", "values"}
    table = chunks_to_table([chunk])
    table.validate(full=True)
    expected = objects_table(data, 2).slice(0, 10).to_pylist()
    expected[0]["value"] = b"changed"
    assert table.to_pylist() == expected


def test_buffer_and_list_chunks_mix_and_compare_equal() -> None:
    data = payload()
    res = decode_batches(data, topic=TP.topic, partition=TP.partition)
    recs: list[ConsumerRecord] = res.records
    as_lists = ColumnChunk(
        TP.topic,
        TP.partition,
        [r.offset for r in recs],
        [r.timestamp for r in recs],
        [r.key for r in recs],
        [r.value for r in recs],
        [tuple(r.headers) for r in recs],
    )
    assert buffers_chunk(data) == as_lists
    mixed = buffers_chunk(data, 0, 5)
    tail = ColumnChunk(
        TP.topic,
        TP.partition,
        as_lists.offsets[5:],
        as_lists.timestamps[5:],
        as_lists.keys[5:],
        as_lists.values[5:],
        as_lists.headers[5:],
    )
    mixed.extend(tail)
    assert mixed == as_lists and len(mixed) == 16
    assert chunks_to_table([mixed]).equals(records_to_table(recs))
    lists_first = ColumnChunk(
        TP.topic,
        TP.partition,
        as_lists.offsets[:5],
        as_lists.timestamps[:5],
        as_lists.keys[:5],
        as_lists.values[:5],
        as_lists.headers[:5],
    )
    lists_first.extend(buffers_chunk(data, 5))
    assert lists_first == as_lists
    assert repr(lists_first) == "ColumnChunk(topic='events', partition=3, records=16)"


def test_decode_bench_arrow_mode_runs_every_implementation(capsys: pytest.CaptureFixture[str]) -> None:
    from kafka_handoff.bench import decode

    decode.main(
        ["--arrow", "--records", "3000", "--codecs", "none,zstd", "--repeat", "1", "--batch-records", "1000"]
    )
    out = capsys.readouterr().out
    assert "poll_columns -> chunks_to_table" in out
    for codec in ("none", "zstd"):
        for impl in IMPLS:
            assert any(line.split()[:2] == [codec, impl] for line in out.splitlines()), out


@pytest.mark.skipif("c" not in IMPLS, reason="the C extension is not built")
def test_c_builder_hands_its_memory_over_once() -> None:
    fast = records._fast
    builder = fast.ColumnBuilder()
    data = encode_batch([(b"k", b"v", T0, [("h", None)])], base_offset=3)
    fast.records_to_buffers(data, 61, 1, 3, T0, None, None, builder)
    parts = records.ColumnBuffers(builder.finish())
    assert isinstance(parts.value_data, memoryview) and parts.value_data.readonly
    assert parts.to_lists().headers == [(("h", None),)]
    with pytest.raises(RuntimeError, match="already called"):
        builder.finish()
    with pytest.raises(RuntimeError, match="already called"):
        fast.records_to_buffers(data, 61, 1, 3, T0, None, None, builder)
    del builder  # the buffers outlive the builder
    assert bytes(parts.value_data) == b"v" and parts.offset_at(0) == 3


@pytest.mark.parametrize("impl", IMPLS)
def test_value_bytes_and_list_columns_from_buffers(impl: str) -> None:
    data = payload()
    with implementation(impl):
        chunk = buffers_chunk(data, 1, 9)
        chunk.extend(buffers_chunk(data, 10, 16))
        expected = [r.value for r in decode_batches(data, topic=TP.topic, partition=TP.partition).records]
        expected = expected[1:9] + expected[10:16]
        assert chunk.value_bytes() == sum(len(v) for v in expected if v)
        assert chunk.lists() == {}
        assert chunk.values == expected  # built from the buffers, nulls included
        assert chunk.value_bytes() == sum(len(v) for v in expected if v)


def test_buffer_parts_round_trip_and_name_every_buffer() -> None:
    res = decode_batches_buffers(payload(), topic=TP.topic, partition=TP.partition)
    parts = res.columns.parts()
    assert len(parts) == 16
    assert records.ColumnBuffers(parts).parts() == parts
    assert (
        parts[0] == 16 and parts[8] == res.columns.value_data and parts[15] == res.columns.header_value_data
    )
