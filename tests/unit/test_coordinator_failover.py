"""Group coordinator failover across components (issue 13): CoordinatorManager + ConsumerMembership +
CommitManager driven by the real :class:`NetworkThread` loop over a scripted network client and a fake clock.

The scripted client answers every request inside the ``poll()`` that follows its ``send()`` -- exactly the
timing that caused the livelock: a membership queued "coordinator needed" in one network-thread pass, the
FindCoordinator answer arrived in the same ``client.poll()``, and the stale event, drained after it, marked
the freshly found coordinator unknown again, thousands of times a second.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, cast

import pytest
from kio.schema.consumer_group_heartbeat.v1.response import (
    Assignment,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from kafka_handoff.consumer.offsets import CommitManager
from kafka_handoff.consumer.subscription import SubscriptionState
from kafka_handoff.errors import (
    AuthenticationError,
    ConnectionError_,
    CoordinatorNotAvailableError,
    KafkaTimeoutError,
)
from kafka_handoff.group.assignors import RangeAssignor
from kafka_handoff.group.assignors.base import MemberAssignment
from kafka_handoff.group.classic_membership import ClassicMembership
from kafka_handoff.group.classic_membership import MemberState as ClassicState
from kafka_handoff.group.consumer_membership import ConsumerMembership, MemberState
from kafka_handoff.group.coordinator import CoordinatorManager
from kafka_handoff.group.membership import CallbackNeeded, CoordinatorNeeded, Subscription
from kafka_handoff.group.protocol_data import encode_assignment
from kafka_handoff.network.client import NetworkClient
from kafka_handoff.network.thread import NetworkThread
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.requests import COORDINATOR, FakeClock, RequestManager, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import BrokerNode, ClusterMetadata, OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.unit

GROUP = "g"
TID = uuid.UUID("00000000-0000-0000-0000-00000000000a")
A0 = TopicPartition("a", 0)
HEARTBEAT_INTERVAL = 1000
BACKOFF = 100
MEMBER_EPOCH = 5


def _heartbeat_response(
    *, error: int = 0, epoch: int = MEMBER_EPOCH, assignment: bool = False
) -> ConsumerGroupHeartbeatResponse:
    asg = (
        Assignment(topic_partitions=(TopicPartitions(topic_id=TID, partitions=(i32(0),)),))
        if assignment
        else None
    )
    return ConsumerGroupHeartbeatResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode(error),
        error_message=None,
        member_id="m1",
        member_epoch=i32(epoch),
        heartbeat_interval=i32Timedelta.parse(datetime.timedelta(milliseconds=HEARTBEAT_INTERVAL)),
        assignment=asg,
    )


def _find_response(node_id: int) -> Any:
    return wire.build_response(
        ApiKey.FIND_COORDINATOR,
        4,
        {
            "throttle_time": 0,
            "coordinators": [
                {"key": GROUP, "node_id": node_id, "host": f"b{node_id}", "port": 9092, "error_code": 0}
            ],
        },
    )


def _classic_response(api_key: int, request: UnsentRequest, code: int) -> Any:
    if api_key == 11:  # JoinGroup: we are a follower of generation 1
        values: dict[str, Any] = {
            "error_code": code,
            "generation_id": 1,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "leader": "other",
            "skip_assignment": False,
            "member_id": "m1",
            "members": [],
        }
        return wire.build_response(11, 9, {"throttle_time": 0, **values})
    if api_key == 14:  # SyncGroup: partition a-0
        assignment = encode_assignment(MemberAssignment((A0,)))
        values = {"error_code": code, "protocol_type": "consumer", "protocol_name": "range"}
        return wire.build_response(14, 5, {"throttle_time": 0, **values, "assignment": assignment})
    if api_key == 12:
        return wire.build_response(12, 4, {"throttle_time": 0, "error_code": code})
    return wire.build_response(13, 5, {"throttle_time": 0, "error_code": code, "members": []})


def _commit_response(request: UnsentRequest) -> Any:
    body = request.body(9)
    topics = [
        {
            "name": t["name"],
            "partitions": [
                {"partition_index": p["partition_index"], "error_code": 0} for p in t["partitions"]
            ],
        }
        for t in body["topics"]
    ]
    return wire.build_response(ApiKey.OFFSET_COMMIT, 9, {"throttle_time": 0, "topics": topics})


class ScriptedCluster:
    """A fake :class:`NetworkClient`: answers every request in the next ``poll()`` (1 ms later).

    ``named(now)`` says which node FindCoordinator names; requests to a node in ``dead`` fail with a
    connection error and the client's disconnect listeners run (as the real client does).
    """

    def __init__(self, clock: FakeClock, named: Callable[[int], int]) -> None:
        self.clock = clock
        self.named = named
        self.dead: set[int] = set()
        self.coordinator_id: int | None = None
        self.queue: list[tuple[UnsentRequest, int | None]] = []
        self.sent: list[tuple[int, int | None, int]] = []
        """(api key, destination coordinator node or None, time)."""
        self.heartbeats: list[tuple[int, dict[str, Any]]] = []
        self.commits: list[int] = []
        self.disconnect_listeners: list[Callable[[int, bool, int], None]] = []
        self.heartbeat_error: Callable[[int, int], int] = lambda node, now: 0

    # --- the NetworkClient surface the thread and the managers use ---------------------------------
    def take_auth_errors(self) -> list[AuthenticationError]:
        return []

    def set_coordinator(self, node: BrokerNode | None, now_ms: int) -> None:
        self.coordinator_id = None if node is None else node.node_id

    def send(self, request: UnsentRequest, now_ms: int) -> None:
        target = self.coordinator_id if request.node == COORDINATOR else None
        self.sent.append((request.api_key, target, now_ms))
        if request.node == COORDINATOR and target is None:
            assert request.on_failure is not None
            request.on_failure(CoordinatorNotAvailableError("coordinator unknown"), now_ms)
            return
        self.queue.append((request, target))

    def poll(self, timeout_ms: int, now_ms: int, clock: Callable[[], int]) -> None:
        if not self.queue:
            self.clock.advance(max(1, min(timeout_ms, 1000)))
            return
        now = self.clock.advance(1)
        queue, self.queue = self.queue, []
        for request, target in queue:
            self._answer(request, target, now)

    def wakeup(self) -> None:
        pass

    def close(self) -> None:
        pass

    # --- the scripted broker side -------------------------------------------------------------------
    def _answer(self, request: UnsentRequest, target: int | None, now: int) -> None:
        if request.api_key == ApiKey.FIND_COORDINATOR:
            assert request.on_response is not None
            request.on_response(_find_response(self.named(now)), 4, now)
            return
        assert target is not None
        if target in self.dead:
            assert request.on_failure is not None
            request.on_failure(ConnectionError_(f"connection to node {target} refused"), now)
            for listener in self.disconnect_listeners:
                listener(target, True, now)
            return
        assert request.on_response is not None
        if request.api_key == 68:
            assert request.values is not None
            self.heartbeats.append((target, dict(request.values)))
            code = self.heartbeat_error(target, now)
            joining = request.values["member_epoch"] == 0
            request.on_response(_heartbeat_response(error=code, assignment=joining), 1, now)
        elif request.api_key == ApiKey.OFFSET_COMMIT:
            self.commits.append(target)
            request.on_response(_commit_response(request), 9, now)
        elif request.api_key in (11, 12, 13, 14):  # the classic protocol
            values = dict(request.body(9 if request.api_key == 11 else 5 if request.api_key != 12 else 4))
            code = self.heartbeat_error(target, now) if request.api_key == 12 else 0
            if request.api_key == 12:
                self.heartbeats.append((target, values))
            version = {11: 9, 12: 4, 13: 5, 14: 5}[request.api_key]
            request.on_response(_classic_response(request.api_key, request, code), version, now)
        else:
            raise AssertionError(f"unexpected request {request.api_key}")

    def count(self, api_key: int, since: int = 0) -> int:
        return sum(1 for key, _, at in self.sent if key == api_key and at >= since)


class Consumerish:
    """The consumer's wiring of coordinator, membership and commits, on the real NetworkThread loop."""

    def __init__(self, named: Callable[[int], int], protocol: str = "consumer") -> None:
        self.clock = FakeClock()
        self.client = ScriptedCluster(self.clock, named)
        self.coordinator = CoordinatorManager(GROUP, retry_backoff_ms=BACKOFF, retry_backoff_max_ms=1000)
        self.protocol = protocol
        self.membership: Any = (
            ConsumerMembership(
                GROUP,
                member_id="m1",
                retry_backoff_ms=BACKOFF,
                jitter=lambda: 0.5,
                rebalance_timeout_ms=300_000,
            )
            if protocol == "consumer"
            else ClassicMembership(
                GROUP,
                [RangeAssignor()],
                session_timeout_ms=10_000,
                heartbeat_interval_ms=HEARTBEAT_INTERVAL,
                rebalance_timeout_ms=300_000,
                retry_backoff_ms=BACKOFF,
            )
        )
        self.subs = SubscriptionState("latest")
        self.commits = CommitManager(
            GROUP,
            self.coordinator,
            self.subs,
            group_metadata=self.membership.group_metadata,
            owned=lambda: self.membership.owned,
            auto_commit=False,
            auto_commit_interval_ms=5000,
            retry_backoff_ms=BACKOFF,
            retry_backoff_max_ms=1000,
        )
        coordinator, membership, client = self.coordinator, self.membership, self.client
        coordinator.listeners.append(client.set_coordinator)
        coordinator.listeners.append(
            lambda node, now: membership.on_coordinator(
                None if node is None else node.node_id, now, coordinator.epoch
            )
        )

        def on_disconnect(node: int, is_coordinator: bool, now: int) -> None:
            if is_coordinator:
                coordinator.mark_unknown(now, "connection lost", node_id=node)

        client.disconnect_listeners.append(on_disconnect)
        managers: list[RequestManager] = [coordinator, membership, self.commits]
        self.thread = NetworkThread(cast(NetworkClient, client), managers, self.clock)
        self.thread.add_after_poll(self._drain)
        self.coordinator_needed: list[CoordinatorNeeded] = []

    def _drain(self, now: int) -> None:
        # Consumer._drain_membership_nt's handling, with a prompt application thread for callbacks.
        for event in self.membership.drain_events():
            if isinstance(event, CoordinatorNeeded):
                self.coordinator_needed.append(event)
                self.coordinator.on_coordinator_needed(event, now)
            elif isinstance(event, CallbackNeeded):
                self.membership.on_callback_completed(event.seq, None, now)

    def run(self, ms: int) -> None:
        end = self.clock.now_ms() + ms
        while self.clock.now_ms() < end:
            self.thread._run_once(self.clock.now_ms())

    def run_until(self, condition: Callable[[], bool], ms: int) -> None:
        end = self.clock.now_ms() + ms
        while not condition():
            assert self.clock.now_ms() < end, "condition not reached in fake time"
            self.thread._run_once(self.clock.now_ms())

    def join(self) -> None:
        m = self.membership
        m.on_metadata(ClusterMetadata(topic_ids={"a": TID}), self.clock.now_ms())
        m.subscribe(Subscription(topics=frozenset({"a"})), self.clock.now_ms())
        m.on_app_poll(self.clock.now_ms())
        self.run_until(lambda: self.stable() and m.owned == {A0}, 5000)
        if self.protocol == "consumer":
            assert m.member_epoch == MEMBER_EPOCH
        self.client.heartbeats.clear()

    def stable(self) -> bool:
        if self.protocol == "consumer":
            return bool(self.membership.state is MemberState.STABLE)
        return bool(self.membership.state is ClassicState.STABLE)

    def member(self, values: dict[str, Any]) -> tuple[str, int]:
        """(member id, member epoch or generation) a heartbeat carried."""
        if self.protocol == "consumer":
            return (values["member_id"], values["member_epoch"])
        return (values["member_id"], values["generation_id"])

    @property
    def expected_member(self) -> tuple[str, int]:
        return ("m1", MEMBER_EPOCH if self.protocol == "consumer" else 1)

    def commit(self, offset: int, timeout_ms: int = 60_000) -> Future[None]:
        fut: Future[None] = Future()
        now = self.clock.now_ms()
        self.commits.commit({A0: OffsetAndMetadata(offset)}, fut, now + timeout_ms, now_ms=now)
        return fut


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_stale_coordinator_event_drained_after_a_same_poll_discovery_does_not_livelock(protocol: str) -> None:
    # The coordinator (node 1) is forgotten outside the membership (a failed commit marks it unknown).
    # The membership then asks for a coordinator in the same pass in which the FindCoordinator answer
    # (node 2) arrives; its event is drained afterwards.  It must not invalidate node 2.
    c = Consumerish(named=lambda now: 1, protocol=protocol)
    c.join()
    c.client.named = lambda now: 2
    start = c.clock.now_ms()
    c.coordinator.mark_unknown(start, "OffsetCommit failed: connection lost", epoch=c.coordinator.epoch)
    c.run(10_000)
    assert c.client.count(ApiKey.FIND_COORDINATOR, since=start) == 1
    assert c.coordinator.coordinator is not None and c.coordinator.coordinator.node_id == 2
    assert c.membership.coordinator_id == 2
    # Heartbeats went on to node 2, every interval, keeping the member epoch and id.
    to_new = [values for node, values in c.client.heartbeats if node == 2]
    assert len(to_new) >= 10_000 // HEARTBEAT_INTERVAL - 1
    assert {c.member(v) for v in to_new} == {c.expected_member}
    assert c.stable()


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_dead_coordinator_still_named_by_find_coordinator_costs_bounded_requests(protocol: str) -> None:
    # Node 1 dies; FindCoordinator keeps naming it for 5 s (until the controller fences it), then names
    # node 2.  Every request to node 1 is refused.  Over that time the client sends a bounded number of
    # FindCoordinator and heartbeat requests (paced by retry.backoff.ms), then recovers at once.
    fenced_at: list[int] = []
    c = Consumerish(named=lambda now: 1 if not fenced_at or now < fenced_at[0] else 2, protocol=protocol)
    c.join()
    start = c.clock.now_ms()
    fenced_at.append(start + 5000)
    c.client.dead.add(1)
    c.run(10_000)
    finds = c.client.count(ApiKey.FIND_COORDINATOR, since=start)
    heartbeats = c.client.count(68 if protocol == "consumer" else 12, since=start)
    # Each cycle (find node 1, heartbeat refused, rediscover) is paced by retry.backoff.ms growing to
    # retry.backoff.max.ms: a handful of requests a second, not thousands.
    assert 3 <= finds <= 5000 // int(BACKOFF * 0.8) + 5
    assert heartbeats <= finds + 10_000 // HEARTBEAT_INTERVAL + 2
    assert c.coordinator.coordinator is not None and c.coordinator.coordinator.node_id == 2
    # Heartbeats reach node 2 within two maximal backoffs of FindCoordinator naming it.
    first_to_new = min(at for key, node, at in c.client.sent if key in (12, 68) and node == 2)
    assert first_to_new - fenced_at[0] <= 2 * 1200 + BACKOFF
    # The member kept its id and epoch: the new coordinator loaded the group.
    to_new = [v for node, v in c.client.heartbeats if node == 2]
    assert {c.member(v) for v in to_new} == {c.expected_member}
    if protocol == "consumer":
        # The first heartbeat to the new coordinator is a full one (subscription and owned partitions).
        assert set(to_new[0]["subscribed_topic_names"]) == {"a"}
        assert to_new[0]["topic_partitions"] is not None
    assert c.stable() and c.membership.owned == {A0}


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_commit_in_flight_when_the_coordinator_dies_is_retried_on_the_new_one(protocol: str) -> None:
    fenced_at: list[int] = []
    c = Consumerish(named=lambda now: 1 if not fenced_at or now < fenced_at[0] else 2, protocol=protocol)
    c.join()
    c.client.dead.add(1)
    start = c.clock.now_ms()
    fenced_at.append(start + 3000)
    fut = c.commit(42)
    c.run_until(fut.done, 60_000)
    assert fut.result(0) is None
    assert c.client.commits == [2]
    # Done soon after the new coordinator is known (backoff-paced retries), not at the 60 s deadline.
    assert c.clock.now_ms() - fenced_at[0] <= 2000


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_commit_fails_with_a_retriable_timeout_when_no_coordinator_comes_back(protocol: str) -> None:
    c = Consumerish(named=lambda now: 1, protocol=protocol)
    c.join()
    c.client.dead.add(1)
    start = c.clock.now_ms()
    fut = c.commit(42, timeout_ms=5000)
    c.run_until(fut.done, 10_000)
    error = fut.exception(0)
    assert isinstance(error, KafkaTimeoutError) and error.retriable
    assert "connection" in str(error)  # names the last failure
    assert c.clock.now_ms() - start <= 5000 + 1000
    assert c.client.count(ApiKey.OFFSET_COMMIT, since=start) <= 5000 // int(BACKOFF * 0.8)


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
@pytest.mark.parametrize("code", [ErrorCode.not_coordinator, ErrorCode.coordinator_not_available])
def test_coordinator_error_moves_heartbeats_to_the_new_coordinator(code: ErrorCode, protocol: str) -> None:
    moved: list[int] = []
    c = Consumerish(named=lambda now: 2 if moved else 1, protocol=protocol)
    c.join()
    moved.append(c.clock.now_ms())
    c.client.heartbeat_error = lambda node, now: int(code) if node == 1 else 0
    c.run(5000)
    assert c.coordinator.coordinator is not None and c.coordinator.coordinator.node_id == 2
    assert sum(1 for node, _ in c.client.heartbeats if node == 1) == 1
    assert [e.epoch for e in c.coordinator_needed if e.epoch is not None] == [1]
    assert sum(1 for node, _ in c.client.heartbeats if node == 2) >= 3
    assert c.stable() and c.membership.owned == {A0}
    assert {c.member(v) for _, v in c.client.heartbeats} == {c.expected_member}
