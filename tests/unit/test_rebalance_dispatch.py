"""The rebalance-callback dispatch (:class:`RebalanceDispatcher`) as a true unit: no consumer, no thread.

A fake host records what the dispatcher asks of the consumer (listener calls, completions reported to the
membership, auto-commits, dropped buffers, errors) in one ordered journal; a :class:`FakeClock` gives time.
``poll()`` below drives the dispatcher as ``Consumer.poll()`` does (start-of-poll rules, then the callbacks
delivered during the poll, then the early-return flag).  The threaded end-to-end versions of these
behaviours stay in ``test_consumer_dispatch.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from kafka_handoff.consumer.dispatch import RebalanceDispatcher
from kafka_handoff.group.membership import AppThreadTask, CallbackKind, CallbackNeeded
from kafka_handoff.protocol.requests import FakeClock
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
T2 = TopicPartition("t", 2)
REVOKE, ASSIGN, LOST = CallbackKind.REVOKE, CallbackKind.ASSIGN, CallbackKind.LOST
MAX_POLL_INTERVAL_MS = 10_000
_CALLBACK_NAMES = {REVOKE: "revoked", ASSIGN: "assigned", LOST: "lost"}


def tps(*parts: TopicPartition) -> frozenset[TopicPartition]:
    return frozenset(parts)


@dataclass
class FakeHost:
    journal: list[tuple[object, ...]] = field(default_factory=list)
    owned: frozenset[TopicPartition] = frozenset()
    listener: bool = True
    auto_commit: bool = False
    raise_on: dict[CallbackKind, BaseException] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)
    awaiting: set[TopicPartition] = field(default_factory=set)
    on_listener: Callable[[CallbackKind], None] | None = None
    completions: list[tuple[int, BaseException | None]] = field(default_factory=list)

    def invoke_listener(
        self, kind: CallbackKind, partitions: frozenset[TopicPartition], in_poll: bool
    ) -> BaseException | None:
        if not self.listener:
            return None
        self.journal.append((_CALLBACK_NAMES[kind], partitions))
        if self.on_listener is not None:
            self.on_listener(kind)
        return self.raise_on.pop(kind, None)

    def has_listener(self, in_poll: bool) -> bool:
        return self.listener

    def assigned(self) -> frozenset[TopicPartition]:
        return self.owned

    def commit_before_revoke(self, partitions: frozenset[TopicPartition]) -> None:
        if self.auto_commit:
            self.journal.append(("commit", partitions))

    def drop_fetched(self, keep: Callable[[TopicPartition], bool]) -> None:
        self.journal.append(("drop", frozenset(tp for tp in (T0, T1, T2) if not keep(tp))))

    def clear_awaiting_callback(self, partitions: frozenset[TopicPartition]) -> None:
        self.awaiting -= partitions

    def callback_completed(self, seq: int, error: BaseException | None) -> None:
        self.journal.append(("completed", seq, error))
        self.completions.append((seq, error))

    def task_done(self, task: AppThreadTask, result: object, error: BaseException | None) -> None:
        self.journal.append(("task_done", task.what, result, error))

    def report_error(self, error: BaseException) -> None:
        self.errors.append(error)

    def wakeup_network(self) -> None:
        pass

    # --- views of the journal
    def calls(self) -> list[tuple[object, ...]]:
        """Listener calls (and auto-commits), in order."""
        return [e for e in self.journal if e[0] in ("revoked", "assigned", "lost", "commit", "on_assignment")]

    def completed(self) -> list[tuple[int, BaseException | None]]:
        """(seq, error) of each completion reported to the membership, in order."""
        return list(self.completions)


@dataclass
class Poll:
    early: bool
    to_be_revoked: frozenset[TopicPartition]
    lost: frozenset[TopicPartition]


class Rig:
    def __init__(self, *, kip848: bool = False, same_poll: bool = False) -> None:
        self.clock = FakeClock()
        self.host = FakeHost()
        self.d = RebalanceDispatcher(
            self.host,
            now_ms=self.clock.now_ms,
            max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
            kip848=kip848,
            same_poll_revoke=same_poll,
        )

    def poll(self, *during: CallbackNeeded | AppThreadTask) -> Poll:
        """One ``poll()``: start-of-poll rules, then ``during`` delivered while it waits."""
        d = self.d
        d.start_poll()
        d.start_of_poll_callbacks()
        with d.polling():
            d.run_deferred()
            for event in during:
                d.on_event(event)
        early = d.take_early_return()
        return Poll(early, d.revoke.to_be_revoked_partitions(), d.revoke.lost_reported())

    def between_polls(self, *events: CallbackNeeded | AppThreadTask) -> None:
        for event in events:
            self.d.on_event(event)


def revoke(seq: int, *parts: TopicPartition, received_ms: int | None = None) -> CallbackNeeded:
    return CallbackNeeded(REVOKE, tps(*parts), seq=seq, received_ms=received_ms)


def assign(
    seq: int, *parts: TopicPartition, on_assignment: Callable[[], None] | None = None
) -> CallbackNeeded:
    return CallbackNeeded(ASSIGN, tps(*parts), seq=seq, on_assignment=on_assignment)


def lost(seq: int, *parts: TopicPartition) -> CallbackNeeded:
    return CallbackNeeded(LOST, tps(*parts), seq=seq)


@pytest.fixture
def rig() -> Rig:
    r = Rig()
    r.host.owned = tps(T0, T1, T2)
    return r


# ================================================================================================ revoke
def test_revoke_during_poll_returns_early_and_completes_at_the_start_of_the_next_poll(rig: Rig) -> None:
    p = rig.poll(revoke(7, T0, T1))
    assert p.early and p.to_be_revoked == tps(T0, T1)
    assert rig.host.calls() == [] and rig.host.completed() == []
    assert ("drop", tps(T0, T1)) in rig.host.journal  # their buffered records are not returned any more

    p = rig.poll()
    assert not p.early and p.to_be_revoked == frozenset()
    assert rig.host.calls() == [("revoked", tps(T0, T1))]
    assert rig.host.completed() == [(7, None)]
    journal = rig.host.journal
    assert journal.index(("revoked", tps(T0, T1))) < journal.index(("completed", 7, None))

    rig.poll()
    assert rig.host.completed() == [(7, None)]  # once


def test_revoke_arriving_between_polls_is_reported_by_the_next_poll_only(rig: Rig) -> None:
    rig.between_polls(revoke(1, T0))
    assert rig.d.revoke.to_be_revoked_partitions() == frozenset()  # queued: nothing ran outside poll()
    assert rig.poll().to_be_revoked == tps(T0)
    assert rig.host.completed() == []
    assert rig.poll().to_be_revoked == frozenset()
    assert rig.host.completed() == [(1, None)]


def test_auto_commit_runs_before_the_revoked_callback_for_owned_partitions_only(rig: Rig) -> None:
    rig.host.auto_commit = True
    rig.host.owned = tps(T0)
    rig.poll(revoke(1, T0, T1))
    rig.poll()
    assert rig.host.calls() == [("commit", tps(T0)), ("revoked", tps(T0))]


# ================================================================================================ delay
def test_delay_revoke_postpones_by_exactly_one_poll_per_interval(rig: Rig) -> None:
    rig.poll(revoke(3, T0))
    assert rig.d.delay_revoke([T0]) is True
    assert rig.d.delay_revoke([T0]) is True  # same interval: still one poll
    assert rig.poll().to_be_revoked == tps(T0)  # delayed: not due at this poll's start, due at the next
    assert rig.host.completed() == []
    rig.poll()
    assert rig.host.completed() == [(3, None)]


def test_delay_revoke_refuses_partitions_not_pending_and_is_all_or_nothing(rig: Rig) -> None:
    rig.poll(revoke(1, T0))
    assert rig.d.delay_revoke([T1]) is False
    assert rig.d.delay_revoke([T0, T1]) is False
    rig.poll()
    assert rig.host.completed() == [(1, None)]  # T0 was not delayed by the refused call
    assert rig.d.delay_revoke([T0]) is False


def test_delay_deadline_runs_from_the_receipt_of_the_revocation(rig: Rig) -> None:
    received = rig.clock.now_ms()
    rig.clock.advance(5_000)  # the application was slow to poll
    rig.poll(revoke(1, T0, received_ms=received))
    assert rig.d.delay_revoke([T0]) is True
    rig.clock.advance(int(0.8 * MAX_POLL_INTERVAL_MS) - 5_000)  # at 0.8 x max.poll.interval.ms
    assert rig.d.delay_revoke([T0]) is False


def test_delay_revoke_marks_kip983_use(rig: Rig) -> None:
    assert not rig.d.kip983_used
    rig.d.delay_revoke([])
    assert rig.d.kip983_used


# ================================================================================================ order
def test_assign_waits_for_an_earlier_revoke_until_the_next_poll(rig: Rig) -> None:
    """KIP-429 order: the revoke requested in the same poll completes first, at the next poll's start."""
    rig.poll(revoke(1, T0), assign(2, T2))
    assert rig.host.calls() == []
    assert not rig.d.callbacks_runnable()
    rig.poll()
    assert rig.host.calls() == [("revoked", tps(T0)), ("assigned", tps(T2))]
    assert rig.host.completed() == [(1, None), (2, None)]


