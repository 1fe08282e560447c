"""Classic group membership (JoinGroup/SyncGroup/Heartbeat/LeaveGroup), sans-I/O, driven with a fake clock.

Follows kafka_reference.md §6.3 and the KIP-429 seed: protocol selection, the join/sync/heartbeat state
machine on every error code, MEMBER_ID_REQUIRED, the leader path, eager and cooperative callback sequences,
delayed revocation (KIP-983), fencing, the poll timer, static membership, metadata changes and metrics.
Responses are real kio response entities; every request the membership emits is built with
``wire.build_request`` for every version the client may negotiate.
"""

from __future__ import annotations

import datetime
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from rebalance_sink import RecordingSink

from kafka_handoff.errors import ConfigError, ConnectionError_, FencedError, IllegalStateError, KafkaError
from kafka_handoff.group.assignors import CooperativeStickyAssignor, RangeAssignor
from kafka_handoff.group.assignors.base import MemberAssignment, MemberSubscription, RebalanceProtocol
from kafka_handoff.group.classic_membership import ClassicMembership, MemberState
from kafka_handoff.group.membership import (
    AppThreadTask,
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
from kafka_handoff.group.protocol_data import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.requests import COORDINATOR, FakeClock, UnsentRequest
from kafka_handoff.types import ClusterMetadata, ConsumerGroupMetadata, PartitionInfo, TopicPartition

pytestmark = pytest.mark.unit

JOIN, HEARTBEAT, LEAVE, SYNC = 11, 12, 13, 14
MAX_VERSION = {JOIN: 9, HEARTBEAT: 4, LEAVE: 5, SYNC: 5}
E = ErrorCode
EAGER = RebalanceProtocol.EAGER
COOP = RebalanceProtocol.COOPERATIVE
REVOKE, ASSIGN, LOST = CallbackKind.REVOKE, CallbackKind.ASSIGN, CallbackKind.LOST

SESSION = 10_000
HB = 1_000
REBALANCE = 60_000
BACKOFF = 100
BACKOFF_MAX = 1_000


def tp(name: str) -> TopicPartition:
    """``"a0"`` -> TopicPartition("a", 0)."""
    return TopicPartition(name[0], int(name[1:]))


def tps(*names: str) -> frozenset[TopicPartition]:
    return frozenset(tp(n) for n in names)


# ----------------------------------------------------------------------------------------------------------
# doubles


@dataclass
class ScriptedAssignor:
    """An assignor whose ``assign`` returns what the test scripted; records every call."""

    name: str = "scripted"
    supported_protocols: tuple[RebalanceProtocol, ...] = (EAGER,)
    result: dict[str, MemberAssignment] = field(default_factory=dict)
    assign_calls: list[tuple[dict[str, int], dict[str, MemberSubscription]]] = field(default_factory=list)
    on_assignment_calls: list[tuple[MemberAssignment, int]] = field(default_factory=list)
    log: list[str] | None = None

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        return b"ud:" + ",".join(sorted(topics)).encode()

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, MemberSubscription]
    ) -> dict[str, MemberAssignment]:
        self.assign_calls.append((dict(partitions_per_topic), dict(subscriptions)))
        return dict(self.result)

    def on_assignment(self, assignment: MemberAssignment, generation_id: int) -> None:
        self.on_assignment_calls.append((assignment, generation_id))
        if self.log is not None:
            self.log.append("on_assignment")


def metadata(
    topics: Mapping[str, int], *, errors: Mapping[str, int] | None = None, internal: Iterable[str] = ()
) -> ClusterMetadata:
    return ClusterMetadata(
        partitions={t: tuple(PartitionInfo(t, p, leader=1) for p in range(n)) for t, n in topics.items()},
        topic_errors=dict(errors or {}),
        internal_topics=frozenset(internal),
    )


# ----------------------------------------------------------------------------------------------------------
# responses (real kio entities of any version)


def _make(api_key: int, version: int, values: Mapping[str, Any]) -> Any:
    cls = wire.response_class(api_key, version)
    names = {f for f in cls.__dataclass_fields__ if not f.startswith("__")}
    kwargs = {k: v for k, v in values.items() if k in names}
    if "throttle_time" in names:
        kwargs["throttle_time"] = datetime.timedelta(0)
    return cls(**kwargs)


def join_response(
    *,
    error: ErrorCode = E.none,
    generation: int = 1,
    member_id: str = "m1",
    leader: str = "other",
    protocol: str | None = "scripted",
    members: Sequence[tuple[str, str | None, bytes]] = (),
    skip_assignment: bool = False,
    protocol_type: str | None = "consumer",
    version: int = 9,
) -> Any:
    cls = wire.response_class(JOIN, version)
    member_cls = sys.modules[cls.__module__].JoinGroupResponseMember
    member_fields = set(member_cls.__dataclass_fields__)
    built = []
    for mid, gid, md in members:
        kw: dict[str, Any] = {"member_id": mid, "metadata": md}
        if "group_instance_id" in member_fields:
            kw["group_instance_id"] = gid
        built.append(member_cls(**kw))
    return _make(
        JOIN,
        version,
        {
            "error_code": error,
            "generation_id": generation,
            "protocol_type": protocol_type,
            "protocol_name": protocol,
            "leader": leader,
            "skip_assignment": skip_assignment,
            "member_id": member_id,
            "members": tuple(built),
        },
    )


def sync_response(
    assigned: Iterable[TopicPartition] = (),
    *,
    error: ErrorCode = E.none,
    raw: bytes | None = None,
    protocol: str | None = "scripted",
    version: int = 5,
) -> Any:
    data = raw if raw is not None else encode_assignment(MemberAssignment(tuple(sorted(assigned))))
    return _make(
        SYNC,
        version,
        {"error_code": error, "protocol_type": "consumer", "protocol_name": protocol, "assignment": data},
    )


def heartbeat_response(error: ErrorCode = E.none, version: int = 4) -> Any:
    return _make(HEARTBEAT, version, {"error_code": error})


def leave_response(error: ErrorCode = E.none, version: int = 5) -> Any:
    return _make(LEAVE, version, {"error_code": error, "members": ()})


# ----------------------------------------------------------------------------------------------------------
# harness


class Harness:
    """Drives one membership: polls it, checks every request builds, answers requests."""

    def __init__(
        self,
        assignors: Sequence[Any] | None = None,
        *,
        protocol: RebalanceProtocol = EAGER,
        instance_id: str | None = None,
        rack: str | None = None,
        topics: Iterable[str] = ("a",),
        pattern: str | None = None,
        margin: int | None = None,
        subscribe: bool = True,
        app_thread_assignors: bool = False,
    ) -> None:
        self.clock = FakeClock()
        if assignors is None:
            assignors = [
                ScriptedAssignor(supported_protocols=(EAGER, COOP) if protocol is COOP else (EAGER,))
            ]
        self.assignors = list(assignors)
        self.sink = RecordingSink()
        self.m = ClassicMembership(
            "g",
            self.assignors,
            group_instance_id=instance_id,
            session_timeout_ms=SESSION,
            rebalance_timeout_ms=REBALANCE,
            heartbeat_interval_ms=HB,
            rack_id=rack,
            retry_backoff_ms=BACKOFF,
            retry_backoff_max_ms=BACKOFF_MAX,
            metrics=self.sink,
            revoke_deadline_margin_ms=margin,
            app_thread_assignors=app_thread_assignors,
        )
        self.pending: list[UnsentRequest] = []
        if subscribe:
            sub = (
                Subscription(pattern=re.compile(pattern))
                if pattern is not None
                else Subscription(topics=frozenset(topics))
            )
            self.m.subscribe(sub, self.now)

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    def poll(self) -> list[UnsentRequest]:
        result = self.m.poll(self.now)
        assert result.wait_ms >= 0
        for req in result.unsent:
            assert req.node == COORDINATOR
            top = MAX_VERSION[req.api_key]
            for version in range(req.min_version, top + 1):
                wire.build_request(req.api_key, version, req.body(version))
        self.pending.extend(result.unsent)
        return result.unsent

    def take(self, api_key: int) -> UnsentRequest:
        """The one pending request of ``api_key`` (there must be exactly one)."""
        matching = [r for r in self.pending if r.api_key == api_key]
        assert len(matching) == 1, (
            f"expected one request of api {api_key}, got {len(matching)}: {self.pending}"
        )
        self.pending.remove(matching[0])
        return matching[0]

    def kinds(self) -> list[int]:
        return [r.api_key for r in self.pending]

    def reply(self, req: UnsentRequest, resp: Any, version: int | None = None) -> None:
        assert req.on_response is not None
        req.on_response(resp, MAX_VERSION[req.api_key] if version is None else version, self.now)

    def fail(self, req: UnsentRequest, exc: BaseException) -> None:
        assert req.on_failure is not None
        req.on_failure(exc, self.now)

    def events(self) -> list[GroupEvent]:
        return self.m.drain_events()

    def callbacks(self, events: Iterable[GroupEvent]) -> list[CallbackNeeded]:
        return [e for e in events if isinstance(e, CallbackNeeded)]

    def complete(self, *events: GroupEvent) -> None:
        """Complete callbacks as the application thread does: an ASSIGN runs the assignor's
        ``on_assignment`` it carries first; its error is reported with the completion."""
        for e in events:
            if isinstance(e, CallbackNeeded):
                error: BaseException | None = None
                if e.on_assignment is not None:
                    try:
                        e.on_assignment()
                    except Exception as exc:
                        error = exc
                self.m.on_callback_completed(e.seq, error, self.now)

    def start(self, coordinator: int = 1) -> None:
        """Coordinator found, application polled; the subscription's events are dropped."""
        self.m.on_coordinator(coordinator, self.now)
        self.m.on_app_poll(self.now)
        self.events()

    def join_as_follower(
        self,
        assigned: Iterable[str] = (),
        *,
        member_id: str = "m1",
        generation: int = 1,
        complete: bool = True,
    ) -> list[GroupEvent]:
        """Send JoinGroup, answer it as a follower, answer SyncGroup with ``assigned``."""
        self.poll()
        self.reply(self.take(JOIN), join_response(member_id=member_id, generation=generation))
        self.poll()
        self.reply(self.take(SYNC), sync_response(tp(n) for n in assigned))
        events = self.events()
        if complete:
            self.complete(*events)
        return events

    def stable(self, assigned: Iterable[str] = (), **kw: Any) -> list[GroupEvent]:
        self.start()
        self.events()
        events = self.join_as_follower(assigned, **kw)
        assert self.m.state is MemberState.STABLE
        return events

    def heartbeat_ok(self) -> None:
        """Advance to the next heartbeat and answer it successfully."""
        self.advance(HB)
        self.poll()
        self.reply(self.take(HEARTBEAT), heartbeat_response())


