"""The KIP-848 consumer-protocol membership (``group.protocol=consumer``) as a sans-I/O state machine.

It implements :class:`~kafka_handoff.group.membership.Membership`: the network thread calls
:meth:`ConsumerMembership.poll` and sends the ConsumerGroupHeartbeat (API 68) requests it returns;
responses come back through the request's callbacks; application-thread inputs (subscribe, app poll,
callback completion, leave) arrive as method calls carrying ``now_ms``; outputs other than requests
are drained with :meth:`ConsumerMembership.drain_events`.

Member states and their allowed predecessors follow Kafka's ``MemberState``::

    UNSUBSCRIBED    <- PREPARE_LEAVING, LEAVING, FENCED
    JOINING         <- FENCED, UNSUBSCRIBED, STALE
    RECONCILING     <- STABLE, JOINING, ACKNOWLEDGING, RECONCILING
    ACKNOWLEDGING   <- RECONCILING
    STABLE          <- JOINING, ACKNOWLEDGING, RECONCILING
    FENCED          <- JOINING, STABLE, RECONCILING, ACKNOWLEDGING, PREPARE_LEAVING, LEAVING
    PREPARE_LEAVING <- JOINING, STABLE, RECONCILING, ACKNOWLEDGING, UNSUBSCRIBED
    LEAVING         <- PREPARE_LEAVING
    FATAL           <- JOINING, STABLE, RECONCILING, ACKNOWLEDGING, PREPARE_LEAVING, LEAVING, UNSUBSCRIBED
    STALE           <- LEAVING

Any other transition is a bug and raises :class:`~kafka_handoff.errors.IllegalStateError`.

Reconciliation (one at a time): resolve the target's topic ids through metadata (and a cache of the
names of owned topics), reconcile the resolvable part, ``revoked = owned - target``,
``added = target - owned``; ``CallbackNeeded(REVOKE)`` first (not for an empty set) and wait; then
``AssignmentChanged(owned=new, awaiting_callback=added)`` and ``CallbackNeeded(ASSIGN, added)`` (even
when empty) and wait; then ACKNOWLEDGING: the next heartbeat carries the owned partitions.  While a
revoke callback is pending the member keeps heartbeating *without* acknowledging, so the broker keeps
the partitions with this member; that is how the application delays a revocation (KIP-983).  The
broker's deadline is the rebalance timeout (``max.poll.interval.ms``) after which it fences the member.
"""

from __future__ import annotations

import base64
import enum
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.errors import (
    BrokerResponseError,
    ConfigError,
    GroupProtocolUnsupportedError,
    Needs,
    error_for_code,
)
from kafka_handoff.group.heartbeat_state import (
    NO_ASSIGNMENT,
    ExponentialBackoff,
    HeartbeatFields,
    HeartbeatTimer,
    LocalAssignment,
)
from kafka_handoff.group.membership import (
    AssignmentChanged,
    CallbackKind,
    CallbackNeeded,
    MembershipError,
    MetadataNeeded,
    RebalanceMetricsSink,
    Subscription,
)
from kafka_handoff.group.membership_core import COORDINATOR_ERRORS, HEARTBEAT_FENCING_ERRORS, MembershipCore
from kafka_handoff.protocol.requests import MAX_POLL_WAIT_MS, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import ClusterMetadata, ConsumerGroupMetadata, TopicPartition

__all__ = [
    "CONSUMER_GROUP_HEARTBEAT",
    "LEAVE_GROUP_EPOCH",
    "LEAVE_GROUP_STATIC_EPOCH",
    "VALID_PREVIOUS_STATES",
    "ConsumerMembership",
    "MemberState",
    "generate_member_id",
]

log = logging.getLogger(__name__)

CONSUMER_GROUP_HEARTBEAT = ApiKey.CONSUMER_GROUP_HEARTBEAT
LEAVE_GROUP_EPOCH = -1
LEAVE_GROUP_STATIC_EPOCH = -2
DEFAULT_HEARTBEAT_INTERVAL_MS = 5000
"""Used until the first response gives the broker's ``group.consumer.heartbeat.interval.ms``."""

CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG = (
    "The cluster does not support the new CONSUMER group protocol (KIP-848, ConsumerGroupHeartbeat). "
    "Set group.protocol=classic on the consumer configs to revert to the CLASSIC protocol until the "
    "cluster is upgraded."
)
REGEX_NOT_SUPPORTED_MSG = (
    "The cluster does not support regular expression subscriptions on the CONSUMER group protocol "
    "(needs ConsumerGroupHeartbeat v1, Kafka 4.0+ brokers). Upgrade the cluster, subscribe to topic "
    "names, or set group.protocol=classic."
)


class MemberState(enum.Enum):
    UNSUBSCRIBED = "UNSUBSCRIBED"
    JOINING = "JOINING"
    RECONCILING = "RECONCILING"
    ACKNOWLEDGING = "ACKNOWLEDGING"
    STABLE = "STABLE"
    FENCED = "FENCED"
    PREPARE_LEAVING = "PREPARE_LEAVING"
    LEAVING = "LEAVING"
    STALE = "STALE"
    FATAL = "FATAL"


