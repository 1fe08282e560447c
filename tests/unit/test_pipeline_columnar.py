"""Columnar polling (consumer/batch.py) and the Arrow input table (pipeline/arrow.py).

The columnar collector must hand out exactly what the object collector does -- same records, same
positions, same max.poll.records cut, same error rules -- only as parallel lists.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from kafka_handoff.consumer.batch import ColumnChunk
from kafka_handoff.consumer.collector import Collector
from kafka_handoff.consumer.fetcher import CompletedFetch, FetchBuffer
from kafka_handoff.consumer.subscription import SubscriptionState
from kafka_handoff.errors import CorruptRecordError
from kafka_handoff.pipeline.arrow import KAFKA_SCHEMA, chunks_to_table, records_to_table
from kafka_handoff.protocol.records import encode_batch
from kafka_handoff.types import ConsumerRecord, TopicPartition

pytestmark = pytest.mark.unit

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)


def batch(base: int, n: int, headers: bool = False) -> bytes:
    recs = []
    for i in range(n):
        h = [("h", b"x%d" % i)] if headers and i % 2 else []
        recs.append((b"k%d" % (base + i), b"v%d" % (base + i), 1000 + base + i, h))
    return encode_batch(recs, base_offset=base)


def corrupt(data: bytes) -> bytes:
    buf = bytearray(data)
    buf[-3] ^= 0x01
    return bytes(buf)


def make(max_poll_records: int = 500) -> tuple[SubscriptionState, FetchBuffer, Collector]:
    subs = SubscriptionState("latest")
    subs.assign_from_user([A0, A1])
    buffer = FetchBuffer()
    return (
        subs,
        buffer,
        Collector(subs, buffer, max_poll_records=max_poll_records, check_crcs=True, read_committed=False),
    )


def feed(subs: SubscriptionState, buffer: FetchBuffer, tp: TopicPartition, offset: int, data: bytes) -> None:
    st = subs.state(tp)
    if st.position is None or st.position.offset != offset:
        subs.seek(tp, offset)
    buffer.add([CompletedFetch(tp, offset, subs.state(tp).position_epoch, data)])


def columns(collector: Collector) -> dict[TopicPartition, ColumnChunk]:
    result: dict[TopicPartition, ColumnChunk] = collector.collect(columnar=True)
    return result


def test_columnar_matches_object_records_and_positions() -> None:
    data = batch(0, 7, headers=True) + batch(7, 5)
    subs1, buf1, obj = make(max_poll_records=9)
    subs2, buf2, col = make(max_poll_records=9)
    for subs, buf in ((subs1, buf1), (subs2, buf2)):
        feed(subs, buf, A0, 0, data)
        feed(subs, buf, A1, 3, batch(0, 6))  # a batch that begins before the fetch offset
    first_obj: dict[TopicPartition, list[ConsumerRecord]] = obj.collect()
    first_col = columns(col)
    assert {tp: [r.offset for r in rs] for tp, rs in first_obj.items()} == {
        tp: c.offsets for tp, c in first_col.items()
    }
    assert sum(len(c) for c in first_col.values()) == 9  # max.poll.records cut
    for tp, rs in first_obj.items():
        c = first_col[tp]
        assert c.keys == [r.key for r in rs]
        assert c.values == [r.value for r in rs]
        assert c.timestamps == [r.timestamp for r in rs]
        assert c.headers == [tuple(r.headers) for r in rs]
    assert subs1.position(A0) == subs2.position(A0)
    rest_obj = obj.collect()
    rest_col = columns(col)
    assert {tp: [r.offset for r in rs] for tp, rs in rest_obj.items()} == {
        tp: c.offsets for tp, c in rest_col.items()
    }
    assert rest_col[A1].offsets == [3, 4, 5]
    assert subs2.position(A0) is not None and subs2.position(A0).offset == 12  # type: ignore[union-attr]
    assert subs2.position(A1).offset == 6  # type: ignore[union-attr]


def test_switching_modes_in_the_middle_of_a_fetch_loses_nothing() -> None:
    subs, buf, col = make(max_poll_records=4)
    feed(subs, buf, A0, 0, batch(0, 10))
    part1 = columns(col)[A0].offsets
    part2 = [r.offset for r in col.collect()[A0]]  # object mode continues the same fetch
    part3 = columns(col)[A0].offsets
    assert part1 + part2 + part3 == list(range(10))


def test_corrupt_batch_raises_only_after_the_good_records_were_returned() -> None:
    subs, buf, col = make()
    feed(subs, buf, A0, 0, batch(0, 3) + corrupt(batch(3, 3)))
    got = columns(col)
    assert got[A0].offsets == [0, 1, 2]
    with pytest.raises(CorruptRecordError):
        columns(col)
    assert subs.position(A0).offset == 3  # type: ignore[union-attr]


def test_chunk_drop_below_and_extend() -> None:
    c = ColumnChunk("t", 1, [5, 6, 7, 9], [1, 2, 3, 4], [b"a", b"b", None, b"d"], [b"1", b"2", b"3", None],
                    [(), (), (), ()])  # fmt: skip
    assert c.drop_below(7) == 2
    assert c.offsets == [7, 9] and c.keys == [None, b"d"] and c.values == [b"3", None]
    assert c.drop_below(0) == 0
    c.extend(ColumnChunk("t", 1, [10], [5], [b"e"], [b"5"], [(("h", b"v"),)]))
    assert c.offsets == [7, 9, 10] and len(c) == 3 and c.headers[-1] == (("h", b"v"),)


def test_arrow_table_has_the_kafka_schema_and_values() -> None:
    a = ColumnChunk(
        "events",
        3,
        [10, 11],
        [1_700_000_000_000, 1_700_000_000_001],
        [b"k", None],
        [b"v1", b"v2"],
        [(), (("trace", b"abc"), ("n", None))],
    )
    b = ColumnChunk("events", 0, [0], [5], [None], [None], [()])
    table = chunks_to_table([a, ColumnChunk("events", 1), b])
    assert table.schema == KAFKA_SCHEMA
    assert table.column("partition").to_pylist() == [3, 3, 0]
    assert table.column("offset").to_pylist() == [10, 11, 0]
    assert table.column("topic").to_pylist() == ["events"] * 3
    assert table.column("key").to_pylist() == [b"k", None, None]
    assert table.column("value").to_pylist() == [b"v1", b"v2", None]
    assert table.column("headers").to_pylist() == [
        [],
        [{"key": "trace", "value": b"abc"}, {"key": "n", "value": None}],
        [],
    ]
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_000, 1_700_000_000_001, 5]


def test_empty_input_gives_an_empty_table_with_the_schema() -> None:
    assert chunks_to_table([]).schema == KAFKA_SCHEMA
    assert chunks_to_table([]).num_rows == 0


def test_object_path_builds_the_same_table() -> None:
    recs = [
        ConsumerRecord("t", 0, 4, 100, 0, b"k", b"v", ()),
        ConsumerRecord("t", 1, 9, 101, 0, None, b"w", (("h", b"1"),)),
        ConsumerRecord("t", 0, 5, 102, 0, b"k2", None, ()),
    ]
    table = records_to_table(recs)
    assert table.schema == KAFKA_SCHEMA
    pairs = zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True)
    assert sorted(pairs) == [(0, 4), (0, 5), (1, 9)]


def test_paused_partitions_keep_their_data_until_resumed_as_in_the_object_collector() -> None:
    for columnar in (False, True):
        subs, buf, col = make()
        feed(subs, buf, A0, 0, batch(0, 4))
        feed(subs, buf, A1, 0, batch(0, 2))
        subs.pause([A0])
        got = columns(col) if columnar else col.collect()
        assert set(got) == {A1}
        assert subs.position(A0).offset == 0  # type: ignore[union-attr]
        assert buf.has_buffered(A0)  # kept: not fetched again while paused
        subs.resume([A0])
        col.unpark([A0])
        if columnar:
            offsets = list(columns(col)[A0].offsets)
        else:
            offsets = [r.offset for r in col.collect()[A0]]
        assert offsets == [0, 1, 2, 3]