def test_assign_does_not_wait_for_a_revoke_the_application_delays(rig: Rig) -> None:
    """Issue 26: new partitions are not held back by an unrelated revoke the application keeps delaying
    (their positions are initialised only after their assigned callback, which must therefore run)."""
    rig.poll(revoke(1, T0), assign(2, T2))
    assert rig.d.delay_revoke([T0])
    rig.poll()
    assert rig.host.calls() == [("assigned", tps(T2))]
    assert rig.host.completed() == [(2, None)]
    assert rig.d.delay_revoke([T0])
    rig.poll()
    rig.poll()
    assert rig.host.calls() == [("assigned", tps(T2)), ("revoked", tps(T0))]
    assert rig.host.completed() == [(2, None), (1, None)]


def test_assign_without_a_pending_revoke_runs_in_the_same_poll(rig: Rig) -> None:
    rig.host.awaiting = {T2}
    p = rig.poll(assign(4, T2))
    assert not p.early
    assert rig.host.calls() == [("assigned", tps(T2))]
    assert rig.host.awaiting == set()  # fetchable from now on
    assert rig.host.completed() == [(4, None)]


def test_on_assignment_runs_after_the_revoke_and_before_assigned(rig: Rig) -> None:
    rig.poll(revoke(1, T0), assign(2, T2, on_assignment=lambda: rig.host.journal.append(("on_assignment",))))
    rig.poll()
    assert rig.host.calls() == [("revoked", tps(T0)), ("on_assignment",), ("assigned", tps(T2))]


