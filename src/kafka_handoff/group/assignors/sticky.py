"""``sticky``: Java's ``StickyAssignor`` (EAGER only) -- balanced first, sticky second.

An eager member revokes everything before it joins, so its subscription carries no owned partitions.  Like
Java, the assignor therefore remembers its last assignment and generation (``on_assignment``) and sends
them as its subscription user data, in Java's ``StickyAssignorUserData`` layout (no version prefix):

* v0: ``previous_assignment: [topic: string, partitions: [int32]]``
* v1: v0 + ``generation: int32``

so that Java and librdkafka members of the same group understand it.  When a member sends no such user
data, its subscription's ``owned_partitions``/``generation_id`` are used instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kafka_handoff.group.assignors._sticky_core import (
    DEFAULT_GENERATION,
    Claims,
    StickyResult,
    sticky_assign,
)
from kafka_handoff.group.assignors.base import MemberAssignment, MemberSubscription, RebalanceProtocol
from kafka_handoff.types import TopicPartition

__all__ = ["StickyAssignor", "decode_sticky_user_data", "encode_sticky_user_data"]


def encode_sticky_user_data(partitions: Sequence[TopicPartition], generation: int | None) -> bytes:
    """``StickyAssignorUserData`` v1 bytes (v0 when ``generation`` is None)."""
    from kafka_handoff.group import protocol_data as pd  # late: protocol_data imports this package

    out = bytearray()
    pd.write_topic_partitions(out, partitions)
    if generation is not None:
        pd.write_int32(out, generation)
    return bytes(out)


def decode_sticky_user_data(data: bytes) -> Claims:
    """Read ``StickyAssignorUserData`` v1 or v0 (then the generation is unknown, -1).

    Raises ``ConsumerProtocolError`` when the bytes are not in that layout.
    """
    from kafka_handoff.group import protocol_data as pd  # late: protocol_data imports this package

    reader = pd.ByteReader(data, "StickyAssignorUserData")
    partitions = reader.topic_partitions("previous_assignment")
    generation = reader.int32("generation") if reader.remaining >= 4 else DEFAULT_GENERATION
    return Claims(partitions=partitions, generation=generation)


class StickyBase:
    """What ``sticky`` and ``cooperative-sticky`` share: the assignment and the member data."""

    def _claims(self, subscription: MemberSubscription) -> Claims:
        raise NotImplementedError

    def _sticky(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> StickyResult:
        claims = {member: self._claims(sub) for member, sub in subscriptions.items()}
        return sticky_assign(
            partitions_per_topic,
            {member: sub.topics for member, sub in subscriptions.items()},
            claims,
        )


class StickyAssignor(StickyBase):
    """Java's ``org.apache.kafka.clients.consumer.StickyAssignor``."""

    def __init__(self) -> None:
        self._assignment: tuple[TopicPartition, ...] | None = None
        self._generation = DEFAULT_GENERATION

    @property
    def name(self) -> str:
        return "sticky"

    @property
    def supported_protocols(self) -> tuple[RebalanceProtocol, ...]:
        return (RebalanceProtocol.EAGER,)

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        if self._assignment is None:
            return None
        return encode_sticky_user_data(self._assignment, self._generation)

    def _claims(self, subscription: MemberSubscription) -> Claims:
        if subscription.user_data:
            try:
                return decode_sticky_user_data(subscription.user_data)
            except ValueError:
                pass  # not sticky user data: fall back to the subscription's own fields
        return Claims(subscription.owned_partitions, subscription.generation_id)

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> dict[str, MemberAssignment]:
        result = self._sticky(partitions_per_topic, subscriptions)
        return {
            member: MemberAssignment(partitions=tuple(parts)) for member, parts in result.assignment.items()
        }

    def on_assignment(self, assignment: MemberAssignment, generation_id: int) -> None:
        self._assignment = tuple(assignment.partitions)
        self._generation = generation_id
