"""The Consumer's rebalance-callback dispatch on the application thread (no broker).

A real :class:`Consumer` (bootstrap on port 1: connections fail harmlessly) with a fake membership
injected: the fake records what the consumer reports back (``on_callback_completed``, ``on_app_poll``,
``leave``) and hands out scripted events through ``drain_events``.  Covers KIP-983 delayed revocation
(revoke completes at the start of the next poll, ``delay_revoke`` adds one poll per call), KIP-429
ordering (an ASSIGN waits for an earlier REVOKE), lost partitions, listener exceptions, callbacks that
arrive outside ``poll()``, and the expiry of the KIP-1306 view.

Not a pure unit test: the real consumer starts its real network thread, hence the ``threads`` marker
instead of ``unit``.  The dispatch itself (``consumer/dispatch.py``) is unit-tested without threads, with a
fake host and a fake clock, in ``test_rebalance_dispatch.py``; this file checks the consumer's wiring of it.
Nothing here measures time: a call that must return early is a ``poll(600)`` awaited on another thread for
at most 30 s.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import pytest

from kafka_handoff.consumer.consumer import Consumer
from kafka_handoff.consumer.listener import RebalanceConsumer, RebalanceListenerBase
from kafka_handoff.errors import IllegalStateError
from kafka_handoff.group.membership import (
    AppThreadTask,
    AssignmentChanged,
    CallbackKind,
    CallbackNeeded,
    GroupEvent,
    Subscription,
)
from kafka_handoff.protocol.requests import PollResult
from kafka_handoff.types import ConsumerGroupMetadata, TopicPartition

pytestmark = pytest.mark.threads

LONG_POLL_S = 600.0
"""A poll() that is not ended early blocks this long: far beyond :data:`RETURN_BOUND_S`."""
RETURN_BOUND_S = 30.0
"""How long a call that must return early (or a close) is awaited: far above its normal duration even on
a loaded machine, far below a hang."""

R = TypeVar("R")


def returns(call: Callable[[], R], what: str) -> R:
    """``call()`` on another thread, awaited for at most :data:`RETURN_BOUND_S`: its result (or its
    exception).  The event awaited is the return; a call that blocks for its full long timeout fails."""
    outcome: list[R] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name=f"test-{what}", daemon=True)
    thread.start()
    thread.join(RETURN_BOUND_S)
    assert not thread.is_alive(), f"{what} did not return within {RETURN_BOUND_S:.0f} s"
    if errors:
        raise errors[0]
    return outcome[0]


T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
T2 = TopicPartition("t", 2)
REVOKE, ASSIGN, LOST = CallbackKind.REVOKE, CallbackKind.ASSIGN, CallbackKind.LOST


class Journal:
    """One ordered, thread-safe log shared by the listener (app thread) and the fake (network thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[tuple[Any, ...]] = []

    def add(self, *entry: Any) -> None:
        with self._lock:
            self._entries.append(entry)

    @property
    def entries(self) -> list[tuple[Any, ...]]:
        with self._lock:
            return list(self._entries)

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [e for e in self.entries if e[0] == kind]


class FakeMembership:
    """Just enough of the Membership interface; called on the network thread."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._lock = threading.Lock()
        self._events: list[GroupEvent] = []
        self._on_next_app_poll: list[GroupEvent] = []
        self.wake: Any = None
        self.owned: frozenset[TopicPartition] = frozenset()
        self.left = True
        self.app_polls = 0
        self.leaves = 0
        self.before_app_poll: Callable[[], None] | None = None
        """Run (once) on the network thread when the next poll event arrives, before it counts."""

    # --- scripting (test thread)
    def add(self, events: Sequence[GroupEvent]) -> None:
        with self._lock:
            self._events.extend(events)

    def add_on_next_app_poll(self, events: Sequence[GroupEvent]) -> None:
        with self._lock:
            self._on_next_app_poll.extend(events)

    # --- Membership interface
    def poll(self, now_ms: int) -> PollResult:
        return PollResult.idle()

    def drain_events(self) -> list[GroupEvent]:
        with self._lock:
            events, self._events = self._events, []
            return events

    def on_callback_completed(self, seq: int, error: BaseException | None, now_ms: int) -> None:
        self.journal.add("completed", seq, error)

    def on_app_poll(self, now_ms: int) -> None:
        hook, self.before_app_poll = self.before_app_poll, None
        if hook is not None:
            hook()
        with self._lock:
            self.app_polls += 1
            released, self._on_next_app_poll = self._on_next_app_poll, []
            self._events.extend(released)
        if released and self.wake is not None:
            self.wake()  # the network thread's next client poll returns at once, then drains us

    def leave(self, now_ms: int) -> None:
        self.leaves += 1

    def group_metadata(self) -> ConsumerGroupMetadata:
        return ConsumerGroupMetadata("g", 1, "member-1", None)

    def on_coordinator(self, node_id: int | None, now_ms: int, epoch: int | None = None) -> None:
        pass

    def on_metadata(self, metadata: Any, now_ms: int) -> None:
        pass

    # --- the rest of the Membership interface (not exercised by these tests)
    def subscribe(self, subscription: Subscription, now_ms: int) -> None:
        pass

    def unsubscribe(self, now_ms: int) -> None:
        pass

    def on_app_call(self, inside: bool, now_ms: int) -> None:
        pass

    def enforce_rebalance(self, reason: str, now_ms: int) -> None:
        pass

    @property
    def state_name(self) -> str:
        return "FAKE"

    def owns(self, partitions: Iterable[TopicPartition]) -> bool:
        return all(tp in self.owned for tp in partitions)

    def generation_if_stable(self) -> ConsumerGroupMetadata | None:
        return self.group_metadata()

    def on_commit_error(self, error_code: int, sent: ConsumerGroupMetadata, now_ms: int) -> None:
        pass


class Listener:
    """A two-argument listener that logs every call (and can be told to raise, or to keep its view)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.raise_on: dict[str, BaseException] = {}
        self.views: list[RebalanceConsumer] = []
        self.on_revoked: Callable[[], None] | None = None

    def _log(self, name: str, partitions: Collection[TopicPartition], consumer: RebalanceConsumer) -> None:
        self.journal.add(name, frozenset(partitions))
        self.views.append(consumer)
        error = self.raise_on.pop(name, None)
        if error is not None:
            raise error

    def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        if self.on_revoked is not None:
            self.on_revoked()
        self._log("revoked", partitions, consumer)

    def on_partitions_assigned(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        self._log("assigned", partitions, consumer)

    def on_partitions_lost(self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer) -> None:
        self._log("lost", partitions, consumer)


class Harness:
    def __init__(self, protocol: str = "classic") -> None:
        self.journal = Journal()
        self.consumer = Consumer(
            {
                "bootstrap.servers": "127.0.0.1:1",
                "group.id": "g",
                "enable.auto.commit": False,
                "group.protocol": protocol,
            }
        )
        self.fake = FakeMembership(self.journal)
        self.fake.wake = self.consumer._thread.wakeup
        self.listener = Listener(self.journal)
        self.consumer.membership = self.fake
        self.consumer.set_rebalance_listener(self.listener)

    def own(self, *parts: TopicPartition) -> None:
        """Auto-assignment mode owning ``parts`` (positions set, so no committed-offset lookups start)."""
        owned = frozenset(parts)
        self.fake.owned = owned

        def run(now: int) -> None:
            subs = self.consumer._subs
            if not subs.has_auto_assignment:
                subs.subscribe(Subscription(topics=frozenset({"t"})))
            subs.set_group_assignment(owned, ())
            for tp in owned:
                subs.seek(tp, 0)

        self.consumer._thread.call_sync(run, 5.0)

    def inject(self, *events: GroupEvent) -> None:
        """The membership emits ``events``; after this returns the network thread has drained them (the
        callbacks are on the background queue, nothing ran on the application thread yet)."""
        self.fake.add(events)
        self.consumer._thread.call_sync(self.consumer._drain_membership_nt, 5.0)

    def sync(self) -> None:
        """Wait until everything posted to the network thread so far (completions) has run."""
        self.consumer._thread.call_sync(lambda now: None, 5.0)

    def completed(self) -> list[tuple[int, BaseException | None]]:
        self.sync()
        return [(e[1], e[2]) for e in self.journal.of("completed")]

    def calls(self) -> list[tuple[str, frozenset[TopicPartition]]]:
        return [(e[0], e[1]) for e in self.journal.entries if e[0] != "completed"]


@pytest.fixture
def h() -> Iterator[Harness]:
    yield from _harness("classic")


@pytest.fixture(params=["classic", "consumer"])
def hp(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """The same dispatch under both ``group.protocol`` values (the consumer must behave the same)."""
    yield from _harness(str(request.param))


def _harness(protocol: str) -> Iterator[Harness]:
    harness = Harness(protocol)
    try:
        yield harness
    finally:
        harness.fake.left = True
        returns(lambda: harness.consumer.close(0.5), "close(0.5)")
        assert not harness.consumer._thread.alive


# ============================================================================================ 1. revoke
def test_revoke_requested_during_poll_returns_early_and_completes_at_start_of_next_poll(h: Harness) -> None:
    h.own(T0, T1, T2)
    parts = frozenset({T0, T1})
    # Released by the membership when poll N reaches it (on_app_poll), i.e. while poll N waits.
    h.fake.add_on_next_app_poll([CallbackNeeded(REVOKE, parts, seq=7)])

    # poll N returns early (it would block for LONG_POLL_S otherwise), reporting the request.
    records = returns(lambda: h.consumer.poll(LONG_POLL_S), "poll() with a revoke requested")

    assert records.to_be_revoked_partitions == parts
    assert h.calls() == []
    assert h.completed() == []
    assert h.consumer.to_be_revoked_partitions() == parts
    # From the request on, nothing more is fetched for them.
    assert all(h.consumer._subs.state(tp).pending_revocation for tp in parts)
    assert not h.consumer._subs.state(T2).pending_revocation

    records = h.consumer.poll(0)  # poll N+1: the revoke completes first thing
    assert h.calls() == [("revoked", parts)]
    assert h.completed() == [(7, None)]
    assert records.to_be_revoked_partitions == frozenset()
    entries = h.journal.entries
    assert entries.index(("revoked", parts)) < entries.index(("completed", 7, None))

    h.consumer.poll(0)
    assert h.calls() == [("revoked", parts)]
    assert h.completed() == [(7, None)]


def test_revoke_injected_before_poll_is_reported_by_that_poll_only(h: Harness) -> None:
    h.own(T0)
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    assert h.consumer.to_be_revoked_partitions() == frozenset()  # nothing ran before poll()

    assert h.consumer.poll(0).to_be_revoked_partitions == {T0}
    assert h.completed() == []
    assert h.calls() == []
    assert h.consumer.poll(0).to_be_revoked_partitions == frozenset()
    assert h.completed() == [(1, None)]
    assert h.calls() == [("revoked", frozenset({T0}))]


# ============================================================================================ 2. delay
def test_delay_revoke_postpones_by_exactly_one_poll_per_call(h: Harness) -> None:
    h.own(T0, T1)
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=3))
    assert h.consumer.poll(0).to_be_revoked_partitions == {T0}  # poll N: requested

    assert h.consumer.delay_revoke([T0]) is True
    assert h.consumer.delay_revoke([T0]) is True  # same interval: still one poll, not two
    assert h.consumer.to_be_revoked_partitions() == frozenset()  # delayed ones leave revoke-next
    records = h.consumer.poll(0)  # N+1: not completed
    assert h.calls() == []
    assert h.completed() == []
    assert records.to_be_revoked_partitions == {T0}

    assert h.consumer.delay_revoke([T0]) is True
    h.consumer.poll(0)  # N+2: delayed again
    assert h.calls() == []
    assert h.completed() == []

    h.consumer.poll(0)  # N+3: no delay this time -> completes
    assert h.calls() == [("revoked", frozenset({T0}))]
    assert h.completed() == [(3, None)]


def test_delay_revoke_of_a_partition_not_pending_returns_false(h: Harness) -> None:
    h.own(T0, T1)
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    h.consumer.poll(0)

    assert h.consumer.delay_revoke([T1]) is False  # owned, but no revoke requested
    assert h.consumer.delay_revoke([T0, T1]) is False  # all-or-nothing: T0 not delayed either
    assert h.consumer.delay_revoke([TopicPartition("other", 0)]) is False
    h.consumer.poll(0)
    assert h.calls() == [("revoked", frozenset({T0}))]
    assert h.completed() == [(1, None)]
    assert h.consumer.delay_revoke([T0]) is False  # already completed


# ========================================================================================== 3. KIP-429 order
def test_assign_waits_for_an_earlier_revoke_until_the_next_poll(h: Harness) -> None:
    h.own(T0, T1)
    h.inject(
        CallbackNeeded(REVOKE, frozenset({T0}), seq=1),
        AssignmentChanged(frozenset({T0, T1, T2}), awaiting_callback=frozenset({T2})),
        CallbackNeeded(ASSIGN, frozenset({T2}), seq=2),
    )
    assert h.consumer.poll(0).to_be_revoked_partitions == {T0}  # poll N
    assert h.calls() == []  # the ASSIGN waits behind the REVOKE requested in this poll
    assert h.consumer._subs.state(T2).awaiting_callback

    h.consumer.poll(0)  # N+1: revoke completes, then the assign runs
    assert h.calls() == [("revoked", frozenset({T0})), ("assigned", frozenset({T2}))]
    assert h.completed() == [(1, None), (2, None)]
    assert not h.consumer._subs.state(T2).awaiting_callback


def test_assign_does_not_wait_for_a_revoke_the_application_delays(h: Harness) -> None:
    """Issue 26 item 3: an unrelated delayed revoke does not hold new partitions back; their position is
    looked up only after their assigned callback ran."""
    h.own(T0, T1)
    h.inject(
        CallbackNeeded(REVOKE, frozenset({T0}), seq=1),
        AssignmentChanged(frozenset({T0, T1, T2}), awaiting_callback=frozenset({T2})),
        CallbackNeeded(ASSIGN, frozenset({T2}), seq=2),
    )
    h.consumer.poll(0)
    assert T2 not in h.consumer._subs.needs_position()  # not before its assigned callback
    assert h.consumer.delay_revoke([T0])
    h.consumer.poll(0)  # N+1: the assign runs although T0's revoke is delayed
    assert h.calls() == [("assigned", frozenset({T2}))]
    assert not h.consumer._subs.state(T2).awaiting_callback
    assert h.consumer.delay_revoke([T0])
    h.consumer.poll(0)
    h.consumer.poll(0)
    assert h.calls() == [("assigned", frozenset({T2})), ("revoked", frozenset({T0}))]
    assert h.completed() == [(2, None), (1, None)]


def test_assign_without_pending_revoke_runs_in_the_same_poll(h: Harness) -> None:
    h.own()
    h.fake.owned = frozenset({T0})
    h.inject(
        AssignmentChanged(frozenset({T0}), awaiting_callback=frozenset({T0})),
        CallbackNeeded(ASSIGN, frozenset({T0}), seq=1),
    )
    assert h.consumer._subs.state(T0).awaiting_callback
    h.consumer.poll(0)
    assert h.calls() == [("assigned", frozenset({T0}))]
    assert h.completed() == [(1, None)]
    assert not h.consumer._subs.state(T0).awaiting_callback


# ============================================================================================ 4. lost
def test_lost_runs_in_the_same_poll_and_resolves_a_pending_revoke(h: Harness) -> None:
    h.own(T0, T1)
    h.inject(
        CallbackNeeded(REVOKE, frozenset({T0, T1}), seq=1),
        CallbackNeeded(LOST, frozenset({T0}), seq=2),
    )
    records = h.consumer.poll(0)  # poll N
    assert h.calls() == [("lost", frozenset({T0}))]
    assert records.lost_partitions == {T0}
    assert records.to_be_revoked_partitions == {T1}
    assert h.completed() == [(2, None)]  # seq 1 still waits for T1
    assert h.consumer.delay_revoke([T0]) is False  # lost partitions cannot be delayed

    records = h.consumer.poll(0)  # N+1: lost reported for exactly one poll; T1's revoke completes
    assert records.lost_partitions == frozenset()
    assert h.calls() == [("lost", frozenset({T0})), ("revoked", frozenset({T1}))]
    assert h.completed() == [(2, None), (1, None)]


def test_lost_of_every_pending_partition_completes_the_revoke_without_its_callback(h: Harness) -> None:
    h.own(T0, T1)
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    h.consumer.poll(0)
    assert h.consumer.delay_revoke([T0])
    h.consumer.poll(0)  # revoke still pending (delayed)
    assert h.completed() == []
    assert h.consumer.delay_revoke([T0])  # the next poll's start-of-poll rules will not complete it

    h.inject(CallbackNeeded(LOST, frozenset({T0}), seq=2))
    records = h.consumer.poll(0)  # start of poll: the queued loss takes T0 off the revoke lists first
    assert records.lost_partitions == {T0}
    assert records.to_be_revoked_partitions == frozenset()
    assert h.calls() == [("lost", frozenset({T0}))]
    assert h.completed() == [(1, None), (2, None)]

    records = h.consumer.poll(0)
    assert records.lost_partitions == frozenset()
    assert h.calls() == [("lost", frozenset({T0}))]  # never a revoke callback for the lost partition
    assert h.completed() == [(1, None), (2, None)]


def test_a_loss_arriving_between_polls_supersedes_the_revoke_due_at_the_next_poll(h: Harness) -> None:
    """The max.poll.interval.ms interleaving: poll N reports an eager revoke of everything, the application
    then stops polling, the member leaves the group and the LOST arrives before poll N+1.  Poll N+1 runs
    only the lost callback: a revoked callback (in which the application commits) must not run for
    partitions another member may already own."""
    h.own(T0, T1)
    h.inject(CallbackNeeded(REVOKE, frozenset({T0, T1}), seq=1))
    records = h.consumer.poll(0)  # poll N
    assert records.to_be_revoked_partitions == {T0, T1}

    h.inject(CallbackNeeded(LOST, frozenset({T0, T1}), seq=2))
    records = h.consumer.poll(0)  # poll N+1
    assert h.calls() == [("lost", frozenset({T0, T1}))]
    assert records.lost_partitions == {T0, T1}
    assert records.to_be_revoked_partitions == frozenset()
    assert h.completed() == [(1, None), (2, None)]

    h.consumer.poll(0)
    assert h.calls() == [("lost", frozenset({T0, T1}))]


def test_the_poll_timer_is_reset_before_a_revoke_completes_at_the_start_of_poll(h: Harness) -> None:
    """As Java's pollHeartbeat before onJoinPrepare: the membership sees poll N+1 (its poll timer is reset)
    before the revoke due then completes, so a member whose poll timer expired while the application was
    away cannot be revoking partitions while it leaves the group."""
    h.own(T0, T1)
    h.inject(CallbackNeeded(REVOKE, frozenset({T0, T1}), seq=1))
    h.consumer.poll(0)  # poll N
    h.sync()  # poll N's own poll event has been handled
    polls_seen: list[int] = []
    h.listener.on_revoked = lambda: polls_seen.append(h.fake.app_polls)
    before = h.fake.app_polls
    h.consumer.poll(0)  # poll N+1
    assert h.calls() == [("revoked", frozenset({T0, T1}))]
    assert polls_seen and polls_seen[0] > before


def test_a_loss_declared_just_before_the_poll_timer_reset_supersedes_the_revoke(h: Harness) -> None:
    """The other side of the race: the network thread had not yet posted the loss when poll N+1 started
    (it acted on the expired poll timer just before it handled the poll event).  The loss still wins."""
    h.own(T0, T1)
    h.inject(CallbackNeeded(REVOKE, frozenset({T0, T1}), seq=1))
    h.consumer.poll(0)  # poll N
    h.sync()

    def leave_first() -> None:  # on the network thread: the expiry is acted on before the poll event
        h.fake.add([CallbackNeeded(LOST, frozenset({T0, T1}), seq=2)])
        h.consumer._drain_membership_nt(0)

    h.fake.before_app_poll = leave_first
    records = h.consumer.poll(0)  # poll N+1
    assert h.calls() == [("lost", frozenset({T0, T1}))]
    assert records.lost_partitions == {T0, T1}
    assert h.completed() == [(1, None), (2, None)]


def test_lost_poll_returns_early(h: Harness) -> None:
    h.own(T0)
    h.fake.add_on_next_app_poll([CallbackNeeded(LOST, frozenset({T0}), seq=4)])
    records = returns(lambda: h.consumer.poll(LONG_POLL_S), "poll() with partitions lost")
    assert records.lost_partitions == {T0}
    assert h.completed() == [(4, None)]


# ============================================================================================ 5. exceptions
def test_listener_exception_raised_from_poll_after_completion_reported(h: Harness) -> None:
    h.own(T0, T1)
    boom = RuntimeError("revoke failed")
    h.listener.raise_on["revoked"] = boom
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=5))
    h.consumer.poll(0)

    with pytest.raises(RuntimeError) as info:
        h.consumer.poll(0)
    assert info.value is boom
    assert h.completed() == [(5, boom)]  # the membership was told, with the error, before poll raised

    records = h.consumer.poll(0)  # the next poll works
    assert records.to_be_revoked_partitions == frozenset()
    assert h.calls() == [("revoked", frozenset({T0}))]
    assert h.completed() == [(5, boom)]


