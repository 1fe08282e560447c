"""Kafka records as Arrow: the input table every transform receives.

Columns (the same names and meaning as Spark's own Kafka source): ``topic`` string, ``partition`` int32,
``offset`` int64, ``timestamp`` timestamp[ms, UTC], ``key`` binary, ``value`` binary, ``headers``
list<struct<key string, value binary>>.

Chunks from ``poll_columns`` carry the decoder's Arrow-layout buffers
(:class:`~kafka_handoff.protocol.records.ColumnBuffers`, built by the C extension straight from the fetched
record batches): their offset, timestamp, key, value and header arrays wrap those buffers with
``pyarrow.Array.from_buffers`` -- no copy and no Python object per record -- one record batch per decoded
fetch.  A column some caller turned into a Python list (``chunk.offsets`` ...), and chunks made from lists,
are built from the lists.  Constant columns (topic, partition) and empty headers cost nothing per record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from kafka_handoff.consumer.batch import ColumnChunk
from kafka_handoff.protocol.records import Buffer, ColumnBuffers
from kafka_handoff.types import ConsumerRecord

__all__ = ["HEADER_TYPE", "KAFKA_SCHEMA", "chunks_to_table", "records_to_table"]

HEADER_STRUCT = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADER_TYPE = pa.list_(HEADER_STRUCT)
TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")
KAFKA_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", TIMESTAMP_TYPE),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADER_TYPE),
    ]
)


def _headers_array(headers: Sequence[Sequence[tuple[str, bytes | None]]]) -> Any:
    if not any(headers):
        offsets = pa.array([0] * (len(headers) + 1), pa.int32())
        return pa.ListArray.from_arrays(offsets, pa.array([], HEADER_STRUCT))
    return pa.array([list(h) for h in headers], HEADER_TYPE)


def _list_array(name: str, values: list[Any]) -> Any:
    if name == "offsets":
        return pa.array(values, pa.int64())
    if name == "timestamps":
        return pa.array(values, pa.int64()).cast(TIMESTAMP_TYPE)
    if name == "headers":
        return _headers_array(values)
    return pa.array(values, pa.binary())


def _buf(data: Buffer | None) -> Any:
    return None if data is None else pa.py_buffer(data)


def _binary(validity: bytes | None, offsets: Buffer, data: Buffer, start: int, n: int) -> Any:
    return pa.Array.from_buffers(pa.binary(), n, [_buf(validity), _buf(offsets), _buf(data)], offset=start)


def _buffer_arrays(b: ColumnBuffers, start: int, n: int) -> dict[str, Any]:
    """Rows ``start:start+n`` of decoded buffers as Arrow arrays (zero copy)."""
    hkeys = pa.Array.from_buffers(pa.string(), b.header_count,
                                  [None, _buf(b.header_key_offsets), _buf(b.header_key_data)])  # fmt: skip
    hvalues = _binary(b.header_value_validity, b.header_value_offsets, b.header_value_data, 0, b.header_count)
    struct = pa.StructArray.from_arrays([hkeys, hvalues], fields=list(HEADER_STRUCT))
    headers = pa.Array.from_buffers(HEADER_TYPE, n, [None, _buf(b.header_offsets)], offset=start,
                                    children=[struct])  # fmt: skip
    return {
        "offsets": pa.Array.from_buffers(pa.int64(), n, [None, _buf(b.offsets)], offset=start),
        "timestamps": pa.Array.from_buffers(TIMESTAMP_TYPE, n, [None, _buf(b.timestamps)], offset=start),
        "keys": _binary(b.key_validity, b.key_offsets, b.key_data, start, n),
        "values": _binary(b.value_validity, b.value_offsets, b.value_data, start, n),
        "headers": headers,
    }


_ORDER = ("offsets", "timestamps", "keys", "values", "headers")


def _chunk_batches(chunk: ColumnChunk) -> list[Any]:
    n = len(chunk)
    topic = pa.repeat(pa.scalar(chunk.topic, pa.string()), n)
    partition = pa.repeat(pa.scalar(chunk.partition, pa.int32()), n)
    lists = {name: _list_array(name, values) for name, values in chunk.lists().items()}
    segments = chunk.segments()
    if not segments:
        columns = [topic, partition, *(lists[c] for c in _ORDER)]
        return [pa.RecordBatch.from_arrays(columns, schema=KAFKA_SCHEMA)]
    out = []
    at = 0
    for buffers, start, stop in segments:
        size = stop - start
        arrays = _buffer_arrays(buffers, start, size)
        columns = [lists[c].slice(at, size) if c in lists else arrays[c] for c in _ORDER]
        out.append(pa.RecordBatch.from_arrays([topic.slice(at, size), partition.slice(at, size), *columns],
                                              schema=KAFKA_SCHEMA))  # fmt: skip
        at += size
    return out


def chunks_to_table(chunks: Sequence[ColumnChunk]) -> Any:
    """One Arrow table in :data:`KAFKA_SCHEMA` (one record batch per chunk made from lists, one per decoded
    fetch segment of a ``poll_columns`` chunk)."""
    batches = [b for c in chunks if len(c) for b in _chunk_batches(c)]
    if not batches:
        return KAFKA_SCHEMA.empty_table()
    return pa.Table.from_batches(batches, schema=KAFKA_SCHEMA)


def records_to_table(records: Sequence[ConsumerRecord]) -> Any:
    """The same table from :class:`ConsumerRecord` objects (the object path; slower, kept for comparison
    and for callers that already hold records)."""
    by_tp: dict[tuple[str, int], ColumnChunk] = {}
    for r in records:
        chunk = by_tp.get((r.topic, r.partition))
        if chunk is None:
            chunk = by_tp[(r.topic, r.partition)] = ColumnChunk(r.topic, r.partition)
        chunk.offsets.append(r.offset)
        chunk.timestamps.append(r.timestamp)
        chunk.keys.append(r.key)
        chunk.values.append(r.value)
        chunk.headers.append(tuple(r.headers))
    return chunks_to_table(list(by_tp.values()))
