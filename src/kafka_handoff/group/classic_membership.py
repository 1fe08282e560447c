"""Classic group membership (Join/Sync/Heartbeat/LeaveGroup), eager and KIP-429 cooperative, sans-I/O.

:class:`ClassicMembership` implements :class:`~kafka_handoff.group.membership.Membership` for
``group.protocol=classic``.  It follows Java's ``AbstractCoordinator``/``ConsumerCoordinator``: the member
states UNJOINED -> PREPARING_REBALANCE (JoinGroup sent) -> COMPLETING_REBALANCE (JoinGroup answered,
SyncGroup pending) -> STABLE, "join prepare" callbacks before every JoinGroup, the leader's client-side
assignment, "join complete" callbacks after SyncGroup, heartbeats, the poll timer and LeaveGroup.  It sends
nothing itself: ``poll(now_ms)`` returns :class:`~kafka_handoff.protocol.requests.UnsentRequest` objects for
the coordinator and every other output is an event drained with :meth:`ClassicMembership.drain_events`.

State
    The member state moves only along :data:`VALID_PREVIOUS_STATES` (checked by the
    :class:`~kafka_handoff.group.membership_core.MembershipCore` base), a leave only along
    :data:`LEAVE_PREVIOUS_PHASES`.  The callbacks outstanding are in the base's callback ledger (an
    ``_Outstanding`` entry each: partitions still owned while revoking, whether the next JoinGroup waits, the
    cooperative follow-up, the rebalance's ASSIGN); the rest is grouped per concern (``_Settings``,
    ``_Topics``, ``_Rejoin``, ``_Liveness``, ``_Leaving``).  JoinGroup, SyncGroup, Heartbeat and LeaveGroup go
    through one helper, ``_send``: one request of each kind in flight, an answer to any other ignored.

Rebalance protocol
    EAGER unless every configured assignor supports COOPERATIVE (then COOPERATIVE), as in Java.

Callbacks (KIP-429 semantics, the order of the seed's "ConsumerRebalanceListener and ConsumerPartitionAssignor
Semantics")
    * before JoinGroup ("join prepare"): generation reset (fenced / unknown member / poll timeout) ->
      LOST(all owned); else EAGER -> REVOKE(all owned); COOPERATIVE -> REVOKE(owned partitions of topics no
      longer subscribed).  A REVOKE is never emitted for an empty set; the JoinGroup waits for completion.
    * after SyncGroup ("join complete"): COOPERATIVE -> REVOKE(owned - assigned) if non-empty, then
      ``AssignmentChanged`` and ASSIGN(assigned - owned), always, even when empty.  The ASSIGN event carries
      ``assignor.on_assignment``: user code, run by the application thread right before the assigned
      callback, so after the revoke callback even when that is delayed (KIP-429 order).  When that REVOKE
      completes the member rejoins (the follow-up rebalance that lets the partitions move).  An assignment
      naming topics outside the subscription is not applied: the member rejoins.
    * LOST(all owned) immediately when the generation is reset by UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION /
      FENCED_INSTANCE_ID (Heartbeat, SyncGroup, JoinGroup or a commit) or when ``max.poll.interval.ms``
      expires; LOST(vanished) when metadata says owned partitions of subscribed topics no longer exist.
    * Callback errors are the application thread's business (it reports them); the rebalance completes.

Rebalance triggers (KIP-429 1.x)
    Every member rejoins when its subscribed topics change (subscription, pattern matches) or on
    REBALANCE_IN_PROGRESS / a generation reset.  A changed partition count of a subscribed topic (or owned
    partitions that vanished: LOST for them) makes only the *leader* rejoin, as in Java, which compares with
    the counts it assigned from.  The leader hands partitions that members claim as owned, of topics its
    metadata does not show and that the assignor gave to nobody, back to their owners (KIP-429 2.f).

User code of assignors
    With ``app_thread_assignors`` (the consumer sets it) a custom assignor's ``assign`` is handed to the
    application thread as an :class:`~kafka_handoff.group.membership.AppThreadTask` (run inside ``poll()``,
    as Java does; heartbeats go on meanwhile); built-in assignors run here at once.  ``on_assignment`` of any
    assignor rides on the ASSIGN event (application thread).  ``subscription_user_data`` is still called on
    the network thread when a JoinGroup is built.

Ownership while a callback is outstanding
    A partition stays in :attr:`ClassicMembership.owned` until its REVOKE callback completed (the application
    may still commit it; nobody else can own it yet, see below).  ``AssignmentChanged.owned`` always equals
    :attr:`owned`, so after a cooperative SyncGroup that revokes ``R`` and adds ``A`` the events are
    ``REVOKE(R)``, ``AssignmentChanged(owned=assigned | R, awaiting_callback=A)``, ``ASSIGN(A)`` and, once
    the REVOKE completes, ``AssignmentChanged(owned=assigned)``.  LOST partitions leave ``owned`` before
    the LOST event is emitted.

Delayed revocation (KIP-983) -- the rule implemented here
    The application thread may take as long as it likes to complete a REVOKE callback; heartbeats continue
    meanwhile (the member is still STABLE in its generation, and a classic coordinator in
    PreparingRebalance still accepts offset commits of the current generation, so the application can
    commit what it finished).  The JoinGroup that follows a revocation is only sent once every outstanding
    callback has completed, and it never claims a partition whose REVOKE is outstanding.  A partition
    that is not claimed may be handed to another member as soon as the rebalance that our JoinGroup joins
    completes; so sending that JoinGroup is the point where the partition must have been given up.

    *Never hold a revoked partition past the point where another member may own it.*  Other members can
    get a partition we are revoking only (a) through a rebalance that includes our JoinGroup, (b) if the
    coordinator expels us: because we did not rejoin within the rebalance timeout of a rebalance someone
    else started, or because no heartbeat reached it within ``session.timeout.ms``, or (c) after our
    generation was reset.  Hence:

    * no rebalance in progress at the coordinator (our own follow-up, our subscription change, an eager
      ``enforce_rebalance``): the member waits for the REVOKE indefinitely; no one else can own the
      partitions before our JoinGroup, so nothing is lost.
    * the coordinator told us a rebalance is in progress (Heartbeat or commit REBALANCE_IN_PROGRESS): the
      coordinator started it after it answered our last successful heartbeat (sent at ``t``), so it
      waits for us until at least ``t + rebalance.timeout`` (``max.poll.interval.ms``).  The member keeps
      waiting for the REVOKE until ``t + rebalance_timeout - margin`` (margin: ``revoke_deadline_margin_ms``,
      default 10 % of the rebalance timeout); then every owned partition is declared LOST (the still-pending
      ones and the rest: the lost callback always gets everything, as Java's; a late completion of the
      REVOKE is ignored, as its ``seq`` is stale) and the JoinGroup is sent at once, claiming nothing, and
      without waiting for any other callback.  The member does *not*
      rejoin claiming them as owned: a revoking partition is never reported in JoinGroup.
    * no successful heartbeat within ``session.timeout.ms`` (the coordinator may have expired us): every
      owned partition is declared LOST at once (the coordinator is also marked unknown, as in Java).
    * generation reset: LOST(all owned) at once, superseding every outstanding REVOKE/ASSIGN (a late
      completion of those is ignored); the JoinGroup waits for the LOST callback (as Java's synchronous
      ``onJoinPrepare`` does).

Timers
    Heartbeats every ``heartbeat.interval.ms`` in COMPLETING_REBALANCE and STABLE (so also while callbacks
    are outstanding), at most one in flight, ``retry.backoff.ms`` doubling up to ``retry.backoff.max.ms``
    after failures.  No successful heartbeat within ``session.timeout.ms`` -> the coordinator is marked
    unknown (:class:`~kafka_handoff.group.membership.CoordinatorNeeded`).  No ``on_app_poll`` within
    ``max.poll.interval.ms`` -> LeaveGroup (dynamic members), generation reset, LOST(all owned), and no
    rejoin before the next ``on_app_poll``.  The first join also waits for an ``on_app_poll``; later rejoins
    run from ``poll`` alone.  Non-retriable JoinGroup/SyncGroup errors are emitted as non-fatal
    :class:`~kafka_handoff.group.membership.MembershipError` and retried after the next ``on_app_poll``
    (Java throws them from ``poll()`` and retries in the next one); FENCED_INSTANCE_ID is fatal.

Static membership (``group.instance.id``)
    The instance id goes into JoinGroup (v5+), SyncGroup and Heartbeat (v3+).  A static member never sends
    LeaveGroup (close, unsubscribe, poll timeout), as in Java since 2.3, so a restart within the session
    timeout gets its partitions back without a rebalance.  FENCED_INSTANCE_ID is fatal.

Metrics
    ``RebalanceMetricsSink.rebalance_started`` when the JoinGroup of a new rebalance is sent (retries of a
    failed attempt belong to the same rebalance, as in Java), ``rebalance_failed`` on each failed
    JoinGroup/SyncGroup attempt (MEMBER_ID_REQUIRED included, as in Java), ``rebalance_completed`` when the
    ASSIGN callback of the rebalance completed.  Join/sync/heartbeat counters and latencies are in
    :attr:`ClassicMembership.stats`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.errors import (
    ConfigError,
    FencedError,
    IllegalStateError,
    KafkaError,
    Needs,
    UnsupportedVersionError,
    error_for_code,
)
from kafka_handoff.group.assignors import is_builtin, is_builtin_cooperative, select_protocol
from kafka_handoff.group.assignors.base import (
    MemberAssignment,
    MemberSubscription,
    PartitionAssignor,
    RebalanceProtocol,
)
from kafka_handoff.group.membership import (
    AppThreadTask,
    AssignmentChanged,
    CallbackKind,
    MembershipError,
    MetadataNeeded,
    RebalanceMetricsSink,
    Subscription,
)
from kafka_handoff.group.membership_core import (
    COORDINATOR_ERRORS,
    MembershipCore,
    RetryBackoff,
    checked_transition,
)
from kafka_handoff.group.protocol_data import (
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from kafka_handoff.group.validate import validate_cooperative_assignment
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.requests import MAX_POLL_WAIT_MS, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import ClusterMetadata, ConsumerGroupMetadata, TopicPartition

__all__ = [
    "LEAVE_PREVIOUS_PHASES",
    "NO_GENERATION",
    "VALID_PREVIOUS_STATES",
    "ClassicMembership",
    "Generation",
    "LeavePhase",
    "MemberState",
]

PROTOCOL_TYPE = "consumer"
JOIN_GROUP_TIMEOUT_LAPSE_MS = 5000
"""JoinGroup may block at the coordinator for the rebalance timeout; its request timeout adds this."""

_MAX_REASON = 255

_E = ErrorCode


class MemberState(enum.Enum):
    UNJOINED = "UNJOINED"
    PREPARING_REBALANCE = "PREPARING_REBALANCE"
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"
    STABLE = "STABLE"


_S = MemberState

VALID_PREVIOUS_STATES: Mapping[MemberState, frozenset[MemberState]] = {
    # generation reset, leave, fatal error: from anywhere
    _S.UNJOINED: frozenset(_S),
    # JoinGroup sent (first join, rejoin from STABLE, retry) or a failed attempt of this rebalance
    _S.PREPARING_REBALANCE: frozenset(
        {_S.UNJOINED, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.STABLE}
    ),
    # JoinGroup answered: SyncGroup (after the leader's assignment) pending
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    # SyncGroup answered
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
}
"""Allowed predecessors of each classic member state; any other transition raises ``IllegalStateError``."""

_IN_GROUP = frozenset({_S.COMPLETING_REBALANCE, _S.STABLE})
"""Members of a generation: they heartbeat, the session and poll timers apply."""
_REBALANCING = frozenset({_S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE})


@dataclass(frozen=True, slots=True)
class Generation:
    generation_id: int = -1
    member_id: str = ""
    protocol_name: str | None = None

    @property
    def is_reset(self) -> bool:
        """No generation or no member id: the member is not (or no longer) part of a generation."""
        return self.generation_id == -1 or self.member_id == ""


NO_GENERATION = Generation()


@dataclass(frozen=True, slots=True)
class _Api:
    """A request the classic member sends to the coordinator."""

    key: int
    name: str
    static_min_version: int
    """The first version that carries ``group.instance.id`` (a static member needs at least that one)."""


_JOIN = _Api(ApiKey.JOIN_GROUP, "JoinGroup", 5)
_SYNC = _Api(ApiKey.SYNC_GROUP, "SyncGroup", 3)
_HEARTBEAT = _Api(ApiKey.HEARTBEAT, "Heartbeat", 3)
_LEAVE_GROUP = _Api(ApiKey.LEAVE_GROUP, "LeaveGroup", 0)  # a static member never sends it


class LeavePhase(enum.Enum):
    """Where a leave (close or unsubscribe) is, beside the member state."""

    NONE = "none"
    PREPARING = "preparing"  # waiting for the revoke/lost callbacks
    SENDING = "sending"  # LeaveGroup in flight
    DONE = "done"


LEAVE_PREVIOUS_PHASES: Mapping[LeavePhase, frozenset[LeavePhase]] = {
    # a subscribe() during the leave rejoins once it is done; subscribing again after it
    LeavePhase.NONE: frozenset({LeavePhase.PREPARING, LeavePhase.SENDING, LeavePhase.DONE}),
    LeavePhase.PREPARING: frozenset({LeavePhase.NONE}),  # close / unsubscribe: the callbacks first
    LeavePhase.SENDING: frozenset({LeavePhase.PREPARING}),  # LeaveGroup sent
    # nothing to send, or the LeaveGroup answered or failed
    LeavePhase.DONE: frozenset({LeavePhase.PREPARING, LeavePhase.SENDING}),
}
"""Allowed predecessors of each phase of a classic leave (beside the member state)."""


@dataclass(frozen=True, slots=True)
class _Settings:
    """The member's configuration."""

    session_timeout_ms: int
    rebalance_timeout_ms: int
    heartbeat_interval_ms: int
    request_timeout_ms: int
    revoke_deadline_margin_ms: int
    rack_id: str | None
    exclude_internal_topics: bool
    app_thread_assignors: bool


