"""The producer's bulk and future-less paths: the Produce body written without kio, the C bulk append
(``append_values``) against its Python twin, and ``RecordAccumulator.append_many`` (order, batch limits,
sticky switching, memory bound with progress)."""

from __future__ import annotations

import gc
import random
from concurrent.futures import Future

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_handoff.errors import KafkaTimeoutError
from kafka_handoff.producer import batch as batch_module
from kafka_handoff.producer.accumulator import RecordAccumulator
from kafka_handoff.producer.batch import RECORD_OVERHEAD_ESTIMATE, Entry, _py_append_values
from kafka_handoff.producer.produce_request import MAX_VERSION, MIN_VERSION, encode_produce_body
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import RecordMetadata, TopicPartition

pytestmark = pytest.mark.unit

VALUE = b"v" * 88
SIZE = len(VALUE) + RECORD_OVERHEAD_ESTIMATE  # 100


# ============================================================================================ Produce body
def _kio_frame(version: int, tid: str | None, topics: dict[str, list[tuple[int, bytes]]]) -> bytes:
    values = {
        "transactional_id": tid,
        "acks": -1,
        "timeout": 30000,
        "topic_data": [
            {"name": name, "partition_data": [{"index": p, "records": data} for p, data in parts]}
            for name, parts in topics.items()
        ],
    }
    return wire.encode_request(wire.build_request(ApiKey.PRODUCE, version, values), 7, "client-1")


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
@pytest.mark.parametrize("tid", [None, "txn-é1"])
def test_produce_body_is_byte_for_byte_what_kio_writes(version: int, tid: str | None) -> None:
    topics = {
        "orders": [(0, b"\x01" * 300), (5, b"batch-bytes")],
        "t" * 200: [(1, b"x" * 70_000)],  # a long name and records past one-byte varint lengths
    }
    body = encode_produce_body(version, tid, -1, 30000, topics)
    ours = wire.encode_request(wire.EncodedBody(ApiKey.PRODUCE, version, body), 7, "client-1")
    assert ours == _kio_frame(version, tid, topics)


def test_produce_body_rejects_versions_it_cannot_write() -> None:
    with pytest.raises(ValueError, match="v13"):
        encode_produce_body(13, None, -1, 1000, {})


def test_encoded_body_without_client_id_frames_a_null_client_id() -> None:
    body = encode_produce_body(9, None, 1, 1000, {"t": [(0, b"r")]})
    framed = wire.encode_request(wire.EncodedBody(ApiKey.PRODUCE, 9, body), 1, None)
    partitions = [{"index": 0, "records": b"r"}]
    values = {"acks": 1, "timeout": 1000, "topic_data": [{"name": "t", "partition_data": partitions}]}
    assert framed == wire.encode_request(wire.build_request(ApiKey.PRODUCE, 9, values), 1, None)


# ============================================================================================ append_values
items = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.one_of(st.none(), st.binary(max_size=300))),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(items=items, keyed=st.booleans(), start=st.integers(0, 10), room=st.integers(0, 5000))
def test_c_bulk_append_equals_python(items: list[tuple[bytes | None, bytes | None]], keyed: bool, start: int,
                                     room: int) -> None:  # fmt: skip
    c_append = batch_module.append_values
    if c_append is _py_append_values:
        pytest.skip("the C extension is not built")
    keys = [k for k, _ in items] if keyed else None
    values = [v for _, v in items]
    start = min(start, len(values))
    callback = print
    c_entries: list[Entry] = [(None, b"before", 1, None, None, None)]
    py_entries: list[Entry] = [(None, b"before", 1, None, None, None)]
    c_result = c_append(c_entries, values, keys, start, 1234, callback, room, RECORD_OVERHEAD_ESTIMATE)
    py_result = _py_append_values(
        py_entries, values, keys, start, 1234, callback, room, RECORD_OVERHEAD_ESTIMATE
    )
    assert c_result == py_result
    assert c_entries == py_entries
    count, used = c_result
    assert used <= room
    expected = [
        (keys[i] if keys else None, values[i], 1234, None, None, callback)
        for i in range(start, start + count)
    ]
    assert c_entries[1:] == expected
    if start + count < len(values):  # it stopped because the next record does not fit
        nxt = values[start + count]
        key = keys[start + count] if keys else None
        assert used + RECORD_OVERHEAD_ESTIMATE + len(nxt or b"") + len(key or b"") > room