def test_on_assignment_error_is_reported_and_the_assign_still_runs(rig: Rig) -> None:
    boom = RuntimeError("assignor state")

    def on_assignment() -> None:
        raise boom

    rig.poll(assign(1, T0, on_assignment=on_assignment))
    assert rig.host.calls() == [("assigned", tps(T0))]
    assert rig.host.completed() == [(1, boom)]
    assert rig.host.errors == [boom]


def test_a_callback_arriving_inside_a_callback_waits_until_it_returned(rig: Rig) -> None:
    """No nesting: an ASSIGN delivered while the revoked callback runs (its commit_sync drains events)
    runs after it, not inside it."""

    def during_revoke(kind: CallbackKind) -> None:
        if kind is REVOKE:
            rig.d.on_event(assign(2, T2))
            assert rig.host.calls() == [("revoked", tps(T0))]

    rig.host.on_listener = during_revoke
    rig.poll(revoke(1, T0))
    rig.poll()
    assert rig.host.calls() == [("revoked", tps(T0)), ("assigned", tps(T2))]


# ================================================================================================ lost
def test_lost_runs_at_once_resolves_a_pending_revoke_and_returns_early(rig: Rig) -> None:
    rig.poll(revoke(1, T0))
    assert rig.d.delay_revoke([T0])
    p = rig.poll(lost(2, T0, T1))
    assert p.early and p.lost == tps(T0, T1)
    assert rig.host.calls() == [("lost", tps(T0, T1))]  # no revoked callback for a lost partition
    assert sorted(seq for seq, _ in rig.host.completed()) == [1, 2]
    assert rig.d.delay_revoke([T0]) is False
    assert rig.poll().lost == frozenset()  # lost lists only the last poll's losses


def test_lost_drops_an_assign_waiting_behind_a_revoke_of_the_reset_generation(rig: Rig) -> None:
    hook: list[str] = []
    rig.poll(revoke(1, T0), assign(2, T2, on_assignment=lambda: hook.append("x")), lost(3, T0, T1, T2))
    rig.poll()
    assert rig.host.calls() == [("lost", tps(T0, T1, T2))]
    assert hook == []
    assert sorted(seq for seq, _ in rig.host.completed()) == [1, 2, 3]