@dataclass(slots=True)
class _Topics:
    """What the member subscribes to and what it knows of those topics."""

    subscription: Subscription = field(default_factory=Subscription)
    subscribed: frozenset[str] = frozenset()
    """The topics the subscription names, or its pattern matches in the metadata."""
    joined: frozenset[str] = frozenset()
    """The subscribed topics when the last JoinGroup was sent."""
    metadata: ClusterMetadata | None = None
    metadata_version: int = 0
    snapshot: dict[str, int | None] = field(default_factory=dict)
    """Partition counts the last assignment was computed from (the leader rejoins when they change)."""


@dataclass(slots=True)
class _Rejoin:
    """When the next JoinGroup goes (sending it enters PREPARING_REBALANCE)."""

    backoff: RetryBackoff
    """After failed JoinGroup/SyncGroup attempts; reset when a rebalance completes."""
    needed: bool = True
    reason: str = "initial join"
    prepare_needed: bool = True
    """The "join prepare" callbacks (revoke or lose) run before the next JoinGroup."""
    awaiting_app_poll: bool = True
    """Nothing is sent before the application's next ``poll()`` (first join, after an error)."""
    deadline_ms: int | None = None
    """When pending revocations are declared lost so the JoinGroup makes the rebalance timeout."""


@dataclass(slots=True)
class _Liveness:
    """Heartbeat and session timers (COMPLETING_REBALANCE and STABLE), and the latest times the coordinator
    is known to have seen the member alive / the group stable (sent times of answered requests)."""

    retry: RetryBackoff
    next_ms: int = 0
    session_deadline_ms: int = 0
    stable_evidence_ms: int = 0
    alive_evidence_ms: int = 0


@dataclass(slots=True)
class _Leaving:
    """A leave (close or unsubscribe) in progress."""

    phase: LeavePhase = LeavePhase.NONE
    reason: str = ""
    clear_subscription: bool = False
    """Unsubscribe: forget the subscription once left."""
    rejoin_after: bool = False
    """``subscribe()`` during the leave: join again once it is done."""

    def to(self, phase: LeavePhase) -> None:
        self.phase = checked_transition(LEAVE_PREVIOUS_PHASES, self.phase, phase)


@dataclass(slots=True)
class _LeaderJob:
    members: list[tuple[str, str | None, bytes]]
    protocol_name: str
    skip_assignment: bool
    metadata_wait_version: int | None = None


@dataclass(slots=True)
class _Outstanding:
    """What waits for a callback the ledger asked for."""

    revoking: frozenset[TopicPartition] = frozenset()
    """A REVOKE's partitions: still owned until it completes."""
    blocks_join: bool = True
    """The next JoinGroup (or LeaveGroup) waits for it."""
    followup: bool = False
    """Cooperative: the member rejoins once it completes (the follow-up rebalance)."""
    completes_rebalance: bool = False
    """The rebalance's ASSIGN: the rebalance completes with it (metrics)."""