def test_assign_listener_exception_is_reported_and_raised(h: Harness) -> None:
    boom = ValueError("assign failed")
    h.listener.raise_on["assigned"] = boom
    h.own(T0)
    h.inject(CallbackNeeded(ASSIGN, frozenset({T0}), seq=9))
    with pytest.raises(ValueError) as info:
        h.consumer.poll(0)
    assert info.value is boom
    assert h.completed() == [(9, boom)]
    h.consumer.poll(0)
    assert h.calls() == [("assigned", frozenset({T0}))]


# ============================================================================================ 6. outside poll
def test_callbacks_arriving_during_another_call_are_deferred_to_the_next_poll(h: Harness) -> None:
    h.own(T0, T1)
    h.consumer.poll(0)
    h.inject(
        CallbackNeeded(REVOKE, frozenset({T0}), seq=1),
        CallbackNeeded(LOST, frozenset({T1}), seq=2),
    )
    # group_metadata() waits on the network thread and so processes background events meanwhile.
    assert h.consumer.group_metadata().member_id == "member-1"
    assert h.consumer._background.empty()  # they were taken off the queue ...
    assert h.calls() == []  # ... but not run inside that call
    assert h.completed() == []
    assert h.consumer.to_be_revoked_partitions() == frozenset()
    assert h.consumer.lost_partitions() == frozenset()
    assert h.consumer.position(T0) == 0  # another background-draining call: still nothing runs
    assert h.calls() == []

    records = h.consumer.poll(0)
    assert records.to_be_revoked_partitions == {T0}  # requested in this poll, completes in the next
    assert records.lost_partitions == {T1}
    assert h.calls() == [("lost", frozenset({T1}))]
    assert h.completed() == [(2, None)]

    h.consumer.poll(0)
    assert h.calls() == [("lost", frozenset({T1})), ("revoked", frozenset({T0}))]
    assert h.completed() == [(2, None), (1, None)]