@pytest.mark.parametrize("append", [batch_module.append_values, _py_append_values])
def test_bulk_append_stops_at_an_item_that_is_not_bytes(append: batch_module.AppendValues) -> None:
    entries: list[Entry] = []
    values: list[object] = [b"a", b"b", "text", b"c"]
    assert append(entries, values, None, 0, 5, None, 10_000, 12) == (2, 26)
    assert [e[1] for e in entries] == [b"a", b"b"]
    entries.clear()
    keys: list[object] = [b"k", bytearray(b"k2"), b"k3", b"k4"]
    assert append(entries, [b"a", b"b", b"c", b"d"], keys, 0, 5, None, 10_000, 12) == (1, 14)


def test_c_bulk_append_entries_are_not_tracked_by_the_collector() -> None:
    if batch_module.append_values is _py_append_values:
        pytest.skip("the C extension is not built")
    entries: list[Entry] = []
    batch_module.append_values(entries, [b"a"] * 3, None, 0, 5, None, 10_000, 12)
    assert not any(gc.is_tracked(e) for e in entries)


# ============================================================================================ append_many
class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def _acc(**kwargs: object) -> RecordAccumulator:
    params: dict[str, object] = {
        "batch_size": 1000,
        "linger_ms": 10,
        "rng": random.Random(3),
        "clock": Clock(),
    }
    params.update(kwargs)
    acc = RecordAccumulator(**params)  # type: ignore[arg-type]
    acc.update_topic("t", 4, [0, 1, 2, 3])
    return acc


def _convert(key: object, value: object) -> tuple[bytes | None, bytes | None, int]:
    k = None if key is None else (key if isinstance(key, bytes) else str(key).encode())
    v = None if value is None else (value if isinstance(value, bytes) else str(value).encode())
    return k, v, RECORD_OVERHEAD_ESTIMATE + len(k or b"") + len(v or b"")


def _values(n: int) -> list[bytes]:
    return [b"%087d|" % i for i in range(n)]  # 88 bytes, numbered


def test_append_many_to_a_partition_fills_batches_in_order() -> None:
    acc = _acc()
    values = _values(25)
    acc.append_many("t", 2, values, None, 77, None, _convert)
    batches = acc.queued_batches(TopicPartition("t", 2))
    # batch.size 1000 holds the 61-byte header + 9 records of 100 bytes estimated.
    assert [b.record_count for b in batches] == [9, 9, 7]
    assert [e[1] for b in batches for e in b.entries] == values
    assert all(e[2] == 77 and e[4] is None for b in batches for e in b.entries)
    assert all(b.closed for b in batches[:-1]) and not batches[-1].closed
    for b in batches:
        assert b.size <= b.limit and b.size == 61 + SIZE * b.record_count


def test_append_many_matches_single_appends() -> None:
    """Same batches, sizes and sticky partition switches as appending the records one by one."""
    values = _values(120)
    one, many = _acc(), _acc()
    for v in values:
        one.append("t", None, (None, v, 5, None, None, None), SIZE, 0)
    many.append_many("t", None, values, None, 5, None, _convert)
    for p in range(4):
        tp = TopicPartition("t", p)
        a = [[e[1] for e in b.entries] for b in one.queued_batches(tp)]
        b = [[e[1] for e in b.entries] for b in many.queued_batches(tp)]
        assert a == b, p
    used = [p for p in range(4) if many.queued_batches(TopicPartition("t", p))]
    assert len(used) > 1  # the sticky partition switched


def test_append_many_converts_values_that_are_not_bytes_in_order() -> None:
    acc = _acc()
    values: list[object] = [b"a", "b", b"c", 4, b"e"]
    acc.append_many("t", 0, values, [b"k"] * 5, 1, None, _convert)
    [batch] = acc.queued_batches(TopicPartition("t", 0))
    assert [(e[0], e[1]) for e in batch.entries] == [(b"k", v) for v in (b"a", b"b", b"c", b"4", b"e")]


def test_append_many_times_out_on_memory_and_reports_progress() -> None:
    acc = _acc(buffer_memory=2000)  # two batches of 1000
    progress = [0]
    with pytest.raises(KafkaTimeoutError, match=r"buffer\.memory"):
        acc.append_many("t", 1, _values(30), None, 1, None, _convert, 0, 0, progress)
    assert progress[0] == 18  # two full batches queued, the 19th record found no memory
    assert sum(b.record_count for b in acc.queued_batches(TopicPartition("t", 1))) == 18


