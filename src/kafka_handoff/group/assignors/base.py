"""The ``PartitionAssignor`` protocol (classic group protocol, client-side assignment) and its value types.

Users can plug their own assignor: any object with these attributes and methods, given in
``partition.assignment.strategy`` as an instance, a class or a ``module:Class`` string.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from kafka_handoff.types import TopicPartition

__all__ = [
    "EagerAssignor",
    "MemberAssignment",
    "MemberSubscription",
    "PartitionAssignor",
    "RebalanceProtocol",
]


class RebalanceProtocol(enum.IntEnum):
    EAGER = 0
    COOPERATIVE = 1


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """One member's ConsumerProtocolSubscription (v0-v3), as the leader sees it."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """One member's ConsumerProtocolAssignment."""

    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


@runtime_checkable
class PartitionAssignor(Protocol):
    @property
    def name(self) -> str:
        """The protocol name sent in JoinGroup (e.g. ``"cooperative-sticky"``)."""

    @property
    def supported_protocols(self) -> tuple[RebalanceProtocol, ...]: ...

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None: ...

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> dict[str, MemberAssignment]:
        """Leader only: map every member id to its assignment.  ``partitions_per_topic`` holds the
        partition count of every topic any member subscribed to (topics absent from the cluster are
        left out)."""

    def on_assignment(self, assignment: MemberAssignment, generation_id: int) -> None: ...


class EagerAssignor:
    """Base of the stateless EAGER-only assignors (``range``, ``roundrobin``): no subscription user data,
    nothing kept from an assignment.  A subclass sets ``_name`` and implements ``assign``."""

    _name: ClassVar[str]

    @property
    def name(self) -> str:
        return self._name

    @property
    def supported_protocols(self) -> tuple[RebalanceProtocol, ...]:
        return (RebalanceProtocol.EAGER,)

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        return None

    def on_assignment(self, assignment: MemberAssignment, generation_id: int) -> None:
        return None