def test_assign_arriving_outside_poll_runs_in_the_next_poll(h: Harness) -> None:
    h.own(T0)
    h.consumer.poll(0)
    h.inject(CallbackNeeded(ASSIGN, frozenset({T0}), seq=1))
    h.consumer.group_metadata()
    assert h.calls() == []
    h.consumer.poll(0)
    assert h.calls() == [("assigned", frozenset({T0}))]
    assert h.completed() == [(1, None)]


# ============================================================================================ 7. view expiry
@pytest.mark.parametrize("kind", [REVOKE, ASSIGN, LOST])
def test_view_expires_after_the_callback_returned(h: Harness, kind: CallbackKind) -> None:
    h.own(T0)
    seen_inside: list[frozenset[TopicPartition]] = []
    original = h.listener._log

    def log_and_use(name: str, partitions: Collection[TopicPartition], consumer: RebalanceConsumer) -> None:
        seen_inside.append(consumer.assignment())  # valid while the callback runs
        original(name, partitions, consumer)

    h.listener._log = log_and_use  # type: ignore[method-assign]
    h.inject(CallbackNeeded(kind, frozenset({T0}), seq=1))
    h.consumer.poll(0)
    h.consumer.poll(0)
    assert len(h.listener.views) == 1
    assert seen_inside == [frozenset({T0})]
    view = h.listener.views[0]
    with pytest.raises(IllegalStateError, match="expired"):
        view.assignment()
    with pytest.raises(IllegalStateError):
        view.commit_sync({T0: 1})


