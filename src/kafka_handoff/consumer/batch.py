"""Columnar polling: records as parallel lists per partition instead of one object per record.

A batch consumer (the PySpark pipeline) turns records into Arrow columns; building a
:class:`~kafka_handoff.types.ConsumerRecord` per record only to take it apart again costs about as much as
decoding.  :func:`poll_columns` is :meth:`Consumer.poll` with the decoding done by
:func:`~kafka_handoff.protocol.records.decode_batches_columnar`: same group semantics (rebalance callbacks,
KIP-983 revoke lists, positions, ``max.poll.records``), but each partition's records come as one
:class:`ColumnChunk`.

It works by installing :class:`ColumnarCollector` -- a :class:`~kafka_handoff.consumer.collector.Collector`
that can hand out either form -- in the consumer once (:func:`enable_columnar`); ``Consumer.poll()`` keeps
returning objects.  Key/value deserializers are not applied on the columnar path (keys and values stay
``bytes``).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kafka_handoff.consumer.collector import Collector
from kafka_handoff.consumer.records import ConsumerRecords
from kafka_handoff.protocol.records import (
    DecodedColumns,
    DecodedRecords,
    Header,
    RecordColumns,
    decode_batches_columnar,
)
from kafka_handoff.types import TopicPartition

__all__ = ["ColumnChunk", "ColumnarCollector", "ColumnarRecords", "enable_columnar", "poll_columns"]

_EMPTY: frozenset[TopicPartition] = frozenset()


@dataclass(slots=True)
class ColumnChunk:
    """Consecutive records of one partition as parallel lists (raw ``bytes`` keys and values)."""

    topic: str
    partition: int
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[tuple[Header, ...]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(self, other: ColumnChunk) -> None:
        self.offsets.extend(other.offsets)
        self.timestamps.extend(other.timestamps)
        self.keys.extend(other.keys)
        self.values.extend(other.values)
        self.headers.extend(other.headers)

    def drop_below(self, offset: int) -> int:
        """Remove the records whose offset is below ``offset`` (offsets ascend); returns how many."""
        cut = bisect.bisect_left(self.offsets, offset)
        if cut:
            del self.offsets[:cut], self.timestamps[:cut], self.keys[:cut], self.values[:cut]
            del self.headers[:cut]
        return cut


class ColumnarRecords:
    """What :func:`poll_columns` returns: one :class:`ColumnChunk` per partition plus KIP-983's sets."""

    __slots__ = ("_chunks", "lost_partitions", "to_be_revoked_partitions")

    def __init__(
        self,
        chunks: dict[TopicPartition, ColumnChunk],
        *,
        to_be_revoked: frozenset[TopicPartition] = _EMPTY,
        lost: frozenset[TopicPartition] = _EMPTY,
    ) -> None:
        self._chunks = chunks
        self.to_be_revoked_partitions = to_be_revoked
        self.lost_partitions = lost

    def __len__(self) -> int:
        return sum(len(c) for c in self._chunks.values())

    def __bool__(self) -> bool:
        return any(len(c) for c in self._chunks.values())

    def __iter__(self) -> Iterator[ColumnChunk]:
        return iter(self._chunks.values())

    def partitions(self) -> frozenset[TopicPartition]:
        return frozenset(self._chunks)

    def chunk(self, partition: TopicPartition) -> ColumnChunk | None:
        return self._chunks.get(partition)

    def by_partition(self) -> dict[TopicPartition, ColumnChunk]:
        return dict(self._chunks)

    def __repr__(self) -> str:
        return f"ColumnarRecords(count={len(self)}, partitions={len(self._chunks)})"


def _columns_to_records(decoded: DecodedColumns) -> DecodedRecords:
    """The object form of a columnar decode result (when the mode switches in the middle of a fetch)."""
    values = {f.name: getattr(decoded, f.name) for f in dataclasses.fields(DecodedColumns)}
    del values["columns"]
    return DecodedRecords(**values, records=decoded.columns.to_records(decoded.topic, decoded.partition))


def _records_to_columns(decoded: DecodedRecords) -> DecodedColumns:
    values = {f.name: getattr(decoded, f.name) for f in dataclasses.fields(DecodedRecords)}
    del values["records"]
    cols = RecordColumns()
    for r in decoded.records:
        cols.offsets.append(r.offset)
        cols.timestamps.append(r.timestamp)
        cols.keys.append(r.key)
        cols.values.append(r.value)
        cols.headers.append(tuple(r.headers))
        cols.batch_starts.append(len(cols.offsets) - 1)
        cols.batch_timestamp_types.append(r.timestamp_type)
        cols.batch_leader_epochs.append(r.leader_epoch)
    return DecodedColumns(**values, columns=cols)


