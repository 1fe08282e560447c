"""Several :class:`ClassicMembership` members against an in-memory classic group coordinator (sans-I/O).

The fake coordinator follows the broker's classic group state machine closely enough for the properties
that matter here: JoinGroup barrier with MEMBER_ID_REQUIRED, leader election, protocol vote, SyncGroup
distribution, REBALANCE_IN_PROGRESS on heartbeats while preparing a rebalance, member removal on leave,
rebalance timeout and session timeout.  Members use the real assignors; the application side completes
callbacks after configurable delays (KIP-983 delayed revocation).  Checked at every step: no partition is
owned by two members at once; at the end every partition is owned by exactly one member.
"""

from __future__ import annotations

import datetime
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafka_handoff.group.assignors import (
    CooperativeStickyAssignor,
    PartitionAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from kafka_handoff.group.classic_membership import ClassicMembership, MemberState
from kafka_handoff.group.membership import (
    CallbackKind,
    CallbackNeeded,
    CoordinatorNeeded,
    MembershipError,
    MetadataNeeded,
    Subscription,
)
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.requests import FakeClock, UnsentRequest
from kafka_handoff.types import ClusterMetadata, PartitionInfo, TopicPartition

pytestmark = pytest.mark.unit

JOIN, HEARTBEAT, LEAVE, SYNC = 11, 12, 13, 14
VERSIONS = {JOIN: 9, HEARTBEAT: 4, LEAVE: 5, SYNC: 5}
E = ErrorCode
STEP = 50
SESSION = 6_000
HB = 500
REBALANCE = 20_000

Respond = Callable[[Any], None]


def _resp(api_key: int, **values: Any) -> Any:
    cls = wire.response_class(api_key, VERSIONS[api_key])
    names = {f for f in cls.__dataclass_fields__ if not f.startswith("__")}
    kwargs = {k: v for k, v in values.items() if k in names}
    if "throttle_time" in names:
        kwargs["throttle_time"] = datetime.timedelta(0)
    return cls(**kwargs)


def _join_resp(error: ErrorCode = E.none, **values: Any) -> Any:
    base: dict[str, Any] = {
        "generation_id": -1,
        "protocol_type": "consumer",
        "protocol_name": None,
        "leader": "",
        "member_id": "",
        "members": (),
    }
    base.update(values)
    return _resp(JOIN, error_code=error, **base)


@dataclass
class _Member:
    protocols: list[tuple[str, bytes]]
    rebalance_timeout: int
    session_timeout: int
    last_seen: int


@dataclass
class FakeCoordinator:
    """An in-memory classic group coordinator for one group."""

    state: str = "Empty"
    generation: int = 0
    leader: str | None = None
    protocol: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    pending_ids: set[str] = field(default_factory=set)
    pending_joins: dict[str, Respond] = field(default_factory=dict)
    pending_syncs: dict[str, Respond] = field(default_factory=dict)
    assignments: dict[str, bytes] = field(default_factory=dict)
    rebalance_deadline: int = 0
    next_id: int = 0
    rebalances: int = 0

    def receive(self, req: UnsentRequest, now: int) -> None:
        version = VERSIONS[req.api_key]
        entity = wire.build_request(req.api_key, version, req.body(version))

        def respond(resp: Any) -> None:
            assert req.on_response is not None
            req.on_response(resp, version, now)

        handler = {JOIN: self._join, SYNC: self._sync, HEARTBEAT: self._heartbeat, LEAVE: self._leave}
        handler[req.api_key](entity, respond, now)

    # --- JoinGroup ---------------------------------------------------------------------------------------

    def _join(self, e: Any, respond: Respond, now: int) -> None:
        if e.member_id == "":
            self.next_id += 1
            new_id = f"member-{self.next_id}"
            self.pending_ids.add(new_id)
            respond(_join_resp(E.member_id_required, member_id=new_id))
            return
        if e.member_id not in self.members and e.member_id not in self.pending_ids:
            respond(_join_resp(E.unknown_member_id, member_id=e.member_id))
            return
        self.pending_ids.discard(e.member_id)
        self.members[e.member_id] = _Member(
            [(p.name, bytes(p.metadata)) for p in e.protocols],
            int(e.rebalance_timeout.total_seconds() * 1000),
            int(e.session_timeout.total_seconds() * 1000),
            now,
        )
        self.pending_joins[e.member_id] = respond
        if self.state != "PreparingRebalance":
            self._prepare_rebalance(now)
        self._maybe_complete_join(now)

    def _prepare_rebalance(self, now: int) -> None:
        for member_id, respond in list(self.pending_syncs.items()):
            del self.pending_syncs[member_id]
            respond(_resp(SYNC, error_code=E.rebalance_in_progress, assignment=b""))
        self.state = "PreparingRebalance"
        timeouts = [m.rebalance_timeout for m in self.members.values()] or [0]
        self.rebalance_deadline = now + max(timeouts)

    def _maybe_complete_join(self, now: int) -> None:
        if self.state != "PreparingRebalance":
            return
        if set(self.members) - set(self.pending_joins) and now < self.rebalance_deadline:
            return
        for member_id in set(self.members) - set(self.pending_joins):
            del self.members[member_id]  # did not rejoin within the rebalance timeout
        if not self.members:
            self.state = "Empty"
            self.generation += 1
            return
        self.generation += 1
        self.rebalances += 1
        self.protocol = self._vote()
        if self.leader not in self.members:
            self.leader = next(iter(self.pending_joins))
        joins, self.pending_joins = self.pending_joins, {}
        self.state = "CompletingRebalance"
        self.assignments = {}
        for member_id, respond in joins.items():
            self.members[member_id].last_seen = now
            members = ()
            if member_id == self.leader:
                cls = wire.response_class(JOIN, VERSIONS[JOIN])
                member_cls = sys.modules[cls.__module__].JoinGroupResponseMember
                members = tuple(
                    member_cls(
                        member_id=mid, group_instance_id=None, metadata=dict(m.protocols)[self.protocol]
                    )
                    for mid, m in self.members.items()
                )
            respond(
                _join_resp(
                    generation_id=self.generation,
                    protocol_name=self.protocol,
                    leader=self.leader,
                    member_id=member_id,
                    members=members,
                )
            )

    def _vote(self) -> str:
        common = set.intersection(*(set(n for n, _ in m.protocols) for m in self.members.values()))
        assert common, "members have no protocol in common"
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(n for n, _ in m.protocols if n in common)
            votes[choice] = votes.get(choice, 0) + 1
        return max(sorted(votes), key=lambda n: votes[n])

    # --- SyncGroup -----------------------------------------------------------------------------------

    def _sync(self, e: Any, respond: Respond, now: int) -> None:
        if e.member_id not in self.members:
            respond(_resp(SYNC, error_code=E.unknown_member_id, assignment=b""))
            return
        if e.generation_id != self.generation:
            respond(_resp(SYNC, error_code=E.illegal_generation, assignment=b""))
            return
        self.members[e.member_id].last_seen = now
        if self.state == "PreparingRebalance":
            respond(_resp(SYNC, error_code=E.rebalance_in_progress, assignment=b""))
        elif self.state == "CompletingRebalance":
            self.pending_syncs[e.member_id] = respond
            if e.member_id == self.leader:
                self.assignments = {a.member_id: bytes(a.assignment) for a in e.assignments}
                self.state = "Stable"
                syncs, self.pending_syncs = self.pending_syncs, {}
                for member_id, r in syncs.items():
                    r(self._sync_ok(member_id))
        else:
            respond(self._sync_ok(e.member_id))

    def _sync_ok(self, member_id: str) -> Any:
        return _resp(
            SYNC,
            error_code=E.none,
            protocol_type="consumer",
            protocol_name=self.protocol,
            assignment=self.assignments.get(member_id, b""),
        )

    # --- Heartbeat / LeaveGroup -------------------------------------------------------------------------

    def _heartbeat(self, e: Any, respond: Respond, now: int) -> None:
        if e.member_id not in self.members:
            respond(_resp(HEARTBEAT, error_code=E.unknown_member_id))
            return
        self.members[e.member_id].last_seen = now
        if e.generation_id != self.generation:
            respond(_resp(HEARTBEAT, error_code=E.illegal_generation))
        elif self.state == "PreparingRebalance":
            respond(_resp(HEARTBEAT, error_code=E.rebalance_in_progress))
        else:
            respond(_resp(HEARTBEAT, error_code=E.none))

    def _leave(self, e: Any, respond: Respond, now: int) -> None:
        for identity in e.members:
            self._remove(identity.member_id, now)
        respond(_resp(LEAVE, error_code=E.none, members=()))

    def _remove(self, member_id: str, now: int) -> None:
        if self.members.pop(member_id, None) is None:
            return
        self.pending_joins.pop(member_id, None)
        self.pending_syncs.pop(member_id, None)
        if self.state in ("Stable", "CompletingRebalance"):
            self._prepare_rebalance(now)
        self._maybe_complete_join(now)

    def tick(self, now: int) -> None:
        for member_id, m in list(self.members.items()):
            if member_id not in self.pending_joins and now > m.last_seen + m.session_timeout:
                self._remove(member_id, now)
        self._maybe_complete_join(now)


# ----------------------------------------------------------------------------------------------------------
# the application side


@dataclass
class App:
    """One consumer: its membership and an application thread that completes callbacks after delays."""

    name: str
    membership: ClassicMembership
    revoke_delay_ms: int = 0
    queued: list[tuple[int, CallbackNeeded]] = field(default_factory=list)
    callbacks: list[CallbackNeeded] = field(default_factory=list)
    errors: list[MembershipError] = field(default_factory=list)
    polling: bool = True


class Sim:
    def __init__(self, topics: dict[str, int], seed: int = 0) -> None:
        self.clock = FakeClock()
        self.coordinator = FakeCoordinator()
        self.metadata = ClusterMetadata(
            partitions={t: tuple(PartitionInfo(t, p, leader=1) for p in range(n)) for t, n in topics.items()}
        )
        self.all_partitions = frozenset(TopicPartition(t, p) for t, n in topics.items() for p in range(n))
        self.apps: list[App] = []
        self.rng = random.Random(seed)
        self.max_owners_seen = 0

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def add(self, name: str, assignors: Sequence[PartitionAssignor], revoke_delay_ms: int = 0) -> App:
        m = ClassicMembership(
            "group",
            assignors,
            session_timeout_ms=SESSION,
            rebalance_timeout_ms=REBALANCE,
            heartbeat_interval_ms=HB,
            retry_backoff_ms=50,
            retry_backoff_max_ms=400,
        )
        m.subscribe(Subscription(topics=frozenset(self.metadata.partitions)), self.now)
        app = App(name, m, revoke_delay_ms)
        self.apps.append(app)
        return app

    def close(self, app: App) -> None:
        app.membership.leave(self.now)

    def step(self) -> None:
        self.clock.advance(STEP)
        now = self.now
        for app in self.apps:
            m = app.membership
            if m.left:
                continue
            if app.polling:
                m.on_app_poll(now)
            for event in m.drain_events():
                if isinstance(event, CoordinatorNeeded):
                    m.on_coordinator(1, now)
                elif isinstance(event, MetadataNeeded):
                    m.on_metadata(self.metadata, now)
                elif isinstance(event, CallbackNeeded):
                    app.callbacks.append(event)
                    delay = app.revoke_delay_ms if event.kind is CallbackKind.REVOKE else 0
                    app.queued.append((now + delay, event))
                elif isinstance(event, MembershipError):
                    app.errors.append(event)
            if app.polling:
                due = [(t, e) for t, e in app.queued if t <= now]
                app.queued = [(t, e) for t, e in app.queued if t > now]
                for _, event in due:
                    m.on_callback_completed(event.seq, None, now)
            for req in m.poll(now).unsent:
                self.coordinator.receive(req, now)
        self.coordinator.tick(now)
        self.check_exclusive()

    def check_exclusive(self) -> None:
        owners: dict[TopicPartition, list[str]] = {}
        for app in self.apps:
            if app.membership.left:
                continue
            for tp in app.membership.owned:
                owners.setdefault(tp, []).append(app.name)
        doubled = {tp: names for tp, names in owners.items() if len(names) > 1}
        assert not doubled, f"t={self.now}: partitions owned by several members: {doubled}"

    def run(self, ms: int) -> None:
        for _ in range(ms // STEP):
            self.step()

    def settled(self) -> bool:
        live = [a for a in self.apps if not a.membership.left]
        if not live:
            return True
        ms = [a.membership for a in live]
        if any(m.state is not MemberState.STABLE or m.rejoin_needed or m.waiting_for_callbacks for m in ms):
            return False
        owned = [m.owned for m in ms]
        union = frozenset().union(*owned)
        return union == self.all_partitions and sum(len(o) for o in owned) == len(self.all_partitions)

    def run_until_settled(self, limit_ms: int = 60_000) -> None:
        for _ in range(limit_ms // STEP):
            self.step()
            if self.settled():
                # let a couple of heartbeats pass to be sure nothing else is pending
                for _ in range(2 * HB // STEP):
                    self.step()
                if self.settled():
                    return
        states = {a.name: (a.membership.state_name, sorted(a.membership.owned)) for a in self.apps}
        raise AssertionError(f"group did not settle within {limit_ms} ms: {states}")


def _counts(sim: Sim) -> list[int]:
    return sorted(len(a.membership.owned) for a in sim.apps if not a.membership.left)


# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_assignors",
    [
        lambda: [CooperativeStickyAssignor()],
        lambda: [RangeAssignor()],
        lambda: [RoundRobinAssignor()],
        lambda: [StickyAssignor()],
        lambda: [RangeAssignor(), CooperativeStickyAssignor()],
    ],
    ids=["cooperative-sticky", "range", "roundrobin", "sticky", "range+cooperative-sticky"],
)
def test_members_join_and_leave_one_at_a_time_without_double_ownership(
    make_assignors: Callable[[], list[PartitionAssignor]],
) -> None:
    sim = Sim({"a": 6, "b": 6})
    first = sim.add("c1", make_assignors())
    sim.run_until_settled()
    assert _counts(sim) == [12]
    second = sim.add("c2", make_assignors())
    sim.run_until_settled()
    assert _counts(sim) == [6, 6]
    sim.add("c3", make_assignors())
    sim.run_until_settled()
    assert _counts(sim) == [4, 4, 4]
    sim.close(second)
    sim.run_until_settled()
    assert _counts(sim) == [6, 6]
    sim.close(first)
    sim.run_until_settled()
    assert _counts(sim) == [12]
    assert all(not a.errors for a in sim.apps)


def test_cooperative_members_keep_their_partitions_through_a_rebalance() -> None:
    sim = Sim({"a": 8})
    c1 = sim.add("c1", [CooperativeStickyAssignor()])
    sim.run_until_settled()
    sim.add("c2", [CooperativeStickyAssignor()])
    kept_throughout: set[TopicPartition] = set(c1.membership.owned)
    for _ in range(20_000 // STEP):
        sim.step()
        kept_throughout &= c1.membership.owned
        if sim.settled():
            break
    sim.run_until_settled()
    # c1 never gave up the partitions it keeps: no stop-the-world revocation
    assert kept_throughout == c1.membership.owned
    assert len(kept_throughout) == 4
    revokes = [c for c in c1.callbacks if c.kind is CallbackKind.REVOKE]
    assert len(revokes) == 1 and len(revokes[0].partitions) == 4


def test_eager_members_revoke_everything_on_each_rebalance() -> None:
    sim = Sim({"a": 8})
    c1 = sim.add("c1", [RangeAssignor()])
    sim.run_until_settled()
    sim.add("c2", [RangeAssignor()])
    sim.run_until_settled()
    revokes = [c for c in c1.callbacks if c.kind is CallbackKind.REVOKE]
    assert [len(r.partitions) for r in revokes] == [8]


@pytest.mark.parametrize("delay", [1_000, 8_000])
def test_delayed_revocations_never_produce_double_ownership(delay: int) -> None:
    sim = Sim({"a": 6, "b": 3})
    sim.add("c1", [CooperativeStickyAssignor()], revoke_delay_ms=delay)
    sim.run_until_settled()
    sim.add("c2", [CooperativeStickyAssignor()], revoke_delay_ms=delay)
    sim.add("c3", [CooperativeStickyAssignor()], revoke_delay_ms=delay)
    sim.run_until_settled(120_000)
    assert _counts(sim) == [3, 3, 3]


def test_revocation_delayed_past_the_rebalance_timeout_is_lost_not_double_owned() -> None:
    sim = Sim({"a": 4})
    c1 = sim.add("c1", [CooperativeStickyAssignor()])
    sim.run_until_settled()
    c1.revoke_delay_ms = 10 * REBALANCE  # the application sits on the revocation
    sim.add("c2", [CooperativeStickyAssignor()])
    sim.run(2_000)  # c2 joined; c1 got its REVOKE and delays it
    assert any(c.kind is CallbackKind.REVOKE for c in c1.callbacks)
    sim.add("c3", [CooperativeStickyAssignor()])  # a foreign rebalance while c1's revoke is pending
    sim.run_until_settled(120_000)
    lost = [c for c in c1.callbacks if c.kind is CallbackKind.LOST]
    assert lost, "the pending revocation must be declared lost at the deadline"
    assert c1.membership.state is MemberState.STABLE  # c1 rejoined in time and is still a member
    assert _counts(sim) == [1, 1, 2]


@pytest.mark.parametrize("seed", range(4))
def test_random_churn_never_produces_double_ownership(seed: int) -> None:
    rng = random.Random(seed)
    sim = Sim({"a": 5, "b": 4, "c": 3}, seed=seed)
    names = iter(f"c{i}" for i in range(100))
    for _ in range(3):
        sim.add(next(names), [CooperativeStickyAssignor()], revoke_delay_ms=rng.choice([0, 300, 2_000]))
    for _ in range(8):
        live = [a for a in sim.apps if not a.membership.left]
        if len(live) > 1 and rng.random() < 0.4:
            sim.close(rng.choice(live))
        else:
            sim.add(next(names), [CooperativeStickyAssignor()], revoke_delay_ms=rng.choice([0, 300, 2_000]))
        sim.run(rng.choice([200, 1_000, 3_000]))
    sim.run_until_settled(180_000)
    counts = _counts(sim)
    assert max(counts) - min(counts) <= 1


def test_member_that_stops_polling_is_lost_and_rejoins_when_it_polls_again() -> None:
    sim = Sim({"a": 4})
    c1 = sim.add("c1", [CooperativeStickyAssignor()])
    c2 = sim.add("c2", [CooperativeStickyAssignor()])
    sim.run_until_settled()
    c2_owned = c2.membership.owned
    assert len(c2_owned) == 2
    c2.polling = False
    sim.run(REBALANCE + 2_000)  # poll timeout: c2 leaves, c1 takes everything
    assert [(c.kind, c.partitions) for c in c2.callbacks[-1:]] == [(CallbackKind.LOST, c2_owned)]
    assert c2.membership.owned == frozenset()
    assert c1.membership.owned == sim.all_partitions
    c2.polling = True
    sim.run_until_settled()
    assert _counts(sim) == [2, 2]
