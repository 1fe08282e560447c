"""Fetching: the fetch request manager (network thread); the fetch buffer it fills (shared with the app
thread) is in :mod:`kafka_handoff.consumer.fetch_buffer`.

The network thread only moves bytes: it sends at most one Fetch per broker, for fetchable partitions
that have nothing buffered (bounded prefetch: one completed fetch per partition), and puts each
partition's raw record bytes in the :class:`FetchBuffer`.  Decoding happens on the application thread
(:mod:`kafka_handoff.consumer.collector`), so the network thread stays responsive for heartbeats.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.consumer.fetch_buffer import CompletedFetch, FetchBuffer
from kafka_handoff.consumer.fetch_session import (
    FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH,
    FetchSession,
    PartitionFetch,
    SessionRequest,
)
from kafka_handoff.consumer.subscription import SubscriptionState
from kafka_handoff.consumer.validation import PositionValidator, StallTracker
from kafka_handoff.errors import Needs, OffsetOutOfRangeError, error_for_code
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.protocol.requests import MAX_POLL_WAIT_MS, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import BrokerNode, ClusterMetadata, TopicPartition

log = logging.getLogger(__name__)

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
_RETRY_ERRORS = {
    ErrorCode.request_timed_out,
    ErrorCode.network_exception,
    ErrorCode.kafka_storage_error,
    ErrorCode.replica_not_available,
}
_SESSION_CLOSE_TIMEOUT_MS = 1000
_LEADER_HINT_ERRORS = {
    ErrorCode.not_leader_or_follower,
    ErrorCode.fenced_leader_epoch,
}  # KIP-951 names the new leader


@dataclass(slots=True)
class _PartitionRetry:
    """Backoff of a partition whose fetch failed at ``leader``/``epoch``: it is not fetched again before
    ``next_ms`` unless metadata (or a KIP-951 hint) shows another leader or epoch."""

    leader: int
    epoch: int
    attempts: int = 0
    next_ms: int = 0


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
        retry_backoff_max_ms: int = 1000,
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
        self._backoff_max = max(retry_backoff_ms, retry_backoff_max_ms)
        self._retry_backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self._in_flight: dict[int, set[TopicPartition]] = {}
        self._sent_ms: dict[int, int] = {}
        self._fetching: dict[TopicPartition, int] = {}
        """The broker each partition's in-flight fetch went to.  A partition whose leader moved is fetched
        from the new leader at once; the old broker's late answer for it is then ignored."""
        self._node_backoff: dict[int, int] = {}
        self._node_failures: dict[int, int] = {}
        self._retry: dict[TopicPartition, _PartitionRetry] = {}
        self._overdue_refresh_ms = 0
        self._validate_now = False
        self.sessions: dict[int, FetchSession] = {}
        """KIP-227 fetch sessions, per broker."""
        self.use_sessions = True
        """False: every fetch is a full, sessionless one (for ``kafka_handoff.bench.fetch_sessions``)."""
        self._subs_version = -1
        self._closing: list[UnsentRequest] | None = None
        self._closes_pending = 0
        self._leader_index: dict[TopicPartition, tuple[int, int]] = {}
        self._indexed: ClusterMetadata | None = None
        self._on_fetched = on_fetched
        self.stalls = StallTracker()
        self.validator = PositionValidator(
            subscriptions,
            metadata,
            buffer,
            leader_of=self.leader_of,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            stalls=self.stalls,
        )
        self.enabled = True

    def leader_of(self, tp: TopicPartition) -> tuple[int, int] | None:
        """(leader id, leader epoch) of ``tp`` in the current metadata (an index rebuilt per snapshot)."""
        cluster = self._metadata.cluster
        if cluster is not self._indexed:
            self._leader_index = {
                TopicPartition(topic, p.partition): (p.leader, p.leader_epoch)
                for topic, parts in cluster.partitions.items()
                for p in parts
            }
            self._indexed = cluster
        return self._leader_index.get(tp)

    def poll(self, now_ms: int) -> PollResult:
        if self._closing is not None:
            closing, self._closing = self._closing, []
            return PollResult(closing)
        if not self.enabled:
            return PollResult.idle()
        # Validation first: positions it completes (or skips) are fetched in this same pass; positions the
        # fetch pass finds on a new leader are validated in this pass too.
        validation = self.validator.poll(now_ms)
        self._validate_now = False
        fetch = self._poll_fetches(now_ms)
        unsent = fetch.unsent + validation.unsent
        wait = min(fetch.wait_ms, validation.wait_ms)
        if self._validate_now:
            again = self.validator.poll(now_ms)
            unsent += again.unsent
            wait = min(wait, again.wait_ms)
        self.stalls.check(now_ms)
        return PollResult(unsent, wait)

    def _poll_fetches(self, now_ms: int) -> PollResult:
        wait = min(MAX_POLL_WAIT_MS, self._check_overdue(now_ms))
        if self._subs.version != self._subs_version:
            # A new assignment: every session starts over with a full fetch.
            self._subs_version = self._subs.version
            for session in self.sessions.values():
                session.reset()
        brokers = self._metadata.cluster.brokers
        if brokers and len(self._in_flight) >= len(brokers) and all(n in self._in_flight for n in brokers):
            return PollResult.idle(wait)  # a fetch in flight to every broker: nothing to send yet
        candidates = self._subs.fetch_candidates()
        if self._retry or len(self.stalls):
            for tp in [tp for tp in self._retry if tp not in candidates]:
                del self._retry[tp]
            # Only partitions the consumer wants fetched now can stall (not paused or buffered ones).
            buffered_now = self._buffer.buffered_partitions()
            self.stalls.retain(
                lambda tp: (tp in candidates and tp not in buffered_now) or self._awaiting_validation(tp)
            )
        if not candidates or not self._buffer.below_low_water():
            return PollResult.idle(wait)  # the buffer wakes the network thread when it drains (on_release)
        buffered = self._buffer.buffered_partitions()
        per_node: dict[int, list[tuple[TopicPartition, int, int, int]]] = {}
        changes: dict[TopicPartition, tuple[int, int]] = {}
        missing_leader = False
        for tp, (pos, pepoch, known_epoch) in candidates.items():
            if tp in buffered:
                continue
            info = self.stalls.leader(self.leader_of, tp, now_ms, "no leader in metadata")
            if info is None:
                missing_leader = True
                continue
            leader, epoch = info
            if epoch != known_epoch:
                # A new leader (or the first fetch): the fetch names the leader's epoch from metadata, never
                # the epoch of the last record consumed.  A position with a record epoch is validated first.
                changes[tp] = (pepoch, epoch)
                if known_epoch is not None and leader in self.sessions:
                    self.sessions[leader].reset()  # a leader change: full fetch from the new leader
                if known_epoch is not None and pos.leader_epoch is not None and epoch >= 0:
                    continue
            if self._fetching.get(tp) == leader:
                continue
            retry = self._retry.get(tp)
            if (
                retry is not None
                and retry.next_ms > now_ms
                and retry.leader == leader
                and retry.epoch == epoch
            ):
                wait = min(wait, retry.next_ms - now_ms)
                continue
            if leader in self._in_flight:
                continue
            not_before = self._node_backoff.get(leader, 0)
            if not_before > now_ms:
                wait = min(wait, not_before - now_ms)
                continue
            per_node.setdefault(leader, []).append((tp, pos.offset, epoch, pepoch))
        if changes and self._subs.on_leader_epochs(changes):
            self._validate_now = True
        if missing_leader:
            self._metadata.request_update()
            wait = min(wait, self._backoff)
        requests = [self._request(node, parts, now_ms) for node, parts in per_node.items()]
        return PollResult(requests, wait)

    def _awaiting_validation(self, tp: TopicPartition) -> bool:
        st = self._subs.get(tp)
        return st is not None and st.awaiting_validation

    def _check_overdue(self, now_ms: int) -> int:
        """A fetch unanswered well past ``fetch.max.wait.ms`` hints at a hung broker: refresh metadata (at
        most every ``retry.backoff.max.ms``) so that its partitions move to a new leader as soon as one is
        elected, instead of only when the request times out.  Returns how long until the next check."""
        if not self._sent_ms:
            return MAX_POLL_WAIT_MS
        overdue_after = self._max_wait + max(1000, self._backoff_max)
        oldest = min(self._sent_ms.values())
        due = oldest + overdue_after
        if now_ms < due:
            return due - now_ms
        if now_ms >= self._overdue_refresh_ms:
            self._metadata.request_update()
            self._overdue_refresh_ms = now_ms + self._backoff_max
        return max(1, self._overdue_refresh_ms - now_ms)

    def _fail_partition(self, tp: TopicPartition, leader: int, epoch: int, now_ms: int, reason: str) -> None:
        retry = self._retry.get(tp)
        if retry is None:
            retry = self._retry[tp] = _PartitionRetry(leader, epoch)
        retry.leader, retry.epoch = leader, epoch
        retry.attempts += 1
        retry.next_ms = now_ms + self._retry_backoff.after_failures(retry.attempts)
        self.stalls.failed(tp, now_ms, reason)

    def _fail_node(self, node: int, now_ms: int) -> None:
        failures = self._node_failures.get(node, 0) + 1
        self._node_failures[node] = failures
        self._node_backoff[node] = now_ms + self._retry_backoff.after_failures(failures)

    def _release(self, node: int, sent: Iterable[TopicPartition]) -> set[TopicPartition]:
        """The request to ``node`` completed: the partitions it still fetches (not moved elsewhere since)."""
        self._in_flight.pop(node, None)
        self._sent_ms.pop(node, None)
        current: set[TopicPartition] = set()
        for tp in sent:
            if self._fetching.get(tp) == node:
                del self._fetching[tp]
                current.add(tp)
        return current

    def _topics(
        self, partitions: Iterable[tuple[TopicPartition, PartitionFetch]], version: int
    ) -> list[dict[str, Any]]:
        topic_ids = self._metadata.cluster.topic_ids
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, data in partitions:
            by_topic.setdefault(tp.topic, []).append(
                {
                    "partition": tp.partition,
                    "current_leader_epoch": data.current_leader_epoch,
                    "fetch_offset": data.fetch_offset,
                    "last_fetched_epoch": -1,
                    "log_start_offset": -1,
                    "partition_max_bytes": self._partition_max,
                }
            )
        key = "topic_id" if version >= 13 else "topic"
        return [
            {key: topic_ids[topic] if version >= 13 else topic, "partitions": ps}
            for topic, ps in by_topic.items()
        ]

    def _forgotten(self, partitions: Iterable[TopicPartition], version: int) -> list[dict[str, Any]]:
        topic_ids = self._metadata.cluster.topic_ids
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        if version >= 13:
            return [
                {"topic_id": topic_ids[t], "partitions": ps} for t, ps in by_topic.items() if t in topic_ids
            ]
        return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]

    def _request(
        self, node: int, parts: list[tuple[TopicPartition, int, int, int]], now_ms: int
    ) -> UnsentRequest:
        topic_ids = self._metadata.cluster.topic_ids
        self._in_flight[node] = {p[0] for p in parts}
        self._sent_ms[node] = now_ms
        for p in parts:
            self._fetching[p[0]] = node
        # tp -> (fetch offset, position epoch, leader epoch sent)
        sent = {p[0]: (p[1], p[3], p[2]) for p in parts}
        topics_used = {p[0].topic for p in parts}
        use_ids = all(t in topic_ids for t in topics_used)
        names_by_id = {topic_ids[t]: t for t in topics_used if t in topic_ids}
        session = self.sessions.get(node)
        if session is None:
            session = self.sessions[node] = FetchSession(node)
        wanted = {tp: PartitionFetch(offset, epoch) for tp, offset, epoch, _pe in parts}
        srequest = session.build(wanted, use_ids=use_ids)
        for tp in srequest.forgotten:
            if tp.topic in topic_ids:
                names_by_id[topic_ids[tp.topic]] = tp.topic

        def build(version: int) -> dict[str, Any]:
            if version >= 7 and self.use_sessions:
                topics = self._topics(srequest.partitions.items(), version)
                forgotten = self._forgotten(srequest.forgotten, version)
                session_id, epoch = srequest.session_id, srequest.epoch
            else:  # no sessions before v7: a full fetch every time
                session.reset()
                topics = self._topics(wanted.items(), version)
                forgotten, session_id, epoch = [], 0, -1
            return {
                "replica_id": -1,
                "max_wait": self._max_wait,
                "min_bytes": self._min_bytes,
                "max_bytes": self._max_bytes,
                "isolation_level": self._isolation,
                "session_id": session_id,
                "session_epoch": epoch,
                "topics": topics,
                "forgotten_topics_data": forgotten,
                "rack_id": self._rack,
            }

        def on_response(response: Any, version: int, now: int) -> None:
            current = self._release(node, sent)
            top_error = int(getattr(response, "error_code", 0))
            if version >= 7 and self.use_sessions:
                session.on_response(srequest, top_error, int(getattr(response, "session_id", 0)))
            if top_error in (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH):
                # The broker lost or refused our session: the next fetch (full, no backoff needed: a full
                # fetch cannot fail this way) starts a new one.
                log.debug(
                    "fetch session %d with broker %d: error %d; full fetch next",
                    session.session_id,
                    node,
                    top_error,
                )
                return
            if top_error != 0:
                self._fail_node(node, now)
                reason = f"{error_for_code(top_error).code.name.upper()} from broker {node}"
                for tp in current:
                    self._fail_partition(tp, node, sent[tp][2], now, reason)
                if top_error in _METADATA_ERRORS or top_error in _RETRY_ERRORS:
                    self._metadata.request_update()
                return
            self._node_failures.pop(node, None)
            completed: list[CompletedFetch] = []
            hints: dict[TopicPartition, tuple[int, int]] = {}
            total_bytes = 0
            total_records_hint = 0
            for t in response.responses:
                topic = names_by_id.get(t.topic_id) if version >= 13 else t.topic
                if topic is None:
                    self._metadata.request_update()
                    continue
                for p in t.partitions:
                    tp = TopicPartition(topic, int(p.partition_index))
                    if tp not in current:
                        continue  # not asked for, or moved to another broker meanwhile: stale
                    fetch_offset, pepoch, epoch = sent[tp]
                    code = int(p.error_code)
                    if code == ErrorCode.none:
                        if tp in self._retry:
                            del self._retry[tp]
                        if tp in self.stalls:
                            self.stalls.ok(tp, now)
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
                    elif code == ErrorCode.offset_out_of_range:
                        self._on_out_of_range(tp, fetch_offset, pepoch, completed)
                    elif code in _METADATA_ERRORS or code in _RETRY_ERRORS:
                        # The leader moved (or is not ready): refresh metadata and back this partition off
                        # until it expires or metadata names another leader/epoch -- never a hot loop.
                        self._metadata.request_update()
                        name = error_for_code(code).code.name.upper()
                        reason = f"{name} from broker {node} at leader epoch {epoch}"
                        self._fail_partition(tp, node, epoch, now, reason)
                        if code in _LEADER_HINT_ERRORS and version >= 16:
                            hint = getattr(p, "current_leader", None)
                            if (
                                hint is not None
                                and int(hint.leader_id) >= 0
                                and int(hint.leader_epoch) > epoch
                            ):
                                hints[tp] = (int(hint.leader_id), int(hint.leader_epoch))
                    else:
                        completed.append(
                            CompletedFetch(
                                tp,
                                fetch_offset,
                                pepoch,
                                None,
                                error=error_for_code(
                                    code, str(tp), needs=Needs("Fetch", topic=("READ", tp.topic))
                                ),
                            )
                        )
            if hints:
                # KIP-951: move to the new leader now, without waiting for a Metadata round trip.
                endpoints = [
                    BrokerNode(int(n.node_id), str(n.host), int(n.port), n.rack)
                    for n in (getattr(response, "node_endpoints", None) or ())
                ]
                self._metadata.update_leaders(hints, endpoints, now)
            if completed:
                self._buffer.add(completed)
            if self._on_fetched is not None:
                self._on_fetched(total_bytes, total_records_hint, now - now_ms)

        def on_failure(error: BaseException, now: int) -> None:
            # Disconnected, timed out (request.timeout.ms) or unsendable: back the broker off, refresh
            # metadata; the partitions are fetched again from whichever broker leads them then.
            session.reset()
            current = self._release(node, sent)
            self._fail_node(node, now)
            self._metadata.request_update()
            for tp in current:
                self._fail_partition(tp, node, sent[tp][2], now, f"{error} (broker {node})")

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

    # ------------------------------------------------------------------ close
    def close_sessions(self, now_ms: int) -> None:
        """Stop fetching and close every fetch session on its broker (sent by the next poll, answers not
        awaited beyond :meth:`sessions_closed`)."""
        self.enabled = False
        closing: list[UnsentRequest] = []
        for node, session in self.sessions.items():
            if node in self._in_flight or self._node_backoff.get(node, 0) > now_ms:
                session.reset()  # busy or failing: the broker evicts the session in time
                continue
            srequest = session.close()
            if srequest is not None:
                closing.append(self._close_request(node, srequest))
        self._closes_pending = len(closing)
        self._closing = closing

    def sessions_closed(self) -> bool:
        return self._closes_pending <= 0 and not self._closing

    def _close_request(self, node: int, srequest: SessionRequest) -> UnsentRequest:
        def done(*_args: Any) -> None:
            self._closes_pending -= 1

        return UnsentRequest(
            api_key=ApiKey.FETCH,
            node=node,
            values={
                "replica_id": -1,
                "max_wait": 0,
                "min_bytes": 0,
                "max_bytes": self._max_bytes,
                "isolation_level": self._isolation,
                "session_id": srequest.session_id,
                "session_epoch": srequest.epoch,
                "topics": [],
                "forgotten_topics_data": [],
                "rack_id": self._rack,
            },
            on_response=done,
            on_failure=done,
            min_version=7,
            timeout_ms=_SESSION_CLOSE_TIMEOUT_MS,  # best effort: a dead broker must not hold close() up
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
        # Records the application never saw are skipped: say so (Java logs it at INFO too).  The usual cause
        # is the broker's retention (by size, or by time from the records' own timestamps -- a record
        # produced with an old timestamp may be deleted within minutes) or DeleteRecords.
        log.info(
            "fetch position %d of partition %s is out of range (its records were deleted or the log was "
            "truncated); resetting it by auto.offset.reset=%s",
            fetch_offset,
            tp,
            strategy,
        )
        self._subs.maybe_request_reset(tp, pepoch, strategy)  # not if the application seeked meanwhile

    def forget(self, node: int) -> None:
        self._release(node, self._in_flight.get(node, set()))
