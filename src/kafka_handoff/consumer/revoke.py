"""Delayed revocation (KIP-983): the three lists, exactly as the KIP states them, plus seq bookkeeping.

A revoke has two moments: *requested* (the membership wants the partitions back; from then on ``poll()``
returns no records of them) and *completed* (``on_partitions_revoked`` has run and the membership may
release them to another member).  KIP-983 puts one ``poll()`` between the two, so an application that
processes records asynchronously can finish the in-flight work of a revoked partition -- and commit it --
while it keeps polling and processing every other partition at full speed.

The lists (seed 001, "Proposed changes"):

* **revoke-next** -- partitions whose revoke completes at the start of the next ``poll()``;
* **revoke-thereafter** -- partitions whose revoke :meth:`RevokeLists.delay_revoke` postponed by one poll;
* **lost** -- partitions lost during the last ``poll()``.

Rules:

* at the start of ``poll()`` (:meth:`RevokeLists.start_of_poll`): (1) complete the revoke of everything on
  revoke-next and empty it, (2) empty lost -- once a ``poll()`` returned it
  (:meth:`RevokeLists.lost_reported`; a loss during a ``poll()`` that raised is reported by the next one
  that returns), (3) move revoke-thereafter to revoke-next;
* a revoke request adds its partitions to revoke-next;
* a loss removes the partitions from both revoke lists and adds them to lost;
* ``to_be_revoked_partitions()`` is revoke-next; ``lost_partitions()`` is lost;
* ``delay_revoke(partitions)`` moves them from revoke-next to revoke-thereafter; it returns ``False`` (and
  changes nothing) when any of them is lost or not pending revocation.

So a revoke requested during poll N completes at the start of poll N+1, and each poll interval in which the
application calls ``delay_revoke`` adds exactly one poll.  Calling it twice between the same two polls is
the same as calling it once: the KIP's target is "the poll following the next poll", not a counter.

Deadlines -- delaying is never free, and never unbounded
---------------------------------------------------------
The membership does not move on until the revoke completes (it waits for ``on_callback_completed`` of the
REVOKE event's ``seq``), and that is the whole mechanism.  What it costs depends on the group protocol:

* **KIP-848 (``group.protocol=consumer``)**: delaying means *not acknowledging* the revocation: the member
  stays at its epoch in UNREVOKED_PARTITIONS, still heartbeating and fetching its other partitions.  The
  broker allows this for the member's rebalance timeout (``max.poll.interval.ms``, sent as
  ``RebalanceTimeoutMs``) from the moment it asked for the revocation; then it **fences the member and all
  of its partitions are lost**, not only the delayed ones.  The new owner waits meanwhile (its partitions
  are "unreleased").
* **classic, cooperative** (``cooperative-sticky``): the revoked partitions were already taken out of this
  member's assignment by the SyncGroup; their new owner is chosen in the *follow-up* rebalance, which this
  member starts by rejoining after the revoke completed.  Delaying postpones that rejoin, so the partitions
  sit unowned until then.  Bounded by the rebalance timeout (``max.poll.interval.ms``) of any rebalance that
  other members start meanwhile: if this member does not rejoin in time it is removed from the group and
  loses everything.
* **classic, eager**: every member revokes everything before rejoining, and the rebalance cannot finish
  until each has rejoined: delaying stalls the **whole group** (nobody consumes anything).  Allowed, bounded
  the same way, and rarely a good idea.

In every case a revoked partition is never held past the point where another member may own it: under
KIP-848 the broker assigns it elsewhere only after the acknowledgement (or the fencing); under classic
cooperative only in the follow-up rebalance this member triggers.  The optional ``deadline_ms`` of
:meth:`RevokeLists.on_revoke_requested` lets the consumer refuse delays that would run into that timeout.

Threading: the application thread owns an instance (no locking).  The consumer should call
:meth:`~RevokeLists.start_of_poll` first thing in ``poll()`` and feed revoke/lost events only *after* it,
so a request is always reported by at least one ``poll()`` result before it completes.  A request that
arrives between two polls (e.g. while ``commit_sync`` waits) should be queued and fed after the next
``start_of_poll`` for the same reason.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from kafka_handoff.types import TopicPartition

__all__ = ["CompletedRevoke", "PollPace", "RevokeLists"]

_EMPTY: frozenset[TopicPartition] = frozenset()


@dataclass(frozen=True, slots=True)
class CompletedRevoke:
    """A membership REVOKE request (``seq``) whose partitions have all completed their revoke or were lost.

    Report it with ``membership.on_callback_completed(seq, error, now_ms)``.
    """

    seq: int
    partitions: frozenset[TopicPartition]
    """Every partition of the request."""
    revoked: frozenset[TopicPartition]
    """The ones whose revoke completed (``on_partitions_revoked`` ran for them)."""
    lost: frozenset[TopicPartition]
    """The ones lost before their revoke completed."""
    error: BaseException | None = None
    """The first exception a revoke callback raised for any of the partitions (``note_callback_error``)."""


@dataclass(slots=True)
class _Request:
    seq: int
    partitions: frozenset[TopicPartition]
    remaining: set[TopicPartition]
    revoked: set[TopicPartition] = field(default_factory=set)
    lost: set[TopicPartition] = field(default_factory=set)
    error: BaseException | None = None

    def done(self) -> CompletedRevoke:
        return CompletedRevoke(
            self.seq, self.partitions, frozenset(self.revoked), frozenset(self.lost), self.error
        )


class RevokeLists:
    """KIP-983's revoke-next, revoke-thereafter and lost lists, and which REVOKE ``seq``s they complete.

    Pure bookkeeping: no I/O, no clock (deadlines use the caller's ``now_ms``).  Lists keep insertion order
    (dicts used as ordered sets) so results are deterministic.  Typical use inside ``Consumer.poll()``::

        completed = lists.start_of_poll()
        if completed:
            err = invoke_callback(listener, CallbackKind.REVOKE, completed, consumer)
            if err: lists.note_callback_error(completed, err)
        for done in lists.take_completed():
            membership_event(on_callback_completed, done.seq, done.error)
        ...  # then drain membership events: on_revoke_requested(...) / on_lost(...)
        return ConsumerRecords(..., to_be_revoked=lists.to_be_revoked_partitions(),
                               lost=lists.lost_reported())
    """

    __slots__ = ("_deadlines", "_lost", "_lost_reported", "_next", "_ready", "_requests", "_thereafter")

    def __init__(self) -> None:
        self._next: dict[TopicPartition, None] = {}
        self._thereafter: dict[TopicPartition, None] = {}
        self._lost: dict[TopicPartition, None] = {}
        # Whether a poll() result carried the lost list since the last start of poll: a loss is forgotten
        # only once the application was told (a poll() that raised told it nothing).
        self._lost_reported = False
        self._deadlines: dict[TopicPartition, int] = {}
        self._requests: dict[int, _Request] = {}
        self._ready: list[_Request] = []

    # ==================================================================================== events
    def on_revoke_requested(
        self,
        partitions: Iterable[TopicPartition],
        seq: int | None = None,
        *,
        deadline_ms: int | None = None,
    ) -> None:
        """The membership asked to revoke ``partitions`` (a REVOKE ``CallbackNeeded`` with ``seq``).

        The partitions join revoke-next; one already pending (on either list) stays where it is.  With a
        ``seq``, the request is tracked until all its partitions completed or were lost (an empty request
        is complete at once).  ``deadline_ms`` (absolute, the caller's clock) is the time before which a
        revoke :meth:`delay_revoke` postpones must have completed; the earliest deadline of a partition wins.
        """
        parts = frozenset(TopicPartition(*tp) for tp in partitions)
        for tp in parts:
            if tp not in self._next and tp not in self._thereafter:
                self._next[tp] = None
            if deadline_ms is not None:
                previous = self._deadlines.get(tp)
                self._deadlines[tp] = deadline_ms if previous is None else min(previous, deadline_ms)
        if seq is not None:
            if seq in self._requests:
                raise ValueError(f"REVOKE request seq {seq} is already pending")
            request = _Request(seq, parts, set(parts))
            if request.remaining:
                self._requests[seq] = request
            else:
                self._ready.append(request)

    def on_lost(self, partitions: Iterable[TopicPartition]) -> None:
        """``partitions`` were lost: they leave both revoke lists and are reported as lost until the start
        of the next poll.  Pending requests stop waiting for them."""
        parts = [TopicPartition(*tp) for tp in partitions]
        for tp in parts:
            self._next.pop(tp, None)
            self._thereafter.pop(tp, None)
            self._deadlines.pop(tp, None)
            self._lost[tp] = None
        self._resolve(set(parts), lost=True)

    def supersede(self, partitions: Iterable[TopicPartition]) -> None:
        """A loss of ``partitions`` is known but not applied yet (its LOST waits in the application thread's
        queue): their revoke never completes.  They leave both revoke lists now, so no start of poll (or
        immediate completion) runs the revoked callback for them; the pending requests keep waiting for
        :meth:`on_lost`, which resolves them as lost and lists the partitions as lost."""
        for tp in partitions:
            tp = TopicPartition(*tp)
            self._next.pop(tp, None)
            self._thereafter.pop(tp, None)
            self._deadlines.pop(tp, None)

    def start_of_poll(self) -> frozenset[TopicPartition]:
        """Apply the start-of-poll rules; return the partitions whose revoke completes now.

        The caller runs ``on_partitions_revoked`` for them (they are still owned until it returns), clears
        their pause flags and drops them from the assignment, then reports :meth:`take_completed`.
        """
        completed = frozenset(self._next)
        self._next.clear()
        if self._lost_reported:
            self._lost.clear()
        self._lost_reported = False
        self._next.update(self._thereafter)
        self._thereafter.clear()
        for tp in completed:
            self._deadlines.pop(tp, None)
        self._resolve(set(completed), lost=False)
        return completed

    def complete_all(self) -> frozenset[TopicPartition]:
        """Complete every pending revoke now (``unsubscribe()``/``close()``: no later poll will come)."""
        completed = frozenset(self._next) | frozenset(self._thereafter)
        self._next.clear()
        self._thereafter.clear()
        for tp in completed:
            self._deadlines.pop(tp, None)
        self._resolve(set(completed), lost=False)
        return completed

    def clear(self) -> None:
        """Forget everything, including pending requests (the membership was reset)."""
        self._next.clear()
        self._thereafter.clear()
        self._lost.clear()
        self._lost_reported = False
        self._deadlines.clear()
        self._requests.clear()
        self._ready.clear()

    def _resolve(self, partitions: set[TopicPartition], *, lost: bool) -> None:
        if not partitions:
            return
        finished: list[int] = []
        for seq, request in self._requests.items():
            hit = request.remaining & partitions
            if not hit:
                continue
            request.remaining -= hit
            (request.lost if lost else request.revoked).update(hit)
            if not request.remaining:
                finished.append(seq)
        for seq in finished:
            self._ready.append(self._requests.pop(seq))

    # ==================================================================================== application API
    def delay_revoke(
        self,
        partitions: Iterable[TopicPartition],
        now_ms: int | None = None,
        *,
        completes_at_ms: int | None = None,
    ) -> bool:
        """Postpone the revoke of ``partitions`` to the poll after the next one (KIP-983 ``delayRevoke``).

        Returns ``False`` and changes nothing when any of them is lost, is not pending revocation, or
        (given ``now_ms``) the delayed revoke would not complete before the ``deadline_ms`` of its request:
        ``completes_at_ms`` is when it would complete if delayed now (the start of the poll after the next
        one, at the application's observed pace: :meth:`PollPace.completion_if_delayed`), else ``now_ms``.
        Partitions already delayed in this poll interval stay delayed (one more call does not add a second
        poll).  An empty collection is trivially delayed (``True``).
        """
        parts = [TopicPartition(*tp) for tp in partitions]
        at = now_ms if now_ms is None or completes_at_ms is None else max(now_ms, completes_at_ms)
        for tp in parts:
            if tp in self._lost:
                return False
            if tp not in self._next and tp not in self._thereafter:
                return False
            if at is not None:
                deadline = self._deadlines.get(tp)
                if deadline is not None and at >= deadline:
                    return False
        for tp in parts:
            if tp in self._next:
                del self._next[tp]
                self._thereafter[tp] = None
        return True

    def to_be_revoked_partitions(self) -> frozenset[TopicPartition]:
        """Revoke-next: the partitions whose revoke completes at the start of the next ``poll()``.

        As in the KIP, partitions delayed since the last poll are *not* in it (see
        :meth:`delayed_partitions`); they come back after the next poll.
        """
        return frozenset(self._next) if self._next else _EMPTY

    def delayed_partitions(self) -> frozenset[TopicPartition]:
        """Revoke-thereafter: partitions :meth:`delay_revoke` postponed since the last poll."""
        return frozenset(self._thereafter) if self._thereafter else _EMPTY

    def lost_partitions(self) -> frozenset[TopicPartition]:
        """The partitions lost since the start of the last ``poll()`` (reported for exactly one poll), and
        those lost earlier whose ``poll()`` raised instead of returning them."""
        return frozenset(self._lost) if self._lost else _EMPTY

    def lost_reported(self) -> frozenset[TopicPartition]:
        """A ``poll()`` returns now, carrying :meth:`lost_partitions`: the next start of poll forgets them.
        Until a ``poll()`` returns, a loss stays listed (so the application learns of it exactly once,
        from the next successful ``poll()``, also when the poll during which it happened raised)."""
        self._lost_reported = True
        return self.lost_partitions()

    def revoke_requested_partitions(self) -> frozenset[TopicPartition]:
        """Every partition whose revoke was requested and has not completed (revoke-next and
        revoke-thereafter): the consumer must not return records of them."""
        if not self._next and not self._thereafter:
            return _EMPTY
        return frozenset(self._next) | frozenset(self._thereafter)

    def is_revoke_requested(self, partition: TopicPartition) -> bool:
        """O(1) membership test of :meth:`revoke_requested_partitions` (for the fetch collector)."""
        return partition in self._next or partition in self._thereafter

    # ==================================================================================== seq bookkeeping
    def pending_seqs(self) -> frozenset[int]:
        """REVOKE requests still waiting for some of their partitions."""
        return frozenset(self._requests)

    def note_callback_error(self, partitions: Iterable[TopicPartition], error: BaseException) -> None:
        """Attach ``error`` (a revoke callback's exception) to every request -- pending or completed and not
        yet taken -- that contains any of ``partitions``, unless it already carries an earlier error."""
        parts = set(partitions)
        for request in [*self._requests.values(), *self._ready]:
            if request.error is None and not parts.isdisjoint(request.partitions):
                request.error = error

    def take_completed(self) -> list[CompletedRevoke]:
        """Drain the requests that became complete (in completion order, then request order)."""
        done = [request.done() for request in self._ready]
        self._ready.clear()
        return done

    def __repr__(self) -> str:
        return (
            f"RevokeLists(next={sorted(self._next)}, thereafter={sorted(self._thereafter)}, "
            f"lost={sorted(self._lost)}, pending_seqs={sorted(self._requests)})"
        )


class PollPace:
    """How fast the application polls: the intervals between the starts of its ``poll()`` calls.

    A revoke delayed now completes at the start of the poll after the next one.  When that will be depends
    on the application's loop, so :meth:`completion_if_delayed` projects it from the longest of the recent
    intervals (and the one in progress): a loop that polls every 1.9 s is not granted a delay at 7.6 s of
    a 10 s deadline, because its revoke would complete at about 11.4 s.  Pure: the caller gives the clock.
    """

    __slots__ = ("_intervals", "_last_start_ms")

    def __init__(self, window: int = 8) -> None:
        self._intervals: deque[int] = deque(maxlen=window)
        self._last_start_ms: int | None = None

    def on_poll_start(self, now_ms: int) -> None:
        """A ``poll()`` starts now."""
        if self._last_start_ms is not None:
            self._intervals.append(max(0, now_ms - self._last_start_ms))
        self._last_start_ms = now_ms

    def pace_ms(self, now_ms: int | None = None) -> int:
        """The longest of the recent intervals between poll starts; with ``now_ms``, also the interval in
        progress (the loop is slower this time)."""
        longest = max(self._intervals, default=0)
        if now_ms is not None and self._last_start_ms is not None:
            longest = max(longest, now_ms - self._last_start_ms)
        return longest

    def completion_if_delayed(self, now_ms: int) -> int:
        """When a revoke delayed now would complete: the start of the poll after the next one."""
        if self._last_start_ms is None:
            return now_ms
        pace = self.pace_ms(now_ms)
        next_start = max(now_ms, self._last_start_ms + pace)
        return next_start + pace
