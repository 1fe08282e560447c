"""The machinery the group memberships share (as Java's ``AbstractMembershipManager``), sans-I/O.

:class:`MembershipCore` is the base of :class:`~kafka_handoff.group.classic_membership.ClassicMembership`
and :class:`~kafka_handoff.group.consumer_membership.ConsumerMembership`.  It owns what does not depend on
the group protocol, each piece a small class of this module:

* the member state and its **transition table**: each implementation has a state enum and a table of the
  allowed predecessors of every state; :meth:`MembershipCore._set_state` refuses any other transition with
  :class:`~kafka_handoff.errors.IllegalStateError` (a bug, never an input);
* the event queue (``drain_events``) and the :class:`CallbackLedger`: every ``CallbackNeeded`` gets the
  next sequence number, which the application thread echoes in ``on_callback_completed``; the ledger keeps
  what the membership waits for under that number (an entry of the implementation's own type);
* the :class:`CoordinatorLatch`: the coordinator the membership uses, the discovery epoch it was told, and
  the "already asked" flag, so ``CoordinatorNeeded`` is emitted once per loss and a failure reported
  against an older coordinator cannot invalidate a newer one;
* the :class:`PollTimer` (``max.poll.interval.ms``), which stands still while the application thread is
  inside one of the client's own blocking calls;
* the :class:`RebalanceTracker` (``consumer-coordinator-metrics`` bookkeeping) and the
  :class:`RetryBackoff` of each request stream;
* building a request for the coordinator.

What differs (the requests, their answers, reconciliation, leaving) stays in the implementations.  The
share group membership (KIP-932) has no callbacks and no transition table; it uses the poll timer and the
retry backoff directly.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from kio.schema.errors import ErrorCode

from kafka_handoff.errors import IllegalStateError
from kafka_handoff.group.membership import (
    AppCallPause,
    CallbackKind,
    CallbackNeeded,
    CoordinatorNeeded,
    GroupEvent,
    RebalanceMetricsSink,
)
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.requests import COORDINATOR, UnsentRequest
from kafka_handoff.types import TopicPartition

__all__ = [
    "COORDINATOR_ERRORS",
    "HEARTBEAT_FENCING_ERRORS",
    "CallbackLedger",
    "CoordinatorLatch",
    "MembershipCore",
    "PollTimer",
    "RebalanceTracker",
    "RetryBackoff",
    "checked_transition",
]

log = logging.getLogger(__name__)

COORDINATOR_ERRORS = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
"""Errors that mean the coordinator moved or is not there: rediscover it (every group request)."""
HEARTBEAT_FENCING_ERRORS = frozenset({ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id})
"""KIP-848/KIP-932 heartbeat errors that fence the member: it rejoins with epoch 0."""

StateT = TypeVar("StateT", bound=enum.Enum)
EntryT = TypeVar("EntryT")


def checked_transition(table: Mapping[StateT, frozenset[StateT]], old: StateT, new: StateT) -> StateT:
    """``new`` if ``table`` (the allowed predecessors of each state) allows ``old -> new``; any other
    transition is a bug: :class:`~kafka_handoff.errors.IllegalStateError`."""
    if old not in table[new]:
        raise IllegalStateError(f"invalid member state transition {old.value} -> {new.value}")
    return new


class PollTimer:
    """``max.poll.interval.ms``: expires when the application has not polled for that long.

    ``last_poll_ms`` is ``None`` until the timer is started (the KIP-848 member starts it when it first
    joins).  Time spent inside the client's own blocking calls (:meth:`app_call`) does not count.
    """

    __slots__ = ("_pause", "last_poll_ms", "timeout_ms")

    def __init__(self, timeout_ms: int, last_poll_ms: int | None = None) -> None:
        self.timeout_ms = timeout_ms
        self.last_poll_ms = last_poll_ms
        self._pause = AppCallPause()

    @property
    def paused(self) -> bool:
        """The application thread is inside one of the client's blocking calls."""
        return self._pause.active

    def polled(self, now_ms: int) -> None:
        self.last_poll_ms = now_ms

    def app_call(self, inside: bool, now_ms: int) -> None:
        """The application thread entered (``inside``) or left a blocking call of the client."""
        paused = self._pause.update(inside, now_ms)
        if paused and self.last_poll_ms is not None:
            self.last_poll_ms += paused  # the timer stood still meanwhile

    def remaining_ms(self, now_ms: int) -> int | None:
        """Milliseconds until expiry (negative once expired); ``None`` when not started."""
        if self.last_poll_ms is None:
            return None
        return self.last_poll_ms + self.timeout_ms - now_ms

    def expired(self, now_ms: int) -> bool:
        remaining = self.remaining_ms(now_ms)
        return remaining is not None and remaining <= 0


