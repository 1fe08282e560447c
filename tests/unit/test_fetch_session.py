"""KIP-227 fetch sessions: the per-broker state machine (the FetchManager's use of it is tested in
test_fetch_manager.py)."""

from __future__ import annotations

import pytest

from kafka_handoff.consumer.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSession,
    PartitionFetch,
)
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
P = {tp: PartitionFetch(10, 7) for tp in (A0, A1, B0)}


def started(session_id: int = 42) -> FetchSession:
    s = FetchSession(1)
    first = s.build(dict(P), use_ids=True)
    s.on_response(first, 0, session_id)
    return s


# ------------------------------------------------------------------------------------------ state machine


def test_first_request_is_full_and_asks_for_a_session() -> None:
    s = FetchSession(1)
    req = s.build(dict(P), use_ids=True)
    assert (req.session_id, req.epoch, req.full) == (0, INITIAL_EPOCH, True)
    assert req.partitions == P and req.forgotten == ()
    s.on_response(req, 0, 42)
    assert (s.session_id, s.epoch) == (42, 1)


def test_incremental_request_names_only_changed_added_and_forgotten_partitions() -> None:
    s = started()
    a0_moved = PartitionFetch(15, 7)
    c0 = TopicPartition("c", 0)
    wanted = {A0: a0_moved, A1: P[A1], c0: PartitionFetch(0, 3)}  # B0 no longer fetched here
    req = s.build(wanted, use_ids=True)
    assert (req.session_id, req.epoch, req.full) == (42, 1, False)
    assert req.partitions == {A0: a0_moved, c0: PartitionFetch(0, 3)}
    assert req.forgotten == (B0,)
    assert req.wanted == wanted
    s.on_response(req, 0, 42)
    assert s.epoch == 2
    idle = s.build(wanted, use_ids=True)  # nothing changed: an empty incremental fetch
    assert idle.partitions == {} and idle.forgotten == () and idle.epoch == 2


def test_leader_epoch_change_is_a_change() -> None:
    s = started()
    req = s.build({**P, A0: PartitionFetch(10, 8)}, use_ids=True)
    assert req.partitions == {A0: PartitionFetch(10, 8)}


@pytest.mark.parametrize("code", [70, 71])
def test_session_errors_make_the_next_request_full(code: int) -> None:
    s = started()
    req = s.build(dict(P), use_ids=True)
    s.on_response(req, code, 0)
    again = s.build(dict(P), use_ids=True)
    assert again.full and again.partitions == P
    # FETCH_SESSION_ID_NOT_FOUND: a brand-new session; INVALID_FETCH_SESSION_EPOCH: close ours, open anew.
    assert again.session_id == (0 if code == 70 else 42)
    s.on_response(again, 0, 43)
    assert (s.session_id, s.epoch) == (43, 1)


def test_other_errors_and_failures_make_the_next_request_full() -> None:
    s = started()
    req = s.build(dict(P), use_ids=True)
    s.on_response(req, 6, 42)
    assert s.build(dict(P), use_ids=True).full
    s = started()
    s.build(dict(P), use_ids=True)
    s.reset()  # what a disconnect or timeout does
    assert s.build(dict(P), use_ids=True).full


def test_reset_while_a_full_request_is_in_flight_keeps_the_next_request_full() -> None:
    s = FetchSession(1)
    req = s.build(dict(P), use_ids=True)
    s.reset()  # e.g. a new assignment while the first fetch is in flight
    s.on_response(req, 0, 42)
    nxt = s.build({A0: P[A0]}, use_ids=True)
    # Full (the broker's session still holds A1 and B0, which an incremental request would never forget),
    # closing the session the broker opened and asking for a new one.
    assert (nxt.session_id, nxt.epoch, nxt.partitions) == (42, INITIAL_EPOCH, {A0: P[A0]})
    s.on_response(nxt, 0, 43)
    assert (s.session_id, s.epoch) == (43, 1)


def test_reset_while_an_incremental_request_is_in_flight_keeps_the_next_request_full() -> None:
    s = started()
    s.epoch = 5
    req = s.build(dict(P), use_ids=True)
    s.reset()  # e.g. a leader change while the fetch is in flight
    s.on_response(req, 0, 42)  # the broker expects epoch 6 next: epoch 1 would be refused
    nxt = s.build(dict(P), use_ids=True)
    assert nxt.full and nxt.session_id == 42 and nxt.partitions == P


@pytest.mark.parametrize(
    ("error_code", "session_id"),
    [(70, 0), (0, 0)],  # FETCH_SESSION_ID_NOT_FOUND; the broker closing the session (id 0)
    ids=["session-not-found", "session-closed"],
)
def test_an_answer_from_before_a_reset_that_ends_the_session_leaves_nothing_to_close(
    error_code: int, session_id: int
) -> None:
    s = started()
    req = s.build(dict(P), use_ids=True)
    s.reset()
    s.on_response(req, error_code, session_id)
    nxt = s.build(dict(P), use_ids=True)
    assert nxt.full and nxt.session_id == 0


def test_broker_without_a_session_slot_gets_full_requests() -> None:
    s = FetchSession(1)
    req = s.build(dict(P), use_ids=True)
    s.on_response(req, 0, 0)  # the broker created no session
    assert s.build(dict(P), use_ids=True).full


def test_broker_closing_the_session_in_an_incremental_response() -> None:
    s = started()
    req = s.build(dict(P), use_ids=True)
    s.on_response(req, 0, 0)
    nxt = s.build(dict(P), use_ids=True)
    assert nxt.full and nxt.session_id == 0


def test_epoch_wraps_to_one() -> None:
    s = started()
    s.epoch = 2**31 - 1
    req = s.build(dict(P), use_ids=True)
    s.on_response(req, 0, 42)
    assert s.epoch == 1


def test_switching_between_topic_ids_and_names_starts_over() -> None:
    s = started()
    assert s.build(dict(P), use_ids=False).full


def test_close() -> None:
    assert FetchSession(1).close() is None
    s = started()
    req = s.close()
    assert req is not None and (req.session_id, req.epoch, req.partitions) == (42, FINAL_EPOCH, {})
    assert s.close() is None and s.build(dict(P), use_ids=True).full
