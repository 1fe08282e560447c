"""The balance-first, stickiness-second assignment shared by ``sticky`` and ``cooperative-sticky``.

Input: the partition count of every topic, each member's subscribed topics, and each member's *claims*
(the partitions it says it owned, with the generation it owned them in).  Output: member -> partitions.

Algorithm (our own; it gives the guarantees of Java's ``AbstractStickyAssignor``):

1. **Resolve claims.**  For every existing partition, the claim with the highest generation wins; two or
   more claims in that same highest generation invalidate the partition for all of them.  A winning claim
   on a topic its member no longer subscribes to is dropped.  Winners keep their partitions (for now).
2. **Fill.**  Unclaimed partitions go, topic by topic (topics with the fewest subscribers first), to the
   subscribed member holding the fewest partitions.
3. **Balance.**  A move takes one partition from member *a* to member *b* when *b* subscribes to its topic
   and ``count(a) >= count(b) + 2``; every move lowers the sum of squared counts, so this terminates.
   First single moves (cheap), then moves along paths ``a -> x1 -> ... -> b`` (each hop hands over one
   partition the next member subscribes to; only the ends change count).  When no such path exists the
   sum of squared counts is minimal, i.e. the assignment is as balanced as the subscriptions allow; in
   particular no member with two or more fewer partitions could take one of another member's
   partitions, and with equal subscriptions counts differ by at most one.
   Moves prefer partitions the giver did not own before the rebalance ("extras"): single moves look for
   an extra first, and paths are searched over extras first, over all partitions only if that fails.
   So previously owned partitions move only when balance needs it.
4. **Restore.**  A previously owned partition that ended up elsewhere goes back to its owner in exchange
   for one of the owner's extras the holder subscribes to (counts unchanged, stickiness up).

Cost: O(P log M) for the fill plus about O(M) per single move and O(M * topics) per path search; a group
of 100 members x 1000 partitions takes a few tens of milliseconds.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kafka_handoff.types import TopicPartition

__all__ = ["Claims", "StickyResult", "resolve_claims", "sticky_assign"]

DEFAULT_GENERATION = -1


@dataclass(frozen=True, slots=True)
class Claims:
    """What one member says it owned: its partitions and the generation it owned them in (-1: unknown)."""

    partitions: Sequence[TopicPartition]
    generation: int = DEFAULT_GENERATION


@dataclass(frozen=True, slots=True)
class StickyResult:
    assignment: dict[str, list[TopicPartition]]
    #: the valid previous owner of each partition after claim resolution
    previous_owner: dict[TopicPartition, str]


def resolve_claims(
    partitions_per_topic: Mapping[str, int],
    claims: Mapping[str, Claims],
) -> dict[TopicPartition, str]:
    """Partition -> its valid previous owner: the unique claimant with the highest generation.

    Claims on partitions that do not exist (unknown topic, partition number out of range) are ignored.
    A partition claimed by two or more members in its highest claimed generation has no valid owner.
    """
    best: dict[TopicPartition, tuple[int, str | None]] = {}
    for member in sorted(claims):
        member_claims = claims[member]
        generation = member_claims.generation
        for tp in set(member_claims.partitions):
            count = partitions_per_topic.get(tp.topic, 0)
            if not 0 <= tp.partition < count:
                continue
            current = best.get(tp)
            if current is None or generation > current[0]:
                best[tp] = (generation, member)
            elif generation == current[0]:
                best[tp] = (generation, None)  # same generation, two owners: invalid for both
    return {tp: owner for tp, (_, owner) in best.items() if owner is not None}


class _Builder:
    """Mutable assignment state indexed by member number; see the module docstring for the phases."""

    def __init__(
        self,
        members: list[str],
        subs: list[frozenset[str]],
        owner_index: dict[TopicPartition, int],
    ) -> None:
        n = len(members)
        self.members = members
        self.subs = subs
        self.owner_index = owner_index
        self.count = [0] * n
        # partitions a member holds that it owned before ("sticky") / did not own ("extra"), by topic
        self.sticky: list[dict[str, list[int]]] = [{} for _ in range(n)]
        self.extra: list[dict[str, list[int]]] = [{} for _ in range(n)]
        # topics of which a member holds any partition (with multiplicity) / any extra partition
        self.topic_count: list[dict[str, int]] = [{} for _ in range(n)]
        self.present: list[set[str]] = [set() for _ in range(n)]
        self.extra_topics: list[set[str]] = [set() for _ in range(n)]
        self.buckets: dict[int, set[int]] = {0: set(range(n))}
        # members by identical subscription first: then topic -> subscribers is one extend per group
        groups: dict[frozenset[str], list[int]] = {}
        for i, topics in enumerate(subs):
            groups.setdefault(topics, []).append(i)
        subscribers: dict[str, list[int]] = {}
        for topics, group in groups.items():
            for t in topics:
                subscribers.setdefault(t, []).extend(group)
        self.subscribers = {t: sorted(ms) for t, ms in subscribers.items()}

    # ---------------------------------------------------------------------------------- primitives

    def _set_count(self, i: int, new: int) -> None:
        old = self.count[i]
        bucket = self.buckets[old]
        bucket.discard(i)
        if not bucket:
            del self.buckets[old]
        self.buckets.setdefault(new, set()).add(i)
        self.count[i] = new

    def add(self, i: int, topic: str, partition: int) -> None:
        if self.owner_index.get(TopicPartition(topic, partition)) == i:
            self.sticky[i].setdefault(topic, []).append(partition)
        else:
            self.extra[i].setdefault(topic, []).append(partition)
            self.extra_topics[i].add(topic)
        tc = self.topic_count[i]
        tc[topic] = tc.get(topic, 0) + 1
        self.present[i].add(topic)
        self._set_count(i, self.count[i] + 1)

    def take(self, i: int, topic: str, from_extra: bool) -> int:
        store = self.extra[i] if from_extra else self.sticky[i]
        parts = store[topic]
        partition = parts.pop()
        if not parts:
            del store[topic]
            if from_extra:
                self.extra_topics[i].discard(topic)
        tc = self.topic_count[i]
        tc[topic] -= 1
        if not tc[topic]:
            del tc[topic]
            self.present[i].discard(topic)
        self._set_count(i, self.count[i] - 1)
        return partition

    def take_specific(self, i: int, tp: TopicPartition) -> None:
        sticky = self.owner_index.get(tp) == i
        store = self.sticky[i] if sticky else self.extra[i]
        parts = store[tp.topic]
        parts.remove(tp.partition)
        if not parts:
            del store[tp.topic]
            if not sticky:
                self.extra_topics[i].discard(tp.topic)
        tc = self.topic_count[i]
        tc[tp.topic] -= 1
        if not tc[tp.topic]:
            del tc[tp.topic]
            self.present[i].discard(tp.topic)
        self._set_count(i, self.count[i] - 1)

    @staticmethod
    def _first_in(store: dict[str, list[int]], topics: frozenset[str]) -> str | None:
        # dicts iterate in insertion order: the choice does not depend on string hashing
        for topic in store:
            if topic in topics:
                return topic
        return None

    def move(self, src: int, dst: int, extras_only: bool) -> None:
        """Move one partition from ``src`` to ``dst`` (which must subscribe to its topic), an extra if any."""
        topic = self._first_in(self.extra[src], self.subs[dst])
        from_extra = topic is not None
        if topic is None and not extras_only:
            topic = self._first_in(self.sticky[src], self.subs[dst])
        if topic is None:  # pragma: no cover - callers only ask for moves that exist
            raise AssertionError("no partition to move")
        partition = self.take(src, topic, from_extra)
        self.add(dst, topic, partition)

    # ---------------------------------------------------------------------------------- phases

    def fill(self, unassigned: dict[str, list[int]]) -> None:
        # topics with the fewest subscribers first; topics with the same subscribers one after the other,
        # so that they share one heap (nothing else changes those members' counts meanwhile)
        def order_key(topic: str) -> tuple[int, tuple[int, ...], str]:
            eligible = self.subscribers.get(topic, [])
            return (len(eligible), tuple(eligible), topic)

        heap: list[tuple[int, int]] = []
        heap_members: list[int] | None = None
        for topic in sorted(unassigned, key=order_key):
            eligible = self.subscribers.get(topic)
            if not eligible:
                continue
            if eligible != heap_members:
                heap = [(self.count[i], i) for i in eligible]
                heapq.heapify(heap)
                heap_members = eligible
            for partition in unassigned[topic]:
                _, i = heapq.heappop(heap)
                self.add(i, topic, partition)
                heapq.heappush(heap, (self.count[i], i))

    def _find_donor(self, b: int, extras_only: bool) -> int | None:
        """A member with ``count >= count(b) + 2`` holding a partition ``b`` subscribes to (an extra one
        preferred, at any such level), or None."""
        threshold = self.count[b] + 2
        top = max(self.buckets)
        if top < threshold:
            return None
        subs_b = self.subs[b]
        levels = [c for c in sorted(self.buckets, reverse=True) if c >= threshold]
        for c in levels:
            for a in self.buckets[c]:
                if not self.extra_topics[a].isdisjoint(subs_b):
                    return a
        if extras_only:
            return None
        for c in levels:
            for a in self.buckets[c]:
                if not self.present[a].isdisjoint(subs_b):
                    return a
        return None

    def local_balance(self, extras_only: bool) -> None:
        n = len(self.members)
        progress = True
        while progress:
            progress = False
            for b in sorted(range(n), key=lambda i: (self.count[i], i)):
                if not self.subs[b]:
                    continue
                while (donor := self._find_donor(b, extras_only)) is not None:
                    self.move(donor, b, extras_only)
                    progress = True

    def _augment_once(self, extras_only: bool) -> bool:
        """Find a path from a member with count L to one with count <= L - 2 and shift along it."""
        receivers = [i for i in range(len(self.members)) if self.subs[i]]
        if not receivers:
            return False
        low = min(self.count[i] for i in receivers)
        levels = sorted(self.buckets, reverse=True)
        for level in levels:
            if level < low + 2:
                break
            sources = self.buckets[level]
            parent: dict[int, int] = dict.fromkeys(sources, -1)
            queue = deque(sorted(sources))
            unvisited = [i for i in receivers if i not in parent]
            target = -1
            while queue and unvisited and target < 0:
                x = queue.popleft()
                held = (self.extra[x] if extras_only else self.topic_count[x]).keys()
                if not held:
                    continue
                remaining: list[int] = []
                for pos, y in enumerate(unvisited):
                    if held.isdisjoint(self.subs[y]):
                        remaining.append(y)
                        continue
                    parent[y] = x
                    if self.count[y] <= level - 2:
                        target = y
                        remaining.extend(unvisited[pos + 1 :])
                        break
                    queue.append(y)
                unvisited = remaining
            if target >= 0:
                path = [target]
                while parent[path[-1]] >= 0:
                    path.append(parent[path[-1]])
                path.reverse()
                for u, v in itertools.pairwise(path):
                    self.move(u, v, extras_only)
                return True
        return False

    def balance(self) -> None:
        # First as balanced as possible by moving extras only (free for stickiness); previously owned
        # partitions move only if that is not enough.  Finishing the first stage before the second is
        # what makes the cooperative follow-up rebalance move no owned partition (two-round convergence).
        self.local_balance(extras_only=True)
        while self._augment_once(extras_only=True):
            pass
        self.local_balance(extras_only=False)
        while self._augment_once(extras_only=True) or self._augment_once(extras_only=False):
            pass

    def restore(self) -> None:
        """Give moved-away owned partitions back to their owners in exchange for one of their extras."""
        changed = True
        while changed:
            changed = False
            for holder in range(len(self.members)):
                for topic, parts in list(self.extra[holder].items()):
                    for partition in list(parts):
                        tp = TopicPartition(topic, partition)
                        owner = self.owner_index.get(tp)
                        if owner is None or owner == holder:
                            continue
                        if self.count[holder] == self.count[owner] + 1:
                            # giving it back keeps the sum of squared counts (balance) unchanged
                            self.take_specific(holder, tp)
                            self.add(owner, topic, partition)
                            changed = True
                            continue
                        swap_topic = self._first_in(self.extra[owner], self.subs[holder])
                        if swap_topic is None:
                            continue
                        swap_partition = self.take(owner, swap_topic, from_extra=True)
                        self.take_specific(holder, tp)
                        self.add(owner, topic, partition)
                        self.add(holder, swap_topic, swap_partition)
                        changed = True

    def result(self) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {}
        for i, member in enumerate(self.members):
            parts = [
                TopicPartition(t, p)
                for store in (self.sticky[i], self.extra[i])
                for t, ps in store.items()
                for p in ps
            ]
            parts.sort()
            out[member] = parts
        return out


def sticky_assign(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Iterable[str]],
    claims: Mapping[str, Claims],
) -> StickyResult:
    """Balanced, sticky assignment of every partition of every subscribed topic (see module docstring).

    ``subscriptions`` maps every member to its topics; ``claims`` may leave members out (no claims).
    Topics missing from ``partitions_per_topic`` (or with no partitions) are ignored.
    """
    members = sorted(subscriptions)
    index = {m: i for i, m in enumerate(members)}
    # many members share one subscription: filter each distinct one once
    distinct: dict[frozenset[str], frozenset[str]] = {}
    subs: list[frozenset[str]] = []
    for m in members:
        raw = frozenset(subscriptions[m])
        filtered = distinct.get(raw)
        if filtered is None:
            filtered = distinct[raw] = frozenset(t for t in raw if partitions_per_topic.get(t, 0) > 0)
        subs.append(filtered)
    topics_in_play: set[str] = set().union(*distinct.values()) if distinct else set()

    owners = resolve_claims({t: partitions_per_topic[t] for t in topics_in_play}, claims)
    owner_index: dict[TopicPartition, int] = {}
    previous_owner: dict[TopicPartition, str] = {}
    for tp, member in owners.items():
        i = index.get(member)
        if i is not None and tp.topic in subs[i]:
            owner_index[tp] = i
            previous_owner[tp] = member

    builder = _Builder(members, subs, owner_index)
    for tp, i in sorted(owner_index.items()):
        builder.add(i, tp.topic, tp.partition)
    unassigned: dict[str, list[int]] = {}
    for topic in sorted(topics_in_play):
        free = [p for p in range(partitions_per_topic[topic]) if TopicPartition(topic, p) not in owner_index]
        if free:
            unassigned[topic] = free
    builder.fill(unassigned)
    builder.balance()
    builder.restore()
    return StickyResult(assignment=builder.result(), previous_owner=previous_owner)
