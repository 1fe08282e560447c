"""Reading an offset range of one partition into Arrow, anywhere (a Spark executor, a test, the driver).

The pipeline worker in ``executors`` mode (``spark.read_on``) stays the group member and decides, per
batch, an offset range ``[start, end)`` per owned partition; Spark tasks read those ranges themselves with
:func:`read_range` -- our :class:`~kafka_handoff.consumer.Consumer` in assign mode (no group, no commits),
the C decoder, :func:`~kafka_handoff.pipeline.arrow.chunks_to_table`.

Exactly ``[start, end)``: the reader seeks to ``start`` and polls until its *position* reaches ``end``; rows
at or past ``end`` are cut off.  The position, not the last record, decides the end, so the gaps a range
may hold -- transaction markers, aborted records (``read_committed``), offsets removed by compaction -- are
passed over without waiting for records that never come.  ``end`` must not be past what the worker's
consumer reported as the end (its ``end_offsets``: the high watermark, or the last stable offset under
``read_committed``), so every range is readable.  Records below ``start`` in the first fetched batch are
dropped by the consumer.  A range whose start was deleted by retention fails
(``auto.offset.reset = none``): the worker's marks promise these offsets, so a silent jump is data loss.

:func:`split_ranges` cuts large ranges into pieces so that one batch spreads over the executors' tasks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from kafka_handoff.pipeline.arrow import KAFKA_SCHEMA, chunks_to_table

__all__ = [
    "EXECUTOR_SCHEMA",
    "SPARK_SCHEMA_DDL",
    "OffsetRange",
    "RangeReadError",
    "executor_consumer_config",
    "range_frame",
    "read_range",
    "read_tasks",
    "split_ranges",
]

#: The Arrow schema of the rows the executors hand Spark (Spark's timestamps are microseconds).
EXECUTOR_SCHEMA = KAFKA_SCHEMA.set(
    KAFKA_SCHEMA.get_field_index("timestamp"), pa.field("timestamp", pa.timestamp("us", tz="UTC"))
)

#: Consumer settings that belong to the group member only (executors read in assign mode).
_GROUP_KEYS = (
    "group.id",
    "group.instance.id",
    "group.protocol",
    "group.remote.assignor",
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "client.rack",
)


class RangeReadError(RuntimeError):
    """An offset range could not be read completely (deleted by retention, no progress in time)."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int
    """Exclusive."""

    @property
    def size(self) -> int:
        return self.end - self.start

    def describe(self) -> str:
        return f"{self.topic}-{self.partition} offsets [{self.start}, {self.end})"


def split_ranges(ranges: Sequence[OffsetRange], tasks: int, min_size: int = 10_000) -> list[OffsetRange]:
    """``ranges`` cut into about ``tasks`` pieces of similar size (never smaller than ``min_size`` offsets,
    never fewer pieces than ranges); contiguous, covering each range exactly."""
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    if not ranges:
        return []
    piece = max(min_size, math.ceil(total / max(1, tasks)))
    out: list[OffsetRange] = []
    for r in ranges:
        n = max(1, round(r.size / piece))
        step = math.ceil(r.size / n)
        start = r.start
        while start < r.end:
            end = min(r.end, start + step)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out


def executor_consumer_config(consumer: Mapping[str, Any], client_id: str) -> dict[str, Any]:
    """The worker's consumer settings for a range reader: connection and security as they are, no group,
    no commits, a deleted start is an error."""
    conf = {k: v for k, v in consumer.items() if k not in _GROUP_KEYS}
    conf["enable.auto.commit"] = False
    conf["auto.offset.reset"] = "none"
    conf["client.id"] = client_id
    return conf


def read_range(config: Mapping[str, Any], r: OffsetRange, *, stall_timeout_s: float = 120.0) -> Iterator[Any]:
    """The records of ``r`` as Arrow record batches in :data:`EXECUTOR_SCHEMA` (see the module docstring).
    Raises :class:`RangeReadError` (naming the range) when the position does not move for
    ``stall_timeout_s`` or the start is gone."""
    from kafka_handoff.consumer import Consumer
    from kafka_handoff.consumer.batch import poll_columns
    from kafka_handoff.errors import KafkaError
    from kafka_handoff.types import TopicPartition

    if r.size <= 0:
        return
    tp = TopicPartition(r.topic, r.partition)
    consumer = Consumer(dict(config))
    try:
        consumer.assign([tp])
        consumer.seek(tp, r.start)
        position = r.start
        progress = time.monotonic()
        while position < r.end:
            try:
                records = poll_columns(consumer, 0.5)
                new_position = consumer.position(tp, timeout=30)
            except KafkaError as exc:
                raise RangeReadError(f"reading {r.describe()} failed at offset {position}: {exc}") from exc
            chunk = records.chunk(tp)
            if chunk is not None and len(chunk):
                table = chunks_to_table([chunk])
                offsets = table.column("offset").to_numpy()
                keep = int(np.searchsorted(offsets, r.end, side="left"))
                table = table.slice(0, keep)
                if table.num_rows:
                    yield from table.cast(EXECUTOR_SCHEMA).to_batches()
            if new_position > position:
                position = new_position
                progress = time.monotonic()
            elif time.monotonic() - progress > stall_timeout_s:
                raise RangeReadError(
                    f"reading {r.describe()}: no progress past offset {position} in {stall_timeout_s:.0f} s"
                )
    finally:
        consumer.close(timeout=5)


#: The Spark schema of :data:`EXECUTOR_SCHEMA` (Spark's Kafka source's columns).
SPARK_SCHEMA_DDL = (
    "topic string, partition int, offset bigint, timestamp timestamp, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>"
)


def read_tasks(config: Mapping[str, Any], pieces: Sequence[tuple[str, int, int, int]], batches: Any) -> Any:
    """The body of one Spark task: the pieces whose indexes arrive in ``batches`` (``id`` column)."""
    for batch in batches:
        for i in batch.column(0).to_pylist():
            yield from read_range(config, OffsetRange(*pieces[int(i)]))


def range_frame(spark: Any, config: Mapping[str, Any], pieces: Sequence[OffsetRange]) -> Any:
    """A DataFrame whose tasks read ``pieces`` (one task each) with ``config`` (the consumer settings of
    :func:`executor_consumer_config`; they travel to the executors with the task)."""
    conf = dict(config)
    rows = [(p.topic, p.partition, p.start, p.end) for p in pieces]

    def read(batches: Any) -> Any:
        return read_tasks(conf, rows, batches)

    n = max(1, len(rows))
    return spark.range(0, len(rows), 1, n).mapInArrow(read, SPARK_SCHEMA_DDL)
