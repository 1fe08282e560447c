"""CommitManager: OffsetCommit/OffsetFetch, retries, fencing, ownership checks and the auto-commit timer,
driven with a fake clock and scripted responses."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pytest

from kafka_handoff.consumer.offsets import CommitManager
from kafka_handoff.consumer.subscription import SubscriptionState
from kafka_handoff.errors import (
    CommitFailedError,
    ConnectionError_,
    GroupAuthorizationFailedError,
    KafkaTimeoutError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
)
from kafka_handoff.group.coordinator import CoordinatorManager
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.requests import COORDINATOR, FakeClock, UnsentRequest
from kafka_handoff.protocol.versions import CLIENT_VERSIONS, ApiKey
from kafka_handoff.types import BrokerNode, ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.unit

COMMIT, FETCH = ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH
BACKOFF = 100
BACKOFF_MAX = 1000
INTERVAL = 5000
GROUP = "g1"
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)

Committed = Future[dict[TopicPartition, OffsetAndMetadata | None]]


@dataclass
class Harness:
    auto_commit: bool = False
    owned: frozenset[TopicPartition] | None = None

    def __post_init__(self) -> None:
        self.clock = FakeClock()
        self.meta = ConsumerGroupMetadata(GROUP, 5, "member-1", "static-1")
        self.coordinator = CoordinatorManager(
            GROUP, retry_backoff_ms=BACKOFF, retry_backoff_max_ms=BACKOFF_MAX
        )
        self.coordinator_events: list[BrokerNode | None] = []
        self.coordinator.listeners.append(lambda node, now: self.coordinator_events.append(node))
        self.subs = SubscriptionState("latest")
        self.latencies: list[int] = []
        self.auto_errors: list[BaseException] = []
        self.cm = CommitManager(
            GROUP,
            self.coordinator,
            self.subs,
            group_metadata=lambda: self.meta,
            owned=lambda: self.owned,
            auto_commit=self.auto_commit,
            auto_commit_interval_ms=INTERVAL,
            retry_backoff_ms=BACKOFF,
            retry_backoff_max_ms=BACKOFF_MAX,
            on_commit_latency=self.latencies.append,
            on_auto_commit_error=self.auto_errors.append,
        )

    def find_coordinator(self) -> None:
        assert self.coordinator.wanted
        (req,) = self.coordinator.poll(self.clock.now_ms()).unsent
        response = wire.build_response(
            ApiKey.FIND_COORDINATOR,
            4,
            {
                "throttle_time": 0,
                "coordinators": [
                    {
                        "key": GROUP,
                        "node_id": 7,
                        "host": "c",
                        "port": 1,
                        "error_code": 0,
                        "error_message": None,
                    }
                ],
            },
        )
        assert req.on_response is not None
        req.on_response(response, 4, self.clock.now_ms())
        assert self.coordinator.coordinator is not None

    def requests(self) -> list[UnsentRequest]:
        reqs = self.cm.poll(self.clock.now_ms()).unsent
        for req in reqs:
            assert req.node == COORDINATOR
        return reqs

    def commit(
        self, offsets: Mapping[TopicPartition, int], *, timeout: int = 10_000, retry: bool = True
    ) -> Future[None]:
        fut: Future[None] = Future()
        self.cm.commit(
            {tp: OffsetAndMetadata(o, f"m{o}") for tp, o in offsets.items()},
            fut,
            self.clock.now_ms() + timeout,
            retry=retry,
            now_ms=self.clock.now_ms(),
        )
        return fut


def committed_offsets(req: UnsentRequest, version: int = 9) -> dict[TopicPartition, int]:
    body = req.body(version)
    return {
        TopicPartition(t["name"], p["partition_index"]): p["committed_offset"]
        for t in body["topics"]
        for p in t["partitions"]
    }


def commit_response(codes: Mapping[TopicPartition, int], version: int = 9) -> Any:
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, code in codes.items():
        topics.setdefault(tp.topic, []).append({"partition_index": tp.partition, "error_code": code})
    return wire.build_response(
        COMMIT,
        version,
        {"throttle_time": 0, "topics": [{"name": n, "partitions": p} for n, p in topics.items()]},
    )


def respond(req: UnsentRequest, response: Any, version: int, now: int) -> None:
    assert req.on_response is not None
    req.on_response(response, version, now)


def fetch_response(
    version: int, partitions: Mapping[TopicPartition, tuple[int, int, str | None, int]], *, error: int = 0
) -> Any:
    """``partitions``: tp -> (error code, committed offset, metadata, leader epoch)."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, (code, offset, metadata, epoch) in partitions.items():
        topics.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": offset,
                "committed_leader_epoch": epoch,
                "metadata": metadata,
                "error_code": code,
            }
        )
    topic_list = [{"name": n, "partitions": p} for n, p in topics.items()]
    if version >= 8:
        values: dict[str, Any] = {
            "throttle_time": 0,
            "groups": [{"group_id": GROUP, "topics": topic_list, "error_code": error}],
        }
    else:
        values = {"throttle_time": 0, "topics": topic_list, "error_code": error}
    return wire.build_response(FETCH, version, values)


