"""SubscriptionState: seek/reset epochs, fetchable rules, subscribe/assign exclusion, pause bookkeeping."""

from __future__ import annotations

import re

import pytest

from kafka_handoff.consumer.subscription import FetchPosition, SubscriptionState, SubscriptionType
from kafka_handoff.errors import IllegalStateError
from kafka_handoff.group.membership import Subscription
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit

A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
B0 = TopicPartition("b", 0)


def assigned(*parts: TopicPartition, reset: str = "latest") -> SubscriptionState:
    subs = SubscriptionState(reset)
    subs.assign_from_user(parts)
    return subs


# ---------------------------------------------------------------------------------------------- epochs


def test_new_partition_needs_committed_position_first() -> None:
    subs = assigned(A0, reset="earliest")
    assert subs.position(A0) is None
    assert subs.needs_position() == {A0: ("committed", 0)}
    assert subs.fetchable() == {}


def test_seek_sets_position_clears_reset_and_bumps_epoch() -> None:
    subs = assigned(A0)
    subs.seek(A0, 42, leader_epoch=3)
    st = subs.state(A0)
    assert st.position == FetchPosition(42, 3)
    assert st.reset_strategy is None
    assert st.position_epoch == 1
    assert subs.needs_position() == {}
    subs.seek(A0, 7)
    assert subs.state(A0).position_epoch == 2


def test_request_reset_drops_position_and_bumps_epoch() -> None:
    subs = assigned(A0)
    subs.seek(A0, 10)
    subs.request_reset(A0, "earliest")
    st = subs.state(A0)
    assert st.position is None
    assert st.position_epoch == 2
    assert subs.needs_position() == {A0: ("earliest", 2)}


def test_lookup_result_applies_only_for_the_epoch_it_was_started_for() -> None:
    subs = assigned(A0)
    subs.request_reset(A0, "earliest")
    epoch = subs.state(A0).position_epoch
    # A seek while the lookup was in flight wins.
    subs.seek(A0, 99)
    assert not subs.maybe_seek_unvalidated(A0, 5, epoch, "earliest")
    assert subs.position(A0) == FetchPosition(99)
    # A current lookup applies and bumps the epoch (fetches for the older state get dropped).
    subs.request_reset(A0, "latest")
    epoch = subs.state(A0).position_epoch
    assert not subs.maybe_seek_unvalidated(A0, 5, epoch, "earliest")  # wrong strategy
    assert subs.maybe_seek_unvalidated(A0, 5, epoch, "latest")
    assert subs.position(A0) == FetchPosition(5)
    assert subs.state(A0).position_epoch == epoch + 1


def test_reset_decided_by_the_network_thread_never_undoes_a_later_seek() -> None:
    """The network thread decided a reset at one position epoch; a seek() since (e.g. right after assign())
    stands, and the partition is not reported without an offset."""
    subs = assigned(A0, reset="none")
    ((strategy, epoch),) = subs.needs_position().values()
    assert strategy == "committed"
    subs.seek(A0, 900)
    assert subs.maybe_request_reset(A0, epoch, "none") is None
    assert subs.position(A0) == FetchPosition(900)
    assert subs.partitions_without_offset() == frozenset()
    assert subs.maybe_request_reset(B0, 0, "none") is None  # not assigned: nothing to do, no error
    # At the current epoch it applies, like request_reset(), and returns the new epoch.
    current = subs.state(A0).position_epoch
    assert subs.maybe_request_reset(A0, current, "none") == current + 1
    assert subs.position(A0) is None
    assert subs.partitions_without_offset() == {A0}
    assert subs.needs_position() == {A0: ("none", current + 1)}


def test_lookup_result_for_unassigned_partition_is_ignored() -> None:
    subs = assigned(A0)
    assert not subs.maybe_seek_unvalidated(B0, 5, 0, "committed")


def test_advance_only_for_current_epoch_and_keeps_leader_epoch() -> None:
    subs = assigned(A0)
    subs.seek(A0, 10, leader_epoch=4)
    epoch = subs.state(A0).position_epoch
    assert subs.advance(A0, epoch, 20, None)
    assert subs.position(A0) == FetchPosition(20, 4)
    assert subs.advance(A0, epoch, 25, 6)
    assert subs.position(A0) == FetchPosition(25, 6)
    assert subs.state(A0).position_epoch == epoch  # advancing is not a seek
    assert not subs.advance(A0, epoch - 1, 30, None)
    assert subs.position(A0) == FetchPosition(25, 6)
    assert not subs.advance(B0, 0, 1, None)