def test_view_expires_even_when_the_callback_raised(h: Harness) -> None:
    h.own(T0)
    h.listener.raise_on["lost"] = RuntimeError("x")
    h.inject(CallbackNeeded(LOST, frozenset({T0}), seq=1))
    with pytest.raises(RuntimeError):
        h.consumer.poll(0)
    with pytest.raises(IllegalStateError):
        h.listener.views[0].paused()


# ============================================================================================ close
def test_close_completes_a_pending_revoke_and_leaves(h: Harness) -> None:
    h.own(T0)
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    h.consumer.poll(0)
    assert h.consumer.delay_revoke([T0])
    h.consumer.close(0.5)
    assert h.calls() == [("revoked", frozenset({T0}))]
    assert [(e[1], e[2]) for e in h.journal.of("completed")] == [(1, None)]
    assert h.fake.leaves == 1


# ============================================================================ issue 14: callback failures
def test_raising_revoke_callback_still_runs_the_assign_callback_and_raises_once(hp: Harness) -> None:
    """Item 2 (KIP-1306 "Exception Handling"), both protocols: the rebalance completes regardless, the
    exception is raised from poll() once, the other callbacks run, the consumer stays usable."""
    hp.own(T0, T1)
    boom = RuntimeError("revoke failed")
    hp.listener.raise_on["revoked"] = boom
    hp.inject(
        CallbackNeeded(REVOKE, frozenset({T0}), seq=1),
        AssignmentChanged(frozenset({T0, T1, T2}), awaiting_callback=frozenset({T2})),
        CallbackNeeded(ASSIGN, frozenset({T2}), seq=2),
    )
    hp.consumer.poll(0)  # revoke requested
    with pytest.raises(RuntimeError) as info:
        hp.consumer.poll(0)  # revoke completes (raising), the assign runs all the same
    assert info.value is boom
    assert hp.calls() == [("revoked", frozenset({T0})), ("assigned", frozenset({T2}))]
    assert hp.completed() == [(1, boom), (2, None)]
    assert not hp.consumer._subs.state(T2).awaiting_callback
    for _ in range(3):
        hp.consumer.poll(0)  # raised once only; nothing re-invoked
    assert hp.calls() == [("revoked", frozenset({T0})), ("assigned", frozenset({T2}))]


