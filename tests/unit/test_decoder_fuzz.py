"""Decoder fuzzing (issue 13, item 7): mutated record batches and mutated responses never escape the error
hierarchy.

Properties, for the pure-Python and the C per-record loop and for the three result forms (objects, columns as
lists, columns as Arrow-layout buffers -- ``decode_batches_buffers``, the C ``records_to_buffers``):

* decoding never raises: a bad batch ends up in ``result.error`` as a :class:`CorruptRecordError` naming
  topic, partition and the offset of the bad batch; the records before it are kept;
* the two implementations agree on everything observable (records, positions, error message; for the buffers
  form every buffer byte for byte), and the buffers hold the same rows as the list form;
* with ``check_crcs`` a mutation of CRC-covered bytes never yields a record that was not in the input;
* lying length and count fields (with a recomputed, valid CRC) are caught, and no length field makes the
  decoder allocate more than a small multiple of its input (checked with ``tracemalloc``);
* response frames: :func:`~kafka_handoff.protocol.wire.decode_response` raises only
  :class:`~kafka_handoff.errors.KafkaError` subclasses (``ProtocolError``) for any damaged frame.

Runs are bounded (``max_examples``) so the module stays well under 30 s.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_handoff.errors import CorruptRecordError, KafkaError
from kafka_handoff.protocol import records, wire
from kafka_handoff.protocol.compression import CompressionType
from kafka_handoff.protocol.records import (
    DecodedBuffers,
    DecodedColumns,
    DecodedRecords,
    decode_batches,
    decode_batches_buffers,
    decode_batches_columnar,
    encode_batch,
    encode_control_batch,
)

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
TOPIC = "fuzzed"
PARTITION = 7
IMPLS = records.available_implementations()
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INT32_EXTREMES = [0, 1, -1, -2, 13, 60, 61, 2**31 - 1, 2**31 - 12, -(2**31), 2**30, 1 << 24]


def _recrc(data: bytearray, pos: int) -> None:
    """Recompute the CRC of the batch at ``pos`` in place (when its length field still fits the data)."""
    if len(data) - pos < 61:
        return
    (length,) = struct.unpack_from(">i", data, pos + 8)
    end = pos + 12 + length
    if length < 49 or end > len(data):
        return
    struct.pack_into(">I", data, pos + 17, crc32c(bytes(data[pos + 21 : end])))


def _batches(offset: int = 100) -> list[bytes]:
    """A varied fetch payload: plain, headers, every codec, a transaction marker."""
    out = []
    for i, codec in enumerate(CompressionType):
        recs: list[Any] = [
            (b"k%d" % j, b"v" * (j * 7 % 40), T0 + j, [("h", b"x" * j), ("n", None)] if j % 2 else [])
            for j in range(3 + i)
        ]
        out.append(encode_batch(recs, base_offset=offset, compression=codec, partition_leader_epoch=i))
        offset += len(recs)
    out.append(encode_control_batch(1, base_offset=offset, producer_id=5, producer_epoch=0, timestamp=T0))
    return out


BATCHES = _batches()
PAYLOAD = b"".join(BATCHES)
BATCH_STARTS = [sum(len(b) for b in BATCHES[:i]) for i in range(len(BATCHES))]


def _key(r: Any) -> tuple[Any, ...]:
    return (r.offset, r.timestamp, r.key, r.value, tuple(r.headers))


ORIGINAL = {_key(r) for r in decode_batches(PAYLOAD, topic=TOPIC, partition=PARTITION).records}


def _with(impl: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    previous = records.IMPLEMENTATION
    records._use_implementation(impl)  # type: ignore[arg-type]
    try:
        return fn(*args, **kw)
    finally:
        records._use_implementation(previous)


Decoded = DecodedRecords | DecodedColumns | DecodedBuffers
DECODERS: tuple[Callable[..., Any], ...] = (decode_batches, decode_batches_columnar, decode_batches_buffers)


def _observable(res: Decoded) -> tuple[Any, ...]:
    err = res.error
    error = None if err is None else (type(err), str(err), err.topic, err.partition, err.offset)
    if isinstance(res, DecodedRecords):
        rows: Any = [(*_key(r), r.leader_epoch) for r in res.records]
    elif isinstance(res, DecodedBuffers):
        b = res.columns
        rows = (b.parts(), b.batch_starts, b.batch_timestamp_types, b.batch_leader_epochs)
    else:
        c = res.columns
        rows = (c.offsets, c.timestamps, c.keys, c.values, c.headers, c.batch_starts, c.batch_leader_epochs)
    return (res.next_offset, res.batches, res.bytes_consumed, res.partial_bytes, error, rows)


def _decode_all(data: bytes, check_crcs: bool, **kw: Any) -> list[Decoded]:
    """Decode with every implementation and form; assert the invariants every result must hold."""
    results: list[Decoded] = []
    for decoder in DECODERS:
        seen = []
        for impl in IMPLS:
            res = _with(impl, decoder, data, topic=TOPIC, partition=PARTITION, check_crcs=check_crcs, **kw)
            err = res.error
            if err is not None:
                assert isinstance(err, CorruptRecordError), repr(err)
                assert (err.topic, err.partition) == (TOPIC, PARTITION)
                assert f"topic {TOPIC}, partition {PARTITION}, batch at offset {err.offset})" in str(err)
                with pytest.raises(CorruptRecordError):
                    res.raise_error()
            seen.append(_observable(res))
            results.append(res)
        assert all(s == seen[0] for s in seen), f"implementations differ for {decoder.__name__}"
    _same_rows_as_lists(results)
    return results


def _same_rows_as_lists(results: list[Decoded]) -> None:
    """The buffers form holds the list form's rows -- unless it stopped at a record whose offset or timestamp
    does not fit int64 (the list form keeps Python ints), which is then its only difference."""
    lists = next(r for r in results if isinstance(r, DecodedColumns))
    for res in results:
        if not isinstance(res, DecodedBuffers):
            continue
        b = res.columns
        if res.error is not None and "outside the int64 range" in str(res.error):
            assert lists.error is None or lists.error.offset >= res.error.offset
            continue
        c = lists.columns
        got = b.to_lists()
        assert (got.offsets, got.timestamps, got.keys, got.values, got.headers) == (
            c.offsets, c.timestamps, c.keys, c.values, c.headers,
        )  # fmt: skip
        assert (b.batch_starts, b.batch_leader_epochs) == (c.batch_starts, c.batch_leader_epochs)
        assert _observable(res)[:5] == _observable(lists)[:5]


def _records_of(results: list[Decoded]) -> Iterator[tuple[Any, ...]]:
    for res in results:
        if isinstance(res, DecodedRecords):
            yield from (_key(r) for r in res.records)


# ---------------------------------------------------------------------------------------------------------
# mutations


@st.composite
def mutated(draw: st.DrawFn) -> tuple[bytes, bool]:
    """(damaged payload, whether every change is in CRC-covered bytes and left the CRC alone)."""
    data = bytearray(PAYLOAD)
    covered_only = True
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "set", "cut", "truncate", "insert", "int32", "varint"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        batch_off = max(s for s in BATCH_STARTS if s <= i) if i < len(PAYLOAD) else 0
        in_covered = i - batch_off >= 21
        if kind == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            data[i] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[i : i + draw(st.integers(1, 16))]
            covered_only = False
        elif kind == "truncate":
            del data[i:]
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=16))
            covered_only = False
        elif kind == "int32":
            j = min(i, len(data) - 4)
            if j < 0:
                continue
            struct.pack_into(">i", data, j, draw(st.sampled_from(INT32_EXTREMES)))
            in_covered = j - batch_off >= 21
        else:  # a varint replaced by a long or huge one
            value = draw(st.sampled_from([2**31, -(2**31), 2**62, -(2**63), 2**63 - 1, -3, 10**6]))
            u = (value << 1) ^ (value >> 63)
            enc = bytearray()
            u &= (1 << 64) - 1
            while u >= 0x80:
                enc.append((u & 0x7F) | 0x80)
                u >>= 7
            enc.append(u)
            data[i : i + 1] = enc
            covered_only = False
        if kind != "truncate" and not in_covered:
            covered_only = False
    if draw(st.booleans()):
        covered_only = False
        for start in BATCH_STARTS:
            _recrc(data, start)
    return bytes(data), covered_only


@FUZZ
@given(case=mutated(), check_crcs=st.booleans(), read_committed=st.booleans())
def test_mutated_batches_fail_only_with_corrupt_record_error(
    case: tuple[bytes, bool], check_crcs: bool, read_committed: bool
) -> None:
    data, covered_only = case
    kw: dict[str, Any] = (
        {"read_committed": True, "aborted_transactions": [(5, 100)]} if read_committed else {}
    )
    results = _decode_all(data, check_crcs, **kw)
    if check_crcs and covered_only:
        # The CRC covers these bytes: whatever decodes is one of the original records.
        for rec in _records_of(results):
            assert rec in ORIGINAL


@FUZZ
@given(data=st.binary(max_size=300), check_crcs=st.booleans())
def test_random_bytes(data: bytes, check_crcs: bool) -> None:
    _decode_all(data, check_crcs)
    _decode_all(PAYLOAD[:61] + data, check_crcs)


def test_mutated_batches_reach_every_byte() -> None:
    """Deterministic sweep: every single-bit flip of the payload is caught by the CRC (or framing)."""
    for i in range(len(PAYLOAD)):
        data = bytearray(PAYLOAD)
        data[i] ^= 0x10
        results = _decode_all(bytes(data), True)
        batch_off = max(s for s in BATCH_STARTS if s <= i)
        if i - batch_off >= 21 or 8 <= i - batch_off < 12 or 16 <= i - batch_off < 21:
            # covered bytes, length, magic and crc: the damaged batch and everything after it is not returned
            damaged = BATCH_STARTS.index(batch_off)
            for res in results:
                assert res.batches <= damaged
                assert res.error is not None or res.partial_bytes > 0


# ---------------------------------------------------------------------------------------------------------
# lying fields with a valid CRC


def _set_field(batch: bytes, offset: int, fmt: str, value: int) -> bytes:
    data = bytearray(batch)
    struct.pack_into(fmt, data, offset, value)
    _recrc(data, 0)
    return bytes(data)


@FUZZ
@given(
    index=st.integers(0, len(BATCHES) - 2),  # data batches (a control batch is only parsed in read_committed)
    count=st.one_of(st.sampled_from(INT32_EXTREMES), st.integers(-(2**31), 2**31 - 1)),
)
def test_record_count_that_lies_is_caught(index: int, count: int) -> None:
    """Regression: a count of 0 on a batch with records skipped them silently (the count went unchecked)."""
    batch = BATCHES[index]
    true_count = struct.unpack_from(">i", batch, 57)[0]
    bad = _set_field(batch, 57, ">i", count)
    prefix = b"".join(BATCHES[:index])
    results = _decode_all(prefix + bad + BATCHES[-1], True)
    results += _decode_all(prefix + bad + BATCHES[-1], True, read_committed=True)
    for res in results:
        if count == true_count:
            assert res.error is None
        else:
            assert res.error is not None
            assert res.error.offset == struct.unpack_from(">q", batch, 0)[0]
            assert res.batches == index


@FUZZ
@given(index=st.integers(0, len(BATCHES) - 1), length=st.sampled_from(INT32_EXTREMES))
def test_batch_length_that_lies(index: int, length: int) -> None:
    batch = BATCHES[index]
    bad = bytearray(batch)
    struct.pack_into(">i", bad, 8, length)
    prefix = b"".join(BATCHES[:index])
    for res in _decode_all(prefix + bytes(bad) + BATCHES[-1], True):
        assert res.batches >= index  # the batches before it are kept
        if length + 12 > len(bad) + len(BATCHES[-1]):
            assert res.error is None and res.partial_bytes > 0  # a batch cut by the fetch limit: ignored
        elif length != struct.unpack_from(">i", batch, 8)[0]:
            assert res.error is not None and res.batches == index


def _traced_peak(fn: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


HUGE = [2**31 - 1, 2**31, 2**40, 2**62, 2**63 - 1]


def _zz(value: int) -> bytes:
    u = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def _raw_batch(body: bytes, count: int = 1) -> bytes:
    tail = struct.pack(">hiqqqhii", 0, 0, T0, T0, -1, -1, -1, count) + body
    head = struct.pack(">qiibI", 50, 9 + len(tail), 0, 2, crc32c(tail))
    return head + tail


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("form", [0, 1, 2], ids=["objects", "columns", "buffers"])
@pytest.mark.parametrize("field", ["record", "key", "value", "header count", "header key", "header value"])
@pytest.mark.parametrize("value", HUGE)
def test_huge_length_fields_do_not_allocate(impl: str, form: int, field: str, value: int) -> None:
    pieces = {
        "record": _zz(value) + b"\x00\x00\x00\x02k\x02v\x00",
        "key": b"\x10\x00\x00\x00" + _zz(value) + b"k" * 8,
        "value": b"\x10\x00\x00\x00\x02k" + _zz(value) + b"v" * 8,
        "header count": b"\x10\x00\x00\x00\x02k\x02v" + _zz(value) + b"\x02h\x02x" * 4,
        "header key": b"\x10\x00\x00\x00\x02k\x02v\x02" + _zz(value) + b"h" * 8,
        "header value": b"\x10\x00\x00\x00\x02k\x02v\x02\x02h" + _zz(value) + b"x" * 8,
    }
    data = _raw_batch(pieces[field]) + encode_batch([(None, b"after", T0)], base_offset=51)
    decoder = DECODERS[form]
    results: list[Any] = []
    peak = _traced_peak(lambda: results.append(_with(impl, decoder, data, topic=TOPIC, partition=PARTITION)))
    assert peak < 64 * 1024, peak
    err = results[0].error
    assert isinstance(err, CorruptRecordError) and err.offset == 50


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("count", [2**31 - 1, 10**6])
@pytest.mark.parametrize("buffers", [False, True], ids=["objects", "buffers"])
def test_huge_record_count_does_not_allocate(impl: str, count: int, buffers: bool) -> None:
    data = _raw_batch(b"\x10\x00\x00\x00\x02k\x02v\x00", count=count)
    decoder = decode_batches_buffers if buffers else decode_batches
    results: list[Any] = []
    peak = _traced_peak(lambda: results.append(_with(impl, decoder, data, topic=TOPIC, partition=PARTITION)))
    assert peak < 64 * 1024, peak
    assert isinstance(results[0].error, CorruptRecordError)
    assert len(results[0].columns if buffers else results[0].records) == 0


@pytest.mark.parametrize("codec", [c for c in CompressionType if c])
@pytest.mark.parametrize(
    "garbage", [b"", b"\x00", b"\xff" * 40, b"\x28\xb5\x2f\xfd\xe0" + b"\xff" * 8 + b"\x00"]
)
def test_bad_compressed_payloads(codec: CompressionType, garbage: bytes) -> None:
    tail = struct.pack(">hiqqqhii", int(codec), 0, T0, T0, -1, -1, -1, 1) + garbage
    batch = struct.pack(">qiibI", 70, 9 + len(tail), 0, 2, crc32c(tail)) + tail
    for res in _decode_all(batch, True):
        assert isinstance(res.error, CorruptRecordError) and res.error.offset == 70


@pytest.mark.parametrize("codec", [c for c in CompressionType if c])
def test_compressed_payload_with_trailing_or_missing_records(codec: CompressionType) -> None:
    good = encode_batch([(b"k", b"v", T0), (b"k2", b"v2", T0)], base_offset=80, compression=codec)
    for count in (0, 1, 3, 2**31 - 1):
        bad = _set_field(good, 57, ">i", count)
        for res in _decode_all(bad, True):
            assert isinstance(res.error, CorruptRecordError) and res.error.offset == 80


# ---------------------------------------------------------------------------------------------------------
# responses


def _fetch_response(version: int) -> bytes:
    partition = {
        "partition_index": 0,
        "error_code": 0,
        "high_watermark": 10,
        "last_stable_offset": 10,
        "log_start_offset": 0,
        "aborted_transactions": [{"producer_id": 1, "first_offset": 2}],
        "preferred_read_replica": -1,
        "records": BATCHES[0],
    }
    topic = {"topic": "t", "topic_id": __import__("uuid").UUID(int=5), "partitions": [partition]}
    resp = wire.build_response(
        1, version, {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [topic]}
    )
    return wire.encode_response(resp, 42)


def _metadata_response(version: int) -> bytes:
    resp = wire.build_response(
        3,
        version,
        {
            "throttle_time": 0,
            "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
            "cluster_id": "c",
            "controller_id": 1,
            "topics": [
                {
                    "error_code": 0,
                    "name": "t",
                    "topic_id": __import__("uuid").UUID(int=5),
                    "is_internal": False,
                    "partitions": [
                        {
                            "error_code": 0,
                            "partition_index": 0,
                            "leader_id": 1,
                            "leader_epoch": 3,
                            "replica_nodes": [1],
                            "isr_nodes": [1],
                            "offline_replicas": [],
                        }
                    ],
                    "topic_authorized_operations": 0,
                }
            ],
        },
    )
    return wire.encode_response(resp, 42)


def _produce_response(version: int) -> bytes:
    resp = wire.build_response(
        0,
        version,
        {
            "throttle_time": 0,
            "responses": [
                {
                    "name": "t",
                    "topic_id": __import__("uuid").UUID(int=5),
                    "partition_responses": [
                        {
                            "index": 0,
                            "error_code": 6,
                            "base_offset": -1,
                            "log_append_time": None,
                            "log_start_offset": 0,
                            "record_errors": [],
                            "error_message": None,
                            "current_leader": {"leader_id": 2, "leader_epoch": 4},
                        }
                    ],
                }
            ],
            "node_endpoints": [{"node_id": 2, "host": "h2", "port": 9093, "rack": None}],
        },
    )
    return wire.encode_response(resp, 42)


def _frames() -> list[tuple[int, int, bytes]]:
    out = []
    for api, versions, build in ((1, (4, 12, 16), _fetch_response), (3, (1, 9, 12), _metadata_response),
                                 (0, (3, 9, 11), _produce_response)):  # fmt: skip
        for version in versions:
            lo, hi = wire.kio_version_range(api)
            if lo <= version <= hi:
                out.append((api, version, build(version)))
    return out


FRAMES = _frames()


def test_frames_decode_unmodified() -> None:
    for api, version, frame in FRAMES:
        wire.decode_response(api, version, frame)


@FUZZ
@given(data=st.data())
def test_mutated_responses_raise_only_protocol_errors(data: st.DataObject) -> None:
    api, version, frame = data.draw(st.sampled_from(FRAMES))
    buf = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["flip", "truncate", "int32", "byte", "insert"]))
        if not buf:
            break
        i = data.draw(st.integers(0, len(buf) - 1))
        if kind == "flip":
            buf[i] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "truncate":
            del buf[i:]
        elif kind == "int32" and len(buf) >= 4:
            struct.pack_into(">i", buf, min(i, len(buf) - 4), data.draw(st.sampled_from(INT32_EXTREMES)))
        elif kind == "byte":
            buf[i] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        else:
            buf[i:i] = data.draw(st.binary(min_size=1, max_size=8))
    try:
        wire.response_correlation_id(bytes(buf))
    except KafkaError:
        pass
    try:
        wire.decode_response(api, version, bytes(buf))
    except KafkaError:
        pass


SHORT_FRAMES = [b"", b"\x00", b"\x00\x00\x00\x2a", b"\x00\x00\x00\x2a\x01", b"\x00\x00\x00\x2a\x01\x80",
                b"\x00\x00\x00\x2a\xff\xff\xff\xff\x0f"]  # fmt: skip


@pytest.mark.parametrize("frame", SHORT_FRAMES)
def test_short_response_headers_are_protocol_errors(frame: bytes) -> None:
    with pytest.raises(wire.ProtocolError):
        wire.decode_response(1, 16, frame)
    if len(frame) < 4:
        with pytest.raises(wire.ProtocolError):
            wire.response_correlation_id(frame)


# A Metadata v12 response whose brokers array claims 2^32-2 elements (found by the fuzzer above): kio's native
# reader reserved room for them up front and the failed allocation aborted the process.
HUGE_ARRAY_FRAME = bytes.fromhex(
    "0000002a000000000002000000010268000023840000026300000001ffffffff74000000000000000000000000000000050002"
    "0000000000000000000100000003020000000102000000010100000000000000"
)


def _legacy_huge_array_frame() -> bytes:
    frame = bytearray(_metadata_response(1))
    struct.pack_into(">i", frame, 4, 2**31 - 1)  # the brokers array (int32 length)
    return bytes(frame)


def test_huge_array_lengths_are_protocol_errors_not_an_abort() -> None:
    # In a child process: without the length check the whole interpreter aborts.
    cases = [(12, HUGE_ARRAY_FRAME.hex()), (1, _legacy_huge_array_frame().hex())]
    code = (
        "from kafka_handoff.protocol import wire\n"
        f"for version, frame in {cases!r}:\n"
        "    try:\n"
        "        wire.decode_response(3, version, bytes.fromhex(frame))\n"
        "    except wire.ProtocolError as exc:\n"
        "        print('ProtocolError', exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and all(ln.startswith("ProtocolError") and "cannot fit" in ln for ln in lines)
