"""Heartbeat bookkeeping helpers of the KIP-848 membership: local assignments, backoff, changed fields."""

from __future__ import annotations

import uuid

import pytest

from kafka_handoff.group.heartbeat_state import (
    NO_ASSIGNMENT,
    ExponentialBackoff,
    HeartbeatFields,
    HeartbeatTimer,
    LocalAssignment,
)

pytestmark = pytest.mark.unit

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def test_local_assignment_bumps_epoch_only_on_change() -> None:
    first = NO_ASSIGNMENT.updated_with({})
    assert first.local_epoch == 0 and first != NO_ASSIGNMENT  # even an empty assignment is news
    assert first.updated_with({}) is first
    second = first.updated_with({T1: frozenset({0})})
    assert second.local_epoch == 1
    assert second.updated_with({T1: frozenset({0})}) is second
    assert LocalAssignment(1, {T1: frozenset({0})}) != LocalAssignment(2, {T1: frozenset({0})})
    assert LocalAssignment(3, {T2: frozenset({1, 0}), T1: frozenset()}).wire() == [
        {"topic_id": T1, "partitions": []},
        {"topic_id": T2, "partitions": [0, 1]},
    ]


def test_backoff_sequence_and_cap() -> None:
    b = ExponentialBackoff(100, 1000, rand=lambda: 0.5)
    assert [b.backoff_ms(n) for n in range(7)] == [100, 200, 400, 800, 1000, 1000, 1000]
    assert ExponentialBackoff(0, 1000).backoff_ms(3) == 0
    assert ExponentialBackoff(500, 100, rand=lambda: 0.5).backoff_ms(5) == 500  # max below initial


def test_timer_interval_and_backoff() -> None:
    t = HeartbeatTimer(ExponentialBackoff(100, 1000, rand=lambda: 0.5), 5000)
    t.on_sent(1000)
    assert t.interval_remaining(1000) == 5000
    t.on_success(1200, 5000)  # unchanged interval: still due from the send time
    assert t.interval_remaining(1200) == 4800
    t.on_success(1300, 2000)  # new interval: due from this response
    assert t.interval_remaining(1300) == 2000
    t.on_failure(2000, backoff=True)
    assert (t.interval_remaining(2000), t.backoff_remaining(2000)) == (0, 100)
    t.on_failure(2100, backoff=True)
    assert t.backoff_remaining(2100) == 200
    t.on_failure(2300, backoff=False)
    assert t.backoff_remaining(2300) == 0 and t.failures == 0


def _build(f: HeartbeatFields, send_all: bool = False, **overrides: object) -> dict[str, object]:
    kwargs: dict[str, object] = {
        "send_all": send_all,
        "rebalance_timeout_ms": 300000,
        "rack_id": None,
        "topic_names": frozenset({"a"}),
        "regex": None,
        "server_assignor": None,
        "assignment": NO_ASSIGNMENT,
    }
    kwargs.update(overrides)
    return f.build(**kwargs)  # type: ignore[arg-type]


def test_fields_sent_once_then_only_on_change_and_all_after_reset() -> None:
    f = HeartbeatFields()
    first = _build(f, send_all=True, rack_id="r", server_assignor="uniform")
    assert first["rebalance_timeout"] == 300000 and first["rack_id"] == "r"
    assert first["subscribed_topic_names"] == ["a"] and first["topic_partitions"] == []
    again = _build(f, rack_id="r", server_assignor="uniform")
    assert again == {
        "rebalance_timeout": -1,
        "rack_id": None,
        "subscribed_topic_names": None,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": None,
    }
    f.reset()
    full = _build(f, rack_id="r", server_assignor="uniform")
    assert full["rebalance_timeout"] == 300000 and full["rack_id"] == "r"
    assert full["server_assignor"] == "uniform" and full["topic_partitions"] == []


def test_regex_removed_with_empty_string_also_after_a_reset() -> None:
    f = HeartbeatFields()
    assert _build(f, send_all=True, regex="a.*", topic_names=frozenset())["subscribed_topic_regex"] == "a.*"
    f.reset()  # e.g. the heartbeat switching to names failed
    assert _build(f)["subscribed_topic_regex"] == ""
    assert _build(f)["subscribed_topic_regex"] is None
    f.forget_regex()  # a fresh join
    f.reset()
    assert _build(f, send_all=True)["subscribed_topic_regex"] is None