def test_raising_assign_callback_still_makes_the_partitions_fetchable(hp: Harness) -> None:
    hp.own()
    hp.fake.owned = frozenset({T0})
    boom = ValueError("assign failed")
    hp.listener.raise_on["assigned"] = boom
    hp.inject(
        AssignmentChanged(frozenset({T0}), awaiting_callback=frozenset({T0})),
        CallbackNeeded(ASSIGN, frozenset({T0}), seq=4),
    )
    with pytest.raises(ValueError) as info:
        hp.consumer.poll(0)
    assert info.value is boom
    assert hp.completed() == [(4, boom)]
    # Fetchable now: no longer awaiting its callback (under KIP-848 they used to stay blocked forever).
    assert not hp.consumer._subs.state(T0).awaiting_callback
    hp.consumer.poll(0)
    assert hp.calls() == [("assigned", frozenset({T0}))]


# ============================================================================ issue 14: stale assign, order
def test_assign_waiting_for_a_revoke_is_dropped_when_the_generation_is_reset(h: Harness) -> None:
    """Item 3: an ASSIGN queued behind a REVOKE, then a generation reset (LOST of everything):
    the lost callback runs and the stale assign never does (nor the assignor's on_assignment)."""
    h.own(T0, T1)
    hook_calls: list[str] = []
    h.inject(
        CallbackNeeded(REVOKE, frozenset({T0}), seq=1),
        AssignmentChanged(frozenset({T0, T1, T2}), awaiting_callback=frozenset({T2})),
        CallbackNeeded(ASSIGN, frozenset({T2}), seq=2, on_assignment=lambda: hook_calls.append("x")),
        AssignmentChanged(frozenset()),
        CallbackNeeded(LOST, frozenset({T0, T1, T2}), seq=3),
    )
    records = h.consumer.poll(0)
    assert records.lost_partitions == {T0, T1, T2}
    for _ in range(2):
        h.consumer.poll(0)
    assert h.calls() == [("lost", frozenset({T0, T1, T2}))]
    assert hook_calls == []
    assert sorted(seq for seq, _ in h.completed()) == [1, 2, 3]  # the membership does not wait for it