_S = MemberState

VALID_PREVIOUS_STATES: Mapping[MemberState, frozenset[MemberState]] = {
    _S.UNSUBSCRIBED: frozenset({_S.PREPARE_LEAVING, _S.LEAVING, _S.FENCED}),
    _S.JOINING: frozenset({_S.FENCED, _S.UNSUBSCRIBED, _S.STALE}),
    _S.RECONCILING: frozenset({_S.STABLE, _S.JOINING, _S.ACKNOWLEDGING, _S.RECONCILING}),
    _S.ACKNOWLEDGING: frozenset({_S.RECONCILING}),
    _S.STABLE: frozenset({_S.JOINING, _S.ACKNOWLEDGING, _S.RECONCILING}),
    _S.FENCED: frozenset(
        {_S.JOINING, _S.STABLE, _S.RECONCILING, _S.ACKNOWLEDGING, _S.PREPARE_LEAVING, _S.LEAVING}
    ),
    _S.PREPARE_LEAVING: frozenset({_S.JOINING, _S.STABLE, _S.RECONCILING, _S.ACKNOWLEDGING, _S.UNSUBSCRIBED}),
    _S.LEAVING: frozenset({_S.PREPARE_LEAVING}),
    _S.FATAL: frozenset(
        {
            _S.JOINING,
            _S.STABLE,
            _S.RECONCILING,
            _S.ACKNOWLEDGING,
            _S.PREPARE_LEAVING,
            _S.LEAVING,
            _S.UNSUBSCRIBED,
        }
    ),
    _S.STALE: frozenset({_S.LEAVING}),
}

_IN_GROUP = frozenset({_S.JOINING, _S.RECONCILING, _S.ACKNOWLEDGING, _S.STABLE})
"""Active members: may take new assignments, are subject to the poll timer."""
_NO_HEARTBEAT = frozenset({_S.UNSUBSCRIBED, _S.FENCED, _S.STALE, _S.FATAL})
_NOT_IN_GROUP = _NO_HEARTBEAT

_FATAL_ERRORS = frozenset(
    {
        ErrorCode.group_authorization_failed,
        ErrorCode.invalid_request,
        ErrorCode.group_max_size_reached,
        ErrorCode.unsupported_assignor,
        ErrorCode.invalid_regular_expression,
        ErrorCode.unreleased_instance_id,
        ErrorCode.fenced_instance_id,
    }
)


