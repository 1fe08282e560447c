"""The membership core both group memberships derive from (group/membership_core.py), without a broker."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from rebalance_sink import RecordingSink

from kafka_handoff.errors import IllegalStateError
from kafka_handoff.group import classic_membership, consumer_membership
from kafka_handoff.group.assignors import RangeAssignor
from kafka_handoff.group.classic_membership import ClassicMembership
from kafka_handoff.group.consumer_membership import ConsumerMembership
from kafka_handoff.group.membership import CallbackKind, CallbackNeeded, CoordinatorNeeded, Membership
from kafka_handoff.group.membership_core import (
    CallbackLedger,
    CoordinatorLatch,
    MembershipCore,
    PollTimer,
    RebalanceTracker,
    RetryBackoff,
)
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.requests import FakeClock
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit

ClassicState = classic_membership.MemberState
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def _classic() -> ClassicMembership:
    return ClassicMembership("g", [RangeAssignor()])


def test_poll_timer_not_started_never_expires() -> None:
    timer = PollTimer(1000)
    assert timer.remaining_ms(10_000) is None
    assert not timer.expired(10_000)
    timer.polled(10_000)
    assert timer.remaining_ms(10_400) == 600
    assert not timer.expired(10_999)
    assert timer.expired(11_000)


def test_poll_timer_stands_still_across_nested_blocking_calls() -> None:
    timer = PollTimer(1000, last_poll_ms=0)
    timer.app_call(True, 500)
    assert timer.paused
    timer.app_call(True, 700)  # a nested call: the pause spans both
    timer.app_call(False, 1500)
    assert timer.paused
    timer.app_call(False, 2500)  # the outermost call ends: 2000 ms did not count
    assert not timer.paused
    assert timer.last_poll_ms == 2000
    assert not timer.expired(2999)
    assert timer.expired(3000)


@pytest.mark.parametrize(
    ("states", "table"),
    [
        (list(classic_membership.MemberState), classic_membership.VALID_PREVIOUS_STATES),
        (list(consumer_membership.MemberState), consumer_membership.VALID_PREVIOUS_STATES),
    ],
    ids=["classic", "consumer"],
)
def test_every_state_has_a_row_in_the_transition_table(states: list[Any], table: Mapping[Any, Any]) -> None:
    assert set(table) == set(states)
    assert all(previous <= set(states) for previous in table.values())


def test_classic_refuses_a_transition_its_table_does_not_allow() -> None:
    m = _classic()
    assert m.state is ClassicState.UNJOINED
    with pytest.raises(IllegalStateError, match="UNJOINED -> STABLE"):
        m._set_state(ClassicState.STABLE)
    assert m.state is ClassicState.UNJOINED
    assert m._set_state(ClassicState.PREPARING_REBALANCE) is ClassicState.UNJOINED
    with pytest.raises(IllegalStateError, match="PREPARING_REBALANCE -> STABLE"):
        m._set_state(ClassicState.STABLE)


def test_commits_wait_for_a_classic_rebalance_but_not_for_a_kip848_member() -> None:
    classic: Membership = _classic()
    consumer: Membership = ConsumerMembership("g")
    assert classic.generation_if_stable() is None  # not STABLE: commits wait
    assert consumer.generation_if_stable() == consumer.group_metadata()


def _consumer() -> ConsumerMembership:
    return ConsumerMembership("g")


@pytest.mark.parametrize("make", [_classic, _consumer], ids=["classic", "consumer"])
def test_a_failure_against_an_older_coordinator_does_not_invalidate_the_current_one(
    make: Callable[[], ClassicMembership | ConsumerMembership],
) -> None:
    m = make()
    assert isinstance(m, MembershipCore)  # the latch is the shared one
    m.on_coordinator(1, 0, epoch=1)
    m.on_coordinator(2, 0, epoch=2)
    m.drain_events()
    m._mark_coordinator_unknown("old failure", 1)
    assert m.coordinator_id == 2
    assert m.drain_events() == []
    m._mark_coordinator_unknown("current failure", 2)
    assert m.coordinator_id is None
    assert m.drain_events() == [CoordinatorNeeded("current failure", epoch=2)]
    m._mark_coordinator_unknown("again", 2)  # already asked: one CoordinatorNeeded per loss
    assert m.drain_events() == []


# --- the small classes the core owns (written once, used by the classic, KIP-848 and share members) ---------


def test_poll_timer_expires_on_the_fake_clock_and_restarts_on_poll() -> None:
    clock = FakeClock()
    timer = PollTimer(5000, last_poll_ms=clock.now_ms())
    clock.advance(4999)
    assert not timer.expired(clock.now_ms())
    timer.polled(clock.now_ms())
    clock.advance(4999)
    assert timer.remaining_ms(clock.now_ms()) == 1
    clock.advance(1)
    assert timer.expired(clock.now_ms())


def test_retry_backoff_doubles_per_failure_up_to_the_max_and_resets_on_success() -> None:
    clock = FakeClock()
    retry = RetryBackoff(ExponentialBackoff(100, 1000, jitter=0))
    assert retry.remaining_ms(clock.now_ms()) == 0
    waits = []
    for _ in range(6):
        waits.append(retry.failed(clock.now_ms()) - clock.now_ms())
    assert waits == [100, 200, 400, 800, 1000, 1000]
    assert retry.failures == 6
    clock.advance(400)
    assert retry.remaining_ms(clock.now_ms()) == 600
    retry.reset()
    assert retry.failures == 0
    assert retry.remaining_ms(clock.now_ms()) == 0
    assert retry.failed(clock.now_ms()) == clock.now_ms() + 100


def test_coordinator_latch_asks_once_per_loss() -> None:
    latch = CoordinatorLatch()
    assert latch.need("first") == CoordinatorNeeded("first")
    assert latch.need("again") is None  # already asked
    assert latch.found(3, 1)
    assert latch.node_id == 3
    assert not latch.found(3, 1)  # the same one announced again
    latch.lost()  # marked unknown by the discovery: the next need asks again
    assert latch.node_id is None
    assert latch.need("gone") == CoordinatorNeeded("gone")


def test_coordinator_latch_same_coordinator_announced_again_changes_nothing() -> None:
    latch = CoordinatorLatch()
    assert latch.found(1, 5)
    assert not latch.found(1, 5)
    assert latch.found(1, 6)  # rediscovered: a new discovery epoch
    assert latch.found(2, None)  # no epoch given: the next one
    assert latch.epoch == 7


def test_coordinator_latch_failure_of_the_current_coordinator_when_already_unknown_asks_once() -> None:
    latch = CoordinatorLatch()
    latch.found(1, 4)
    assert latch.failed("stale", 3, "g") is None  # an older coordinator's failure
    assert latch.node_id == 1
    assert latch.failed("broken", 4, "g") == CoordinatorNeeded("broken", epoch=4)
    assert latch.node_id is None
    assert latch.failed("broken again", 4, "g") is None  # asked already
    latch.lost()
    assert latch.failed("after the discovery forgot it", 4, "g") == CoordinatorNeeded(
        "after the discovery forgot it"
    )


def test_callback_ledger_numbers_callbacks_and_keeps_what_waits_for_them() -> None:
    emitted: list[CallbackNeeded] = []
    ledger: CallbackLedger[str] = CallbackLedger(emitted.append)
    a = ledger.ask(CallbackKind.REVOKE, frozenset({TP0}), "reassigned", "revoke-entry")
    b = ledger.ask(CallbackKind.LOST, frozenset({TP1}), "gone")  # not waited for
    c = ledger.ask(CallbackKind.ASSIGN, frozenset(), "assigned", "assign-entry")
    assert [e.seq for e in emitted] == [1, 2, 3]
    assert emitted == [a, b, c]
    assert a.kind is CallbackKind.REVOKE and a.partitions == frozenset({TP0}) and a.reason == "reassigned"
    assert len(ledger) == 2
    assert ledger.items() == [(1, "revoke-entry"), (3, "assign-entry")]
    assert ledger.complete(b.seq) is None
    assert ledger.complete(a.seq) == "revoke-entry"
    assert ledger.complete(a.seq) is None  # a second completion is ignored
    ledger.drop(c.seq)
    assert ledger.complete(c.seq) is None  # superseded
    ledger.ask(CallbackKind.ASSIGN, frozenset(), "again", "x")
    ledger.clear()
    assert len(ledger) == 0
    assert emitted[-1].seq == 4  # numbers are never reused


def test_rebalance_tracker_reports_one_open_rebalance() -> None:
    clock = FakeClock(0)
    sink = RecordingSink()
    tracker = RebalanceTracker(sink)
    tracker.completed(clock.now_ms())  # none open: nothing to report
    tracker.failed_if_open(clock.now_ms(), ends=True)
    assert sink.calls == []
    tracker.begin(clock.advance(10))
    tracker.failed(clock.advance(10), ends=False)  # a failed attempt of the same rebalance
    tracker.begin(clock.advance(10))  # the retry belongs to it: no new start
    assert tracker.open
    tracker.completed(clock.advance(10))
    assert not tracker.open
    tracker.started(clock.advance(10))
    tracker.started(clock.advance(10))  # the KIP-848 member reports every entry to RECONCILING
    tracker.failed_if_open(clock.advance(10), ends=True)
    assert not tracker.open
    assert sink.calls == [
        ("started", 10),
        ("failed", 20),
        ("completed", 40),
        ("started", 50),
        ("started", 60),
        ("failed", 70),
    ]


def test_rebalance_tracker_without_a_sink_still_tracks() -> None:
    tracker = RebalanceTracker(None)
    tracker.begin(0)
    assert tracker.open
    tracker.completed(1)
    assert not tracker.open


@pytest.mark.parametrize("make", [_classic, _consumer], ids=["classic", "consumer"])
def test_both_memberships_ask_for_the_coordinator_once_until_it_is_found(
    make: Callable[[], ClassicMembership | ConsumerMembership],
) -> None:
    m = make()
    m._need_coordinator("needed")
    m._need_coordinator("still needed")
    assert m.drain_events() == [CoordinatorNeeded("needed")]
    m.on_coordinator(1, 0, epoch=1)
    m.on_coordinator(None, 0, epoch=1)  # lost: asking again is allowed
    m._need_coordinator("lost")
    assert m.drain_events() == [CoordinatorNeeded("lost")]


def test_classic_leave_phases_have_a_transition_table_too() -> None:
    table = classic_membership.LEAVE_PREVIOUS_PHASES
    phases = set(classic_membership.LeavePhase)
    assert set(table) == phases
    assert all(previous <= phases for previous in table.values())
    m = _classic()
    m.leave(0)  # never joined: nothing to send, the leave is done at once (NONE -> PREPARING -> DONE)
    assert m.left
    with pytest.raises(IllegalStateError, match="done -> sending"):
        m._leaving.to(classic_membership.LeavePhase.SENDING)