def join_subscription(req: UnsentRequest, index: int = 0) -> MemberSubscription:
    values = req.body(9)
    return decode_subscription(values["protocols"][index]["metadata"])


# ----------------------------------------------------------------------------------------------------------
# construction, protocol selection


def test_classic_membership_satisfies_the_membership_protocol() -> None:
    m: Membership = Harness().m
    assert m.state_name == "UNJOINED"


@pytest.mark.parametrize(
    ("protocols", "expected"),
    [
        ([(EAGER,), (EAGER, COOP)], EAGER),
        ([(EAGER, COOP)], COOP),
        ([(EAGER, COOP), (COOP,)], COOP),
        ([(COOP, EAGER), (EAGER, COOP)], COOP),
    ],
)
def test_protocol_selection_is_the_highest_all_assignors_support(
    protocols: list[tuple[RebalanceProtocol, ...]], expected: RebalanceProtocol
) -> None:
    assignors = [ScriptedAssignor(name=f"a{i}", supported_protocols=p) for i, p in enumerate(protocols)]
    assert Harness(assignors).m.protocol is expected


def test_default_strategy_range_plus_cooperative_sticky_is_eager() -> None:
    assert Harness([RangeAssignor(), CooperativeStickyAssignor()]).m.protocol is EAGER
    assert Harness([CooperativeStickyAssignor()]).m.protocol is COOP


def test_no_common_protocol_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"partition\.assignment\.strategy"):
        Harness([ScriptedAssignor("x", (EAGER,)), ScriptedAssignor("y", (COOP,))])


def test_bad_config_raises_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"heartbeat\.interval\.ms"):
        ClassicMembership("g", [ScriptedAssignor()], session_timeout_ms=1000, heartbeat_interval_ms=1000)
    with pytest.raises(ConfigError, match=r"group\.id"):
        ClassicMembership("", [ScriptedAssignor()])
    with pytest.raises(ConfigError, match=r"partition\.assignment\.strategy"):
        ClassicMembership("g", [])
    with pytest.raises(ConfigError, match=r"partition\.assignment\.strategy"):
        ClassicMembership("g", [ScriptedAssignor("x"), ScriptedAssignor("x")])


# ----------------------------------------------------------------------------------------------------------
# joining


def test_no_join_before_coordinator_and_app_poll() -> None:
    h = Harness()
    events = h.events()
    assert MetadataNeeded(topics=frozenset({"a"})) in events
    assert any(isinstance(e, CoordinatorNeeded) for e in events)
    assert h.poll() == []
    h.m.on_coordinator(1, h.now)
    assert h.poll() == []  # joining starts on the next application poll
    h.m.on_app_poll(h.now)
    assert h.kinds() == []
    h.poll()
    assert h.kinds() == [JOIN]


def test_join_request_carries_subscription_timeouts_and_one_protocol_per_assignor() -> None:
    a1 = ScriptedAssignor("first", (EAGER, COOP))
    a2 = ScriptedAssignor("second", (EAGER,))
    h = Harness([a1, a2], topics=("b", "a"), rack="r1")
    h.start()
    h.poll()
    req = h.take(JOIN)
    values = req.body(9)
    assert values["group_id"] == "g"
    assert values["session_timeout"] == SESSION
    assert values["rebalance_timeout"] == REBALANCE
    assert values["member_id"] == ""
    assert values["group_instance_id"] is None
    assert values["protocol_type"] == "consumer"
    assert [p["name"] for p in values["protocols"]] == ["first", "second"]
    sub = join_subscription(req, 0)
    assert sub.topics == ("a", "b")
    assert sub.user_data == b"ud:a,b"
    assert sub.owned_partitions == ()
    assert sub.generation_id == -1
    assert sub.rack_id == "r1"
    assert req.min_version == 0
    assert req.timeout_ms == REBALANCE + 5000
    built = wire.build_request(JOIN, 9, values)
    assert built.rebalance_timeout == datetime.timedelta(milliseconds=REBALANCE)
    assert h.m.state is MemberState.PREPARING_REBALANCE
    assert h.sink.names() == ["started"]


def test_member_id_required_two_step_join() -> None:
    h = Harness()
    h.start()
    h.poll()
    first = h.take(JOIN)
    assert first.body(9)["member_id"] == ""
    h.reply(first, join_response(error=E.member_id_required, member_id="assigned-id", generation=-1))
    assert h.m.group_metadata().member_id == "assigned-id"
    assert h.m.group_metadata().generation_id == -1
    h.poll()
    second = h.take(JOIN)
    assert second.body(9)["member_id"] == "assigned-id"
    assert second.body(9)["reason"] == "need to re-join with the given member-id: assigned-id"
    h.reply(second, join_response(member_id="assigned-id", generation=3))
    assert h.m.state is MemberState.COMPLETING_REBALANCE
    assert h.m.group_metadata() == ConsumerGroupMetadata("g", 3, "assigned-id", None)
    assert h.events() == []  # no callbacks: nothing was owned
    # Java counts the MEMBER_ID_REQUIRED round as a failed attempt of the same rebalance.
    assert h.sink.names() == ["started", "failed"]


def test_follower_sync_and_join_complete_events() -> None:
    a = ScriptedAssignor()
    h = Harness([a])
    h.start()
    h.events()
    h.poll()
    h.reply(h.take(JOIN), join_response(member_id="m1", generation=7, leader="m0"))
    assert h.m.state is MemberState.COMPLETING_REBALANCE
    assert not h.m.is_leader
    h.poll()
    sync = h.take(SYNC)
    values = sync.body(5)
    assert values["assignments"] == []
    assert values["generation_id"] == 7
    assert values["member_id"] == "m1"
    assert values["protocol_name"] == "scripted"
    h.reply(sync, sync_response([tp("a0"), tp("a1")]))
    assert h.m.state_name == "STABLE"
    events = h.events()
    assert len(events) == 2
    assert events[0] == AssignmentChanged(owned=tps("a0", "a1"), awaiting_callback=tps("a0", "a1"))
    assert isinstance(events[1], CallbackNeeded)
    assert (events[1].kind, events[1].partitions) == (ASSIGN, tps("a0", "a1"))
    # on_assignment is user code: not run on the network thread, but carried by the ASSIGN event.
    assert a.on_assignment_calls == []
    assert h.m.owned == tps("a0", "a1")
    assert h.m.owns([tp("a0")]) and not h.m.owns([tp("a2")])
    assert h.sink.names() == ["started"]
    h.advance(5)
    h.complete(*events)
    assert a.on_assignment_calls == [(MemberAssignment((tp("a0"), tp("a1"))), 7)]
    assert h.sink.calls == [("started", 1_000_000), ("completed", 1_000_005)]


def test_assign_callback_runs_even_for_an_empty_assignment() -> None:
    h = Harness()
    events = h.stable([])
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(ASSIGN, frozenset())]


def test_assignment_not_matching_subscription_is_not_applied_and_member_rejoins() -> None:
    h = Harness(topics=("a",))
    h.start()
    h.poll()
    h.reply(h.take(JOIN), join_response())
    h.poll()
    h.reply(h.take(SYNC), sync_response([tp("a0"), tp("z0")]))
    assert h.events() == []
    assert h.m.owned == frozenset()
    h.poll()
    assert h.take(JOIN).body(9)["reason"] == "assigned partitions do not match the current subscription"


def test_pattern_subscription_waits_for_metadata_and_matches_client_side() -> None:
    h = Harness(pattern=r"orders\..*")
    assert MetadataNeeded(all_topics=True) in h.events()
    h.start()
    assert h.poll() == []  # topics unknown until metadata arrives
    h.m.on_metadata(
        metadata(
            {"orders.eu": 2, "orders.us": 1, "payments": 3, "orders.internal": 1},
            internal=["orders.internal"],
        ),
        h.now,
    )
    h.poll()
    req = h.take(JOIN)
    assert join_subscription(req).topics == ("orders.eu", "orders.us")
    h.reply(req, join_response())
    h.poll()
    h.reply(h.take(SYNC), sync_response([TopicPartition("orders.eu", 0)]))
    h.complete(*h.events())
    # a new matching topic changes the subscription: rejoin with it (eager: after revoking everything)
    h.m.on_metadata(metadata({"orders.eu": 2, "orders.us": 1, "orders.apac": 4}), h.now)
    h.poll()
    events = h.events()
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [
        (REVOKE, frozenset({TopicPartition("orders.eu", 0)}))
    ]
    h.complete(*events)
    h.poll()
    assert join_subscription(h.take(JOIN)).topics == ("orders.apac", "orders.eu", "orders.us")


# ----------------------------------------------------------------------------------------------------------
# leader


def _member_metadata(
    topics: Sequence[str], owned: Sequence[TopicPartition] = (), generation: int = -1
) -> bytes:
    return encode_subscription(
        MemberSubscription(topics=tuple(topics), owned_partitions=tuple(owned), generation_id=generation)
    )


def test_leader_waits_for_metadata_of_all_members_topics_then_assigns() -> None:
    a = ScriptedAssignor()
    h = Harness([a], topics=("a",))
    h.start()
    h.m.on_metadata(metadata({"a": 2}), h.now)
    h.events()
    h.poll()
    members = [("m1", None, _member_metadata(["a"])), ("m2", "static-2", _member_metadata(["a", "b"]))]
    a.result = {
        "m1": MemberAssignment((tp("a0"),)),
        "m2": MemberAssignment((tp("a1"), tp("b1"), tp("b2")), user_data=b"u2"),
    }
    h.reply(h.take(JOIN), join_response(member_id="m1", leader="m1", members=members))
    assert h.m.is_leader
    assert h.events() == [MetadataNeeded(topics=frozenset({"a", "b"}))]
    h.poll()
    assert h.kinds() == []  # waiting for metadata naming "b"
    h.advance(HB)
    h.poll()
    assert h.kinds() == [HEARTBEAT]  # heartbeats go on in COMPLETING_REBALANCE
    h.take(HEARTBEAT)
    h.m.on_metadata(metadata({"a": 2, "b": 3}), h.now)
    assert len(a.assign_calls) == 1
    counts, subs = a.assign_calls[0]
    assert counts == {"a": 2, "b": 3}
    assert subs["m2"].topics == ("a", "b")
    assert subs["m2"].group_instance_id == "static-2"
    h.poll()
    sync = h.take(SYNC)
    sent = {x["member_id"]: decode_assignment(x["assignment"]) for x in sync.body(5)["assignments"]}
    assert sent == a.result
    h.reply(sync, sync_response([tp("a0")]))
    assert h.m.owned == tps("a0")


