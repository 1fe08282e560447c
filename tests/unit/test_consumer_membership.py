"""KIP-848 consumer-protocol membership (sans-I/O), driven with a fake clock.

Follows the checklist of kafka_reference.md §6.1: state transitions, heartbeat contents, every error code,
reconciliation orderings, delayed revocation (KIP-983), fencing and leaving from every state, poll timer.
"""

from __future__ import annotations

import datetime
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from kio.schema.consumer_group_heartbeat.v1.response import (
    Assignment,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta
from rebalance_sink import RecordingSink

from kafka_handoff.errors import (
    BrokerResponseError,
    ConfigError,
    ConnectionError_,
    GroupProtocolUnsupportedError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    error_class,
)
from kafka_handoff.group.consumer_membership import (
    VALID_PREVIOUS_STATES,
    ConsumerMembership,
    MemberState,
    generate_member_id,
)
from kafka_handoff.group.membership import (
    AssignmentChanged,
    CallbackKind,
    CallbackNeeded,
    CoordinatorNeeded,
    GroupEvent,
    Membership,
    MembershipError,
    MetadataNeeded,
    Subscription,
)
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.requests import COORDINATOR, FakeClock, UnsentRequest
from kafka_handoff.types import ClusterMetadata, TopicPartition

pytestmark = pytest.mark.unit

S = MemberState
TID_A = uuid.UUID("00000000-0000-0000-0000-00000000000a")
TID_B = uuid.UUID("00000000-0000-0000-0000-00000000000b")
TID_C = uuid.UUID("00000000-0000-0000-0000-00000000000c")
META = ClusterMetadata(topic_ids={"a": TID_A, "b": TID_B})
META_ALL = ClusterMetadata(topic_ids={"a": TID_A, "b": TID_B, "c": TID_C})
REBALANCE_TIMEOUT = 60_000


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def tps(*items: str) -> frozenset[TopicPartition]:
    """tps("a0", "b1") -> {a-0, b-1}"""
    return frozenset(TopicPartition(s[0], int(s[1:])) for s in items)


def response(
    *,
    error: int | ErrorCode = 0,
    epoch: int = 1,
    interval_ms: int = 5000,
    assignment: Mapping[uuid.UUID, Iterable[int]] | None = None,
    member_id: str | None = "m1",
    message: str | None = None,
) -> ConsumerGroupHeartbeatResponse:
    asg = None
    if assignment is not None:
        asg = Assignment(
            topic_partitions=tuple(
                TopicPartitions(topic_id=t, partitions=tuple(i32(p) for p in ps))
                for t, ps in assignment.items()
            )
        )
    return ConsumerGroupHeartbeatResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode(error),
        error_message=message,
        member_id=member_id,
        member_epoch=i32(epoch),
        heartbeat_interval=i32Timedelta.parse(datetime.timedelta(milliseconds=interval_ms)),
        assignment=asg,
    )


class H:
    """Harness: a membership, a fake clock, and helpers to play the broker and the application thread."""

    def __init__(self, **kwargs: Any) -> None:
        self.clock = FakeClock()
        self.sink = RecordingSink()
        kwargs.setdefault("rebalance_timeout_ms", REBALANCE_TIMEOUT)
        kwargs.setdefault("member_id", "m1")
        kwargs.setdefault("jitter", lambda: 0.5)  # jitter factor exactly 1.0
        self.m = ConsumerMembership("g", metrics=self.sink, **kwargs)
        self.m.on_coordinator(1, self.now)
        self.m.on_metadata(META, self.now)
        self._events: list[GroupEvent] = []

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def state(self) -> MemberState:
        return self.m.state

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    # --- network thread -------------------------------------------------------------------------
    def poll(self) -> list[UnsentRequest]:
        result = self.m.poll(self.now)
        for request in result.unsent:
            check_request(request)
        return result.unsent

    def hb(self) -> UnsentRequest:
        reqs = self.poll()
        assert len(reqs) == 1, f"expected one heartbeat in {self.m.state_name}, got {len(reqs)}"
        return reqs[0]

    def no_hb(self) -> None:
        assert self.poll() == []

    def respond(self, req: UnsentRequest, version: int = 1, **kwargs: Any) -> None:
        assert req.on_response is not None
        req.on_response(response(**kwargs), version, self.now)

    def fail(self, req: UnsentRequest, error: BaseException) -> None:
        assert req.on_failure is not None
        req.on_failure(error, self.now)

    # --- application thread ---------------------------------------------------------------------
    def events(self) -> list[GroupEvent]:
        new = self.m.drain_events()
        self._events.extend(new)
        return new

    def callbacks(self) -> list[CallbackNeeded]:
        return [e for e in self.events() if isinstance(e, CallbackNeeded)]

    def complete(self, event: CallbackNeeded, error: BaseException | None = None) -> None:
        self.m.on_callback_completed(event.seq, error, self.now)

    def app_poll(self) -> None:
        self.m.on_app_poll(self.now)

    # --- flows ----------------------------------------------------------------------------------
    def subscribe(self, *topics: str, pattern: str | None = None) -> None:
        if pattern is not None:
            self.m.subscribe(Subscription(pattern=re.compile(pattern)), self.now)
        else:
            self.m.subscribe(Subscription(topics=frozenset(topics)), self.now)

    def join(self, assignment: Mapping[uuid.UUID, Iterable[int]], epoch: int = 1) -> None:
        """subscribe -> app poll -> join heartbeat -> assignment -> callbacks -> ack -> STABLE."""
        self.subscribe("a", "b")
        self.app_poll()
        join = self.hb()
        assert join.values is not None and join.values["member_epoch"] == 0
        self.respond(join, epoch=epoch, assignment=assignment)
        self.run_callbacks()
        assert self.state() is S.ACKNOWLEDGING
        ack = self.hb()
        self.respond(ack, epoch=epoch)
        assert self.state() is S.STABLE
        self.events()

    def run_callbacks(self) -> list[CallbackNeeded]:
        """Complete every callback (and any it leads to) successfully, like a prompt app thread."""
        done: list[CallbackNeeded] = []
        while cbs := self.callbacks():
            for cb in cbs:
                self.complete(cb)
                done.append(cb)
        return done

    def next_interval_hb(self) -> UnsentRequest:
        """Advance to the next interval heartbeat (keeping the app polling) and return it."""
        for _ in range(100):
            self.app_poll()
            reqs = self.poll()
            if reqs:
                assert len(reqs) == 1
                return reqs[0]
            self.advance(500)
        raise AssertionError("no heartbeat within 50 s")


def check_request(request: UnsentRequest) -> None:
    """Every heartbeat must be buildable by the wire layer for v1 (and v0 without a regex)."""
    assert request.api_key == 68
    assert request.node == COORDINATOR
    assert request.values is not None
    entity = wire.build_request(68, 1, request.values)
    assert entity.member_id == request.values["member_id"]
    if request.min_version == 0:
        wire.build_request(68, 0, request.values)


def V(req: UnsentRequest) -> Mapping[str, Any]:
    assert req.values is not None
    return req.values


def owned_wire(req: UnsentRequest) -> dict[uuid.UUID, list[int]] | None:
    value = V(req)["topic_partitions"]
    if value is None:
        return None
    return {e["topic_id"]: e["partitions"] for e in value}


@pytest.fixture
def h() -> H:
    return H()


# ================================================================================= state machine


def test_transition_table_is_the_reference_table() -> None:
    expected = {
        S.UNSUBSCRIBED: {S.PREPARE_LEAVING, S.LEAVING, S.FENCED},
        S.JOINING: {S.FENCED, S.UNSUBSCRIBED, S.STALE},
        S.RECONCILING: {S.STABLE, S.JOINING, S.ACKNOWLEDGING, S.RECONCILING},
        S.ACKNOWLEDGING: {S.RECONCILING},
        S.STABLE: {S.JOINING, S.ACKNOWLEDGING, S.RECONCILING},
        S.FENCED: {S.JOINING, S.STABLE, S.RECONCILING, S.ACKNOWLEDGING, S.PREPARE_LEAVING, S.LEAVING},
        S.PREPARE_LEAVING: {S.JOINING, S.STABLE, S.RECONCILING, S.ACKNOWLEDGING, S.UNSUBSCRIBED},
        S.LEAVING: {S.PREPARE_LEAVING},
        S.FATAL: {
            S.JOINING,
            S.STABLE,
            S.RECONCILING,
            S.ACKNOWLEDGING,
            S.PREPARE_LEAVING,
            S.LEAVING,
            S.UNSUBSCRIBED,
        },
        S.STALE: {S.LEAVING},
    }
    assert {k: set(v) for k, v in VALID_PREVIOUS_STATES.items()} == expected


