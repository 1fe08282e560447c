"""The machinery both group memberships share (as Java's ``AbstractMembershipManager``), sans-I/O.

:class:`MembershipCore` is the base of :class:`~kafka_handoff.group.classic_membership.ClassicMembership`
and :class:`~kafka_handoff.group.consumer_membership.ConsumerMembership`.  It owns what does not depend on
the group protocol:

* the member state and its **transition table**: each implementation has a state enum and a table of the
  allowed predecessors of every state; :meth:`MembershipCore._set_state` refuses any other transition with
  :class:`~kafka_handoff.errors.IllegalStateError` (a bug, never an input);
* the **event queue** (``drain_events``) and the **callback ledger**: every ``CallbackNeeded`` gets the next
  sequence number, which the application thread echoes in ``on_callback_completed``;
* the **coordinator latch**: the coordinator the membership uses, the discovery epoch it was told, and the
  "already asked" flag, so ``CoordinatorNeeded`` is emitted once per loss and a failure reported against an
  older coordinator cannot invalidate a newer one;
* the **poll timer** (``max.poll.interval.ms``), which stands still while the application thread is inside
  one of the client's own blocking calls;
* the **rebalance metrics** bookkeeping (``consumer-coordinator-metrics``) and the **retry backoff**;
* building a request for the coordinator.

What differs (the requests, their answers, reconciliation, leaving) stays in the implementations.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

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

__all__ = ["MembershipCore", "PollTimer"]

log = logging.getLogger(__name__)

StateT = TypeVar("StateT", bound=enum.Enum)


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


class MembershipCore(Generic[StateT]):
    """Shared state and helpers of the group memberships; see the module docstring."""

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
        self._seq = 0
        self._coordinator: int | None = None
        self._coordinator_epoch = 0
        self._coordinator_requested = False
        self._poll_timer = PollTimer(rebalance_timeout_ms, poll_timer_started_ms)
        self._backoff = backoff
        self._metrics = metrics
        self._rebalance_open = False

    # ------------------------------------------------------------------------------------ queries
    @property
    def state(self) -> StateT:
        return self._state

    @property
    def state_name(self) -> str:
        return str(self._state.value)

    @property
    def coordinator_id(self) -> int | None:
        return self._coordinator

    @property
    def owned(self) -> frozenset[TopicPartition]:
        raise NotImplementedError

    def owns(self, partitions: Iterable[TopicPartition]) -> bool:
        owned = self.owned
        return all(tp in owned for tp in partitions)

    def drain_events(self) -> list[GroupEvent]:
        events, self._events = self._events, []
        return events

    # ------------------------------------------------------------------------------- state table
    def _set_state(self, new: StateT) -> StateT:
        """Move to ``new`` if the transition table allows it; returns the old state."""
        old = self._state
        if old not in self._transitions[new]:
            raise IllegalStateError(f"invalid member state transition {old.value} -> {new.value}")
        self._state = new
        return old

    # ----------------------------------------------------------------------------- callback ledger
    def _new_callback(
        self,
        kind: CallbackKind,
        partitions: frozenset[TopicPartition],
        reason: str,
        on_assignment: Callable[[], None] | None = None,
    ) -> CallbackNeeded:
        """Emit ``CallbackNeeded`` with the next sequence number (the caller records what it waits for)."""
        self._seq += 1
        event = CallbackNeeded(kind, partitions, self._seq, reason, on_assignment)
        self._events.append(event)
        return event

    # ---------------------------------------------------------------------------- coordinator latch
    def _coordinator_found(self, node_id: int, epoch: int | None) -> None:
        self._coordinator = node_id
        self._coordinator_requested = False
        self._coordinator_epoch = epoch if epoch is not None else self._coordinator_epoch + 1

    def _need_coordinator(self, reason: str) -> None:
        """Ask for the coordinator (once, until it is found)."""
        if not self._coordinator_requested:
            self._coordinator_requested = True
            self._events.append(CoordinatorNeeded(reason))

    def _mark_coordinator_unknown(self, reason: str, epoch: int) -> None:
        """A request to the coordinator of discovery ``epoch`` failed: forget that coordinator (not a newer
        one found since) and ask for it to be marked unknown and rediscovered."""
        if self._coordinator is None or epoch != self._coordinator_epoch:
            log.debug("group %s: stale coordinator failure ignored (%s)", self.group_id, reason)
            return
        log.info("group %s: %s; rediscovering the coordinator", self.group_id, reason)
        self._coordinator = None
        self._coordinator_requested = True
        self._events.append(CoordinatorNeeded(reason, epoch=epoch))

    # ------------------------------------------------------------------------------- poll timer
    def on_app_call(self, inside: bool, now_ms: int) -> None:
        self._poll_timer.app_call(inside, now_ms)

    def _poll_timer_running(self) -> bool:
        """As Java's heartbeat thread: the timer is only decided on while the coordinator is known (an
        expiry meanwhile is acted on once it is known again), and it stands still while the application
        thread is inside one of the client's blocking calls."""
        return self._coordinator is not None and not self._poll_timer.paused

    def _poll_timer_expired(self, now_ms: int) -> bool:
        return self._poll_timer_running() and self._poll_timer.expired(now_ms)

    def _poll_timer_wait_ms(self, now_ms: int) -> int | None:
        """Until the poll timer expires (negative: overdue); ``None`` when it is not running or started."""
        return self._poll_timer.remaining_ms(now_ms) if self._poll_timer_running() else None

    # ------------------------------------------------------------------------------ rebalance metrics
    def _rebalance_started(self, now_ms: int) -> None:
        self._rebalance_open = True
        if self._metrics is not None:
            self._metrics.rebalance_started(now_ms)

    def _rebalance_completed(self, now_ms: int) -> None:
        self._rebalance_open = False
        if self._metrics is not None:
            self._metrics.rebalance_completed(now_ms)

    def _rebalance_failed(self, now_ms: int, *, ends: bool) -> None:
        """A rebalance attempt failed; ``ends``: the rebalance is over (a retry would start a new one)."""
        if ends:
            self._rebalance_open = False
        if self._metrics is not None:
            self._metrics.rebalance_failed(now_ms)

    # ------------------------------------------------------------------------------------ requests
    def _backoff_ms(self, attempts: int) -> int:
        return self._backoff.backoff_ms(attempts)

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