class ColumnarCollector(Collector):
    """A :class:`Collector` that returns :class:`ColumnChunk` values while :attr:`columnar` is set."""

    columnar: bool = False

    @classmethod
    def replacing(cls, old: Collector) -> ColumnarCollector:
        """A columnar collector with ``old``'s state (buffer, subscriptions, current fetch, hooks)."""
        new = cls.__new__(cls)
        new.__dict__.update(old.__dict__)
        new.columnar = False
        return new

    def collect(self) -> dict[TopicPartition, Any]:
        if not self.columnar:
            cur = self._current
            if cur is not None and isinstance(cur.decoded, DecodedColumns):
                cur.decoded = _columns_to_records(cur.decoded)
            return super().collect()
        return self._collect_columns()

    def _collect_columns(self) -> dict[TopicPartition, Any]:
        """:meth:`Collector.collect` with columnar decoding (same validity, error and position rules: an
        error is raised only when no records were collected in this call)."""
        out: dict[TopicPartition, ColumnChunk] = {}
        remaining = self._max
        while remaining > 0:
            f = self._current
            if f is None:
                f = self._buffer.pop()
                if f is None:
                    break
                self._current = f
            if not self._valid(f):
                self._finish(f)
                continue
            if self._is_paused(f.tp):
                # Keep it: the partition stays "buffered" (not fetched again) until resume().
                self._parked[f.tp] = f
                self._current = None
                continue
            if f.error is not None:
                if out:
                    break  # raised on the next call; records already handed out are never lost
                self._finish(f)
                raise f.error
            if not f.initialized:
                f.decoded = decode_batches_columnar(
                    f.records or b"",
                    topic=f.tp.topic,
                    partition=f.tp.partition,
                    check_crcs=self._check_crcs,
                    read_committed=self._read_committed,
                    aborted_transactions=f.aborted_transactions,
                    start_offset=f.fetch_offset,
                )
                f.initialized = True
                f.next_index = 0
            elif isinstance(f.decoded, DecodedRecords):
                f.decoded = _records_to_columns(f.decoded)
            decoded: DecodedColumns = f.decoded
            cols = decoded.columns
            total = len(cols)
            start = f.next_index
            end = min(total, start + remaining)
            if end > start:
                chunk = out.get(f.tp)
                if chunk is None:
                    chunk = out[f.tp] = ColumnChunk(f.tp.topic, f.tp.partition)
                whole = start == 0 and end == total
                chunk.offsets.extend(cols.offsets if whole else cols.offsets[start:end])
                chunk.timestamps.extend(cols.timestamps if whole else cols.timestamps[start:end])
                values = cols.values if whole else cols.values[start:end]
                chunk.keys.extend(cols.keys if whole else cols.keys[start:end])
                chunk.values.extend(values)
                chunk.headers.extend(cols.headers if whole else cols.headers[start:end])
                f.next_index = end
                remaining -= end - start
                at_end = end == total
                last_offset = cols.offsets[end - 1]
                batch_index = bisect.bisect_right(cols.batch_starts, end - 1) - 1
                epoch = cols.batch_leader_epochs[batch_index] if batch_index >= 0 else None
                next_offset = decoded.next_offset if at_end and decoded.error is None else last_offset + 1
                self._subs.advance(f.tp, f.position_epoch, next_offset, epoch)
                if self._on_records is not None:
                    # Bytes for the metrics: the decoded batches' size, pro rata (no per-record work).
                    share = decoded.bytes_consumed * (end - start) // max(1, total)
                    self._on_records(f.tp, end - start, share)
                if not at_end:
                    break
            if decoded.error is not None:
                if out:
                    break  # the fetch stays current: the next call raises (position at the bad batch)
                self._finish(f)
                raise decoded.error
            if end == start and decoded.next_offset > f.fetch_offset:
                self._subs.advance(f.tp, f.position_epoch, decoded.next_offset, None)
            self._finish(f)
        return out


def enable_columnar(consumer: Any) -> ColumnarCollector:
    """Install a :class:`ColumnarCollector` in ``consumer`` (a :class:`~kafka_handoff.consumer.Consumer`);
    idempotent.  ``consumer.poll()`` is unchanged; :func:`poll_columns` uses the columnar mode."""
    current = consumer._collector
    if isinstance(current, ColumnarCollector):
        return current
    if not isinstance(current, Collector):
        raise TypeError(f"unexpected collector type {type(current).__name__}")
    new = ColumnarCollector.replacing(current)
    consumer._collector = new
    return new


def poll_columns(consumer: Any, timeout: float | None = 0.0) -> ColumnarRecords:
    """``consumer.poll(timeout)`` with the records as one :class:`ColumnChunk` per partition.

    Everything else is ``poll()``'s: rebalance callbacks run inside it, KIP-983's to-be-revoked and lost
    sets come with the result, positions advance past the returned records, at most ``max.poll.records``
    records are returned.
    """
    collector = enable_columnar(consumer)
    collector.columnar = True
    try:
        result: ConsumerRecords = consumer.poll(timeout)
    finally:
        collector.columnar = False
    chunks: dict[TopicPartition, ColumnChunk] = result.by_partition()  # type: ignore[assignment]
    return ColumnarRecords(chunks, to_be_revoked=result.to_be_revoked_partitions, lost=result.lost_partitions)