def test_leader_leaves_out_topics_absent_from_the_cluster() -> None:
    a = ScriptedAssignor()
    h = Harness([a], topics=("a",))
    h.start()
    h.poll()
    members = [("m1", None, _member_metadata(["a", "ghost"])), ("m2", None, _member_metadata(["a"]))]
    a.result = {"m1": MemberAssignment((tp("a0"),))}  # m2 missing from the output: gets an empty assignment
    h.reply(h.take(JOIN), join_response(member_id="m1", leader="m1", members=members))
    h.m.on_metadata(metadata({"a": 1}, errors={"ghost": int(E.unknown_topic_or_partition)}), h.now)
    assert a.assign_calls[0][0] == {"a": 1}
    h.poll()
    sent = {x["member_id"]: decode_assignment(x["assignment"]) for x in h.take(SYNC).body(5)["assignments"]}
    assert sent == {"m1": MemberAssignment((tp("a0"),)), "m2": MemberAssignment(())}


def test_static_leader_rejoin_with_skip_assignment_sends_empty_sync() -> None:
    a = ScriptedAssignor()
    h = Harness([a], instance_id="i1")
    h.start()
    h.poll()
    members = [("m1", "i1", _member_metadata(["a"]))]
    h.reply(h.take(JOIN), join_response(member_id="m1", leader="m1", members=members, skip_assignment=True))
    h.poll()
    sync = h.take(SYNC)
    assert sync.body(5)["assignments"] == []
    assert a.assign_calls == []
    h.reply(sync, sync_response([tp("a0")]))
    assert h.m.owned == tps("a0")


def test_leader_with_real_range_assignor() -> None:
    h = Harness([RangeAssignor()], topics=("a",))
    h.start()
    h.m.on_metadata(metadata({"a": 4}), h.now)
    h.poll()
    members = [("m1", None, _member_metadata(["a"])), ("m2", None, _member_metadata(["a"]))]
    h.reply(h.take(JOIN), join_response(member_id="m1", leader="m1", members=members, protocol="range"))
    h.poll()
    sent = {x["member_id"]: decode_assignment(x["assignment"]) for x in h.take(SYNC).body(5)["assignments"]}
    assert set(sent["m1"].partitions) | set(sent["m2"].partitions) == tps("a0", "a1", "a2", "a3")
    assert len(sent["m1"].partitions) == len(sent["m2"].partitions) == 2


def test_custom_cooperative_assignor_violating_the_rule_is_rejected() -> None:
    a = ScriptedAssignor("custom-coop", (COOP,))
    h = Harness([a], protocol=COOP, topics=("a",))
    h.start()
    h.m.on_metadata(metadata({"a": 2}), h.now)
    h.events()
    h.poll()
    members = [
        ("m1", None, _member_metadata(["a"], owned=[tp("a0")], generation=1)),
        ("m2", None, _member_metadata(["a"], owned=[tp("a1")], generation=1)),
    ]
    # a0 moves from m1 to m2 in one rebalance: forbidden under COOPERATIVE
    a.result = {"m1": MemberAssignment(()), "m2": MemberAssignment((tp("a0"), tp("a1")))}
    h.reply(h.take(JOIN), join_response(member_id="m1", leader="m1", members=members, protocol="custom-coop"))
    errors = [e for e in h.events() if isinstance(e, MembershipError)]
    assert len(errors) == 1 and not errors[0].fatal
    assert isinstance(errors[0].error, IllegalStateError)
    assert "violates its requirements" in str(errors[0].error)
    h.poll()
    assert h.kinds() == []  # no SyncGroup; the join is retried after the next application poll
    assert h.sink.names() == ["started", "failed"]
    h.m.on_app_poll(h.now)
    h.advance(BACKOFF)
    h.poll()
    assert h.kinds() == [JOIN]


def test_valid_custom_cooperative_assignment_passes_validation() -> None:
    a = ScriptedAssignor("custom-coop", (COOP,))
    h = Harness([a], protocol=COOP, topics=("a",))
    h.start()
    h.m.on_metadata(metadata({"a": 2}), h.now)
    h.poll()
    members = [
        ("m1", None, _member_metadata(["a"], owned=[tp("a0"), tp("a1")], generation=1)),
        ("m2", None, _member_metadata(["a"], generation=-1)),
    ]
    # a1 is revoked from m1 but not yet given to m2: allowed
    a.result = {"m1": MemberAssignment((tp("a0"),)), "m2": MemberAssignment(())}
    h.reply(h.take(JOIN), join_response(member_id="m1", leader="m1", members=members, protocol="custom-coop"))
    h.poll()
    assert h.kinds() == [SYNC]


class _ViolatingCooperativeSticky(CooperativeStickyAssignor):
    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, MemberSubscription]
    ) -> dict[str, MemberAssignment]:
        return {"m1": MemberAssignment(()), "m2": MemberAssignment((TopicPartition("a", 0),))}


def test_builtin_cooperative_sticky_output_is_not_validated() -> None:
    h = Harness([_ViolatingCooperativeSticky()], protocol=COOP, topics=("a",))
    h.start()
    h.m.on_metadata(metadata({"a": 1}), h.now)
    h.poll()
    members = [
        ("m1", None, _member_metadata(["a"], owned=[tp("a0")], generation=1)),
        ("m2", None, _member_metadata(["a"])),
    ]
    h.reply(
        h.take(JOIN),
        join_response(member_id="m1", leader="m1", members=members, protocol="cooperative-sticky"),
    )
    h.poll()
    assert h.kinds() == [SYNC]


def test_leader_with_undecodable_member_metadata_reports_an_error() -> None:
    h = Harness()
    h.start()
    h.m.on_metadata(metadata({"a": 1}), h.now)
    h.events()
    h.poll()
    h.reply(h.take(JOIN), join_response(member_id="m1", leader="m1", members=[("m1", None, b"\x00")]))
    errors = [e for e in h.events() if isinstance(e, MembershipError)]
    assert len(errors) == 1 and "ConsumerProtocolSubscription" in str(errors[0].error)


# ----------------------------------------------------------------------------------------------------------
# eager and cooperative callback sequences


def test_eager_rebalance_revokes_everything_first_then_assigns_the_full_set() -> None:
    a = ScriptedAssignor()
    h = Harness([a])
    h.stable(["a0", "a1"])
    h.heartbeat_ok()
    h.advance(HB)
    h.poll()
    h.reply(h.take(HEARTBEAT), heartbeat_response(E.rebalance_in_progress))
    h.poll()
    events = h.events()
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(REVOKE, tps("a0", "a1"))]
    assert h.kinds() == []  # JoinGroup waits for the revocation
    assert h.m.owned == tps("a0", "a1")  # still owned until the callback completed
    # heartbeats continue while the application delays the revocation
    h.heartbeat_ok()
    h.heartbeat_ok()
    h.complete(*events)
    assert h.events() == [AssignmentChanged(owned=frozenset())]
    h.poll()
    join = h.take(JOIN)
    sub = join_subscription(join)
    assert sub.owned_partitions == ()
    assert sub.generation_id == 1
    assert join.body(9)["reason"] == "group is already rebalancing"
    h.reply(join, join_response(generation=2))
    h.poll()
    h.reply(h.take(SYNC), sync_response([tp("a0"), tp("a2")]))
    events = h.events()
    assert events[0] == AssignmentChanged(owned=tps("a0", "a2"), awaiting_callback=tps("a0", "a2"))
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(ASSIGN, tps("a0", "a2"))]


def test_cooperative_rebalance_keeps_owned_and_revokes_after_sync_in_documented_order() -> None:
    log: list[str] = []
    a = ScriptedAssignor(supported_protocols=(EAGER, COOP), log=log)
    h = Harness([a], protocol=COOP)
    h.stable(["a0", "a1"])
    log.clear()
    h.advance(HB)
    h.poll()
    h.reply(h.take(HEARTBEAT), heartbeat_response(E.rebalance_in_progress))
    h.poll()
    assert h.events() == []  # cooperative: no revocation before rejoining
    join = h.take(JOIN)
    sub = join_subscription(join)
    assert sub.owned_partitions == (tp("a0"), tp("a1"))
    assert sub.generation_id == 1
    h.reply(join, join_response(generation=2))
    h.poll()
    h.reply(h.take(SYNC), sync_response([tp("a1"), tp("a2")]))
    events = h.events()
    assert len(events) == 3
    revoke, changed, assign = events
    assert isinstance(revoke, CallbackNeeded) and (revoke.kind, revoke.partitions) == (REVOKE, tps("a0"))
    assert changed == AssignmentChanged(owned=tps("a0", "a1", "a2"), awaiting_callback=tps("a2"))
    assert isinstance(assign, CallbackNeeded) and (assign.kind, assign.partitions) == (ASSIGN, tps("a2"))
    assert revoke.seq < assign.seq
    # revoked -> onAssignment -> assigned: on_assignment is not run at SyncGroup time (before a possibly
    # delayed revoke callback) but carried by the ASSIGN, which the application thread runs after the
    # REVOKE completed (the dispatch tests check that order end to end).
    assert log == []
    assert revoke.on_assignment is None and assign.on_assignment is not None
    assert h.m.owned == tps("a0", "a1", "a2")
    assert h.m.assigned == tps("a1", "a2")
    h.complete(revoke)
    assert log == []
    h.complete(assign)
    assert log == ["on_assignment"]
    assert a.on_assignment_calls[-1] == (MemberAssignment((tp("a1"), tp("a2"))), 2)


def test_cooperative_follow_up_rejoin_waits_for_the_delayed_revoke_while_heartbeating() -> None:
    h = Harness(protocol=COOP)
    h.stable(["a0", "a1"])
    h.m.enforce_rebalance("scale out", h.now)
    h.poll()
    h.reply(h.take(JOIN), join_response(generation=2))
    h.poll()
    h.reply(h.take(SYNC), sync_response([tp("a1")]))
    revoke, _changed, assign = h.events()
    h.complete(assign)  # the assign callback completes; the revoke is delayed by the application
    for _ in range(5):
        h.advance(HB)
        h.m.on_app_poll(h.now)
        h.poll()
        assert h.kinds() == [HEARTBEAT]
        h.reply(h.take(HEARTBEAT), heartbeat_response())
    assert h.m.owned == tps("a0", "a1")
    assert h.events() == []
    h.complete(revoke)
    assert h.events() == [AssignmentChanged(owned=tps("a1"))]
    h.poll()
    join = h.take(JOIN)
    assert join.body(9)["reason"] == "need to revoke partitions and re-join"
    assert join_subscription(join).owned_partitions == (tp("a1"),)
    assert join_subscription(join).generation_id == 2


