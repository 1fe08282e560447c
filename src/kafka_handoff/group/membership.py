"""The one membership interface with two implementations (classic, KIP-848 consumer), sans-I/O.

A membership runs on the network thread.  It is a :class:`~kafka_handoff.protocol.requests.RequestManager`
(the network thread calls ``poll(now_ms)`` and sends what it returns) and it receives *inputs* as method
calls carrying ``now_ms``.  It never calls the user's code: whenever a rebalance callback has to run, it
emits a :class:`CallbackNeeded` event and waits until the application thread reports
:meth:`Membership.on_callback_completed` for that event's ``seq``.  That waiting is what lets the
application thread *delay* a revocation (KIP-983): the membership does not acknowledge a revocation
(KIP-848) or rejoin (classic cooperative) until the revoke callback has completed.

Outputs besides requests are drained with :meth:`Membership.drain_events`:

* :class:`CallbackNeeded` -- run a rebalance callback on the application thread.  For ``REVOKE`` the
  partitions are still owned (and must no longer be fetched); for ``LOST`` they are already gone from
  the owned set; for ``ASSIGN`` they are owned but must not be fetched before the callback completed.
* :class:`AssignmentChanged` -- the owned set changed (the consumer mirrors it into its
  subscription state).
* :class:`MetadataNeeded` -- the membership needs fresher metadata (topic ids to resolve, a regex to
  match, partition counts for the classic leader).
* :class:`MembershipError` -- a fatal or caller-visible error (the next API call raises it).
* :class:`AppThreadTask` -- user code the membership needs run on the application thread (a custom
  assignor's ``assign`` on the classic leader), inside ``poll()``; its ``done`` goes back to the network
  thread with the result.
* :class:`CoordinatorNeeded` -- the membership considers the coordinator unknown (never found, or
  NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / a disconnect): (re)discover it and report the result
  with :meth:`Membership.on_coordinator`.

The rest of the consumer never knows which implementation runs.  Both implementations derive from
:class:`~kafka_handoff.group.membership_core.MembershipCore`, which holds the machinery they share (state
transition table, event queue and callback ledger, coordinator latch, poll timer, rebalance
metrics, backoff).
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from kafka_handoff.protocol.requests import PollResult
from kafka_handoff.types import ClusterMetadata, ConsumerGroupMetadata, TopicPartition

__all__ = [
    "AppCallPause",
    "AppThreadTask",
    "AssignmentChanged",
    "CallbackKind",
    "CallbackNeeded",
    "CoordinatorNeeded",
    "GroupEvent",
    "Membership",
    "MembershipError",
    "MetadataNeeded",
    "RebalanceMetricsSink",
    "Subscription",
]


class CallbackKind(enum.Enum):
    REVOKE = "revoke"
    ASSIGN = "assign"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class Subscription:
    """What the application subscribed to: a set of topic names, or a compiled pattern."""

    topics: frozenset[str] = frozenset()
    pattern: re.Pattern[str] | None = None

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return self.pattern.fullmatch(topic) is not None
        return topic in self.topics

    @property
    def is_empty(self) -> bool:
        return self.pattern is None and not self.topics


@dataclass(frozen=True, slots=True)
class CallbackNeeded:
    kind: CallbackKind
    partitions: frozenset[TopicPartition]
    seq: int
    """Echoed back in ``on_callback_completed`` so stale completions can be told apart."""
    reason: str = ""
    on_assignment: Callable[[], None] | None = field(default=None, compare=False)
    """ASSIGN only (classic): the assignor's ``on_assignment``, run on the application thread right before
    the assigned callback -- after any earlier revoke callback completed (KIP-429: revoked < onAssignment <
    assigned).  An exception from it is raised from ``poll()`` like a callback error."""
    received_ms: int | None = field(default=None, compare=False)
    """When the group's target that asks for this revocation arrived (the membership stamps it: under
    KIP-848 the heartbeat response whose target first differed from the current assignment, before any wait
    for metadata or an earlier callback), else when the network thread took the event from the membership
    (its clock).  The revocation's timer (the broker's under KIP-848, the group's under classic) started
    about then, so the consumer's deadline for ``delay_revoke`` is measured from here, not from when the
    application thread got to it."""


@dataclass(frozen=True, slots=True)
class AssignmentChanged:
    owned: frozenset[TopicPartition]
    awaiting_callback: frozenset[TopicPartition] = frozenset()
    """Newly added partitions that must not be fetched until their ASSIGN callback completed."""


@dataclass(frozen=True, slots=True)
class MetadataNeeded:
    topics: frozenset[str] = frozenset()
    all_topics: bool = False
    topic_ids: frozenset[uuid.UUID] = frozenset()
    """Topic ids (KIP-848 target assignment) that the membership could not resolve to names yet."""


@dataclass(frozen=True, slots=True)
class MembershipError:
    error: BaseException
    fatal: bool = False


@dataclass(frozen=True, slots=True)
class CoordinatorNeeded:
    """The coordinator is unknown to the membership: find it and call ``on_coordinator``.

    ``epoch`` names the coordinator the membership found wanting (the discovery epoch it was told with
    ``on_coordinator``): only that one is marked unknown, so an event drained after a newer coordinator
    was found cannot invalidate it.  ``None``: the membership knows no coordinator and just needs one.
    """

    reason: str = ""
    epoch: int | None = None


@dataclass(frozen=True, slots=True)
class AppThreadTask:
    """User code to run on the application thread inside ``poll()`` (as Java runs a classic leader's
    assignor inside ``poll()``): ``run()`` there, then ``done(result, error, now_ms)`` on the network
    thread.  A stale ``done`` (the rebalance moved on meanwhile) is ignored by the membership."""

    run: Callable[[], object]
    done: Callable[[object, BaseException | None, int], None]
    what: str = ""


GroupEvent = (
    CallbackNeeded | AssignmentChanged | MetadataNeeded | MembershipError | CoordinatorNeeded | AppThreadTask
)


class RebalanceMetricsSink(Protocol):
    """Where memberships report rebalance timing (``consumer-coordinator-metrics``)."""

    def rebalance_started(self, now_ms: int) -> None: ...

    def rebalance_completed(self, now_ms: int) -> None: ...

    def rebalance_failed(self, now_ms: int) -> None: ...


class Membership(Protocol):
    """What the network thread and the consumer need from a group membership."""

    # --- RequestManager -------------------------------------------------------------------------
    def poll(self, now_ms: int) -> PollResult: ...

    # --- inputs from the application thread (delivered as events through the network thread) ----
    def subscribe(self, subscription: Subscription, now_ms: int) -> None:
        """Set (or change) the subscription; joining starts on the next ``on_app_poll``."""

    def unsubscribe(self, now_ms: int) -> None:
        """Revoke everything (callback), then leave the group."""

    def on_app_poll(self, now_ms: int) -> None:
        """The application called ``poll()``: reset the poll timer, join or rejoin if needed."""

    def on_app_call(self, inside: bool, now_ms: int) -> None:
        """The application thread entered (``inside``) or left one of the consumer's own blocking calls
        (``commit_sync``, ``committed``, offset and metadata lookups): the poll timer
        (``max.poll.interval.ms``) does not run meanwhile."""

    def on_callback_completed(self, seq: int, error: BaseException | None, now_ms: int) -> None: ...

    def on_metadata(self, metadata: ClusterMetadata, now_ms: int) -> None: ...

    def on_coordinator(self, node_id: int | None, now_ms: int, epoch: int | None = None) -> None:
        """The coordinator was found (``node_id``, discovery ``epoch``) or lost (``None``)."""

    def leave(self, now_ms: int) -> None:
        """Leave the group on close (revoke callback first when still a member)."""

    def enforce_rebalance(self, reason: str, now_ms: int) -> None: ...

    # --- outputs --------------------------------------------------------------------------------
    def drain_events(self) -> list[GroupEvent]: ...

    # --- queries --------------------------------------------------------------------------------
    @property
    def owned(self) -> frozenset[TopicPartition]: ...

    @property
    def state_name(self) -> str: ...

    @property
    def left(self) -> bool:
        """True once a leave has completed (or was not needed): close may proceed."""

    def group_metadata(self) -> ConsumerGroupMetadata:
        """Member id, generation (classic) or member epoch (consumer) and instance id, for commits."""

    def generation_if_stable(self) -> ConsumerGroupMetadata | None:
        """The group metadata for commits, or ``None`` while commits must wait for a rebalance to complete
        (classic: Java's ``generationIfStable``; the KIP-848 member always answers ``group_metadata()``)."""

    def on_commit_error(self, error_code: int, sent: ConsumerGroupMetadata, now_ms: int) -> None:
        """An OffsetCommit failed with a group error; ``sent`` is the group metadata it carried (classic
        reacts: rejoin, generation reset or fatal; the KIP-848 member learns of fencing by heartbeat)."""

    def owns(self, partitions: Iterable[TopicPartition]) -> bool: ...


class AppCallPause:
    """The poll timer stands still while the application thread is inside one of the client's own blocking
    calls (``commit_sync``, ``committed``, ``position``, lookups): those are not the application failing to
    poll.  Calls may nest; the pause spans from the first call's start to the last one's end."""

    __slots__ = ("_depth", "since_ms")

    def __init__(self) -> None:
        self._depth = 0
        self.since_ms: int | None = None

    @property
    def active(self) -> bool:
        return self.since_ms is not None

    def update(self, inside: bool, now_ms: int) -> int:
        """Record a call's start (``inside``) or end; returns how long the timer stood still when the
        outermost call ended, else 0."""
        if inside:
            self._depth += 1
            if self.since_ms is None:
                self.since_ms = now_ms
            return 0
        self._depth = max(0, self._depth - 1)
        since = self.since_ms
        if self._depth == 0 and since is not None:
            self.since_ms = None
            return max(0, now_ms - since)
        return 0
