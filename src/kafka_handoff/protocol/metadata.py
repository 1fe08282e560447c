"""Cluster metadata: parsing Metadata responses and the metadata request manager (sans-I/O).

Used by every client (consumer, producer, admin).  The manager keeps the latest
:class:`~kafka_handoff.types.ClusterMetadata`, refreshes it every ``metadata.max.age.ms`` or when someone
asks (:meth:`MetadataManager.request_update`), and notifies listeners with every new snapshot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.requests import ANY_NODE, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import BrokerNode, ClusterMetadata, PartitionInfo, TopicPartition

__all__ = ["MetadataManager", "keep_newer_leaders", "parse_metadata"]

_MISSING_LEADER = (ErrorCode.unknown_topic_or_partition, ErrorCode.leader_not_available)


def parse_metadata(response: Any) -> ClusterMetadata:
    brokers = {
        int(b.node_id): BrokerNode(int(b.node_id), str(b.host), int(b.port), b.rack) for b in response.brokers
    }
    partitions: dict[str, tuple[PartitionInfo, ...]] = {}
    topic_ids: dict[str, Any] = {}
    internal: set[str] = set()
    errors: dict[str, int] = {}
    for t in response.topics:
        name = t.name
        if name is None:
            continue
        code = int(t.error_code)
        if code != ErrorCode.none:
            errors[name] = code
            continue
        tid = getattr(t, "topic_id", None)
        if tid is not None and tid.int != 0:
            topic_ids[name] = tid
        if getattr(t, "is_internal", False):
            internal.add(name)
        parts = [
            PartitionInfo(
                topic=name,
                partition=int(p.partition_index),
                leader=int(p.leader_id),
                leader_epoch=int(getattr(p, "leader_epoch", -1)),
                replicas=tuple(int(r) for r in p.replica_nodes),
                isr=tuple(int(r) for r in p.isr_nodes),
                offline_replicas=tuple(int(r) for r in getattr(p, "offline_replicas", ())),
                error_code=int(p.error_code),
            )
            for p in t.partitions
        ]
        parts.sort(key=lambda p: p.partition)
        partitions[name] = tuple(parts)
    return ClusterMetadata(
        brokers=brokers,
        controller_id=int(getattr(response, "controller_id", -1)),
        cluster_id=getattr(response, "cluster_id", None),
        partitions=partitions,
        topic_ids=topic_ids,
        internal_topics=frozenset(internal),
        topic_errors=errors,
    )


def keep_newer_leaders(old: ClusterMetadata, new: ClusterMetadata) -> ClusterMetadata:
    """``new``, except that a partition whose leader epoch went backwards keeps its entry from ``old``.

    A broker that has not caught up with the controller answers Metadata with an older leader (as Java's
    ``Metadata`` does, an older epoch never replaces a newer one, unless the topic was re-created).  Without
    this, a refresh served by a lagging broker sends fetches back to a deposed leader."""
    if not old.partitions:
        return new
    changed: dict[str, tuple[PartitionInfo, ...]] = {}
    for topic, parts in new.partitions.items():
        old_parts = old.partitions.get(topic)
        if not old_parts or old.topic_ids.get(topic) != new.topic_ids.get(topic):
            continue
        by_index = {p.partition: p for p in old_parts}
        merged = list(parts)
        replaced = False
        for i, p in enumerate(parts):
            o = by_index.get(p.partition)
            if o is not None and o.leader_epoch >= 0 and 0 <= p.leader_epoch < o.leader_epoch:
                merged[i] = o
                replaced = True
        if replaced:
            changed[topic] = tuple(merged)
    if not changed:
        return new
    return dataclasses.replace(new, partitions={**new.partitions, **changed})


class MetadataManager:
    """Keeps cluster metadata fresh for a set of topics (or all topics)."""

    def __init__(
        self,
        *,
        max_age_ms: int = 300000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        allow_auto_topic_creation: bool = True,
        topics: Callable[[], frozenset[str] | None] = lambda: frozenset(),
    ) -> None:
        self.cluster = ClusterMetadata()
        self._max_age = max_age_ms
        self._backoff_base = retry_backoff_ms
        self._backoff_max = retry_backoff_max_ms
        self._backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self._auto_create = allow_auto_topic_creation
        self._topics = topics
        """Returns the topics to fetch, or ``None`` for all topics."""
        self._last_refresh_ms: int | None = None
        self._need_update = True
        self._in_flight = False
        self._attempts = 0
        self._next_attempt_ms = 0
        self._waiters: list[tuple[Future[ClusterMetadata], frozenset[str] | None]] = []
        self.listeners: list[Callable[[ClusterMetadata, int], None]] = []
        self.last_error: BaseException | None = None
        self.updates = 0

    def request_update(self) -> None:
        self._need_update = True

    def wait_for_update(
        self, future: Future[ClusterMetadata], extra_topics: frozenset[str] | None = None
    ) -> None:
        """Complete ``future`` with the snapshot of the next successful refresh.  ``extra_topics`` are
        fetched in that refresh even if nobody subscribed to them (``None`` = all topics)."""
        self._waiters.append((future, extra_topics))
        self._need_update = True

    def poll(self, now_ms: int) -> PollResult:
        if self._in_flight:
            return PollResult.idle()
        due = (
            self._need_update
            or self._last_refresh_ms is None
            or now_ms - self._last_refresh_ms >= self._max_age
        )
        if not due:
            assert self._last_refresh_ms is not None
            return PollResult.idle(self._last_refresh_ms + self._max_age - now_ms)
        if now_ms < self._next_attempt_ms:
            return PollResult.idle(self._next_attempt_ms - now_ms)
        if self._last_refresh_ms is not None and now_ms < self._last_refresh_ms + self._backoff_base:
            # Refresh backoff (as Java's): a burst of update requests cannot cause back-to-back refreshes.
            return PollResult.idle(self._last_refresh_ms + self._backoff_base - now_ms)
        topics = self._topics()
        all_topics = topics is None
        for _fut, extra in self._waiters:
            if extra is None:
                all_topics = True
            elif topics is not None:
                topics = topics | extra
        self._in_flight = True
        self._need_update = False
        waiters = list(self._waiters)
        self._waiters.clear()
        names = None if all_topics else sorted(topics or ())

        def build(version: int) -> dict[str, Any]:
            return {
                "topics": None if names is None else [{"name": n, "topic_id": None} for n in names],
                "allow_auto_topic_creation": self._auto_create,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            }

        def on_response(response: Any, _version: int, now: int) -> None:
            self._in_flight = False
            cluster = keep_newer_leaders(self.cluster, parse_metadata(response))
            self._last_refresh_ms = now
            self._attempts = 0
            self.updates += 1
            if any(code in _MISSING_LEADER for code in cluster.topic_errors.values()) or any(
                p.leader < 0 for parts in cluster.partitions.values() for p in parts
            ):
                # Topic being created or leader election: refresh again soon.
                self._need_update = True
                self._next_attempt_ms = now + self._backoff_base
            self.cluster = cluster
            for listener in self.listeners:
                listener(cluster, now)
            for fut, _extra in waiters:
                if not fut.done():
                    fut.set_result(cluster)

        def on_failure(error: BaseException, now: int) -> None:
            self._in_flight = False
            self._need_update = True
            self._attempts += 1
            self.last_error = error
            self._next_attempt_ms = now + self._backoff.after_failures(self._attempts)
            self._waiters.extend(waiters)

        request = UnsentRequest(
            api_key=ApiKey.METADATA,
            node=ANY_NODE,
            build=build,
            on_response=on_response,
            on_failure=on_failure,
            min_version=1,
        )
        return PollResult([request], self._backoff_base)

    def update_leaders(
        self,
        leaders: Mapping[TopicPartition, tuple[int, int]],
        nodes: Iterable[BrokerNode],
        now_ms: int,
    ) -> set[TopicPartition]:
        """Apply KIP-951 leader hints (``{tp: (leader id, leader epoch)}`` and the leaders' endpoints from a
        Fetch or Produce response) without waiting for a Metadata refresh, as Java's
        ``Metadata.updatePartitionLeadership``.  A hint is used only when its epoch is newer than the known
        one and its leader's address is known; listeners see the new snapshot.  Returns the partitions whose
        leader was updated."""
        cluster = self.cluster
        brokers = dict(cluster.brokers)
        for node in nodes:
            brokers[node.node_id] = node
        by_topic: dict[str, dict[int, tuple[int, int]]] = {}
        for tp, hint in leaders.items():
            by_topic.setdefault(tp.topic, {})[tp.partition] = hint
        changed: dict[str, tuple[PartitionInfo, ...]] = {}
        updated: set[TopicPartition] = set()
        for topic, hints in by_topic.items():
            parts = cluster.partitions.get(topic)
            if not parts:
                continue
            merged = list(parts)
            for i, p in enumerate(parts):
                found = hints.get(p.partition)
                if found is None:
                    continue
                leader, epoch = found
                if leader < 0 or epoch <= p.leader_epoch or leader not in brokers:
                    continue
                merged[i] = dataclasses.replace(p, leader=leader, leader_epoch=epoch)
                updated.add(TopicPartition(topic, p.partition))
            if merged != list(parts):
                changed[topic] = tuple(merged)
        if not updated:
            return updated
        self.cluster = dataclasses.replace(
            cluster, brokers=brokers, partitions={**cluster.partitions, **changed}
        )
        for listener in self.listeners:
            listener(self.cluster, now_ms)
        return updated
