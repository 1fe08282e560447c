"""Producer batches round-trip through the consumer's decoder (property tests), for every codec; the
idempotence header rewrite keeps the batch valid."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_handoff.producer.batch import (
    RECORD_OVERHEAD_ESTIMATE,
    Entry,
    ProducerBatch,
    encode_records,
    estimate_headers_size,
)
from kafka_handoff.protocol import records as records_module
from kafka_handoff.protocol.compression import CompressionType
from kafka_handoff.protocol.records import RecordBatchBuilder, decode_batches, iter_batch_headers
from kafka_handoff.types import RecordMetadata, TopicPartition

pytestmark = pytest.mark.unit

TP = TopicPartition("topic", 3)
T0 = 1_700_000_000_000

Rec = tuple[bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...] | None]

_bytes = st.one_of(st.none(), st.binary(max_size=300))
_header = st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=40)))
_record = st.tuples(
    _bytes,
    _bytes,
    st.integers(min_value=T0 - 10**7, max_value=T0 + 10**7),
    st.one_of(st.none(), st.lists(_header, max_size=3).map(tuple)),
)


def _batch(records: Sequence[Rec]) -> ProducerBatch:
    batch = ProducerBatch(TP, 0, 16384, 16384)
    for key, value, ts, headers in records:
        fut: Future[RecordMetadata] = Future()
        entry: Entry = (key, value, ts, headers, fut, None)
        batch.entries.append(entry)
    return batch


@settings(max_examples=120, deadline=None)
@given(
    records=st.lists(_record, min_size=1, max_size=40),
    codec=st.sampled_from(list(CompressionType)),
    producer=st.tuples(st.integers(0, 2**40), st.integers(0, 32767), st.integers(0, 2**31 - 1)),
)
def test_round_trip_with_consumer_decoder(
    records: list[tuple[bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...] | None]],
    codec: CompressionType,
    producer: tuple[int, int, int],
) -> None:
    batch = _batch(records)
    batch.set_producer_state(*producer)
    data = batch.encode(codec, None)
    decoded = decode_batches(data, topic=TP.topic, partition=TP.partition, check_crcs=True)
    assert decoded.error is None
    assert [(r.offset, r.key, r.value, r.timestamp, tuple(r.headers)) for r in decoded.records] == [
        (i, k, v, ts, tuple(h or ())) for i, (k, v, ts, h) in enumerate(records)
    ]
    (header,) = list(iter_batch_headers(data))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert header.records_count == len(records)
    assert header.compression == codec
    assert header.max_timestamp == max(r[2] for r in records)
    assert header.base_timestamp == records[0][2]


@settings(max_examples=60, deadline=None)
@given(records=st.lists(_record, min_size=1, max_size=25))
def test_uncompressed_bytes_equal_the_shared_builder(
    records: list[tuple[bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...] | None]],
) -> None:
    """The producer's bulk encoder writes exactly what protocol.records' builder writes."""
    batch = _batch(records)
    batch.set_producer_state(42, 3, 1000)
    ours = batch.encode(CompressionType.NONE, None)
    builder = RecordBatchBuilder(producer_id=42, producer_epoch=3, base_sequence=1000)
    for key, value, ts, headers in records:
        builder.append(key, value, ts, headers or ())
    assert ours == builder.build()


def test_size_estimate_is_an_upper_bound_for_typical_records() -> None:
    records = [(b"key-%d" % i, b"v" * (i * 37 % 500), T0 + i, None) for i in range(200)]
    batch = _batch(records)
    estimate = 61 + sum(len(k) + len(v) + RECORD_OVERHEAD_ESTIMATE for k, v, _t, _h in records)
    assert len(batch.encode(CompressionType.NONE, None)) <= estimate
    headers = (("trace-id", b"0123456789"), ("empty", None), ("ünï", b""))
    one = _batch([(None, b"x", T0, headers)])
    actual = len(one.encode(CompressionType.NONE, None)) - 61
    assert actual <= 1 + RECORD_OVERHEAD_ESTIMATE + estimate_headers_size(headers)


def test_rewriting_producer_state_keeps_crc_valid() -> None:
    batch = _batch([(b"k", b"v", T0, None), (None, b"w", T0 + 1, (("h", b"1"),))])
    batch.set_producer_state(5, 0, 17)
    first = batch.encode(CompressionType.ZSTD, None)
    batch.reset_producer_state(5, 1, 0)
    assert batch.sequence_reset
    second = batch.payload
    assert second is not None and second != first
    (header,) = list(iter_batch_headers(second))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, 0)
    decoded = decode_batches(second, topic="t", partition=0, check_crcs=True)
    assert decoded.error is None and [r.value for r in decoded.records] == [b"v", b"w"]
    # encode() returns the stored bytes: a retry sends exactly these.
    assert batch.encode(CompressionType.ZSTD, None) is second


def test_last_sequence_wraps() -> None:
    batch = _batch([(None, b"a", T0, None)] * 3)
    batch.set_producer_state(1, 0, 2**31 - 2)
    assert batch.last_sequence == 0
    assert batch.has_sequence


_C_ENCODE: Any = getattr(records_module._extension, "encode_records", None)
"""The C loop of the one record encoder (``protocol/_fastrecords.c``), None when it is not built."""


def test_encode_records_empty() -> None:
    assert encode_records([], T0) == (b"", -1)
    assert records_module._py_encode_records([], T0) == (b"", -1)


@pytest.mark.skipif(_C_ENCODE is None, reason="the C encoder is not built")
@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(_record, max_size=30),
    base=st.integers(min_value=-(2**40), max_value=2**40),
)
def test_c_encoder_writes_the_same_bytes_as_python(records: list[Rec], base: int) -> None:
    entries = _batch(records).entries
    c_encode = _C_ENCODE
    assert c_encode is not None
    assert c_encode(entries, base) == records_module._py_encode_records(entries, base)


@pytest.mark.skipif(_C_ENCODE is None, reason="the C encoder is not built")
def test_c_encoder_rejects_bad_entries() -> None:
    c_encode = _C_ENCODE
    assert c_encode is not None
    fut: Future[RecordMetadata] = Future()
    with pytest.raises(TypeError, match="key must be bytes"):
        c_encode([("k", b"v", 1, None, fut, None)], 0)
    with pytest.raises(TypeError, match="header"):
        c_encode([(None, b"v", 1, (("h",),), fut, None)], 0)
    with pytest.raises(OverflowError):
        c_encode([(None, b"v", 2**70, None, fut, None)], 0)
    with pytest.raises(TypeError):
        c_encode(((None, b"v", 1, None, fut, None),), 0)  # not a list
    big = [(None, b"x" * 10, T0 + i, (("k", b"v"),), fut, None) for i in range(1000)]  # > 256: heap path
    assert c_encode(big, T0) == records_module._py_encode_records(big, T0)