def test_futures_of_mixed_entries_are_completed_and_none_skipped() -> None:
    from kafka_handoff.producer.future import complete_all, new_future

    futures: list[Future[RecordMetadata] | None] = [new_future(), None, new_future()]
    results = [RecordMetadata("t", 0, i, 0) for i in range(3)]
    complete_all(futures, results)
    assert futures[0] is not None and futures[0].result(0).offset == 0
    assert futures[2] is not None and futures[2].result(0).offset == 2


# ============================================================================================ lz4
@pytest.mark.parametrize("size", [0, 1, 100, 65_535, 65_536, 65_537, 300_000])
@pytest.mark.parametrize("kind", ["text", "random"])
def test_lz4_frames_of_independent_blocks_decode_everywhere(size: int, kind: str) -> None:
    import cramjam

    from kafka_handoff.protocol.compression import CompressionType, compress, decompress

    rng = random.Random(size)
    data = bytes(rng.choices(b"abc ", k=size)) if kind == "text" else rng.randbytes(size)
    frame = compress(CompressionType.LZ4, data)
    # Magic, FLG 0x60 (independent blocks, no checksums), BD 0x40 (64 KiB), header checksum (xxh32).
    assert frame[:7] == bytes.fromhex("04224d18604082")
    assert frame[-4:] == b"\0\0\0\0"
    assert decompress(CompressionType.LZ4, frame) == data
    assert bytes(cramjam.lz4.decompress(frame)) == data  # lz4's own frame decoder checks the header too
    if kind == "text" and size > 1000:
        assert len(frame) < size * 0.8  # four symbols: about 2 bits of 8


# ============================================================================================ prepare
@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd", "snappy"])
def test_prepared_batches_encode_to_the_same_bytes(codec: str) -> None:
    from kafka_handoff.producer.batch import ProducerBatch
    from kafka_handoff.protocol.compression import compression_type_from_name

    compression = compression_type_from_name(codec)
    batches = []
    for prepare in (False, True):
        batch = ProducerBatch(TopicPartition("t", 0), 0, 16384, 16384)
        batch.entries.extend((None, b"value %d " % i * 5, 1000 + i, None, None, None) for i in range(50))
        if prepare:
            batch.prepare(compression, None)
            assert batch.prepared is not None
        batch.set_producer_state(7, 1, 10)
        batch.encode(compression, None)
        batches.append(batch)
    plain, prepared = batches
    assert prepared.payload == plain.payload
    assert prepared.uncompressed_size == plain.uncompressed_size and prepared.max_timestamp == 1049
    assert prepared.prepared is None  # released after use


def test_a_batch_closed_because_it_is_full_is_handed_to_on_batch_full() -> None:
    acc = _acc()
    full: list[object] = []
    acc.on_batch_full = full.append
    for v in _values(9):
        acc.append("t", 0, (None, v, 0, None, None, None), SIZE, 0)
    assert full == []
    acc.append("t", 0, (None, b"x" * 88, 0, None, None, None), SIZE, 0)  # closes the first batch
    [first, _second] = acc.queued_batches(TopicPartition("t", 0))
    assert full == [first] and first.closed
    acc.append_many("t", 0, _values(20), None, 0, None, _convert)
    assert len(full) == 3 and all(b.closed and b.record_count == 9 for b in full)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("base", "append_ms"), [(100, 5000), (100, -1), (-1, 5000), (-1, -1)])
def test_record_metadata_in_c_equals_python(base: int, append_ms: int) -> None:
    from kafka_handoff.producer import future as future_module

    entries: list[Entry] = [(None, b"v", 1000 + i, None, None, None) for i in range(5)]
    py = future_module._py_record_metadata(RecordMetadata, "t", 3, base, append_ms, entries)
    offsets = [base + i if base >= 0 else -1 for i in range(5)]
    stamps = [append_ms if append_ms >= 0 else 1000 + i for i in range(5)]
    assert py == [RecordMetadata("t", 3, o, ts) for o, ts in zip(offsets, stamps, strict=True)]
    c = future_module.record_metadata(RecordMetadata, "t", 3, base, append_ms, entries)
    assert c == py and all(type(m) is RecordMetadata for m in c)
    assert c[1].offset == offsets[1] and c[1].timestamp == stamps[1]
    if future_module.record_metadata is not future_module._py_record_metadata:
        assert not any(gc.is_tracked(m) for m in c)