def test_assign_partly_lost_runs_for_the_partitions_still_owned(rig: Rig) -> None:
    rig.poll(revoke(1, T0), assign(2, T1, T2), lost(3, T2))
    rig.poll()
    assert rig.host.calls() == [("lost", tps(T2)), ("revoked", tps(T0)), ("assigned", tps(T1))]


def test_lost_callback_gets_partitions_whose_revoke_already_ran(rig: Rig) -> None:
    rig.poll(revoke(1, T0))
    rig.poll()  # T0's revoke completes
    p = rig.poll(lost(2, T0, T1))
    assert rig.host.calls() == [("revoked", tps(T0)), ("lost", tps(T0, T1))]
    assert p.lost == tps(T1)  # KIP-983's list: only what the application still held


def test_a_loss_queued_before_the_start_of_poll_supersedes_the_revoke_due_then(rig: Rig) -> None:
    """Poll-timeout interleaving (classic eager): poll N requests the revoke of everything (a rebalance
    began), the application then stalls past max.poll.interval.ms, the member leaves the group and the LOST
    arrives between the polls.  Poll N+1 must not complete the revoke first: the member is out of the group,
    another member may own the partitions already, and a revoked callback would let the application commit
    them.  Only the lost callback runs (Java: onJoinPrepare sees the reset generation -> onPartitionsLost)."""
    rig.poll(revoke(1, T0, T1, T2))
    rig.between_polls(lost(2, T0, T1, T2))
    p = rig.poll()
    assert rig.host.calls() == [("lost", tps(T0, T1, T2))]
    assert p.early and p.lost == tps(T0, T1, T2) and p.to_be_revoked == frozenset()
    assert sorted(seq for seq, _ in rig.host.completed()) == [1, 2]
    journal = rig.host.journal
    assert journal.index(("lost", tps(T0, T1, T2))) < journal.index(("completed", 1, None))


def test_a_loss_queued_before_the_start_of_poll_supersedes_a_delayed_revoke(rig: Rig) -> None:
    rig.poll(revoke(1, T0))
    assert rig.d.delay_revoke([T0])
    rig.poll()  # T0 moves to revoke-next: due at the next start of poll
    rig.between_polls(lost(2, T0, T1))
    p = rig.poll()
    assert rig.host.calls() == [("lost", tps(T0, T1))]
    assert p.lost == tps(T0, T1)
    assert sorted(seq for seq, _ in rig.host.completed()) == [1, 2]


def test_a_queued_loss_supersedes_only_the_revokes_of_its_partitions(rig: Rig) -> None:
    rig.poll(revoke(1, T0, T1))
    rig.between_polls(lost(2, T1))
    rig.poll()
    assert rig.host.calls() == [("revoked", tps(T0)), ("lost", tps(T1))]
    assert sorted(seq for seq, _ in rig.host.completed()) == [1, 2]


@pytest.mark.parametrize("same_poll", [False, True])
def test_a_revoke_queued_ahead_of_a_loss_of_its_partitions_never_runs(same_poll: bool) -> None:
    """The eager revoke was queued for the application thread (which was stalled) and then the poll timer
    expired: the revoke never ran, so it becomes part of the loss -- also with revoke.completion=same-poll,
    where a revoke otherwise completes in the poll that requests it."""
    rig = Rig(same_poll=same_poll)
    rig.host.owned = tps(T0, T1, T2)
    rig.between_polls(revoke(1, T0, T1, T2), lost(2, T0, T1, T2))
    p = rig.poll()
    assert rig.host.calls() == [("lost", tps(T0, T1, T2))]
    assert p.lost == tps(T0, T1, T2) and p.to_be_revoked == frozenset()
    assert sorted(seq for seq, _ in rig.host.completed()) == [1, 2]
    rig.poll()
    assert rig.host.calls() == [("lost", tps(T0, T1, T2))]  # and nothing later either


def test_a_revoke_queued_ahead_of_a_partial_loss_runs_for_the_rest_in_same_poll_mode() -> None:
    rig = Rig(same_poll=True)
    rig.host.owned = tps(T0, T1)
    rig.between_polls(revoke(1, T0, T1), lost(2, T1))
    rig.poll()
    assert rig.host.calls() == [("revoked", tps(T0)), ("lost", tps(T1))]
    assert sorted(seq for seq, _ in rig.host.completed()) == [1, 2]