@pytest.mark.parametrize("old", list(MemberState))
@pytest.mark.parametrize("new", list(MemberState))
def test_every_transition_is_checked(old: MemberState, new: MemberState) -> None:
    m = ConsumerMembership("g", member_id="m1")
    m._state = old
    if old in VALID_PREVIOUS_STATES[new]:
        m._transition(new, 0)
        assert m.state_name == new.value
    else:
        with pytest.raises(IllegalStateError, match=f"{old.value} -> {new.value}"):
            m._transition(new, 0)
        assert m.state_name == old.value


def test_implements_membership_protocol_and_names_states(h: H) -> None:
    membership: Membership = h.m
    assert membership.state_name == "UNSUBSCRIBED"
    assert h.state() is S.UNSUBSCRIBED
    assert membership.left
    assert membership.owned == frozenset()


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"group\.id"):
        ConsumerMembership("")
    with pytest.raises(ConfigError, match=r"max\.poll\.interval\.ms"):
        ConsumerMembership("g", rebalance_timeout_ms=0)
    with pytest.raises(ConfigError, match=r"retry\.backoff"):
        ConsumerMembership("g", retry_backoff_ms=-1)


def test_generated_member_id_is_kafka_uuid_like_and_kept_across_rejoin() -> None:
    mid = generate_member_id()
    assert len(mid) == 22 and re.fullmatch(r"[A-Za-z0-9_-]{22}", mid)
    assert generate_member_id() != mid
    h = H(member_id=None)
    first = h.m.member_id
    h.subscribe("a")
    h.app_poll()
    req = h.hb()
    assert V(req)["member_id"] == first
    h.respond(req, member_id=first, error=ErrorCode.fenced_member_epoch)
    assert h.state() is S.JOINING
    assert V(h.hb())["member_id"] == first


# ============================================================================= heartbeat contents


def test_no_heartbeat_until_app_poll_after_subscribe(h: H) -> None:
    h.subscribe("a")
    assert h.state() is S.UNSUBSCRIBED
    h.no_hb()
    h.app_poll()
    assert h.state() is S.JOINING
    assert len(h.poll()) == 1


def test_first_heartbeat_carries_everything_to_join() -> None:
    h = H(rack_id="rack-1", server_assignor="uniform")
    h.subscribe("b", "a")
    h.app_poll()
    req = h.hb()
    assert dict(V(req)) == {
        "group_id": "g",
        "member_id": "m1",
        "member_epoch": 0,
        "instance_id": None,
        "rack_id": "rack-1",
        "rebalance_timeout": REBALANCE_TIMEOUT,
        "subscribed_topic_names": ["a", "b"],
        "subscribed_topic_regex": None,
        "server_assignor": "uniform",
        "topic_partitions": [],
    }
    entity = wire.build_request(68, 1, V(req))
    assert entity.rebalance_timeout == datetime.timedelta(milliseconds=REBALANCE_TIMEOUT)
    assert entity.topic_partitions == ()
    assert req.on_response is not None and req.on_failure is not None


def test_later_heartbeats_send_only_changed_fields() -> None:
    h = H(rack_id="rack-1", server_assignor="range", group_instance_id="inst-1")
    h.join({TID_A: [0]}, epoch=3)
    req = h.next_interval_hb()
    assert dict(V(req)) == {
        "group_id": "g",
        "member_id": "m1",
        "member_epoch": 3,
        "instance_id": "inst-1",  # always sent when configured
        "rack_id": None,
        "rebalance_timeout": -1,
        "subscribed_topic_names": None,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": None,
    }
    h.respond(req, epoch=3)
    h.subscribe("a", "c")
    req = h.next_interval_hb()
    assert V(req)["subscribed_topic_names"] == ["a", "c"]
    assert V(req)["topic_partitions"] is None
    h.respond(req, epoch=3)
    assert V(h.next_interval_hb())["subscribed_topic_names"] is None


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(lambda h, r: h.fail(r, ConnectionError_("disconnected")), id="disconnect"),
        pytest.param(lambda h, r: h.fail(r, KafkaTimeoutError("timed out")), id="timeout"),
        pytest.param(lambda h, r: h.respond(r, error=ErrorCode.coordinator_load_in_progress), id="load"),
        pytest.param(lambda h, r: h.respond(r, error=ErrorCode.not_coordinator), id="not-coordinator"),
    ],
)
def test_full_heartbeat_after_any_failure(failure: Any) -> None:
    h = H(server_assignor="uniform")
    h.join({TID_A: [0, 1]}, epoch=2)
    req = h.next_interval_hb()
    assert V(req)["topic_partitions"] is None
    failure(h, req)
    h.events()
    h.m.on_coordinator(1, h.now)
    h.advance(100)  # the backoff, if any
    full = h.hb()
    assert V(full)["member_epoch"] == 2
    assert V(full)["rebalance_timeout"] == REBALANCE_TIMEOUT
    assert V(full)["subscribed_topic_names"] == ["a", "b"]
    assert V(full)["server_assignor"] == "uniform"
    assert owned_wire(full) == {TID_A: [0, 1]}
    h.respond(full, epoch=2)
    assert V(h.next_interval_hb())["topic_partitions"] is None


def test_heartbeat_interval_comes_from_the_broker(h: H) -> None:
    h.subscribe("a")
    h.app_poll()
    join = h.hb()
    h.respond(join, interval_ms=3000, assignment={TID_A: [0]})
    h.run_callbacks()
    ack = h.hb()
    assert h.m.heartbeat_interval_ms == 3000
    sent_at = h.now
    h.advance(100)
    h.respond(ack, interval_ms=3000)
    h.advance(2899)
    result = h.m.poll(h.now)
    assert result.unsent == []
    assert result.wait_ms == 1
    h.advance(1)
    req = h.hb()
    assert h.now == sent_at + 3000
    # A new interval from the broker applies from that response on.
    h.respond(req, interval_ms=1000)
    h.advance(999)
    h.no_hb()
    h.advance(1)
    assert len(h.poll()) == 1


def test_at_most_one_heartbeat_in_flight(h: H) -> None:
    h.subscribe("a")
    h.app_poll()
    join = h.hb()
    h.advance(10_000)
    h.no_hb()  # JOINING sends "now", but one is in flight
    h.respond(join, assignment={TID_A: [0]})
    h.run_callbacks()
    ack = h.hb()
    h.advance(10_000)
    h.no_hb()
    h.respond(ack)
    assert len(h.poll()) == 1  # interval long past


def test_no_heartbeat_without_coordinator_asks_for_one(h: H) -> None:
    h.m.on_coordinator(None, h.now)
    h.subscribe("a")
    h.app_poll()
    h.no_hb()
    assert h.events() == [CoordinatorNeeded("coordinator unknown")]
    h.no_hb()
    assert h.events() == []  # asked once
    h.m.on_coordinator(7, h.now)
    assert V(h.hb())["member_epoch"] == 0


