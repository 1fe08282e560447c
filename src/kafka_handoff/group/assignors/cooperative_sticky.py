"""``cooperative-sticky``: Java's ``CooperativeStickyAssignor`` (COOPERATIVE and EAGER).

The same balanced, sticky assignment as ``sticky``, with two differences:

* Member data comes from the subscription itself: ``owned_partitions`` plus ``generation_id`` (v2+).  For
  subscriptions older than v2 (no generation) the generation is read from the user data, which this
  assignor fills -- like Java -- with its last generation as a 4-byte int32.
* **Incremental handover.**  A partition that the computed assignment gives to a member other than its
  valid previous owner while some other member claimed it (i.e. a partition changing owner, or one whose
  ownership is disputed) is *withheld*: left out of the new owner's assignment this round.  The old
  owner sees it missing, revokes it and rejoins; the follow-up rebalance hands it out, now unclaimed.
  So no partition is ever revoked from one member and added to another in the same rebalance.
  :attr:`CooperativeStickyAssignor.last_withheld` tells what was held back.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from kafka_handoff.group.assignors._sticky_core import DEFAULT_GENERATION, Claims
from kafka_handoff.group.assignors.base import MemberAssignment, MemberSubscription, RebalanceProtocol
from kafka_handoff.group.assignors.sticky import StickyBase
from kafka_handoff.types import TopicPartition

__all__ = ["CooperativeStickyAssignor", "withhold_transfers"]

_GENERATION = struct.Struct(">i")


def withhold_transfers(
    assignment: Mapping[str, list[TopicPartition]],
    owned: Mapping[str, frozenset[TopicPartition]],
    previous_owner: Mapping[TopicPartition, str],
) -> tuple[dict[str, list[TopicPartition]], dict[TopicPartition, str]]:
    """Remove from each member the partitions that another member may still be consuming.

    A partition stays in member M's assignment only if M is its valid previous owner or no other member
    claimed it (``owned``: what each member's subscription says it owns).  A stale or duplicate claim
    by M itself does not count: the member that really owns it must revoke it first.  Returns the
    adjusted assignment and ``partition -> member it will go to`` for what was withheld.
    """
    claimants: dict[TopicPartition, int] = {}
    for claimed in owned.values():
        for tp in claimed:
            claimants[tp] = claimants.get(tp, 0) + 1
    adjusted: dict[str, list[TopicPartition]] = {}
    withheld: dict[TopicPartition, str] = {}
    for member, parts in assignment.items():
        mine = owned.get(member, frozenset())
        keep: list[TopicPartition] = []
        for tp in parts:
            others = claimants.get(tp, 0) - (1 if tp in mine else 0)
            if others > 0 and previous_owner.get(tp) != member:
                withheld[tp] = member
            else:
                keep.append(tp)
        adjusted[member] = keep
    return adjusted, withheld


class CooperativeStickyAssignor(StickyBase):
    """Java's ``org.apache.kafka.clients.consumer.CooperativeStickyAssignor``."""

    def __init__(self) -> None:
        self._generation = DEFAULT_GENERATION
        self.last_withheld: dict[TopicPartition, str] = {}

    @property
    def name(self) -> str:
        return "cooperative-sticky"

    @property
    def supported_protocols(self) -> tuple[RebalanceProtocol, ...]:
        return (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        return _GENERATION.pack(self._generation)

    def _claims(self, subscription: MemberSubscription) -> Claims:
        if subscription.generation_id >= 0:
            return Claims(subscription.owned_partitions, subscription.generation_id)
        generation = DEFAULT_GENERATION
        data = subscription.user_data
        if data is not None and len(data) >= 4:
            generation = _GENERATION.unpack_from(data)[0]
        return Claims(subscription.owned_partitions, generation)

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> dict[str, MemberAssignment]:
        result = self._sticky(partitions_per_topic, subscriptions)
        owned = {member: frozenset(sub.owned_partitions) for member, sub in subscriptions.items()}
        adjusted, withheld = withhold_transfers(result.assignment, owned, result.previous_owner)
        self.last_withheld = withheld
        return {member: MemberAssignment(partitions=tuple(parts)) for member, parts in adjusted.items()}

    def on_assignment(self, assignment: MemberAssignment, generation_id: int) -> None:
        self._generation = generation_id