# ---------------------------------------------------------------------------------------------- commit


def test_commit_waits_for_the_coordinator() -> None:
    h = Harness()
    fut = h.commit({A0: 10})
    assert h.coordinator.wanted
    assert h.requests() == []
    h.find_coordinator()
    (req,) = h.requests()
    assert req.api_key == COMMIT
    assert committed_offsets(req) == {A0: 10}
    assert not fut.done()


@pytest.mark.parametrize("version", range(CLIENT_VERSIONS[COMMIT][0], CLIENT_VERSIONS[COMMIT][1] + 1))
def test_commit_body_carries_group_metadata(version: int) -> None:
    h = Harness()
    h.coordinator.wanted = True
    h.find_coordinator()
    fut: Future[None] = Future()
    h.cm.commit(
        {A0: OffsetAndMetadata(10, "meta", 3), B0: OffsetAndMetadata(4)}, fut, h.clock.now_ms() + 10_000
    )
    (req,) = h.requests()
    entity = wire.build_request(COMMIT, version, req.body(version), ignorable=req.ignorable)
    assert entity.group_id == GROUP
    assert entity.generation_id_or_member_epoch == 5
    assert entity.member_id == "member-1"
    if version >= 7:
        assert entity.group_instance_id == "static-1"
    parts = {(t.name, p.partition_index): p for t in entity.topics for p in t.partitions}
    assert parts[("a", 0)].committed_offset == 10
    assert parts[("a", 0)].committed_metadata == "meta"
    assert parts[("b", 0)].committed_offset == 4
    if version >= 6:
        assert parts[("a", 0)].committed_leader_epoch == 3
        assert parts[("b", 0)].committed_leader_epoch == -1


def test_commit_success() -> None:
    h = Harness()
    h.coordinator.wanted = True
    h.find_coordinator()
    fut = h.commit({A0: 10, A1: 11})
    (req,) = h.requests()
    assert h.requests() == []  # in flight
    respond(req, commit_response({A0: 0, A1: 0}), 9, h.clock.advance(12))
    assert fut.result(0) is None
    assert h.cm.last_committed == {A0: OffsetAndMetadata(10, "m10"), A1: OffsetAndMetadata(11, "m11")}
    assert h.latencies == [12]
    assert not h.cm.pending() or h.requests() == []
    assert not h.cm.pending()


def test_empty_commit_completes_at_once() -> None:
    h = Harness()
    fut = h.commit({})
    assert fut.result(0) is None
    assert not h.coordinator.wanted


@pytest.mark.parametrize("code", [7, 14, 27, 113])  # timed out, load in progress, rebalancing, stale epoch
def test_retriable_errors_are_retried_for_failed_partitions_only(code: int) -> None:
    h = Harness()
    h.coordinator.wanted = True
    h.find_coordinator()
    fut = h.commit({A0: 10, A1: 11})
    (req,) = h.requests()
    respond(req, commit_response({A0: 0, A1: code}), 9, h.clock.now_ms())
    assert not fut.done()
    assert h.cm.last_committed == {A0: OffsetAndMetadata(10, "m10")}
    assert h.requests() == []  # backing off
    h.clock.advance(int(BACKOFF * 1.2))
    (retry,) = h.requests()
    assert committed_offsets(retry) == {A1: 11}
    respond(retry, commit_response({A1: 0}), 9, h.clock.now_ms())
    assert fut.result(0) is None