def test_assign_partly_lost_runs_for_the_partitions_still_owned(h: Harness) -> None:
    h.own(T0, T1)
    h.inject(
        CallbackNeeded(REVOKE, frozenset({T0}), seq=1),
        AssignmentChanged(frozenset({T0, T1, T2}), awaiting_callback=frozenset({T1, T2})),
        CallbackNeeded(ASSIGN, frozenset({T1, T2}), seq=2),
        AssignmentChanged(frozenset({T0, T1})),
        CallbackNeeded(LOST, frozenset({T2}), seq=3),
    )
    h.consumer.poll(0)  # the lost callback; T0's revoke completes at the start of the next poll
    h.consumer.poll(0)
    assert h.calls() == [
        ("lost", frozenset({T2})),
        ("revoked", frozenset({T0})),
        ("assigned", frozenset({T1})),
    ]


def test_on_assignment_runs_after_the_revoke_and_before_assigned(h: Harness) -> None:
    """Item 5 (KIP-429): revoked < Assignor#onAssignment < assigned; and the assignor's on_assignment runs on
    the application thread."""
    h.own(T0, T1)
    threads: list[str] = []

    def on_assignment() -> None:
        h.journal.add("on_assignment", frozenset())
        threads.append(threading.current_thread().name)

    h.inject(
        CallbackNeeded(REVOKE, frozenset({T0}), seq=1),
        AssignmentChanged(frozenset({T0, T1, T2}), awaiting_callback=frozenset({T2})),
        CallbackNeeded(ASSIGN, frozenset({T2}), seq=2, on_assignment=on_assignment),
    )
    h.consumer.poll(0)
    assert h.calls() == []  # on_assignment waits with the assign
    h.consumer.poll(0)
    assert h.calls() == [
        ("revoked", frozenset({T0})),
        ("on_assignment", frozenset()),
        ("assigned", frozenset({T2})),
    ]
    assert threads == [threading.current_thread().name]