def generate_member_id() -> str:
    """A member id like Java's ``Uuid.randomUuid().toString()`` (22 URL-safe base64 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


class _Purpose(enum.Enum):
    RECONCILE_REVOKE = "reconcile-revoke"
    RECONCILE_ASSIGN = "reconcile-assign"
    FENCED_LOST = "fenced-lost"
    STALE_LOST = "stale-lost"
    LEAVE_RELEASE = "leave-release"
    FATAL_LOST = "fatal-lost"


@dataclass(slots=True, eq=False)
class _Reconciliation:
    resolved: LocalAssignment
    assigned: frozenset[TopicPartition]
    revoked: frozenset[TopicPartition]
    added: frozenset[TopicPartition]


@dataclass(slots=True)
class _PendingCallback:
    """What a callback of the ledger completes."""

    purpose: _Purpose
    kind: CallbackKind
    reconciliation: _Reconciliation | None = None


@dataclass(slots=True, eq=False)
class _SentHeartbeat:
    incarnation: int
    member_epoch: int
    leave: bool
    coordinator_epoch: int = 0
    """The discovery epoch of the coordinator it went to (a failure marks only that one unknown)."""


def _is_unsupported_version(error: BaseException) -> bool:
    if isinstance(error, GroupProtocolUnsupportedError):
        return True
    if any(cls.__name__ == "UnsupportedVersionError" for cls in type(error).__mro__):
        return True
    return isinstance(error, BrokerResponseError) and int(error.code) == int(ErrorCode.unsupported_version)


def _interval_ms(value: Any) -> int | None:
    if value is None:
        return None
    if hasattr(value, "total_seconds"):
        ms: float = value.total_seconds() * 1000
        return round(ms)
    return int(value)


class ConsumerMembership(MembershipCore[MemberState, _PendingCallback]):
    """KIP-848 membership: heartbeats, reconciliation, fencing, leaving, poll timer.

    ``member_id`` is generated once (Java style) unless given, and kept for the object's lifetime,
    across fencing and rejoining.  ``rebalance_timeout_ms`` is ``max.poll.interval.ms``: the poll timer
    and the ``RebalanceTimeoutMs`` sent to the broker.  ``jitter`` replaces ``random.random`` in the
    heartbeat backoff (tests pass a constant).
    """

    def __init__(
        self,
        group_id: str,
        *,
        member_id: str | None = None,
        group_instance_id: str | None = None,
        rack_id: str | None = None,
        rebalance_timeout_ms: int = 300_000,
        server_assignor: str | None = None,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        metrics: RebalanceMetricsSink | None = None,
        jitter: Callable[[], float] | None = None,
        default_heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
    ) -> None:
        if not group_id:
            raise ConfigError("group.id must be set to use group management (group.protocol=consumer)")
        if rebalance_timeout_ms <= 0:
            raise ConfigError(f"max.poll.interval.ms must be > 0, got {rebalance_timeout_ms}")
        if retry_backoff_ms < 0 or retry_backoff_max_ms < 0:
            raise ConfigError("retry.backoff.ms and retry.backoff.max.ms must be >= 0")
        if server_assignor is not None and not server_assignor:
            raise ConfigError("group.remote.assignor must be a non-empty assignor name (e.g. uniform, range)")
        backoff = (
            ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms, rand=jitter)
            if jitter is not None
            else ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        )
        super().__init__(
            group_id,
            initial_state=MemberState.UNSUBSCRIBED,
            transitions=VALID_PREVIOUS_STATES,
            group_instance_id=group_instance_id,
            rebalance_timeout_ms=rebalance_timeout_ms,
            backoff=backoff,
            metrics=metrics,
            poll_timer_started_ms=None,  # started when the member first joins
        )
        self._member_id = member_id or generate_member_id()
        self.rack_id = rack_id or None
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.server_assignor = server_assignor
        self._timer = HeartbeatTimer(backoff, default_heartbeat_interval_ms)
        self._fields = HeartbeatFields()

        self._epoch = 0
        self._incarnation = 0
        self._subscription: Subscription | None = None
        """What the application wants now (cleared by unsubscribe/leave)."""
        self._hb_subscription: Subscription | None = None
        """What the heartbeats carry (kept while leaving, replaced on join and subscribe)."""

        self._inflight: _SentHeartbeat | None = None
        self._joined_in_incarnation = False

        self._target: LocalAssignment = NO_ASSIGNMENT
        self._current: LocalAssignment = NO_ASSIGNMENT
        # Owned partitions the latest target no longer contains -> when the first target without them
        # arrived: the start of the broker's revocation timer (a REVOKE's received_ms), however long the
        # reconciliation then waits (metadata, an earlier callback).
        self._revoke_since: dict[TopicPartition, int] = {}
        self._owned: frozenset[TopicPartition] = frozenset()
        self._awaiting_assign: frozenset[TopicPartition] = frozenset()
        self._metadata_names: dict[uuid.UUID, str] = {}
        self._assigned_names: dict[uuid.UUID, str] = {}
        self._metadata_version = 0
        self._metadata_request_key: tuple[frozenset[uuid.UUID], int] | None = None
        self._reconciliation: _Reconciliation | None = None
        self._retry_after_app_poll = False

        self._leave_pending = False
        self._stale_released = True
        self._stale_rejoin_requested = False

    # ------------------------------------------------------------------------------------ queries
    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def member_epoch(self) -> int:
        """The member epoch as last told by the broker (0 joining, -1/-2 leaving).  Commits use it."""
        return self._epoch

    @property
    def owned(self) -> frozenset[TopicPartition]:
        """Partitions this member owns, including ones pending revocation and ones awaiting ASSIGN."""
        return self._owned

    @property
    def awaiting_assign_callback(self) -> frozenset[TopicPartition]:
        return self._awaiting_assign

    @property
    def target_assignment(self) -> Mapping[uuid.UUID, frozenset[int]]:
        return self._target.partitions

    @property
    def current_assignment(self) -> Mapping[uuid.UUID, frozenset[int]]:
        """The reconciled assignment (by topic id) that heartbeats report as owned."""
        return self._current.partitions

    @property
    def heartbeat_interval_ms(self) -> int:
        return self._timer.interval_ms

    @property
    def reconciliation_in_progress(self) -> bool:
        return self._reconciliation is not None

    @property
    def left(self) -> bool:
        return not self._leave_pending and self._state in (_S.UNSUBSCRIBED, _S.FATAL, _S.STALE)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """Member id and epoch for OffsetCommit/OffsetFetch v9+ (``-1``/``""`` while not a member)."""
        if self._epoch > 0 and self._state not in _NOT_IN_GROUP:
            return ConsumerGroupMetadata(self.group_id, self._epoch, self._member_id, self.group_instance_id)
        return ConsumerGroupMetadata(self.group_id, -1, "", self.group_instance_id)

    def generation_if_stable(self) -> ConsumerGroupMetadata:
        """Commits never wait for a KIP-848 reconciliation: the member epoch is always usable."""
        return self.group_metadata()

    def on_commit_error(self, error_code: int, sent: ConsumerGroupMetadata, now_ms: int) -> None:
        """Nothing to do: a fenced or unknown member learns it from its next heartbeat (as Java)."""

    # ------------------------------------------------------------------------------------- inputs
    def subscribe(self, subscription: Subscription, now_ms: int) -> None:
        if subscription.is_empty:
            self.unsubscribe(now_ms)
            return
        if self._state is _S.FATAL:
            log.warning("member %s is FATAL; ignoring subscribe", self._member_id)
            return
        self._subscription = subscription
        if self._state in _IN_GROUP:
            self._hb_subscription = subscription  # the next heartbeat sends the change

    def unsubscribe(self, now_ms: int) -> None:
        self._subscription = None
        self._start_leave(now_ms)

    def leave(self, now_ms: int) -> None:
        self._subscription = None
        self._start_leave(now_ms)

    def on_app_poll(self, now_ms: int) -> None:
        self._poll_timer.polled(now_ms)
        self._retry_after_app_poll = False
        if self._subscription is None:
            return
        if self._state is _S.UNSUBSCRIBED:
            self._transition_to_joining(now_ms)
        elif self._state is _S.STALE:
            self._stale_rejoin_requested = True
            if self._stale_released:
                self._transition_to_joining(now_ms)
        self._maybe_reconcile(now_ms)

    def on_callback_completed(self, seq: int, error: BaseException | None, now_ms: int) -> None:
        pending = self._ledger.complete(seq)
        if pending is None:
            log.debug("completion of unknown or already completed callback seq %d ignored", seq)
            return
        if error is not None:
            log.warning("%s callback failed: %r", pending.kind.value, error)
        purpose = pending.purpose
        if purpose is _Purpose.RECONCILE_REVOKE:
            self._on_revoke_done(pending, error, now_ms)
        elif purpose is _Purpose.RECONCILE_ASSIGN:
            self._on_assign_done(pending, error, now_ms)
        elif purpose is _Purpose.FENCED_LOST:
            if self._state is _S.FENCED:
                self._transition_to_joining(now_ms)
        elif purpose is _Purpose.STALE_LOST:
            self._stale_released = True
            if self._state is _S.STALE and self._stale_rejoin_requested and self._subscription is not None:
                self._transition_to_joining(now_ms)
        elif purpose is _Purpose.LEAVE_RELEASE:
            self._on_leave_release_done(now_ms)
        self._maybe_reconcile(now_ms)

    def on_metadata(self, metadata: ClusterMetadata, now_ms: int) -> None:
        self._metadata_names = metadata.topic_names_by_id()
        self._metadata_version += 1
        self._maybe_reconcile(now_ms)

    def enforce_rebalance(self, reason: str, now_ms: int) -> None:
        # The broker drives KIP-848 rebalances; Java's consumer ignores enforceRebalance too.
        log.info("enforce_rebalance(%s) has no effect with group.protocol=consumer", reason)

    # ------------------------------------------------------------------------------- poll/requests
    def poll(self, now_ms: int) -> PollResult:
        unsent: list[UnsentRequest] = []
        self._maybe_expire_poll_timer(now_ms, unsent)
        self._maybe_reconcile(now_ms)
        request = self._maybe_heartbeat(now_ms)
        if request is not None:
            unsent.append(request)
        return PollResult(unsent, self._time_to_next(now_ms))

    def _time_to_next(self, now_ms: int) -> int:
        wait = MAX_POLL_WAIT_MS
        st = self._state
        poll_remaining = self._poll_timer_wait_ms(now_ms)
        if poll_remaining is not None:
            wait = min(wait, max(0, poll_remaining))
        if st not in _NO_HEARTBEAT and self._latch.node_id is not None and self._inflight is None:
            if st is _S.LEAVING:
                return 0
            due = 0 if self._heartbeat_now() else self._timer.interval_remaining(now_ms)
            wait = min(wait, max(due, self._timer.backoff_remaining(now_ms)))
        return max(0, wait)

    def _heartbeat_now(self) -> bool:
        st = self._state
        if st is _S.ACKNOWLEDGING or st is _S.LEAVING:
            return True
        if st is _S.JOINING:
            return not self._joined_in_incarnation
        # A reconciled assignment not sent yet (the ack was overtaken by a new target): send it now.
        return st in (_S.RECONCILING, _S.STABLE) and self._fields.assignment_unsent(self._current)

    def _maybe_heartbeat(self, now_ms: int) -> UnsentRequest | None:
        st = self._state
        if st in _NO_HEARTBEAT:
            return None
        if self._latch.node_id is None:
            if st is _S.LEAVING:
                log.info("coordinator unknown: member %s leaves without a leave heartbeat", self._member_id)
                self._finish_leaving_without_heartbeat(now_ms)
            else:
                self._need_coordinator("coordinator unknown")
            return None
        if self._inflight is not None:
            return None
        if st is _S.LEAVING:
            return self._send_leave(now_ms, stale=False)
        if self._timer.backoff_remaining(now_ms) > 0:
            return None
        if not self._heartbeat_now() and self._timer.interval_remaining(now_ms) > 0:
            return None
        return self._send_heartbeat(now_ms)

    def _send_heartbeat(self, now_ms: int) -> UnsentRequest:
        st = self._state
        sub = self._hb_subscription
        pattern = sub.pattern.pattern if sub is not None and sub.pattern is not None else None
        topics = sub.topics if sub is not None and sub.pattern is None else frozenset()
        values: dict[str, Any] = {
            "group_id": self.group_id,
            "member_id": self._member_id,
            "member_epoch": self._epoch,
            "instance_id": self.group_instance_id,
        }
        values.update(
            self._fields.build(
                send_all=st is _S.JOINING,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                rack_id=self.rack_id,
                topic_names=topics,
                regex=pattern,
                server_assignor=self.server_assignor,
                assignment=self._current,
            )
        )
        sent = _SentHeartbeat(self._incarnation, self._epoch, False, self._latch.epoch)
        request = self._request(sent, values, now_ms, min_version=1 if pattern is not None else 0)
        if st is _S.ACKNOWLEDGING:
            # The ack is on its way (generated, not answered): STABLE, or reconcile the newer target.
            self._transition(_S.STABLE if self._target == self._current else _S.RECONCILING, now_ms)
            self._maybe_reconcile(now_ms)
        return request

    def _send_leave(self, now_ms: int, *, stale: bool) -> UnsentRequest:
        values = {
            "group_id": self.group_id,
            "member_id": self._member_id,
            "member_epoch": self._leave_epoch(),
            "instance_id": self.group_instance_id,
            "topic_partitions": None,
        }
        sent = _SentHeartbeat(self._incarnation, self._leave_epoch(), True, self._latch.epoch)
        request = self._request(sent, values, now_ms, min_version=0)
        self._fields.reset()
        if not stale:
            self._incarnation += 1
            self._transition(_S.UNSUBSCRIBED, now_ms)
        return request

    def _request(
        self, sent: _SentHeartbeat, values: dict[str, Any], now_ms: int, min_version: int
    ) -> UnsentRequest:
        self._inflight = sent
        self._timer.on_sent(now_ms)

        def on_response(response: Any, api_version: int, at_ms: int) -> None:
            self._on_response(sent, response, api_version, at_ms)

        def on_failure(error: BaseException, at_ms: int) -> None:
            self._on_failure(sent, error, at_ms)

        return self._coordinator_request(
            CONSUMER_GROUP_HEARTBEAT, values, now_ms, on_response, on_failure, min_version=min_version
        )

    def _leave_epoch(self) -> int:
        return LEAVE_GROUP_STATIC_EPOCH if self.group_instance_id is not None else LEAVE_GROUP_EPOCH

    # ------------------------------------------------------------------------------- responses
    def _on_response(self, sent: _SentHeartbeat, response: Any, api_version: int, now_ms: int) -> None:
        if self._inflight is sent:
            self._inflight = None
        code = int(response.error_code)
        if sent.leave:
            self._on_leave_answered(code, now_ms)
            return
        if sent.incarnation != self._incarnation:
            log.debug("ignoring a heartbeat response from before the member rejoined or left")
            return
        if code != ErrorCode.none:
            self._on_error_code(code, response.error_message, now_ms, sent.coordinator_epoch)
            return
        self._on_success(response, api_version, now_ms)

    def _on_success(self, response: Any, api_version: int, now_ms: int) -> None:
        st = self._state
        if st is _S.LEAVING or st in _NOT_IN_GROUP:
            return
        self._timer.on_success(now_ms, _interval_ms(response.heartbeat_interval))
        member_id = response.member_id
        if api_version == 0 and member_id and member_id != self._member_id:
            # v0 brokers may assign the id themselves; v1 echoes ours.
            self._member_id = member_id
        self._epoch = int(response.member_epoch)
        if st is _S.JOINING:
            self._joined_in_incarnation = True
        assignment = response.assignment
        if assignment is None:
            return
        if st not in _IN_GROUP:
            log.debug("ignoring an assignment received in %s", st.value)
            return
        partitions: dict[uuid.UUID, frozenset[int]] = {}
        for entry in assignment.topic_partitions:
            if entry.topic_id is None:
                continue
            partitions[entry.topic_id] = partitions.get(entry.topic_id, frozenset()) | frozenset(
                int(p) for p in entry.partitions
            )
        self._process_assignment(partitions, now_ms)

    def _process_assignment(self, partitions: Mapping[uuid.UUID, frozenset[int]], now_ms: int) -> None:
        updated = self._target.updated_with(partitions)
        if updated is not self._target:
            self._target = updated
            self._retry_after_app_poll = False
        self._note_revocations(now_ms)
        if self._target != self._current:
            self._transition(_S.RECONCILING, now_ms)
            self._maybe_reconcile(now_ms)
        elif self._state in (_S.RECONCILING, _S.JOINING):
            self._transition(_S.STABLE, now_ms)

    def _note_revocations(self, now_ms: int) -> None:
        """Remember when each owned partition first went missing from the target (see _revoke_since)."""
        target: set[TopicPartition] = set()
        for tid, parts in self._target.partitions.items():
            name = self._metadata_names.get(tid) or self._assigned_names.get(tid)
            if name is not None:
                target.update(TopicPartition(name, p) for p in parts)
        self._revoke_since = {tp: self._revoke_since.get(tp, now_ms) for tp in self._owned - target}

    def _on_error_code(self, code: int, message: str | None, now_ms: int, coordinator_epoch: int) -> None:
        self._fields.reset()
        try:
            err = ErrorCode(code)
        except ValueError:
            err = ErrorCode.unknown_server_error
        if err in COORDINATOR_ERRORS:
            # Rediscover the coordinator; the retry goes as soon as it is known (no backoff).
            self._timer.on_failure(now_ms, backoff=False)
            self._mark_coordinator_unknown(f"heartbeat failed with {err.name.upper()}", coordinator_epoch)
        elif err is ErrorCode.coordinator_load_in_progress:
            self._timer.on_failure(now_ms, backoff=True)
        elif err in HEARTBEAT_FENCING_ERRORS:
            self._timer.on_failure(now_ms, backoff=False)
            self._record_failed_rebalance(now_ms)
            self._transition_to_fenced(f"{err.name.upper()}: {message or ''}".rstrip(": "), now_ms)
        elif err is ErrorCode.topic_authorization_failed:
            # Surfaced to the application; the member stays and recovers if the ACLs get fixed.
            self._timer.on_failure(now_ms, backoff=True)
            self._events.append(MembershipError(error_for_code(code, message), fatal=False))
        elif err is ErrorCode.unsupported_version:
            self._timer.on_failure(now_ms, backoff=True)
            self._record_failed_rebalance(now_ms)
            self._transition_to_fatal(self._unsupported_error(message), now_ms)
        elif err in _FATAL_ERRORS or not err.retriable:
            self._timer.on_failure(now_ms, backoff=True)
            self._record_failed_rebalance(now_ms)
            needs = Needs("ConsumerGroupHeartbeat", group=("READ", self.group_id))
            self._transition_to_fatal(error_for_code(code, message, needs=needs), now_ms)
        else:
            # A retriable code outside Java's table: back off and retry rather than fail the consumer.
            self._timer.on_failure(now_ms, backoff=True)

    def _on_failure(self, sent: _SentHeartbeat, error: BaseException, now_ms: int) -> None:
        if self._inflight is sent:
            self._inflight = None
        if sent.leave:
            log.debug("leave heartbeat failed (%r); the leave completes anyway (best effort)", error)
            self._leave_pending = False
            return
        if sent.incarnation != self._incarnation:
            return
        if isinstance(error, BrokerResponseError) and not _is_unsupported_version(error):
            # The network client fails COORDINATOR requests with broker errors (e.g. coordinator unknown).
            self._on_error_code(int(error.code), str(error), now_ms, sent.coordinator_epoch)
            return
        self._fields.reset()
        if _is_unsupported_version(error):
            self._timer.on_failure(now_ms, backoff=True)
            self._record_failed_rebalance(now_ms)
            self._transition_to_fatal(self._unsupported_error(str(error)), now_ms)
        elif getattr(error, "retriable", False) or isinstance(error, (TimeoutError, OSError)):
            self._timer.on_failure(now_ms, backoff=True)
            self._mark_coordinator_unknown(f"heartbeat failed: {error}", sent.coordinator_epoch)
        else:
            self._timer.on_failure(now_ms, backoff=True)
            self._record_failed_rebalance(now_ms)
            self._transition_to_fatal(error, now_ms)

    def _unsupported_error(self, detail: str | None) -> GroupProtocolUnsupportedError:
        sub = self._hb_subscription
        msg = (
            REGEX_NOT_SUPPORTED_MSG
            if sub is not None and sub.pattern is not None
            else CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG
        )
        return GroupProtocolUnsupportedError(f"{msg} ({detail})" if detail else msg)

    def _on_leave_answered(self, code: int, now_ms: int) -> None:
        if code != ErrorCode.none:
            log.debug("leave heartbeat answered with error code %d; leave completes anyway", code)
        self._leave_pending = False

    def _record_failed_rebalance(self, now_ms: int) -> None:
        self._rebalance.failed_if_open(now_ms, ends=False)

    # --------------------------------------------------------------------------------- transitions
    def _transition(self, new: MemberState, now_ms: int) -> None:
        old = self._set_state(new)
        if old is _S.RECONCILING and new in (_S.STABLE, _S.ACKNOWLEDGING):
            self._rebalance.completed(now_ms)
        if old is not _S.RECONCILING and new is _S.RECONCILING:
            self._rebalance.started(now_ms)
        log.debug("member %s epoch %d: %s -> %s", self._member_id, self._epoch, old.value, new.value)

    def _transition_to_joining(self, now_ms: int) -> None:
        self._transition(_S.JOINING, now_ms)
        self._incarnation += 1
        self._epoch = 0
        self._hb_subscription = self._subscription
        self._reconciliation = None
        self._retry_after_app_poll = False
        self._target = NO_ASSIGNMENT
        self._current = NO_ASSIGNMENT
        self._assigned_names.clear()
        self._metadata_request_key = None
        self._joined_in_incarnation = False
        self._stale_rejoin_requested = False
        self._fields.reset()
        self._fields.forget_regex()
        if self._poll_timer.last_poll_ms is None:
            self._poll_timer.polled(now_ms)

    def _clear_assignment(self) -> frozenset[TopicPartition]:
        """Forget every assignment; returns what was owned (emits AssignmentChanged when it changes)."""
        released = self._owned
        self._reconciliation = None
        self._target = NO_ASSIGNMENT
        self._current = NO_ASSIGNMENT
        self._owned = frozenset()
        self._awaiting_assign = frozenset()
        self._assigned_names.clear()
        if released:
            self._events.append(AssignmentChanged(frozenset()))
        return released

    def _emit_callback(
        self,
        kind: CallbackKind,
        partitions: frozenset[TopicPartition],
        purpose: _Purpose,
        reason: str,
        reconciliation: _Reconciliation | None = None,
        *,
        received_ms: int | None = None,
    ) -> CallbackNeeded:
        return self._ledger.ask(
            kind,
            partitions,
            reason,
            _PendingCallback(purpose, kind, reconciliation),
            received_ms=received_ms,
        )

    def _release_as_lost(self, purpose: _Purpose, reason: str) -> bool:
        """Clear the assignment and emit a LOST callback; False when nothing was owned (no callback)."""
        lost = self._clear_assignment()
        if not lost:
            return False
        self._emit_callback(CallbackKind.LOST, lost, purpose, reason)
        return True

    def _transition_to_fenced(self, reason: str, now_ms: int) -> None:
        st = self._state
        if st in _NOT_IN_GROUP:
            return
        if st in (_S.PREPARE_LEAVING, _S.LEAVING):
            # Already leaving: the broker dropped us, so the leave is done once the release completes.
            log.info("member %s fenced while leaving (%s); completing the leave", self._member_id, reason)
            self._transition(_S.UNSUBSCRIBED, now_ms)
            self._incarnation += 1
            self._epoch = 0
            self._fields.reset()
            if not any(p.purpose is _Purpose.LEAVE_RELEASE for p in self._ledger.entries()):
                self._leave_pending = False
            return
        log.warning("member %s fenced (%s): partitions lost, rejoining", self._member_id, reason)
        self._transition(_S.FENCED, now_ms)
        self._incarnation += 1
        self._epoch = 0
        self._fields.reset()
        if not self._release_as_lost(_Purpose.FENCED_LOST, f"fenced: {reason}"):
            self._transition_to_joining(now_ms)

    def _transition_to_fatal(self, error: BaseException, now_ms: int) -> None:
        self._events.append(MembershipError(error, fatal=True))
        prev = self._state
        if prev not in VALID_PREVIOUS_STATES[_S.FATAL]:
            return
        log.error("member %s failed fatally in %s: %s", self._member_id, prev.value, error)
        self._transition(_S.FATAL, now_ms)
        self._incarnation += 1
        self._leave_pending = False
        self._subscription = None
        if prev is not _S.UNSUBSCRIBED:
            self._release_as_lost(_Purpose.FATAL_LOST, f"fatal error: {error}")

    def _start_leave(self, now_ms: int) -> None:
        st = self._state
        if st in (_S.UNSUBSCRIBED, _S.FATAL, _S.PREPARE_LEAVING, _S.LEAVING):
            return
        if st is _S.STALE:
            self._stale_rejoin_requested = False  # already out of the group; just do not rejoin
            return
        if st is _S.FENCED:
            # Not a member any more: nothing to send; the pending LOST callback still completes.
            self._transition(_S.UNSUBSCRIBED, now_ms)
            self._incarnation += 1
            return
        self._transition(_S.PREPARE_LEAVING, now_ms)
        self._leave_pending = True
        self._reconciliation = None
        self._retry_after_app_poll = False
        if not self._owned:
            self._on_leave_release_done(now_ms)
        elif self._epoch > 0:
            self._emit_callback(CallbackKind.REVOKE, self._owned, _Purpose.LEAVE_RELEASE, "leaving the group")
        else:
            self._release_as_lost(_Purpose.LEAVE_RELEASE, "leaving the group (not a member)")

    def _on_leave_release_done(self, now_ms: int) -> None:
        self._clear_assignment()
        if self._state is _S.PREPARE_LEAVING:
            self._epoch = self._leave_epoch()
            self._transition(_S.LEAVING, now_ms)
        elif self._state is _S.UNSUBSCRIBED:
            self._leave_pending = False

    def _finish_leaving_without_heartbeat(self, now_ms: int) -> None:
        self._incarnation += 1
        self._transition(_S.UNSUBSCRIBED, now_ms)
        self._leave_pending = False

    def _poll_timer_applies(self) -> bool:
        return self._state in _IN_GROUP

    def _maybe_expire_poll_timer(self, now_ms: int, unsent: list[UnsentRequest]) -> None:
        if not self._poll_timer_expired(now_ms):
            return
        log.warning(
            "member %s: no poll() within max.poll.interval.ms=%d; leaving the group (partitions lost), "
            "will rejoin on the next poll()",
            self._member_id,
            self.rebalance_timeout_ms,
        )
        self._transition(_S.PREPARE_LEAVING, now_ms)
        self._reconciliation = None
        self._epoch = self._leave_epoch()
        self._transition(_S.LEAVING, now_ms)
        # Sent even if a heartbeat is in flight: its answer no longer matters.
        unsent.append(self._send_leave(now_ms, stale=True))
        self._transition(_S.STALE, now_ms)
        self._incarnation += 1
        self._stale_rejoin_requested = False
        self._stale_released = not self._release_as_lost(_Purpose.STALE_LOST, "max.poll.interval.ms expired")

    # ------------------------------------------------------------------------------ reconciliation
    def _resolve(self) -> tuple[dict[uuid.UUID, frozenset[int]], dict[uuid.UUID, str], frozenset[uuid.UUID]]:
        resolved: dict[uuid.UUID, frozenset[int]] = {}
        names: dict[uuid.UUID, str] = {}
        unresolved: set[uuid.UUID] = set()
        for tid, parts in self._target.partitions.items():
            name = self._metadata_names.get(tid) or self._assigned_names.get(tid)
            if name is None:
                unresolved.add(tid)
                continue
            resolved[tid] = parts
            names[tid] = name
        return resolved, names, frozenset(unresolved)

    def _maybe_request_metadata(self, unresolved: frozenset[uuid.UUID]) -> None:
        key = (unresolved, self._metadata_version)
        if key == self._metadata_request_key:
            return
        self._metadata_request_key = key
        sub = self._hb_subscription
        self._events.append(
            MetadataNeeded(
                topics=sub.topics if sub is not None else frozenset(),
                all_topics=sub is not None and sub.pattern is not None,
                topic_ids=unresolved,
            )
        )

    def _maybe_reconcile(self, now_ms: int) -> None:
        if self._state is not _S.RECONCILING or self._target == self._current:
            return
        resolved, names, unresolved = self._resolve()
        if unresolved:
            self._maybe_request_metadata(unresolved)
        if self._reconciliation is not None or self._retry_after_app_poll:
            return
        if not self._current.is_none and resolved == dict(self._current.partitions):
            if self._current.local_epoch != self._target.local_epoch:
                # Nothing to do locally for the resolvable part; acknowledge it under the new local epoch.
                self._current = LocalAssignment(self._target.local_epoch, resolved)
                self._transition(_S.ACKNOWLEDGING, now_ms)
            return
        self._assigned_names.update(names)
        assigned = frozenset(TopicPartition(names[tid], p) for tid, parts in resolved.items() for p in parts)
        revoked = self._owned - assigned
        added = (assigned - self._owned) | (self._awaiting_assign & assigned)
        rec = _Reconciliation(LocalAssignment(self._target.local_epoch, resolved), assigned, revoked, added)
        self._reconciliation = rec
        log.info(
            "member %s reconciling (local epoch %d): assigned %s, revoking %s, adding %s",
            self._member_id,
            rec.resolved.local_epoch,
            sorted(assigned),
            sorted(revoked),
            sorted(added),
        )
        if revoked:
            arrived = min(self._revoke_since.get(tp, now_ms) for tp in revoked)
            self._emit_callback(
                CallbackKind.REVOKE,
                revoked,
                _Purpose.RECONCILE_REVOKE,
                "reassigned",
                rec,
                received_ms=arrived,
            )
        else:
            self._assign_step(rec)

    def _assign_step(self, rec: _Reconciliation) -> None:
        self._owned = rec.assigned
        self._awaiting_assign = (self._awaiting_assign & rec.assigned) | rec.added
        kept_topics = {tp.topic for tp in rec.assigned}
        self._assigned_names = {tid: n for tid, n in self._assigned_names.items() if n in kept_topics}
        self._events.append(AssignmentChanged(rec.assigned, rec.added))
        self._emit_callback(CallbackKind.ASSIGN, rec.added, _Purpose.RECONCILE_ASSIGN, "assigned", rec)

    def _reconciliation_valid(self, rec: _Reconciliation | None) -> bool:
        return rec is not None and rec is self._reconciliation and self._state is _S.RECONCILING

    def _on_revoke_done(self, pending: _PendingCallback, error: BaseException | None, now_ms: int) -> None:
        rec = pending.reconciliation
        if not self._reconciliation_valid(rec):
            log.debug("revoke completed for a reconciliation that is no longer current; discarded")
            return
        assert rec is not None
        # A failed revoke callback does not stop the rebalance (KIP-1306, as the classic protocol): the
        # application thread raises the error from poll() once; the partitions are given up all the same.
        self._assign_step(rec)
        if not rec.added:
            # Nothing new to hand over: the (empty) assigned callback still runs at the next poll(), but the
            # broker is told at once that the revoked partitions are free.  Waiting for that callback costs a
            # whole poll interval of the rebalance timeout: a loop polling every third of
            # max.poll.interval.ms was fenced without ever delaying a revoke (issue 30's simulator).
            self._finish_reconciliation(rec, now_ms)

    def _on_assign_done(self, pending: _PendingCallback, error: BaseException | None, now_ms: int) -> None:
        rec = pending.reconciliation
        if not self._reconciliation_valid(rec):
            log.debug("assign completed for a reconciliation that is no longer current; discarded")
            return
        assert rec is not None
        # A failed assign callback does not stop the rebalance either: the partitions become fetchable and
        # the new assignment is acknowledged (the error reaches the application from poll(), once).
        self._finish_reconciliation(rec, now_ms)

    def _finish_reconciliation(self, rec: _Reconciliation, now_ms: int) -> None:
        self._awaiting_assign = self._awaiting_assign - rec.added
        self._current = rec.resolved
        self._reconciliation = None
        self._transition(_S.ACKNOWLEDGING, now_ms)
