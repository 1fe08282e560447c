"""Record batch v2 codec: hand-built byte vectors (written from the protocol spec, independent of the
encoder), encode/decode round trips (hypothesis), truncation, CRC and structural corruption, control batches,
read_committed filtering of aborted transactions, LogAppendTime, start offsets, compression framings."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.fetch.v17.response import AbortedTransaction

from kafka_handoff.errors import CorruptRecordError
from kafka_handoff.protocol import records as records_module
from kafka_handoff.protocol.compression import CompressionType
from kafka_handoff.protocol.records import (
    ControlType,
    DecodedRecords,
    RecordBatchBuilder,
    decode_batches,
    decode_batches_columnar,
    encode_batch,
    encode_control_batch,
    iter_batch_headers,
)
from kafka_handoff.types import ConsumerRecord

pytestmark = pytest.mark.unit

T0 = 1_600_000_000_000
ALL_CODECS = list(CompressionType)


# ---------------------------------------------------------------------------------------------------------
# an independent, deliberately naive writer following the spec (not the module's encoder)


def zz(value: int) -> bytes:
    """Zig-zag varint, written the slow obvious way."""
    u = value * 2 if value >= 0 else -value * 2 - 1
    out = b""
    while True:
        if u < 128:
            return out + bytes([u])
        out += bytes([(u % 128) + 128])
        u //= 128


def spec_record(
    offset_delta: int,
    ts_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    body = b"\x00" + zz(ts_delta) + zz(offset_delta)
    body += zz(-1) if key is None else zz(len(key)) + key
    body += zz(-1) if value is None else zz(len(value)) + value
    body += zz(len(headers))
    for hk, hv in headers:
        body += zz(len(hk.encode())) + hk.encode()
        body += zz(-1) if hv is None else zz(len(hv)) + hv
    return zz(len(body)) + body


def spec_batch(
    records: bytes,
    *,
    count: int,
    base_offset: int,
    last_offset_delta: int,
    base_ts: int = T0,
    max_ts: int = T0,
    attributes: int = 0,
    epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    magic: int = 2,
) -> bytes:
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            last_offset_delta,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        + records
    )
    crc = crc32c(after_crc)
    return struct.pack(">qiibI", base_offset, 4 + 1 + 4 + len(after_crc), epoch, magic, crc) + after_crc


def recrc(batch: bytes) -> bytes:
    """Recompute the CRC of a (deliberately damaged) single batch."""
    return batch[:17] + struct.pack(">I", crc32c(batch[21:])) + batch[21:]


def decode(data: bytes, **kw: object) -> DecodedRecords:
    kw.setdefault("topic", "t")
    kw.setdefault("partition", 3)
    return decode_batches(data, **kw)  # type: ignore[arg-type]


def triples(res: DecodedRecords) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in res.records]


# ---------------------------------------------------------------------------------------------------------
# hand-built vectors


def test_varint_vectors_of_the_spec_writer() -> None:
    # sanity of the test's own writer against values from the protobuf/Kafka zig-zag definition
    assert zz(0) == b"\x00"
    assert zz(-1) == b"\x01"
    assert zz(1) == b"\x02"
    assert zz(63) == b"\x7e"
    assert zz(-64) == b"\x7f"
    assert zz(64) == b"\x80\x01"
    assert zz(300) == b"\xd8\x04"
    assert zz(-(2**63)) == b"\xff" * 9 + b"\x01"


VARINT_VALUES = [0, -1, 1, 63, -64, 64, 8191, -8192, 8192, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]


@pytest.mark.parametrize("value", VARINT_VALUES)
def test_varint_reader_matches_the_spec_writer(value: int) -> None:
    encoded = zz(value)
    assert records_module._read_zz(encoded + b"tail", 0) == (value, len(encoded))


def test_varint_longer_than_ten_bytes_is_malformed() -> None:
    with pytest.raises(ValueError, match="longer than 10 bytes"):
        records_module._read_zz(b"\xff" * 11 + b"\x01", 0)


# fmt: off
HAND_RECORDS = (
    # length 17, attrs, tsDelta 0, offsetDelta 0, key "k1", value "hello", 1 header h=v
    b"\x22" + b"\x00" + b"\x00" + b"\x00" + b"\x04k1" + b"\x0ahello" + b"\x02" + b"\x02h" + b"\x02v"
    # length 6, attrs, tsDelta 5, offsetDelta 1, null key, null value, 0 headers
    + b"\x0c" + b"\x00" + b"\x0a" + b"\x02" + b"\x01" + b"\x01" + b"\x00"
)
# fmt: on


def test_hand_built_batch_decodes() -> None:
    batch = spec_batch(HAND_RECORDS, count=2, base_offset=100, last_offset_delta=1, max_ts=T0 + 5, epoch=5)
    assert len(batch) == 61 + 25
    assert batch[:12] == struct.pack(">qi", 100, 74)
    res = decode(batch)
    assert res.error is None
    assert res.records == [
        ConsumerRecord("t", 3, 100, T0, 0, b"k1", b"hello", (("h", b"v"),), 5, 2, 5),
        ConsumerRecord("t", 3, 101, T0 + 5, 0, None, None, (), 5, -1, -1),
    ]
    assert (res.next_offset, res.last_epoch, res.batches, res.bytes_consumed) == (102, 5, 1, len(batch))


def test_encoder_writes_the_hand_built_bytes() -> None:
    batch = spec_batch(HAND_RECORDS, count=2, base_offset=100, last_offset_delta=1, max_ts=T0 + 5, epoch=5)
    encoded = encode_batch(
        [(b"k1", b"hello", T0, [("h", b"v")]), (None, None, T0 + 5)],
        base_offset=100,
        partition_leader_epoch=5,
    )
    assert encoded == batch


def test_hand_built_multibyte_varints_and_header_variants() -> None:
    big = b"x" * 300  # two-byte length varints
    huge = b"y" * 20_000  # three-byte length varints
    recs = (
        spec_record(0, -70_000, big, huge, [("", None), ("k\u00e9y", b"")])
        + spec_record(70, 2**40, b"", b"z")  # two-byte offset delta, five-byte+ timestamp delta
        + spec_record(100_000, 3, None, big)  # three-byte offset delta
    )
    batch = spec_batch(recs, count=3, base_offset=7, last_offset_delta=100_000, base_ts=T0, max_ts=T0 + 2**40)
    for res in (decode(batch), decode(batch, check_crcs=False)):
        assert res.error is None
        r0, r1, r2 = res.records
        assert (r0.offset, r0.timestamp, r0.key, r0.value) == (7, T0 - 70_000, big, huge)
        assert r0.headers == (("", None), ("k\u00e9y", b""))
        assert (r1.offset, r1.timestamp, r1.key, r1.value, r1.headers) == (77, T0 + 2**40, b"", b"z", ())
        assert (r2.offset, r2.timestamp, r2.key, r2.value) == (100_007, T0 + 3, None, big)
        assert (r2.serialized_key_size, r2.serialized_value_size) == (-1, 300)
        assert res.next_offset == 100_008
    cols = decode_batches_columnar(batch, topic="t", partition=3).columns
    assert cols.offsets == [7, 77, 100_007]
    assert cols.values == [huge, b"z", big]
    assert cols.headers[0] == (("", None), ("k\u00e9y", b""))


def test_hand_built_compressed_batches_every_codec() -> None:
    recs = spec_record(0, 0, b"a", b"1" * 50) + spec_record(1, 1, b"b", b"2" * 50)
    payloads = {
        1: bytes(cramjam.gzip.compress(recs)),
        2: b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, 0) + b"",  # replaced below
        3: bytes(cramjam.lz4.compress(recs)),
        4: bytes(cramjam.zstd.compress(recs)),
    }
    raw = bytes(cramjam.snappy.compress_raw(recs))
    payloads[2] = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(raw)) + raw
    for codec, payload in payloads.items():
        batch = spec_batch(
            payload, count=2, base_offset=0, last_offset_delta=1, attributes=codec, max_ts=T0 + 1
        )
        res = decode(batch)
        assert res.error is None, codec
        assert triples(res) == [(0, b"a", b"1" * 50), (1, b"b", b"2" * 50)]


def test_hand_built_raw_snappy_decodes() -> None:
    # non-Java clients write bare snappy blocks
    recs = spec_record(0, 0, b"k", b"v" * 40)
    batch = spec_batch(bytes(cramjam.snappy.compress_raw(recs)), count=1, base_offset=9, last_offset_delta=0,
                       attributes=2)  # fmt: skip
    assert triples(decode(batch)) == [(9, b"k", b"v" * 40)]


def test_hand_built_multi_frame_payloads() -> None:
    r1, r2 = spec_record(0, 0, None, b"first"), spec_record(1, 0, None, b"second" * 100)
    frames = {
        3: bytes(cramjam.lz4.compress(r1)) + bytes(cramjam.lz4.compress(r2)),
        4: bytes(cramjam.zstd.compress(r1)) + bytes(cramjam.zstd.compress(r2)),
        1: bytes(cramjam.gzip.compress(r1)) + bytes(cramjam.gzip.compress(r2)),
    }
    for codec, payload in frames.items():
        batch = spec_batch(payload, count=2, base_offset=0, last_offset_delta=1, attributes=codec)
        assert [r.value for r in decode(batch).records] == [b"first", b"second" * 100], codec


def test_delete_horizon_bit_is_accepted() -> None:
    batch = spec_batch(spec_record(0, 4, b"k", b"v"), count=1, base_offset=0, last_offset_delta=0,
                       attributes=0x40, base_ts=T0)  # fmt: skip
    (header,) = iter_batch_headers(batch)
    assert header.has_delete_horizon
    assert [r.timestamp for r in decode(batch).records] == [T0 + 4]


def test_log_append_time_uses_max_timestamp() -> None:
    recs = spec_record(0, 0, None, b"a") + spec_record(1, 9, None, b"b")
    batch = spec_batch(recs, count=2, base_offset=0, last_offset_delta=1, attributes=0x08, max_ts=T0 + 1000)
    res = decode(batch)
    assert [(r.timestamp, r.timestamp_type) for r in res.records] == [(T0 + 1000, 1)] * 2
    cols = decode_batches_columnar(batch, topic="t", partition=0).columns
    assert cols.timestamps == [T0 + 1000] * 2
    assert cols.timestamp_types() == [1, 1]
    # and via the encoder
    enc = encode_batch([(None, b"a", T0), (None, b"b", T0 + 9)], timestamp_type=1, log_append_time=T0 + 1000,
                       compression=CompressionType.LZ4)  # fmt: skip
    assert [(r.timestamp, r.timestamp_type) for r in decode(enc).records] == [(T0 + 1000, 1)] * 2


# ---------------------------------------------------------------------------------------------------------
# round trips

headers_st = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3)
record_st = st.tuples(
    st.none() | st.binary(max_size=300),
    st.none() | st.binary(max_size=300),
    st.integers(min_value=-(2**40), max_value=2**40),
    headers_st,
)


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(
        st.tuples(
            st.lists(record_st, min_size=1, max_size=30),
            st.sampled_from(ALL_CODECS),
            st.integers(min_value=0, max_value=5),  # gap between offsets (compaction)
            st.integers(min_value=-1, max_value=1000),  # leader epoch
        ),
        min_size=1,
        max_size=4,
    ),
    base=st.integers(min_value=0, max_value=2**50),
)
def test_round_trip_property(
    batches: list[tuple[list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]],
                       CompressionType, int, int]],
    base: int,
) -> None:  # fmt: skip
    data = b""
    expected: list[ConsumerRecord] = []
    offset = base
    for recs, codec, gap, epoch in batches:
        builder = RecordBatchBuilder(base_offset=offset, compression=codec, partition_leader_epoch=epoch)
        for i, (k, v, ts, hs) in enumerate(recs):
            delta = builder.append(k, v, T0 + ts, hs, offset_delta=i * (gap + 1))
            leader_epoch = None if epoch < 0 else epoch
            key_size, value_size = -1 if k is None else len(k), -1 if v is None else len(v)
            expected.append(
                ConsumerRecord(
                    "t", 3, offset + delta, T0 + ts, 0, k, v, tuple(hs), leader_epoch, key_size, value_size
                )
            )
        data += builder.build()
        offset += (len(recs) - 1) * (gap + 1) + 1
    res = decode(data)
    assert res.error is None
    assert res.records == expected
    assert res.next_offset == offset
    assert res.batches == len(batches)
    assert res.bytes_consumed == len(data)
    cols = decode_batches_columnar(memoryview(data), topic="t", partition=3)
    assert cols.columns.to_records("t", 3) == expected
    assert cols.next_offset == offset


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.config_name)
def test_many_records_every_codec(codec: CompressionType) -> None:
    recs = [(str(i).encode() if i % 3 else None, bytes([i % 256]) * (i % 500), T0 + i) for i in range(3000)]
    batch = encode_batch(recs, base_offset=1_000_000, compression=codec)
    res = decode(batch)
    assert res.error is None
    assert [(r.offset, r.key, r.value, r.timestamp) for r in res.records] == [
        (1_000_000 + i, k, v, ts) for i, (k, v, ts) in enumerate(recs)
    ]
    (header,) = iter_batch_headers(batch)
    assert header.compression == codec
    assert (header.base_timestamp, header.max_timestamp, header.records_count) == (T0, T0 + 2999, 3000)


def test_encoder_header_fields_and_attributes() -> None:
    batch = encode_batch(
        [(b"k", b"v", T0 + 5), (b"k", b"v", T0 + 2)],
        base_offset=42,
        compression=CompressionType.ZSTD,
        producer_id=77,
        producer_epoch=3,
        base_sequence=10,
        transactional=True,
        partition_leader_epoch=9,
    )
    (h,) = iter_batch_headers(batch)
    assert (h.base_offset, h.partition_leader_epoch, h.magic, h.last_offset_delta) == (42, 9, 2, 1)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (77, 3, 10, 2)
    assert (h.base_timestamp, h.max_timestamp) == (T0 + 5, T0 + 5)
    assert h.attributes == 0x10 | 4
    assert h.is_transactional and not h.is_control
    assert h.crc == crc32c(batch[21:])
    assert h.size_in_bytes == len(batch)


def test_builder_size_tracks_uncompressed_bytes() -> None:
    builder = RecordBatchBuilder()
    assert builder.size_in_bytes == 61
    for i in range(10):
        builder.append(b"key", b"v" * i, T0, [("h", b"1")] if i % 2 else ())
    assert builder.count == 10
    assert builder.size_in_bytes == len(builder.build())


def test_empty_batch_advances_next_offset() -> None:
    empty = RecordBatchBuilder(base_offset=10).build(last_offset_delta=4)
    later = encode_batch([(None, b"x", T0)], base_offset=15)
    res = decode(empty + later, start_offset=10)
    assert triples(res) == [(15, None, b"x")]
    res = decode(empty, start_offset=10)
    assert (res.records, res.next_offset, res.batches) == ([], 15, 1)


def test_accepts_bytes_subclass_bytearray_and_memoryview() -> None:
    class Records(bytes):
        pass

    batch = encode_batch([(b"k", b"v", T0)], base_offset=3)
    for data in (Records(batch), bytearray(batch), memoryview(batch)):
        assert triples(decode(data)) == [(3, b"k", b"v")]  # type: ignore[arg-type]


def test_none_and_empty_data() -> None:
    for data in (None, b""):
        res = decode(data, start_offset=7)  # type: ignore[arg-type]
        assert (res.records, res.next_offset, res.batches) == ([], 7, 0)
        assert (res.partial_bytes, res.error) == (0, None)


def test_fast_record_construction_is_active() -> None:
    # If ConsumerRecord gains fields, records.py must learn them (meanwhile the slow constructor is used).
    assert records_module._FAST_NEW
    assert tuple(f.name for f in dataclasses.fields(ConsumerRecord)) == records_module._CONSUMER_RECORD_FIELDS


def test_slow_construction_path_gives_equal_records(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = encode_batch([(b"k", b"v", T0), (None, None, T0 + 1, [("a", None)])], partition_leader_epoch=2)
    fast = decode(batch).records
    monkeypatch.setattr(records_module, "_FAST_NEW", False)
    assert decode(batch).records == fast


# ---------------------------------------------------------------------------------------------------------
# truncation and corruption


def _three_batches() -> tuple[bytes, bytes, bytes]:
    b1 = encode_batch([(b"a", b"1", T0), (b"b", b"2", T0)], base_offset=0, partition_leader_epoch=4)
    b2 = encode_batch([(b"c", b"3" * 40, T0)], base_offset=2, partition_leader_epoch=4)
    b3 = encode_batch(
        [(b"d", b"4", T0)], base_offset=3, compression=CompressionType.LZ4, partition_leader_epoch=5
    )
    return b1, b2, b3


def test_truncated_trailing_batch_is_ignored_at_every_cut() -> None:
    b1, b2, _ = _three_batches()
    for cut in range(len(b2)):
        res = decode(b1 + b2[:cut])
        assert res.error is None
        assert triples(res) == [(0, b"a", b"1"), (1, b"b", b"2")]
        assert (res.next_offset, res.partial_bytes, res.bytes_consumed) == (2, cut, len(b1))


def test_only_a_partial_batch() -> None:
    b1, _, _ = _three_batches()
    res = decode(b1[:40], start_offset=0)
    assert (res.records, res.next_offset, res.batches, res.partial_bytes, res.error) == ([], 0, 0, 40, None)


def _assert_corrupt_at(res: DecodedRecords, offset: int, pattern: str) -> CorruptRecordError:
    err = res.error
    assert isinstance(err, CorruptRecordError)
    assert (err.topic, err.partition, err.offset) == ("t", 3, offset)
    assert f"topic t, partition 3, batch at offset {offset}" in str(err)
    assert pattern in str(err), str(err)
    with pytest.raises(CorruptRecordError):
        res.raise_error()
    return err


def test_crc_mismatch_keeps_earlier_batches() -> None:
    b1, b2, b3 = _three_batches()
    bad = bytearray(b2)
    bad[-5] ^= 0xFF  # inside the value
    for decoder in (decode_batches, decode_batches_columnar):
        res = decoder(bytes(b1 + bad + b3), topic="t", partition=3)
        _assert_corrupt_at(res, 2, "CRC mismatch")  # type: ignore[arg-type]
        assert (res.next_offset, res.last_epoch, res.batches, res.bytes_consumed) == (2, 4, 1, len(b1))
    assert triples(decode(b1 + bad + b3)) == [(0, b"a", b"1"), (1, b"b", b"2")]
    assert decode_batches_columnar(b1 + bad + b3, topic="t", partition=3).columns.offsets == [0, 1]


def test_check_crcs_false_skips_verification() -> None:
    b1, b2, b3 = _three_batches()
    bad = bytearray(b2)
    bad[-5] ^= 0xFF
    res = decode(b1 + bytes(bad) + b3, check_crcs=False)
    assert res.error is None
    assert [r.offset for r in res.records] == [0, 1, 2, 3]
    expected = bytearray(b"3" * 40)
    expected[-4] ^= 0xFF  # the last byte of the batch is the record's header count
    assert res.records[2].value == bytes(expected)


def test_crc_mismatch_in_header_fields_and_compressed_payload() -> None:
    b1, _, b3 = _three_batches()
    for index in (21, 30, len(b3) - 2):  # attributes, baseTimestamp, lz4 payload
        bad = bytearray(b3)
        bad[index] ^= 0x01
        _assert_corrupt_at(decode(b1 + bytes(bad)), 3, "CRC mismatch")


def _structural_cases() -> dict[str, tuple[bytes, str]]:
    ok = spec_record(0, 0, b"k", b"v") + spec_record(1, 0, b"k", b"v")

    def batch(recs: bytes, count: int = 2, attributes: int = 0) -> bytes:
        return spec_batch(recs, count=count, base_offset=5, last_offset_delta=1, attributes=attributes)

    wrong_len = b"\x0e" + spec_record(0, 0, b"k", b"v")[1:]  # length field one too small
    assert len(ok) == 18 and ok[0] == 0x10
    return {
        "count too high": (batch(ok, count=3), "record extends past the end"),
        "count too low": (batch(ok, count=1), "bytes left after the declared record count"),
        "record length": (batch(wrong_len + spec_record(1, 0, b"k", b"v")), "record length says"),
        "negative key length": (batch(b"\x10\x00\x00\x00\x03k\x02v\x00" + ok[9:]), "invalid key length -2"),
        "negative value length": (
            batch(b"\x10\x00\x00\x00\x02k\x05v\x00" + ok[9:]),
            "invalid value length -3",
        ),
        "bad header key": (batch(b"\x16\x00\x00\x00\x02k\x02v\x02\x02\xff\x01" + ok[9:]), "utf-8"),
        "bad lz4 payload": (batch(b"garbage-not-lz4", attributes=3), "lz4 decompression failed"),
        "unknown codec": (batch(ok, attributes=5), "unknown compression codec id 5"),
        "negative count": (batch(ok, count=-1), "invalid record count -1"),
        "negative last offset delta": (
            spec_batch(ok, count=2, base_offset=5, last_offset_delta=-1),
            "invalid last offset delta -1",
        ),
    }


@pytest.mark.parametrize("case", list(_structural_cases()))
def test_structurally_bad_batch_with_valid_crc(case: str) -> None:
    bad, pattern = _structural_cases()[case]
    good = encode_batch([(None, b"ok", T0)], base_offset=4)
    for check in (True, False):
        res = decode(good + bad, check_crcs=check)
        _assert_corrupt_at(res, 5, pattern)
        assert triples(res) == [(4, None, b"ok")]
        assert res.next_offset == 5
        cols = decode_batches_columnar(good + bad, topic="t", partition=3, check_crcs=check)
        assert cols.columns.offsets == [4] and cols.columns.batch_starts == [0]


def test_too_small_batch_sizes_are_corrupt() -> None:
    good = encode_batch([(None, b"ok", T0)], base_offset=4)
    tiny = struct.pack(">qi", 5, 10) + b"\x00" * 10
    _assert_corrupt_at(decode(good + tiny), 5, "smaller than the minimum 14")
    short_v2 = struct.pack(">qii", 5, 20, -1) + b"\x02" + b"\x00" * 15
    _assert_corrupt_at(decode(good + short_v2), 5, "smaller than the minimum 61")


def test_legacy_magic_is_rejected_clearly() -> None:
    good = encode_batch([(None, b"ok", T0)], base_offset=4)
    # a magic-1 message: offset, size, crc, magic 1, attributes, timestamp, key -1, value "v"
    msg = struct.pack(">IbbqiI", 0, 1, 0, T0, -1, 1) + b"v"
    legacy = struct.pack(">qi", 5, len(msg)) + msg
    res = decode(good + legacy)
    _assert_corrupt_at(res, 5, "legacy message format (magic 1) is not supported")
    assert triples(res) == [(4, None, b"ok")]


# ---------------------------------------------------------------------------------------------------------
# start offset, control batches, transactions


def test_start_offset_mid_batch() -> None:
    batch = encode_batch([(None, str(i).encode(), T0 + i) for i in range(10)], base_offset=100)
    later = encode_batch([(None, b"x", T0)], base_offset=110, compression=CompressionType.GZIP)
    res = decode(batch + later, start_offset=105)
    assert [r.offset for r in res.records] == [105, 106, 107, 108, 109, 110]
    assert res.next_offset == 111
    cols = decode_batches_columnar(batch + later, topic="t", partition=3, start_offset=105).columns
    assert cols.offsets == [105, 106, 107, 108, 109, 110]
    assert cols.values[0] == b"5" and cols.timestamps[0] == T0 + 5
    assert cols.batch_starts == [0, 5]


def test_start_offset_past_the_data() -> None:
    batch = encode_batch([(None, b"v", T0)] * 3, base_offset=0)
    res = decode(batch, start_offset=50)
    assert (res.records, res.next_offset, res.batches) == ([], 50, 1)


def test_control_batches_are_hidden_but_advance_the_position() -> None:
    data = encode_batch(
        [(None, b"a", T0)], base_offset=0, producer_id=5, producer_epoch=0, transactional=True
    ) + encode_control_batch(ControlType.COMMIT, base_offset=1, producer_id=5, producer_epoch=0, timestamp=T0)
    for read_committed in (False, True):
        res = decode(data, read_committed=read_committed)
        assert triples(res) == [(0, None, b"a")]
        assert (res.next_offset, res.control_batches, res.batches) == (2, 1, 2)
        cols = decode_batches_columnar(data, topic="t", partition=3, read_committed=read_committed)
        assert cols.columns.offsets == [0] and cols.next_offset == 2


def test_control_batch_layout() -> None:
    marker = encode_control_batch(ControlType.ABORT, base_offset=8, producer_id=5, producer_epoch=2,
                                  timestamp=T0, coordinator_epoch=7)  # fmt: skip
    (h,) = iter_batch_headers(marker)
    assert h.is_control and h.is_transactional and h.records_count == 1
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (5, 2, -1)
    body = spec_record(0, 0, struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 7))
    assert marker == spec_batch(body, count=1, base_offset=8, last_offset_delta=0, attributes=0x30,
                                producer_id=5, producer_epoch=2)  # fmt: skip
    assert records_module.parse_control_key(struct.pack(">hh", 0, 1)) is ControlType.COMMIT
    assert records_module.parse_control_key(struct.pack(">hh", 0, 9)) == 9


P1, P2 = 1000, 2000


def _txn(offset: int, pid: int, *values: bytes) -> bytes:
    return encode_batch(
        [(None, v, T0) for v in values],
        base_offset=offset,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
        compression=CompressionType.SNAPPY,
    )


def _marker(kind: ControlType, offset: int, pid: int) -> bytes:
    return encode_control_batch(kind, base_offset=offset, producer_id=pid, producer_epoch=0, timestamp=T0)


def _txn_log(second_p1_txn: ControlType) -> bytes:
    return (
        _txn(0, P1, b"p1-a", b"p1-b", b"p1-c")  # 0-2, P1 txn (aborted)
        + _txn(3, P2, b"p2-a", b"p2-b")  # 3-4, P2 txn (committed)
        + _marker(ControlType.ABORT, 5, P1)
        + _marker(ControlType.COMMIT, 6, P2)
        + encode_batch([(None, b"plain-a", T0), (None, b"plain-b", T0)], base_offset=7)  # 7-8 non-txn
        + _txn(9, P1, b"p1-d", b"p1-e")  # 9-10, P1's next txn
        + _marker(second_p1_txn, 11, P1)
    )


def _values(res: DecodedRecords) -> list[bytes | None]:
    return [r.value for r in res.records]


def test_read_committed_filters_aborted_transactions() -> None:
    data = _txn_log(ControlType.COMMIT)
    res = decode(data, read_committed=True, aborted_transactions=[(P1, 0)])
    assert _values(res) == [b"p2-a", b"p2-b", b"plain-a", b"plain-b", b"p1-d", b"p1-e"]
    assert (res.next_offset, res.aborted_batches, res.aborted_records, res.control_batches) == (12, 1, 3, 3)
    # kio's AbortedTransaction objects work as well
    kio_aborted = (AbortedTransaction(producer_id=P1, first_offset=0),)  # type: ignore[arg-type]
    assert _values(decode(data, read_committed=True, aborted_transactions=kio_aborted)) == _values(res)
    cols = decode_batches_columnar(
        data, topic="t", partition=3, read_committed=True, aborted_transactions=[(P1, 0)]
    )
    assert cols.columns.values == _values(res)


def test_read_uncommitted_returns_aborted_data() -> None:
    res = decode(_txn_log(ControlType.COMMIT), aborted_transactions=[(P1, 0)])
    assert [r.offset for r in res.records] == [0, 1, 2, 3, 4, 7, 8, 9, 10]
    assert res.aborted_batches == 0


def test_abort_marker_deactivates_producer_and_later_abort_reactivates() -> None:
    data = _txn_log(ControlType.ABORT)
    # only the first transaction listed: P1's second transaction is not aborted per the broker's list
    assert _values(decode(data, read_committed=True, aborted_transactions=[(P1, 0)]))[-2:] == [
        b"p1-d",
        b"p1-e",
    ]
    # both listed (out of order on purpose): both dropped
    res = decode(data, read_committed=True, aborted_transactions=[(P1, 9), (P1, 0)])
    assert _values(res) == [b"p2-a", b"p2-b", b"plain-a", b"plain-b"]
    assert (res.aborted_batches, res.next_offset) == (2, 12)


def test_all_records_filtered_still_moves_next_offset() -> None:
    data = _txn(0, P1, b"x", b"y") + _marker(ControlType.ABORT, 2, P1)
    res = decode(data, read_committed=True, aborted_transactions=[(P1, 0)])
    assert (res.records, res.next_offset, res.batches, res.error) == ([], 3, 2, None)


def test_aborted_transaction_starting_inside_a_batch_activates() -> None:
    # Java activates aborted producers whose first offset is <= the batch's *last* offset
    data = _txn(10, P1, b"x", b"y", b"z") + _marker(ControlType.ABORT, 13, P1)
    res = decode(data, read_committed=True, aborted_transactions=[(P1, 12)], start_offset=10)
    assert res.records == [] and res.next_offset == 14


def test_non_transactional_batch_of_aborted_producer_is_kept() -> None:
    plain = encode_batch([(None, b"idempotent", T0)], base_offset=0, producer_id=P1, producer_epoch=0,
                         base_sequence=0)  # fmt: skip
    res = decode(plain, read_committed=True, aborted_transactions=[(P1, 0)])
    assert _values(res) == [b"idempotent"]


# ---------------------------------------------------------------------------------------------------------
# columnar specifics


def test_columnar_per_batch_values_expand() -> None:
    b1 = encode_batch([(b"a", b"1", T0), (b"b", b"2", T0)], base_offset=0, partition_leader_epoch=3)
    b2 = encode_batch([(b"c", b"3", T0)], base_offset=2, timestamp_type=1, log_append_time=T0 + 50)
    res = decode_batches_columnar(b1 + b2, topic="t", partition=1)
    cols = res.columns
    assert len(cols) == 3
    assert cols.batch_starts == [0, 2]
    assert cols.timestamp_types() == [0, 0, 1]
    assert cols.leader_epochs() == [3, 3, None]
    assert cols.timestamps == [T0, T0, T0 + 50]
    assert cols.to_records("t", 1) == decode_batches(b1 + b2, topic="t", partition=1).records
    assert res.last_epoch is None  # the last batch had no epoch
