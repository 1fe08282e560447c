"""Kafka records as Arrow: the input table every transform receives.

Columns (the same names and meaning as Spark's own Kafka source): ``topic`` string, ``partition`` int32,
``offset`` int64, ``timestamp`` timestamp[ms, UTC], ``key`` binary, ``value`` binary, ``headers``
list<struct<key string, value binary>>.

The arrays are built straight from :class:`~kafka_handoff.consumer.batch.ColumnChunk` lists (one Python
``bytes`` per key/value, no per-record object); constant columns (topic, partition) and empty headers cost
nothing per record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from kafka_handoff.consumer.batch import ColumnChunk
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


def _chunk_batch(chunk: ColumnChunk) -> Any:
    n = len(chunk)
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(chunk.topic, pa.string()), n),
            pa.repeat(pa.scalar(chunk.partition, pa.int32()), n),
            pa.array(chunk.offsets, pa.int64()),
            pa.array(chunk.timestamps, pa.int64()).cast(TIMESTAMP_TYPE),
            pa.array(chunk.keys, pa.binary()),
            pa.array(chunk.values, pa.binary()),
            _headers_array(chunk.headers),
        ],
        schema=KAFKA_SCHEMA,
    )


def chunks_to_table(chunks: Sequence[ColumnChunk]) -> Any:
    """One Arrow table (one record batch per chunk) in :data:`KAFKA_SCHEMA`."""
    batches = [_chunk_batch(c) for c in chunks if len(c)]
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
