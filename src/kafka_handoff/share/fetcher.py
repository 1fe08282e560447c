"""ShareFetch / ShareAcknowledge request management (KIP-932), sans-I/O.

Runs on the network thread.  Per partition leader it keeps one *share session* (epoch 0 opens it, then
1, 2, ... wrapping to 1; -1 closes it), sends at most one request to that broker at a time, and:

* fetches from the broker when none of its data waits in the :class:`ShareBuffer` (the application has
  taken it), naming in the request only what changed in the session (added partitions, and forgotten
  ones in ``ForgottenTopicsData``) plus the partitions whose acknowledgements ride along;
* piggy-backs the acknowledgements queued by ``poll()`` (:meth:`queue_acks`) on that ShareFetch, or sends
  them in a ShareAcknowledge when no fetch is due (the buffer still holds the broker's data);
* sends the acknowledgements of ``commit_sync``/``commit_async`` (:meth:`commit`) in a ShareAcknowledge,
  and reports per-partition results to the caller; RENEW acknowledgements (KIP-1222) always go in a
  ShareAcknowledge with ``IsRenewAck``;
* routes each acknowledgement to the broker whose session acquired the records;
* on :meth:`close`, sends every broker's remaining acknowledgements with epoch -1 (which also closes the
  session); records acquired by a fetch that answers after close began are released at once.

Offsets inside an acquired range without a record (control records, compacted away) are acknowledged
as GAP, so they never block the share-partition's start offset.
"""

from __future__ import annotations

import collections
import enum
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.errors import KafkaError, UnsupportedVersionError, error_for_code
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.protocol.requests import PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import TopicPartition

__all__ = [
    "AckResults",
    "AcknowledgeType",
    "ShareBuffer",
    "ShareFetchManager",
    "ShareFetchedData",
    "ack_batches",
]

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
OPEN_EPOCH = 0
CLOSE_EPOCH = -1
GAP = 0


class AcknowledgeType(enum.IntEnum):
    """How a delivered record is acknowledged (Java's ``AcknowledgeType``; wire values of KIP-932/1222)."""

    ACCEPT = 1
    """Processed: never delivered again."""
    RELEASE = 2
    """Not processed: deliver it again (to any member), with a higher delivery count."""
    REJECT = 3
    """Unprocessable: never delivered again (archived)."""
    RENEW = 4
    """Still processing (KIP-1222): extend the acquisition lock; acknowledge it again later."""


AckResults = dict[TopicPartition, BaseException | None]
"""Per partition: ``None`` when the broker accepted the acknowledgements, else the error."""

_SESSION_ERRORS = frozenset({ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch})
_LEADER_ERRORS = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.leader_not_available,
    }
)


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX or epoch < 0 else epoch + 1


def ack_batches(acks: Mapping[int, int]) -> list[dict[str, Any]]:
    """Acknowledgements ``{offset: type}`` as AcknowledgementBatches: one batch per run of consecutive
    offsets, with one type for the whole run when all agree, else one type per offset."""
    out: list[dict[str, Any]] = []
    run: list[tuple[int, int]] = []

    def flush() -> None:
        types = [t for _o, t in run]
        out.append(
            {
                "first_offset": run[0][0],
                "last_offset": run[-1][0],
                "acknowledge_types": [types[0]] if len(set(types)) == 1 else types,
            }
        )

    for offset in sorted(acks):
        if run and offset != run[-1][0] + 1:
            flush()
            run = []
        run.append((offset, int(acks[offset])))
    if run:
        flush()
    return out


@dataclass(slots=True)
class ShareFetchedData:
    """One partition's records from a ShareFetch response, waiting for the application thread."""

    tp: TopicPartition
    node: int
    records: bytes | None
    acquired: list[tuple[int, int, int]]
    """``(first_offset, last_offset, delivery_count)`` ranges acquired for this member."""
    lock_deadline_ms: int
    """Monotonic ms after which the broker may have released the records (acquisition lock timeout)."""