def test_retries_stop_at_the_deadline() -> None:
    h = Harness()
    h.coordinator.wanted = True
    h.find_coordinator()
    fut = h.commit({A0: 10}, timeout=1000)
    attempts = 0
    while not fut.done() and attempts < 50:
        for req in h.requests():
            attempts += 1
            respond(req, commit_response({A0: 7}), 9, h.clock.now_ms())
        h.clock.advance(50)
    assert attempts > 2
    err = fut.exception(0)
    assert isinstance(err, (KafkaTimeoutError, RequestTimedOutError))
    assert h.clock.now_ms() <= FakeClock().now_ms() + 1000 + 50


def test_no_retry_when_not_asked() -> None:
    h = Harness()
    h.coordinator.wanted = True
    h.find_coordinator()
    fut = h.commit({A0: 10}, retry=False)
    (req,) = h.requests()
    respond(req, commit_response({A0: 7}), 9, h.clock.now_ms())
    assert isinstance(fut.exception(0), RequestTimedOutError)


@pytest.mark.parametrize("code", [15, 16])  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
def test_coordinator_errors_mark_it_unknown_and_retry_after_rediscovery(code: int) -> None:
    h = Harness()
    h.coordinator.wanted = True
    h.find_coordinator()
    fut = h.commit({A0: 10})
    (req,) = h.requests()
    respond(req, commit_response({A0: code}), 9, h.clock.now_ms())
    assert h.coordinator.coordinator is None
    assert h.coordinator_events[-1] is None
    h.clock.advance(BACKOFF * 2)
    assert h.requests() == []  # no coordinator yet
    h.find_coordinator()
    (retry,) = h.requests()
    respond(retry, commit_response({A0: 0}), 9, h.clock.now_ms())
    assert fut.result(0) is None


def test_disconnect_marks_coordinator_unknown_and_retries() -> None:
    h = Harness()
    h.coordinator.wanted = True
    h.find_coordinator()
    fut = h.commit({A0: 10})
    (req,) = h.requests()
    assert req.on_failure is not None
    req.on_failure(ConnectionError_("gone"), h.clock.now_ms())
    assert h.coordinator.coordinator is None
    assert not fut.done()
    h.clock.advance(BACKOFF * 2)
    h.find_coordinator()
    (retry,) = h.requests()
    respond(retry, commit_response({A0: 0}), 9, h.clock.now_ms())
    assert fut.result(0) is None


@pytest.mark.parametrize("code", [22, 25, 82, 110])  # illegal generation, unknown member, fenced id/epoch
def test_fenced_errors_fail_with_commit_failed(code: int) -> None:
    h = Harness()
    h.coordinator.wanted = True
    h.find_coordinator()
    fut = h.commit({A0: 10})
    (req,) = h.requests()
    respond(req, commit_response({A0: code}), 9, h.clock.now_ms())
    err = fut.exception(0)
    assert isinstance(err, CommitFailedError)
    assert "no longer part of the group" in str(err)
    h.clock.advance(BACKOFF * 10)
    assert h.requests() == []  # not retried
    assert h.cm.last_committed == {}


def test_other_errors_fail_the_commit() -> None:
    h = Harness()
    h.coordinator.wanted = True
    h.find_coordinator()
    fut = h.commit({A0: 10})
    (req,) = h.requests()
    respond(req, commit_response({A0: 29}), 9, h.clock.now_ms())  # TOPIC_AUTHORIZATION_FAILED
    err = fut.exception(0)
    assert isinstance(err, TopicAuthorizationFailedError)
    assert "a-0" in str(err)


def test_partitions_not_owned_are_refused_up_front() -> None:
    h = Harness(owned=frozenset({A0}))
    fut = h.commit({A0: 1, B0: 2, A1: 3})
    err = fut.exception(0)
    assert isinstance(err, CommitFailedError)
    assert "a-1" in str(err) and "b-0" in str(err) and "a-0" not in str(err)
    assert not h.coordinator.wanted
    assert not h.cm.pending()


