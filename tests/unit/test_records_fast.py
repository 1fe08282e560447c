"""The two implementations of the record loop (C extension ``_fastrecords`` and pure Python) behave the same.

* Every test of ``test_records.py`` runs again here with the *other* implementation than the one that module
  used (the default: C when built, unless ``KAFKA_HANDOFF_PURE_PYTHON`` is set), so the whole behavioural
  suite -- round trips, corruption, control batches, aborted transactions, start offsets -- covers both.
* Differential tests decode valid and damaged batches with both and compare everything observable.
* C-specific checks: selection (env var, ``IMPLEMENTATION``), no reference leaks, GC tracking.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import struct
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

# Re-collect every test of test_records.py in this module; the autouse fixture below switches implementation.
from test_records import *  # noqa: F403
from test_records import T0, spec_batch, spec_record, zz

from kafka_handoff.protocol import records
from kafka_handoff.protocol.compression import CompressionType
from kafka_handoff.protocol.records import (
    ControlType,
    RecordColumns,
    decode_batches,
    decode_batches_buffers,
    decode_batches_columnar,
    encode_batch,
    encode_control_batch,
)
from kafka_handoff.types import ConsumerRecord

pytestmark = pytest.mark.unit

HAS_C = "c" in records.available_implementations()
needs_c = pytest.mark.skipif(not HAS_C, reason=f"C extension not built: {records.C_UNAVAILABLE_REASON}")

DEFAULT = records.IMPLEMENTATION
OTHER = "python" if DEFAULT == "c" else "c"


@pytest.fixture(autouse=True, scope="module")
def _other_implementation() -> Iterator[None]:
    """Run this module (including the tests imported from test_records) with the non-default loop."""
    if OTHER not in records.available_implementations():
        yield  # only pure Python here: the re-collected tests repeat test_records.py (C tests skip)
        return
    records._use_implementation(OTHER)
    try:
        yield
    finally:
        records._use_implementation(DEFAULT)


def _with(impl: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    previous = records.IMPLEMENTATION
    records._use_implementation(impl)  # type: ignore[arg-type]
    try:
        return fn(*args, **kwargs)
    finally:
        records._use_implementation(previous)


def _summary(res: Any) -> dict[str, Any]:
    """Everything observable of a decode result (the error by type, message and cause type)."""
    out = {
        name: getattr(res, name)
        for name in ("next_offset", "last_epoch", "batches", "control_batches", "aborted_batches",
                     "aborted_records", "bytes_consumed", "partial_bytes")
    }  # fmt: skip
    err = res.error
    out["error"] = None if err is None else (type(err), str(err), type(err.__cause__), err.offset)
    if isinstance(res, records.DecodedRecords):
        out["records"] = res.records
    else:
        cols: RecordColumns = res.columns
        per_row = (cols.offsets, cols.timestamps, cols.keys, cols.values, cols.headers)
        out["columns"] = (*per_row, cols.batch_starts, cols.batch_timestamp_types, cols.batch_leader_epochs)
    return out


def _assert_same(data: bytes, **kw: Any) -> dict[str, Any]:
    kw.setdefault("topic", "t")
    kw.setdefault("partition", 3)
    results = {}
    for decoder in (decode_batches, decode_batches_columnar):
        py = _summary(_with("python", decoder, data, **kw))
        c = _summary(_with("c", decoder, data, **kw))
        assert c == py, decoder.__name__
        results[decoder.__name__] = py
    return results


# ---------------------------------------------------------------------------------------------------------
# selection


def test_implementation_is_reported_and_switchable() -> None:
    assert records.IMPLEMENTATION in records.available_implementations()
    assert "python" in records.available_implementations()
    with pytest.raises(ValueError, match="unknown implementation 'rust'"):
        records._use_implementation("rust")  # type: ignore[arg-type]


@needs_c
def test_c_is_the_default_when_built() -> None:
    if records._PURE_PYTHON_REQUESTED:
        pytest.skip("KAFKA_HANDOFF_PURE_PYTHON is set for this run")
    assert DEFAULT == "c"
    assert records.C_UNAVAILABLE_REASON is None


@pytest.mark.parametrize(("env", "expected"), [("1", "python"), ("0", "c"), ("", "c")])
def test_env_var_selects_pure_python(env: str, expected: str) -> None:
    if expected == "c" and not HAS_C:
        expected = "python"
    environ = dict(os.environ, KAFKA_HANDOFF_PURE_PYTHON=env)
    out = subprocess.run(
        [sys.executable, "-c", "from kafka_handoff.protocol import records; print(records.IMPLEMENTATION)"],
        env=environ, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert out.stdout.strip() == expected


@needs_c
def test_c_loop_is_what_decodes_when_selected(monkeypatch: pytest.MonkeyPatch) -> None:
    # The dispatch really routes through the extension: break the Python loops and decode with C.
    def broken(*args: object) -> int:
        raise AssertionError("the Python loop was used")

    monkeypatch.setattr(records, "_py_records_to_objects", broken)
    monkeypatch.setattr(records, "_py_records_to_columns", broken)
    batch = encode_batch([(b"k", b"v", T0)], base_offset=5)
    res = _with("c", decode_batches, batch, topic="t", partition=0)
    assert [(r.offset, r.key, r.value) for r in res.records] == [(5, b"k", b"v")]
    assert _with("c", decode_batches_columnar, batch, topic="t", partition=0).columns.values == [b"v"]


@needs_c
def test_configure_rejects_classes_it_cannot_fill() -> None:
    class NotSlots:
        pass

    @dataclasses.dataclass(slots=True)
    class MissingFields:
        topic: str
        partition: int

    with pytest.raises(TypeError, match="not a plain __slots__ class"):
        records._fast.configure(NotSlots, records._Malformed)
    with pytest.raises(TypeError, match=r"MissingFields\.offset is not a slot"):
        records._fast.configure(MissingFields, records._Malformed)
    with pytest.raises(TypeError, match="malformed must be an exception class"):
        records._fast.configure(ConsumerRecord, object)
    # the module still decodes with its real configuration
    assert _with("c", decode_batches, encode_batch([(None, b"v", T0)]), topic="t", partition=0).records


# ---------------------------------------------------------------------------------------------------------
# differential: valid data


_headers = st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=6)), max_size=3)
_record = st.tuples(
    st.none() | st.binary(max_size=200),
    st.none() | st.binary(max_size=200),
    st.integers(min_value=-(2**62), max_value=2**62),
    _headers,
)


@needs_c
@settings(max_examples=100, deadline=None)
@given(
    recs=st.lists(_record, min_size=1, max_size=20),
    codec=st.sampled_from(list(CompressionType)),
    base=st.integers(min_value=0, max_value=2**62),
    gap=st.integers(min_value=0, max_value=2**20),
    ts_type=st.sampled_from([0, 1]),
    start=st.integers(min_value=0, max_value=25),
)
def test_same_results_on_valid_batches(
    recs: list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]],
    codec: CompressionType,
    base: int,
    gap: int,
    ts_type: int,
    start: int,
) -> None:
    builder = records.RecordBatchBuilder(base_offset=base, compression=codec, timestamp_type=ts_type,
                                         log_append_time=T0 if ts_type else None)  # fmt: skip
    for i, (k, v, ts, hs) in enumerate(recs):
        builder.append(k, v, ts, hs, offset_delta=i * (gap + 1))
    batch = builder.build()
    out = _assert_same(batch, start_offset=base + start)
    assert out["decode_batches"]["error"] is None


@needs_c
def test_same_results_on_extreme_varints() -> None:
    # int64 overflow of base + delta gives a Python int in both; 10-byte varints with bits above bit 63 are
    # truncated to 64 bits in both (as Java does).
    ten_byte_overflow = b"\xfe" + b"\xff" * 8 + b"\x7f"  # zig-zag payload with bits 64..69 set
    body = b"\x00" + zz(2**62) + ten_byte_overflow + zz(-1) + zz(1) + b"v" + b"\x00"
    rec = zz(len(body)) + body
    batch = spec_batch(rec, count=1, base_offset=2**63 - 1, last_offset_delta=0, base_ts=2**63 - 1)
    out = _assert_same(batch, check_crcs=False)
    (r,) = out["decode_batches"]["records"]
    assert r.timestamp == 2**63 - 1 + 2**62
    assert r.offset == 2**63 - 1 + records._read_zz(ten_byte_overflow, 0)[0]


# ---------------------------------------------------------------------------------------------------------
# differential: damaged data (CRC recomputed so the record loop sees the damage)


def _recrc(batch: bytes) -> bytes:
    return batch[:17] + struct.pack(">I", crc32c(batch[21:])) + batch[21:]


def _sample_batch() -> bytes:
    return encode_batch(
        [(b"key", b"value" * 3, T0, [("h1", b"x"), ("h2", None)]), (None, b"\x00" * 130, T0 + 1),
         (b"", None, T0 + 300, [("\u00e9", b"")])],
        base_offset=10,
    )  # fmt: skip


@needs_c
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_same_errors_on_damaged_records(data: st.DataObject) -> None:
    good = encode_batch([(None, b"ok", T0)], base_offset=9)
    batch = bytearray(_sample_batch())
    kind = data.draw(st.sampled_from(["flip", "set", "cut", "insert", "count"]))
    body = len(batch) - 61
    if kind in ("flip", "set"):
        i = 61 + data.draw(st.integers(0, body - 1))
        if kind == "set":
            batch[i] = data.draw(st.integers(0, 255))
        else:
            batch[i] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "cut":
        i = 61 + data.draw(st.integers(0, body - 1))
        del batch[i : i + data.draw(st.integers(1, 8))]
    elif kind == "insert":
        i = 61 + data.draw(st.integers(0, body))
        batch[i:i] = data.draw(st.binary(min_size=1, max_size=12))
    else:
        struct.pack_into(">i", batch, 57, data.draw(st.integers(0, 6)))
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    damaged = _recrc(bytes(batch))
    trailing = data.draw(st.sampled_from([b"", encode_batch([(None, b"next", T0)], base_offset=13)]))
    _assert_same(good + damaged + trailing)


BAD_RECORDS = {
    "varint longer than 10 bytes": (b"\xff" * 11 + b"\x01", "longer than 10 bytes"),
    "11-byte varint": (b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
    "truncated varint": (b"\x80", "extends past the end"),
    "key one byte short": (b"\x10\x00\x00\x00\x04k", "extends past the end"),
    "value one byte short": (b"\x10\x00\x00\x00\x01\x04v", "extends past the end"),
    "attributes only": (b"\x02\x00", "extends past the end"),
    "negative header count": (spec_record(0, 0, b"k", b"v")[:-1] + zz(-2), "negative header count -2"),
    "header count larger than the data": (spec_record(0, 0, b"k", b"v")[:-1] + zz(2**40), "past the end"),
    "negative header key length": (b"\x10\x00\x00\x00\x02k\x02v\x02\x03", "header key length -2"),
    "header key past the end": (b"\x10\x00\x00\x00\x02k\x02v\x02\x20ab", "header key extends past"),
    "header value past the end": (b"\x10\x00\x00\x00\x02k\x02v\x02\x02h\x20", "header value extends past"),
    "bad header value length": (b"\x10\x00\x00\x00\x02k\x02v\x02\x02h\x05", "header value length -3"),
    "header key not utf-8": (b"\x10\x00\x00\x00\x02k\x02v\x02\x02\xff\x01", "utf-8"),
    "huge record length": (zz(2**62) + spec_record(0, 0, b"k", b"v")[1:], "ends at byte 46116860184273"),
    "negative record length": (zz(-5) + spec_record(0, 0, b"k", b"v")[1:], "record length says"),
    "huge key length": (b"\x10\x00\x00\x00" + zz(2**62) + b"k", "extends past the end"),
}


@needs_c
@pytest.mark.parametrize("case", list(BAD_RECORDS))
@pytest.mark.parametrize("followed", [False, True], ids=["last", "followed"])
def test_same_error_for_each_malformation(case: str, followed: bool) -> None:
    recs, pattern = BAD_RECORDS[case]
    good = encode_batch([(None, b"ok", T0)], base_offset=4)
    bad = spec_batch(recs, count=1, base_offset=5, last_offset_delta=0)
    # A following batch gives the loop bytes to (wrongly) read on; both must still agree.
    after = encode_batch([(b"x" * 40, b"y" * 40, T0)], base_offset=6) if followed else b""
    out = _assert_same(good + bad + after)
    err = out["decode_batches"]["error"]
    assert err is not None and err[3] == 5
    if not followed:
        assert pattern in err[1], err[1]
    assert [r.offset for r in out["decode_batches"]["records"]] == [4]


@needs_c
def test_same_results_for_control_and_aborted_batches() -> None:
    pid = 77
    txn = encode_batch([(None, b"a", T0), (None, b"b", T0)], base_offset=0, producer_id=pid, producer_epoch=0,
                       base_sequence=0, transactional=True, compression=CompressionType.LZ4)  # fmt: skip
    data = (
        txn
        + encode_control_batch(
            ControlType.ABORT, base_offset=2, producer_id=pid, producer_epoch=0, timestamp=T0
        )
        + encode_batch([(None, b"c", T0)], base_offset=3)
    )
    out = _assert_same(data, read_committed=True, aborted_transactions=[(pid, 0)])
    assert [r.value for r in out["decode_batches"]["records"]] == [b"c"]
    assert out["decode_batches"]["aborted_records"] == 2


# ---------------------------------------------------------------------------------------------------------
# C specifics: references and GC


@needs_c
def test_no_reference_leaks_on_success_and_error_paths() -> None:
    topic = "refcount-topic"
    partition = 100_000  # not a cached small int
    good = encode_batch([(b"k", b"v", T0, [("h", b"x")]), (None, None, T0)], partition_leader_epoch=7)
    bad = [spec_batch(recs, count=1, base_offset=0, last_offset_delta=0) for recs, _ in BAD_RECORDS.values()]

    def run(data: bytes, times: int) -> None:
        for _ in range(times):
            decode_batches(data, topic=topic, partition=partition, check_crcs=False)
            decode_batches_columnar(data, topic=topic, partition=partition, check_crcs=False)
            res = decode_batches_buffers(data, topic=topic, partition=partition, check_crcs=False)
            res.columns.to_lists()  # the memoryviews over the C builder's memory are released with it

    for data in [good, *bad]:
        _with("c", run, data, 5)  # warm-up (interned strings, caches)
        gc.collect()
        before = (sys.getrefcount(topic), sys.getrefcount(partition))
        tracemalloc.start()
        start = tracemalloc.get_traced_memory()[0]
        _with("c", run, data, 500)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - start
        tracemalloc.stop()
        assert (sys.getrefcount(topic), sys.getrefcount(partition)) == before
        assert grown < 16_000, f"{grown} bytes kept after 1500 decodes"  # a leak per decode is >= 32 KB


@needs_c
def test_c_records_are_untracked_by_default_and_tracking_can_be_restored() -> None:
    batch = encode_batch([(b"k", b"v", T0)])
    (rec,) = _with("c", decode_batches, batch, topic="t", partition=0).records
    assert isinstance(rec, ConsumerRecord)
    assert not gc.is_tracked(rec)
    records.set_gc_tracking(True)
    try:
        (rec,) = _with("c", decode_batches, batch, topic="t", partition=0).records
        assert gc.is_tracked(rec)
    finally:
        records.set_gc_tracking(False)
    # an untracked record stays usable and mutable like any other
    rec.value = {"decoded": True}
    assert rec == ConsumerRecord("t", 0, 0, T0, 0, b"k", {"decoded": True}, (), None, 1, 1)


@needs_c
def test_this_module_runs_with_the_other_implementation() -> None:
    # the autouse fixture is what makes the tests imported from test_records cover the second implementation
    assert records.IMPLEMENTATION == OTHER != DEFAULT