def test_backoff_is_exponential_and_capped() -> None:
    h = H(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    h.subscribe("a")
    h.app_poll()
    delays = []
    req = h.hb()
    for _ in range(6):
        h.respond(req, error=ErrorCode.coordinator_load_in_progress)
        failed_at = h.now
        while not (reqs := h.m.poll(h.now).unsent):
            h.advance(1)
        delays.append(h.now - failed_at)
        (req,) = reqs
    assert delays == [100, 200, 400, 800, 1000, 1000]


def test_backoff_jitter_source_is_injected() -> None:
    low = H(jitter=lambda: 0.0)
    high = H(jitter=lambda: 0.999999)
    assert low.m._timer.backoff.backoff_ms(0) == 80
    assert high.m._timer.backoff.backoff_ms(0) == 119
    assert high.m._timer.backoff.backoff_ms(10) == 1000  # capped at retry.backoff.max.ms


def test_backoff_resets_after_success(h: H) -> None:
    h.subscribe("a")
    h.app_poll()
    for _ in range(3):
        h.respond(h.hb(), error=ErrorCode.coordinator_load_in_progress)
        h.advance(1000)
    assert h.m._timer.failures == 3
    h.respond(h.hb(), assignment={TID_A: [0]})
    assert h.m._timer.failures == 0
    h.run_callbacks()
    ack = h.hb()
    h.respond(ack, error=ErrorCode.coordinator_load_in_progress)
    h.advance(99)
    h.no_hb()
    h.advance(1)
    assert len(h.poll()) == 1


# ================================================================================== error table


@pytest.mark.parametrize("code", [ErrorCode.not_coordinator, ErrorCode.coordinator_not_available])
def test_coordinator_errors_rediscover_and_retry_without_backoff(h: H, code: ErrorCode) -> None:
    h.join({TID_A: [0]})
    req = h.next_interval_hb()
    h.respond(req, error=code)
    assert h.state() is S.STABLE
    events = h.events()
    assert len(events) == 1 and isinstance(events[0], CoordinatorNeeded)
    assert h.m.coordinator_id is None
    h.advance(5000)
    h.no_hb()  # waits for the coordinator
    h.m.on_coordinator(2, h.now)
    assert len(h.poll()) == 1  # immediately: no backoff


def test_coordinator_load_in_progress_backs_off_and_retries(h: H) -> None:
    h.join({TID_A: [0]})
    req = h.next_interval_hb()
    h.respond(req, error=ErrorCode.coordinator_load_in_progress)
    assert h.state() is S.STABLE
    assert h.events() == []
    h.advance(99)
    h.no_hb()
    h.advance(1)
    assert len(h.poll()) == 1


def test_disconnect_marks_coordinator_unknown_and_backs_off(h: H) -> None:
    h.join({TID_A: [0]})
    req = h.next_interval_hb()
    h.fail(req, ConnectionError_("connection reset"))
    assert any(isinstance(e, CoordinatorNeeded) for e in h.events())
    h.m.on_coordinator(1, h.now)
    h.no_hb()  # backoff 100 ms
    h.advance(100)
    assert len(h.poll()) == 1


def test_coordinator_needed_names_the_coordinator_the_heartbeat_went_to(h: H) -> None:
    h.m.on_coordinator(1, h.now, 7)
    h.join({TID_A: [0]})
    h.respond(h.next_interval_hb(), error=ErrorCode.not_coordinator)
    assert [e for e in h.events() if isinstance(e, CoordinatorNeeded)] == [
        CoordinatorNeeded("heartbeat failed with NOT_COORDINATOR", epoch=7)
    ]


def test_stale_heartbeat_failure_does_not_forget_a_newer_coordinator(h: H) -> None:
    # The heartbeat went to coordinator 1; coordinator 2 was found before its failure arrived (the network
    # client drops the old connection when the coordinator changes).  Coordinator 2 stays.
    h.m.on_coordinator(1, h.now, 1)
    h.join({TID_A: [0]})
    req = h.next_interval_hb()
    h.m.on_coordinator(2, h.now, 2)
    h.fail(req, ConnectionError_("coordinator changed"))
    assert not any(isinstance(e, CoordinatorNeeded) for e in h.events())
    assert h.m.coordinator_id == 2
    h.advance(1000)
    retry = h.hb()
    assert V(retry)["member_epoch"] == 1 and V(retry)["member_id"] == "m1"


def test_member_keeps_its_epoch_and_id_with_a_full_heartbeat_after_failover(h: H) -> None:
    h.m.on_coordinator(1, h.now, 1)
    h.join({TID_A: [0]}, epoch=4)
    h.fail(h.next_interval_hb(), ConnectionError_("connection reset"))
    (needed,) = [e for e in h.events() if isinstance(e, CoordinatorNeeded)]
    assert needed.epoch == 1
    h.m.on_coordinator(None, h.now)
    h.advance(10_000)
    h.no_hb()
    h.m.on_coordinator(3, h.now, 2)
    first = h.hb()
    assert V(first)["member_epoch"] == 4 and V(first)["member_id"] == "m1"
    assert owned_wire(first) == {TID_A: [0]}  # a full heartbeat: the new coordinator gets everything
    assert V(first)["subscribed_topic_names"] is not None
    h.respond(first, epoch=4)
    assert h.state() is S.STABLE and h.m.owned == tps("a0") and h.callbacks() == []


def test_network_client_coordinator_unknown_error_is_routed_like_the_error_code(h: H) -> None:
    h.join({TID_A: [0]})
    req = h.next_interval_hb()
    h.fail(req, error_class(ErrorCode.coordinator_not_available)("coordinator unknown"))
    assert any(isinstance(e, CoordinatorNeeded) for e in h.events())
    assert h.state() is S.STABLE


@pytest.mark.parametrize("code", [ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id])
def test_fencing_errors_lose_partitions_and_rejoin_with_epoch_zero(h: H, code: ErrorCode) -> None:
    h.join({TID_A: [0, 1]}, epoch=4)
    req = h.next_interval_hb()
    h.respond(req, error=code)
    assert h.state() is S.FENCED
    assert h.m.member_epoch == 0
    events = h.events()
    assert events[0] == AssignmentChanged(frozenset())
    assert isinstance(events[1], CallbackNeeded)
    assert events[1].kind is CallbackKind.LOST and events[1].partitions == tps("a0", "a1")
    assert h.m.owned == frozenset()
    h.advance(10_000)
    h.no_hb()  # a fenced member does not heartbeat until it released its partitions
    h.complete(events[1])
    assert h.state() is S.JOINING
    rejoin = h.hb()
    assert V(rejoin)["member_epoch"] == 0
    assert V(rejoin)["member_id"] == "m1"
    assert V(rejoin)["topic_partitions"] == []


FATAL_CODES = [
    ErrorCode.group_authorization_failed,
    ErrorCode.invalid_request,
    ErrorCode.group_max_size_reached,
    ErrorCode.unsupported_assignor,
    ErrorCode.invalid_regular_expression,
    ErrorCode.unreleased_instance_id,
    ErrorCode.fenced_instance_id,
    ErrorCode.group_id_not_found,  # any other non-retriable code
    ErrorCode.unknown_server_error,
]


@pytest.mark.parametrize("code", FATAL_CODES)
def test_fatal_error_codes(h: H, code: ErrorCode) -> None:
    h.join({TID_A: [0]})
    req = h.next_interval_hb()
    h.respond(req, error=code, message="boom")
    assert h.state() is S.FATAL
    events = h.events()
    assert isinstance(events[0], MembershipError) and events[0].fatal
    assert isinstance(events[0].error, BrokerResponseError) and events[0].error.code == code
    assert "boom" in str(events[0].error)
    assert events[1] == AssignmentChanged(frozenset())
    assert isinstance(events[2], CallbackNeeded) and events[2].kind is CallbackKind.LOST
    h.advance(60_000)
    h.app_poll()
    h.no_hb()
    assert h.m.left
    h.subscribe("a")
    h.app_poll()
    assert h.state() is S.FATAL


def test_unsupported_version_code_tells_to_use_classic(h: H) -> None:
    h.subscribe("a")
    h.app_poll()
    h.respond(h.hb(), error=ErrorCode.unsupported_version)
    assert h.state() is S.FATAL
    (event,) = h.events()
    assert isinstance(event, MembershipError) and event.fatal
    assert isinstance(event.error, GroupProtocolUnsupportedError)
    assert "group.protocol=classic" in str(event.error)


@pytest.mark.parametrize("regex", [False, True])
def test_api_not_supported_by_broker_tells_to_use_classic(h: H, regex: bool) -> None:
    from kafka_handoff import errors

    if regex:
        h.subscribe(pattern="t-.*")
    else:
        h.subscribe("a")
    h.app_poll()
    req = h.hb()
    assert req.min_version == (1 if regex else 0)
    h.fail(req, errors.UnsupportedVersionError("the broker does not support ConsumerGroupHeartbeat"))
    assert h.state() is S.FATAL
    (event,) = h.events()
    assert isinstance(event, MembershipError) and event.fatal
    assert isinstance(event.error, GroupProtocolUnsupportedError)
    assert "group.protocol=classic" in str(event.error)
    assert ("regular expression" in str(event.error)) is regex


def test_topic_authorization_failed_is_surfaced_but_not_fatal(h: H) -> None:
    h.join({TID_A: [0]})
    h.respond(h.next_interval_hb(), error=ErrorCode.topic_authorization_failed)
    (event,) = h.events()
    assert isinstance(event, MembershipError) and not event.fatal
    assert h.state() is S.STABLE
    h.advance(100)
    assert len(h.poll()) == 1


def test_other_retriable_codes_back_off_instead_of_failing(h: H) -> None:
    h.join({TID_A: [0]})
    h.respond(h.next_interval_hb(), error=ErrorCode.request_timed_out)
    assert h.state() is S.STABLE
    assert h.events() == []
    h.advance(100)
    assert len(h.poll()) == 1


def test_non_retriable_transport_failure_is_fatal(h: H) -> None:
    h.join({TID_A: [0]})
    h.fail(h.next_interval_hb(), KafkaError("the client is closed"))
    assert h.state() is S.FATAL
    assert isinstance(h.events()[0], MembershipError)


# =============================================================================== reconciliation


def test_join_with_empty_assignment_calls_assign_with_empty_set_then_stable(h: H) -> None:
    h.subscribe("a")
    h.app_poll()
    h.respond(h.hb(), epoch=1, assignment={})
    assert h.state() is S.RECONCILING
    events = h.events()
    assert events[0] == AssignmentChanged(frozenset(), frozenset())
    assert isinstance(events[1], CallbackNeeded)
    assert events[1].kind is CallbackKind.ASSIGN and events[1].partitions == frozenset()
    h.complete(events[1])
    assert h.state() is S.ACKNOWLEDGING
    ack = h.hb()
    assert owned_wire(ack) == {}
    assert h.state() is S.STABLE
    assert h.sink.names() == ["started", "completed"]


def test_new_partitions_are_assigned_awaiting_callback_then_acked(h: H) -> None:
    h.subscribe("a", "b")
    h.app_poll()
    h.respond(h.hb(), epoch=1, assignment={TID_A: [0, 1], TID_B: [2]})
    events = h.events()
    assert events[0] == AssignmentChanged(tps("a0", "a1", "b2"), tps("a0", "a1", "b2"))
    assign = events[1]
    assert isinstance(assign, CallbackNeeded) and assign.kind is CallbackKind.ASSIGN
    assert assign.partitions == tps("a0", "a1", "b2")
    assert h.m.owned == tps("a0", "a1", "b2")
    assert h.m.awaiting_assign_callback == tps("a0", "a1", "b2")
    # Not acknowledged until the callback completed.
    assert h.state() is S.RECONCILING
    h.advance(5000)
    req = h.hb()
    assert V(req)["topic_partitions"] is None
    h.respond(req, epoch=1)
    h.complete(assign)
    assert h.m.awaiting_assign_callback == frozenset()
    ack = h.hb()
    assert owned_wire(ack) == {TID_A: [0, 1], TID_B: [2]}
    assert h.state() is S.STABLE


def test_revoke_first_then_assign(h: H) -> None:
    h.join({TID_A: [0, 1]})
    h.respond(h.next_interval_hb(), epoch=1, assignment={TID_A: [1], TID_B: [0]})
    assert h.state() is S.RECONCILING
    events = h.events()
    assert len(events) == 1
    revoke = events[0]
    assert isinstance(revoke, CallbackNeeded) and revoke.kind is CallbackKind.REVOKE
    assert revoke.partitions == tps("a0")
    assert h.m.owned == tps("a0", "a1")  # still owned while the revoke callback runs
    h.complete(revoke)
    events = h.events()
    assert events[0] == AssignmentChanged(tps("a1", "b0"), tps("b0"))
    assert isinstance(events[1], CallbackNeeded) and events[1].kind is CallbackKind.ASSIGN
    assert events[1].partitions == tps("b0")
    h.complete(events[1])
    ack = h.hb()
    assert owned_wire(ack) == {TID_A: [1], TID_B: [0]}


def test_revoke_only_still_calls_assign_with_empty_set(h: H) -> None:
    h.join({TID_A: [0, 1]})
    h.respond(h.next_interval_hb(), epoch=1, assignment={TID_A: [1]})
    (revoke,) = h.callbacks()
    h.complete(revoke)
    events = h.events()
    assert events[0] == AssignmentChanged(tps("a1"), frozenset())
    assert isinstance(events[1], CallbackNeeded)
    assert events[1].kind is CallbackKind.ASSIGN and events[1].partitions == frozenset()


def test_revoke_only_is_acknowledged_without_waiting_for_the_empty_assign_callback(h: H) -> None:
    """Issue 30 (simulator): the ack of a revoke-only reconciliation does not wait for the empty assigned
    callback, which runs only at the application's next poll() -- a whole poll interval of the rebalance
    timeout later.  That callback still runs, and its late completion changes nothing."""
    h.join({TID_A: [0, 1]}, epoch=3)
    h.respond(h.next_interval_hb(), epoch=4, assignment={TID_A: [1]})
    (revoke,) = h.callbacks()
    h.complete(revoke)
    assign = [e for e in h.events() if isinstance(e, CallbackNeeded)]
    assert [(e.kind, e.partitions) for e in assign] == [(CallbackKind.ASSIGN, frozenset())]
    assert h.state() is S.ACKNOWLEDGING
    ack = h.hb()
    assert owned_wire(ack) == {TID_A: [1]}
    assert V(ack)["member_epoch"] == 4
    h.respond(ack, epoch=4)
    assert h.state() is S.STABLE
    h.complete(assign[0])  # the application's next poll() runs it
    assert h.state() is S.STABLE
    assert h.m.owned == tps("a1")
    assert h.events() == []


def test_same_assignment_is_not_reconciled_again(h: H) -> None:
    h.join({TID_A: [0, 1]})
    h.respond(h.next_interval_hb(), epoch=1, assignment={TID_A: [1, 0]})
    assert h.state() is S.STABLE
    assert h.events() == []


def test_delayed_revoke_keeps_heartbeating_without_ack_until_completed(h: H) -> None:
    """KIP-983: the application delays the revoke callback; the member stays, unacknowledged."""
    h.join({TID_A: [0, 1]}, epoch=5)
    h.respond(h.next_interval_hb(), epoch=5, assignment={TID_A: [1]})
    (revoke,) = h.callbacks()
    for _ in range(12):  # a minute of delaying, the application keeps polling
        req = h.next_interval_hb()
        assert V(req)["member_epoch"] == 5
        assert V(req)["topic_partitions"] is None  # null = still owning a-0 for the broker
        h.respond(req, epoch=5)
        assert h.state() is S.RECONCILING
        assert h.m.owned == tps("a0", "a1")
    # A failed heartbeat is followed by a full one, still reporting the partition being revoked.
    req = h.next_interval_hb()
    h.fail(req, KafkaTimeoutError("t"))
    h.m.on_coordinator(1, h.now)
    h.advance(100)
    full = h.hb()
    assert owned_wire(full) == {TID_A: [0, 1]}
    h.respond(full, epoch=5)
    h.events()
    h.complete(revoke)
    (assign,) = h.callbacks()
    h.complete(assign)
    ack = h.hb()  # immediately, not at the next interval
    assert owned_wire(ack) == {TID_A: [1]}
    assert h.m.owned == tps("a1")


def test_delayed_revoke_ends_in_fencing_when_the_broker_gives_up(h: H) -> None:
    h.join({TID_A: [0, 1]}, epoch=5)
    h.respond(h.next_interval_hb(), epoch=5, assignment={TID_A: [1]})
    (revoke,) = h.callbacks()
    h.respond(h.next_interval_hb(), error=ErrorCode.fenced_member_epoch)
    events = h.events()
    assert events[0] == AssignmentChanged(frozenset())
    lost = events[1]
    assert isinstance(lost, CallbackNeeded) and lost.kind is CallbackKind.LOST
    assert lost.partitions == tps("a0", "a1")
    h.complete(revoke)  # late: the reconciliation was discarded
    assert h.events() == []
    assert h.state() is S.FENCED
    h.complete(lost)
    assert h.state() is S.JOINING


def test_unresolved_topic_ids_are_reconciled_in_parts(h: H) -> None:
    h.subscribe("a", "c")
    h.app_poll()
    h.respond(h.hb(), epoch=1, assignment={TID_A: [0], TID_C: [0, 1]})
    events = h.events()
    assert MetadataNeeded(topics=frozenset({"a", "c"}), topic_ids=frozenset({TID_C})) in events
    (assign,) = [e for e in events if isinstance(e, CallbackNeeded)]
    assert assign.partitions == tps("a0")
    h.complete(assign)
    ack = h.hb()
    assert owned_wire(ack) == {TID_A: [0]}
    assert h.state() is S.RECONCILING  # the target still has c
    h.respond(ack, epoch=1)
    h.advance(100)
    h.no_hb()  # no heartbeat storm while waiting for metadata
    assert h.events() == []
    h.m.on_metadata(META_ALL, h.now)
    events = h.events()
    assert events[0] == AssignmentChanged(tps("a0", "c0", "c1"), tps("c0", "c1"))
    assert isinstance(events[1], CallbackNeeded) and events[1].partitions == tps("c0", "c1")
    h.complete(events[1])
    ack = h.hb()
    assert owned_wire(ack) == {TID_A: [0], TID_C: [0, 1]}
    assert h.state() is S.STABLE


def test_metadata_is_asked_again_after_an_update_that_did_not_resolve(h: H) -> None:
    h.subscribe("a", "c")
    h.app_poll()
    h.respond(h.hb(), epoch=1, assignment={TID_C: [0]})
    assert sum(isinstance(e, MetadataNeeded) for e in h.events()) == 1
    h.poll()
    assert not any(isinstance(e, MetadataNeeded) for e in h.events())
    h.m.on_metadata(META, h.now)
    assert sum(isinstance(e, MetadataNeeded) for e in h.events()) == 1


def test_resolvable_part_equal_to_current_is_acked_without_callbacks(h: H) -> None:
    h.join({TID_A: [0]})
    h.respond(h.next_interval_hb(), epoch=2, assignment={TID_A: [0], TID_C: [0]})
    assert h.state() is S.ACKNOWLEDGING
    assert not any(isinstance(e, CallbackNeeded) for e in h.events())
    ack = h.hb()
    assert owned_wire(ack) == {TID_A: [0]}
    assert V(ack)["member_epoch"] == 2
    assert h.state() is S.RECONCILING


def test_local_topic_name_cache_resolves_owned_topics_missing_from_metadata(h: H) -> None:
    h.join({TID_A: [0, 1]})
    h.m.on_metadata(ClusterMetadata(topic_ids={"b": TID_B}), h.now)
    h.respond(h.next_interval_hb(), epoch=2, assignment={TID_A: [1]})
    events = h.events()
    assert not any(isinstance(e, MetadataNeeded) for e in events)
    (revoke,) = [e for e in events if isinstance(e, CallbackNeeded)]
    assert revoke.kind is CallbackKind.REVOKE and revoke.partitions == tps("a0")


def test_newer_target_while_reconciling_is_picked_up_afterwards(h: H) -> None:
    h.subscribe("a", "b")
    h.app_poll()
    join = h.hb()
    h.respond(join, epoch=1, assignment={TID_A: [0]})
    (assign1,) = h.callbacks()
    req = h.next_interval_hb()
    h.respond(req, epoch=2, assignment={TID_A: [0], TID_B: [0]})
    assert h.callbacks() == []  # one reconciliation at a time
    assert h.state() is S.RECONCILING
    h.complete(assign1)
    ack = h.hb()
    assert owned_wire(ack) == {TID_A: [0]}
    assert h.state() is S.RECONCILING
    events = h.events()
    assert events[0] == AssignmentChanged(tps("a0", "b0"), tps("b0"))
    assert isinstance(events[1], CallbackNeeded) and events[1].partitions == tps("b0")
    h.respond(ack, epoch=2)
    h.complete(events[1])
    ack2 = h.hb()
    assert owned_wire(ack2) == {TID_A: [0], TID_B: [0]}
    assert h.state() is S.STABLE
    assert h.sink.names() == ["started", "completed", "started", "completed"]


def test_ack_not_sent_because_of_a_newer_target_goes_out_at_once(h: H) -> None:
    h.join({TID_A: [0]})
    req = h.next_interval_hb()
    h.respond(req, epoch=2, assignment={TID_A: [0, 1]})
    (assign,) = h.callbacks()
    in_flight = h.next_interval_hb()
    h.complete(assign)  # ACKNOWLEDGING while a heartbeat is in flight
    assert h.state() is S.ACKNOWLEDGING
    h.respond(in_flight, epoch=2, assignment={TID_A: [0, 1, 2]})
    assert h.state() is S.RECONCILING
    ack = h.hb()  # not waiting for the interval
    assert owned_wire(ack) == {TID_A: [0, 1]}


def test_assign_callback_failure_completes_the_reconciliation(h: H) -> None:
    """Issue 14 item 2 (KIP-1306): a raising assign callback does not stop the rebalance -- the new
    partitions become fetchable and the assignment is acknowledged; the callback is not invoked again."""
    h.join({TID_A: [0]})
    h.respond(h.next_interval_hb(), epoch=2, assignment={TID_A: [0, 1]})
    (assign,) = h.callbacks()
    h.complete(assign, RuntimeError("listener failed"))
    assert h.state() is S.ACKNOWLEDGING
    assert h.m.owned == tps("a0", "a1")
    assert h.m.awaiting_assign_callback == frozenset()
    ack = h.hb()
    assert owned_wire(ack) == {TID_A: [0, 1]}
    h.respond(ack, epoch=2)
    assert h.state() is S.STABLE
    for _ in range(3):
        h.respond(h.next_interval_hb(), epoch=2)
    assert h.callbacks() == []  # never retried


def test_revoke_callback_failure_still_gives_the_partitions_up(h: H) -> None:
    """Issue 14 item 2: a raising revoke callback does not block the rebalance -- the assign step runs
    (the assign callback is not skipped), the revocation is acknowledged, the revoke is not re-invoked."""
    h.join({TID_A: [0, 1]})
    h.respond(h.next_interval_hb(), epoch=2, assignment={TID_A: [1], TID_B: [0]})
    (revoke,) = h.callbacks()
    h.complete(revoke, RuntimeError("listener failed"))
    events = h.events()
    assert events[0] == AssignmentChanged(tps("a1", "b0"), tps("b0"))
    assert isinstance(events[1], CallbackNeeded) and events[1].kind is CallbackKind.ASSIGN
    assert events[1].partitions == tps("b0")
    assert h.m.owned == tps("a1", "b0")
    h.complete(events[1])
    ack = h.hb()
    assert owned_wire(ack) == {TID_A: [1], TID_B: [0]}
    h.respond(ack, epoch=2)
    assert h.state() is S.STABLE
    for _ in range(3):
        h.respond(h.next_interval_hb(), epoch=2)
    assert h.callbacks() == []  # the revoke callback is not invoked again


def test_stale_reconciliation_is_discarded_when_leaving(h: H) -> None:
    h.join({TID_A: [0, 1]})
    h.respond(h.next_interval_hb(), epoch=2, assignment={TID_A: [1]})
    (revoke,) = h.callbacks()
    h.m.unsubscribe(h.now)
    assert h.state() is S.PREPARE_LEAVING
    (leave_revoke,) = h.callbacks()
    assert leave_revoke.kind is CallbackKind.REVOKE and leave_revoke.partitions == tps("a0", "a1")
    h.complete(revoke)
    assert h.events() == []  # no assign step of the abandoned reconciliation
    h.complete(leave_revoke)
    assert h.events() == [AssignmentChanged(frozenset())]
    assert h.state() is S.LEAVING


def test_stale_reconciliation_is_discarded_after_rejoin(h: H) -> None:
    h.join({TID_A: [0]})
    h.respond(h.next_interval_hb(), epoch=2, assignment={TID_A: [0, 1]})
    (assign,) = h.callbacks()
    h.respond(h.next_interval_hb(), error=ErrorCode.unknown_member_id)
    (lost,) = h.callbacks()
    h.complete(lost)
    assert h.state() is S.JOINING
    h.complete(assign)  # from the previous membership
    assert h.state() is S.JOINING
    assert h.events() == []


def test_lost_ack_is_sent_again(h: H) -> None:
    h.subscribe("a")
    h.app_poll()
    h.respond(h.hb(), epoch=1, assignment={TID_A: [0]})
    h.run_callbacks()
    ack = h.hb()
    assert h.state() is S.STABLE
    h.fail(ack, ConnectionError_("gone"))
    h.m.on_coordinator(1, h.now)
    h.advance(100)
    again = h.hb()
    assert owned_wire(again) == {TID_A: [0]}


def test_response_from_older_membership_is_ignored(h: H) -> None:
    h.join({TID_A: [0]})
    old = h.next_interval_hb()
    h.advance(REBALANCE_TIMEOUT)  # the application stopped polling: leave, STALE
    leave = h.hb()
    assert V(leave)["member_epoch"] == -1
    h.respond(old, epoch=9, assignment={TID_A: [0, 1, 2]})
    assert h.m.member_epoch == -1
    assert [e for e in h.callbacks() if e.kind is not CallbackKind.LOST] == []


# ============================================================================ fencing per state


def test_fenced_while_joining_rejoins_at_once(h: H) -> None:
    h.subscribe("a")
    h.app_poll()
    h.respond(h.hb(), error=ErrorCode.unknown_member_id)
    assert h.state() is S.JOINING
    assert h.events() == []  # nothing owned: no LOST callback
    assert V(h.hb())["member_epoch"] == 0


def test_fenced_while_acknowledging(h: H) -> None:
    h.join({TID_A: [0]})
    h.respond(h.next_interval_hb(), epoch=2, assignment={TID_A: [0, 1]})
    (assign,) = h.callbacks()
    in_flight = h.next_interval_hb()
    h.complete(assign)
    assert h.state() is S.ACKNOWLEDGING
    h.respond(in_flight, error=ErrorCode.fenced_member_epoch)
    assert h.state() is S.FENCED
    events = h.events()
    assert events[0] == AssignmentChanged(frozenset())
    assert isinstance(events[1], CallbackNeeded) and events[1].partitions == tps("a0", "a1")


def test_fenced_while_preparing_to_leave_completes_the_leave(h: H) -> None:
    h.join({TID_A: [0]})
    in_flight = h.next_interval_hb()
    h.m.leave(h.now)
    (revoke,) = h.callbacks()
    assert not h.m.left
    h.respond(in_flight, error=ErrorCode.fenced_member_epoch)
    assert h.state() is S.UNSUBSCRIBED
    assert not h.m.left  # still releasing
    h.complete(revoke)
    assert h.events() == [AssignmentChanged(frozenset())]
    assert h.m.left
    h.advance(10_000)
    h.no_hb()  # no leave heartbeat: the broker dropped us already


def test_fenced_while_leaving_completes_the_leave(h: H) -> None:
    h.join({TID_A: [0]})
    in_flight = h.next_interval_hb()
    h.m.leave(h.now)
    (revoke,) = h.callbacks()
    h.complete(revoke)
    assert h.state() is S.LEAVING
    h.no_hb()  # waits for the in-flight one
    h.respond(in_flight, error=ErrorCode.unknown_member_id)
    assert h.state() is S.UNSUBSCRIBED
    assert h.m.left
    h.no_hb()


@pytest.mark.parametrize("state", ["UNSUBSCRIBED", "STALE"])
def test_fencing_is_ignored_when_not_in_the_group(h: H, state: str) -> None:
    h.join({TID_A: [0]})
    in_flight = h.next_interval_hb()
    if state == "UNSUBSCRIBED":
        h.m.on_coordinator(None, h.now)  # leaves without a leave heartbeat
        h.m.leave(h.now)
        h.run_callbacks()
        h.poll()
        assert h.m.left
    else:
        h.advance(REBALANCE_TIMEOUT)
        h.poll()
    h.events()
    h.respond(in_flight, error=ErrorCode.fenced_member_epoch)
    assert h.m.state_name == state
    assert h.events() == []


# ============================================================================= leaving per state


def test_leave_from_stable_revokes_then_sends_leave_heartbeat(h: H) -> None:
    h.join({TID_A: [0, 1]}, epoch=3)
    h.m.unsubscribe(h.now)
    assert h.state() is S.PREPARE_LEAVING
    (revoke,) = h.callbacks()
    assert revoke.kind is CallbackKind.REVOKE and revoke.partitions == tps("a0", "a1")
    # While the revoke callback runs (possibly delayed), the member keeps heartbeating.
    req = h.next_interval_hb()
    assert V(req)["member_epoch"] == 3
    h.respond(req, epoch=3, assignment={TID_A: [0, 1, 2]})
    assert h.callbacks() == []  # assignments are ignored while leaving
    h.complete(revoke)
    assert h.events() == [AssignmentChanged(frozenset())]
    assert h.state() is S.LEAVING
    leave = h.hb()  # at once
    assert V(leave)["member_epoch"] == -1
    assert V(leave)["member_id"] == "m1"
    assert h.state() is S.UNSUBSCRIBED
    assert not h.m.left
    h.respond(leave, epoch=-1)
    assert h.m.left
    h.advance(60_000)
    h.app_poll()
    h.no_hb()


def test_static_member_leaves_with_epoch_minus_two() -> None:
    h = H(group_instance_id="inst-1")
    h.join({TID_A: [0]})
    h.m.leave(h.now)
    h.run_callbacks()
    leave = h.hb()
    assert V(leave)["member_epoch"] == -2
    assert V(leave)["instance_id"] == "inst-1"


def test_leave_while_joining_sends_leave_without_callbacks(h: H) -> None:
    h.subscribe("a")
    h.app_poll()
    join = h.hb()
    h.m.leave(h.now)
    assert h.state() is S.LEAVING
    assert h.events() == []
    h.no_hb()
    h.respond(join, epoch=1, assignment={TID_A: [0]})  # ignored: leaving
    assert h.events() == []
    leave = h.hb()
    assert V(leave)["member_epoch"] == -1


def test_leave_from_reconciling_revokes_everything_owned(h: H) -> None:
    h.subscribe("a")
    h.app_poll()
    h.respond(h.hb(), epoch=1, assignment={TID_A: [0, 1]})
    (assign,) = h.callbacks()
    h.m.leave(h.now)
    (revoke,) = h.callbacks()
    assert revoke.kind is CallbackKind.REVOKE and revoke.partitions == tps("a0", "a1")
    h.complete(assign)  # stale: no ack
    assert h.state() is S.PREPARE_LEAVING
    h.complete(revoke)
    assert V(h.hb())["member_epoch"] == -1


def test_leave_from_acknowledging_revokes_and_leaves(h: H) -> None:
    h.subscribe("a")
    h.app_poll()
    h.respond(h.hb(), epoch=1, assignment={TID_A: [0]})
    (assign,) = h.callbacks()
    in_flight = h.next_interval_hb()
    h.complete(assign)
    assert h.state() is S.ACKNOWLEDGING
    h.m.leave(h.now)
    assert h.state() is S.PREPARE_LEAVING
    (revoke,) = h.callbacks()
    assert revoke.kind is CallbackKind.REVOKE and revoke.partitions == tps("a0")
    h.respond(in_flight, epoch=1)
    h.complete(revoke)
    leave = h.hb()
    assert V(leave)["member_epoch"] == -1
    assert V(leave)["topic_partitions"] is None


def test_leave_when_fatal_is_done_at_once(h: H) -> None:
    h.join({TID_A: [0]})
    h.respond(h.next_interval_hb(), error=ErrorCode.group_authorization_failed)
    h.events()
    h.m.leave(h.now)
    assert h.state() is S.FATAL
    assert h.m.left
    h.no_hb()
    assert h.events() == []


def test_subscribe_while_leaving_joins_after_the_leave(h: H) -> None:
    h.join({TID_A: [0]})
    h.m.unsubscribe(h.now)
    (revoke,) = h.callbacks()
    h.subscribe("b")
    h.app_poll()
    assert h.state() is S.PREPARE_LEAVING
    h.complete(revoke)
    leave = h.hb()
    assert V(leave)["member_epoch"] == -1
    h.app_poll()
    assert h.state() is S.JOINING
    h.no_hb()  # the leave is still in flight
    h.respond(leave, epoch=-1)
    join = h.hb()
    assert V(join)["member_epoch"] == 0 and V(join)["subscribed_topic_names"] == ["b"]


def test_leave_when_already_leaving_is_a_no_op(h: H) -> None:
    h.join({TID_A: [0]})
    h.m.leave(h.now)
    h.m.leave(h.now)
    h.m.unsubscribe(h.now)
    assert len(h.callbacks()) == 1


def test_leave_when_already_left_or_never_joined(h: H) -> None:
    h.m.leave(h.now)
    assert h.m.left and h.state() is S.UNSUBSCRIBED
    h.no_hb()
    assert h.events() == []


def test_leave_from_fenced_does_not_rejoin(h: H) -> None:
    h.join({TID_A: [0]})
    h.respond(h.next_interval_hb(), error=ErrorCode.fenced_member_epoch)
    (lost,) = h.callbacks()
    h.m.leave(h.now)
    assert h.state() is S.UNSUBSCRIBED
    h.complete(lost)
    assert h.state() is S.UNSUBSCRIBED
    assert h.m.left
    h.no_hb()


def test_leave_from_stale_does_not_rejoin(h: H) -> None:
    h.join({TID_A: [0]})
    h.advance(REBALANCE_TIMEOUT)
    h.poll()
    h.run_callbacks()
    h.m.leave(h.now)
    assert h.m.left
    h.app_poll()
    assert h.state() is S.STALE
    h.no_hb()


@pytest.mark.parametrize("outcome", ["error", "failure"])
def test_leave_completes_on_error_or_failure(h: H, outcome: str) -> None:
    h.join({TID_A: [0]})
    h.m.leave(h.now)
    h.run_callbacks()
    leave = h.hb()
    if outcome == "error":
        h.respond(leave, error=ErrorCode.unknown_member_id)
    else:
        h.fail(leave, ConnectionError_("closed"))
    assert h.m.left
    assert h.state() is S.UNSUBSCRIBED


def test_leave_without_coordinator_completes_without_heartbeat(h: H) -> None:
    h.join({TID_A: [0]})
    h.m.on_coordinator(None, h.now)
    h.m.leave(h.now)
    h.run_callbacks()
    h.no_hb()
    assert h.m.left
    assert h.state() is S.UNSUBSCRIBED


def test_subscribe_again_after_leaving_rejoins_with_same_member_id(h: H) -> None:
    h.join({TID_A: [0]})
    h.m.unsubscribe(h.now)
    h.run_callbacks()
    h.respond(h.hb(), epoch=-1)
    h.subscribe("b")
    h.app_poll()
    join = h.hb()
    assert V(join)["member_epoch"] == 0 and V(join)["member_id"] == "m1"
    assert V(join)["subscribed_topic_names"] == ["b"]


def test_leave_with_lost_partitions_when_not_a_member() -> None:
    h = H()
    h.subscribe("a")
    h.app_poll()
    h.respond(h.hb(), epoch=1, assignment={TID_A: [0]})
    h.run_callbacks()
    h.m._epoch = 0  # e.g. the broker reset us; the release is then a LOST callback
    h.m.leave(h.now)
    events = h.events()
    assert events[0] == AssignmentChanged(frozenset())
    assert isinstance(events[1], CallbackNeeded) and events[1].kind is CallbackKind.LOST


# ================================================================================== poll timer


@pytest.mark.parametrize("state", ["JOINING", "RECONCILING", "ACKNOWLEDGING", "STABLE"])
def test_poll_timer_expiry_leaves_goes_stale_loses_and_rejoins(h: H, state: str) -> None:
    h.subscribe("a")
    h.app_poll()
    expected_lost: frozenset[TopicPartition] = frozenset()
    if state != "JOINING":
        h.respond(h.hb(), epoch=1, assignment={TID_A: [0]})
        expected_lost = tps("a0")
        if state in ("ACKNOWLEDGING", "STABLE"):
            (assign,) = h.callbacks()
            if state == "ACKNOWLEDGING":
                h.next_interval_hb()  # in flight, so the ack cannot go yet
            h.complete(assign)
        if state == "STABLE":
            h.respond(h.hb(), epoch=1)
    assert h.m.state_name == state
    h.events()
    h.advance(REBALANCE_TIMEOUT - 1)
    assert all(V(r)["member_epoch"] >= 0 for r in h.poll())
    assert h.m.state_name == state
    h.advance(1)
    reqs = h.poll()
    assert [V(r)["member_epoch"] for r in reqs] == [-1]
    assert h.state() is S.STALE
    h.respond(reqs[0], epoch=-1)
    events = h.events()
    callbacks = [e for e in events if isinstance(e, CallbackNeeded)]
    if expected_lost:
        assert events[0] == AssignmentChanged(frozenset())
        assert events[1] is callbacks[0]
        assert [(c.kind, c.partitions) for c in callbacks] == [(CallbackKind.LOST, expected_lost)]
    else:
        assert callbacks == []
    h.advance(60_000)
    h.no_hb()  # STALE: no heartbeats until the application polls
    h.app_poll()
    if expected_lost:
        assert h.state() is S.STALE  # waits for the LOST callback
        h.complete(callbacks[0])
    assert h.state() is S.JOINING
    join = h.hb()
    assert V(join)["member_epoch"] == 0 and V(join)["member_id"] == "m1"


def test_poll_timer_expiry_waits_for_a_known_coordinator(h: H) -> None:
    # As Java's heartbeat manager: nothing is decided while the coordinator is unknown (it is being
    # rediscovered); once it is known again an expired timer makes the member leave.
    h.join({TID_A: [0]})
    h.m.on_coordinator(None, h.now)
    h.advance(REBALANCE_TIMEOUT)
    assert h.poll() == []
    assert h.state() is S.STABLE
    assert h.callbacks() == []
    h.m.on_coordinator(2, h.now)
    reqs = h.poll()
    assert [V(r)["member_epoch"] for r in reqs] == [-1]
    assert h.state() is S.STALE
    h.respond(reqs[0], epoch=-1)
    (lost,) = h.callbacks()
    assert lost.kind is CallbackKind.LOST
    h.complete(lost)
    h.app_poll()
    assert h.state() is S.JOINING
    assert V(h.hb())["member_epoch"] == 0


def test_poll_timer_stands_still_while_the_app_is_inside_a_blocking_call(h: H) -> None:
    # E.g. commit_sync() waiting through a coordinator failover: that time is not charged.
    h.join({TID_A: [0]})
    h.app_poll()
    h.advance(REBALANCE_TIMEOUT - 5000)
    h.m.on_app_call(True, h.now)
    for _ in range(4):
        h.advance(REBALANCE_TIMEOUT // 2)
        for r in h.poll():
            assert V(r)["member_epoch"] >= 0
            h.respond(r, epoch=1)
    assert h.state() is S.STABLE
    assert h.m.poll(h.now).wait_ms > 0  # no busy loop while paused
    h.m.on_app_call(False, h.now)
    h.advance(4999)
    assert all(V(r)["member_epoch"] >= 0 for r in h.poll())
    assert h.state() is S.STABLE
    h.advance(1)
    assert [V(r)["member_epoch"] for r in h.poll()] == [-1]
    assert h.state() is S.STALE


def test_nested_blocking_calls_resume_the_poll_timer_after_the_outer_one(h: H) -> None:
    h.join({TID_A: [0]})
    h.app_poll()
    h.m.on_app_call(True, h.now)
    h.m.on_app_call(True, h.now)
    h.advance(REBALANCE_TIMEOUT)
    h.m.on_app_call(False, h.now)
    h.advance(REBALANCE_TIMEOUT)
    h.poll()
    assert h.state() is S.STABLE
    h.m.on_app_call(False, h.now)
    h.advance(REBALANCE_TIMEOUT)
    assert [V(r)["member_epoch"] for r in h.poll()] == [-1]


def test_app_polls_keep_the_poll_timer_from_expiring(h: H) -> None:
    h.join({TID_A: [0]})
    for _ in range(5):
        h.advance(REBALANCE_TIMEOUT - 1)
        h.app_poll()
        for r in h.poll():
            h.respond(r)
    assert h.state() is S.STABLE


def test_poll_timer_wait_is_reported(h: H) -> None:
    h = H(rebalance_timeout_ms=3000)
    h.join({TID_A: [0]})
    h.app_poll()
    assert h.m.poll(h.now).wait_ms == 3000
    h.advance(2500)
    assert h.m.poll(h.now).wait_ms == 500


def test_poll_timer_leave_is_sent_even_with_a_heartbeat_in_flight(h: H) -> None:
    h.join({TID_A: [0]})
    in_flight = h.next_interval_hb()
    h.advance(REBALANCE_TIMEOUT)
    (leave,) = h.poll()
    assert V(leave)["member_epoch"] == -1
    h.respond(in_flight, epoch=1, assignment={TID_A: [0, 1]})
    assert h.state() is S.STALE


def test_poll_timer_expiry_of_static_member_uses_epoch_minus_two() -> None:
    h = H(group_instance_id="i")
    h.join({TID_A: [0]})
    h.advance(REBALANCE_TIMEOUT)
    (leave,) = h.poll()
    assert V(leave)["member_epoch"] == -2


def test_poll_timer_expiry_during_delayed_revoke_loses_everything(h: H) -> None:
    h.join({TID_A: [0, 1]})
    h.respond(h.next_interval_hb(), epoch=2, assignment={TID_A: [1]})
    (revoke,) = h.callbacks()
    h.advance(REBALANCE_TIMEOUT)
    h.poll()
    events = h.events()
    assert events[0] == AssignmentChanged(frozenset())
    assert isinstance(events[1], CallbackNeeded) and events[1].partitions == tps("a0", "a1")
    h.complete(revoke)
    assert h.events() == []


# ==================================================================================== regex


def test_regex_subscription_sends_the_pattern_on_v1() -> None:
    h = H()
    h.subscribe(pattern=r"orders-.*")
    h.app_poll()
    join = h.hb()
    assert V(join)["subscribed_topic_regex"] == "orders-.*"
    assert V(join)["subscribed_topic_names"] == []
    assert join.min_version == 1
    assert wire.build_request(68, 1, V(join)).subscribed_topic_regex == "orders-.*"
    h.respond(join, epoch=1, assignment={TID_C: [0]})
    (meta,) = [e for e in h.events() if isinstance(e, MetadataNeeded)]
    assert meta.all_topics and meta.topic_ids == frozenset({TID_C})


def test_switching_between_regex_and_names_updates_both_fields(h: H) -> None:
    h.subscribe(pattern="a.*")
    h.app_poll()
    h.respond(h.hb(), epoch=1, assignment={})
    h.run_callbacks()
    h.respond(h.hb(), epoch=1)
    h.subscribe("a")
    req = h.next_interval_hb()
    assert V(req)["subscribed_topic_names"] == ["a"]
    assert V(req)["subscribed_topic_regex"] == ""  # removes the pattern
    assert req.min_version == 0
    h.respond(req, epoch=1)
    req = h.next_interval_hb()
    assert V(req)["subscribed_topic_regex"] is None
    h.respond(req, epoch=1)
    h.subscribe(pattern="b.*")
    req = h.next_interval_hb()
    assert V(req)["subscribed_topic_regex"] == "b.*"
    assert V(req)["subscribed_topic_names"] == []


# ========================================================================== metrics and commits


def test_rebalance_metrics_failure_only_during_a_rebalance(h: H) -> None:
    h.join({TID_A: [0]})
    assert h.sink.names() == ["started", "completed"]
    h.respond(h.next_interval_hb(), error=ErrorCode.coordinator_load_in_progress)
    assert h.sink.names() == ["started", "completed"]  # retriable: not a failure
    h.advance(100)
    h.respond(h.hb(), epoch=2, assignment={TID_A: [0, 1]})
    assert h.sink.names() == ["started", "completed", "started"]
    h.respond(h.next_interval_hb(), error=ErrorCode.fenced_member_epoch)
    assert h.sink.names() == ["started", "completed", "started", "failed"]
    assert h.sink.calls[-1][1] == h.now


def test_group_metadata_follows_the_member_epoch(h: H) -> None:
    md = h.m.group_metadata()
    assert (md.group_id, md.generation_id, md.member_id) == ("g", -1, "")
    h.join({TID_A: [0]}, epoch=7)
    md = h.m.group_metadata()
    assert (md.generation_id, md.member_id, md.group_instance_id) == (7, "m1", None)
    h.respond(h.next_interval_hb(), epoch=8)
    assert h.m.member_epoch == 8 and h.m.group_metadata().generation_id == 8
    h.respond(h.next_interval_hb(), error=ErrorCode.fenced_member_epoch)
    assert h.m.group_metadata().generation_id == -1


def test_owns_reports_current_ownership(h: H) -> None:
    h.join({TID_A: [0, 1]})
    assert h.m.owns([tp("a", 0), tp("a", 1)])
    assert not h.m.owns([tp("a", 2)])


def test_v0_broker_assigned_member_id_is_adopted(h: H) -> None:
    h.subscribe("a")
    h.app_poll()
    h.respond(h.hb(), version=0, member_id="broker-id", epoch=1, assignment={})
    assert h.m.member_id == "broker-id"
    h.run_callbacks()
    assert V(h.hb())["member_id"] == "broker-id"


def test_enforce_rebalance_is_a_no_op(h: H) -> None:
    h.join({TID_A: [0]})
    h.m.enforce_rebalance("test", h.now)
    assert h.state() is S.STABLE
    assert h.events() == []


def test_a_revoke_carries_the_arrival_of_the_target_that_asked_for_it(h: H) -> None:
    """Issue 26 item 1: the REVOKE's received_ms is when the target without the partition arrived (the
    broker's revocation timer starts then), not when the membership got round to emitting it -- here after
    an earlier assigned callback that the application was slow to run."""
    h.join({TID_A: [0, 1]})
    h.respond(h.next_interval_hb(), epoch=1, assignment={TID_A: [0, 1], TID_B: [0]})
    (assign,) = h.callbacks()
    assert assign.kind is CallbackKind.ASSIGN
    h.advance(2_000)
    req = h.next_interval_hb()
    arrived = h.now
    h.respond(req, epoch=2, assignment={TID_A: [1], TID_B: [0]})  # takes a0 away
    assert h.callbacks() == []  # one reconciliation at a time: the assign callback is still running
    h.advance(3_000)
    h.complete(assign)
    h.hb()  # the acknowledgement; then the newer target is reconciled
    (revoke,) = h.callbacks()
    assert revoke.kind is CallbackKind.REVOKE and revoke.partitions == tps("a0")
    assert revoke.received_ms == arrived < h.now