def test_consumed_positions_commit_leaves_out_partitions_no_longer_owned() -> None:
    # commit_sync() without offsets commits the consumed positions as the application thread sees them; a
    # partition whose revocation completed meanwhile is left out (not a CommitFailedError).
    h = Harness(owned=frozenset({A0}))
    h.coordinator.wanted = True
    h.find_coordinator()
    fut: Future[None] = Future()
    now = h.clock.now_ms()
    h.cm.commit(
        {A0: OffsetAndMetadata(5), B0: OffsetAndMetadata(7)}, fut, now + 10_000, now_ms=now, only_owned=True
    )
    (req,) = h.requests()
    assert committed_offsets(req) == {A0: 5}
    respond(req, commit_response({A0: 0}), 9, h.clock.now_ms())
    assert fut.result(0) is None
    done: Future[None] = Future()
    h.cm.commit({B0: OffsetAndMetadata(7)}, done, now + 10_000, now_ms=now, only_owned=True)
    assert done.result(0) is None and h.requests() == []  # nothing owned left to commit


def test_retry_is_refused_once_the_partition_is_no_longer_owned() -> None:
    h = Harness(owned=frozenset({A0}))
    h.coordinator.wanted = True
    h.find_coordinator()
    fut = h.commit({A0: 10})
    (req,) = h.requests()
    respond(req, commit_response({A0: 27}), 9, h.clock.now_ms())  # REBALANCE_IN_PROGRESS
    h.owned = frozenset()  # the rebalance took it away
    h.meta = ConsumerGroupMetadata(GROUP, 6, "member-1", "static-1")
    h.clock.advance(BACKOFF * 2)
    assert h.requests() == []
    err = fut.exception(0)
    assert isinstance(err, CommitFailedError)
    assert "a-0" in str(err)


def test_commit_timeout_without_coordinator() -> None:
    h = Harness()
    fut = h.commit({A0: 10}, timeout=300)
    h.requests()
    h.clock.advance(300)
    h.requests()
    assert isinstance(fut.exception(0), KafkaTimeoutError)
    assert not h.cm.pending()


# ---------------------------------------------------------------------------------------------- auto-commit


def consume(h: Harness, offsets: Mapping[TopicPartition, int]) -> None:
    """Records up to ``offsets`` were returned by a poll() and the application polled again (so the
    auto-commit timer may commit them)."""
    for tp, offset in offsets.items():
        if not h.subs.is_assigned(tp):
            h.subs.assign_from_user(h.subs.assigned() | {tp})
        h.subs.seek(tp, offset)
    h.subs.mark_poll_start()


def test_auto_commit_commits_consumed_positions_on_the_timer() -> None:
    h = Harness(auto_commit=True)
    consume(h, {A0: 5, A1: 9})
    assert h.requests() == []  # arms the timer
    h.clock.advance(INTERVAL - 1)
    assert h.requests() == []
    assert not h.coordinator.wanted
    h.clock.advance(1)
    h.requests()
    h.find_coordinator()
    (req,) = h.requests()
    assert committed_offsets(req) == {A0: 5, A1: 9}
    respond(req, commit_response({A0: 0, A1: 0}), 9, h.clock.now_ms())
    assert h.cm.last_committed[A0].offset == 5


def test_auto_commit_skips_unchanged_positions() -> None:
    h = Harness(auto_commit=True)
    h.coordinator.wanted = True
    h.find_coordinator()
    consume(h, {A0: 5, A1: 9})
    h.requests()
    h.clock.advance(INTERVAL)
    (req,) = h.requests()
    respond(req, commit_response({A0: 0, A1: 0}), 9, h.clock.now_ms())
    h.clock.advance(INTERVAL)
    assert h.requests() == []  # nothing consumed since
    consume(h, {A1: 12})
    h.clock.advance(INTERVAL)
    (req,) = h.requests()
    assert committed_offsets(req) == {A1: 12}


def test_auto_commit_only_owned_partitions() -> None:
    h = Harness(auto_commit=True, owned=frozenset({A0}))
    h.coordinator.wanted = True
    h.find_coordinator()
    consume(h, {A0: 5, A1: 9})
    h.requests()
    h.clock.advance(INTERVAL)
    (req,) = h.requests()
    assert committed_offsets(req) == {A0: 5}