class RetryBackoff:
    """The consecutive failures of one request stream and when its next attempt may go: ``retry.backoff.ms``
    doubled per failure up to ``retry.backoff.max.ms`` (the :class:`ExponentialBackoff` given, with its
    jitter); a success resets it."""

    __slots__ = ("backoff", "failures", "until_ms")

    def __init__(self, backoff: ExponentialBackoff) -> None:
        self.backoff = backoff
        self.failures = 0
        self.until_ms = 0

    def failed(self, now_ms: int) -> int:
        """One more failure: returns (and keeps) when the next attempt may go."""
        self.until_ms = now_ms + self.backoff.backoff_ms(self.failures)
        self.failures += 1
        return self.until_ms

    def reset(self) -> None:
        self.failures = 0
        self.until_ms = 0

    def remaining_ms(self, now_ms: int) -> int:
        return max(0, self.until_ms - now_ms)


class CoordinatorLatch:
    """The coordinator a membership uses, the discovery epoch it was told, and whether it already asked
    for one (``CoordinatorNeeded`` goes out once per loss, not on every poll)."""

    __slots__ = ("_requested", "epoch", "node_id")

    def __init__(self) -> None:
        self.node_id: int | None = None
        self.epoch = 0
        self._requested = False

    def found(self, node_id: int, epoch: int | None) -> bool:
        """The coordinator was found (discovery ``epoch``; ``None``: the next one).  False when it is the
        one already known, announced again: nothing changes."""
        if node_id == self.node_id and epoch == self.epoch:
            return False
        self.node_id = node_id
        self._requested = False
        self.epoch = epoch if epoch is not None else self.epoch + 1
        return True

    def lost(self) -> None:
        """The coordinator was marked unknown by whoever discovers it: ask again when needed."""
        self.node_id = None
        self._requested = False

    def need(self, reason: str) -> CoordinatorNeeded | None:
        """The event asking for the coordinator, or ``None`` when already asked since it was lost."""
        if self._requested:
            return None
        self._requested = True
        return CoordinatorNeeded(reason)

    def failed(self, reason: str, epoch: int, group_id: str) -> CoordinatorNeeded | None:
        """A request to the coordinator of discovery ``epoch`` failed: forget that coordinator (not a newer
        one found since) and return the event asking for it to be marked unknown and rediscovered.  When it
        is already unknown (same epoch), just ask for one (once)."""
        if epoch == self.epoch and self.node_id is None:
            return self.need(reason)
        if self.node_id is None or epoch != self.epoch:
            log.debug("group %s: stale coordinator failure ignored (%s)", group_id, reason)
            return None
        log.info("group %s: %s; rediscovering the coordinator", group_id, reason)
        self.node_id = None
        self._requested = True
        return CoordinatorNeeded(reason, epoch=epoch)


