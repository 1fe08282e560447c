"""Rebalance-callback dispatch on the application thread (KIP-983, KIP-429 order, KIP-1306): sans-I/O.

The membership (network thread) asks for callbacks with :class:`CallbackNeeded` (REVOKE, ASSIGN, LOST) and
for user code with :class:`AppThreadTask`; the consumer hands them to :class:`RebalanceDispatcher`, which
decides *when* each runs and with which partitions:

* a **REVOKE** is requested at once (its partitions leave the next ``poll()`` results) and *completed* --
  auto-commit, ``on_partitions_revoked``, completion reported to the membership -- at the start of the next
  ``poll()`` (KIP-983), later when the application calls ``delay_revoke`` (granted only while the revoke,
  at the application's observed poll pace, still completes within 0.8 x ``max.poll.interval.ms`` of the
  arrival of the group's target), at once while leaving the group, with
  ``revoke.completion=same-poll``, or under KIP-848 without a listener while KIP-983's API is unused;
* an **ASSIGN** waits while a REVOKE requested since the last start of ``poll()`` is pending (revoked <
  ``on_assignment`` < assigned), but not for a revoke the application delays beyond that (the new
  partitions' positions are initialised only after their assigned callback); its error does not stop the
  rebalance;
* a **LOST** never waits: it resolves pending revokes, supersedes queued ASSIGNs of the lost partitions and
  makes ``poll()`` return early.  A LOST already queued also supersedes every revoke of its partitions not
  completed yet -- one due at this start of ``poll()`` or queued ahead of it -- so the revoked callback
  never runs for partitions the member lost (poll timeout, fencing), as Java's ``onJoinPrepare`` after a
  generation reset.  (The consumer resets the poll timer before a revoke completes at the start of
  ``poll()``, so a loss the membership declared just before is queued by then.)

Everything outside -- running the listener, the auto-commit before a revoke, reporting a completion to the
membership, dropping buffered records -- goes through the :class:`DispatchHost` the consumer implements;
time comes from an injected ``now_ms``.  The class has no threads, sockets or sleeps, so it is unit-tested
with a fake host and a fake clock.  It is used from the application thread only (no locking).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from kafka_handoff.consumer.revoke import PollPace, RevokeLists
from kafka_handoff.group.membership import AppThreadTask, CallbackKind, CallbackNeeded
from kafka_handoff.types import TopicPartition

__all__ = ["DispatchHost", "RebalanceDispatcher"]

log = logging.getLogger(__name__)

DispatchEvent = CallbackNeeded | AppThreadTask

#: A delayed revoke must complete within this fraction of the rebalance timeout (``max.poll.interval.ms``),
#: counted from the arrival of the group's target.
REVOKE_DEADLINE_FRACTION = 0.8


class DispatchHost(Protocol):
    """What the dispatcher needs from the consumer (all on the application thread)."""

    def invoke_listener(
        self, kind: CallbackKind, partitions: frozenset[TopicPartition], in_poll: bool
    ) -> BaseException | None:
        """Run the rebalance listener's callback for ``kind``; return (never raise) its exception."""
        ...

    def has_listener(self, in_poll: bool) -> bool: ...

    def assigned(self) -> frozenset[TopicPartition]: ...

    def commit_before_revoke(self, partitions: frozenset[TopicPartition]) -> None:
        """The auto-commit of ``partitions`` before their revoke callback (nothing when it is off); must not
        raise for a failed commit."""
        ...

    def drop_fetched(self, keep: Callable[[TopicPartition], bool]) -> None:
        """Drop buffered, undelivered records of every partition for which ``keep`` is False."""
        ...

    def clear_awaiting_callback(self, partitions: frozenset[TopicPartition]) -> None: ...

    def callback_completed(self, seq: int, error: BaseException | None) -> None:
        """Tell the membership the callback ``seq`` completed."""
        ...

    def task_done(self, task: AppThreadTask, result: object, error: BaseException | None) -> None: ...

    def report_error(self, error: BaseException) -> None:
        """An error the application must see from its next call."""
        ...

    def wakeup_network(self) -> None:
        """Wake the network thread (newly fetchable partitions)."""
        ...