def test_auto_commit_can_be_held_back_and_reports_errors() -> None:
    h = Harness(auto_commit=True)
    h.coordinator.wanted = True
    h.find_coordinator()
    consume(h, {A0: 5})
    h.requests()
    h.cm.auto_commit_enabled_now = lambda: False
    h.clock.advance(INTERVAL)
    assert h.requests() == []
    h.cm.auto_commit_enabled_now = lambda: True
    h.clock.advance(INTERVAL)
    (req,) = h.requests()
    respond(req, commit_response({A0: 25}), 9, h.clock.now_ms())  # UNKNOWN_MEMBER_ID
    (err,) = h.auto_errors
    assert isinstance(err, CommitFailedError)


def test_disabled_auto_commit_never_commits() -> None:
    h = Harness(auto_commit=False)
    h.coordinator.wanted = True
    h.find_coordinator()
    consume(h, {A0: 5})
    for _ in range(3):
        h.clock.advance(INTERVAL)
        assert h.requests() == []


# ---------------------------------------------------------------------------------------------- offset fetch


def fetch(h: Harness, parts: set[TopicPartition], timeout: int = 10_000) -> Committed:
    fut: Committed = Future()
    h.cm.fetch_committed(parts, fut, h.clock.now_ms() + timeout)
    return fut


@pytest.mark.parametrize("version", range(CLIENT_VERSIONS[FETCH][0], CLIENT_VERSIONS[FETCH][1] + 1))
def test_offset_fetch_body_for_every_version(version: int) -> None:
    h = Harness()
    fetch(h, {A0, A1, B0})
    h.find_coordinator()
    (req,) = h.requests()
    assert req.api_key == FETCH
    entity = wire.build_request(FETCH, version, req.body(version))
    if version >= 8:
        (group,) = entity.groups
        assert group.group_id == GROUP
        topics = {t.name: tuple(t.partition_indexes) for t in group.topics}
        if version >= 9:
            assert group.member_id == "member-1"
            assert group.member_epoch == 5
    else:
        assert entity.group_id == GROUP
        topics = {t.name: tuple(t.partition_indexes) for t in entity.topics}
    assert topics == {"a": (0, 1), "b": (0,)}
    if version >= 7:
        assert entity.require_stable is True


@pytest.mark.parametrize("version", [1, 7, 8, 9])
def test_offset_fetch_result_mapping(version: int) -> None:
    h = Harness()
    fut = fetch(h, {A0, A1, B0})
    h.find_coordinator()
    (req,) = h.requests()
    response = fetch_response(version, {A0: (0, 42, "meta", 3), A1: (0, -1, "", -1), B0: (0, 8, None, -1)})
    respond(req, response, version, h.clock.now_ms())
    epoch = 3 if version >= 5 else None  # committed leader epochs exist from v5
    assert fut.result(0) == {
        A0: OffsetAndMetadata(42, "meta", epoch),
        A1: None,
        B0: OffsetAndMetadata(8, "", None),
    }


def test_partitions_missing_from_the_response_are_none() -> None:
    h = Harness()
    fut = fetch(h, {A0, A1})
    h.find_coordinator()
    (req,) = h.requests()
    respond(req, fetch_response(9, {A0: (0, 1, "", -1)}), 9, h.clock.now_ms())
    assert fut.result(0) == {A0: OffsetAndMetadata(1, "", None), A1: None}


def test_unstable_offset_commit_is_retried() -> None:
    h = Harness()
    fut = fetch(h, {A0})
    h.find_coordinator()
    (req,) = h.requests()
    respond(req, fetch_response(9, {A0: (88, -1, "", -1)}), 9, h.clock.now_ms())
    assert not fut.done()
    assert h.requests() == []
    h.clock.advance(int(BACKOFF * 1.2))
    (retry,) = h.requests()
    respond(retry, fetch_response(9, {A0: (0, 5, "", -1)}), 9, h.clock.now_ms())
    assert fut.result(0) == {A0: OffsetAndMetadata(5, "", None)}


@pytest.mark.parametrize("version", [7, 9])
def test_offset_fetch_coordinator_error_rediscovers_and_retries(version: int) -> None:
    h = Harness()
    fut = fetch(h, {A0})
    h.find_coordinator()
    (req,) = h.requests()
    respond(req, fetch_response(version, {}, error=16), version, h.clock.now_ms())
    assert h.coordinator.coordinator is None
    h.clock.advance(BACKOFF * 2)
    h.find_coordinator()
    (retry,) = h.requests()
    respond(retry, fetch_response(version, {A0: (0, 3, "", -1)}), version, h.clock.now_ms())
    assert fut.result(0) == {A0: OffsetAndMetadata(3, "", None)}


