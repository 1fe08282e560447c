"""The membership core both group memberships derive from (group/membership_core.py), without a broker."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from kafka_handoff.errors import IllegalStateError
from kafka_handoff.group import classic_membership, consumer_membership
from kafka_handoff.group.assignors import RangeAssignor
from kafka_handoff.group.classic_membership import ClassicMembership
from kafka_handoff.group.consumer_membership import ConsumerMembership
from kafka_handoff.group.membership import CoordinatorNeeded, Membership
from kafka_handoff.group.membership_core import MembershipCore, PollTimer

pytestmark = pytest.mark.unit

ClassicState = classic_membership.MemberState


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