def test_cooperative_revoke_partitions_of_unsubscribed_topics_before_joining() -> None:
    h = Harness(protocol=COOP, topics=("a", "b"))
    h.stable(["a0", "b0", "b1"])
    h.m.subscribe(Subscription(topics=frozenset({"a"})), h.now)
    h.m.on_app_poll(h.now)
    h.poll()
    events = [e for e in h.events() if not isinstance(e, MetadataNeeded)]
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(REVOKE, tps("b0", "b1"))]
    assert h.kinds() == []
    h.complete(*events)
    assert h.events() == [AssignmentChanged(owned=tps("a0"))]
    h.poll()
    sub = join_subscription(h.take(JOIN))
    assert sub.topics == ("a",)
    assert sub.owned_partitions == (tp("a0"),)


def test_delayed_revoke_during_a_foreign_rebalance_becomes_lost_at_the_deadline() -> None:
    margin = 5_000
    h = Harness(protocol=COOP, margin=margin)
    h.stable(["a0", "a1"])
    h.m.enforce_rebalance("scale out", h.now)
    h.poll()
    h.reply(h.take(JOIN), join_response(generation=2))
    h.poll()
    h.reply(h.take(SYNC), sync_response([tp("a1")]))
    revoke, _changed, assign = h.events()
    h.complete(assign)
    h.heartbeat_ok()
    last_ok_sent = h.now - 0  # heartbeat_ok replies at the send instant
    h.advance(HB)
    h.poll()
    h.reply(h.take(HEARTBEAT), heartbeat_response(E.rebalance_in_progress))
    deadline = last_ok_sent + REBALANCE - margin
    assert h.m.join_deadline_ms == deadline
    # before the deadline: heartbeats continue, no JoinGroup, partitions still owned
    while h.now + HB < deadline:
        h.advance(HB)
        h.m.on_app_poll(h.now)
        h.poll()
        assert h.kinds() == [HEARTBEAT]
        h.reply(h.take(HEARTBEAT), heartbeat_response(E.rebalance_in_progress))
    assert h.m.owned == tps("a0", "a1")
    assert h.events() == []
    h.advance(deadline - h.now)
    h.poll()
    events = h.events()
    assert events[0] == AssignmentChanged(owned=frozenset())
    lost = events[1]
    # Every owned partition, not only the one being revoked (issue 26: as Java's lost callback).
    assert isinstance(lost, CallbackNeeded) and (lost.kind, lost.partitions) == (LOST, tps("a0", "a1"))
    join = h.take(JOIN)
    assert join_subscription(join).owned_partitions == ()  # claims nothing after a missed deadline
    # a late completion of the superseded revoke is ignored
    h.complete(revoke)
    assert h.events() == []
    assert h.m.owned == frozenset()


def test_delayed_revoke_completed_before_the_deadline_rejoins_without_loss() -> None:
    h = Harness(protocol=COOP)
    h.stable(["a0", "a1"])
    h.m.enforce_rebalance("x", h.now)
    h.poll()
    h.reply(h.take(JOIN), join_response(generation=2))
    h.poll()
    h.reply(h.take(SYNC), sync_response([tp("a1")]))
    revoke, _changed, assign = h.events()
    h.complete(assign)
    h.advance(HB)
    h.poll()
    h.reply(h.take(HEARTBEAT), heartbeat_response(E.rebalance_in_progress))
    h.advance(HB)
    h.poll()
    assert JOIN not in h.kinds()
    h.complete(revoke)
    h.poll()
    assert [c for c in h.callbacks(h.events()) if c.kind is LOST] == []
    assert JOIN in h.kinds()


def test_eager_delayed_revoke_past_the_deadline_joins_with_nothing_owned() -> None:
    h = Harness(margin=0)
    h.stable(["a0"])
    h.advance(HB)
    h.poll()
    h.reply(h.take(HEARTBEAT), heartbeat_response(E.rebalance_in_progress))
    h.poll()
    (revoke,) = h.callbacks(h.events())
    assert revoke.kind is REVOKE
    deadline = h.m.join_deadline_ms
    assert deadline is not None
    while h.now < deadline:
        h.advance(HB)
        h.m.on_app_poll(h.now)
        h.poll()
        for r in [r for r in h.pending if r.api_key == HEARTBEAT]:
            h.pending.remove(r)
            h.reply(r, heartbeat_response(E.rebalance_in_progress))
    events = h.events()
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(LOST, tps("a0"))]
    assert join_subscription(h.take(JOIN)).owned_partitions == ()


def test_session_timeout_marks_coordinator_unknown_and_loses_pending_revocations() -> None:
    h = Harness(protocol=COOP)
    h.stable(["a0", "a1"])
    h.m.enforce_rebalance("x", h.now)
    h.poll()
    h.reply(h.take(JOIN), join_response(generation=2))
    h.poll()
    h.reply(h.take(SYNC), sync_response([tp("a1")]))
    _revoke, _changed, assign = h.events()
    h.complete(assign)
    # heartbeats get no answer
    for _ in range(SESSION // HB):
        h.advance(HB)
        h.m.on_app_poll(h.now)
        h.poll()
        for r in list(h.pending):
            h.pending.remove(r)
            h.fail(r, TimeoutError("request timed out"))
    events = h.events()
    assert any(isinstance(e, CoordinatorNeeded) for e in events)
    lost = [c for c in h.callbacks(events) if c.kind is LOST]
    assert [c.partitions for c in lost] == [tps("a0", "a1")]  # every owned partition
    assert h.m.owned == frozenset()


# ----------------------------------------------------------------------------------------------------------
# heartbeats


def test_heartbeat_timing_interval_single_in_flight_and_contents() -> None:
    h = Harness(instance_id="inst")
    h.stable(["a0"], member_id="m9", generation=4)
    h.poll()
    assert h.kinds() == []  # interval not elapsed since the sync
    assert h.m.poll(h.now).wait_ms <= HB
    h.advance(HB)
    h.poll()
    hb = h.take(HEARTBEAT)
    assert hb.body(4) == {"group_id": "g", "generation_id": 4, "member_id": "m9", "group_instance_id": "inst"}
    assert hb.min_version == 3
    h.advance(HB * 3)
    h.poll()
    assert h.kinds() == []  # one heartbeat in flight at most
    h.reply(hb, heartbeat_response())
    h.poll()
    assert h.kinds() == [HEARTBEAT]
    assert h.m.stats["heartbeat_total"] == 1
    assert h.m.stats["heartbeat_response_time_ms_max"] == HB * 3


def _stable_with_heartbeat(
    protocol: RebalanceProtocol = EAGER, instance_id: str | None = None
) -> tuple[Harness, UnsentRequest]:
    h = Harness(protocol=protocol, instance_id=instance_id)
    h.stable(["a0", "a1"], member_id="m1", generation=5)
    h.advance(HB)
    h.poll()
    return h, h.take(HEARTBEAT)


@pytest.mark.parametrize("protocol", [EAGER, COOP])
def test_heartbeat_unknown_member_id_loses_everything_and_rejoins_as_new_member(
    protocol: RebalanceProtocol,
) -> None:
    h, hb = _stable_with_heartbeat(protocol)
    h.reply(hb, heartbeat_response(E.unknown_member_id))
    events = h.events()
    assert events[0] == AssignmentChanged(owned=frozenset())
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(LOST, tps("a0", "a1"))]
    assert h.m.group_metadata() == ConsumerGroupMetadata("g", -1, "", None)
    assert h.m.state is MemberState.UNJOINED
    h.poll()
    assert h.kinds() == []  # waits for the lost callback
    h.complete(*events)
    h.poll()
    join = h.take(JOIN)
    assert join.body(9)["member_id"] == ""
    assert join_subscription(join).owned_partitions == ()
    assert join_subscription(join).generation_id == -1


def test_heartbeat_illegal_generation_keeps_member_id() -> None:
    h, hb = _stable_with_heartbeat(COOP)
    h.reply(hb, heartbeat_response(E.illegal_generation))
    events = h.events()
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(LOST, tps("a0", "a1"))]
    assert h.m.group_metadata().member_id == "m1"
    assert h.m.group_metadata().generation_id == -1
    h.complete(*events)
    h.poll()
    assert h.take(JOIN).body(9)["member_id"] == "m1"


def test_heartbeat_fenced_instance_id_is_fatal_for_static_members() -> None:
    h, hb = _stable_with_heartbeat(instance_id="inst")
    h.reply(hb, heartbeat_response(E.fenced_instance_id))
    events = h.events()
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(LOST, tps("a0", "a1"))]
    errors = [e for e in events if isinstance(e, MembershipError)]
    assert len(errors) == 1 and errors[0].fatal and isinstance(errors[0].error, FencedError)
    h.m.on_app_poll(h.now)
    h.advance(HB * 5)
    assert h.poll() == []
    h.m.leave(h.now)
    assert h.m.left


def test_heartbeat_fenced_instance_id_for_a_dynamic_member_resets_like_unknown_member() -> None:
    h, hb = _stable_with_heartbeat()
    h.reply(hb, heartbeat_response(E.fenced_instance_id))
    events = h.events()
    assert not any(isinstance(e, MembershipError) for e in events)
    assert [c.kind for c in h.callbacks(events)] == [LOST]
    assert h.m.group_metadata().member_id == ""


@pytest.mark.parametrize("code", [E.coordinator_not_available, E.not_coordinator])
def test_heartbeat_coordinator_errors_trigger_rediscovery(code: ErrorCode) -> None:
    h, hb = _stable_with_heartbeat()
    h.reply(hb, heartbeat_response(code))
    events = h.events()
    assert [type(e) for e in events] == [CoordinatorNeeded]
    h.advance(HB * 2)
    assert h.poll() == []  # no coordinator: nothing is sent
    assert h.m.owned == tps("a0", "a1")
    h.m.on_coordinator(2, h.now)
    h.poll()
    assert h.kinds() == [HEARTBEAT]


def test_heartbeat_rebalance_in_progress_is_ignored_while_completing_rebalance() -> None:
    h = Harness()
    h.start()
    h.poll()
    h.reply(
        h.take(JOIN),
        join_response(member_id="m1", leader="m1", members=[("m1", None, _member_metadata(["a"]))]),
    )
    h.events()
    h.advance(HB)
    h.poll()  # leader waiting for metadata: still heartbeating
    h.reply(h.take(HEARTBEAT), heartbeat_response(E.rebalance_in_progress))
    assert not h.m.rejoin_needed
    assert h.m.state is MemberState.COMPLETING_REBALANCE


def test_heartbeat_errors_with_a_stale_generation_are_ignored() -> None:
    h, hb = _stable_with_heartbeat(COOP)
    h.m.enforce_rebalance("x", h.now)
    h.poll()
    h.reply(h.take(JOIN), join_response(member_id="m1", generation=6))
    h.reply(hb, heartbeat_response(E.illegal_generation))  # sent with generation 5
    assert h.m.group_metadata().generation_id == 6
    assert h.callbacks(h.events()) == []


