"""Value types shared by every layer: topic-partitions, offsets, records, cluster metadata."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "BrokerNode",
    "ClusterMetadata",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "PartitionInfo",
    "RecordMetadata",
    "TopicPartition",
]


class TopicPartition(NamedTuple):
    """A topic and a partition number; hashable, immutable, ordered by (topic, partition)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int | None = None


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int


@dataclass(slots=True)
class ConsumerRecord:
    """One record as returned by ``Consumer.poll()``."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: Sequence[tuple[str, bytes | None]] = ()
    leader_epoch: int | None = None
    serialized_key_size: int = -1
    serialized_value_size: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class ConsumerGroupMetadata(NamedTuple):
    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """An immutable snapshot of what a Metadata response said about the cluster."""

    brokers: Mapping[int, BrokerNode] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None
    partitions: Mapping[str, tuple[PartitionInfo, ...]] = field(default_factory=dict)
    topic_ids: Mapping[str, uuid.UUID] = field(default_factory=dict)
    internal_topics: frozenset[str] = frozenset()
    topic_errors: Mapping[str, int] = field(default_factory=dict)

    def topic_names_by_id(self) -> dict[uuid.UUID, str]:
        return {tid: name for name, tid in self.topic_ids.items()}

    def partitions_for(self, topic: str) -> tuple[PartitionInfo, ...] | None:
        return self.partitions.get(topic)

    def partition_count(self, topic: str) -> int | None:
        parts = self.partitions.get(topic)
        return None if parts is None else len(parts)

    def leader_for(self, tp: TopicPartition) -> int | None:
        parts = self.partitions.get(tp.topic)
        if parts is None:
            return None
        for p in parts:
            if p.partition == tp.partition:
                return p.leader if p.leader >= 0 else None
        return None

    def topics(self) -> Iterable[str]:
        return self.partitions.keys()