class RebalanceDispatcher:
    def __init__(
        self,
        host: DispatchHost,
        *,
        now_ms: Callable[[], int],
        max_poll_interval_ms: int,
        kip848: bool,
        same_poll_revoke: bool = False,
    ) -> None:
        self._host = host
        self._now_ms = now_ms
        self._max_poll_interval_ms = max_poll_interval_ms
        self._kip848 = kip848
        # revoke.completion=same-poll: a revoke completes in the poll() that requested it (pre-KIP-983).
        self._same_poll_revoke = same_poll_revoke
        self.revoke = RevokeLists()
        self.pace = PollPace()
        self.deferred: list[DispatchEvent] = []
        # Partitions whose revoked/lost callback ran and that were not assigned again since.
        self._told_gone: set[TopicPartition] = set()
        self._early_return = False
        # REVOKE requests made since the last start of poll(): an ASSIGN waits for them (KIP-429 order:
        # revoked < assigned), but not for a revoke the application delayed since (KIP-983: the new
        # partitions are consumed at full speed meanwhile).
        self._fresh_revokes: set[int] = set()
        # Set once the application shows it follows KIP-983 (reads to_be_revoked_partitions or calls
        # delay_revoke): only then must a revoke wait for the next poll() without a listener (KIP-848).
        self.kip983_used = False
        self.in_poll = False
        self.in_callback = False
        self.leaving = False
        # Callback errors of a leave (unsubscribe()/close()): raised by that call once it completed.
        self._leave_errors: list[BaseException] = []

    # ------------------------------------------------------------------------------ poll steps
    @contextlib.contextmanager
    def polling(self) -> Iterator[None]:
        """Inside ``poll()``: callbacks that arrive now run at once (the active listener is used)."""
        self.in_poll = True
        try:
            yield
        finally:
            self.in_poll = False

    def start_poll(self) -> None:
        """Start of ``poll()`` (after its bookkeeping): reset the early-return flag, note the loop's pace."""
        self._early_return = False
        self.pace.on_poll_start(self._now_ms())

    def start_of_poll_callbacks(self) -> None:
        """KIP-983's start-of-poll rules: complete the revokes that are due, then run queued callbacks."""
        with self.polling():
            self._supersede_by_queued_losses()
            self.complete_revokes(self.revoke.start_of_poll())
            self._fresh_revokes.clear()
            self.run_deferred()

    def start_of_poll_runs_callbacks(self) -> bool:
        """True when :meth:`start_of_poll_callbacks` would run user code: a revoke completes, or queued
        callbacks run (at the start of a poll nothing waits for a revoke any more: an ASSIGN held behind one
        requested in the previous poll runs after it completes, or at once when it was delayed)."""
        return bool(self.revoke.to_be_revoked_partitions()) or bool(self.deferred)

    def take_early_return(self) -> bool:
        """True (once) when ``poll()`` must return now: a revoke was requested or partitions were lost."""
        early, self._early_return = self._early_return, False
        return early

    def callbacks_runnable(self) -> bool:
        """True when queued work would run user code now (an ASSIGN behind a pending revoke would not)."""
        if not self.deferred:
            return False
        held = self._assign_held()
        return any(
            isinstance(event, AppThreadTask) or event.kind is not CallbackKind.ASSIGN or not held
            for event in self.deferred
        )

    def _assign_held(self) -> bool:
        """An ASSIGN waits while a REVOKE requested since the last start of ``poll()`` has not completed:
        the start of the next ``poll()`` completes it first (revoked < assigned, KIP-429).  A revoke the
        application delayed beyond that does not hold the new partitions back (as Java, their positions
        are initialised only after their assigned callback, which therefore must run)."""
        if self.leaving or not self._fresh_revokes:
            return False
        self._fresh_revokes &= self.revoke.pending_seqs()
        return bool(self._fresh_revokes)

    # ------------------------------------------------------------------------------ events
    def on_event(self, event: DispatchEvent) -> None:
        """A callback or task the membership asked for: queued, and run now when inside ``poll()`` or a
        leave, and not inside another callback (callbacks never nest)."""
        self.deferred.append(event)
        if (self.in_poll or self.leaving) and not self.in_callback:
            self.run_deferred()

    def run_deferred(self) -> None:
        """Run queued callbacks in order.  An ASSIGN waits while an earlier REVOKE has not completed, so the
        listener sees revoked-then-assigned (KIP-429 order) even when the revoke is delayed (KIP-983); a
        LOST never waits."""
        queue_ = self.deferred
        i = 0
        while i < len(queue_):
            event = queue_[i]
            if isinstance(event, AppThreadTask):
                del queue_[i]
                self._run_task(event)
                i = 0
                continue
            if event.kind is CallbackKind.ASSIGN and self._assign_held():
                i += 1
                continue
            del queue_[i]
            self._on_callback(event)
            i = 0

    def _run_task(self, task: AppThreadTask) -> None:
        """User code the membership needs on this thread (a custom assignor's ``assign``); the outcome goes
        back to the membership, where an error becomes a membership error raised from ``poll()``."""
        result: object = None
        error: BaseException | None = None
        self.in_callback = True
        try:
            result = task.run()
        except Exception as exc:
            error = exc
        finally:
            self.in_callback = False
        self._host.task_done(task, result, error)

    def _on_callback(self, event: CallbackNeeded) -> None:
        parts = event.partitions
        if event.kind is CallbackKind.REVOKE:
            # From the arrival of the group's target (the broker's timer runs from then), not from now: an
            # application that was slow to get here must not be fenced while delay_revoke() says True.  The
            # revoke must complete within 80 % of the rebalance timeout (the rest covers the revoke callback,
            # its commit and the acknowledgement); delay_revoke() projects the completion at the loop's pace.
            received = event.received_ms if event.received_ms is not None else self._now_ms()
            deadline = received + int(REVOKE_DEADLINE_FRACTION * self._max_poll_interval_ms)
            self.revoke.on_revoke_requested(parts, event.seq, deadline_ms=deadline)
            self._fresh_revokes.add(event.seq)
            self._host.drop_fetched(lambda tp: tp not in parts)
            self._supersede_by_queued_losses()
            if self.leaving or self._revoke_completes_at_once():
                # unsubscribe()/close(): no later poll will complete it; or it completes in this poll.
                self.complete_revokes(self.revoke.complete_all())
                return
            self._early_return = True
            return
        if event.kind is CallbackKind.LOST:
            # The lost callback gets every partition the member owned, also those whose revoke callback
            # already ran (a delayed revoke that completed before the membership acted on it), as Java does
            # (KIP-1306); KIP-983's lost_partitions() lists only those the application still held.
            self.revoke.on_lost(parts - self._told_gone)
            self._drop_stale_assigns(event)
            self._host.drop_fetched(lambda tp: tp not in parts)
            error = self._run_listener(CallbackKind.LOST, parts) if parts else None
            self.note_error(error)
            self._report_completed_revokes()
            self._host.callback_completed(event.seq, error)
            self._early_return = True
            return
        # ASSIGN: always invoked, even for an empty set; the classic assignor's on_assignment first (KIP-429:
        # revoked < onAssignment < assigned).  An error does not stop the rebalance (KIP-1306): the
        # partitions become fetchable and the error is raised from poll().
        assignor_error: BaseException | None = None
        if event.on_assignment is not None:
            self.in_callback = True
            try:
                event.on_assignment()
            except Exception as exc:
                assignor_error = exc
            finally:
                self.in_callback = False
        error = self._run_listener(CallbackKind.ASSIGN, parts)
        self.note_error(assignor_error)
        self.note_error(error)
        self._host.clear_awaiting_callback(parts)
        self._host.callback_completed(event.seq, assignor_error or error)
        self._host.wakeup_network()

    def _run_listener(
        self, kind: CallbackKind, partitions: frozenset[TopicPartition]
    ) -> BaseException | None:
        # A blocking call inside a callback (commit_sync on the view) drains background events: callbacks
        # arriving meanwhile wait until this one returned, never run nested inside it.
        self.in_callback = True
        try:
            if kind is CallbackKind.ASSIGN:
                self._told_gone.difference_update(partitions)
            return self._host.invoke_listener(kind, partitions, self.in_poll)
        finally:
            self.in_callback = False
            if kind is not CallbackKind.ASSIGN:
                self._told_gone.update(partitions)

    def _supersede_by_queued_losses(self) -> None:
        """A LOST waiting in the queue supersedes every revoke of its partitions not completed yet.

        The membership emits LOST after a REVOKE it can no longer wait for: the member left the group
        (``max.poll.interval.ms`` expired: LeaveGroup and generation reset), was fenced, or gave up a revoke
        past the rebalance timeout.  From then on another member may own the partitions, so their revoked
        callback -- in which the application commits -- must not run; Java's ``onJoinPrepare`` calls only
        ``onPartitionsLost`` once the generation is reset.  Here the REVOKE may already be pending (requested
        in the previous poll, due at this start of poll) or queued ahead of the LOST (both arrived while the
        application was not polling): either way the partitions leave the revoke lists before any revoke
        completes, and the LOST, when it runs, resolves the request and reports them lost."""
        lost: set[TopicPartition] = set()
        for event in self.deferred:
            if isinstance(event, CallbackNeeded) and event.kind is CallbackKind.LOST:
                lost.update(event.partitions)
        if lost:
            superseded = self.revoke.revoke_requested_partitions() & lost
            if superseded:
                log.debug("revoke of %s superseded by a queued loss", sorted(superseded))
                self.revoke.supersede(superseded)

    def _drop_stale_assigns(self, lost: CallbackNeeded) -> None:
        """A LOST supersedes ASSIGNs still queued before it (waiting behind a pending revoke): an assigned
        callback never runs after the lost callback for partitions the member no longer owns.  An ASSIGN
        all of whose partitions are lost (a generation reset) is dropped (its completion is reported, so
        the membership does not wait for it); one partly lost runs for the rest."""
        kept: list[DispatchEvent] = []
        for queued in self.deferred:
            if (
                isinstance(queued, CallbackNeeded)
                and queued.kind is CallbackKind.ASSIGN
                and queued.seq < lost.seq
            ):
                if queued.partitions <= lost.partitions:
                    log.debug("assign callback (seq %d) dropped: superseded by lost partitions", queued.seq)
                    self._host.callback_completed(queued.seq, None)
                    continue
                rest = queued.partitions - lost.partitions
                if rest != queued.partitions:
                    queued = dataclasses.replace(queued, partitions=rest)
            kept.append(queued)
        self.deferred[:] = kept

    def _revoke_completes_at_once(self) -> bool:
        """True when a revoke completes in the poll() that requested it: ``revoke.completion=same-poll``,
        or (as Java's KIP-848 consumer, which then completes it without the application) under KIP-848
        with no rebalance listener while the application never used KIP-983's API."""
        if self._same_poll_revoke:
            return True
        return self._kip848 and not self._host.has_listener(self.in_poll) and not self.kip983_used

    def complete_revokes(self, completed: frozenset[TopicPartition]) -> None:
        """Run the revoke callback for partitions whose revoke completes now, then tell the membership."""
        if completed:
            owned = self._host.assigned()
            parts = frozenset(tp for tp in completed if tp in owned) or completed
            self.in_callback = True  # part of the revocation: no other callback runs meanwhile
            try:
                self._host.commit_before_revoke(parts)
            finally:
                self.in_callback = False
            error = self._run_listener(CallbackKind.REVOKE, parts)
            if error is not None:
                self.revoke.note_callback_error(parts, error)
                self.note_error(error)
        self._report_completed_revokes()

    def _report_completed_revokes(self) -> None:
        for done in self.revoke.take_completed():
            self._host.callback_completed(done.seq, done.error)

    # ------------------------------------------------------------------------------ errors and leaving
    def note_error(self, error: BaseException | None) -> None:
        """A rebalance callback raised: queue it for the application (after the step completed).  While
        leaving the group, unsubscribe()/close() raise it themselves once they completed."""
        if error is None:
            return
        if self.leaving:
            self._leave_errors.append(error)
        else:
            self._host.report_error(error)

    def take_leave_errors(self) -> list[BaseException]:
        errors, self._leave_errors = self._leave_errors, []
        return errors

    def complete_for_leave(self) -> None:
        """Leaving the group: callbacks that arrived between polls, then every pending revoke, complete
        now."""
        self.run_deferred()
        self.complete_revokes(self.revoke.complete_all())
        self.run_deferred()

    # ------------------------------------------------------------------------------ KIP-983 API
    def to_be_revoked_partitions(self) -> frozenset[TopicPartition]:
        self.kip983_used = True
        return self.revoke.to_be_revoked_partitions()

    def lost_partitions(self) -> frozenset[TopicPartition]:
        return self.revoke.lost_partitions()

    def delay_revoke(self, partitions: Iterable[TopicPartition]) -> bool:
        """Granted only if the revoke, delayed, still completes before its deadline at the pace the
        application polls (:class:`~kafka_handoff.consumer.revoke.PollPace`); once refused, the next
        ``poll()`` completes it."""
        self.kip983_used = True
        now = self._now_ms()
        return self.revoke.delay_revoke(
            list(partitions), now, completes_at_ms=self.pace.completion_if_delayed(now)
        )

    def note_kip983_use(self) -> None:
        self.kip983_used = True
