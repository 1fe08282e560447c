"""KIP-983's three lists (revoke-next, revoke-thereafter, lost) and the REVOKE seq bookkeeping."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_handoff.consumer.revoke import CompletedRevoke, PollPace, RevokeLists
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)
C = TopicPartition("t", 2)
D = TopicPartition("u", 0)


def poll_until_completed(lists: RevokeLists, tp: TopicPartition, delays: int, max_polls: int = 20) -> int:
    """The revoke was requested during poll 0.  In each interval between polls delay ``tp`` while ``delays``
    remain, then start the next poll; return the number of the poll at whose start the revoke completed."""
    for poll in range(1, max_polls + 1):
        if delays:
            assert lists.delay_revoke([tp]) is True
            delays -= 1
        if tp in lists.start_of_poll():
            return poll
    raise AssertionError(f"{tp} never completed")


# ============================================================================================ lifecycle
def test_revoke_requested_in_poll_n_completes_at_start_of_poll_n_plus_1() -> None:
    lists = RevokeLists()
    assert lists.start_of_poll() == frozenset()  # poll N starts
    lists.on_revoke_requested([A, B])  # ... and the membership asks for A, B during it
    assert lists.to_be_revoked_partitions() == {A, B}
    assert lists.revoke_requested_partitions() == {A, B}
    assert lists.is_revoke_requested(A) and not lists.is_revoke_requested(C)
    assert lists.start_of_poll() == {A, B}  # poll N+1
    assert lists.to_be_revoked_partitions() == frozenset()
    assert lists.revoke_requested_partitions() == frozenset()
    assert lists.start_of_poll() == frozenset()  # completed exactly once


@pytest.mark.parametrize("delays", [0, 1, 2, 3, 5])
def test_each_delay_revoke_adds_exactly_one_poll(delays: int) -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A])  # during poll 0
    assert poll_until_completed(lists, A, delays) == 1 + delays


def test_delayed_partition_leaves_to_be_revoked_until_the_next_poll_but_stays_revoke_requested() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A, B])
    assert lists.delay_revoke([A]) is True
    assert lists.to_be_revoked_partitions() == {B}  # the KIP: getToBeRevokedPartitions = revoke-next
    assert lists.delayed_partitions() == {A}
    assert lists.revoke_requested_partitions() == {A, B}  # still no records for A
    assert lists.start_of_poll() == {B}
    assert lists.to_be_revoked_partitions() == {A}  # revoke-thereafter moved to revoke-next
    assert lists.delayed_partitions() == frozenset()
    assert lists.start_of_poll() == {A}


def test_two_delays_in_one_poll_interval_postpone_by_one_poll_only() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A])
    assert lists.delay_revoke([A]) is True
    assert lists.delay_revoke([A]) is True  # still pending, so the request succeeds ...
    assert lists.start_of_poll() == frozenset()
    assert lists.start_of_poll() == {A}  # ... but the target stays "the poll after the next"


def test_delay_revoke_of_a_partition_not_pending_revocation_is_refused_and_changes_nothing() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A])
    assert lists.delay_revoke([C]) is False
    assert lists.delay_revoke([A, C]) is False  # all or nothing
    assert lists.to_be_revoked_partitions() == {A}
    assert lists.delayed_partitions() == frozenset()
    assert lists.start_of_poll() == {A}
    assert lists.delay_revoke([A]) is False  # completed: no longer pending


def test_delay_revoke_of_nothing_succeeds() -> None:
    assert RevokeLists().delay_revoke([]) is True


def test_repeated_request_keeps_a_delayed_partition_delayed() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A])
    lists.delay_revoke([A])
    lists.on_revoke_requested([A, B])
    assert lists.to_be_revoked_partitions() == {B}
    assert lists.delayed_partitions() == {A}


# ============================================================================================ lost
def test_lost_removes_from_both_revoke_lists() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A, B, C])
    assert lists.delay_revoke([B])
    lists.on_lost([A, B, D])
    assert lists.to_be_revoked_partitions() == {C}
    assert lists.delayed_partitions() == frozenset()
    assert lists.revoke_requested_partitions() == {C}
    assert lists.lost_partitions() == {A, B, D}
    assert lists.start_of_poll() == {C}  # lost partitions never "complete" a revoke


def test_lost_is_reported_for_exactly_one_poll() -> None:
    lists = RevokeLists()
    lists.start_of_poll()  # poll N
    lists.on_lost([A])  # during poll N
    assert lists.lost_reported() == {A}  # what poll N returns, and until poll N+1 starts
    lists.start_of_poll()  # poll N+1
    assert lists.lost_partitions() == frozenset()


def test_a_loss_during_a_poll_that_raised_is_reported_by_the_next_poll_that_returns() -> None:
    """Issue 26 item 5: poll N raised (a raising lost callback, a queued error), so it returned nothing; the
    loss is not forgotten at the start of poll N+1 but reported by it, once."""
    lists = RevokeLists()
    lists.start_of_poll()  # poll N
    lists.on_lost([A])  # ... which then raises: lost_reported() is never called
    lists.start_of_poll()  # poll N+1
    lists.on_lost([B])
    assert lists.lost_reported() == {A, B}  # poll N+1 returns both
    lists.start_of_poll()  # poll N+2
    assert lists.lost_partitions() == frozenset()


def test_delay_revoke_returns_false_for_lost_partitions() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A, B])
    lists.on_lost([A])
    assert lists.delay_revoke([A]) is False
    assert lists.delay_revoke([A, B]) is False
    assert lists.to_be_revoked_partitions() == {B}  # the refused call moved nothing
    assert lists.delay_revoke([B]) is True
    lists.lost_reported()
    lists.start_of_poll()
    assert lists.delay_revoke([A]) is False  # after the report, A is simply not pending


def test_delay_revoke_is_refused_for_a_partition_lost_in_this_poll_even_if_revoke_is_requested_again() -> (
    None
):
    lists = RevokeLists()
    lists.on_lost([A])
    lists.on_revoke_requested([A])  # reassigned and asked back within the same poll: still reported lost
    assert lists.lost_partitions() == {A}
    assert lists.delay_revoke([A]) is False
    assert lists.start_of_poll() == {A}


def test_loss_while_delayed_cancels_the_completion() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A])
    lists.delay_revoke([A])
    lists.start_of_poll()  # A back on revoke-next
    lists.on_lost([A])
    assert lists.start_of_poll() == frozenset()


# ============================================================================================ deadline
def test_delay_is_refused_once_the_deadline_is_reached() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A], deadline_ms=1_000)
    assert lists.delay_revoke([A], now_ms=999) is True
    lists.start_of_poll()
    lists.on_revoke_requested([B])
    assert lists.delay_revoke([A, B], now_ms=1_000) is False
    assert lists.to_be_revoked_partitions() == {A, B}  # nothing moved
    assert lists.delay_revoke([B], now_ms=10**9) is True  # no deadline for B
    assert lists.delay_revoke([A]) is True  # no clock given: deadline not checked


def test_earliest_deadline_wins_and_is_forgotten_on_completion() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A], deadline_ms=5_000)
    lists.on_revoke_requested([A], deadline_ms=2_000)
    assert lists.delay_revoke([A], now_ms=2_000) is False
    assert lists.start_of_poll() == {A}
    lists.on_revoke_requested([A])  # a later, unrelated request has no deadline
    assert lists.delay_revoke([A], now_ms=3_000) is True


# ============================================================================================ seqs
def test_seq_completes_only_when_all_its_partitions_completed() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A, B], seq=7)
    lists.delay_revoke([B])
    assert lists.pending_seqs() == {7}
    assert lists.start_of_poll() == {A}
    assert lists.take_completed() == []
    assert lists.pending_seqs() == {7}
    assert lists.start_of_poll() == {B}
    assert lists.take_completed() == [CompletedRevoke(7, frozenset({A, B}), frozenset({A, B}), frozenset())]
    assert lists.pending_seqs() == frozenset()
    assert lists.take_completed() == []  # drained


def test_lost_partitions_resolve_a_seq_and_are_reported_as_lost() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A, B], seq=1)
    lists.on_revoke_requested([C], seq=2)
    lists.on_lost([A])
    assert lists.take_completed() == []
    lists.on_lost([C])  # everything of seq 2 is gone: nothing left to wait for
    assert lists.take_completed() == [CompletedRevoke(2, frozenset({C}), frozenset(), frozenset({C}))]
    lists.start_of_poll()
    assert lists.take_completed() == [CompletedRevoke(1, frozenset({A, B}), frozenset({B}), frozenset({A}))]


def test_overlapping_requests_and_completion_order() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A, B], seq=3)
    lists.on_revoke_requested([B], seq=4)
    lists.on_revoke_requested([C], seq=5)
    lists.delay_revoke([C])
    lists.start_of_poll()
    assert [done.seq for done in lists.take_completed()] == [3, 4]
    lists.start_of_poll()
    assert [done.seq for done in lists.take_completed()] == [5]


def test_empty_request_completes_at_once_and_duplicate_seq_is_rejected() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([], seq=1)
    assert lists.take_completed() == [CompletedRevoke(1, frozenset(), frozenset(), frozenset())]
    lists.on_revoke_requested([A], seq=2)
    with pytest.raises(ValueError, match="seq 2"):
        lists.on_revoke_requested([B], seq=2)


def test_callback_error_is_attached_to_the_requests_of_its_partitions() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A, B], seq=1)
    lists.on_revoke_requested([C], seq=2)
    lists.delay_revoke([B])
    first, second = RuntimeError("first"), RuntimeError("second")
    completed = lists.start_of_poll()
    assert completed == {A, C}
    lists.note_callback_error(completed, first)  # seq 2 completed (not taken yet), seq 1 still pending
    assert [(d.seq, d.error) for d in lists.take_completed()] == [(2, first)]
    lists.note_callback_error(lists.start_of_poll(), second)  # B: seq 1 keeps its first error
    assert [(d.seq, d.error) for d in lists.take_completed()] == [(1, first)]


def test_complete_all_and_clear() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A, B], seq=1)
    lists.delay_revoke([B])
    lists.on_lost([C])
    assert lists.complete_all() == {A, B}
    assert lists.revoke_requested_partitions() == frozenset()
    assert lists.lost_partitions() == {C}  # losses are still reported
    assert [d.seq for d in lists.take_completed()] == [1]
    lists.on_revoke_requested([D], seq=2)
    lists.clear()
    assert lists.pending_seqs() == frozenset()
    assert lists.lost_partitions() == frozenset()
    assert lists.start_of_poll() == frozenset()
    assert lists.take_completed() == []


# ============================================================================================ model
@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.sets(st.integers(0, 8), max_size=6)),
        min_size=1,
        max_size=6,
    )
)
def test_completion_poll_is_request_poll_plus_one_plus_consecutive_delays(
    schedule: list[tuple[int, set[int]]],
) -> None:
    """Partition i is requested during poll r_i; the application calls delay_revoke for it in every poll
    interval listed in D_i (interval k = after poll k, before poll k+1).  The revoke completes at the start
    of poll r_i + 1 + (number of consecutive intervals r_i, r_i+1, ... in D_i), and a delay succeeds
    exactly while the partition is pending."""
    tps = [TopicPartition("p", i) for i in range(len(schedule))]
    expected: dict[TopicPartition, int] = {}
    for tp, (requested, delays) in zip(tps, schedule, strict=True):
        k = 0
        while requested + k in delays:
            k += 1
        expected[tp] = requested + 1 + k
    lists = RevokeLists()
    completed_at: dict[TopicPartition, int] = {}
    for poll in range(0, 16):
        for tp in lists.start_of_poll():
            assert tp not in completed_at, "completed twice"
            completed_at[tp] = poll
        for tp, (requested, _) in zip(tps, schedule, strict=True):
            if requested == poll:
                lists.on_revoke_requested([tp])
        for tp, (requested, delays) in zip(tps, schedule, strict=True):
            if poll in delays:
                pending = requested <= poll < expected[tp]
                assert lists.delay_revoke([tp]) is pending
        assert lists.revoke_requested_partitions() == {
            tp for tp, (requested, _) in zip(tps, schedule, strict=True) if requested <= poll < expected[tp]
        }
    assert completed_at == expected


# ============================================================================================ poll pace
def test_poll_pace_is_the_longest_recent_interval_and_the_one_in_progress() -> None:
    pace = PollPace(window=3)
    assert pace.pace_ms() == 0 and pace.completion_if_delayed(500) == 500  # nothing known yet
    for start in (0, 1_000, 3_000, 3_500, 4_000):
        pace.on_poll_start(start)
    assert pace.pace_ms() == 2_000  # intervals 1000, 2000, 500, 500 -> the last three: max 2000
    pace.on_poll_start(4_600)
    assert pace.pace_ms() == 600  # 2000 left the window
    assert pace.pace_ms(now_ms=5_500) == 900  # the interval in progress is longer


def test_a_delay_completes_at_the_start_of_the_poll_after_the_next_one() -> None:
    pace = PollPace()
    for start in (0, 1_900, 3_800):
        pace.on_poll_start(start)
    assert pace.completion_if_delayed(4_000) == 3_800 + 2 * 1_900
    # A loop that is late this time: the next poll starts no earlier than now.
    assert pace.completion_if_delayed(6_000) == 6_000 + 2_200


def test_delay_is_refused_when_the_delayed_revoke_would_complete_after_the_deadline() -> None:
    lists = RevokeLists()
    lists.on_revoke_requested([A], deadline_ms=8_000)
    assert lists.delay_revoke([A], 5_700, completes_at_ms=7_999) is True
    lists.start_of_poll()
    assert lists.delay_revoke([A], 5_800, completes_at_ms=8_000) is False
    assert lists.to_be_revoked_partitions() == {A}  # refused: the next poll completes it
    assert lists.start_of_poll() == {A}
