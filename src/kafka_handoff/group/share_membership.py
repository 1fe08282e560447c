"""KIP-932 share group membership: the ShareGroupHeartbeat state machine (sans-I/O).

Much simpler than the KIP-848 consumer membership (``consumer_membership.py``): a share group assigns the
same partition to many members and records, not partitions, are the unit of work, so there is no
revocation, no callbacks and no reconciliation -- the member takes whatever assignment the coordinator sends,
at once.  The member id is generated here and kept for the object's lifetime; epoch 0 joins, -1 leaves.

States: ``UNSUBSCRIBED`` → (``subscribe``) ``JOINING`` → (first successful heartbeat) ``STABLE``;
fenced (UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH) → back to ``JOINING`` with epoch 0 and an empty
assignment; ``leave()`` → ``LEAVING`` → ``LEFT``; a non-retriable error → ``FATAL``.

Like the other memberships it takes ``now_ms``, returns :class:`UnsentRequest` objects from ``poll`` and
reports what the consumer must do as events (``drain_events``): :class:`ShareAssignmentChanged`,
``MetadataNeeded`` (assigned topic ids not known yet), ``CoordinatorNeeded``, ``MembershipError``.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.errors import error_for_code
from kafka_handoff.group.consumer_membership import generate_member_id
from kafka_handoff.group.membership import CoordinatorNeeded, MembershipError, MetadataNeeded
from kafka_handoff.group.membership_core import (
    COORDINATOR_ERRORS,
    HEARTBEAT_FENCING_ERRORS,
    PollTimer,
    RetryBackoff,
)
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.requests import COORDINATOR, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import ClusterMetadata, TopicPartition

__all__ = ["ShareAssignmentChanged", "ShareMemberState", "ShareMembership"]

log = logging.getLogger(__name__)

LEAVE_EPOCH = -1


class ShareMemberState(enum.Enum):
    UNSUBSCRIBED = "unsubscribed"
    JOINING = "joining"
    STABLE = "stable"
    LEAVING = "leaving"
    LEFT = "left"
    FATAL = "fatal"


@dataclass(frozen=True, slots=True)
class ShareAssignmentChanged:
    """The partitions this member may fetch from now on (the whole set, not a delta)."""

    partitions: frozenset[TopicPartition]


ShareGroupEvent = ShareAssignmentChanged | MetadataNeeded | CoordinatorNeeded | MembershipError

_FATAL_ERRORS = frozenset(
    {
        ErrorCode.group_authorization_failed,
        ErrorCode.topic_authorization_failed,
        ErrorCode.invalid_request,
        ErrorCode.group_max_size_reached,
        ErrorCode.unsupported_version,
        ErrorCode.inconsistent_group_protocol,
        ErrorCode.group_id_not_found,
    }
)


class ShareMembership:
    """One member of a share group (Java's ``ShareMembershipManager`` + ``ShareHeartbeatRequestManager``)."""

    def __init__(
        self,
        group_id: str,
        *,
        rack_id: str | None = None,
        member_id: str | None = None,
        max_poll_interval_ms: int = 300_000,
        on_heartbeat: Callable[[int, int], None] | None = None,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        heartbeat_interval_ms: int = 5000,
    ) -> None:
        self.group_id = group_id
        self.member_id = member_id or generate_member_id()
        self.member_epoch = 0
        self.state = ShareMemberState.UNSUBSCRIBED
        self._rack_id = rack_id
        self._topics: frozenset[str] = frozenset()
        self._topics_sent: frozenset[str] | None = None
        self._retry = RetryBackoff(ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms))
        self._interval_ms = heartbeat_interval_ms
        self._next_ms = 0
        self._in_flight = False
        self._coordinator: int | None = None
        self._coordinator_epoch: int | None = None
        self._cluster = ClusterMetadata()
        self._target: dict[uuid.UUID, frozenset[int]] = {}
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._events: list[ShareGroupEvent] = []
        self._poll_timer = PollTimer(max_poll_interval_ms)
        """``max.poll.interval.ms``, started by the first ``on_app_poll``."""
        self._on_heartbeat = on_heartbeat
        """``on_heartbeat(response_time_ms, now_ms)`` after every answered heartbeat (metrics)."""
        self._rejoin_on_poll = False
        self.heartbeats_sent = 0
        self.fatal_error: BaseException | None = None

    # ------------------------------------------------------------------ inputs
    def subscribe(self, topics: Iterable[str], now_ms: int) -> None:
        topics = frozenset(topics)
        if not topics:
            self.unsubscribe(now_ms)
            return
        self._topics = topics
        if self.state in (ShareMemberState.UNSUBSCRIBED, ShareMemberState.LEFT):
            self.state = ShareMemberState.JOINING
            self.member_epoch = 0
            self._topics_sent = None
        self._next_ms = now_ms  # tell the coordinator at once
        if self._coordinator is None:
            self._events.append(CoordinatorNeeded("share group heartbeat"))

    def on_app_poll(self, now_ms: int) -> None:
        """The application called ``poll()``: the poll timer restarts; a member that left because the
        timer expired rejoins."""
        self._poll_timer.polled(now_ms)
        if self._rejoin_on_poll and self.state is ShareMemberState.LEFT and self._topics:
            self._rejoin_on_poll = False
            log.info("share group %s: poll() called again; rejoining", self.group_id)
            self.subscribe(self._topics, now_ms)

    def unsubscribe(self, now_ms: int) -> None:
        self._topics = frozenset()
        if self.state in (ShareMemberState.JOINING, ShareMemberState.STABLE):
            self.leave(now_ms)

    def leave(self, now_ms: int) -> None:
        """Send a leave heartbeat (epoch -1); :attr:`left` turns true once it was answered or failed."""
        if self.state in (ShareMemberState.JOINING, ShareMemberState.STABLE) and self.member_epoch > 0:
            self.state = ShareMemberState.LEAVING
            self._next_ms = now_ms
        elif self.state is not ShareMemberState.FATAL:
            self.state = ShareMemberState.LEFT
        self._set_assignment({}, now_ms)

    @property
    def left(self) -> bool:
        return self.state in (ShareMemberState.LEFT, ShareMemberState.UNSUBSCRIBED, ShareMemberState.FATAL)

    @property
    def assigned(self) -> frozenset[TopicPartition]:
        return self._assigned

    def on_coordinator(self, node_id: int | None, now_ms: int, epoch: int | None = None) -> None:
        self._coordinator = node_id
        self._coordinator_epoch = epoch
        if node_id is not None:
            self._next_ms = (
                min(self._next_ms, now_ms) if self.state is ShareMemberState.JOINING else self._next_ms
            )

    def on_metadata(self, metadata: ClusterMetadata, now_ms: int) -> None:
        self._cluster = metadata
        if self._target:
            self._set_assignment(self._target, now_ms)

    def drain_events(self) -> list[ShareGroupEvent]:
        events, self._events = self._events, []
        return events

    # ------------------------------------------------------------------ heartbeats
    def poll(self, now_ms: int) -> PollResult:
        if self.state not in (ShareMemberState.JOINING, ShareMemberState.STABLE, ShareMemberState.LEAVING):
            return PollResult.idle()
        if self._in_flight:
            return PollResult.idle()
        timer = self._poll_timer
        poll_remaining = timer.remaining_ms(now_ms) if self.state is ShareMemberState.STABLE else None
        if poll_remaining is not None and poll_remaining < 0:
            log.warning(
                "share group %s: poll() was not called for %d ms (max.poll.interval.ms=%d): leaving the "
                "group so that other members get the records; the next poll() rejoins",
                self.group_id,
                timer.timeout_ms - poll_remaining,
                timer.timeout_ms,
            )
            self._rejoin_on_poll = True
            self.leave(now_ms)
        if self._coordinator is None:
            if self.state is ShareMemberState.LEAVING:
                # Nobody to tell: the session timeout removes us.  Do not hold close() up.
                self.state = ShareMemberState.LEFT
            return PollResult.idle()
        if now_ms < self._next_ms:
            wait = self._next_ms - now_ms
            if poll_remaining is not None and self.state is ShareMemberState.STABLE:
                wait = min(wait, max(0, poll_remaining + 1))  # expired: 1 ms past max.poll.interval.ms
            return PollResult.idle(wait)
        leaving = self.state is ShareMemberState.LEAVING
        epoch = LEAVE_EPOCH if leaving else self.member_epoch
        values: dict[str, Any] = {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "member_epoch": epoch,
            "rack_id": None,
            "subscribed_topic_names": None,
        }
        if not leaving:
            if self.member_epoch == 0:
                values["rack_id"] = self._rack_id
            if self.member_epoch == 0 or self._topics_sent != self._topics:
                values["subscribed_topic_names"] = sorted(self._topics)
        sent_topics = self._topics
        coordinator_epoch = self._coordinator_epoch
        self._in_flight = True
        self.heartbeats_sent += 1
        self._next_ms = now_ms + self._interval_ms

        sent_ms = now_ms

        def on_response(response: Any, _version: int, now: int) -> None:
            self._in_flight = False
            if self._on_heartbeat is not None:
                self._on_heartbeat(now - sent_ms, now)
            self._on_response(response, leaving, sent_topics, coordinator_epoch, now)

        def on_failure(error: BaseException, now: int) -> None:
            self._in_flight = False
            if leaving:
                self.state = ShareMemberState.LEFT
                return
            log.debug("share group %s: heartbeat failed: %s", self.group_id, error)
            self._retry_later(now)
            self._events.append(CoordinatorNeeded(f"heartbeat failed: {error}", coordinator_epoch))

        request = UnsentRequest(
            api_key=ApiKey.SHARE_GROUP_HEARTBEAT,
            node=COORDINATOR,
            values=values,
            on_response=on_response,
            on_failure=on_failure,
        )
        return PollResult([request], self._interval_ms)

    def _retry_later(self, now_ms: int) -> None:
        self._next_ms = self._retry.failed(now_ms)

    def _on_response(
        self,
        response: Any,
        leaving: bool,
        sent_topics: frozenset[str],
        coordinator_epoch: int | None,
        now_ms: int,
    ) -> None:
        err = ErrorCode(int(response.error_code))
        if leaving:
            if err is not ErrorCode.none:
                log.debug("share group %s: leave heartbeat answered %s", self.group_id, err.name)
            self.state = ShareMemberState.LEFT
            self.member_epoch = 0
            return
        if err is ErrorCode.none:
            self._retry.reset()
            interval = int(response.heartbeat_interval.total_seconds() * 1000)
            if interval > 0:
                self._interval_ms = interval
                self._next_ms = now_ms + interval
            if response.member_id:
                self.member_id = str(response.member_id)
            self.member_epoch = int(response.member_epoch)
            self._topics_sent = sent_topics
            if self.state is ShareMemberState.JOINING:
                log.info(
                    "share group %s: joined as member %s (epoch %d)",
                    self.group_id,
                    self.member_id,
                    self.member_epoch,
                )
                self.state = ShareMemberState.STABLE
            if response.assignment is not None:
                target = {
                    tp.topic_id: frozenset(int(p) for p in tp.partitions)
                    for tp in response.assignment.topic_partitions
                    if tp.topic_id is not None
                }
                self._set_assignment(target, now_ms)
            return
        message = response.error_message or err.name
        if err in COORDINATOR_ERRORS:
            self._retry_later(now_ms)
            self._events.append(CoordinatorNeeded(message, coordinator_epoch))
        elif err is ErrorCode.coordinator_load_in_progress:
            self._retry_later(now_ms)
        elif err in HEARTBEAT_FENCING_ERRORS:
            log.info(
                "share group %s: member %s fenced (%s); rejoining", self.group_id, self.member_id, err.name
            )
            self.member_epoch = 0
            self._topics_sent = None
            self.state = ShareMemberState.JOINING
            self._set_assignment({}, now_ms)
            self._next_ms = now_ms
        elif err in _FATAL_ERRORS or not err.retriable:
            error = error_for_code(err, f"share group {self.group_id}: {message}")
            log.error("share group %s: heartbeat failed fatally: %s", self.group_id, message)
            self.state = ShareMemberState.FATAL
            self.fatal_error = error
            self._set_assignment({}, now_ms)
            self._events.append(MembershipError(error, fatal=True))
        else:
            log.warning("share group %s: heartbeat error %s; retrying", self.group_id, message)
            self._retry_later(now_ms)

    def _set_assignment(self, target: dict[uuid.UUID, frozenset[int]], now_ms: int) -> None:
        self._target = dict(target)
        names = self._cluster.topic_names_by_id()
        resolved: set[TopicPartition] = set()
        unknown: set[uuid.UUID] = set()
        for topic_id, parts in target.items():
            name = names.get(topic_id)
            if name is None:
                unknown.add(topic_id)
                continue
            resolved.update(TopicPartition(name, p) for p in parts)
        if unknown:
            self._events.append(MetadataNeeded(topic_ids=frozenset(unknown)))
        assigned = frozenset(resolved)
        if assigned != self._assigned:
            self._assigned = assigned
            log.info("share group %s: assigned %s", self.group_id, sorted(assigned) or "nothing")
            self._events.append(ShareAssignmentChanged(assigned))