def test_advance_without_position_does_nothing() -> None:
    subs = assigned(A0)
    assert not subs.advance(A0, 0, 5, None)
    assert subs.position(A0) is None


# ---------------------------------------------------------------------------------------------- fetchable


def test_fetchable_requires_position_and_no_blocking_flag() -> None:
    subs = SubscriptionState("latest")
    subs.subscribe(Subscription(topics=frozenset({"a", "b"})))
    subs.set_group_assignment([A0, A1, B0], awaiting=[B0])
    for tp in (A0, A1, B0):
        subs.seek(tp, 1)
    assert set(subs.fetchable()) == {A0, A1}  # B0 waits for its assigned callback
    subs.clear_awaiting_callback([B0])
    assert set(subs.fetchable()) == {A0, A1, B0}
    subs.pause([A0])
    subs.mark_pending_revocation([A1])
    assert set(subs.fetchable()) == {B0}
    assert subs.fetchable()[B0] == (FetchPosition(1), subs.state(B0).position_epoch)
    subs.request_reset(B0, "earliest")
    assert subs.fetchable() == {}


def test_pending_revocation_partition_does_not_need_a_position() -> None:
    subs = SubscriptionState("latest")
    subs.subscribe(Subscription(topics=frozenset({"a"})))
    subs.set_group_assignment([A0, A1], awaiting=[])
    subs.mark_pending_revocation([A1])
    assert set(subs.needs_position()) == {A0}


def test_position_asked_for_a_partition_pending_revocation_is_initialised() -> None:
    # A revoke delayed by delay_revoke() can last: position() of such a partition must not wait it out.
    subs = SubscriptionState("latest")
    subs.subscribe(Subscription(topics=frozenset({"a"})))
    subs.set_group_assignment([A0, A1], awaiting=[])
    subs.mark_pending_revocation([A1])
    subs.request_position(A1)
    assert set(subs.needs_position()) == {A0, A1}


def test_all_consumed_lists_positions_only() -> None:
    subs = assigned(A0, A1)
    subs.seek(A1, 8)
    assert subs.all_consumed() == {A1: FetchPosition(8)}


def test_watermarks_ignore_unknown_values_and_unassigned_partitions() -> None:
    subs = assigned(A0)
    subs.update_watermarks(A0, 100, 90, 3)
    subs.update_watermarks(A0, -1, -1, -1)
    subs.update_watermarks(B0, 5, 5, 5)
    st = subs.state(A0)
    assert (st.high_watermark, st.last_stable_offset, st.log_start_offset) == (100, 90, 3)


# ---------------------------------------------------------------------------------------------- exclusion


def test_subscribe_then_assign_is_refused() -> None:
    subs = SubscriptionState("latest")
    subs.subscribe(Subscription(topics=frozenset({"a"})))
    with pytest.raises(IllegalStateError, match="mutually exclusive"):
        subs.assign_from_user([A0])
    assert subs.type is SubscriptionType.AUTO_TOPICS


def test_assign_then_subscribe_and_pattern_are_refused() -> None:
    subs = assigned(A0)
    with pytest.raises(IllegalStateError, match="unsubscribe"):
        subs.subscribe(Subscription(topics=frozenset({"a"})))
    with pytest.raises(IllegalStateError):
        subs.subscribe(Subscription(pattern=re.compile("a.*")))
    assert subs.type is SubscriptionType.USER_ASSIGNED
    assert subs.assigned() == {A0}


def test_topics_then_pattern_is_refused() -> None:
    subs = SubscriptionState("latest")
    subs.subscribe(Subscription(topics=frozenset({"a"})))
    with pytest.raises(IllegalStateError):
        subs.subscribe(Subscription(pattern=re.compile("a.*")))
    subs.subscribe(Subscription(topics=frozenset({"b"})))  # same kind: allowed
    assert subs.subscription.topics == frozenset({"b"})


def test_unsubscribe_allows_switching_and_clears_everything() -> None:
    subs = assigned(A0)
    subs.seek(A0, 3)
    version = subs.version
    subs.unsubscribe()
    assert subs.type is SubscriptionType.NONE
    assert subs.assigned() == frozenset()
    assert subs.version > version
    subs.subscribe(Subscription(topics=frozenset({"a"})))
    assert subs.has_auto_assignment


def test_assigning_nothing_unsubscribes() -> None:
    subs = assigned(A0)
    subs.assign_from_user([])
    assert subs.type is SubscriptionType.NONE
    subs.subscribe(Subscription(topics=frozenset({"a"})))  # no longer exclusive


