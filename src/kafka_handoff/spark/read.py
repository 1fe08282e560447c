"""Executor side of the ``kafka-handoff`` data source: one task reads one :class:`OffsetRange` with our
consumer in assign mode (no group) and yields Arrow record batches in Spark's Kafka schema.

The batches wrap the C decoder's buffers (``poll_columns`` ->
:func:`~kafka_handoff.pipeline.arrow.chunks_to_table`, no Python object per record); only ``timestamp``
(ms -> Spark's µs) and the per-batch ``timestampType`` are computed per row, in Arrow.  A Python worker
keeps its consumers between tasks (Spark reuses Python workers), so a micro-batch does not pay a connection
set-up per partition.
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
import time
from array import array
from collections.abc import Iterator
from typing import Any

from kafka_handoff.errors import OffsetOutOfRangeError
from kafka_handoff.spark.options import SourceOptions
from kafka_handoff.spark.plan import DataLossError, OffsetRange
from kafka_handoff.types import TopicPartition

__all__ = ["arrow_schema", "read_range", "spark_schema"]

log = logging.getLogger("kafka_handoff.spark")


def spark_schema(include_headers: bool) -> Any:
    """Spark's Kafka source schema (``headers`` only with ``includeHeaders``)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> Any:
    """The Arrow schema Spark expects the batches in (it checks it exactly)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(include_headers), timezone="UTC")


# ------------------------------------------------------------------------------------------- consumers
_pool: dict[str, list[Any]] = {}
_pool_lock = threading.Lock()


def _close_pool() -> None:
    with _pool_lock:
        consumers = [c for cs in _pool.values() for c in cs]
        _pool.clear()
    for c in consumers:
        try:
            c.close(timeout=2)
        except Exception:  # exiting: nothing to report to
            pass


atexit.register(_close_pool)


def _take(conf: dict[str, Any]) -> tuple[str, Any]:
    key = json.dumps(conf, sort_keys=True, default=str)
    with _pool_lock:
        free = _pool.get(key)
        if free:
            return key, free.pop()
    from kafka_handoff.consumer import Consumer

    return key, Consumer(conf)


def _give_back(key: str, consumer: Any) -> None:
    with _pool_lock:
        _pool.setdefault(key, []).append(consumer)


# ------------------------------------------------------------------------------------------- batches
def _timestamp_types(chunk: Any) -> Any:
    """``timestampType`` per row (0 CreateTime, 1 LogAppendTime), from the decoder's per-batch types."""
    import pyarrow as pa

    out = array("i")
    for buffers, start, stop in chunk.segments():
        starts = [*buffers.batch_starts, len(buffers)]
        types = buffers.batch_timestamp_types
        for i, kind in enumerate(types):
            lo, hi = max(starts[i], start), min(starts[i + 1], stop)
            if hi > lo:
                out.extend(array("i", [max(0, int(kind))]) * (hi - lo))
    if len(out) != len(chunk):  # a chunk made from lists: no per-batch types
        out = array("i", [0]) * len(chunk)
    return pa.array(out, pa.int32())


def _to_batch(chunk: Any, schema: Any, end: int) -> Any | None:
    """``chunk``'s rows below ``end`` as one record batch in ``schema`` (None when none is left)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from kafka_handoff.pipeline.arrow import chunks_to_table

    table = chunks_to_table([chunk])
    types = _timestamp_types(chunk)
    columns = {
        "key": table.column("key"),
        "value": table.column("value"),
        "topic": table.column("topic"),
        "partition": table.column("partition"),
        "offset": table.column("offset"),
        "timestamp": table.column("timestamp"),
        "timestampType": pa.chunked_array([types]),
        "headers": table.column("headers"),
    }
    keep = table.num_rows
    if chunk.last_offset() >= end:
        keep = int(pc.sum(pc.less(columns["offset"], end)).as_py() or 0)
        if keep == 0:
            return None
    arrays = []
    for f in schema:
        col = columns[f.name].slice(0, keep)
        if col.type != f.type:
            col = col.cast(f.type)
        arrays.append(col.combine_chunks())
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_range(options: SourceOptions, part: OffsetRange) -> Iterator[Any]:
    """Yield the records of ``part`` (offsets ``[start, end)``) as Arrow record batches, in offset order."""
    if part.end <= part.start:
        return
    schema = arrow_schema(options.include_headers)
    tp = TopicPartition(part.topic, part.partition)
    key, consumer = _take(options.consumer_config())
    healthy = False
    try:
        consumer.assign([tp])
        consumer.seek(tp, part.start)
        position = part.start
        waited_since = time.monotonic()
        while position < part.end:
            try:
                polled = consumer.poll_columns(timeout=0.5)
            except OffsetOutOfRangeError as exc:
                raise DataLossError(
                    f"records of {tp} from offset {position} were deleted before they were read (range "
                    f"{part.start}..{part.end - 1}); set the option failOnDataLoss=false to skip them and "
                    "go on"
                ) from exc
            chunk = polled.chunk(tp)
            if chunk is not None and len(chunk):
                chunk.drop_below(position)
            if chunk is not None and len(chunk):
                batch = _to_batch(chunk, schema, part.end)
                if batch is not None:
                    yield batch
            new_position = int(consumer.position(tp))
            if new_position != position:
                position = new_position
                waited_since = time.monotonic()
            elif (time.monotonic() - waited_since) * 1000 > options.poll_timeout_ms:
                raise TimeoutError(
                    f"no records from {tp} at offset {position} for {options.poll_timeout_ms} ms (reading "
                    f"{part.start}..{part.end - 1}; kafkaConsumer.pollTimeoutMs sets this)"
                )
        healthy = True
    finally:
        if healthy:
            consumer.assign([])
            _give_back(key, consumer)
        else:
            consumer.close(timeout=2)
