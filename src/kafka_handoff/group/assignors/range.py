"""``range``: Java's ``RangeAssignor`` (EAGER only).

Per topic, the members subscribed to it are put in order -- static members (with a ``group.instance.id``)
first, ordered by instance id, then the others by member id -- and each gets a contiguous range of
partitions; with ``n`` partitions and ``m`` members the first ``n % m`` members get one extra.

Example (Java's javadoc): members C0, C1 subscribed to t0 and t1 of 3 partitions each get
``C0: [t0p0, t0p1, t1p0, t1p1]`` and ``C1: [t0p2, t1p2]``.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafka_handoff.group.assignors.base import EagerAssignor, MemberAssignment, MemberSubscription
from kafka_handoff.types import TopicPartition

__all__ = ["RangeAssignor", "member_order_key"]


def member_order_key(member_id: str, subscription: MemberSubscription) -> tuple[int, str, str]:
    """Java's ``MemberInfo`` order: members with a group instance id first (by it), then by member id."""
    if subscription.group_instance_id is not None:
        return (0, subscription.group_instance_id, member_id)
    return (1, member_id, "")


class RangeAssignor(EagerAssignor):
    """Java's ``org.apache.kafka.clients.consumer.RangeAssignor``."""

    _name = "range"

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> dict[str, MemberAssignment]:
        members_per_topic: dict[str, list[str]] = {}
        for member, sub in subscriptions.items():
            for topic in set(sub.topics):
                members_per_topic.setdefault(topic, []).append(member)
        result: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
        for topic in sorted(members_per_topic):
            n = partitions_per_topic.get(topic, 0)
            if n <= 0:
                continue
            members = sorted(members_per_topic[topic], key=lambda m: member_order_key(m, subscriptions[m]))
            per_member, extra = divmod(n, len(members))
            for i, member in enumerate(members):
                start = per_member * i + min(i, extra)
                length = per_member + (1 if i < extra else 0)
                result[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
        return {member: MemberAssignment(partitions=tuple(parts)) for member, parts in result.items()}