class CallbackLedger(Generic[EntryT]):
    """The rebalance callbacks asked of the application thread that the membership still waits for.

    :meth:`ask` emits a ``CallbackNeeded`` with the next sequence number and records the membership's
    ``entry`` (what completes when the callback does) under it; :meth:`complete` takes it back when the
    application thread reports that number.  An unknown, already completed or superseded number gives
    ``None``: a late completion is ignored.  A callback asked without an entry is not waited for.
    """

    __slots__ = ("_emit", "_pending", "_seq")

    def __init__(self, emit: Callable[[CallbackNeeded], None]) -> None:
        self._emit = emit
        self._seq = 0
        self._pending: dict[int, EntryT] = {}

    def ask(
        self,
        kind: CallbackKind,
        partitions: frozenset[TopicPartition],
        reason: str,
        entry: EntryT | None = None,
        on_assignment: Callable[[], None] | None = None,
        received_ms: int | None = None,
    ) -> CallbackNeeded:
        self._seq += 1
        event = CallbackNeeded(kind, partitions, self._seq, reason, on_assignment, received_ms)
        if entry is not None:
            self._pending[event.seq] = entry
        self._emit(event)
        return event

    def complete(self, seq: int) -> EntryT | None:
        return self._pending.pop(seq, None)

    def drop(self, seq: int) -> None:
        """Stop waiting for ``seq`` (its completion will be ignored)."""
        self._pending.pop(seq, None)

    def clear(self) -> None:
        self._pending.clear()

    def items(self) -> list[tuple[int, EntryT]]:
        return list(self._pending.items())

    def entries(self) -> list[EntryT]:
        return list(self._pending.values())

    def __len__(self) -> int:
        return len(self._pending)


class RebalanceTracker:
    """Whether a rebalance is open, and its start/end/failures reported to the metrics sink
    (``consumer-coordinator-metrics``)."""

    __slots__ = ("_sink", "open")

    def __init__(self, sink: RebalanceMetricsSink | None) -> None:
        self._sink = sink
        self.open = False

    def started(self, now_ms: int) -> None:
        """A rebalance starts (the KIP-848 member: each time it enters RECONCILING)."""
        self.open = True
        if self._sink is not None:
            self._sink.rebalance_started(now_ms)

    def begin(self, now_ms: int) -> None:
        """A rebalance starts unless one is open already (classic: a retried attempt belongs to it)."""
        if not self.open:
            self.started(now_ms)

    def completed(self, now_ms: int) -> None:
        """The open rebalance completed (nothing when none is open)."""
        if not self.open:
            return
        self.open = False
        if self._sink is not None:
            self._sink.rebalance_completed(now_ms)

    def failed(self, now_ms: int, *, ends: bool) -> None:
        """An attempt failed; ``ends``: the rebalance is over (a retry would start a new one)."""
        if ends:
            self.open = False
        if self._sink is not None:
            self._sink.rebalance_failed(now_ms)

    def failed_if_open(self, now_ms: int, *, ends: bool) -> None:
        """As :meth:`failed`, only when a rebalance is open."""
        if self.open:
            self.failed(now_ms, ends=ends)


