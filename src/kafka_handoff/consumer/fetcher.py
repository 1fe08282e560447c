"""Fetching: the fetch request manager (network thread) and the fetch buffer (shared with the app thread).

The network thread only moves bytes: it sends at most one Fetch per broker, for fetchable partitions
that have nothing buffered (bounded prefetch: one completed fetch per partition), and puts each
partition's raw record bytes in the :class:`FetchBuffer`.  Decoding happens on the application thread
(:mod:`kafka_handoff.consumer.collector`), so the network thread stays responsive for heartbeats.
"""

from __future__ import annotations

import collections
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka_handoff.consumer.subscription import SubscriptionState
from kafka_handoff.errors import OffsetOutOfRangeError, error_for_code
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.protocol.requests import PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import TopicPartition

__all__ = ["CompletedFetch", "FetchBuffer", "FetchManager"]

# Errors that mean "our metadata is stale": refresh it and fetch again.
_METADATA_ERRORS = {
    3,
    5,
    6,
    74,
    75,
    100,
    103,
}  # unknown topic/partition, leader n/a, not leader, fenced/unknown
# leader epoch, unknown topic id, inconsistent topic id
_RETRY_ERRORS = {7, 13, 56, 9}  # request timed out, network exception, kafka storage error, replica n/a


@dataclass(slots=True)
class CompletedFetch:
    tp: TopicPartition
    fetch_offset: int
    position_epoch: int
    records: bytes | None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: tuple[tuple[int, int], ...] = ()
    error: BaseException | None = None
    # Filled in by the collector as it consumes the batch:
    decoded: Any = None
    next_index: int = 0
    initialized: bool = False


@dataclass(slots=True)
class FetchBuffer:
    """Completed fetches waiting for the application thread; also the app thread's wake-up point."""

    _queue: collections.deque[CompletedFetch] = field(default_factory=collections.deque)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _buffered: set[TopicPartition] = field(default_factory=set)
    _woken: bool = False
    bytes_buffered: int = 0
    """Bytes of the fetches waiting in the queue (the collector's current fetch not included)."""
    _peak: int = 0
    on_release: Callable[[], None] | None = None
    """Called (on the application thread) when a partition was released and the buffer is down to its low
    water mark: set by the consumer to wake the network thread, so the next fetch goes out while the rest
    of the buffered data is handed out, instead of once the buffer ran dry."""

    def add(self, fetches: list[CompletedFetch]) -> None:
        with self._cond:
            for f in fetches:
                self._queue.append(f)
                self._buffered.add(f.tp)
                self.bytes_buffered += len(f.records or b"")
            self._peak = self.bytes_buffered
            self._cond.notify_all()

    def below_low_water(self) -> bool:
        """True when the queue is empty or holds at most half of what it held after the last fetch arrived.

        The fetch manager sends the next fetch only then (one fetch per broker is in flight at a time):
        released partitions are collected into one large fetch, sent early enough to arrive while the
        other half is handed out.  Sending one small fetch per released partition instead costs a full
        round trip per partition, and with the GIL shared by both threads, far more time than it saves.
        """
        with self._cond:
            return self.bytes_buffered == 0 or self.bytes_buffered * 2 <= self._peak

    def has_buffered(self, tp: TopicPartition) -> bool:
        with self._cond:
            return tp in self._buffered

    def buffered_partitions(self) -> set[TopicPartition]:
        with self._cond:
            return set(self._buffered)

    def peek(self) -> CompletedFetch | None:
        with self._cond:
            return self._queue[0] if self._queue else None

    def pop(self) -> CompletedFetch | None:
        with self._cond:
            if not self._queue:
                return None
            f = self._queue.popleft()
            self.bytes_buffered -= len(f.records or b"")
            return f

    def done_with(self, tp: TopicPartition) -> None:
        """The collector has fully consumed (or dropped) the partition's fetch: it may be fetched again."""
        with self._cond:
            if tp not in self._buffered:
                return
            self._buffered.discard(tp)
            wake = self.bytes_buffered == 0 or self.bytes_buffered * 2 <= self._peak
        if wake and self.on_release is not None:
            self.on_release()

    def push_front(self, f: CompletedFetch) -> None:
        with self._cond:
            self._queue.appendleft(f)
            self.bytes_buffered += len(f.records or b"")

    def drop(self, keep: Callable[[TopicPartition], bool]) -> None:
        with self._cond:
            kept = collections.deque(f for f in self._queue if keep(f.tp))
            for f in self._queue:
                if not keep(f.tp):
                    self._buffered.discard(f.tp)
            self._queue = kept
            self.bytes_buffered = sum(len(f.records or b"") for f in kept)

    def notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wakeup(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def take_wakeup(self) -> bool:
        with self._cond:
            woken, self._woken = self._woken, False
            return woken

    def wait(self, timeout_s: float, ready: Callable[[], bool]) -> None:
        """Block until ``ready()`` (evaluated under the lock), a wakeup, or the timeout."""
        with self._cond:
            if ready() or self._woken:
                return
            self._cond.wait(timeout_s)

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)