def test_heartbeat_group_authorization_failure_is_reported_and_retried_with_backoff() -> None:
    h, hb = _stable_with_heartbeat()
    h.reply(hb, heartbeat_response(E.group_authorization_failed))
    errors = [e for e in h.events() if isinstance(e, MembershipError)]
    assert len(errors) == 1 and not errors[0].fatal
    h.advance(BACKOFF - 1)
    assert h.poll() == []
    h.advance(1)
    h.poll()
    assert h.kinds() == [HEARTBEAT]


def test_heartbeat_unexpected_error_backs_off_exponentially() -> None:
    h, hb = _stable_with_heartbeat()
    h.reply(hb, heartbeat_response(E.unknown_server_error))
    assert h.events() == []
    h.advance(BACKOFF)
    h.poll()
    h.reply(h.take(HEARTBEAT), heartbeat_response(E.unknown_server_error))
    h.advance(BACKOFF)
    assert h.poll() == []  # second backoff is twice as long
    h.advance(BACKOFF)
    h.poll()
    assert h.kinds() == [HEARTBEAT]


def test_heartbeat_request_failure_marks_coordinator_unknown() -> None:
    h, hb = _stable_with_heartbeat()
    h.fail(hb, ConnectionError("disconnected"))
    assert [type(e) for e in h.events()] == [CoordinatorNeeded]


def test_heartbeat_failure_names_the_coordinator_it_went_to() -> None:
    h = Harness()
    h.m.on_coordinator(1, h.now, 7)
    h.m.on_app_poll(h.now)
    h.events()
    h.join_as_follower(["a0"], member_id="m1", generation=5)
    h.advance(HB)
    h.poll()
    h.reply(h.take(HEARTBEAT), heartbeat_response(E.not_coordinator))
    assert [e for e in h.events() if isinstance(e, CoordinatorNeeded)] == [
        CoordinatorNeeded("Heartbeat failed with NOT_COORDINATOR", epoch=7)
    ]


def test_stale_heartbeat_failure_does_not_forget_a_newer_coordinator() -> None:
    # The heartbeat went to coordinator 1; coordinator 2 was found before its failure arrived (the old
    # connection is dropped when the coordinator changes).  Coordinator 2 stays; heartbeats go on.
    h = Harness()
    h.m.on_coordinator(1, h.now, 1)
    h.m.on_app_poll(h.now)
    h.events()
    h.join_as_follower(["a0"], member_id="m1", generation=5)
    h.advance(HB)
    h.poll()
    hb = h.take(HEARTBEAT)
    h.m.on_coordinator(2, h.now, 2)
    h.fail(hb, ConnectionError_("coordinator changed"))
    assert not any(isinstance(e, CoordinatorNeeded) for e in h.events())
    assert h.m.state is MemberState.STABLE and h.m.owned == tps("a0")
    h.advance(BACKOFF_MAX)
    h.poll()
    assert h.kinds() == [HEARTBEAT]


def test_same_coordinator_announced_again_does_not_reset_the_session_timer() -> None:
    h = Harness()
    h.m.on_coordinator(1, h.now, 1)
    h.m.on_app_poll(h.now)
    h.events()
    h.join_as_follower(["a0"], member_id="m1", generation=5)
    h.advance(SESSION - 1)
    h.m.on_coordinator(1, h.now, 1)  # a refresh of the same discovery
    h.advance(1)
    h.poll()  # no heartbeat answered within session.timeout.ms: the coordinator is marked unknown
    assert [e.epoch for e in h.events() if isinstance(e, CoordinatorNeeded)] == [1]


def test_join_in_flight_when_the_coordinator_dies_is_sent_to_the_new_one_after_backoff() -> None:
    h, join = _joining()
    h.fail(join, ConnectionError_("connection to the coordinator lost"))
    (needed,) = [e for e in h.events() if isinstance(e, CoordinatorNeeded)]
    h.m.on_coordinator(2, h.now, (needed.epoch or 0) + 1)
    assert h.poll() == []  # backoff first
    h.advance(BACKOFF)
    h.poll()
    assert h.kinds() == [JOIN]


# ----------------------------------------------------------------------------------------------------------
# JoinGroup errors


def _joining() -> tuple[Harness, UnsentRequest]:
    h = Harness()
    h.start()
    h.events()
    h.poll()
    return h, h.take(JOIN)


def test_join_coordinator_load_in_progress_retries_after_backoff() -> None:
    h, join = _joining()
    h.reply(join, join_response(error=E.coordinator_load_in_progress))
    assert h.events() == []
    h.advance(BACKOFF - 1)
    assert h.poll() == []
    h.advance(1)
    h.poll()
    assert h.kinds() == [JOIN]
    assert h.sink.names() == ["started", "failed"]  # the retry belongs to the same rebalance


@pytest.mark.parametrize("code", [E.coordinator_not_available, E.not_coordinator])
def test_join_coordinator_errors_rediscover_then_retry(code: ErrorCode) -> None:
    h, join = _joining()
    h.reply(join, join_response(error=code))
    assert [type(e) for e in h.events()] == [CoordinatorNeeded]
    h.advance(BACKOFF * 10)
    assert h.poll() == []
    h.m.on_coordinator(3, h.now)
    h.poll()
    assert h.kinds() == [JOIN]


def test_join_unknown_member_id_resets_member_id_and_retries_at_once() -> None:
    h = Harness()
    h.start()
    h.poll()
    h.reply(h.take(JOIN), join_response(error=E.member_id_required, member_id="mX"))
    h.poll()
    h.reply(h.take(JOIN), join_response(error=E.unknown_member_id))
    assert h.m.group_metadata().member_id == ""
    h.poll()
    assert h.take(JOIN).body(9)["member_id"] == ""


def test_join_rebalance_in_progress_retries_at_once() -> None:
    h, join = _joining()
    h.reply(join, join_response(error=E.rebalance_in_progress))
    h.poll()
    assert h.kinds() == [JOIN]


def test_join_fenced_instance_id_is_fatal() -> None:
    h = Harness(instance_id="inst")
    h.start()
    h.poll()
    join = h.take(JOIN)
    assert join.min_version == 5
    assert join.body(9)["group_instance_id"] == "inst"
    h.reply(join, join_response(error=E.fenced_instance_id))
    errors = [e for e in h.events() if isinstance(e, MembershipError)]
    assert len(errors) == 1 and errors[0].fatal and isinstance(errors[0].error, FencedError)
    h.m.on_app_poll(h.now)
    h.advance(10 * BACKOFF_MAX)
    assert h.poll() == []


@pytest.mark.parametrize(
    "code",
    [
        E.inconsistent_group_protocol,
        E.invalid_session_timeout,
        E.invalid_group_id,
        E.group_authorization_failed,
        E.group_max_size_reached,
        E.unsupported_version,
        E.unknown_server_error,
        E.illegal_generation,
    ],
)
def test_join_non_retriable_errors_are_raised_and_retried_after_the_next_app_poll(code: ErrorCode) -> None:
    h, join = _joining()
    h.reply(join, join_response(error=code))
    errors = [e for e in h.events() if isinstance(e, MembershipError)]
    assert len(errors) == 1 and not errors[0].fatal
    assert str(code.name.upper()) in str(errors[0].error)
    h.advance(BACKOFF_MAX)
    assert h.poll() == []  # not before the application polled again
    h.m.on_app_poll(h.now)
    h.poll()
    assert h.kinds() == [JOIN]


def test_join_response_with_a_foreign_protocol_type_is_inconsistent() -> None:
    h, join = _joining()
    h.reply(join, join_response(protocol_type="connect"))
    errors = [e for e in h.events() if isinstance(e, MembershipError)]
    assert len(errors) == 1 and "INCONSISTENT_GROUP_PROTOCOL" in str(errors[0].error)
    assert h.m.state is not MemberState.COMPLETING_REBALANCE


def test_join_response_naming_an_unknown_protocol_is_an_error() -> None:
    h, join = _joining()
    h.reply(join, join_response(protocol="nope"))
    errors = [e for e in h.events() if isinstance(e, MembershipError)]
    assert len(errors) == 1 and "invalid assignment protocol" in str(errors[0].error)


def test_join_request_failure_rediscovers_and_retries_with_backoff() -> None:
    h, join = _joining()
    h.fail(join, ConnectionError("broken pipe"))
    assert [type(e) for e in h.events()] == [CoordinatorNeeded]
    h.m.on_coordinator(1, h.now)
    assert h.poll() == []
    h.advance(BACKOFF)
    h.poll()
    assert h.kinds() == [JOIN]


@pytest.mark.parametrize("version", [0, 1, 3, 4, 5, 7, 9])
def test_join_responses_of_every_version_are_understood(version: int) -> None:
    h, join = _joining()
    h.reply(join, join_response(version=version, generation=2, protocol_type=None), version=version)
    assert h.m.state is MemberState.COMPLETING_REBALANCE
    h.poll()
    h.reply(h.take(SYNC), sync_response([tp("a0")], version=0, protocol=None), version=0)
    assert h.m.owned == tps("a0")


# ----------------------------------------------------------------------------------------------------------
# SyncGroup errors


def _syncing(
    protocol: RebalanceProtocol = COOP, owned: Iterable[str] = ("a0", "a1")
) -> tuple[Harness, UnsentRequest]:
    h = Harness(protocol=protocol)
    h.stable(owned, member_id="m1", generation=1)
    h.m.enforce_rebalance("x", h.now)
    h.poll()
    h.events()
    h.reply(h.take(JOIN), join_response(member_id="m1", generation=2))
    h.poll()
    return h, h.take(SYNC)


def test_sync_rebalance_in_progress_rejoins_keeping_generation_and_owned() -> None:
    h, sync = _syncing()
    h.reply(sync, sync_response(error=E.rebalance_in_progress))
    assert h.callbacks(h.events()) == []
    assert h.m.owned == tps("a0", "a1")
    h.poll()
    join = h.take(JOIN)
    assert join_subscription(join).owned_partitions == (tp("a0"), tp("a1"))
    assert join.body(9)["member_id"] == "m1"


@pytest.mark.parametrize(("code", "member_id"), [(E.unknown_member_id, ""), (E.illegal_generation, "m1")])
def test_sync_fencing_errors_lose_everything(code: ErrorCode, member_id: str) -> None:
    h, sync = _syncing()
    h.reply(sync, sync_response(error=code))
    events = h.events()
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(LOST, tps("a0", "a1"))]
    assert h.m.group_metadata().member_id == member_id
    assert h.m.owned == frozenset()
    h.complete(*events)
    h.poll()
    join = h.take(JOIN)
    assert join.body(9)["member_id"] == member_id
    assert join_subscription(join).owned_partitions == ()


