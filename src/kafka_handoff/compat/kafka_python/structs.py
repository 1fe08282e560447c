"""kafka-python's value types (``kafka.structs``, ``ConsumerRecord``, ``RecordMetadata``).

``TopicPartition``, ``OffsetAndMetadata``, ``OffsetAndTimestamp`` and ``ConsumerGroupMetadata`` are the
native named tuples (same field names and order as kafka-python's), so they mix freely with native calls.
kafka-python writes "no leader epoch" as ``-1``; the compat clients read ``-1`` and ``None`` alike.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, NamedTuple

from kafka_handoff.types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)

__all__ = [
    "BrokerMetadata",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "IsolationLevel",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "PartitionMetadata",
    "RecordMetadata",
    "TopicPartition",
    "native_offset",
]


class ConsumerRecord(NamedTuple):
    """One consumed record, as kafka-python's iterator and ``poll()`` return it."""

    topic: str
    partition: int
    leader_epoch: int | None
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: list[tuple[str, bytes | None]]
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int


class RecordMetadata(NamedTuple):
    """Where a sent record was written (``FutureRecordMetadata.get()``)."""

    topic: str
    partition: int
    topic_partition: TopicPartition
    offset: int
    timestamp: int
    log_start_offset: int
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int


class BrokerMetadata(NamedTuple):
    nodeId: int
    host: str
    port: int
    rack: str | None


class PartitionMetadata(NamedTuple):
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    error: int


class IsolationLevel(enum.IntEnum):
    """kafka-python's ``IsolationLevel`` (``isolation_level=`` accepts it, its name or Kafka's string)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


def native_offset(value: Any) -> OffsetAndMetadata:
    """A commit value (an int, a kafka-python or native ``OffsetAndMetadata``, or a 2/3-tuple) as the native
    ``OffsetAndMetadata``, with kafka-python's leader epoch ``-1`` read as unknown."""
    if isinstance(value, int):
        return OffsetAndMetadata(int(value))
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        offset = int(value[0])
        metadata = value[1] if len(value) > 1 and value[1] is not None else ""
        epoch = value[2] if len(value) > 2 else None
        return OffsetAndMetadata(offset, str(metadata), None if epoch is None or epoch < 0 else int(epoch))
    offset_attr = getattr(value, "offset", None)
    if offset_attr is None:
        raise TypeError(f"an offset must be an int or an OffsetAndMetadata, got {value!r}")
    return native_offset((offset_attr, getattr(value, "metadata", ""), getattr(value, "leader_epoch", None)))