# ================================================================================================ errors
def test_revoke_listener_error_is_reported_with_the_completion_and_once(rig: Rig) -> None:
    boom = RuntimeError("revoke failed")
    rig.host.raise_on[REVOKE] = boom
    rig.poll(revoke(1, T0), assign(2, T2))
    rig.poll()
    assert rig.host.completed() == [(1, boom), (2, None)]
    assert rig.host.errors == [boom]
    assert rig.host.calls() == [("revoked", tps(T0)), ("assigned", tps(T2))]


def test_errors_while_leaving_are_kept_for_the_leaving_call(rig: Rig) -> None:
    boom = RuntimeError("revoke failed")
    rig.host.raise_on[REVOKE] = boom
    rig.poll(revoke(1, T0))
    assert rig.d.delay_revoke([T0])
    rig.d.leaving = True
    rig.d.complete_for_leave()
    rig.d.leaving = False
    assert rig.host.completed() == [(1, boom)]
    assert rig.host.errors == []
    assert rig.d.take_leave_errors() == [boom]
    assert rig.d.take_leave_errors() == []


def test_a_revoke_while_leaving_completes_at_once_and_an_assign_does_not_wait(rig: Rig) -> None:
    rig.d.leaving = True
    rig.between_polls(revoke(1, T0), assign(2, T2))
    assert rig.host.calls() == [("revoked", tps(T0)), ("assigned", tps(T2))]
    assert rig.host.completed() == [(1, None), (2, None)]


# ================================================================================================ modes
def test_kip848_without_listener_or_kip983_use_completes_in_the_requesting_poll() -> None:
    rig = Rig(kip848=True)
    rig.host.listener = False
    rig.host.owned = tps(T0)
    p = rig.poll(revoke(1, T0))
    assert not p.early and p.to_be_revoked == frozenset()
    assert rig.host.completed() == [(1, None)]


@pytest.mark.parametrize("used", ["to_be_revoked_partitions", "delay_revoke"])
def test_kip848_without_listener_waits_a_poll_once_kip983_is_used(used: str) -> None:
    rig = Rig(kip848=True)
    rig.host.listener = False
    rig.host.owned = tps(T0)
    if used == "delay_revoke":
        rig.d.delay_revoke([])
    else:
        rig.d.to_be_revoked_partitions()
    assert rig.poll(revoke(1, T0)).to_be_revoked == tps(T0)
    assert rig.host.completed() == []
    rig.poll()
    assert rig.host.completed() == [(1, None)]


def test_same_poll_revoke_completes_in_the_requesting_poll() -> None:
    rig = Rig(same_poll=True)
    rig.host.owned = tps(T0)
    p = rig.poll(revoke(1, T0))
    assert not p.early
    assert rig.host.calls() == [("revoked", tps(T0))]
    assert rig.host.completed() == [(1, None)]


# ================================================================================================ tasks
def test_app_thread_task_runs_inside_poll_and_reports_its_outcome(rig: Rig) -> None:
    boom = ValueError("bad assignment")
    ok = AppThreadTask(run=lambda: {"m": [T0]}, done=lambda r, e, now: None, what="ok")

    def fail() -> object:
        raise boom

    bad = AppThreadTask(run=fail, done=lambda r, e, now: None, what="bad")
    rig.between_polls(ok)
    assert rig.host.journal == []  # only inside poll()
    assert rig.d.callbacks_runnable()
    rig.poll(bad)
    assert [e for e in rig.host.journal if e[0] == "task_done"] == [
        ("task_done", "ok", {"m": [T0]}, None),
        ("task_done", "bad", None, boom),
    ]


def test_start_of_poll_announces_an_assign_that_a_delayed_revoke_no_longer_holds(rig: Rig) -> None:
    """The asyncio consumer runs the start-of-poll step on its worker only when it runs user code: an ASSIGN
    held in the previous poll by a revoke the application then delayed runs at this start of poll."""
    rig.poll(revoke(1, T0), assign(2, T2))
    assert not rig.d.callbacks_runnable()  # held until the next start of poll
    assert rig.d.delay_revoke([T0])
    assert rig.d.revoke.to_be_revoked_partitions() == frozenset()  # delayed: revoke-thereafter
    assert rig.d.start_of_poll_runs_callbacks()
    rig.poll()
    assert rig.host.calls() == [("assigned", tps(T2))]
    assert rig.d.start_of_poll_runs_callbacks()  # T0's revoke completes at the next start of poll
    rig.poll()
    assert rig.host.calls() == [("assigned", tps(T2)), ("revoked", tps(T0))]
    assert not rig.d.start_of_poll_runs_callbacks()
