"""``roundrobin``: Java's ``RoundRobinAssignor`` (EAGER only).

All partitions of all subscribed topics, sorted by topic then partition, are dealt out in turn to the
members in order (static members first by ``group.instance.id``, then by member id); a member not
subscribed to a partition's topic is skipped for that partition (the turn passes to the next one).

Examples (Java's javadoc): C0, C1 subscribed to t0 and t1 of 3 partitions each get
``C0: [t0p0, t0p2, t1p1]``, ``C1: [t0p1, t1p0, t1p2]``; with C0 on t0, C1 on t0+t1, C2 on t0+t1+t2 and
1, 2, 3 partitions: ``C0: [t0p0]``, ``C1: [t1p0]``, ``C2: [t1p1, t2p0, t2p1, t2p2]``.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafka_handoff.group.assignors.base import EagerAssignor, MemberAssignment, MemberSubscription
from kafka_handoff.group.assignors.range import member_order_key
from kafka_handoff.types import TopicPartition

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor(EagerAssignor):
    """Java's ``org.apache.kafka.clients.consumer.RoundRobinAssignor``."""

    _name = "roundrobin"

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> dict[str, MemberAssignment]:
        members = sorted(subscriptions, key=lambda m: member_order_key(m, subscriptions[m]))
        topic_sets = [frozenset(subscriptions[m].topics) for m in members]
        result: dict[str, list[TopicPartition]] = {member: [] for member in members}
        all_topics = sorted({t for ts in topic_sets for t in ts if partitions_per_topic.get(t, 0) > 0})
        cursor = 0
        for topic in all_topics:
            for partition in range(partitions_per_topic[topic]):
                # some member subscribes to ``topic``, so this finds one within len(members) steps
                while topic not in topic_sets[cursor]:
                    cursor = (cursor + 1) % len(members)
                result[members[cursor]].append(TopicPartition(topic, partition))
                cursor = (cursor + 1) % len(members)
        return {member: MemberAssignment(partitions=tuple(parts)) for member, parts in result.items()}