def test_sync_fenced_instance_id_is_fatal() -> None:
    h, sync = _syncing()
    h.reply(sync, sync_response(error=E.fenced_instance_id))
    events = h.events()
    assert [c.kind for c in h.callbacks(events)] == [LOST]
    assert any(isinstance(e, MembershipError) and e.fatal for e in events)


@pytest.mark.parametrize("code", [E.coordinator_not_available, E.not_coordinator])
def test_sync_coordinator_errors_rediscover(code: ErrorCode) -> None:
    h, sync = _syncing()
    h.reply(sync, sync_response(error=code))
    assert [type(e) for e in h.events()] == [CoordinatorNeeded]
    h.m.on_coordinator(1, h.now)
    h.advance(BACKOFF)
    h.poll()
    assert h.kinds() == [JOIN]


def test_sync_coordinator_load_in_progress_rejoins_after_backoff_without_raising() -> None:
    # A coordinator that took the group over after a failover may still be loading it.
    h, sync = _syncing()
    h.reply(sync, sync_response(error=E.coordinator_load_in_progress))
    events = h.events()
    assert not any(isinstance(e, (MembershipError, CoordinatorNeeded)) for e in events)
    assert h.callbacks(events) == [] and h.m.owned == tps("a0", "a1")
    assert h.poll() == []  # backoff
    h.advance(BACKOFF)
    h.poll()
    join = h.take(JOIN)
    assert join.body(9)["member_id"] == "m1"


def test_sync_in_flight_when_the_coordinator_dies_rejoins_on_the_new_one() -> None:
    h, sync = _syncing()
    h.fail(sync, ConnectionError_("connection to the coordinator lost"))
    (needed,) = [e for e in h.events() if isinstance(e, CoordinatorNeeded)]
    assert needed.epoch is not None
    assert h.m.owned == tps("a0", "a1")  # nothing lost: the generation is kept
    h.advance(BACKOFF * 10)
    assert h.poll() == []  # waits for the coordinator
    h.m.on_coordinator(2, h.now, needed.epoch + 1)
    h.poll()
    join = h.take(JOIN)
    assert join.body(9)["member_id"] == "m1"
    assert join_subscription(join).owned_partitions == (tp("a0"), tp("a1"))


@pytest.mark.parametrize("code", [E.group_authorization_failed, E.unknown_server_error])
def test_sync_other_errors_are_raised_and_retried_after_app_poll(code: ErrorCode) -> None:
    h, sync = _syncing()
    h.reply(sync, sync_response(error=code))
    errors = [e for e in h.events() if isinstance(e, MembershipError)]
    assert len(errors) == 1 and not errors[0].fatal
    h.advance(BACKOFF_MAX)
    assert h.poll() == []
    h.m.on_app_poll(h.now)
    h.poll()
    assert h.kinds() == [JOIN]


def test_sync_with_undecodable_assignment_reports_an_error() -> None:
    h, sync = _syncing()
    h.reply(sync, sync_response(raw=b"\x00\x00\x00"))
    errors = [e for e in h.events() if isinstance(e, MembershipError)]
    assert len(errors) == 1 and "ConsumerProtocolAssignment" in str(errors[0].error)


def test_sync_response_with_a_different_protocol_name_is_inconsistent() -> None:
    h, sync = _syncing()
    h.reply(sync, sync_response([tp("a0")], protocol="range"))
    errors = [e for e in h.events() if isinstance(e, MembershipError)]
    assert len(errors) == 1 and "INCONSISTENT_GROUP_PROTOCOL" in str(errors[0].error)


def test_stale_join_response_after_leave_is_ignored() -> None:
    h, join = _joining()
    h.m.leave(h.now)
    h.poll()
    assert h.m.left
    h.reply(join, join_response())
    assert h.m.state is MemberState.UNJOINED
    assert h.poll() == []


# ----------------------------------------------------------------------------------------------------------
# commits


def test_commit_rebalance_in_progress_requests_rejoin_keeping_owned() -> None:
    h = Harness(protocol=COOP)
    h.stable(["a0"])
    h.m.on_commit_error(int(E.rebalance_in_progress), h.m.group_metadata(), h.now)
    assert h.m.join_deadline_ms is not None
    h.poll()
    assert join_subscription(h.take(JOIN)).owned_partitions == (tp("a0"),)


def test_commit_unknown_member_loses_partitions() -> None:
    h = Harness(protocol=COOP)
    h.stable(["a0"])
    sent = h.m.group_metadata()
    h.m.on_commit_error(int(E.unknown_member_id), sent, h.now)
    assert [c.kind for c in h.callbacks(h.events())] == [LOST]
    assert h.m.group_metadata().member_id == ""


def test_generation_if_stable_is_none_during_a_rebalance() -> None:
    h = Harness()
    h.stable(["a0"], generation=3)
    assert h.m.generation_if_stable() == ConsumerGroupMetadata("g", 3, "m1", None)
    h.m.enforce_rebalance("x", h.now)
    h.poll()
    h.complete(*h.events())
    h.poll()
    assert h.m.state is MemberState.PREPARING_REBALANCE
    assert h.m.generation_if_stable() is None


# ----------------------------------------------------------------------------------------------------------
# poll timer, leaving, static membership


def _keep_heartbeating(h: Harness, until: int) -> None:
    while h.now < until:
        h.advance(HB)
        h.poll()
        for r in [r for r in h.pending if r.api_key == HEARTBEAT]:
            h.pending.remove(r)
            h.reply(r, heartbeat_response())


def test_poll_timeout_leaves_the_group_and_next_poll_rejoins_after_lost() -> None:
    h = Harness(protocol=COOP)
    h.stable(["a0", "a1"], member_id="m1")
    start = h.now
    _keep_heartbeating(h, start + REBALANCE - HB)
    assert h.kinds() == []
    h.advance(HB)
    h.poll()
    leave = h.take(LEAVE)
    assert leave.body(5)["members"][0]["member_id"] == "m1"
    assert leave.body(5)["members"][0]["reason"] == "consumer poll timeout has expired."
    assert leave.body(0)["member_id"] == "m1"
    events = h.events()
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(LOST, tps("a0", "a1"))]
    assert h.m.state is MemberState.UNJOINED
    assert h.m.stats["poll_timeouts"] == 1
    h.advance(HB * 5)
    assert h.poll() == []  # no rejoin before the application polls again
    h.m.on_app_poll(h.now)
    h.complete(*events)
    h.poll()
    join = h.take(JOIN)
    assert join.body(9)["member_id"] == ""
    assert join_subscription(join).owned_partitions == ()


def test_poll_timeout_during_an_eager_revoke_loses_every_partition_of_the_revoke() -> None:
    """A rebalance began (heartbeat REBALANCE_IN_PROGRESS) just before the poll timer expires: the eager
    REVOKE(all) is out to the application thread, which does not poll.  On expiry the member leaves and
    LOST covers every partition of that REVOKE (the application thread lets the LOST supersede the revoke:
    test_rebalance_dispatch); the REVOKE's late completion changes nothing and the rejoin claims nothing."""
    h = Harness(protocol=EAGER)
    h.stable(["a0", "a1"], member_id="m1")
    start = h.now
    _keep_heartbeating(h, start + REBALANCE - 2 * HB)
    h.advance(HB)
    h.poll()
    h.reply(h.take(HEARTBEAT), heartbeat_response(E.rebalance_in_progress))
    h.poll()
    revoke_events = h.events()
    assert [(c.kind, c.partitions) for c in h.callbacks(revoke_events)] == [(REVOKE, tps("a0", "a1"))]
    assert JOIN not in h.kinds()  # the JoinGroup waits for the revoke callback
    h.advance(HB)  # the poll timer expires before the application thread ran the revoke
    h.poll()
    h.take(LEAVE)
    events = h.events()
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(LOST, tps("a0", "a1"))]
    assert h.m.owned == frozenset() and h.m.generation.is_reset
    h.complete(*revoke_events)  # too late: superseded
    assert h.events() == [] and h.m.owned == frozenset()
    h.complete(*events)
    h.advance(HB)
    assert JOIN not in [r.api_key for r in h.poll()]  # no rejoin before the application polls again
    h.m.on_app_poll(h.now)
    h.poll()
    join = h.take(JOIN)
    assert join.body(9)["member_id"] == ""
    assert join_subscription(join).owned_partitions == ()


def test_app_polls_keep_the_member_in_the_group() -> None:
    h = Harness()
    h.stable(["a0"])
    for _ in range(3 * REBALANCE // HB):
        h.advance(HB)
        h.m.on_app_poll(h.now)
        h.poll()
        for r in list(h.pending):
            h.pending.remove(r)
            h.reply(r, heartbeat_response())
            assert r.api_key == HEARTBEAT
    assert h.m.state is MemberState.STABLE
    assert h.events() == []


def test_poll_timer_stands_still_while_the_app_is_inside_a_blocking_call() -> None:
    # E.g. commit_sync() waiting through a coordinator failover: that time is not charged.
    h = Harness()
    h.stable(["a0"])
    start = h.now
    _keep_heartbeating(h, start + REBALANCE - 5 * HB)
    h.m.on_app_call(True, h.now)
    _keep_heartbeating(h, h.now + 2 * REBALANCE)
    assert LEAVE not in h.kinds() and h.m.state is MemberState.STABLE
    h.m.on_app_call(False, h.now)
    _keep_heartbeating(h, h.now + 4 * HB)
    assert LEAVE not in h.kinds() and h.m.state is MemberState.STABLE
    _keep_heartbeating(h, h.now + HB)
    assert LEAVE in h.kinds()  # the 5 s left before the call ran out after it


def test_poll_timer_is_not_acted_on_while_the_coordinator_is_unknown() -> None:
    # As Java's heartbeat thread: the expiry is decided once a coordinator is known again.
    h = Harness()
    h.stable(["a0"])
    h.m.on_coordinator(None, h.now)
    h.advance(REBALANCE + HB)
    h.poll()
    assert h.kinds() == [] and h.m.state is MemberState.STABLE
    assert h.m.poll(h.now).wait_ms > 0  # and no busy loop on the expired timer
    h.m.on_coordinator(2, h.now)
    h.poll()
    assert LEAVE in h.kinds()
    assert [c.kind for c in h.callbacks(h.events())] == [LOST]


def test_static_member_poll_timeout_sends_no_leave_group_but_resets() -> None:
    h = Harness(instance_id="inst")
    h.stable(["a0"])
    _keep_heartbeating(h, h.now + REBALANCE)
    assert LEAVE not in h.kinds()
    assert [c.kind for c in h.callbacks(h.events())] == [LOST]
    assert h.m.group_metadata().member_id == ""


def test_dynamic_leave_revokes_then_sends_leave_group() -> None:
    h = Harness(protocol=COOP)
    h.stable(["a0", "a1"], member_id="m1")
    h.m.leave(h.now)
    events = h.events()
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(REVOKE, tps("a0", "a1"))]
    h.poll()
    assert LEAVE not in h.kinds()
    h.advance(HB)
    h.poll()
    assert h.kinds() == [HEARTBEAT]  # heartbeats go on while the revoke callback runs
    h.reply(h.take(HEARTBEAT), heartbeat_response())
    assert not h.m.left
    h.complete(*events)
    h.poll()
    leave = h.take(LEAVE)
    assert leave.body(5)["members"][0]["reason"] == "the consumer is being closed"
    assert not h.m.left
    h.reply(leave, leave_response())
    assert h.m.left
    h.advance(HB * 10)
    assert h.poll() == []