def test_on_assignment_error_is_raised_from_poll_and_the_assign_still_runs(h: Harness) -> None:
    h.own()
    h.fake.owned = frozenset({T0})
    boom = RuntimeError("assignor state")

    def on_assignment() -> None:
        raise boom

    h.inject(
        AssignmentChanged(frozenset({T0}), awaiting_callback=frozenset({T0})),
        CallbackNeeded(ASSIGN, frozenset({T0}), seq=1, on_assignment=on_assignment),
    )
    with pytest.raises(RuntimeError) as info:
        h.consumer.poll(0)
    assert info.value is boom
    assert h.calls() == [("assigned", frozenset({T0}))]
    assert h.completed() == [(1, boom)]
    assert not h.consumer._subs.state(T0).awaiting_callback


# ============================================================================ issue 14: the lost set
def test_lost_callback_gets_partitions_whose_delayed_revoke_already_ran(h: Harness) -> None:
    """Item 6 (KIP-1306, as Java): on_partitions_lost gets every partition the member owned, including one
    whose revoke callback already ran; KIP-983's lost_partitions() lists only the ones still held."""
    h.own(T0, T1)
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    h.consumer.poll(0)
    assert h.consumer.delay_revoke([T0])
    h.consumer.poll(0)
    h.consumer.poll(0)  # the delayed revoke completes
    assert h.calls() == [("revoked", frozenset({T0}))]
    # The member was fenced before it acted on that completion: it still owned T0.
    h.inject(AssignmentChanged(frozenset()), CallbackNeeded(LOST, frozenset({T0, T1}), seq=2))
    records = h.consumer.poll(0)
    assert h.calls() == [("revoked", frozenset({T0})), ("lost", frozenset({T0, T1}))]
    assert records.lost_partitions == {T1}
    assert h.consumer.lost_partitions() == {T1}


