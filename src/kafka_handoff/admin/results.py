"""Value types of the admin client: what to create, and what the cluster says."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kafka_handoff.types import BrokerNode, PartitionInfo, TopicPartition

__all__ = [
    "ClusterDescription",
    "ConfigEntry",
    "CreateTopicResult",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "NewTopic",
    "TopicDescription",
    "TopicListing",
]


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create.  ``-1`` partitions/replication factor: the broker's defaults
    (``num.partitions``, ``default.replication.factor``).  ``replica_assignments`` (partition -> broker ids)
    replaces both counts."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)
    replica_assignments: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    topic_id: uuid.UUID | None
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str | None]
    """The topic's effective configuration as CreateTopics v5+ reports it (empty for older brokers)."""
    created: bool = True
    """False when the topic existed already and ``if_not_exists`` was given."""


@dataclass(frozen=True, slots=True)
class TopicListing:
    name: str
    topic_id: uuid.UUID | None
    internal: bool


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    internal: bool
    partitions: tuple[PartitionInfo, ...]

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0

    def topic_partitions(self) -> list[TopicPartition]:
        return [TopicPartition(self.name, p.partition) for p in self.partitions]


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    """DescribeCluster: the controller as the broker sees it (in KRaft a random live broker id)."""
    brokers: tuple[BrokerNode, ...]


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    """``consumer`` for consumer groups of either protocol, ``""`` for some, ``connect`` etc."""
    state: str | None
    """``Stable``, ``Empty``, ``PreparingRebalance``, ... (ListGroups v4+; ``None`` before)."""
    type: str | None
    """``classic``, ``consumer``, ``share``, ``streams`` (ListGroups v5+; ``None`` before)."""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None
    assignment: tuple[TopicPartition, ...]
    """Classic: decoded from the member's ConsumerProtocolAssignment; consumer protocol: the current one."""
    target_assignment: tuple[TopicPartition, ...] | None = None
    """Consumer protocol only: what the coordinator wants the member to own."""
    member_epoch: int | None = None
    """Consumer protocol only."""
    subscribed_topics: tuple[str, ...] = ()
    subscribed_regex: str | None = None
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    type: str
    """``classic`` (described with DescribeGroups) or ``consumer`` (ConsumerGroupDescribe, KIP-848)."""
    state: str
    protocol_type: str
    assignor: str
    """Classic: the chosen protocol (assignor) name; consumer protocol: the server-side assignor."""
    members: tuple[MemberDescription, ...]
    coordinator: BrokerNode | None = None
    group_epoch: int | None = None
    assignment_epoch: int | None = None

    def assigned_partitions(self) -> list[TopicPartition]:
        return sorted(tp for m in self.members for tp in m.assignment)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str
    """``TOPIC_CONFIG`` (set on the topic), ``DEFAULT_CONFIG``, ``STATIC_BROKER_CONFIG``, ..."""
    read_only: bool
    sensitive: bool

    @property
    def is_default(self) -> bool:
        return self.source == "DEFAULT_CONFIG"