def test_leave_completes_even_if_leave_group_fails() -> None:
    h = Harness()
    h.stable(["a0"])
    h.m.leave(h.now)
    h.complete(*h.events())
    h.poll()
    h.fail(h.take(LEAVE), ConnectionError("gone"))
    assert h.m.left


def test_static_member_close_revokes_but_sends_no_leave_group() -> None:
    h = Harness(instance_id="inst")
    h.stable(["a0"])
    join_values = None
    h.m.leave(h.now)
    events = h.events()
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(REVOKE, tps("a0"))]
    h.complete(*events)
    h.poll()
    assert LEAVE not in h.kinds()
    assert h.m.left
    assert join_values is None


def test_static_membership_ids_in_join_sync_and_heartbeat() -> None:
    h = Harness(instance_id="inst-1")
    h.start()
    h.poll()
    join = h.take(JOIN)
    assert (join.body(9)["group_instance_id"], join.min_version) == ("inst-1", 5)
    h.reply(join, join_response())
    h.poll()
    sync = h.take(SYNC)
    assert (sync.body(5)["group_instance_id"], sync.min_version) == ("inst-1", 3)


def test_leave_during_a_rebalance_reports_lost() -> None:
    h = Harness(protocol=COOP)
    h.stable(["a0"], member_id="m1")
    h.m.enforce_rebalance("x", h.now)
    h.poll()
    assert h.m.state is MemberState.PREPARING_REBALANCE
    h.m.leave(h.now)
    events = h.events()
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(LOST, tps("a0"))]
    h.complete(*events)
    h.poll()
    assert LEAVE in h.kinds()


def test_leave_without_ever_joining_is_immediate() -> None:
    h = Harness()
    h.m.leave(h.now)
    assert h.m.left
    assert h.poll() == []


def test_unsubscribe_then_subscribe_again_rejoins() -> None:
    h = Harness()
    h.stable(["a0"], member_id="m1")
    h.m.unsubscribe(h.now)
    h.complete(*h.events())
    h.poll()
    h.reply(h.take(LEAVE), leave_response())
    assert h.m.left
    assert h.m.subscribed_topics == frozenset()
    h.m.subscribe(Subscription(topics=frozenset({"b"})), h.now)
    assert not h.m.left
    h.m.on_app_poll(h.now)
    h.poll()
    join = h.take(JOIN)
    assert join_subscription(join).topics == ("b",)
    assert join.body(9)["member_id"] == ""


# ----------------------------------------------------------------------------------------------------------
# metadata changes


def test_deleted_topic_partitions_are_lost_and_the_leader_rejoins() -> None:
    a = ScriptedAssignor(supported_protocols=(EAGER, COOP))
    h = Harness([a], protocol=COOP, topics=("a", "b"))
    h.m.on_metadata(metadata({"a": 1, "b": 2}), h.now)
    h.start()
    h.poll()
    members = [("m1", None, _member_metadata(["a", "b"]))]
    a.result = {"m1": MemberAssignment((tp("a0"), tp("b0"), tp("b1")))}
    h.reply(h.take(JOIN), join_response(member_id="m1", leader="m1", members=members))
    h.poll()
    h.reply(h.take(SYNC), sync_response([tp("a0"), tp("b0"), tp("b1")]))
    h.complete(*h.events())
    h.m.on_metadata(metadata({"a": 1}, errors={"b": int(E.unknown_topic_or_partition)}), h.now)
    events = h.events()
    assert events[0] == AssignmentChanged(owned=tps("a0"))
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(LOST, tps("b0", "b1"))]
    h.poll()
    join = h.take(JOIN)  # no need to wait for the lost callback: nobody can get deleted partitions
    assert join_subscription(join).owned_partitions == (tp("a0"),)


def test_partition_count_change_triggers_the_leaders_rejoin() -> None:
    a = ScriptedAssignor(supported_protocols=(EAGER, COOP))
    h = _stable_leader(a, {"a": 2})
    h.m.on_metadata(metadata({"a": 2, "other": 5}), h.now)
    h.poll()
    assert JOIN not in h.kinds()  # nothing changed for subscribed topics
    h.m.on_metadata(metadata({"a": 4}), h.now)
    h.poll()
    assert "metadata" in h.take(JOIN).body(9)["reason"]


def test_first_metadata_after_joining_without_metadata_does_not_rejoin() -> None:
    h = Harness(topics=("a",))
    h.stable(["a0"])
    h.m.on_metadata(metadata({"a": 2}), h.now)
    h.poll()
    assert JOIN not in h.kinds()


def test_metadata_change_during_a_rebalance_makes_the_leader_rejoin_after_it_completes() -> None:
    a = ScriptedAssignor(supported_protocols=(EAGER, COOP))
    h = Harness([a], protocol=COOP, topics=("a",))
    h.m.on_metadata(metadata({"a": 1}), h.now)
    h.start()
    h.poll()
    a.result = {"m1": MemberAssignment((tp("a0"),))}
    members = [("m1", None, _member_metadata(["a"]))]
    h.reply(h.take(JOIN), join_response(member_id="m1", leader="m1", members=members))
    h.m.on_metadata(metadata({"a": 3}), h.now)
    h.poll()
    h.reply(h.take(SYNC), sync_response([tp("a0")]))
    h.complete(*h.events())
    h.poll()
    assert JOIN in h.kinds()


def test_metadata_change_during_a_rebalance_does_not_make_a_follower_rejoin() -> None:
    h = Harness(protocol=COOP, topics=("a",))
    h.m.on_metadata(metadata({"a": 1}), h.now)
    h.start()
    h.poll()
    h.reply(h.take(JOIN), join_response())
    h.m.on_metadata(metadata({"a": 3}), h.now)
    h.poll()
    h.reply(h.take(SYNC), sync_response([tp("a0")]))
    h.complete(*h.events())
    h.poll()
    assert JOIN not in h.kinds()


# ----------------------------------------------------------------------------------------------------------
# metrics, stats


def test_rebalance_metrics_started_failed_completed() -> None:
    h = Harness()
    h.start()
    h.poll()
    h.reply(h.take(JOIN), join_response(error=E.coordinator_load_in_progress))
    h.advance(BACKOFF)
    h.poll()
    h.advance(10)
    h.reply(h.take(JOIN), join_response())
    h.poll()
    h.advance(10)
    h.reply(h.take(SYNC), sync_response([tp("a0")]))
    h.advance(30)
    h.complete(*h.events())
    t0 = 1_000_000
    assert h.sink.calls == [
        ("started", t0),
        ("failed", t0),
        ("completed", t0 + BACKOFF + 50),
    ]
    assert h.m.stats["join_total"] == 1
    assert h.m.stats["join_time_ms_max"] == 10
    assert h.m.stats["sync_total"] == 1
    assert h.m.stats["sync_time_ms_total"] == 10


def test_callback_errors_are_counted_and_the_rebalance_still_completes() -> None:
    h = Harness()
    h.start()
    events = h.join_as_follower(["a0"], complete=False)
    (assign,) = h.callbacks(events)
    h.m.on_callback_completed(assign.seq, RuntimeError("listener failed"), h.now)
    assert h.m.stats["callback_errors"] == 1
    assert h.sink.names() == ["started", "completed"]
    assert h.m.state is MemberState.STABLE


def test_only_the_latest_assign_completes_the_rebalance_a_superseded_one_completing_late_does_not() -> None:
    h = Harness(margin=REBALANCE - 3 * HB)  # the revoke deadline comes 3 heartbeats after the last sign
    events = h.stable(["a0"], complete=False)
    (first_assign,) = h.callbacks(events)  # its callback is still running on the application thread
    h.heartbeat_ok()
    h.advance(HB)
    h.poll()
    h.reply(h.take(HEARTBEAT), heartbeat_response(E.rebalance_in_progress))
    h.poll()
    (revoke,) = h.callbacks(h.events())  # eager: revoke before rejoining; the JoinGroup waits for both
    assert revoke.kind is REVOKE
    assert h.m.waiting_for_callbacks == {first_assign.seq, revoke.seq}
    lost: list[CallbackNeeded] = []
    for _ in range(10):
        h.advance(HB)
        h.poll()
        if HEARTBEAT in h.kinds():
            h.reply(h.take(HEARTBEAT), heartbeat_response(E.rebalance_in_progress))
        lost = h.callbacks(h.events())
        if lost:
            break
    assert [(c.kind, c.partitions) for c in lost] == [(LOST, tps("a0"))]  # the revocation was given up
    assert h.m.waiting_for_callbacks == frozenset()
    h.poll()
    h.reply(h.take(JOIN), join_response(generation=2))
    h.poll()
    h.reply(h.take(SYNC), sync_response([tp("a1")]))
    (second_assign,) = h.callbacks(h.events())
    h.complete(first_assign, revoke)  # late: nothing completes (the REVOKE's partitions are gone already)
    assert h.sink.names() == ["started"]
    assert h.m.owned == tps("a1")
    h.advance(5)
    h.complete(second_assign)
    assert h.sink.calls[1:] == [("completed", h.now)]


def test_wait_ms_covers_heartbeat_and_revoke_deadline() -> None:
    h = Harness(protocol=COOP, margin=0)
    h.stable(["a0", "a1"])
    assert h.m.poll(h.now).wait_ms == HB
    h.m.enforce_rebalance("x", h.now)
    h.poll()
    h.reply(h.take(JOIN), join_response(generation=2))
    h.poll()
    h.reply(h.take(SYNC), sync_response([tp("a1")]))
    _revoke, _changed, assign = h.events()
    h.complete(assign)
    h.advance(HB)
    h.poll()
    h.reply(h.take(HEARTBEAT), heartbeat_response(E.rebalance_in_progress))
    deadline = h.m.join_deadline_ms
    assert deadline is not None
    assert 0 <= h.m.poll(h.now).wait_ms <= min(HB, deadline - h.now)


def test_partition_missing_from_topic_metadata_is_lost() -> None:
    h = Harness(protocol=COOP, topics=("a",))
    h.m.on_metadata(metadata({"a": 3}), h.now)
    h.stable(["a1", "a2"])
    h.m.on_metadata(metadata({"a": 2}), h.now)  # topic re-created with fewer partitions
    events = h.events()
    assert [(c.kind, c.partitions) for c in h.callbacks(events)] == [(LOST, tps("a2"))]
    assert h.m.owned == tps("a1")


