"""The classic leader's check of a custom COOPERATIVE assignor's output (Java's
``ConsumerCoordinator.validateCooperativeAssignment``).

Under the cooperative protocol a partition may not be taken from one member and given to another in the
same rebalance: the old owner must revoke it first, and the new owner gets it in the follow-up rebalance.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from kafka_handoff.errors import IllegalStateError
from kafka_handoff.group.assignors.base import MemberAssignment
from kafka_handoff.types import TopicPartition

__all__ = ["COOPERATIVE_VIOLATION_MESSAGE", "validate_cooperative_assignment"]

COOPERATIVE_VIOLATION_MESSAGE = "Assignor supporting the COOPERATIVE protocol violates its requirements"


def _partitions(value: MemberAssignment | Collection[TopicPartition]) -> set[TopicPartition]:
    if isinstance(value, MemberAssignment):
        return set(value.partitions)
    return set(value)


def validate_cooperative_assignment(
    previous_owned: Mapping[str, Collection[TopicPartition]],
    new_assignment: Mapping[str, MemberAssignment | Collection[TopicPartition]],
) -> None:
    """Raise ``IllegalStateError`` when some partition is removed from one member and added to another.

    ``previous_owned`` holds each member's owned partitions from its subscription; ``new_assignment`` the
    assignor's output (``MemberAssignment`` or plain partition collections).  A member missing from
    ``new_assignment`` counts as assigned nothing.
    """
    added: dict[TopicPartition, str] = {}
    revoked: dict[TopicPartition, str] = {}
    for member in sorted(set(previous_owned) | set(new_assignment)):
        owned = set(previous_owned.get(member, ()))
        assigned = _partitions(new_assignment.get(member, ()))
        for tp in assigned - owned:
            added[tp] = member
        for tp in owned - assigned:
            revoked[tp] = member
    moved = sorted(tp for tp in added if tp in revoked)
    if moved:
        details = ", ".join(f"{tp} from {revoked[tp]} to {added[tp]}" for tp in moved[:10])
        more = f" (and {len(moved) - 10} more)" if len(moved) > 10 else ""
        raise IllegalStateError(
            f"{COOPERATIVE_VIOLATION_MESSAGE}: partitions moved directly between members in one "
            f"rebalance: {details}{more}"
        )
