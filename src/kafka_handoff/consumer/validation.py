"""Position validation (KIP-320) and stall reporting for the fetch path (sans-I/O, network thread).

A position carries the leader epoch of the record batch it came from.  After the partition's leader
changed, or when a position was set from an offset with a leader epoch (a committed offset after a
restart, or ``seek()`` with :class:`~kafka_handoff.types.OffsetAndMetadata`), the
:class:`PositionValidator` asks the current leader with OffsetsForLeaderEpoch where that epoch ended
before the partition is fetched again (Java's ``AWAIT_VALIDATION``).  If the log ends before the
position, it was truncated: the position moves back to the first diverging offset, or, with
``auto.offset.reset=none``, :class:`~kafka_handoff.errors.LogTruncationError` is raised from the next
``poll()``.  Brokers without OffsetsForLeaderEpoch v3 skip the check, as in Java.

:class:`StallTracker` turns retries into one WARNING per partition and interval when a partition cannot be
fetched for a long time, instead of a log line per retry.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.consumer.fetch_buffer import CompletedFetch, FetchBuffer
from kafka_handoff.consumer.subscription import FetchPosition, SubscriptionState
from kafka_handoff.errors import LogTruncationError, Needs, UnsupportedVersionError, error_for_code
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.protocol.requests import MAX_POLL_WAIT_MS, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import TopicPartition

__all__ = ["PositionValidator", "StallTracker"]

log = logging.getLogger("kafka_handoff.consumer.fetcher")

STALL_WARNING_MS = 30_000
"""A partition that could not be fetched (or validated) for this long is reported with a WARNING, then
again at most once per this interval while it lasts."""

# Errors after which the leader in our metadata is probably not the leader any more.
_LEADER_ERRORS = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.not_leader_or_follower,
        ErrorCode.replica_not_available,
        ErrorCode.kafka_storage_error,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_topic_id,
        ErrorCode.inconsistent_topic_id,
    }
)


class StallTracker:
    """Partitions whose fetches keep failing, for a rate-limited warning (never one per retry)."""

    def __init__(self, warn_after_ms: int = STALL_WARNING_MS) -> None:
        self.warn_after_ms = warn_after_ms
        self._since: dict[TopicPartition, int] = {}
        self._reason: dict[TopicPartition, str] = {}
        self._warned: dict[TopicPartition, int] = {}
        self._next_check_ms = 0
        self.warnings = 0
        """How many WARNING lines were logged (for tests)."""

    def __contains__(self, tp: object) -> bool:
        return tp in self._since

    def __len__(self) -> int:
        return len(self._since)

    def failed(self, tp: TopicPartition, now_ms: int, reason: str) -> None:
        self._since.setdefault(tp, now_ms)
        self._reason[tp] = reason

    def leader(
        self,
        leader_of: Callable[[TopicPartition], tuple[int, int] | None],
        tp: TopicPartition,
        now_ms: int,
        reason: str,
    ) -> tuple[int, int] | None:
        """``tp``'s (leader id, leader epoch) from ``leader_of``; None while it has no leader, which counts
        as a stall for ``reason``."""
        info = leader_of(tp)
        if info is None or info[0] < 0:
            self.failed(tp, now_ms, reason)
            return None
        return info

    def ok(self, tp: TopicPartition, now_ms: int) -> None:
        since = self._since.pop(tp, None)
        if since is None:
            return
        self._reason.pop(tp, None)
        if self._warned.pop(tp, None) is not None:
            log.warning("partition %s is fetched again after %.1f s", tp, (now_ms - since) / 1000.0)

    def retain(self, keep: Callable[[TopicPartition], bool]) -> None:
        """Forget partitions that are no longer expected to be fetched (revoked, paused, seeked, ...)."""
        for tp in [tp for tp in self._since if not keep(tp)]:
            self._since.pop(tp, None)
            self._reason.pop(tp, None)
            self._warned.pop(tp, None)

    def check(self, now_ms: int) -> None:
        """One WARNING for the partitions stalled longer than ``warn_after_ms`` (checked once a second)."""
        if now_ms < self._next_check_ms or not self._since:
            return
        self._next_check_ms = now_ms + 1000
        due = sorted(
            (
                tp
                for tp, since in self._since.items()
                if now_ms - since >= self.warn_after_ms
                and now_ms - self._warned.get(tp, now_ms - self.warn_after_ms) >= self.warn_after_ms
            ),
            key=str,
        )
        if not due:
            return
        for tp in due:
            self._warned[tp] = now_ms
        shown = ", ".join(
            f"{tp} for {(now_ms - self._since[tp]) / 1000.0:.0f} s ({self._reason.get(tp, '?')})"
            for tp in due[:10]
        )
        more = f" and {len(due) - 10} more" if len(due) > 10 else ""
        log.warning(
            "%d partition(s) could not be fetched: %s%s; retrying with backoff", len(due), shown, more
        )
        self.warnings += 1


@dataclass(slots=True)
class _Retry:
    position_epoch: int
    attempts: int
    next_ms: int


class PositionValidator:
    """Sends OffsetsForLeaderEpoch for the positions that await validation (one request per leader)."""

    def __init__(
        self,
        subscriptions: SubscriptionState,
        metadata: MetadataManager,
        buffer: FetchBuffer,
        *,
        leader_of: Callable[[TopicPartition], tuple[int, int] | None],
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        stalls: StallTracker,
    ) -> None:
        self._subs = subscriptions
        self._metadata = metadata
        self._buffer = buffer
        self._leader_of = leader_of
        self._backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self._backoff_ms = retry_backoff_ms
        self._stalls = stalls
        self._in_flight: set[TopicPartition] = set()
        self._retry: dict[TopicPartition, _Retry] = {}
        self._unsupported: set[int] = set()
        """Brokers without OffsetsForLeaderEpoch v3+: their partitions skip validation (as Java)."""

    def poll(self, now_ms: int) -> PollResult:
        targets = self._subs.validation_targets()
        if self._retry:
            for tp in [tp for tp in self._retry if tp not in targets]:
                del self._retry[tp]
        if not targets:
            return PollResult.idle()
        wait = MAX_POLL_WAIT_MS
        per_node: dict[int, list[tuple[TopicPartition, FetchPosition, int, int]]] = collections.defaultdict(
            list
        )
        missing = False
        for tp, (pos, pepoch) in targets.items():
            if tp in self._in_flight or self._buffer.has_buffered(tp):
                continue  # in flight, or an error for it is waiting for the application
            retry = self._retry.get(tp)
            if retry is not None and retry.position_epoch == pepoch and retry.next_ms > now_ms:
                wait = min(wait, retry.next_ms - now_ms)
                continue
            info = self._stalls.leader(
                self._leader_of, tp, now_ms, "no leader known, validating its position"
            )
            if info is None:
                missing = True
                continue
            leader, epoch = info
            if pos.leader_epoch is None or epoch < 0 or leader in self._unsupported:
                self._subs.complete_validation(tp, pepoch, epoch)  # nothing to check it with
                continue
            per_node[leader].append((tp, pos, pepoch, epoch))
        if missing:
            self._metadata.request_update()
            wait = min(wait, self._backoff_ms)
        requests = [self._request(node, parts) for node, parts in per_node.items()]
        return PollResult(requests, wait)

    def _fail(self, tp: TopicPartition, pepoch: int, now_ms: int, reason: str) -> None:
        retry = self._retry.get(tp)
        if retry is None or retry.position_epoch != pepoch:
            retry = self._retry[tp] = _Retry(pepoch, 0, 0)
        retry.attempts += 1
        retry.next_ms = now_ms + self._backoff.after_failures(retry.attempts)
        self._stalls.failed(tp, now_ms, reason)

    def _request(
        self, node: int, parts: list[tuple[TopicPartition, FetchPosition, int, int]]
    ) -> UnsentRequest:
        sent = {tp: (pos, pepoch, epoch) for tp, pos, pepoch, epoch in parts}
        self._in_flight.update(sent)
        by_topic: dict[str, list[dict[str, int]]] = collections.defaultdict(list)
        for tp, pos, _pepoch, epoch in parts:
            assert pos.leader_epoch is not None
            by_topic[tp.topic].append(
                {"partition": tp.partition, "current_leader_epoch": epoch, "leader_epoch": pos.leader_epoch}
            )
        values = {
            "replica_id": -1,
            "topics": [{"topic": topic, "partitions": ps} for topic, ps in by_topic.items()],
        }

        def on_response(response: Any, _version: int, now: int) -> None:
            self._in_flight.difference_update(sent)
            answered: set[TopicPartition] = set()
            errors: list[CompletedFetch] = []
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(str(t.topic), int(p.partition))
                    info = sent.get(tp)
                    if info is None:
                        continue
                    answered.add(tp)
                    pos, pepoch, epoch = info
                    code = int(p.error_code)
                    if code == ErrorCode.none:
                        error = self._validated(
                            tp, pos, pepoch, epoch, int(p.end_offset), int(p.leader_epoch)
                        )
                        if error is not None:
                            errors.append(error)
                            self._fail(tp, pepoch, now, "log truncation detected")
                        else:
                            self._stalls.ok(tp, now)
                        continue
                    name = error_for_code(code).code.name.upper()
                    if code == ErrorCode.topic_authorization_failed:
                        errors.append(
                            _error_fetch(
                                tp,
                                pos,
                                pepoch,
                                error_for_code(
                                    code,
                                    f"validating the position of {tp}",
                                    needs=Needs("OffsetForLeaderEpoch", topic=("DESCRIBE", tp.topic)),
                                ),
                            )
                        )
                    elif code in _LEADER_ERRORS:
                        self._metadata.request_update()
                    self._fail(tp, pepoch, now, f"{name} from broker {node} validating its position")
            for tp in set(sent) - answered:
                self._fail(tp, sent[tp][1], now, f"no answer from broker {node} validating its position")
            if errors:
                self._buffer.add(errors)

        def on_failure(error: BaseException, now: int) -> None:
            self._in_flight.difference_update(sent)
            if isinstance(error, UnsupportedVersionError):
                # Brokers older than OffsetsForLeaderEpoch v3 cannot validate for consumers: skip it.
                self._unsupported.add(node)
                for tp, (_pos, pepoch, epoch) in sent.items():
                    self._subs.complete_validation(tp, pepoch, epoch)
                return
            self._metadata.request_update()
            for tp, (_pos, pepoch, _epoch) in sent.items():
                self._fail(tp, pepoch, now, f"{error} (broker {node}, validating its position)")

        return UnsentRequest(
            api_key=ApiKey.OFFSET_FOR_LEADER_EPOCH,
            node=node,
            values=values,
            on_response=on_response,
            on_failure=on_failure,
            min_version=3,
        )

    def _validated(
        self,
        tp: TopicPartition,
        pos: FetchPosition,
        pepoch: int,
        epoch: int,
        end_offset: int,
        end_epoch: int,
    ) -> CompletedFetch | None:
        """Apply one answer (Java's ``maybeCompleteValidation``); an error fetch for the app, or None."""
        st = self._subs.get(tp)
        if st is None or st.position_epoch != pepoch or not st.awaiting_validation or st.position != pos:
            return None  # seeked, reset or revoked meanwhile
        reset = self._subs.default_reset
        if end_offset < 0 or end_epoch < 0:
            # The leader has no record of that epoch or anything before it: the divergence point is unknown.
            if reset != "none":
                log.warning(
                    "log truncation detected for partition %s at offset %d (leader epoch %s): the leader "
                    "does not know that epoch; resetting the position by auto.offset.reset=%s",
                    tp,
                    pos.offset,
                    pos.leader_epoch,
                    reset,
                )
                self._subs.maybe_request_reset(tp, pepoch, reset)  # not if seeked meanwhile
                return None
            return _error_fetch(
                tp,
                pos,
                pepoch,
                LogTruncationError(
                    f"log truncation detected for partition {tp}: the leader does not know leader epoch "
                    f"{pos.leader_epoch} of fetch position {pos.offset}, so the records before it may have "
                    "diverged; auto.offset.reset=none, seek to continue",
                    partition=tp,
                    fetch_offset=pos.offset,
                ),
            )
        if end_offset < pos.offset:
            if reset != "none":
                log.warning(
                    "log truncation detected for partition %s: fetch position %d (leader epoch %s) is beyond "
                    "the end offset %d of that epoch on the current leader; resuming from %d, the first "
                    "offset known to diverge",
                    tp,
                    pos.offset,
                    pos.leader_epoch,
                    end_offset,
                    end_offset,
                )
                self._subs.complete_validation(tp, pepoch, epoch, FetchPosition(end_offset, end_epoch))
                return None
            return _error_fetch(
                tp,
                pos,
                pepoch,
                LogTruncationError(
                    f"log truncation detected for partition {tp}: fetch position {pos.offset} (leader epoch "
                    f"{pos.leader_epoch}) is beyond the end offset {end_offset} of that epoch on the current "
                    f"leader (epoch {end_epoch}); records from offset {end_offset} on diverged; "
                    "auto.offset.reset=none, seek to continue",
                    partition=tp,
                    fetch_offset=pos.offset,
                    divergent_offset=end_offset,
                ),
            )
        self._subs.complete_validation(tp, pepoch, epoch)
        return None


def _error_fetch(tp: TopicPartition, pos: FetchPosition, pepoch: int, error: BaseException) -> CompletedFetch:
    return CompletedFetch(tp, pos.offset, pepoch, None, error=error)