def test_subscribe_during_unsubscribe_joins_again_after_the_leave() -> None:
    h = Harness()
    h.stable(["a0"], member_id="m1")
    h.m.unsubscribe(h.now)
    revoke_events = h.events()
    h.m.subscribe(Subscription(topics=frozenset({"b"})), h.now)
    h.complete(*revoke_events)
    h.poll()
    h.reply(h.take(LEAVE), leave_response())
    assert not h.m.left
    h.m.on_app_poll(h.now)
    h.poll()
    join = h.take(JOIN)
    assert join_subscription(join).topics == ("b",)
    assert join.body(9)["member_id"] == ""


def test_on_assignment_failure_is_reported_and_the_rebalance_still_completes() -> None:
    class Failing(ScriptedAssignor):
        def on_assignment(self, assignment: MemberAssignment, generation_id: int) -> None:
            raise RuntimeError("boom")

    h = Harness([Failing()])
    h.start()
    events = h.join_as_follower(["a0"], complete=False)
    (assign,) = h.callbacks(events)
    assert assign.kind is ASSIGN and assign.on_assignment is not None
    with pytest.raises(KafkaError, match=r"on_assignment failed.*boom"):
        assign.on_assignment()
    h.complete(*events)  # reported with the error; the rebalance completes regardless
    assert h.m.owned == tps("a0")
    assert h.sink.names() == ["started", "completed"]


def test_fencing_before_the_assign_callback_completed_counts_a_failed_rebalance() -> None:
    h = Harness()
    h.start()
    events = h.join_as_follower(["a0"], complete=False)
    h.advance(HB)
    h.poll()
    h.reply(h.take(HEARTBEAT), heartbeat_response(E.unknown_member_id))
    lost = h.callbacks(h.events())
    assert [(c.kind, c.partitions) for c in lost] == [(LOST, tps("a0"))]
    assert h.sink.names() == ["started", "failed"]
    h.complete(*events)  # the superseded ASSIGN completes late: no completion is recorded
    assert h.sink.names() == ["started", "failed"]
    assert h.m.waiting_for_callbacks == frozenset({lost[0].seq})


def test_raising_callbacks_do_not_stop_the_cooperative_rebalance() -> None:
    """Issue 14 item 2 (classic side, like the KIP-848 membership): a revoke callback that failed still
    releases the partitions and triggers the follow-up rejoin; an assign callback that failed still
    completes the rebalance; neither callback is requested again."""
    h = Harness(protocol=COOP)
    h.stable(["a0", "a1"])
    h.m.enforce_rebalance("scale out", h.now)
    h.poll()
    h.reply(h.take(JOIN), join_response(generation=2))
    h.poll()
    h.reply(h.take(SYNC), sync_response([tp("a1"), tp("a2")]))
    revoke, assign = h.callbacks(h.events())
    h.m.on_callback_completed(assign.seq, RuntimeError("assign failed"), h.now)
    assert h.sink.names()[-1] == "completed"
    h.m.on_callback_completed(revoke.seq, RuntimeError("revoke failed"), h.now)
    assert h.events() == [AssignmentChanged(owned=tps("a1", "a2"))]
    assert h.m.stats["callback_errors"] == 2
    h.poll()
    join = h.take(JOIN)
    assert join_subscription(join).owned_partitions == (tp("a1"), tp("a2"))
    assert h.events() == []


# ----------------------------------------------------------------------------------------------------------
# issue 14 item 9: classic rebalance triggers


def _stable_leader(a: ScriptedAssignor, counts: dict[str, int]) -> Harness:
    h = Harness([a], protocol=COOP, topics=("a",))
    h.start()
    h.m.on_metadata(metadata(counts), h.now)
    h.events()
    h.poll()
    members = [("m1", None, _member_metadata(["a"])), ("m2", None, _member_metadata(["a"]))]
    a.result = {"m1": MemberAssignment((tp("a0"),)), "m2": MemberAssignment((tp("a1"),))}
    h.reply(h.take(JOIN), join_response(member_id="m1", leader="m1", members=members))
    h.poll()
    h.reply(h.take(SYNC), sync_response([tp("a0")]))
    h.complete(*h.events())
    assert h.m.is_leader and h.m.state is MemberState.STABLE
    return h


def test_partition_count_change_makes_only_the_leader_rejoin() -> None:
    follower = Harness(protocol=COOP, topics=("a",))
    follower.start()
    follower.m.on_metadata(metadata({"a": 2}), follower.now)
    follower.join_as_follower(["a0"])
    assert not follower.m.is_leader and follower.m.state is MemberState.STABLE
    follower.m.on_metadata(metadata({"a": 4}), follower.now)
    assert not follower.m.rejoin_needed
    follower.heartbeat_ok()
    assert follower.kinds() == []  # no JoinGroup from a follower

    a = ScriptedAssignor(supported_protocols=(EAGER, COOP))
    leader = _stable_leader(a, {"a": 2})
    leader.m.on_metadata(metadata({"a": 4}), leader.now)
    assert leader.m.rejoin_needed
    leader.poll()
    join = leader.take(JOIN)
    assert "metadata has changed" in join.body(9)["reason"]


def test_vanished_partitions_are_lost_and_only_the_leader_rejoins() -> None:
    follower = Harness(protocol=COOP, topics=("a",))
    follower.start()
    follower.m.on_metadata(metadata({"a": 2}), follower.now)
    follower.join_as_follower(["a0", "a1"])
    follower.m.on_metadata(metadata({"a": 1}), follower.now)  # a1 no longer exists
    lost = follower.callbacks(follower.events())
    assert [(c.kind, c.partitions) for c in lost] == [(LOST, tps("a1"))]
    assert not follower.m.rejoin_needed

    a = ScriptedAssignor(supported_protocols=(EAGER, COOP))
    leader = _stable_leader(a, {"a": 2})
    leader.m.on_metadata(metadata({"a": 1}, errors={}), leader.now)
    assert leader.m.rejoin_needed


def test_leader_hands_partitions_of_topics_it_cannot_see_back_to_their_owners() -> None:
    """KIP-429 2.f: unknown-but-owned partitions (a topic the leader's metadata does not show) are given
    back to the member that claims them instead of being taken away."""
    a = ScriptedAssignor("custom-coop", (COOP,))
    h = Harness([a], protocol=COOP, topics=("a",))
    h.start()
    h.m.on_metadata(metadata({"a": 2}), h.now)
    h.poll()
    members = [
        ("m1", None, _member_metadata(["a"], owned=[tp("a0")], generation=1)),
        ("m2", None, _member_metadata(["a", "n"], owned=[tp("a1"), tp("n0"), tp("n1")], generation=1)),
    ]
    a.result = {"m1": MemberAssignment((tp("a0"),)), "m2": MemberAssignment((tp("a1"),), b"ud")}
    h.reply(h.take(JOIN), join_response(member_id="m1", leader="m1", members=members, protocol="custom-coop"))
    assert h.events() == [MetadataNeeded(topics=frozenset({"a", "n"}))]
    h.m.on_metadata(metadata({"a": 2}), h.now)  # still no "n" (e.g. created after the leader's metadata)
    assert a.assign_calls[0][0] == {"a": 2}
    h.poll()
    sent = {x["member_id"]: decode_assignment(x["assignment"]) for x in h.take(SYNC).body(5)["assignments"]}
    assert sent["m1"] == MemberAssignment((tp("a0"),))
    assert sent["m2"] == MemberAssignment((tp("a1"), tp("n0"), tp("n1")), b"ud")


# ----------------------------------------------------------------------------------------------------------
# issue 14 item 5: a custom assignor runs on the application thread


def _leader_with_task(a: Any) -> tuple[Harness, AppThreadTask]:
    h = Harness([a], topics=("a",), app_thread_assignors=True)  # as the consumer constructs it
    h.start()
    h.m.on_metadata(metadata({"a": 2}), h.now)
    h.events()
    h.poll()
    members = [("m1", None, _member_metadata(["a"])), ("m2", None, _member_metadata(["a"]))]
    h.reply(h.take(JOIN), join_response(member_id="m1", leader="m1", members=members))
    (task,) = [e for e in h.events() if isinstance(e, AppThreadTask)]
    return h, task


def test_custom_assignor_assign_is_handed_to_the_application_thread() -> None:
    a = ScriptedAssignor()
    a.result = {"m1": MemberAssignment((tp("a0"),)), "m2": MemberAssignment((tp("a1"),))}
    h, task = _leader_with_task(a)
    h.poll()
    assert h.kinds() == [] and a.assign_calls == []  # nothing ran on the network thread
    h.advance(HB)
    h.poll()
    assert h.kinds() == [HEARTBEAT]  # heartbeats go on while the application thread has not run it
    h.take(HEARTBEAT)
    result = task.run()  # the application thread, inside poll()
    assert len(a.assign_calls) == 1
    task.done(result, None, h.now)  # back on the network thread
    h.poll()
    sent = {x["member_id"]: decode_assignment(x["assignment"]) for x in h.take(SYNC).body(5)["assignments"]}
    assert sent == a.result


def test_custom_assignor_failure_on_the_application_thread_is_reported() -> None:
    h, task = _leader_with_task(ScriptedAssignor())
    task.done(None, RuntimeError("assignor bug"), h.now)
    errors = [e for e in h.events() if isinstance(e, MembershipError)]
    assert len(errors) == 1 and "assignor bug" in str(errors[0].error) and not errors[0].fatal
    h.poll()
    assert SYNC not in h.kinds()


def test_stale_custom_assignor_result_is_ignored() -> None:
    a = ScriptedAssignor()
    a.result = {"m1": MemberAssignment((tp("a0"),))}
    h, task = _leader_with_task(a)
    h.advance(HB)
    h.poll()
    h.reply(h.take(HEARTBEAT), heartbeat_response(E.unknown_member_id))  # generation reset meanwhile
    task.done(task.run(), None, h.now)
    h.poll()
    assert SYNC not in h.kinds()


def test_builtin_assignor_runs_at_once_on_the_network_thread() -> None:
    h = Harness([RangeAssignor()], topics=("a",), app_thread_assignors=True)
    h.start()
    h.m.on_metadata(metadata({"a": 2}), h.now)
    h.events()
    h.poll()
    members = [("m1", None, _member_metadata(["a"]))]
    h.reply(h.take(JOIN), join_response(member_id="m1", leader="m1", members=members, protocol="range"))
    assert not [e for e in h.events() if isinstance(e, AppThreadTask)]
    h.poll()
    assert h.kinds() == [SYNC]