# ---------------------------------------------------------------------------------------------- assignment


def test_reassignment_keeps_state_of_retained_partitions() -> None:
    subs = assigned(A0, A1)
    subs.seek(A0, 12)
    subs.pause([A0])
    subs.assign_from_user([A0, B0])
    assert subs.position(A0) == FetchPosition(12)
    assert subs.paused() == {A0}
    assert subs.needs_position() == {B0: ("committed", 0)}


def test_pause_flag_cleared_when_partition_leaves_assignment() -> None:
    subs = assigned(A0, A1)
    subs.seek(A0, 12)
    subs.pause([A0, A1])
    subs.assign_from_user([A1])
    assert subs.paused() == {A1}
    subs.assign_from_user([A0, A1])
    assert subs.paused() == {A1}
    assert subs.position(A0) is None  # fresh state: position comes from committed/reset again


def test_group_assignment_drops_flags_of_removed_partitions() -> None:
    subs = SubscriptionState("latest")
    subs.subscribe(Subscription(topics=frozenset({"a"})))
    subs.set_group_assignment([A0, A1], awaiting=[])
    subs.seek(A0, 1)
    subs.pause([A0])
    subs.mark_pending_revocation([A0])
    subs.set_group_assignment([A1], awaiting=[])
    subs.set_group_assignment([A0, A1], awaiting=[])
    st = subs.state(A0)
    assert not st.paused and not st.pending_revocation and st.position is None


def test_pause_resume_and_unassigned_partitions() -> None:
    subs = assigned(A0)
    subs.pause([A0])
    assert subs.paused() == {A0}
    subs.resume([A0])
    assert subs.paused() == frozenset()
    with pytest.raises(IllegalStateError, match="b-0"):
        subs.pause([B0])
    with pytest.raises(IllegalStateError):
        subs.seek(B0, 1)
    with pytest.raises(IllegalStateError):
        subs.position(B0)


def test_version_bumped_on_assignment_change() -> None:
    subs = SubscriptionState("latest")
    v0 = subs.version
    subs.assign_from_user([A0])
    v1 = subs.version
    subs.assign_from_user([A0, A1])
    assert v0 < v1 < subs.version


# ---------------------------------------------------------------------------------- KIP-320 validation


def test_seek_with_a_leader_epoch_awaits_validation_and_is_not_fetchable() -> None:
    subs = assigned(A0, A1)
    subs.seek(A0, 10, leader_epoch=3)
    subs.seek(A1, 10)
    assert set(subs.fetchable()) == {A1}
    assert subs.validation_targets() == {A0: (FetchPosition(10, 3), subs.state(A0).position_epoch)}
    subs.seek(A0, 11)  # a plain seek needs no validation
    assert subs.validation_targets() == {} and set(subs.fetchable()) == {A0, A1}


def test_leader_epoch_change_validates_positions_with_a_record_epoch_only() -> None:
    subs = assigned(A0, A1)
    subs.seek(A0, 10)
    subs.seek(A1, 10)
    first = {tp: (subs.state(tp).position_epoch, 5) for tp in (A0, A1)}
    assert subs.on_leader_epochs(first) == set()  # the first leader seen: nothing to validate
    subs.advance(A0, subs.state(A0).position_epoch, 12, 5)  # A0 consumed records of epoch 5
    subs.update_watermarks(A0, 20, 20, 0)
    moved = {tp: (subs.state(tp).position_epoch, 6) for tp in (A0, A1)}
    assert subs.on_leader_epochs(moved) == {A0}
    assert subs.state(A0).awaiting_validation and subs.state(A0).high_watermark is None
    assert not subs.state(A1).awaiting_validation and subs.state(A1).leader_epoch == 6
    assert set(subs.fetchable()) == {A1}


def test_complete_validation_keeps_or_replaces_the_position() -> None:
    subs = assigned(A0, A1)
    subs.seek(A0, 10, leader_epoch=3)
    subs.seek(A1, 10, leader_epoch=3)
    e0, e1 = subs.state(A0).position_epoch, subs.state(A1).position_epoch
    assert subs.complete_validation(A0, e0, 7)
    assert subs.position(A0) == FetchPosition(10, 3) and subs.state(A0).leader_epoch == 7
    assert subs.complete_validation(A1, e1, 7, FetchPosition(8, 3))
    assert subs.position(A1) == FetchPosition(8, 3) and subs.state(A1).position_epoch == e1 + 1
    assert not subs.complete_validation(A1, e1, 7)  # stale answer
    assert subs.validation_targets() == {}