@dataclass(slots=True)
class _Stats:
    values: dict[str, int] = field(
        default_factory=lambda: {
            "join_total": 0,
            "join_time_ms_total": 0,
            "join_time_ms_max": 0,
            "sync_total": 0,
            "sync_time_ms_total": 0,
            "sync_time_ms_max": 0,
            "heartbeat_total": 0,
            "heartbeat_response_time_ms_max": 0,
            "last_heartbeat_send_ms": -1,
            "poll_timeouts": 0,
            "callback_errors": 0,
        }
    )

    def latency(self, prefix: str, ms: int) -> None:
        self.values[f"{prefix}_total"] += 1
        self.values[f"{prefix}_time_ms_total"] += ms
        self.values[f"{prefix}_time_ms_max"] = max(self.values[f"{prefix}_time_ms_max"], ms)


class ClassicMembership(MembershipCore[MemberState, _Outstanding]):
    """The classic consumer group membership; see the module docstring for the behaviour."""

    def __init__(
        self,
        group_id: str,
        assignors: Sequence[PartitionAssignor],
        *,
        group_instance_id: str | None = None,
        session_timeout_ms: int = 45_000,
        rebalance_timeout_ms: int = 300_000,
        heartbeat_interval_ms: int = 3_000,
        rack_id: str | None = None,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        request_timeout_ms: int = 30_000,
        metrics: RebalanceMetricsSink | None = None,
        exclude_internal_topics: bool = True,
        revoke_deadline_margin_ms: int | None = None,
        app_thread_assignors: bool = False,
    ) -> None:
        if not assignors:
            raise ConfigError("partition.assignment.strategy: at least one assignor is required")
        if not group_id:
            raise ConfigError("group.id: a non-empty group id is required for group membership")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ConfigError(
                f"heartbeat.interval.ms ({heartbeat_interval_ms}) must be lower than session.timeout.ms "
                f"({session_timeout_ms})"
            )
        if rebalance_timeout_ms <= 0:
            raise ConfigError(f"max.poll.interval.ms: must be positive, got {rebalance_timeout_ms}")
        names = [a.name for a in assignors]
        if len(set(names)) != len(names):
            raise ConfigError(f"partition.assignment.strategy: duplicate assignor names in {names}")
        super().__init__(
            group_id,
            initial_state=MemberState.UNJOINED,
            transitions=VALID_PREVIOUS_STATES,
            group_instance_id=group_instance_id,
            rebalance_timeout_ms=rebalance_timeout_ms,
            backoff=ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms, jitter=0),
            metrics=metrics,
            poll_timer_started_ms=0,
        )
        self.protocol = select_protocol(assignors)
        self._assignors: tuple[PartitionAssignor, ...] = tuple(assignors)
        margin = (
            rebalance_timeout_ms // 10 if revoke_deadline_margin_ms is None else revoke_deadline_margin_ms
        )
        self._cfg = _Settings(
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            request_timeout_ms=request_timeout_ms,
            revoke_deadline_margin_ms=margin,
            rack_id=rack_id or None,
            exclude_internal_topics=exclude_internal_topics,
            app_thread_assignors=app_thread_assignors,
        )
        self._topics = _Topics()
        # membership: the generation and the state of the rebalance in progress (the member state is the
        # base's, moved along VALID_PREVIOUS_STATES)
        self._generation = NO_GENERATION
        self._is_leader = False
        self._rejoin = _Rejoin(RetryBackoff(self._backoff))
        self._in_flight: dict[_Api, object] = {}
        """The one request of each kind in flight (its token): answers to any other are ignored."""
        self._leader_job: _LeaderJob | None = None
        self._assign_task: object | None = None
        """A custom assignor's ``assign()`` run on the application thread (``AppThreadTask``, when
        ``app_thread_assignors``: the consumer sets it): the task the leader waits for."""
        self._fatal: BaseException | None = None
        # ownership (the callbacks outstanding are in the base's ledger)
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._outbox: list[UnsentRequest] = []
        self._hb = _Liveness(RetryBackoff(self._backoff))
        self._leaving = _Leaving()
        self._stats = _Stats()

    # ------------------------------------------------------------------------------------------------
    # queries

    @property
    def owned(self) -> frozenset[TopicPartition]:
        """Assigned partitions plus those whose REVOKE callback has not completed yet."""
        revoking = self.revoking
        return self._assigned | revoking if revoking else self._assigned

    @property
    def assigned(self) -> frozenset[TopicPartition]:
        """The current generation's assignment as applied (owned minus partitions being revoked)."""
        return self._assigned

    @property
    def revoking(self) -> frozenset[TopicPartition]:
        out: set[TopicPartition] = set()
        for entry in self._ledger.entries():
            out |= entry.revoking
        return frozenset(out)

    @property
    def generation(self) -> Generation:
        return self._generation

    @property
    def is_leader(self) -> bool:
        return self._is_leader

    @property
    def left(self) -> bool:
        return self._leaving.phase is LeavePhase.DONE

    @property
    def fatal_error(self) -> BaseException | None:
        return self._fatal

    @property
    def waiting_for_callbacks(self) -> frozenset[int]:
        """Sequence numbers of callbacks the next JoinGroup (or LeaveGroup) waits for."""
        return frozenset(seq for seq, entry in self._ledger.items() if entry.blocks_join)

    def _waits_for_callbacks(self) -> bool:
        return any(entry.blocks_join for entry in self._ledger.entries())

    @property
    def rejoin_needed(self) -> bool:
        return self._rejoin.needed

    @property
    def join_deadline_ms(self) -> int | None:
        """When pending revocations are declared lost so the JoinGroup makes the rebalance timeout."""
        return self._rejoin.deadline_ms

    @property
    def subscribed_topics(self) -> frozenset[str]:
        return self._topics.subscribed

    @property
    def stats(self) -> dict[str, int]:
        """Counters and latencies for Java's classic-only metrics (join/sync/heartbeat)."""
        return dict(self._stats.values)

    def group_metadata(self) -> ConsumerGroupMetadata:
        g = self._generation
        return ConsumerGroupMetadata(self.group_id, g.generation_id, g.member_id, self.group_instance_id)

    def generation_if_stable(self) -> ConsumerGroupMetadata | None:
        """The group metadata for commits, or ``None`` while a rebalance is in progress (Java's
        ``generationIfStable``): commits then wait for the rebalance to complete."""
        if self._state is not MemberState.STABLE:
            return None
        return self.group_metadata()

    # ------------------------------------------------------------------------------------------------
    # inputs

    def subscribe(self, subscription: Subscription, now_ms: int) -> None:
        if subscription.is_empty:
            self.unsubscribe(now_ms)
            return
        changed = subscription != self._topics.subscription
        self._topics.subscription = subscription
        if self._leaving.phase is LeavePhase.DONE:
            self._leaving.to(LeavePhase.NONE)  # subscribing again after unsubscribe()
        elif self._leaving.phase is not LeavePhase.NONE:
            # subscribe() during unsubscribe(): join again with the new subscription once the leave is done.
            self._leaving.clear_subscription = False
            self._leaving.rejoin_after = True
        if subscription.pattern is not None:
            self._events.append(MetadataNeeded(all_topics=True))
            topics = self._match_pattern() if self._topics.metadata is not None else frozenset()
        else:
            topics = subscription.topics
            self._events.append(MetadataNeeded(topics=topics))
        self._set_subscribed_topics(topics, "subscription changed")
        if changed or self._state is MemberState.UNJOINED:
            self._rejoin.awaiting_app_poll = True
        if self._latch.node_id is None:
            self._need_coordinator("group membership needs the coordinator")

    def unsubscribe(self, now_ms: int) -> None:
        self._start_leave(now_ms, "the consumer unsubscribed from all topics", clear_subscription=True)

    def leave(self, now_ms: int) -> None:
        self._start_leave(now_ms, "the consumer is being closed", clear_subscription=False)

    def on_app_poll(self, now_ms: int) -> None:
        self._poll_timer.polled(now_ms)
        self._rejoin.awaiting_app_poll = False

    def enforce_rebalance(self, reason: str, now_ms: int) -> None:
        """Request a rebalance; a no-op while one is already in progress (as ``enforceRebalance``)."""
        if self._state in _REBALANCING:
            return
        if self._topics.subscription.is_empty or self._leaving.phase is not LeavePhase.NONE:
            return
        self._request_rejoin(reason or "rebalance enforced by the application")

    def _coordinator_changed(self, now_ms: int) -> None:
        # (the same coordinator announced again changes nothing, not even the session timer)
        self._hb.session_deadline_ms = now_ms + self._cfg.session_timeout_ms

    def on_callback_completed(self, seq: int, error: BaseException | None, now_ms: int) -> None:
        if error is not None:
            self._stats.values["callback_errors"] += 1
        entry = self._ledger.complete(seq)
        if entry is None:
            return  # unknown, or superseded (a LOST took its partitions)
        if entry.revoking:
            self._events.append(AssignmentChanged(owned=self.owned))
            if (
                entry.followup
                and self._leaving.phase is LeavePhase.NONE
                and self._state is MemberState.STABLE
            ):
                self._request_rejoin("need to revoke partitions and re-join")
        if entry.completes_rebalance:
            self._rebalance.completed(now_ms)

    def on_metadata(self, metadata: ClusterMetadata, now_ms: int) -> None:
        self._topics.metadata = metadata
        self._topics.metadata_version += 1
        if self._topics.subscription.pattern is not None:
            matched = self._match_pattern()
            if matched != self._topics.subscribed:
                self._set_subscribed_topics(matched, "topics matching the subscribed pattern changed")
        self._handle_vanished_partitions()
        if (
            self._state is MemberState.STABLE
            and self._is_leader
            and not self._rejoin.needed
            and self._leaving.phase is LeavePhase.NONE
            and self._metadata_changed()
        ):
            # Only the leader, which assigned from these counts, rejoins (Java's assignmentSnapshot; KIP-429
            # 1.2); the other members' metadata may lag or lead, and their rejoin would add nothing.
            self._request_rejoin("cached metadata has changed (partition count of a subscribed topic)")
        if self._leader_job is not None:
            self._try_leader_assignment(now_ms)

    def on_commit_error(self, error_code: int, sent: ConsumerGroupMetadata, now_ms: int) -> None:
        """Apply an OffsetCommit group error (KIP-429 triggers): REBALANCE_IN_PROGRESS -> rejoin keeping the
        owned partitions; UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION -> reset generation, LOST(all), rejoin;
        FENCED_INSTANCE_ID -> fatal.  ``sent`` is the group metadata the commit carried."""
        code = int(error_code)
        if self._fatal is not None:
            return
        unchanged = (
            sent.generation_id == self._generation.generation_id
            and sent.member_id == self._generation.member_id
        )
        if code == _E.rebalance_in_progress:
            if self._state is MemberState.STABLE and self._leaving.phase is LeavePhase.NONE:
                self._request_rejoin("offset commit failed since group is already rebalancing")
                self._start_join_deadline()
        elif code in (_E.unknown_member_id, _E.illegal_generation):
            if unchanged:
                self._reset_generation(
                    reset_member_id=code == _E.unknown_member_id,
                    reason=f"encountered {_E(code).name.upper()} from OFFSET_COMMIT response",
                    now_ms=now_ms,
                )
        elif code == _E.fenced_instance_id and unchanged:
            self._fail_fatal(self._fenced_error(), now_ms)

    # ------------------------------------------------------------------------------------------------
    # the request manager

    def poll(self, now_ms: int) -> PollResult:
        if self._fatal is None and self._leaving.phase is not LeavePhase.DONE:
            self._check_poll_timer(now_ms)
            self._check_session_timeout(now_ms)
            self._check_join_deadline(now_ms)
            if self._leaving.phase is LeavePhase.PREPARING:
                self._drive_leave(now_ms)
            elif self._leaving.phase is LeavePhase.NONE:
                self._drive_join(now_ms)
            self._drive_heartbeat(now_ms)
        unsent, self._outbox = self._outbox, []
        return PollResult(unsent, self._wait_ms(now_ms))

    def _wait_ms(self, now_ms: int) -> int:
        if self._fatal is not None or self._leaving.phase is LeavePhase.DONE:
            return MAX_POLL_WAIT_MS
        candidates = [MAX_POLL_WAIT_MS]
        in_group = self._state in _IN_GROUP
        if in_group and self._latch.node_id is not None:
            if _HEARTBEAT not in self._in_flight:
                candidates.append(self._hb.next_ms - now_ms)
            candidates.append(self._hb.session_deadline_ms - now_ms)
        poll_remaining = self._poll_timer_wait_ms(now_ms)
        if poll_remaining is not None:
            candidates.append(poll_remaining)
        if self._rejoin.backoff.until_ms > now_ms:
            candidates.append(self._rejoin.backoff.until_ms - now_ms)
        if self._rejoin.deadline_ms is not None and self._waits_for_callbacks():
            candidates.append(self._rejoin.deadline_ms - now_ms)
        if self.revoking and in_group:
            candidates.append(self._hb.alive_evidence_ms + self._cfg.session_timeout_ms - now_ms)
        return max(0, min(candidates))

    # ------------------------------------------------------------------------------------------------
    # timers

    def _check_poll_timer(self, now_ms: int) -> None:
        if not self._poll_timer_expired(now_ms):
            return
        self._stats.values["poll_timeouts"] += 1
        self._maybe_send_leave_group("consumer poll timeout has expired.", now_ms, for_leave=False)
        self._reset_generation(
            reset_member_id=True, reason="consumer poll timeout has expired", now_ms=now_ms
        )
        self._rejoin.awaiting_app_poll = True

    def _poll_timer_applies(self) -> bool:
        in_group = self._state in _IN_GROUP
        return in_group and self._leaving.phase is LeavePhase.NONE

    def _check_session_timeout(self, now_ms: int) -> None:
        if self._state not in _IN_GROUP:
            return
        if self.revoking and now_ms >= self._hb.alive_evidence_ms + self._cfg.session_timeout_ms:
            # No request of ours reached the coordinator within the session timeout: it may have expired us,
            # and then another member may get what we are revoking.
            self._give_up_revocations("no heartbeat response within session.timeout.ms")
        if self._latch.node_id is None or now_ms < self._hb.session_deadline_ms:
            return
        self._mark_coordinator_unknown(
            "session timed out without receiving a heartbeat response", self._latch.epoch
        )

    def _check_join_deadline(self, now_ms: int) -> None:
        if self._rejoin.deadline_ms is None or now_ms < self._rejoin.deadline_ms:
            return
        if self._waits_for_callbacks() or self.revoking:
            self._give_up_revocations("revocation not completed within the rebalance timeout")

    def _join_deadline_start(self) -> int | None:
        """When the coordinator's rebalance timer started, as far as the member knows (the evidence the join
        deadline counts from), or ``None`` when no rebalance is known to be in progress there.  A REVOKE
        carries it as its ``received_ms``, so delay_revoke() projects from the same start as the deadline
        (the REBALANCE_IN_PROGRESS answer can arrive up to ``heartbeat.interval.ms`` later)."""
        if self._rejoin.deadline_ms is None:
            return None
        return self._rejoin.deadline_ms - (
            self._cfg.rebalance_timeout_ms - self._cfg.revoke_deadline_margin_ms
        )

    def _start_join_deadline(self) -> None:
        deadline = (
            self._hb.stable_evidence_ms + self._cfg.rebalance_timeout_ms - self._cfg.revoke_deadline_margin_ms
        )
        if self._rejoin.deadline_ms is None or deadline < self._rejoin.deadline_ms:
            self._rejoin.deadline_ms = deadline

    # ------------------------------------------------------------------------------------------------
    # joining

    def _drive_join(self, now_ms: int) -> None:
        if self._topics.subscription.is_empty or self._rejoin.awaiting_app_poll:
            return
        if self._state is MemberState.COMPLETING_REBALANCE or _JOIN in self._in_flight:
            return
        if not (
            self._rejoin.needed or self._state in (MemberState.UNJOINED, MemberState.PREPARING_REBALANCE)
        ):
            return
        if self._topics.subscription.pattern is not None and self._topics.metadata is None:
            return  # the topics the pattern matches are not known yet
        if self._latch.node_id is None:
            self._need_coordinator("joining the group needs the coordinator")
            return
        if now_ms < self._rejoin.backoff.until_ms:
            return
        if self._rejoin.prepare_needed:
            self._rejoin.prepare_needed = False
            self._join_prepare(now_ms)
        if self._waits_for_callbacks():
            if self._rejoin.deadline_ms is not None and now_ms >= self._rejoin.deadline_ms:
                self._give_up_revocations("revocation not completed within the rebalance timeout")
            else:
                return
        self._send_join(now_ms)

    def _join_prepare(self, now_ms: int) -> None:
        """Java's ``onJoinPrepare``: the callbacks that precede a JoinGroup."""
        if self._generation.is_reset:
            self._lose_all("the member's generation was reset: it is no longer part of the group", now_ms)
        elif self.protocol is RebalanceProtocol.EAGER:
            self._revoke(
                self._assigned,
                "eager rebalance: revoking all partitions before rejoining",
                received_ms=self._join_deadline_start(),
            )
        else:
            gone = frozenset(tp for tp in self._assigned if tp.topic not in self._topics.subscribed)
            self._revoke(
                gone, "partitions of topics no longer subscribed", received_ms=self._join_deadline_start()
            )
        self._is_leader = False

    def _join_protocols(self) -> list[dict[str, Any]]:
        topics = tuple(sorted(self._topics.subscribed))
        owned = tuple(sorted(self._assigned))
        out: list[dict[str, Any]] = []
        for assignor in self._assignors:
            sub = MemberSubscription(
                topics=topics,
                user_data=assignor.subscription_user_data(frozenset(topics)),
                owned_partitions=owned,
                generation_id=self._generation.generation_id,
                rack_id=self._cfg.rack_id,
            )
            out.append({"name": assignor.name, "metadata": encode_subscription(sub)})
        return out

    def _send_join(self, now_ms: int) -> None:
        try:
            protocols = self._join_protocols()
        except Exception as exc:  # a user assignor's subscription_user_data failed
            self._fail_visible(KafkaError(f"cannot build the JoinGroup subscription: {exc!r}"), now_ms)
            return
        reason = self._rejoin.reason
        self._set_state(MemberState.PREPARING_REBALANCE)
        self._rejoin.needed = False
        self._rejoin.reason = ""
        self._rejoin.deadline_ms = None
        self._topics.joined = self._topics.subscribed
        self._topics.snapshot = self._partition_counts(self._topics.subscribed)
        self._rebalance.begin(now_ms)
        values = {
            "group_id": self.group_id,
            "session_timeout": self._cfg.session_timeout_ms,
            "rebalance_timeout": self._cfg.rebalance_timeout_ms,
            "member_id": self._generation.member_id,
            "group_instance_id": self.group_instance_id,
            "protocol_type": PROTOCOL_TYPE,
            "protocols": protocols,
            "reason": reason[:_MAX_REASON] or None,
        }
        timeout_ms = max(
            self._cfg.request_timeout_ms, self._cfg.rebalance_timeout_ms + JOIN_GROUP_TIMEOUT_LAPSE_MS
        )
        self._send(_JOIN, values, now_ms, self._on_join_response, self._request_failed, timeout_ms=timeout_ms)

    def _send(
        self,
        api: _Api,
        values: dict[str, Any],
        now_ms: int,
        on_answer: Callable[[Generation, int, Any, int, int], None],
        on_error: Callable[[_Api, BaseException, int, int], None],
        *,
        timeout_ms: int | None = None,
        track: bool = True,
    ) -> None:
        """Queue a request to the coordinator.  It becomes the one of its kind in flight (``track``; an
        untracked one's answer is ignored): the answer goes to ``on_answer(generation sent in, sent_ms,
        response, now_ms, coordinator epoch)``, a failure to ``on_error(api, error, now_ms, coordinator
        epoch)``; an answer to an earlier request of the kind, or to one cancelled since (dropped from
        ``_in_flight``), is ignored."""
        token = object()
        if track:
            self._in_flight[api] = token
        generation = self._generation
        epoch = self._latch.epoch

        def current() -> bool:
            if self._in_flight.get(api) is not token:
                return False
            del self._in_flight[api]
            return True

        def on_response(resp: Any, version: int, t: int) -> None:
            if current():
                on_answer(generation, now_ms, resp, t, epoch)

        def on_failure(exc: BaseException, t: int) -> None:
            if current():
                on_error(api, exc, t, epoch)

        min_version = api.static_min_version if self.group_instance_id is not None else 0
        self._outbox.append(
            self._coordinator_request(
                api.key,
                values,
                now_ms,
                on_response,
                on_failure,
                min_version=min_version,
                timeout_ms=timeout_ms,
            )
        )

    def _cancel(self, *apis: _Api) -> None:
        """Answers to the requests of these kinds in flight will be ignored."""
        for api in apis:
            self._in_flight.pop(api, None)

    def _on_join_response(self, sent: Generation, sent_ms: int, resp: Any, now_ms: int, epoch: int) -> None:
        code = int(resp.error_code)
        if code == _E.none:
            self._stats.latency("join", max(0, now_ms - sent_ms))
            protocol_type = getattr(resp, "protocol_type", None)
            if protocol_type is not None and protocol_type != PROTOCOL_TYPE:
                self._fail_visible(
                    error_for_code(_E.inconsistent_group_protocol, f"protocol type {protocol_type!r}"), now_ms
                )
                return
            protocol_name = resp.protocol_name
            if protocol_name is None or self._assignor(protocol_name) is None:
                self._fail_visible(
                    IllegalStateError(f"Coordinator selected invalid assignment protocol: {protocol_name}"),
                    now_ms,
                )
                return
            self._generation = Generation(int(resp.generation_id), str(resp.member_id), str(protocol_name))
            self._set_state(MemberState.COMPLETING_REBALANCE)
            self._assign_task = None
            # Java's heartbeat.resetTimeouts(): session, heartbeat and poll timers restart.
            self._hb.session_deadline_ms = now_ms + self._cfg.session_timeout_ms
            self._hb.next_ms = now_ms + self._cfg.heartbeat_interval_ms
            self._hb.retry.reset()
            last_poll = self._poll_timer.last_poll_ms
            self._poll_timer.polled(now_ms if last_poll is None else max(last_poll, now_ms))
            # The coordinator processed our JoinGroup after we sent it: lower bounds for when it last saw
            # us and for when any later rebalance began.
            self._hb.stable_evidence_ms = max(self._hb.stable_evidence_ms, sent_ms)
            self._hb.alive_evidence_ms = max(self._hb.alive_evidence_ms, sent_ms)
            if resp.leader == resp.member_id:
                self._is_leader = True
                members = [
                    (str(m.member_id), getattr(m, "group_instance_id", None), bytes(m.metadata))
                    for m in resp.members
                ]
                self._leader_job = _LeaderJob(
                    members, str(protocol_name), bool(getattr(resp, "skip_assignment", False))
                )
                self._try_leader_assignment(now_ms)
            else:
                self._send_sync([], now_ms)
            return

        error = error_for_code(code, "JoinGroup", needs=Needs("JoinGroup", group=("READ", self.group_id)))
        if code == _E.coordinator_load_in_progress:
            self._join_retry(now_ms, backoff=True)
        elif code == _E.unknown_member_id:
            self._rebalance_member_error(code, sent, "JOIN_GROUP", now_ms)
        elif code in COORDINATOR_ERRORS:
            self._rebalance_coordinator_error(_JOIN, code, epoch, now_ms)
        elif code == _E.fenced_instance_id:
            self._fail_fatal(self._fenced_error(), now_ms)
        elif code == _E.member_id_required:
            self._generation = Generation(-1, str(resp.member_id), None)
            self._join_retry(
                now_ms, backoff=False, reason=f"need to re-join with the given member-id: {resp.member_id}"
            )
        elif code == _E.rebalance_in_progress:
            self._join_retry(now_ms, backoff=False)
        else:
            # INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, INVALID_GROUP_ID,
            # GROUP_AUTHORIZATION_FAILED, GROUP_MAX_SIZE_REACHED, UNSUPPORTED_VERSION and anything unexpected:
            # raised to the caller (Java throws them from poll); retried after the next application poll.
            self._fail_visible(error, now_ms)

    def _join_retry(self, now_ms: int, *, backoff: bool, reason: str = "") -> None:
        """A failed JoinGroup/SyncGroup attempt: the same rebalance is retried."""
        self._rebalance.failed(now_ms, ends=False)
        if self._state in _REBALANCING:
            self._set_state(MemberState.PREPARING_REBALANCE)
        self._leader_job = None
        self._request_rejoin(reason or "rebalance failed")
        if backoff:
            self._rejoin.backoff.failed(now_ms)

    def _rebalance_member_error(self, code: int, sent: Generation, origin: str, now_ms: int) -> None:
        """JoinGroup/SyncGroup answered UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION: the generation it was sent
        in (not a newer one) is reset, and the rebalance is retried at once."""
        if self._generation == sent:
            self._reset_generation(
                reset_member_id=code == _E.unknown_member_id,
                reason=f"encountered {_E(code).name.upper()} from {origin}",
                now_ms=now_ms,
            )
        self._join_retry(now_ms, backoff=False)

    def _rebalance_coordinator_error(self, api: _Api, code: int, epoch: int, now_ms: int) -> None:
        """JoinGroup/SyncGroup answered NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE: rediscover the
        coordinator, retry the rebalance after a backoff."""
        self._mark_coordinator_unknown(f"{api.name} failed with {_E(code).name.upper()}", epoch)
        self._join_retry(now_ms, backoff=True)

    def _request_failed(self, api: _Api, exc: BaseException, now_ms: int, epoch: int) -> None:
        """A JoinGroup or SyncGroup got no answer."""
        if isinstance(exc, UnsupportedVersionError):
            self._fail_visible(exc, now_ms)
            return
        self._mark_coordinator_unknown(f"{api.name} request failed: {exc}", epoch)
        self._join_retry(now_ms, backoff=True)

    # --- leader ---------------------------------------------------------------------------------------

    def _try_leader_assignment(self, now_ms: int) -> None:
        job = self._leader_job
        if job is None:
            return
        try:
            subscriptions = {
                member_id: decode_subscription(metadata, instance_id)
                for member_id, instance_id, metadata in job.members
            }
        except ConsumerProtocolError as exc:
            self._leader_job = None
            self._fail_visible(exc, now_ms)
            return
        topics = frozenset(t for sub in subscriptions.values() for t in sub.topics)
        if not job.skip_assignment:
            md = self._topics.metadata
            missing = [t for t in topics if md is None or t not in md.partitions]
            if missing:
                if job.metadata_wait_version is None:
                    job.metadata_wait_version = self._topics.metadata_version
                    self._events.append(MetadataNeeded(topics=topics))
                    return
                if self._topics.metadata_version == job.metadata_wait_version:
                    return  # wait for the metadata we asked for
        self._leader_job = None
        counts = self._partition_counts(topics)
        # Topics the metadata does not name are absent from the cluster for this assignment.
        group_snapshot: dict[str, int | None] = {t: counts.get(t) for t in topics}
        if job.skip_assignment:
            # No assignment is computed from our metadata (it may not have arrived yet): a topic it does not
            # name is not "absent", and recording it as such would make its arrival look like a change.
            group_snapshot = {t: n for t, n in group_snapshot.items() if t in counts}
        self._topics.snapshot.update(group_snapshot)
        if job.skip_assignment:
            # KIP-814: a static leader rejoining skips the assignment; the coordinator keeps the current one.
            self._send_sync([], now_ms)
            return
        assignor = self._assignor(job.protocol_name)
        if assignor is None:
            self._fail_visible(
                IllegalStateError(f"Coordinator selected invalid assignment protocol: {job.protocol_name}"),
                now_ms,
            )
            return
        partitions_per_topic = {t: n for t, n in counts.items() if n}
        if self._cfg.app_thread_assignors and not is_builtin(assignor):
            # A custom assignor is user code: the application thread runs it inside poll() (as Java's
            # classic consumer does); heartbeats go on meanwhile.  Built-in assignors run here at once.
            token = object()
            self._assign_task = token
            generation = self._generation

            def run() -> object:
                return assignor.assign(partitions_per_topic, subscriptions)

            def done(result: object, error: BaseException | None, at_ms: int) -> None:
                if (
                    token is not self._assign_task
                    or self._generation != generation
                    or self._state is not MemberState.COMPLETING_REBALANCE
                ):
                    return  # the rebalance moved on meanwhile
                self._assign_task = None
                self._finish_leader_assignment(
                    assignor, subscriptions, partitions_per_topic, result, error, at_ms
                )

            self._events.append(AppThreadTask(run, done, f"assignor {assignor.name!r} assign()"))
            return
        outcome: object = None
        failure: BaseException | None = None
        try:
            outcome = assignor.assign(partitions_per_topic, subscriptions)
        except Exception as exc:
            failure = exc
        self._finish_leader_assignment(
            assignor, subscriptions, partitions_per_topic, outcome, failure, now_ms
        )

    def _finish_leader_assignment(
        self,
        assignor: PartitionAssignor,
        subscriptions: dict[str, MemberSubscription],
        partitions_per_topic: dict[str, int],
        outcome: object,
        failure: BaseException | None,
        now_ms: int,
    ) -> None:
        """Check the assignor's output, hand unknown-but-owned partitions back, and send SyncGroup."""
        try:
            if failure is not None:
                raise failure
            if not isinstance(outcome, Mapping):
                raise TypeError(
                    f"assign() returned {type(outcome).__name__}, not a mapping of member assignments"
                )
            result: dict[str, MemberAssignment] = dict(outcome)
            if self.protocol is RebalanceProtocol.COOPERATIVE and not is_builtin_cooperative(assignor):
                validate_cooperative_assignment(
                    {m: s.owned_partitions for m, s in subscriptions.items()}, result
                )
            result = _hand_back_unknown_owned(result, subscriptions, partitions_per_topic)
            assignments = [
                {"member_id": member_id, "assignment": encode_assignment(result[member_id])}
                for member_id in sorted(result)
            ]
            for member_id in sorted(set(subscriptions) - set(result)):
                assignments.append(
                    {"member_id": member_id, "assignment": encode_assignment(MemberAssignment(()))}
                )
        except IllegalStateError as exc:
            self._fail_visible(exc, now_ms)
            return
        except Exception as exc:
            self._fail_visible(KafkaError(f"assignor {assignor.name!r} failed: {exc!r}"), now_ms)
            return
        self._send_sync(assignments, now_ms)

    def _assignor(self, name: str) -> PartitionAssignor | None:
        for assignor in self._assignors:
            if assignor.name == name:
                return assignor
        return None

    # --- sync -----------------------------------------------------------------------------------------

    def _send_sync(self, assignments: list[dict[str, Any]], now_ms: int) -> None:
        gen = self._generation
        values = {
            "group_id": self.group_id,
            "generation_id": gen.generation_id,
            "member_id": gen.member_id,
            "group_instance_id": self.group_instance_id,
            "protocol_type": PROTOCOL_TYPE,
            "protocol_name": gen.protocol_name,
            "assignments": assignments,
        }
        self._send(_SYNC, values, now_ms, self._on_sync_response, self._request_failed)

    def _on_sync_response(self, sent: Generation, sent_ms: int, resp: Any, now_ms: int, epoch: int) -> None:
        code = int(resp.error_code)
        if code == _E.none:
            self._stats.latency("sync", max(0, now_ms - sent_ms))
            protocol_type = getattr(resp, "protocol_type", None)
            protocol_name = getattr(resp, "protocol_name", None)
            if protocol_type is not None and protocol_type != PROTOCOL_TYPE:
                self._fail_visible(
                    error_for_code(_E.inconsistent_group_protocol, f"protocol type {protocol_type!r}"), now_ms
                )
                return
            if self._generation.is_reset or self._state is not MemberState.COMPLETING_REBALANCE:
                self._join_retry(now_ms, backoff=False)
                return
            if protocol_name is not None and protocol_name != self._generation.protocol_name:
                self._fail_visible(
                    error_for_code(_E.inconsistent_group_protocol, f"protocol name {protocol_name!r}"), now_ms
                )
                return
            self._set_state(MemberState.STABLE)
            self._rejoin.backoff.reset()
            self._hb.stable_evidence_ms = max(self._hb.stable_evidence_ms, sent_ms)
            self._hb.alive_evidence_ms = max(self._hb.alive_evidence_ms, sent_ms)
            self._on_join_complete(bytes(resp.assignment), now_ms, sent_ms)
            return

        if code == _E.rebalance_in_progress:
            self._join_retry(now_ms, backoff=False, reason="the group began another rebalance")
        elif code == _E.fenced_instance_id:
            self._fail_fatal(self._fenced_error(), now_ms)
        elif code in (_E.unknown_member_id, _E.illegal_generation):
            self._rebalance_member_error(code, sent, "SYNC_GROUP response", now_ms)
        elif code in COORDINATOR_ERRORS:
            self._rebalance_coordinator_error(_SYNC, code, epoch, now_ms)
        elif code == _E.coordinator_load_in_progress:
            # A coordinator that took over the group is still loading it (failover): rejoin after a backoff.
            # Java raises this from poll() as "unexpected"; it is retriable and the application need not know.
            self._join_retry(now_ms, backoff=True)
        else:
            # GROUP_AUTHORIZATION_FAILED and anything unexpected: raised to the caller.
            needs = Needs("SyncGroup", group=("READ", self.group_id))
            self._fail_visible(error_for_code(code, "SyncGroup", needs=needs), now_ms)

    def _on_join_complete(self, data: bytes, now_ms: int, sync_sent_ms: int | None = None) -> None:
        """Java's ``onJoinComplete`` (KIP-429 step 3)."""
        self._rejoin.prepare_needed = True
        assignor = self._assignor(self._generation.protocol_name or "")
        if assignor is None:  # checked at JoinGroup already
            self._fail_visible(IllegalStateError("no assignor for the group's protocol"), now_ms)
            return
        try:
            assignment = decode_assignment(data)
        except ConsumerProtocolError as exc:
            self._fail_visible(exc, now_ms)
            return
        assigned = frozenset(assignment.partitions)
        if not all(self._topics.subscription.matches(tp.topic) for tp in assigned):
            self._request_rejoin("assigned partitions do not match the current subscription")
            return
        owned_before = self.owned
        added = assigned - owned_before
        revoked = self._assigned - assigned
        if revoked:
            # The revocation's clock starts when the coordinator completed the rebalance, i.e. after it
            # received our SyncGroup (the same evidence the join deadline counts from).
            self._revoke(
                revoked,
                "partitions assigned to another member: revoke, then rejoin",
                followup=self.protocol is RebalanceProtocol.COOPERATIVE,
                received_ms=sync_sent_ms,
            )
        self._assigned = assigned
        self._events.append(AssignmentChanged(owned=self.owned, awaiting_callback=added))
        # The assignor's on_assignment is user code: it runs on the application thread, after the revoke
        # callback above (even a delayed one) and right before the assigned callback (KIP-429 order).
        generation_id = self._generation.generation_id

        def on_assignment() -> None:
            try:
                assignor.on_assignment(assignment, generation_id)
            except Exception as exc:
                raise KafkaError(f"assignor {assignor.name!r} on_assignment failed: {exc!r}") from exc

        for seq, entry in self._ledger.items():  # an earlier ASSIGN no longer completes a rebalance
            entry.completes_rebalance = False
            if not entry.blocks_join and not entry.revoking:
                self._ledger.drop(seq)
        outstanding = _Outstanding(completes_rebalance=True)
        self._ledger.ask(CallbackKind.ASSIGN, added, "rebalance completed", outstanding, on_assignment)
        if self._topics.subscribed != self._topics.joined:
            self._request_rejoin("subscription changed during the rebalance")
        elif self._is_leader and self._metadata_changed():
            self._request_rejoin("cached metadata has changed during the rebalance")

    # ------------------------------------------------------------------------------------------------
    # heartbeats

    def _drive_heartbeat(self, now_ms: int) -> None:
        if self._state not in _IN_GROUP:
            return
        if self._latch.node_id is None or _HEARTBEAT in self._in_flight or now_ms < self._hb.next_ms:
            return
        if self._leaving.phase not in (LeavePhase.NONE, LeavePhase.PREPARING):
            return
        gen = self._generation
        self._hb.next_ms = now_ms + self._cfg.heartbeat_interval_ms
        self._stats.values["last_heartbeat_send_ms"] = now_ms
        values = {
            "group_id": self.group_id,
            "generation_id": gen.generation_id,
            "member_id": gen.member_id,
            "group_instance_id": self.group_instance_id,
        }
        self._send(_HEARTBEAT, values, now_ms, self._on_heartbeat_response, self._on_heartbeat_failure)

    def _on_heartbeat_failure(self, api: _Api, exc: BaseException, now_ms: int, epoch: int) -> None:
        if not isinstance(exc, UnsupportedVersionError):
            self._mark_coordinator_unknown(f"{api.name} request failed: {exc}", epoch)
        self._heartbeat_failed(now_ms)

    def _heartbeat_failed(self, now_ms: int) -> None:
        self._hb.next_ms = self._hb.retry.failed(now_ms)

    def _heartbeat_received(self, now_ms: int) -> None:
        self._hb.retry.reset()
        self._hb.session_deadline_ms = now_ms + self._cfg.session_timeout_ms

    def _on_heartbeat_response(
        self, sent: Generation, sent_ms: int, resp: Any, now_ms: int, epoch: int
    ) -> None:
        values = self._stats.values
        values["heartbeat_total"] += 1
        values["heartbeat_response_time_ms_max"] = max(
            values["heartbeat_response_time_ms_max"], now_ms - sent_ms
        )
        code = int(resp.error_code)
        if code in (_E.none, _E.rebalance_in_progress) and sent == self._generation:
            self._hb.alive_evidence_ms = max(self._hb.alive_evidence_ms, sent_ms)
        if code == _E.none:
            self._heartbeat_received(now_ms)
            if sent == self._generation:
                # the group was stable when the coordinator processed this heartbeat
                self._hb.stable_evidence_ms = max(self._hb.stable_evidence_ms, sent_ms)
        elif code in COORDINATOR_ERRORS:
            self._mark_coordinator_unknown(f"Heartbeat failed with {_E(code).name.upper()}", epoch)
            self._heartbeat_failed(now_ms)
        elif code == _E.rebalance_in_progress:
            # Heartbeating on during a rebalance keeps the member in the group for the rebalance timeout.
            self._heartbeat_received(now_ms)
            if self._state is MemberState.STABLE and sent == self._generation:
                self._request_rejoin("group is already rebalancing")
                self._start_join_deadline()
        elif code in (_E.illegal_generation, _E.unknown_member_id, _E.fenced_instance_id):
            if sent != self._generation:
                self._heartbeat_received(now_ms)  # stale generation: ignored, as in Java
            elif code == _E.fenced_instance_id and self.group_instance_id is not None:
                self._fail_fatal(self._fenced_error(), now_ms)
            else:
                self._reset_generation(
                    reset_member_id=code != _E.illegal_generation,
                    reason=f"encountered {_E(code).name.upper()} from HEARTBEAT response",
                    now_ms=now_ms,
                )
        elif code == _E.group_authorization_failed:
            needs = Needs("Heartbeat", group=("READ", self.group_id))
            self._events.append(MembershipError(error_for_code(code, needs=needs)))
            self._heartbeat_failed(now_ms)
        else:
            self._heartbeat_failed(now_ms)

    # ------------------------------------------------------------------------------------------------
    # leaving

    def _start_leave(self, now_ms: int, reason: str, *, clear_subscription: bool) -> None:
        if self._leaving.phase in (LeavePhase.PREPARING, LeavePhase.SENDING):
            self._leaving.clear_subscription |= clear_subscription
            return
        if self._leaving.phase is LeavePhase.DONE:
            if clear_subscription:
                self._clear_subscription()
            return
        self._leaving.to(LeavePhase.PREPARING)
        self._leaving.reason = reason
        self._leaving.clear_subscription = clear_subscription
        self._leaving.rejoin_after = False
        # Java's onLeavePrepare: LOST if no generation or mid-rebalance (commits cannot succeed), else REVOKE.
        if self._fatal is not None:
            pass
        elif self._generation.is_reset or self._state in _REBALANCING:
            self._lose_all("leaving the group without a stable generation", now_ms)
        else:
            self._revoke(self._assigned, "leaving the group")
        self._cancel(_JOIN, _SYNC)
        self._leader_job = None
        self._drive_leave(now_ms)

    def _drive_leave(self, now_ms: int) -> None:
        if self._waits_for_callbacks() and self._fatal is None:
            return
        sent = False
        if self._fatal is None:
            sent = self._maybe_send_leave_group(self._leaving.reason, now_ms, for_leave=True)
        self._generation = NO_GENERATION
        self._set_state(MemberState.UNJOINED)
        self._rejoin.prepare_needed = True
        self._rejoin.needed = True
        self._rejoin.deadline_ms = None
        if sent:
            self._leaving.to(LeavePhase.SENDING)
        else:
            self._finish_leave()

    def _finish_leave(self) -> None:
        self._cancel(_LEAVE_GROUP)
        if self._leaving.rejoin_after:
            self._leaving.rejoin_after = False
            self._leaving.to(LeavePhase.NONE)
            self._rejoin.awaiting_app_poll = True
            return
        if self._leaving.clear_subscription:
            self._clear_subscription()
        self._leaving.to(LeavePhase.DONE)

    def _clear_subscription(self) -> None:
        self._topics.subscription = Subscription()
        self._topics.subscribed = frozenset()
        self._topics.joined = frozenset()

    def _maybe_send_leave_group(self, reason: str, now_ms: int, *, for_leave: bool) -> bool:
        """Send LeaveGroup if this is a dynamic member of a generation (Java's ``maybeLeaveGroup``)."""
        if self.group_instance_id is not None or self._latch.node_id is None:
            return False
        if self._state is MemberState.UNJOINED or not self._generation.member_id:
            return False
        member_id = self._generation.member_id
        values = {
            "group_id": self.group_id,
            "member_id": member_id,
            "members": [{"member_id": member_id, "group_instance_id": None, "reason": reason[:_MAX_REASON]}],
        }
        # Only the leave on close/unsubscribe is waited for (best effort: an error completes it as well).
        self._send(
            _LEAVE_GROUP, values, now_ms, self._on_leave_answered, self._on_leave_failed, track=for_leave
        )
        return True

    def _on_leave_answered(self, sent: Generation, sent_ms: int, resp: Any, now_ms: int, epoch: int) -> None:
        if self._leaving.phase is LeavePhase.SENDING:
            self._finish_leave()

    def _on_leave_failed(self, api: _Api, exc: BaseException, now_ms: int, epoch: int) -> None:
        if self._leaving.phase is LeavePhase.SENDING:
            self._finish_leave()

    # ------------------------------------------------------------------------------------------------
    # callbacks and ownership

    def _revoke(
        self,
        partitions: Iterable[TopicPartition],
        reason: str,
        *,
        followup: bool = False,
        received_ms: int | None = None,
    ) -> None:
        parts = frozenset(partitions) & self._assigned
        if not parts:
            return
        self._assigned = self._assigned - parts
        self._ledger.ask(
            CallbackKind.REVOKE,
            parts,
            reason,
            _Outstanding(revoking=parts, followup=followup),
            received_ms=received_ms,
        )

    def _lose(self, partitions: Iterable[TopicPartition], reason: str) -> None:
        """LOST for some owned partitions (no wait: nobody can be handed them through us)."""
        parts = frozenset(partitions) & self.owned
        if not parts:
            return
        self._assigned = self._assigned - parts
        for seq, entry in self._ledger.items():
            if entry.revoking:
                entry.revoking -= parts
                if not entry.revoking:
                    self._ledger.drop(seq)
        self._events.append(AssignmentChanged(owned=self.owned))
        self._ledger.ask(CallbackKind.LOST, parts, reason)

    def _lose_all(self, reason: str, now_ms: int) -> None:
        """LOST(all owned), superseding every outstanding callback; the next JoinGroup waits for it."""
        parts = self.owned
        if not parts:
            return
        if any(entry.completes_rebalance for entry in self._ledger.entries()):
            # The rebalance's ASSIGN is superseded: that rebalance did not complete for this member.
            self._rebalance.failed_if_open(now_ms, ends=True)
        self._ledger.clear()
        self._assigned = frozenset()
        self._events.append(AssignmentChanged(owned=frozenset()))
        self._ledger.ask(CallbackKind.LOST, parts, reason, _Outstanding())

    def _stop_waiting(self) -> None:
        """Nothing waits for an outstanding callback any more; pending REVOKEs are forgotten (their
        partitions are no longer owned).  Only the rebalance's ASSIGN is still tracked (metrics)."""
        for seq, entry in self._ledger.items():
            if entry.completes_rebalance:
                entry.blocks_join = False
            else:
                self._ledger.drop(seq)

    def _give_up_revocations(self, reason: str) -> None:
        """The member missed a deadline (it may be out of the group): every partition it owns is LOST --
        the lost callback gets all of them, as Java's does, not only those still being revoked -- and the
        JoinGroup stops waiting for any callback and claims nothing."""
        if not self.revoking:
            self._stop_waiting()
            return
        parts = self.owned
        self._stop_waiting()
        self._assigned = frozenset()
        self._events.append(AssignmentChanged(owned=self.owned))
        self._ledger.ask(CallbackKind.LOST, parts, reason)

    def _request_rejoin(self, reason: str) -> None:
        self._rejoin.needed = True
        if not self._rejoin.reason:
            self._rejoin.reason = reason

    def _reset_generation(self, *, reset_member_id: bool, reason: str, now_ms: int) -> None:
        """Java's ``resetStateAndRejoin``; the owned partitions are LOST at once (see module docstring)."""
        member_id = "" if reset_member_id else self._generation.member_id
        self._generation = Generation(-1, member_id, None)
        self._set_state(MemberState.UNJOINED)
        self._cancel(_JOIN, _SYNC)
        self._leader_job = None
        self._is_leader = False
        self._rejoin.deadline_ms = None
        self._rejoin.prepare_needed = True
        self._rejoin.needed = True
        self._rejoin.reason = reason
        self._lose_all(reason, now_ms)

    def _fail_visible(self, error: BaseException, now_ms: int) -> None:
        """A failed rebalance attempt the caller must see; retried after the next application poll."""
        self._events.append(MembershipError(error, fatal=False))
        self._join_retry(now_ms, backoff=True)
        self._rejoin.awaiting_app_poll = True

    def _fail_fatal(self, error: BaseException, now_ms: int) -> None:
        self._rebalance.failed_if_open(now_ms, ends=True)
        self._generation = NO_GENERATION
        self._set_state(MemberState.UNJOINED)
        self._cancel(_JOIN, _SYNC, _HEARTBEAT)
        self._leader_job = None
        self._lose_all("the member was fenced", now_ms)
        self._stop_waiting()
        self._fatal = error
        self._events.append(MembershipError(error, fatal=True))

    def _fenced_error(self) -> FencedError:
        error = FencedError(
            f"group.instance.id {self.group_instance_id!r} of group {self.group_id!r} was fenced by another "
            f"instance with the same id (FENCED_INSTANCE_ID); close this consumer"
        )
        error.__cause__ = error_for_code(_E.fenced_instance_id)
        return error

    # ------------------------------------------------------------------------------------------------
    # metadata and subscription

    def _match_pattern(self) -> frozenset[str]:
        md = self._topics.metadata
        pattern = self._topics.subscription.pattern
        if md is None or pattern is None:
            return frozenset()
        return frozenset(
            t
            for t in md.topics()
            if pattern.fullmatch(t) is not None
            and not (self._cfg.exclude_internal_topics and t in md.internal_topics)
            and md.topic_errors.get(t, _E.none) != _E.unknown_topic_or_partition
        )

    def _set_subscribed_topics(self, topics: frozenset[str], reason: str) -> None:
        if topics == self._topics.subscribed:
            return
        self._topics.subscribed = topics
        if self._leaving.phase is not LeavePhase.NONE or (
            self._state is MemberState.UNJOINED and self._generation.is_reset
        ):
            return
        self._request_rejoin(reason)
        if _JOIN not in self._in_flight and _SYNC not in self._in_flight and self._leader_job is None:
            self._rejoin.prepare_needed = True

    def _partition_counts(self, topics: Iterable[str]) -> dict[str, int | None]:
        """Known partition counts: ``None`` for topics the metadata reports as unknown; topics the
        metadata does not mention are left out."""
        md = self._topics.metadata
        out: dict[str, int | None] = {}
        if md is None:
            return out
        for topic in topics:
            if md.topic_errors.get(topic, _E.none) == _E.unknown_topic_or_partition:
                out[topic] = None
            else:
                parts = md.partitions.get(topic)
                if parts:
                    out[topic] = len(parts)
        return out

    def _metadata_changed(self) -> bool:
        if not self._topics.snapshot:
            return False
        current = self._partition_counts(self._topics.snapshot)
        return any(
            topic in current and current[topic] != count for topic, count in self._topics.snapshot.items()
        )

    def _handle_vanished_partitions(self) -> None:
        md = self._topics.metadata
        if md is None:
            return
        gone: set[TopicPartition] = set()
        # Under a pattern the metadata lists every topic: one that is no longer in it was deleted (the
        # pattern stopped matching it because it is gone), so its partitions are LOST, not revoked (as Java).
        pattern = self._topics.subscription.pattern is not None
        for tp in self.owned:
            parts = md.partitions.get(tp.topic)
            if tp.topic not in self._topics.subscribed and not (pattern and parts is None):
                continue
            if md.topic_errors.get(tp.topic, _E.none) == _E.unknown_topic_or_partition:
                gone.add(tp)
                continue
            deleted = parts is None and pattern
            if deleted or (parts and tp.partition not in {p.partition for p in parts}):
                gone.add(tp)
        if gone:
            # KIP-429 1.2: LOST for owned partitions that no longer exist; only the leader rejoins (the
            # changed partition counts are a trigger of its own, see on_metadata).
            self._lose(gone, "partitions no longer exist (topic deleted)")
            if (
                self._is_leader
                and self._state is not MemberState.UNJOINED
                and self._leaving.phase is LeavePhase.NONE
            ):
                self._request_rejoin("owned partitions no longer exist")


def _hand_back_unknown_owned(
    result: dict[str, MemberAssignment],
    subscriptions: dict[str, MemberSubscription],
    partitions_per_topic: dict[str, int],
) -> dict[str, MemberAssignment]:
    """KIP-429 2.c.iii / 2.f: partitions members claim as owned, of topics this leader's metadata does not
    show (stale metadata, or a topic created or deleted meanwhile), and that nobody was assigned, go back to
    the member that claims them -- taking them away would revoke them for no reason; if the topic really is
    gone, the owner learns that from its own metadata.  Only for topics the owner still subscribes to."""
    assigned = {tp for a in result.values() for tp in a.partitions}
    out = dict(result)
    for member_id in sorted(subscriptions):
        sub = subscriptions[member_id]
        back = [
            tp
            for tp in sub.owned_partitions
            if tp.topic not in partitions_per_topic and tp.topic in sub.topics and tp not in assigned
        ]
        if not back:
            continue
        assigned.update(back)
        current = out.get(member_id, MemberAssignment(()))
        out[member_id] = MemberAssignment((*current.partitions, *back), current.user_data)
    return out