class MembershipCore(Generic[StateT, EntryT]):
    """Shared state and helpers of the group memberships; see the module docstring.

    ``EntryT`` is what the implementation records in its :class:`CallbackLedger` for each callback it
    waits for.
    """

    def __init__(
        self,
        group_id: str,
        *,
        initial_state: StateT,
        transitions: Mapping[StateT, frozenset[StateT]],
        group_instance_id: str | None,
        rebalance_timeout_ms: int,
        backoff: ExponentialBackoff,
        metrics: RebalanceMetricsSink | None,
        poll_timer_started_ms: int | None,
    ) -> None:
        self.group_id = group_id
        self.group_instance_id = group_instance_id or None
        self._state = initial_state
        self._transitions = transitions
        self._events: list[GroupEvent] = []
        self._ledger: CallbackLedger[EntryT] = CallbackLedger(self._emit)
        self._latch = CoordinatorLatch()
        self._poll_timer = PollTimer(rebalance_timeout_ms, poll_timer_started_ms)
        self._backoff = backoff
        self._rebalance = RebalanceTracker(metrics)

    # ------------------------------------------------------------------------------------ queries
    @property
    def state(self) -> StateT:
        return self._state

    @property
    def state_name(self) -> str:
        return str(self._state.value)

    @property
    def coordinator_id(self) -> int | None:
        return self._latch.node_id

    @property
    def owned(self) -> frozenset[TopicPartition]:
        raise NotImplementedError

    def owns(self, partitions: Iterable[TopicPartition]) -> bool:
        owned = self.owned
        return all(tp in owned for tp in partitions)

    def drain_events(self) -> list[GroupEvent]:
        events, self._events = self._events, []
        return events

    def _emit(self, event: GroupEvent) -> None:
        self._events.append(event)

    # ------------------------------------------------------------------------------- state table
    def _set_state(self, new: StateT) -> StateT:
        """Move to ``new`` if the transition table allows it; returns the old state."""
        old = self._state
        self._state = checked_transition(self._transitions, old, new)
        return old

    # ---------------------------------------------------------------------------- coordinator latch
    def on_coordinator(self, node_id: int | None, now_ms: int, epoch: int | None = None) -> None:
        """The coordinator was found (``node_id``, discovery ``epoch``) or lost (``None``)."""
        if node_id is None:
            self._latch.lost()
        elif self._latch.found(node_id, epoch):
            self._coordinator_changed(now_ms)

    def _coordinator_changed(self, now_ms: int) -> None:
        """A coordinator other than the known one was found (classic restarts its session timer)."""

    def _need_coordinator(self, reason: str) -> None:
        """Ask for the coordinator (once, until it is found)."""
        event = self._latch.need(reason)
        if event is not None:
            self._events.append(event)

    def _mark_coordinator_unknown(self, reason: str, epoch: int) -> None:
        """A request to the coordinator of discovery ``epoch`` failed: forget that coordinator (not a newer
        one found since) and ask for it to be marked unknown and rediscovered."""
        event = self._latch.failed(reason, epoch, self.group_id)
        if event is not None:
            self._events.append(event)

    # ------------------------------------------------------------------------------- poll timer
    def on_app_call(self, inside: bool, now_ms: int) -> None:
        self._poll_timer.app_call(inside, now_ms)

    def _poll_timer_applies(self) -> bool:
        """The member is one the poll timer can expel (in the group, not leaving): per implementation."""
        raise NotImplementedError

    def _poll_timer_running(self) -> bool:
        """The timer applies to the member and, as Java's heartbeat thread, is only decided on while the
        coordinator is known (an expiry meanwhile is acted on once it is known again); it stands still while
        the application thread is inside one of the client's blocking calls."""
        return self._poll_timer_applies() and self._latch.node_id is not None and not self._poll_timer.paused

    def _poll_timer_expired(self, now_ms: int) -> bool:
        return self._poll_timer_running() and self._poll_timer.expired(now_ms)

    def _poll_timer_wait_ms(self, now_ms: int) -> int | None:
        """Until the poll timer expires (negative: overdue); ``None`` when it is not running or started."""
        return self._poll_timer.remaining_ms(now_ms) if self._poll_timer_running() else None

    # ------------------------------------------------------------------------------------ requests
    @staticmethod
    def _coordinator_request(
        api_key: int,
        values: dict[str, Any],
        now_ms: int,
        on_response: Callable[[Any, int, int], None],
        on_failure: Callable[[BaseException, int], None],
        *,
        min_version: int = 0,
        timeout_ms: int | None = None,
    ) -> UnsentRequest:
        return UnsentRequest(
            api_key=api_key,
            node=COORDINATOR,
            values=values,
            on_response=on_response,
            on_failure=on_failure,
            timeout_ms=timeout_ms,
            min_version=min_version,
            created_ms=now_ms,
        )