@dataclass
class ShareBuffer:
    """Share fetches waiting for the application thread; also the app thread's wake-up point."""

    _queue: collections.deque[ShareFetchedData] = field(default_factory=collections.deque)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _nodes: collections.Counter[int] = field(default_factory=collections.Counter)
    _woken: bool = False

    def add(self, items: Iterable[ShareFetchedData]) -> None:
        with self._cond:
            for item in items:
                self._queue.append(item)
                self._nodes[item.node] += 1
            self._cond.notify_all()

    def has_data_from(self, node: int) -> bool:
        with self._cond:
            return self._nodes[node] > 0

    def count_from(self, node: int) -> int:
        """Fetched partitions' data from ``node`` waiting for the application."""
        with self._cond:
            return self._nodes[node]

    def pop(self) -> ShareFetchedData | None:
        with self._cond:
            if not self._queue:
                return None
            item = self._queue.popleft()
            self._nodes[item.node] -= 1
            return item

    def drain(self) -> list[ShareFetchedData]:
        with self._cond:
            items = list(self._queue)
            self._queue.clear()
            self._nodes.clear()
            return items

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def notify(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def await_data(self, timeout_s: float) -> None:
        with self._cond:
            if self._queue or self._woken:
                self._woken = False
                return
            self._cond.wait(timeout_s)
            self._woken = False


@dataclass(slots=True)
class _Commit:
    """Acknowledgements of one commit_sync/commit_async: the results arrive per request (one or two per
    broker: RENEWs travel in their own ShareAcknowledge)."""

    pending: int
    on_done: Callable[[AckResults], None]
    results: AckResults = field(default_factory=dict)

    def node_done(self, node: int, results: AckResults) -> None:
        for tp, error in results.items():
            if error is not None or tp not in self.results:
                self.results[tp] = error
        self.pending -= 1
        if self.pending == 0:
            self.on_done(self.results)


@dataclass(slots=True)
class _Session:
    node: int
    epoch: int = OPEN_EPOCH
    partitions: set[TopicPartition] = field(default_factory=set)
    in_flight: bool = False
    failures: int = 0
    backoff_until_ms: int = 0
    closed: bool = False
    # Acknowledgements waiting to be sent: from poll() (piggy-backed), from commits, RENEWs.
    poll_acks: dict[TopicPartition, dict[int, int]] = field(default_factory=dict)
    commit_acks: dict[TopicPartition, dict[int, int]] = field(default_factory=dict)
    commits: list[_Commit] = field(default_factory=list)
    renew_commits: list[_Commit] = field(default_factory=list)
    renew_acks: dict[TopicPartition, dict[int, int]] = field(default_factory=dict)


def _response_partitions(
    responses: Iterable[Any], names: Mapping[Any, str]
) -> Iterator[tuple[TopicPartition, Any]]:
    """Each partition of a ShareFetch/ShareAcknowledge response's topics (by id), with its answer; topics
    whose id ``names`` does not know are skipped."""
    for topic in responses:
        name = names.get(topic.topic_id) if topic.topic_id is not None else None
        if name is None:
            continue
        for part in topic.partitions:
            yield TopicPartition(name, int(part.partition_index)), part


def _merge(
    into: dict[TopicPartition, dict[int, int]], acks: Mapping[TopicPartition, Mapping[int, int]]
) -> None:
    for tp, offsets in acks.items():
        if offsets:
            into.setdefault(tp, {}).update(offsets)


class ShareFetchManager:
    """The share consumer's fetch and acknowledgement manager (Java's ``ShareConsumeRequestManager``)."""

    def __init__(
        self,
        group_id: str,
        metadata: MetadataManager,
        buffer: ShareBuffer,
        *,
        member_id: Callable[[], str],
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 52_428_800,
        fetch_max_wait_ms: int = 500,
        max_partition_fetch_bytes: int = 1_048_576,
        max_records: int = 500,
        batch_size: int = 500,
        acquire_mode: int = 0,
        prefetch: bool = True,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        on_error: Callable[[BaseException], None] | None = None,
        on_fetch: Callable[[int, int, int, int], None] | None = None,
        on_acks_sent: Callable[[int, int], None] | None = None,
    ) -> None:
        self.group_id = group_id
        self._metadata = metadata
        self._buffer = buffer
        self._member_id = member_id
        self._min_bytes = fetch_min_bytes
        self._max_bytes = fetch_max_bytes
        self._max_wait_ms = fetch_max_wait_ms
        self._partition_max_bytes = max_partition_fetch_bytes
        self._max_records = max_records
        self._batch_size = batch_size
        self._acquire_mode = acquire_mode
        self._prefetch = prefetch
        self.buffer_limit = 2 if prefetch else 1
        """No fetch from a broker while this many of its fetched partitions wait for the application: with
        prefetching, the next fetch is out while the application works through the previous one."""
        self._fetch_requested = False
        self._reported: set[str] = set()
        self._backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self._on_error = on_error
        self._on_fetch = on_fetch
        self._on_acks_sent = on_acks_sent
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._sessions: dict[int, _Session] = {}
        self._acquired_from: dict[TopicPartition, int] = {}
        self.acquisition_lock_timeout_ms: int | None = None
        self._closing = False
        self.enabled = True
        self.fetches_sent = 0
        self.acknowledges_sent = 0

    # ------------------------------------------------------------------ inputs (network thread)
    def set_assignment(self, partitions: frozenset[TopicPartition]) -> None:
        self._assigned = partitions

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        return self._assigned

    def _session(self, node: int) -> _Session:
        session = self._sessions.get(node)
        if session is None:
            session = self._sessions[node] = _Session(node)
        return session

    def _by_node(
        self, acks: Mapping[TopicPartition, Mapping[int, int]]
    ) -> dict[int, dict[TopicPartition, dict[int, int]]]:
        out: dict[int, dict[TopicPartition, dict[int, int]]] = {}
        for tp, offsets in acks.items():
            node = self._acquired_from.get(tp)
            if node is None or not offsets:
                log.warning(
                    "share group %s: no session acquired records of %s; dropping %d acknowledgements",
                    self.group_id,
                    tp,
                    len(offsets),
                )
                continue
            out.setdefault(node, {})[tp] = dict(offsets)
        return out

    def request_fetch(self) -> None:
        """``poll()`` wants records: without prefetching (``record_limit``), fetches go out only then."""
        self._fetch_requested = True

    def queue_acks(self, acks: Mapping[TopicPartition, Mapping[int, int]]) -> None:
        """Acknowledgements from ``poll()``: sent with the broker's next ShareFetch (or ShareAcknowledge).
        RENEWs go in their own ShareAcknowledge."""
        for node, by_tp in self._by_node(acks).items():
            session = self._session(node)
            for tp, offsets in by_tp.items():
                renew = {o: t for o, t in offsets.items() if t == AcknowledgeType.RENEW}
                other = {o: t for o, t in offsets.items() if t != AcknowledgeType.RENEW}
                _merge(session.renew_acks, {tp: renew})
                _merge(session.poll_acks, {tp: other})

    def commit(
        self, acks: Mapping[TopicPartition, Mapping[int, int]], on_done: Callable[[AckResults], None]
    ) -> None:
        """Acknowledgements of ``commit_sync``/``commit_async``: sent in a ShareAcknowledge per broker as
        soon as the broker has no request in flight; ``on_done`` gets every partition's result (or ``{}``)."""
        by_node = self._by_node(acks)
        # Acknowledgements queued by poll() and not sent yet are committed too (as Java does).
        for node, session in self._sessions.items():
            if session.poll_acks:
                target = by_node.setdefault(node, {})
                for tp, offsets in session.poll_acks.items():
                    target.setdefault(tp, {}).update(offsets)
                session.poll_acks = {}
        if not by_node:
            on_done({})
            return
        commit = _Commit(0, on_done)
        for node, by_tp in by_node.items():
            session = self._session(node)
            renew = {
                tp: {o: t for o, t in offs.items() if t == AcknowledgeType.RENEW}
                for tp, offs in by_tp.items()
            }
            other = {
                tp: {o: t for o, t in offs.items() if t != AcknowledgeType.RENEW}
                for tp, offs in by_tp.items()
            }
            if any(renew.values()):
                _merge(session.renew_acks, renew)
                session.renew_commits.append(commit)
                commit.pending += 1
            if any(other.values()) or not any(renew.values()):
                _merge(session.commit_acks, other)
                session.commits.append(commit)
                commit.pending += 1

    def close(
        self, final_acks: Mapping[TopicPartition, Mapping[int, int]], on_done: Callable[[AckResults], None]
    ) -> None:
        """Stop fetching; send ``final_acks`` and close every open session (epoch -1)."""
        self._closing = True
        by_node = self._by_node(final_acks)
        nodes = {n for n, s in self._sessions.items() if s.epoch > 0}
        nodes |= set(by_node)
        if not nodes:
            on_done({})
            return
        commit = _Commit(len(nodes), on_done)
        for node in nodes:
            session = self._session(node)
            _merge(session.commit_acks, session.poll_acks)
            session.poll_acks = {}
            _merge(session.commit_acks, by_node.get(node, {}))
            session.commits.append(commit)

    def closed(self) -> bool:
        return self._closing and all(s.closed for s in self._sessions.values())

    # ------------------------------------------------------------------ poll (network thread)
    def poll(self, now_ms: int) -> PollResult:
        if not self.enabled:
            return PollResult.idle()
        cluster = self._metadata.cluster
        desired: dict[int, set[TopicPartition]] = {}
        if not self._closing:
            missing = False
            for tp in self._assigned:
                leader = cluster.leader_for(tp)
                if leader is None or tp.topic not in cluster.topic_ids:
                    missing = True
                    continue
                desired.setdefault(leader, set()).add(tp)
            if missing:
                self._metadata.request_update()
        unsent: list[UnsentRequest] = []
        wait = 5000
        for node in set(desired) | set(self._sessions):
            session = self._session(node)
            if session.in_flight or session.closed:
                continue
            if now_ms < session.backoff_until_ms and not self._closing:
                wait = min(wait, session.backoff_until_ms - now_ms)
                continue
            request = self._next_request(session, desired.get(node, set()), now_ms)
            if request is not None:
                unsent.append(request)
        return PollResult(unsent, wait)

    def _next_request(
        self, session: _Session, want: set[TopicPartition], now_ms: int
    ) -> UnsentRequest | None:
        if self._closing:
            # RENEWs are moot now (close() releases renewed records); their commits complete with the close.
            session.renew_acks = {}
            commits = session.commits + session.renew_commits
            session.commits, session.renew_commits = [], []
            if session.epoch <= 0:
                # Never opened a session with this broker (or lost it): nothing can be acknowledged there;
                # the broker releases the records when their locks run out.
                error = KafkaError(f"no share session with node {session.node}: acknowledgements not sent")
                self._finish_commits(session, {tp: error for tp in session.commit_acks}, commits)
                session.commit_acks = {}
                session.closed = True
                return None
            acks = session.commit_acks
            session.commit_acks = {}
            return self._acknowledge(session, acks, commits, CLOSE_EPOCH, renew=False)
        if session.epoch > 0 and (session.renew_acks or session.renew_commits):
            acks = session.renew_acks
            session.renew_acks = {}
            commits, session.renew_commits = session.renew_commits, []
            return self._acknowledge(session, acks, commits, session.epoch, renew=True)
        if session.epoch > 0 and (session.commit_acks or session.commits):
            acks = session.commit_acks
            _merge(acks, session.poll_acks)
            session.poll_acks = {}
            session.commit_acks = {}
            commits, session.commits = session.commits, []
            return self._acknowledge(session, acks, commits, session.epoch, renew=False)
        # No fetch while the application has not taken the broker's data yet, or (without prefetching) has
        # not asked for more: acknowledgements then go in a ShareAcknowledge.
        # (Acknowledgements waiting for a session -- one lost to an error -- open one even so.)
        waiting = session.epoch == OPEN_EPOCH and bool(session.commits or session.renew_commits)
        busy = self._buffer.count_from(session.node) >= self.buffer_limit or (
            want and not self._prefetch and not self._fetch_requested and not waiting
        )
        if busy:
            if session.epoch > 0 and session.poll_acks:
                acks = session.poll_acks
                session.poll_acks = {}
                return self._acknowledge(session, acks, [], session.epoch, renew=False)
            return None
        if not want and not session.partitions:
            return None
        return self._fetch(session, want, now_ms, fetch_records=bool(want))

    # ------------------------------------------------------------------ ShareFetch
    def _fetch(
        self, session: _Session, want: set[TopicPartition], now_ms: int, *, fetch_records: bool
    ) -> UnsentRequest:
        cluster = self._metadata.cluster
        epoch = session.epoch
        if epoch == OPEN_EPOCH:
            added = set(want)
            forgotten: set[TopicPartition] = set()
        else:
            added = want - session.partitions
            forgotten = session.partitions - want
        acks = session.poll_acks if epoch > 0 else {}
        if epoch > 0:
            session.poll_acks = {}
            # A partition named in the request joins the session on the broker (acknowledgements of a
            # partition no longer assigned, too): it is forgotten by the next request, not this one.
            forgotten -= set(acks)
        topics: dict[uuid.UUID, dict[int, list[dict[str, Any]]]] = {}
        for tp in added:
            tid = cluster.topic_ids.get(tp.topic)
            if tid is not None:
                topics.setdefault(tid, {}).setdefault(tp.partition, [])
        sent_acks: dict[TopicPartition, dict[int, int]] = {}
        for tp, offsets in acks.items():
            tid = cluster.topic_ids.get(tp.topic)
            if tid is None:
                continue
            topics.setdefault(tid, {})[tp.partition] = ack_batches(offsets)
            sent_acks[tp] = offsets
        forgotten_by_topic: dict[uuid.UUID, list[int]] = {}
        for tp in forgotten:
            tid = cluster.topic_ids.get(tp.topic)
            if tid is not None:
                forgotten_by_topic.setdefault(tid, []).append(tp.partition)
        names = {tid: name for name, tid in cluster.topic_ids.items()}
        max_wait = self._max_wait_ms if fetch_records and want else 0
        values = {
            "group_id": self.group_id,
            "member_id": self._member_id(),
            "share_session_epoch": epoch,
            "max_wait": max_wait,
            "min_bytes": self._min_bytes,
            "max_bytes": self._max_bytes,
            "max_records": self._max_records,
            "batch_size": self._batch_size,
            "share_acquire_mode": self._acquire_mode,
            "is_renew_ack": False,
            "topics": [
                {
                    "topic_id": tid,
                    "partitions": [
                        {
                            "partition_index": p,
                            "acknowledgement_batches": batches,
                        }
                        for p, batches in sorted(parts.items())
                    ],
                }
                for tid, parts in topics.items()
            ],
            "forgotten_topics_data": [
                {"topic_id": tid, "partitions": sorted(parts)} for tid, parts in forgotten_by_topic.items()
            ],
        }
        session.in_flight = True
        self.fetches_sent += 1
        sent_ms = now_ms
        new_partitions = (session.partitions | added | set(acks)) - forgotten if epoch > 0 else set(added)
        if self._on_acks_sent is not None and sent_acks:
            self._on_acks_sent(sum(len(o) for o in sent_acks.values()), 0)

        def on_response(response: Any, _version: int, now: int) -> None:
            session.in_flight = False
            err = ErrorCode(int(response.error_code))
            if err is not ErrorCode.none:
                self._session_error(session, err, response.error_message, now)
                self._ack_results(sent_acks, error_for_code(err, response.error_message))
                return
            session.failures = 0
            session.epoch = next_epoch(epoch)
            session.partitions = new_partitions
            lock_ms = int(response.acquisition_lock_timeout.total_seconds() * 1000)
            if lock_ms > 0:
                self.acquisition_lock_timeout_ms = lock_ms
            results: AckResults = {}
            fetched: list[ShareFetchedData] = []
            num_bytes = 0
            num_records = 0
            for tp, part in _response_partitions(response.responses, names):
                if tp in sent_acks:
                    ack_err = int(part.acknowledge_error_code)
                    results[tp] = (
                        None if ack_err == 0 else error_for_code(ack_err, part.acknowledge_error_message)
                    )
                perr = ErrorCode(int(part.error_code))
                if perr is not ErrorCode.none:
                    self._partition_error(tp, perr, part.error_message)
                    continue
                acquired = [
                    (int(a.first_offset), int(a.last_offset), int(a.delivery_count))
                    for a in part.acquired_records
                ]
                if not acquired:
                    continue
                self._acquired_from[tp] = session.node
                data = bytes(part.records) if part.records is not None else None
                num_bytes += len(data or b"")
                num_records += sum(last - first + 1 for first, last, _c in acquired)
                fetched.append(ShareFetchedData(tp, session.node, data, acquired, now + (lock_ms or 30_000)))
            self._ack_results(sent_acks, None, results)
            if self._on_fetch is not None:
                self._on_fetch(now - sent_ms, num_bytes, num_records, now)
            if fetched:
                self._fetch_requested = False
                if self._closing:
                    # close() began while this fetch was out: give the records straight back.
                    release = {
                        f.tp: {
                            o: int(AcknowledgeType.RELEASE) for a in f.acquired for o in range(a[0], a[1] + 1)
                        }
                        for f in fetched
                    }
                    _merge(session.commit_acks, release)
                else:
                    self._buffer.add(fetched)
            elif epoch == OPEN_EPOCH or num_records == 0:
                self._buffer.notify()

        def on_failure(error: BaseException, now: int) -> None:
            session.in_flight = False
            self._fail_session(session, now, f"ShareFetch failed: {error}")
            self._report_unsupported(error)
            self._ack_results(sent_acks, error)

        return UnsentRequest(
            api_key=ApiKey.SHARE_FETCH,
            node=session.node,
            values=values,
            on_response=on_response,
            on_failure=on_failure,
            timeout_ms=None,
            # KIP-1206's record_limit needs ShareFetch v2 (Kafka 4.2+): never silently batch_optimized.
            min_version=2 if self._acquire_mode else 1,
        )

    # ------------------------------------------------------------------ ShareAcknowledge
    def _acknowledge(
        self,
        session: _Session,
        acks: dict[TopicPartition, dict[int, int]],
        commits: list[_Commit],
        epoch: int,
        *,
        renew: bool,
    ) -> UnsentRequest | None:
        cluster = self._metadata.cluster
        topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
        for tp, offsets in acks.items():
            tid = cluster.topic_ids.get(tp.topic)
            if tid is None or not offsets:
                continue
            topics.setdefault(tid, []).append(
                {"partition_index": tp.partition, "acknowledgement_batches": ack_batches(offsets)}
            )
        if not topics and epoch != CLOSE_EPOCH:
            self._finish_commits(session, {}, commits)
            return None
        names = {tid: name for name, tid in cluster.topic_ids.items()}
        values = {
            "group_id": self.group_id,
            "member_id": self._member_id(),
            "share_session_epoch": epoch,
            "is_renew_ack": renew,
            "topics": [{"topic_id": tid, "partitions": parts} for tid, parts in topics.items()],
        }
        session.in_flight = True
        self.acknowledges_sent += 1
        count = sum(len(o) for o in acks.values())
        if self._on_acks_sent is not None:
            self._on_acks_sent(count, 0)

        def on_response(response: Any, _version: int, now: int) -> None:
            session.in_flight = False
            err = ErrorCode(int(response.error_code))
            results: AckResults = {}
            if epoch == CLOSE_EPOCH:
                session.closed = True
                session.epoch = OPEN_EPOCH
            if err is not ErrorCode.none:
                error = error_for_code(err, response.error_message)
                if epoch != CLOSE_EPOCH:
                    self._session_error(session, err, response.error_message, now)
                results = {tp: error for tp in acks}
            else:
                if epoch != CLOSE_EPOCH:
                    session.failures = 0
                    session.epoch = next_epoch(epoch)
                for tp, part in _response_partitions(response.responses, names):
                    perr = int(part.error_code)
                    results[tp] = None if perr == 0 else error_for_code(perr, part.error_message)
                    if perr in (int(c) for c in _LEADER_ERRORS):
                        self._metadata.request_update()
                for tp in acks:
                    results.setdefault(tp, None)
            self._ack_results(acks, None, results)
            self._finish_commits(session, results, commits)

        def on_failure(error: BaseException, now: int) -> None:
            session.in_flight = False
            if epoch == CLOSE_EPOCH:
                session.closed = True
            else:
                self._fail_session(session, now, f"ShareAcknowledge failed: {error}")
            self._report_unsupported(error)
            self._ack_results(acks, error)
            self._finish_commits(session, {tp: error for tp in acks}, commits)

        return UnsentRequest(
            api_key=ApiKey.SHARE_ACKNOWLEDGE,
            node=session.node,
            values=values,
            on_response=on_response,
            on_failure=on_failure,
            min_version=2 if renew else 1,  # KIP-1222 RENEW needs ShareAcknowledge v2 (Kafka 4.2+)
        )

    # ------------------------------------------------------------------ errors and results
    def _finish_commits(
        self, session: _Session, results: AckResults, commits: list[_Commit] | None = None
    ) -> None:
        if commits is None:
            commits, session.commits = session.commits, []
        for commit in commits:
            commit.node_done(session.node, results)

    ack_listener: Callable[[Mapping[TopicPartition, Mapping[int, int]], AckResults], None] | None = None
    """Called with the results of every acknowledgement sent (the acknowledgement commit callback and the
    metrics); set by the consumer."""

    def _ack_results(
        self,
        sent: Mapping[TopicPartition, Mapping[int, int]],
        error: BaseException | None,
        results: AckResults | None = None,
    ) -> None:
        if not sent:
            return
        out: AckResults = {}
        for tp in sent:
            out[tp] = error if error is not None else (results or {}).get(tp)
        failed = sum(len(sent[tp]) for tp, e in out.items() if e is not None)
        if failed and self._on_acks_sent is not None:
            self._on_acks_sent(0, failed)
        for tp, e in out.items():
            if e is not None:
                log.warning(
                    "share group %s: acknowledging %d records of %s failed: %s",
                    self.group_id,
                    len(sent[tp]),
                    tp,
                    e,
                )
        if self.ack_listener is not None:
            self.ack_listener(sent, out)

    def _report_unsupported(self, error: BaseException) -> None:
        """A broker too old for a feature asked for (record_limit, RENEW): the application must know."""
        # Once: the retries (with backoff) would repeat it.
        if (
            isinstance(error, UnsupportedVersionError)
            and self._on_error is not None
            and str(error) not in self._reported
        ):
            self._reported.add(str(error))
            self._on_error(error)

    def _fail_session(self, session: _Session, now_ms: int, reason: str) -> None:
        log.info("share group %s: node %d: %s; backing off", self.group_id, session.node, reason)
        session.backoff_until_ms = now_ms + self._backoff.backoff_ms(session.failures)
        session.failures += 1
        # A lost connection loses the session with it.
        session.epoch = OPEN_EPOCH
        session.partitions = set()
        self._metadata.request_update()

    def _session_error(self, session: _Session, err: ErrorCode, message: str | None, now_ms: int) -> None:
        if err in _SESSION_ERRORS:
            log.info(
                "share group %s: node %d: share session lost (%s); opening a new one",
                self.group_id,
                session.node,
                err.name,
            )
            session.epoch = OPEN_EPOCH
            session.partitions = set()
            return
        if err.retriable or err in _LEADER_ERRORS or err is ErrorCode.share_session_limit_reached:
            self._fail_session(session, now_ms, f"{err.name}: {message or ''}")
            return
        error = error_for_code(err, f"share group {self.group_id}: {message or err.name}")
        session.backoff_until_ms = now_ms + self._backoff.backoff_ms(session.failures)
        session.failures += 1
        if self._on_error is not None:
            self._on_error(error)

    def _partition_error(self, tp: TopicPartition, err: ErrorCode, message: str | None) -> None:
        if err in _LEADER_ERRORS or err.retriable:
            log.debug("share group %s: %s: %s; refreshing metadata", self.group_id, tp, err.name)
            self._metadata.request_update()
            return
        error = error_for_code(err, f"{tp.topic}-{tp.partition}: {message or err.name}")
        log.warning("share group %s: fetching %s failed: %s", self.group_id, tp, error)
        if self._on_error is not None:
            self._on_error(error)