def test_offset_fetch_errors_fail_the_future() -> None:
    h = Harness()
    fut = fetch(h, {A0})
    h.find_coordinator()
    (req,) = h.requests()
    respond(req, fetch_response(9, {}, error=30), 9, h.clock.now_ms())  # GROUP_AUTHORIZATION_FAILED
    assert isinstance(fut.exception(0), GroupAuthorizationFailedError)
    fut2 = fetch(h, {A0})
    (req,) = h.requests()
    respond(req, fetch_response(9, {A0: (29, -1, "", -1)}), 9, h.clock.now_ms())
    err = fut2.exception(0)
    assert isinstance(err, TopicAuthorizationFailedError) and "a-0" in str(err)


def test_offset_fetch_times_out() -> None:
    h = Harness()
    fut = fetch(h, {A0}, timeout=200)
    h.requests()
    h.clock.advance(200)
    h.requests()
    assert isinstance(fut.exception(0), KafkaTimeoutError)


def test_failures_from_an_old_coordinator_do_not_invalidate_the_new_one() -> None:
    # A commit and an offset fetch sent to coordinator 7 fail (NOT_COORDINATOR, a lost connection) after a
    # new coordinator was found: the new one stays; both are retried on it.
    h = Harness()
    h.coordinator.wanted = True
    h.find_coordinator()
    old_epoch = h.coordinator.epoch
    committed = h.commit({A0: 10})
    fetched = fetch(h, {A0})
    commit_req, fetch_req = sorted(h.requests(), key=lambda r: r.api_key)
    assert h.coordinator.mark_unknown(h.clock.now_ms(), "disconnected", epoch=old_epoch)
    h.clock.advance(BACKOFF * 2)
    h.find_coordinator()
    assert h.coordinator.epoch == old_epoch + 1
    respond(commit_req, commit_response({A0: 16}), 9, h.clock.now_ms())
    assert fetch_req.on_failure is not None
    fetch_req.on_failure(ConnectionError_("coordinator changed"), h.clock.now_ms())
    assert h.coordinator.coordinator is not None  # still the new one
    h.clock.advance(BACKOFF_MAX)
    retries = sorted(h.requests(), key=lambda r: r.api_key)
    assert [r.api_key for r in retries] == [COMMIT, FETCH]
    respond(retries[0], commit_response({A0: 0}), 9, h.clock.now_ms())
    respond(retries[1], fetch_response(9, {A0: (0, 10, "", -1)}), 9, h.clock.now_ms())
    assert committed.result(0) is None
    assert fetched.result(0) == {A0: OffsetAndMetadata(10, "", None)}


def test_commit_timeout_names_the_last_failure() -> None:
    h = Harness()
    h.coordinator.wanted = True
    h.find_coordinator()
    fut = h.commit({A0: 10}, timeout=1000)
    (req,) = h.requests()
    assert req.on_failure is not None
    req.on_failure(ConnectionError_("connection to node 7 refused"), h.clock.now_ms())
    h.clock.advance(1000)
    h.requests()
    error = fut.exception(0)
    assert isinstance(error, KafkaTimeoutError) and error.retriable
    assert "connection to node 7 refused" in str(error)


def test_a_response_after_the_deadline_passed_in_flight_is_ignored() -> None:
    """An auto-commit's deadline is its interval (100 ms in some setups): the response may come later.  It
    must not complete the already failed future again (InvalidStateError on the network thread)."""
    h = Harness(auto_commit=True)
    h.coordinator.wanted = True
    h.find_coordinator()
    consume(h, {A0: 5})
    h.requests()
    h.clock.advance(INTERVAL)
    (req,) = h.requests()
    h.clock.advance(INTERVAL)  # the deadline passes while the request is in flight
    h.requests()
    (err,) = h.auto_errors
    assert isinstance(err, KafkaTimeoutError)
    respond(req, commit_response({A0: 0}), 9, h.clock.now_ms())  # late answer: no InvalidStateError
    assert req.on_failure is not None
    req.on_failure(ConnectionError_("closed"), h.clock.now_ms())  # nor for a late failure
    assert len(h.auto_errors) == 1