def test_unassigned_partition_leaves_the_validation_targets() -> None:
    subs = assigned(A0, A1)
    subs.seek(A0, 10, leader_epoch=3)
    subs.assign_from_user([A1])
    assert subs.validation_targets() == {}
    subs.assign_from_user([A0, A1])  # back, as a new assignment: no stale validation state
    assert subs.validation_targets() == {}


# ============================================================================================ issue 26
TA = TopicPartition("t", 10)
TB = TopicPartition("t", 11)


def test_a_partition_awaiting_its_assigned_callback_gets_a_position_only_when_asked() -> None:
    """Issue 26 item 3 (as Java): no position lookup (nor NoOffsetForPartitionError) before the assigned
    callback ran -- it may seek -- unless the application asks for the position (``position()``)."""
    subs = SubscriptionState("none")
    subs.set_group_assignment([TA, TB], awaiting=[TB])
    subs.request_reset(TA, "none")
    subs.request_reset(TB, "none")
    assert set(subs.needs_position()) == {TA}
    assert subs.partitions_without_offset() == {TA}
    subs.request_position(TB)  # position(TB), e.g. from the assigned callback
    assert set(subs.needs_position()) == {TA, TB}
    assert subs.partitions_without_offset() == {TA, TB}
    subs.clear_awaiting_callback([TB])
    subs.seek(TB, 5)
    assert set(subs.needs_position()) == {TA}


def test_poll_start_snapshot_follows_every_kind_of_position_change() -> None:
    # The auto-commit snapshot is updated only for partitions that moved; after each poll start it must
    # equal every assigned partition's position, whatever moved it (advance, seek, reset, lookup result).
    subs = SubscriptionState("earliest")
    a, b, c, d = (TopicPartition("t", p) for p in range(4))
    subs.assign_from_user([a, b, c, d])
    for tp in (a, b, c):
        subs.seek(tp, 10)
    subs.mark_poll_start()
    assert subs.consumed_before_poll() == {a: FetchPosition(10), b: FetchPosition(10), c: FetchPosition(10)}
    assert subs.advance(a, subs.state(a).position_epoch, 15, 3)
    subs.request_reset(b, "latest")
    epoch_d = subs.state(d).position_epoch
    subs.request_reset(d, "earliest")
    assert subs.maybe_seek_unvalidated(d, 7, subs.state(d).position_epoch, "earliest")
    # Not before the next poll starts: the batch handed out since may still be in processing.
    assert subs.consumed_before_poll()[a] == FetchPosition(10)
    assert b not in subs.consumed_before_poll()  # a reset drops the snapshot at once
    subs.mark_poll_start()
    assert subs.consumed_before_poll() == {a: FetchPosition(15, 3), c: FetchPosition(10), d: FetchPosition(7)}
    assert subs.state(d).position_epoch > epoch_d
    # Nothing moved: the snapshot stays; a partition re-assigned fresh has none.
    subs.mark_poll_start()
    assert subs.consumed_before_poll() == {a: FetchPosition(15, 3), c: FetchPosition(10), d: FetchPosition(7)}
    subs.assign_from_user([a, c])
    subs.assign_from_user([a, c, d])
    subs.mark_poll_start()
    assert subs.consumed_before_poll() == {a: FetchPosition(15, 3), c: FetchPosition(10)}


def test_no_partition_lacks_an_offset_until_a_reset_with_strategy_none() -> None:
    subs = SubscriptionState("none")
    tp = TopicPartition("t", 0)
    subs.assign_from_user([tp])
    assert subs.partitions_without_offset() == frozenset()  # still to look up its committed offset
    subs.request_reset(tp, "none")
    assert subs.partitions_without_offset() == {tp}
    subs.seek(tp, 3)
    assert subs.partitions_without_offset() == frozenset()


def test_needs_position_sees_every_way_a_position_goes_missing() -> None:
    subs = assigned(A0, A1)
    assert set(subs.needs_position()) == {A0, A1}
    subs.seek(A0, 1)
    subs.seek(A1, 1)
    assert subs.needs_position() == {}
    assert subs.needs_position() == {}  # and stays so (pruned, no scan needed)
    subs.request_reset(A1, "earliest")
    assert set(subs.needs_position()) == {A1}
    subs.seek(A1, 2)
    subs.assign_from_user([A0, A1, B0])  # a newly assigned partition
    assert set(subs.needs_position()) == {B0}
    subs.unsubscribe()
    subs.assign_from_user([A0])  # fresh state after unsubscribe
    assert set(subs.needs_position()) == {A0}