class FetchManager:
    def __init__(
        self,
        subscriptions: SubscriptionState,
        metadata: MetadataManager,
        buffer: FetchBuffer,
        *,
        fetch_min_bytes: int,
        fetch_max_bytes: int,
        fetch_max_wait_ms: int,
        max_partition_fetch_bytes: int,
        isolation_level: int,
        rack_id: str,
        retry_backoff_ms: int,
        on_fetched: Callable[[int, int, int], None] | None = None,
    ) -> None:
        self._subs = subscriptions
        self._metadata = metadata
        self._buffer = buffer
        self._min_bytes = fetch_min_bytes
        self._max_bytes = fetch_max_bytes
        self._max_wait = fetch_max_wait_ms
        self._partition_max = max_partition_fetch_bytes
        self._isolation = isolation_level
        self._rack = rack_id
        self._backoff = retry_backoff_ms
        self._in_flight: dict[int, set[TopicPartition]] = {}
        self._node_backoff: dict[int, int] = {}
        self._on_fetched = on_fetched
        self.enabled = True

    def poll(self, now_ms: int) -> PollResult:
        if not self.enabled:
            return PollResult.idle()
        fetchable = self._subs.fetchable()
        if not fetchable or not self._buffer.below_low_water():
            return PollResult.idle()  # the buffer wakes the network thread when it drains (on_release)
        cluster = self._metadata.cluster
        buffered = self._buffer.buffered_partitions()
        busy = set().union(*self._in_flight.values()) if self._in_flight else set()
        per_node: dict[int, list[tuple[TopicPartition, int, int | None, int]]] = {}
        missing_leader = False
        for tp, (pos, pepoch) in fetchable.items():
            if tp in buffered or tp in busy:
                continue
            leader = cluster.leader_for(tp)
            if leader is None:
                missing_leader = True
                continue
            if leader in self._in_flight or self._node_backoff.get(leader, 0) > now_ms:
                continue
            per_node.setdefault(leader, []).append((tp, pos.offset, pos.leader_epoch, pepoch))
        if missing_leader:
            self._metadata.request_update()
        requests = [self._request(node, parts, now_ms) for node, parts in per_node.items()]
        wait = self._backoff if missing_leader else 5000
        return PollResult(requests, wait)

    def _request(
        self, node: int, parts: list[tuple[TopicPartition, int, int | None, int]], now_ms: int
    ) -> UnsentRequest:
        cluster = self._metadata.cluster
        topic_ids = cluster.topic_ids
        by_topic: dict[str, list[tuple[TopicPartition, int, int | None, int]]] = {}
        for item in parts:
            by_topic.setdefault(item[0].topic, []).append(item)
        self._in_flight[node] = {p[0] for p in parts}
        sent = {p[0]: (p[1], p[3]) for p in parts}
        use_ids = all(t in topic_ids for t in by_topic)
        names_by_id = {topic_ids[t]: t for t in by_topic if t in topic_ids}

        def build(version: int) -> dict[str, Any]:
            topics = []
            for topic, items in by_topic.items():
                entry: dict[str, Any] = {
                    "partitions": [
                        {
                            "partition": tp.partition,
                            "current_leader_epoch": -1 if epoch is None else epoch,
                            "fetch_offset": offset,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": self._partition_max,
                        }
                        for tp, offset, epoch, _pe in items
                    ]
                }
                if version >= 13:
                    entry["topic_id"] = topic_ids[topic]
                else:
                    entry["topic"] = topic
                topics.append(entry)
            return {
                "replica_id": -1,
                "max_wait": self._max_wait,
                "min_bytes": self._min_bytes,
                "max_bytes": self._max_bytes,
                "isolation_level": self._isolation,
                "session_id": 0,
                "session_epoch": -1,
                "topics": topics,
                "forgotten_topics_data": [],
                "rack_id": self._rack,
            }

        def on_response(response: Any, version: int, now: int) -> None:
            self._in_flight.pop(node, None)
            top_error = int(getattr(response, "error_code", 0))
            if top_error != 0:
                self._node_backoff[node] = now + self._backoff
                if top_error in _METADATA_ERRORS:
                    self._metadata.request_update()
                return
            completed: list[CompletedFetch] = []
            total_bytes = 0
            total_records_hint = 0
            for t in response.responses:
                topic = names_by_id.get(t.topic_id) if version >= 13 else t.topic
                if topic is None:
                    self._metadata.request_update()
                    continue
                for p in t.partitions:
                    tp = TopicPartition(topic, int(p.partition_index))
                    sent_info = sent.get(tp)
                    if sent_info is None:
                        continue
                    fetch_offset, pepoch = sent_info
                    code = int(p.error_code)
                    if code == 0:
                        records = p.records
                        self._subs.update_watermarks(
                            tp, int(p.high_watermark), int(p.last_stable_offset), int(p.log_start_offset)
                        )
                        if records:
                            total_bytes += len(records)
                            aborted = tuple(
                                (int(a.producer_id), int(a.first_offset))
                                for a in (p.aborted_transactions or ())
                            )
                            completed.append(
                                CompletedFetch(
                                    tp,
                                    fetch_offset,
                                    pepoch,
                                    bytes(records),
                                    int(p.high_watermark),
                                    int(p.last_stable_offset),
                                    int(p.log_start_offset),
                                    aborted,
                                )
                            )
                    elif code == 1:  # OFFSET_OUT_OF_RANGE
                        self._on_out_of_range(tp, fetch_offset, pepoch, completed)
                    elif code in _METADATA_ERRORS or code in _RETRY_ERRORS:
                        self._metadata.request_update()
                    else:
                        completed.append(
                            CompletedFetch(
                                tp, fetch_offset, pepoch, None, error=error_for_code(code, str(tp))
                            )
                        )
            if completed:
                self._buffer.add(completed)
            if self._on_fetched is not None:
                self._on_fetched(total_bytes, total_records_hint, now - now_ms)

        def on_failure(error: BaseException, now: int) -> None:
            self._in_flight.pop(node, None)
            self._node_backoff[node] = now + self._backoff
            self._metadata.request_update()

        return UnsentRequest(
            api_key=ApiKey.FETCH,
            node=node,
            build=build,
            on_response=on_response,
            on_failure=on_failure,
            min_version=13 if use_ids else 4,
            max_version=None if use_ids else 12,
            timeout_ms=None,
        )

    def _on_out_of_range(
        self, tp: TopicPartition, fetch_offset: int, pepoch: int, completed: list[CompletedFetch]
    ) -> None:
        st = self._subs.get(tp)
        if st is None or st.position_epoch != pepoch:
            return
        strategy = self._subs.default_reset
        if strategy == "none":
            completed.append(
                CompletedFetch(
                    tp,
                    fetch_offset,
                    pepoch,
                    None,
                    error=OffsetOutOfRangeError(
                        f"fetch position {fetch_offset} is out of range for partition {tp} "
                        "and auto.offset.reset=none"
                    ),
                )
            )
            return
        self._subs.request_reset(tp, strategy)

    def forget(self, node: int) -> None:
        self._in_flight.pop(node, None)


def _uuid_or_none(value: Any) -> uuid.UUID | None:
    return value if isinstance(value, uuid.UUID) else None