# ============================================================================ issue 14: client_instance_id
def test_client_instance_id_through_the_view_raises_when_telemetry_is_off() -> None:
    """Item 10 (KIP-1306 lists clientInstanceId on the view): with enable.metrics.push=false it raises
    IllegalStateError as Java does, on the consumer and on the view inside a callback."""
    consumer = Consumer(
        {
            "bootstrap.servers": "127.0.0.1:1",
            "group.id": "g",
            "enable.auto.commit": False,
            "enable.metrics.push": False,
        }
    )
    harness_journal = Journal()
    fake = FakeMembership(harness_journal)
    consumer.membership = fake
    seen: list[BaseException] = []

    class L(RebalanceListenerBase):
        def on_partitions_assigned(
            self, partitions: Collection[TopicPartition], view: RebalanceConsumer
        ) -> None:
            try:
                view.client_instance_id(0.1)
            except IllegalStateError as exc:
                seen.append(exc)

    try:
        consumer.set_rebalance_listener(L())
        with pytest.raises(IllegalStateError, match=r"enable\.metrics\.push"):
            consumer.client_instance_id(0.1)

        def run(now: int) -> None:
            consumer._subs.subscribe(Subscription(topics=frozenset({"t"})))

        consumer._thread.call_sync(run, 5.0)
        fake.add([CallbackNeeded(ASSIGN, frozenset(), seq=1)])
        consumer._thread.call_sync(consumer._drain_membership_nt, 5.0)
        consumer.poll(0)
        assert len(seen) == 1 and "enable.metrics.push" in str(seen[0])
    finally:
        consumer.close(0.5)


def test_custom_assignor_task_runs_on_the_application_thread_inside_poll(h: Harness) -> None:
    """Item 5: a custom assignor's assign() (AppThreadTask) runs on the application thread, inside poll(),
    never inside another call; its outcome goes back to the network thread."""
    h.own(T0)
    ran: list[str] = []
    reported: list[tuple[object, BaseException | None, str]] = []

    def run() -> object:
        ran.append(threading.current_thread().name)
        return {"m1": "assignment"}

    def done(result: object, error: BaseException | None, now_ms: int) -> None:
        reported.append((result, error, threading.current_thread().name))

    h.inject(AppThreadTask(run, done, "assignor 'x' assign()"))
    h.consumer.assignment()  # another call: nothing runs
    assert ran == []
    h.consumer.poll(0)
    h.sync()
    assert ran == [threading.current_thread().name]
    assert len(reported) == 1
    result, error, thread = reported[0]
    assert result == {"m1": "assignment"} and error is None
    assert thread.startswith("kafka-handoff-network")


def test_custom_assignor_task_error_goes_back_to_the_membership(h: Harness) -> None:
    h.own(T0)
    boom = RuntimeError("assignor bug")
    reported: list[BaseException | None] = []

    def run() -> object:
        raise boom

    h.inject(AppThreadTask(run, lambda result, error, now: reported.append(error)))
    h.consumer.poll(0)  # the error is the membership's to report (as a MembershipError), not raised here
    h.sync()
    assert reported == [boom]
