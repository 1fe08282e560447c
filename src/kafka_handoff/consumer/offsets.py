"""Offsets: position initialisation, ListOffsets queries and offset commit/fetch (sans-I/O managers).

``OffsetsManager`` gives every assigned partition without a position one: the committed offset first
(when the consumer has a ``group.id``), else ``auto.offset.reset``.  It also serves the user's
``beginning_offsets``/``end_offsets``/``offsets_for_times``.

``CommitManager`` sends OffsetCommit/OffsetFetch to the coordinator with the member id and the
generation (classic) or member epoch (KIP-848), retries retriable failures until the caller's deadline,
refuses up front to commit partitions this member does not own, and runs the auto-commit timer.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Callable, Mapping, MutableSequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from kafka_handoff.consumer.subscription import SubscriptionState
from kafka_handoff.errors import (
    CommitFailedError,
    KafkaError,
    KafkaTimeoutError,
    Needs,
    error_for_code,
)
from kafka_handoff.group.coordinator import CoordinatorManager
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.protocol.requests import COORDINATOR, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import ConsumerGroupMetadata, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

__all__ = ["CommitManager", "OffsetsManager"]

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1

_COORDINATOR_ERRORS = {
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
}
_LEADER_ERRORS = (
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.leader_not_available,
    ErrorCode.not_leader_or_follower,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
)
_FENCED_ERRORS = {
    ErrorCode.unknown_member_id,
    ErrorCode.illegal_generation,
    ErrorCode.fenced_instance_id,
    ErrorCode.fenced_member_epoch,
}


def _strategy_timestamp(strategy: str, wall_ms: int) -> int:
    if strategy == "earliest":
        return EARLIEST
    if strategy == "latest":
        return LATEST
    if strategy.startswith("by_duration:"):
        from kafka_handoff.config import parse_iso8601_duration_ms

        return wall_ms - parse_iso8601_duration_ms(strategy.split(":", 1)[1])
    raise ValueError(f"unknown reset strategy {strategy!r}")


@dataclass(slots=True)
class _Lookup:
    """A ListOffsets lookup of many partitions, possibly on several leaders."""

    timestamps: dict[TopicPartition, int]
    future: Future[dict[TopicPartition, OffsetAndTimestamp | None]]
    deadline_ms: int
    results: dict[TopicPartition, OffsetAndTimestamp | None]
    in_flight: set[TopicPartition]
    retry_at: dict[TopicPartition, int] = dataclasses.field(default_factory=dict)
    """Partitions whose last attempt failed (leader moved, disconnect): not asked again before then."""
    failures: int = 0


class OffsetsManager:
    def __init__(
        self,
        subscriptions: SubscriptionState,
        metadata: MetadataManager,
        *,
        isolation_level: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int = 1000,
        committed_lookup: Callable[
            [set[TopicPartition], Callable[[dict[TopicPartition, Any], int], None]], bool
        ]
        | None = None,
        wall_clock_ms: Callable[[], int],
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self._subs = subscriptions
        self._metadata = metadata
        self._isolation = isolation_level
        self._backoff = retry_backoff_ms
        self._lookup_backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self._committed_lookup = committed_lookup
        self._wall = wall_clock_ms
        self._on_error = on_error
        self._lookups: list[_Lookup] = []
        self._resetting: set[TopicPartition] = set()
        self._awaiting_committed: set[TopicPartition] = set()
        self._next_reset_ms: dict[TopicPartition, tuple[int, int]] = {}
        """Per partition: (position epoch, time) before which it is not looked up again.  Keyed by the
        position epoch so that a new seek/reset (e.g. ``seek_to_beginning`` after NoOffsetForPartitionError)
        is not held back by the backoff of the previous one."""

    # ------------------------------------------------------------------ user lookups
    def lookup(
        self,
        timestamps: Mapping[TopicPartition, int],
        future: Future[dict[TopicPartition, OffsetAndTimestamp | None]],
        deadline_ms: int,
    ) -> None:
        self._lookups.append(_Lookup(dict(timestamps), future, deadline_ms, {}, set()))
        missing = {tp.topic for tp in timestamps if self._metadata.cluster.leader_for(tp) is None}
        if missing:
            self._metadata.request_update()

    # ------------------------------------------------------------------ poll
    def poll(self, now_ms: int) -> PollResult:
        requests: list[UnsentRequest] = []
        wait = 5000
        # 1. Positions.
        needs = self._subs.needs_position()
        committed_needed: dict[TopicPartition, int] = {}
        """Partition -> the position epoch the committed-offset lookup is for."""
        resets: dict[TopicPartition, tuple[int, str, int]] = {}
        for tp in [tp for tp in self._next_reset_ms if tp not in needs]:
            del self._next_reset_ms[tp]
        for tp, (strategy, pepoch) in needs.items():
            if tp in self._resetting or tp in self._awaiting_committed:
                continue
            backoff_epoch, not_before = self._next_reset_ms.get(tp, (pepoch, 0))
            if backoff_epoch == pepoch and not_before > now_ms:
                wait = min(wait, not_before - now_ms)
                continue
            # ``needs`` was read a moment ago: the application may have seeked since (``seek()`` right
            # after ``assign()``).  Every decision below is applied only at the position epoch it was
            # made for, so such a seek is never undone (nor reported as NoOffsetForPartitionError).
            if strategy == "committed":
                if self._committed_lookup is not None:
                    committed_needed[tp] = pepoch
                    continue
                strategy = self._subs.default_reset
                new_epoch = self._subs.maybe_request_reset(tp, pepoch, strategy)
                if new_epoch is None:
                    continue  # seeked (or reset, or unassigned) meanwhile
                pepoch = new_epoch
            if strategy == "none":
                # Nothing to look up: the consumer raises NoOffsetForPartitionError from every poll() until
                # the application seeks (SubscriptionState.partitions_without_offset).
                self._next_reset_ms[tp] = (pepoch, now_ms + (1 << 30))
                continue
            try:
                ts = _strategy_timestamp(strategy, self._wall())
            except ValueError as exc:
                if self._on_error is not None:
                    self._on_error(KafkaError(str(exc)))
                continue
            resets[tp] = (ts, strategy, pepoch)
        if committed_needed and self._committed_lookup is not None:
            parts = set(committed_needed)
            epochs = dict(committed_needed)

            def on_committed(result: dict[TopicPartition, Any], now: int) -> None:
                self._awaiting_committed.difference_update(parts)
                for tp in parts:
                    # An answer to a lookup started before a seek (or a reset, or a new assignment) is
                    # dropped: only the position epoch it was started for may be initialised by it.
                    pepoch = epochs[tp]
                    st = self._subs.get(tp)
                    if st is None or st.position_epoch != pepoch or st.reset_strategy != "committed":
                        continue
                    value = result.get(tp)
                    if isinstance(value, BaseException):
                        self._next_reset_ms[tp] = (pepoch, now + self._backoff)
                        continue
                    if value is not None:
                        # With its leader epoch: validated with the current leader first (KIP-320).
                        self._subs.maybe_seek_unvalidated(
                            tp, value.offset, pepoch, "committed", value.leader_epoch
                        )
                    else:
                        self._subs.maybe_request_reset(tp, pepoch, self._subs.default_reset)

            if self._committed_lookup(parts, on_committed):
                self._awaiting_committed |= parts
        if resets:
            requests.extend(self._list_offsets_for_resets(resets, now_ms))
        # 2. User lookups.
        for lookup in list(self._lookups):
            if lookup.future.done():
                self._lookups.remove(lookup)
                continue
            if now_ms >= lookup.deadline_ms:
                self._lookups.remove(lookup)
                lookup.future.set_exception(KafkaTimeoutError("listing offsets timed out"))
                continue
            todo = {
                tp: ts
                for tp, ts in lookup.timestamps.items()
                if tp not in lookup.results
                and tp not in lookup.in_flight
                and lookup.retry_at.get(tp, 0) <= now_ms
            }
            if lookup.retry_at:
                later = [t for tp, t in lookup.retry_at.items() if t > now_ms and tp not in lookup.results]
                if later:
                    wait = min(wait, min(later) - now_ms)
            if todo:
                requests.extend(self._list_offsets_for_lookup(lookup, todo, now_ms))
                wait = min(wait, self._backoff)
        return PollResult(requests, wait)

    def _by_leader(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> tuple[dict[int, dict[TopicPartition, int]], bool]:
        cluster = self._metadata.cluster
        out: dict[int, dict[TopicPartition, int]] = collections.defaultdict(dict)
        missing = False
        for tp, ts in timestamps.items():
            leader = cluster.leader_for(tp)
            if leader is None:
                missing = True
                continue
            out[leader][tp] = ts
        if missing:
            self._metadata.request_update()
        return out, missing

    def _request(
        self,
        node: int,
        timestamps: dict[TopicPartition, int],
        on_result: Callable[[TopicPartition, int, int, int, int, int], None],
        on_failure: Callable[[BaseException, int], None],
    ) -> UnsentRequest:
        by_topic: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
        for tp, ts in timestamps.items():
            by_topic[tp.topic].append((tp.partition, ts))
        values = {
            "replica_id": -1,
            "isolation_level": self._isolation,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "current_leader_epoch": -1, "timestamp": ts} for p, ts in parts
                    ],
                }
                for topic, parts in by_topic.items()
            ],
            "timeout": 30000,
        }

        def on_response(response: Any, _version: int, now: int) -> None:
            for t in response.topics:
                for p in t.partitions:
                    on_result(
                        TopicPartition(t.name, int(p.partition_index)),
                        int(p.error_code),
                        int(p.offset),
                        int(p.timestamp),
                        int(getattr(p, "leader_epoch", -1)),
                        now,
                    )

        return UnsentRequest(
            api_key=ApiKey.LIST_OFFSETS,
            node=node,
            values=values,
            on_response=on_response,
            on_failure=on_failure,
            min_version=1,
            # v1 has no isolation level: an old broker answers read_uncommitted offsets (as before).
            ignorable=frozenset({"isolation_level"}),
        )

    def _list_offsets_for_resets(
        self, resets: dict[TopicPartition, tuple[int, str, int]], now_ms: int
    ) -> list[UnsentRequest]:
        grouped, _missing = self._by_leader({tp: v[0] for tp, v in resets.items()})
        requests = []
        for node, timestamps in grouped.items():
            parts = set(timestamps)
            self._resetting |= parts

            def on_result(tp: TopicPartition, code: int, offset: int, _ts: int, _le: int, now: int) -> None:
                self._resetting.discard(tp)
                _ts_unused, strategy, pepoch = resets[tp]
                if code == ErrorCode.none and offset < 0 and strategy.startswith("by_duration:"):
                    # No record at or after now - duration: reset to the end, as Java does (retrying would
                    # ask the same question forever).
                    if self._subs.maybe_request_reset(tp, pepoch, "latest") is not None:
                        log.debug("%s: no record newer than %s, resetting to the end", tp, strategy)
                    return
                if code != ErrorCode.none or offset < 0:
                    if code in _LEADER_ERRORS:
                        self._metadata.request_update()
                    self._next_reset_ms[tp] = (pepoch, now + self._backoff)
                    return
                self._subs.maybe_seek_unvalidated(tp, offset, pepoch, strategy)

            def on_failure(error: BaseException, now: int, parts: set[TopicPartition] = parts) -> None:
                self._resetting.difference_update(parts)
                for tp in parts:
                    self._next_reset_ms[tp] = (resets[tp][2], now + self._backoff)
                self._metadata.request_update()

            requests.append(self._request(node, timestamps, on_result, on_failure))
        return requests

    def _list_offsets_for_lookup(
        self, lookup: _Lookup, todo: dict[TopicPartition, int], now_ms: int
    ) -> list[UnsentRequest]:
        grouped, _missing = self._by_leader(todo)
        requests = []
        for node, timestamps in grouped.items():
            parts = set(timestamps)
            lookup.in_flight |= parts

            def on_result(tp: TopicPartition, code: int, offset: int, ts: int, le: int, now: int) -> None:
                lookup.in_flight.discard(tp)
                if lookup.future.done():  # failed (another partition's error) or timed out already
                    return
                if code == ErrorCode.none:
                    lookup.results[tp] = (
                        OffsetAndTimestamp(offset, ts, le if le >= 0 else None) if offset >= 0 else None
                    )
                elif code in _LEADER_ERRORS:
                    # The leader moved: ask again after a backoff (and fresh metadata), not at once.
                    self._metadata.request_update()
                    self._retry_lookup(lookup, {tp}, now)
                else:
                    needs = Needs("ListOffsets", topic=("DESCRIBE", tp.topic))
                    lookup.future.set_exception(error_for_code(code, f"listing offsets of {tp}", needs=needs))
                    return
                if len(lookup.results) == len(lookup.timestamps) and not lookup.future.done():
                    lookup.future.set_result(dict(lookup.results))

            def on_failure(error: BaseException, now: int, parts: set[TopicPartition] = parts) -> None:
                lookup.in_flight.difference_update(parts)
                self._metadata.request_update()
                self._retry_lookup(lookup, parts, now)

            requests.append(self._request(node, timestamps, on_result, on_failure))
        return requests

    def _retry_lookup(self, lookup: _Lookup, parts: set[TopicPartition], now_ms: int) -> None:
        lookup.failures += 1
        at = now_ms + self._lookup_backoff.after_failures(lookup.failures)
        for tp in parts:
            lookup.retry_at[tp] = at


# --------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Commit:
    offsets: dict[TopicPartition, OffsetAndMetadata]
    future: Future[None]
    deadline_ms: int
    retry: bool
    attempts: int = 0
    next_ms: int = 0
    in_flight: bool = False
    started_ms: int = 0
    deferred: bool = False  # waited for a rebalance or was retried: re-check ownership before sending
    last_error: BaseException | None = None


@dataclass(slots=True)
class _Fetch:
    partitions: set[TopicPartition]
    future: Future[dict[TopicPartition, OffsetAndMetadata | None]]
    deadline_ms: int
    attempts: int = 0
    next_ms: int = 0
    in_flight: bool = False
    last_error: BaseException | None = None


_Pending = TypeVar("_Pending", _Commit, _Fetch)


class CommitManager:
    def __init__(
        self,
        group_id: str,
        coordinator: CoordinatorManager,
        subscriptions: SubscriptionState,
        *,
        group_metadata: Callable[[], ConsumerGroupMetadata],
        owned: Callable[[], frozenset[TopicPartition] | None],
        auto_commit: bool,
        auto_commit_interval_ms: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        require_stable: bool = True,
        on_commit_latency: Callable[[int], None] | None = None,
        on_auto_commit_error: Callable[[BaseException], None] | None = None,
        stable_group_metadata: Callable[[], ConsumerGroupMetadata | None] | None = None,
        on_group_error: Callable[[int, ConsumerGroupMetadata, int], None] | None = None,
    ) -> None:
        self.group_id = group_id
        self._coordinator = coordinator
        self._subs = subscriptions
        self._group_metadata = group_metadata
        self._owned = owned
        self.auto_commit = auto_commit
        self._interval = auto_commit_interval_ms
        self._backoff = retry_backoff_ms
        self._backoff_max = retry_backoff_max_ms
        self._retry_backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self._require_stable = require_stable
        self._commits: collections.deque[_Commit] = collections.deque()
        self._fetches: list[_Fetch] = []
        self._next_auto_ms: int | None = None
        self._on_latency = on_commit_latency
        self._on_auto_error = on_auto_commit_error
        # Classic groups: ``None`` while a rebalance is in progress; commits then wait for it to complete
        # and go out with the new generation (the broker refuses them mid-rebalance).
        self._stable_group_metadata = stable_group_metadata
        # The membership's reaction to group errors of a commit (rejoin, or reset the generation).
        self._on_group_error = on_group_error
        self.auto_commit_enabled_now: Callable[[], bool] = lambda: True
        self.last_committed: dict[TopicPartition, OffsetAndMetadata] = {}

    # ------------------------------------------------------------------ inputs
    def commit(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        future: Future[None],
        deadline_ms: int,
        *,
        retry: bool = True,
        now_ms: int = 0,
        only_owned: bool = False,
    ) -> None:
        """Queue an OffsetCommit.  ``only_owned``: the offsets are the consumed positions (``commit_sync()``
        without arguments), so partitions this member no longer owns -- their revocation completed while
        the application thread still saw them assigned -- are left out instead of failing the commit."""
        owned = self._owned()
        if owned is not None and only_owned:
            offsets = {tp: om for tp, om in offsets.items() if tp in owned}
        if owned is not None:
            not_owned = sorted(str(tp) for tp in offsets if tp not in owned)
            if not_owned:
                future.set_exception(
                    CommitFailedError(
                        "cannot commit offsets for partitions this member does not own: "
                        + ", ".join(not_owned)
                    )
                )
                return
        if not offsets:
            future.set_result(None)
            return
        self._coordinator.wanted = True
        self._commits.append(_Commit(dict(offsets), future, deadline_ms, retry, started_ms=now_ms))

    def fetch_committed(
        self,
        partitions: set[TopicPartition],
        future: Future[dict[TopicPartition, OffsetAndMetadata | None]],
        deadline_ms: int,
    ) -> None:
        self._coordinator.wanted = True
        self._fetches.append(_Fetch(set(partitions), future, deadline_ms))

    def consumed_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {
            tp: OffsetAndMetadata(pos.offset, "", pos.leader_epoch)
            for tp, pos in self._subs.all_consumed().items()
        }

    def auto_commit_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """What the auto-commit timer commits: the positions at the start of the current ``poll()``, i.e.
        only records returned by earlier polls (Java's at-least-once contract, KAFKA-18641)."""
        return {
            tp: OffsetAndMetadata(pos.offset, "", pos.leader_epoch)
            for tp, pos in self._subs.consumed_before_poll().items()
        }

    def pending(self) -> bool:
        return bool(self._commits) or bool(self._fetches)

    # ------------------------------------------------------------------ poll
    def poll(self, now_ms: int) -> PollResult:
        if self.auto_commit:
            if self._next_auto_ms is None:
                self._next_auto_ms = now_ms + self._interval
            elif now_ms >= self._next_auto_ms:
                self._next_auto_ms = now_ms + self._interval
                if self.auto_commit_enabled_now():
                    self._auto_commit(now_ms)
        requests: list[UnsentRequest] = []
        wait = 5000 if self._next_auto_ms is None else max(0, self._next_auto_ms - now_ms)
        commits, wait = self._due(
            self._commits, now_ms, wait, "offset commit did not complete within the timeout"
        )
        for c in commits:
            if self._stable_group_metadata is not None and self._stable_group_metadata() is None:
                c.deferred = True  # sent once the rebalance completed, with the new generation
                wait = min(wait, self._backoff)
                continue
            if c.deferred and not self._still_owned(c):
                continue
            requests.append(self._commit_request(c))
        fetches, wait = self._due(self._fetches, now_ms, wait, "fetching committed offsets timed out")
        requests.extend(self._fetch_request(f) for f in fetches)
        return PollResult(requests, wait)

    def _due(
        self, pending: MutableSequence[_Pending], now_ms: int, wait: int, timed_out: str
    ) -> tuple[list[_Pending], int]:
        """The commits or fetches to send now, and ``wait`` shortened to the next one due; drops the done
        ones and fails the timed-out ones (``timed_out``, with the last error)."""
        due: list[_Pending] = []
        for item in list(pending):
            if item.future.done():
                pending.remove(item)
                continue
            if now_ms >= item.deadline_ms:
                pending.remove(item)
                last = f" (last error: {item.last_error})" if item.last_error is not None else ""
                item.future.set_exception(KafkaTimeoutError(timed_out + last))
                continue
            if item.in_flight:
                continue
            if item.next_ms > now_ms:
                wait = min(wait, item.next_ms - now_ms)
                continue
            if self._coordinator.coordinator is None:
                self._coordinator.wanted = True
                wait = min(wait, self._backoff)
                continue
            due.append(item)
        return due, wait

    def _auto_commit(self, now_ms: int) -> None:
        offsets = self.auto_commit_offsets()
        owned = self._owned()
        if owned is not None:
            offsets = {tp: o for tp, o in offsets.items() if tp in owned}
        offsets = {tp: o for tp, o in offsets.items() if self.last_committed.get(tp) != o}
        if not offsets:
            return
        fut: Future[None] = Future()

        def done(f: Future[None]) -> None:
            exc = f.exception()
            if exc is not None and self._on_auto_error is not None:
                self._on_auto_error(exc)

        fut.add_done_callback(done)
        self.commit(offsets, fut, now_ms + self._interval, retry=False, now_ms=now_ms)

    def _still_owned(self, c: _Commit) -> bool:
        """Before sending a commit that waited or is retried: fail it if a partition changed hands since."""
        owned = self._owned()
        if owned is None:
            return True
        gone = sorted(str(tp) for tp in c.offsets if tp not in owned)
        if not gone:
            return True
        self._commits.remove(c)
        c.future.set_exception(
            CommitFailedError(
                "offset commit failed: partitions were revoked from this member before the commit could be "
                "sent (a rebalance completed meanwhile): " + ", ".join(gone)
            )
        )
        return False

    def _retry_later(self, item: _Commit | _Fetch, now_ms: int) -> None:
        item.attempts += 1
        item.next_ms = now_ms + self._retry_backoff.after_failures(item.attempts)

    def _commit_request(self, c: _Commit) -> UnsentRequest:
        c.in_flight = True
        meta = self._group_metadata()
        coordinator_epoch = self._coordinator.epoch
        by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = collections.defaultdict(list)
        for tp, om in c.offsets.items():
            by_topic[tp.topic].append((tp.partition, om))
        values = {
            "group_id": self.group_id,
            "generation_id_or_member_epoch": meta.generation_id,
            "member_id": meta.member_id,
            "group_instance_id": meta.group_instance_id,
            "retention_time": -1,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": p,
                            "committed_offset": om.offset,
                            "committed_leader_epoch": -1 if om.leader_epoch is None else om.leader_epoch,
                            "committed_metadata": om.metadata,
                        }
                        for p, om in parts
                    ],
                }
                for topic, parts in by_topic.items()
            ],
        }

        def on_response(response: Any, _version: int, now: int) -> None:
            c.in_flight = False
            if c.future.done():  # its deadline passed while it was in flight (e.g. a short auto-commit)
                return
            errors: dict[TopicPartition, int] = {}
            for t in response.topics:
                for p in t.partitions:
                    code = int(p.error_code)
                    if code:
                        errors[TopicPartition(t.name, int(p.partition_index))] = code
            if not errors:
                self.last_committed.update(c.offsets)
                if self._on_latency is not None:
                    self._on_latency(now - c.started_ms)
                c.future.set_result(None)
                return
            codes = set(errors.values())
            first_tp, first_code = next(iter(errors.items()))
            first_error = error_for_code(
                first_code,
                f"committing offset for {first_tp}",
                needs=Needs("OffsetCommit", topic=("READ", first_tp.topic), group=("READ", self.group_id)),
            )
            c.last_error = first_error
            if codes & {15, 16}:
                self._coordinator.mark_unknown(
                    now, f"OffsetCommit failed with {first_error}", epoch=coordinator_epoch
                )
            group_codes = codes & (_FENCED_ERRORS | {27})
            if group_codes and self._on_group_error is not None:
                self._on_group_error(min(group_codes), meta, now)
            if (
                codes & _FENCED_ERRORS
                and codes & _FENCED_ERRORS <= {22, 25}
                and c.retry
                and now < c.deadline_ms
            ):
                # ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID for a generation that is no longer ours: a
                # rebalance completed between sending and answering (the commit queued behind our
                # JoinGroup).  Retry with the new generation if the partitions are still owned.
                current = self._group_metadata()
                if (current.generation_id, current.member_id) != (meta.generation_id, meta.member_id) and (
                    current.generation_id >= 0
                ):
                    c.deferred = True
                    self._retry_later(c, now)
                    return
            if codes & _FENCED_ERRORS:
                c.future.set_exception(
                    CommitFailedError(
                        "offset commit failed: this member is no longer part of the group "
                        f"({error_for_code(next(iter(codes & _FENCED_ERRORS)))}); its partitions may have "
                        "been reassigned to another member"
                    )
                )
                return
            retriable = all(
                code in _COORDINATOR_ERRORS
                or code
                in (
                    ErrorCode.request_timed_out,
                    ErrorCode.network_exception,
                    ErrorCode.rebalance_in_progress,
                    ErrorCode.stale_member_epoch,
                )
                or error_for_code(code).retriable
                for code in codes
            )
            if retriable and c.retry and now < c.deadline_ms:
                # Keep only the partitions that failed; the rest were committed.
                done = {tp: om for tp, om in c.offsets.items() if tp not in errors}
                self.last_committed.update(done)
                c.offsets = {tp: om for tp, om in c.offsets.items() if tp in errors}
                c.deferred = True
                self._retry_later(c, now)
                return
            c.future.set_exception(first_error)

        def on_failure(error: BaseException, now: int) -> None:
            c.in_flight = False
            c.last_error = error
            self._coordinator.mark_unknown(now, f"OffsetCommit failed: {error}", epoch=coordinator_epoch)
            if c.future.done():
                return
            if c.retry and now < c.deadline_ms:
                self._retry_later(c, now)
            else:
                c.future.set_exception(error)

        return UnsentRequest(
            api_key=ApiKey.OFFSET_COMMIT,
            node=COORDINATOR,
            values=values,
            on_response=on_response,
            on_failure=on_failure,
            min_version=2,
            # before v7 a static member commits with its member id alone (the instance id is dropped).
            ignorable=frozenset({"group_instance_id"}),
        )

    def _fetch_request(self, f: _Fetch) -> UnsentRequest:
        f.in_flight = True
        meta = self._group_metadata()
        coordinator_epoch = self._coordinator.epoch
        by_topic: dict[str, list[int]] = collections.defaultdict(list)
        for tp in f.partitions:
            by_topic[tp.topic].append(tp.partition)
        topics = [{"name": t, "partition_indexes": sorted(ps)} for t, ps in by_topic.items()]

        def build(version: int) -> dict[str, Any]:
            if version >= 8:
                group: dict[str, Any] = {"group_id": self.group_id, "topics": topics}
                if version >= 9:
                    group["member_id"] = meta.member_id or None
                    group["member_epoch"] = meta.generation_id
                return {"groups": [group], "require_stable": self._require_stable}
            values: dict[str, Any] = {"group_id": self.group_id, "topics": topics}
            if version >= 7:  # older brokers cannot wait for stable offsets: asked without it (as Java)
                values["require_stable"] = self._require_stable
            return values

        def on_response(response: Any, version: int, now: int) -> None:
            f.in_flight = False
            if version >= 8:
                group = response.groups[0]
                top_code = int(group.error_code)
                topics_resp = group.topics
            else:
                top_code = int(getattr(response, "error_code", 0))
                topics_resp = response.topics
            if top_code:
                if top_code in _COORDINATOR_ERRORS or top_code in (
                    ErrorCode.stale_member_epoch,
                    ErrorCode.rebalance_in_progress,
                ):
                    f.last_error = error_for_code(top_code, "fetching committed offsets")
                    if top_code in (ErrorCode.coordinator_not_available, ErrorCode.not_coordinator):
                        self._coordinator.mark_unknown(
                            now, f"OffsetFetch failed with {f.last_error}", epoch=coordinator_epoch
                        )
                    self._retry_later(f, now)
                    return
                needs = Needs("OffsetFetch", group=("DESCRIBE", self.group_id))
                f.future.set_exception(error_for_code(top_code, "fetching committed offsets", needs=needs))
                return
            result: dict[TopicPartition, OffsetAndMetadata | None] = {}
            for t in topics_resp:
                for p in t.partitions:
                    code = int(p.error_code)
                    tp = TopicPartition(t.name, int(p.partition_index))
                    if code in _COORDINATOR_ERRORS or code == ErrorCode.unstable_offset_commit:  # retried
                        f.last_error = error_for_code(code, f"fetching committed offset of {tp}")
                        if code in (ErrorCode.coordinator_not_available, ErrorCode.not_coordinator):
                            self._coordinator.mark_unknown(
                                now, f"OffsetFetch failed with {f.last_error}", epoch=coordinator_epoch
                            )
                        self._retry_later(f, now)
                        return
                    if code:
                        needs = Needs(
                            "OffsetFetch", topic=("DESCRIBE", tp.topic), group=("DESCRIBE", self.group_id)
                        )
                        f.future.set_exception(
                            error_for_code(code, f"fetching committed offset of {tp}", needs=needs)
                        )
                        return
                    off = int(p.committed_offset)
                    le = int(getattr(p, "committed_leader_epoch", -1))
                    result[tp] = (
                        OffsetAndMetadata(off, p.metadata or "", le if le >= 0 else None)
                        if off >= 0
                        else None
                    )
            for tp in f.partitions:
                result.setdefault(tp, None)
            f.future.set_result(result)

        def on_failure(error: BaseException, now: int) -> None:
            f.in_flight = False
            f.last_error = error
            self._coordinator.mark_unknown(now, f"OffsetFetch failed: {error}", epoch=coordinator_epoch)
            self._retry_later(f, now)

        return UnsentRequest(
            api_key=ApiKey.OFFSET_FETCH,
            node=COORDINATOR,
            build=build,
            on_response=on_response,
            on_failure=on_failure,
            min_version=1,
        )
