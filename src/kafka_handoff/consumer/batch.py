"""Columnar polling: records as parallel lists per partition instead of one object per record.

A batch consumer (the PySpark pipeline) turns records into Arrow columns; building a
:class:`~kafka_handoff.types.ConsumerRecord` per record only to take it apart again costs about as much as
decoding.  :func:`poll_columns` is :meth:`Consumer.poll` with the decoding done by
:func:`~kafka_handoff.protocol.records.decode_batches_buffers`: same group semantics (rebalance callbacks,
KIP-983 revoke lists, positions, ``max.poll.records``), but each partition's records come as one
:class:`ColumnChunk` that holds the decoder's Arrow-layout buffers (no Python object per record; its list
attributes are built on first use).

The consumer's one :class:`~kafka_handoff.consumer.collector.Collector` hands out either form, so both
paths share every validity, position and error rule.  Key/value deserializers are not applied on the
columnar path (keys and values stay ``bytes``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from kafka_handoff.consumer.records import ColumnChunk
from kafka_handoff.types import TopicPartition

__all__ = ["ColumnChunk", "ColumnarRecords", "poll_columns"]

_EMPTY: frozenset[TopicPartition] = frozenset()


class ColumnarRecords:
    """What :meth:`Consumer.poll_columns <kafka_handoff.Consumer.poll_columns>` returns: one
    :class:`~kafka_handoff.consumer.records.ColumnChunk` per partition plus KIP-983's sets."""

    __slots__ = ("_chunks", "_on_revoke_seen", "_to_be_revoked", "lost_partitions")

    def __init__(
        self,
        chunks: dict[TopicPartition, ColumnChunk],
        *,
        to_be_revoked: frozenset[TopicPartition] = _EMPTY,
        lost: frozenset[TopicPartition] = _EMPTY,
    ) -> None:
        self._chunks = chunks
        self._to_be_revoked = to_be_revoked
        self._on_revoke_seen: Callable[[], None] | None = None  # set by the consumer (KIP-983 use)
        self.lost_partitions = lost

    @property
    def to_be_revoked_partitions(self) -> frozenset[TopicPartition]:
        """Partitions whose revoke was requested (KIP-983); see ``ConsumerRecords``."""
        if self._on_revoke_seen is not None:
            self._on_revoke_seen()
        return self._to_be_revoked

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


def poll_columns(consumer: Any, timeout: float | None = 0.0) -> ColumnarRecords:
    """``consumer.poll(timeout)`` with the records as one :class:`ColumnChunk` per partition.

    Everything else is ``poll()``'s: rebalance callbacks run inside it, KIP-983's to-be-revoked and lost
    sets come with the result, positions advance past the returned records, at most ``max.poll.records``
    records are returned.  Same as ``consumer.poll_columns(timeout)``.
    """
    result: ColumnarRecords = consumer.poll_columns(timeout)
    return result
