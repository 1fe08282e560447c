"""The simulated broker: metadata, a log per partition, offsets, and a group coordinator implementing the
broker's side of the classic protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, eager and cooperative alike:
the broker does not know which) and of KIP-848 (ConsumerGroupHeartbeat: a server-side sticky assignor's
target assignment, revocation before assignment, rebalance-timeout fencing, session expiry).

It follows Kafka 4.x's group coordinator (``ClassicGroup``, ``ConsumerGroup``/``CurrentAssignmentBuilder``)
in what a member can observe; see docs/reliability.md ("The simulator") for what it leaves out.  Requests
arrive as the plain values the client's managers build; answers are plain values too (the fake network
builds the kio response entity of the negotiated version from them).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka_handoff.protocol.records import encode_batch
from kafka_handoff.types import TopicPartition

Respond = Callable[[dict[str, Any] | None], None]

NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
UNKNOWN_TOPIC_ID = 100
FENCED_MEMBER_EPOCH = 110
STALE_MEMBER_EPOCH = 113

GROUP_ERRORS = {NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE}

BROKERS = (0, 1, 2)
RECORDS_PER_FETCH = 50


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: int


@dataclass
class GroupEvent:
    """What the coordinator did to a member (the checks read these)."""

    at: int
    member: str
    kind: str  # "fenced-rebalance-timeout" | "expired-session" | "removed-join-timeout" | "left" | ...
    partitions: frozenset[TopicPartition] = frozenset()


@dataclass
class ClassicMember:
    member_id: str
    owner: str
    instance_id: str | None
    protocols: list[tuple[str, bytes]]
    session_timeout: int
    rebalance_timeout: int
    last_heartbeat: int
    join: Respond | None = None
    sync: Respond | None = None
    assignment: bytes = b""


@dataclass
class ConsumerMember:
    member_id: str
    owner: str
    epoch: int = 0
    prev_epoch: int = -1
    state: str = "STABLE"  # STABLE | UNREVOKED | UNRELEASED
    assigned: set[TopicPartition] = field(default_factory=set)
    revoking: set[TopicPartition] = field(default_factory=set)
    topics: list[str] = field(default_factory=list)
    regex: str | None = None
    rebalance_timeout: int = 300_000
    last_heartbeat: int = 0
    revoke_deadline: int | None = None
    last_sent: frozenset[TopicPartition] | None = None


class Broker:
    def __init__(
        self, topics: dict[str, int], *, session_timeout_848: int = 45_000, hb_interval_848: int = 5_000
    ) -> None:
        self.topics: dict[str, Topic] = {}
        self.group_epoch = 0
        for name, n in sorted(topics.items()):
            self.add_topic(name, n)
        self.log_end: dict[TopicPartition, int] = {}
        self.committed: dict[TopicPartition, int] = {}
        self.commit_log: list[tuple[int, str, TopicPartition, int]] = []  # (at, member, tp, offset)
        self.coordinator = 1
        self.loading_until = 0
        self.group_id = "sim-group"
        self.events: list[GroupEvent] = []
        self.errors: dict[int, list[int]] = {}  # api key -> queued error codes to inject
        self.commit_fail_p = 0.0
        self.rng: Any = None  # the world's RNG (set by the runner)
        self.later: Callable[[int, Callable[[], None]], None] | None = None
        # classic
        self.state = "EMPTY"
        self.generation = 0
        self.protocol: str | None = None
        self.leader: str | None = None
        self.members: dict[str, ClassicMember] = {}
        self.pending_ids: set[str] = set()
        self.rebalance_deadline: int | None = None
        # KIP-848
        self.cmembers: dict[str, ConsumerMember] = {}
        self.target_epoch = 0
        self.target: dict[str, set[TopicPartition]] = {}
        self.session_timeout_848 = session_timeout_848
        self.hb_interval_848 = hb_interval_848
        self._ids = 0
        self.exchanges: int = 0

    # ------------------------------------------------------------------ topology and logs
    def add_topic(self, name: str, partitions: int) -> None:
        self.topics[name] = Topic(name, uuid.UUID(int=len(self.topics) + 1), partitions)
        self.group_epoch += 1

    def grow(self, name: str, partitions: int) -> None:
        if partitions > self.topics[name].partitions:
            self.topics[name].partitions = partitions
            self.group_epoch += 1

    def partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t.name, p) for t in self.topics.values() for p in range(t.partitions)]

    def produce(self, tp: TopicPartition, n: int) -> None:
        self.log_end[tp] = self.log_end.get(tp, 0) + n

    def _by_id(self, topic_id: Any) -> Topic | None:
        for t in self.topics.values():
            if t.topic_id == topic_id:
                return t
        return None

    def _next_id(self, owner: str) -> str:
        self._ids += 1
        return f"{owner}-m{self._ids}"

    # ------------------------------------------------------------------ dispatch
    def handle(
        self,
        owner: str,
        api_key: int,
        version: int,
        node: int,
        body: dict[str, Any],
        now: int,
        respond: Respond,
    ) -> None:
        self.exchanges += 1
        self.tick(now)
        if api_key == 3:
            respond(self._metadata(body))
        elif api_key == 10:
            respond(self._find_coordinator(body, now))
        elif api_key == 1:
            values = self._fetch(body)
            empty = all(p["records"] is None for t in values["responses"] for p in t["partitions"])
            if empty and self.later is not None and body.get("max_wait", 0) > 0:
                self.later(int(body["max_wait"]), lambda: respond(values))  # long poll: nothing new yet
            else:
                respond(values)
        elif api_key == 2:
            respond(self._list_offsets(body))
        elif api_key in (8, 9, 11, 12, 13, 14, 68):
            code = self._coordinator_error(node, now, api_key)
            if code is not None:
                respond(self._group_error(api_key, version, body, code))
                return
            if api_key == 11:
                self._join(owner, body, now, respond)
            elif api_key == 14:
                self._sync(body, now, respond)
            elif api_key == 12:
                respond(self._heartbeat(body, now))
            elif api_key == 13:
                respond(self._leave(body, now))
            elif api_key == 68:
                respond(self._cg_heartbeat(owner, body, now))
            elif api_key == 8:
                respond(self._offset_commit(owner, body, now))
            elif api_key == 9:
                respond(self._offset_fetch(body))
        else:
            raise AssertionError(f"the simulated broker does not speak api {api_key}")

    def _coordinator_error(self, node: int, now: int, api_key: int) -> int | None:
        if node != self.coordinator:
            return NOT_COORDINATOR
        if now < self.loading_until:
            return COORDINATOR_LOAD_IN_PROGRESS
        queued = self.errors.get(api_key)
        if queued:
            return queued.pop(0)
        return None

    def _group_error(self, api_key: int, version: int, body: dict[str, Any], code: int) -> dict[str, Any]:
        if api_key == 8:
            return {"throttle_time": 0, "topics": _commit_codes(body, lambda tp: code)}
        if api_key == 9:
            return {
                "throttle_time": 0,
                "groups": [{"group_id": self.group_id, "topics": [], "error_code": code}],
            }
        if api_key == 13:
            return {"throttle_time": 0, "error_code": code, "members": []}
        if api_key == 68:
            return {
                "throttle_time": 0,
                "error_code": code,
                "member_id": None,
                "member_epoch": -1,
                "heartbeat_interval": 0,
            }
        if api_key == 11:
            return _join_resp(code)
        if api_key == 14:
            return {"throttle_time": 0, "error_code": code, "assignment": b""}
        return {"throttle_time": 0, "error_code": code}

    def move_coordinator(self, now: int, load_ms: int) -> None:
        """The group moves to another broker (KRaft: a partition leader change of __consumer_offsets).  The
        group's state survives (it is in the log); pending join/sync answers are lost with the old broker."""
        self.coordinator = (self.coordinator + 1) % len(BROKERS)
        self.loading_until = now + load_ms
        for m in self.members.values():
            m.join = None
            m.sync = None
            m.last_heartbeat = now + load_ms

    # ------------------------------------------------------------------ timers
    def tick(self, now: int) -> None:
        """Expire sessions, complete a join phase whose rebalance timeout passed, fence KIP-848 members
        that did not revoke within their rebalance timeout."""
        if now < self.loading_until:
            return
        for m in list(self.members.values()):
            waiting_join = self.state == "PREPARING" and m.join is not None
            if not waiting_join and now > m.last_heartbeat + m.session_timeout:
                self.events.append(GroupEvent(now, m.owner, "expired-session"))
                self._remove_classic(m.member_id, now)
        if (
            self.state == "PREPARING"
            and self.rebalance_deadline is not None
            and now >= self.rebalance_deadline
        ):
            for m in list(self.members.values()):
                if m.join is None:
                    self.events.append(GroupEvent(now, m.owner, "removed-join-timeout"))
                    del self.members[m.member_id]
            self._complete_join(now)
        for cm in list(self.cmembers.values()):
            if now > cm.last_heartbeat + self.session_timeout_848:
                self.events.append(
                    GroupEvent(now, cm.owner, "expired-session", frozenset(cm.assigned | cm.revoking))
                )
                self._remove_consumer(cm.member_id)
            elif cm.state == "UNREVOKED" and cm.revoke_deadline is not None and now > cm.revoke_deadline:
                self.events.append(
                    GroupEvent(
                        now, cm.owner, "fenced-rebalance-timeout", frozenset(cm.assigned | cm.revoking)
                    )
                )
                self._remove_consumer(cm.member_id)

    # ------------------------------------------------------------------ metadata, fetch, offsets
    def _metadata(self, body: dict[str, Any]) -> dict[str, Any]:
        wanted = body.get("topics")
        names: list[str]
        if wanted is None:
            names = list(self.topics)
        else:
            names = [t.get("name") for t in wanted if t.get("name") is not None]
        topics = []
        for name in names:
            t = self.topics.get(name)
            if t is None:
                topics.append(
                    {
                        "error_code": UNKNOWN_TOPIC_OR_PARTITION,
                        "name": name,
                        "topic_id": uuid.UUID(int=0),
                        "is_internal": False,
                        "partitions": [],
                        "topic_authorized_operations": -2147483648,
                    }
                )
                continue
            topics.append(
                {
                    "error_code": 0,
                    "name": name,
                    "topic_id": t.topic_id,
                    "is_internal": False,
                    "partitions": [
                        {
                            "error_code": 0,
                            "partition_index": p,
                            "leader_id": p % len(BROKERS),
                            "leader_epoch": 0,
                            "replica_nodes": [p % len(BROKERS)],
                            "isr_nodes": [p % len(BROKERS)],
                            "offline_replicas": [],
                        }
                        for p in range(t.partitions)
                    ],
                    "topic_authorized_operations": -2147483648,
                }
            )
        return {
            "throttle_time": 0,
            "brokers": [{"node_id": b, "host": f"b{b}", "port": 9092, "rack": None} for b in BROKERS],
            "cluster_id": "sim",
            "controller_id": 0,
            "topics": topics,
        }

    def _find_coordinator(self, body: dict[str, Any], now: int) -> dict[str, Any]:
        keys = body.get("coordinator_keys") or [body.get("key")]
        b = self.coordinator
        code = (
            COORDINATOR_NOT_AVAILABLE
            if now < self.loading_until and self.rng is not None and self.rng.random() < 0.3
            else 0
        )
        return {
            "throttle_time": 0,
            "coordinators": [
                {
                    "key": k,
                    "node_id": b,
                    "host": f"b{b}",
                    "port": 9092,
                    "error_code": code,
                    "error_message": None,
                }
                for k in keys
            ],
        }

    def _fetch(self, body: dict[str, Any]) -> dict[str, Any]:
        responses = []
        for t in body.get("topics", []):
            topic = (
                self._by_id(t.get("topic_id"))
                if t.get("topic_id") is not None
                else self.topics.get(t.get("topic", ""))
            )
            parts = []
            for p in t.get("partitions", []):
                idx = p["partition"]
                if topic is None or idx >= topic.partitions:
                    parts.append(
                        _fetch_part(idx, UNKNOWN_TOPIC_ID if topic is None else UNKNOWN_TOPIC_OR_PARTITION, 0)
                    )
                    continue
                tp = TopicPartition(topic.name, idx)
                end = self.log_end.get(tp, 0)
                off = p["fetch_offset"]
                if off > end or off < 0:
                    parts.append(_fetch_part(idx, OFFSET_OUT_OF_RANGE, end))
                    continue
                n = min(RECORDS_PER_FETCH, end - off)
                records = _batch(off, n) if n > 0 else None
                parts.append(_fetch_part(idx, 0, end, records))
            responses.append(
                {"topic_id": t.get("topic_id"), "topic": t.get("topic", ""), "partitions": parts}
            )
        return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": responses}

    def _list_offsets(self, body: dict[str, Any]) -> dict[str, Any]:
        topics = []
        for t in body.get("topics", []):
            parts = []
            for p in t.get("partitions", []):
                tp = TopicPartition(t["name"], p["partition_index"])
                ts = p.get("timestamp", -1)
                off = 0 if ts == -2 else self.log_end.get(tp, 0)
                parts.append(
                    {
                        "partition_index": tp.partition,
                        "error_code": 0,
                        "timestamp": -1,
                        "offset": off,
                        "leader_epoch": 0,
                    }
                )
            topics.append({"name": t["name"], "partitions": parts})
        return {"throttle_time": 0, "topics": topics}

    def _offset_commit(self, owner: str, body: dict[str, Any], now: int) -> dict[str, Any]:
        member = body.get("member_id", "") or ""
        gen = body.get("generation_id_or_member_epoch", body.get("generation_id", -1))
        code = NONE
        if self.cmembers or (member in self.cmembers):
            cm = self.cmembers.get(member)
            if member == "" and gen < 0:
                code = NONE
            elif cm is None:
                code = UNKNOWN_MEMBER_ID
            elif gen > cm.epoch:
                code = FENCED_MEMBER_EPOCH
            elif gen < cm.epoch:
                code = STALE_MEMBER_EPOCH
        elif member == "" and gen < 0:
            code = NONE if not self.members else UNKNOWN_MEMBER_ID
        elif member not in self.members:
            code = UNKNOWN_MEMBER_ID
        elif gen != self.generation:
            code = ILLEGAL_GENERATION
        elif self.state == "COMPLETING":
            code = REBALANCE_IN_PROGRESS
        if (
            code == NONE
            and self.commit_fail_p
            and self.rng is not None
            and self.rng.random() < self.commit_fail_p
        ):
            code = (
                REBALANCE_IN_PROGRESS
                if not self.cmembers and self.rng.random() < 0.5
                else COORDINATOR_LOAD_IN_PROGRESS
            )
        if code == NONE:
            for t in body.get("topics", []):
                for p in t.get("partitions", []):
                    tp = TopicPartition(t["name"], p["partition_index"])
                    self.committed[tp] = p["committed_offset"]
                    self.commit_log.append((now, owner, tp, p["committed_offset"]))
        return {"throttle_time": 0, "topics": _commit_codes(body, lambda tp: code)}

    def _offset_fetch(self, body: dict[str, Any]) -> dict[str, Any]:
        groups = body.get("groups")
        if groups is None:
            groups = [{"group_id": body.get("group_id"), "topics": body.get("topics")}]
        out = []
        for g in groups:
            member = g.get("member_id")
            epoch = g.get("member_epoch", -1)
            code = NONE
            if member and epoch is not None and epoch >= 0:
                if self.cmembers:
                    cm = self.cmembers.get(member)
                    if cm is None:
                        code = UNKNOWN_MEMBER_ID
                    elif epoch != cm.epoch:
                        code = STALE_MEMBER_EPOCH
                elif member not in self.members:
                    code = UNKNOWN_MEMBER_ID
                elif epoch != self.generation:
                    code = ILLEGAL_GENERATION
            topics = []
            for t in g.get("topics") or []:
                parts = []
                for p in t.get("partition_indexes", []):
                    tp = TopicPartition(t["name"], p)
                    parts.append(
                        {
                            "partition_index": p,
                            "committed_offset": self.committed.get(tp, -1),
                            "committed_leader_epoch": -1,
                            "metadata": "",
                            "error_code": 0,
                        }
                    )
                topics.append({"name": t["name"], "partitions": parts})
            out.append(
                {"group_id": g.get("group_id"), "topics": topics if code == NONE else [], "error_code": code}
            )
        return {"throttle_time": 0, "groups": out}

    # ------------------------------------------------------------------ classic group
    def _prepare(self, now: int) -> None:
        if self.state == "COMPLETING":
            for m in self.members.values():
                if m.sync is not None:
                    m.sync({"throttle_time": 0, "error_code": REBALANCE_IN_PROGRESS, "assignment": b""})
                    m.sync = None
        if self.state != "PREPARING":
            self.state = "PREPARING"
            self.rebalance_deadline = now + max(
                (m.rebalance_timeout for m in self.members.values()), default=0
            )

    def _maybe_complete_join(self, now: int) -> None:
        if (
            self.state == "PREPARING"
            and all(m.join is not None for m in self.members.values())
            and not self.pending_ids
        ):
            self._complete_join(now)

    def _complete_join(self, now: int) -> None:
        self.rebalance_deadline = None
        self.generation += 1
        if not self.members:
            self.state = "EMPTY"
            self.leader = None
            self.protocol = None
            return
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        leader = self.members[self.leader]
        common = [
            n for n, _ in leader.protocols if all(n in dict(m.protocols) for m in self.members.values())
        ]
        self.protocol = common[0] if common else leader.protocols[0][0]
        self.state = "COMPLETING"
        for m in self.members.values():
            resp = {
                "throttle_time": 0,
                "error_code": 0,
                "generation_id": self.generation,
                "protocol_type": "consumer",
                "protocol_name": self.protocol,
                "leader": self.leader,
                "skip_assignment": False,
                "member_id": m.member_id,
                "members": [
                    {
                        "member_id": o.member_id,
                        "group_instance_id": o.instance_id,
                        "metadata": dict(o.protocols).get(self.protocol, b""),
                    }
                    for o in self.members.values()
                ]
                if m.member_id == self.leader
                else [],
            }
            m.last_heartbeat = now
            respond, m.join = m.join, None
            if respond is not None:
                respond(resp)

    def _remove_classic(self, member_id: str, now: int) -> None:
        m = self.members.pop(member_id, None)
        if m is None:
            return
        for r in (m.join, m.sync):
            if r is not None:
                r(
                    _join_resp(UNKNOWN_MEMBER_ID)
                    if r is m.join
                    else {"throttle_time": 0, "error_code": UNKNOWN_MEMBER_ID, "assignment": b""}
                )
        if self.state in ("STABLE", "COMPLETING"):
            self._prepare(now)
        if self.state == "PREPARING":
            self._maybe_complete_join(now)
        if not self.members and self.state == "PREPARING":
            self._complete_join(now)

    def _join(self, owner: str, body: dict[str, Any], now: int, respond: Respond) -> None:
        if self.cmembers:
            respond(_join_resp(INCONSISTENT_GROUP_PROTOCOL))
            return
        member_id = body.get("member_id", "")
        protocols = [(p["name"], bytes(p["metadata"])) for p in body.get("protocols", [])]
        if member_id == "":
            new_id = self._next_id(owner)
            self.pending_ids.add(new_id)
            resp = _join_resp(MEMBER_ID_REQUIRED)
            resp["member_id"] = new_id
            respond(resp)
            return
        m = self.members.get(member_id)
        if m is None and member_id in self.pending_ids:
            self.pending_ids.discard(member_id)
            m = ClassicMember(
                member_id,
                owner,
                body.get("group_instance_id"),
                protocols,
                body.get("session_timeout", 45_000),
                body.get("rebalance_timeout", 300_000),
                now,
            )
            self.members[member_id] = m
            m.join = respond
            self._prepare(now)
            self._maybe_complete_join(now)
            return
        if m is None:
            respond(_join_resp(UNKNOWN_MEMBER_ID))
            return
        changed = m.protocols != protocols
        m.protocols = protocols
        m.last_heartbeat = now
        if m.join is not None:
            m.join(_join_resp(UNKNOWN_MEMBER_ID))  # Java: a second join replaces the first's callback
        m.join = respond
        if self.state == "PREPARING":
            self._maybe_complete_join(now)
        elif (self.state == "COMPLETING" and not changed and member_id != self.leader) or (
            self.state == "STABLE" and not changed and member_id != self.leader
        ):
            m.join = None
            respond(
                {
                    **_join_resp(0),
                    "generation_id": self.generation,
                    "protocol_name": self.protocol,
                    "leader": self.leader,
                    "member_id": member_id,
                }
            )
        else:
            self._prepare(now)
            self._maybe_complete_join(now)

    def _sync(self, body: dict[str, Any], now: int, respond: Respond) -> None:
        member_id = body.get("member_id", "")
        m = self.members.get(member_id)
        if m is None:
            respond({"throttle_time": 0, "error_code": UNKNOWN_MEMBER_ID, "assignment": b""})
            return
        if body.get("generation_id") != self.generation:
            respond({"throttle_time": 0, "error_code": ILLEGAL_GENERATION, "assignment": b""})
            return
        if self.state == "PREPARING":
            respond({"throttle_time": 0, "error_code": REBALANCE_IN_PROGRESS, "assignment": b""})
            return
        m.last_heartbeat = now
        ok = {
            "throttle_time": 0,
            "error_code": 0,
            "protocol_type": "consumer",
            "protocol_name": self.protocol,
        }
        if self.state == "STABLE":
            respond({**ok, "assignment": m.assignment})
            return
        m.sync = respond
        if member_id == self.leader:
            given = {a["member_id"]: bytes(a["assignment"]) for a in body.get("assignments", [])}
            for o in self.members.values():
                o.assignment = given.get(o.member_id, b"")
            self.state = "STABLE"
            for o in self.members.values():
                r, o.sync = o.sync, None
                if r is not None:
                    r({**ok, "assignment": o.assignment})

    def _heartbeat(self, body: dict[str, Any], now: int) -> dict[str, Any]:
        m = self.members.get(body.get("member_id", ""))
        if m is None or self.state == "EMPTY":
            return {"throttle_time": 0, "error_code": UNKNOWN_MEMBER_ID}
        if body.get("generation_id") != self.generation:
            return {"throttle_time": 0, "error_code": ILLEGAL_GENERATION}
        m.last_heartbeat = now
        if self.state == "PREPARING":
            return {"throttle_time": 0, "error_code": REBALANCE_IN_PROGRESS}
        return {"throttle_time": 0, "error_code": 0}

    def _leave(self, body: dict[str, Any], now: int) -> dict[str, Any]:
        out = []
        ids = [x.get("member_id", "") for x in body.get("members", [])] or [body.get("member_id", "")]
        for mid in ids:
            if mid in self.members:
                self.events.append(GroupEvent(now, self.members[mid].owner, "left"))
                self._remove_classic(mid, now)
                out.append({"member_id": mid, "group_instance_id": None, "error_code": 0})
            else:
                out.append({"member_id": mid, "group_instance_id": None, "error_code": UNKNOWN_MEMBER_ID})
        return {"throttle_time": 0, "error_code": 0, "members": out}

    # ------------------------------------------------------------------ KIP-848 group
    def _subscribed(self, cm: ConsumerMember) -> set[str]:
        import re

        names = set(cm.topics)
        if cm.regex:
            pat = re.compile(cm.regex)
            names |= {n for n in self.topics if pat.fullmatch(n)}
        return {n for n in names if n in self.topics}

    def _compute_target(self) -> None:
        """A sticky uniform assignment (as the broker's ``uniform`` assignor in effect): members keep what
        their target had, up to their fair share; the rest goes to the least loaded subscribed member."""
        ids = sorted(self.cmembers)
        subs = {i: self._subscribed(self.cmembers[i]) for i in ids}
        target: dict[str, set[TopicPartition]] = {i: set() for i in ids}
        parts = [tp for tp in self.partitions() if any(tp.topic in subs[i] for i in ids)]
        quota = -(-len(parts) // max(1, len(ids)))
        taken: set[TopicPartition] = set()
        for i in ids:
            for tp in sorted(self.target.get(i, set()), key=lambda x: (x.topic, x.partition)):
                if tp.topic in subs[i] and tp in parts and tp not in taken and len(target[i]) < quota:
                    target[i].add(tp)
                    taken.add(tp)
        for tp in parts:
            if tp in taken:
                continue
            cands = [i for i in ids if tp.topic in subs[i]]
            best = min(cands, key=lambda i: (len(target[i]), i))
            target[best].add(tp)
        self.target = target
        self.target_epoch = self.group_epoch

    def _remove_consumer(self, member_id: str) -> None:
        if self.cmembers.pop(member_id, None) is not None:
            self.target.pop(member_id, None)
            self.group_epoch += 1

    def _owned_by_others(self, member_id: str) -> set[TopicPartition]:
        out: set[TopicPartition] = set()
        for o in self.cmembers.values():
            if o.member_id != member_id:
                out |= o.assigned | o.revoking
        return out

    def _reconcile(self, cm: ConsumerMember, owned: set[TopicPartition] | None, now: int) -> None:
        if cm.state == "UNREVOKED":
            if owned is None or owned & cm.revoking:
                return
            cm.revoking = set()
            cm.revoke_deadline = None
            cm.state = "STABLE"
        if cm.epoch == self.target_epoch and cm.state == "STABLE":
            return
        want = self.target.get(cm.member_id, set())
        keep = cm.assigned & want
        revoke = cm.assigned - want
        if revoke:
            cm.assigned = keep
            cm.revoking = revoke
            cm.state = "UNREVOKED"
            cm.revoke_deadline = now + cm.rebalance_timeout
            return
        others = self._owned_by_others(cm.member_id)
        add = want - cm.assigned
        free = {tp for tp in add if tp not in others}
        cm.assigned |= free
        if cm.epoch != self.target_epoch:
            cm.prev_epoch, cm.epoch = cm.epoch, self.target_epoch
        cm.state = "UNRELEASED" if add - free else "STABLE"

    def _cg_heartbeat(self, owner: str, body: dict[str, Any], now: int) -> dict[str, Any]:
        if self.members:
            return {
                "throttle_time": 0,
                "error_code": INCONSISTENT_GROUP_PROTOCOL,
                "member_id": None,
                "member_epoch": -1,
                "heartbeat_interval": 0,
            }
        member_id = body.get("member_id") or ""
        epoch = body.get("member_epoch", 0)

        def err(code: int) -> dict[str, Any]:
            return {
                "throttle_time": 0,
                "error_code": code,
                "error_message": None,
                "member_id": member_id,
                "member_epoch": -1,
                "heartbeat_interval": 0,
            }

        if epoch in (-1, -2):
            if member_id in self.cmembers:
                self.events.append(GroupEvent(now, owner, "left"))
                self._remove_consumer(member_id)
            return {
                "throttle_time": 0,
                "error_code": 0,
                "member_id": member_id,
                "member_epoch": epoch,
                "heartbeat_interval": 0,
            }
        owned_raw = body.get("topic_partitions")
        owned: set[TopicPartition] | None = None
        if owned_raw is not None:
            owned = set()
            for t in owned_raw:
                topic = self._by_id(t.get("topic_id"))
                if topic is not None:
                    owned |= {TopicPartition(topic.name, p) for p in t.get("partitions", [])}
        cm = self.cmembers.get(member_id)
        if epoch == 0:
            if cm is not None:
                self._remove_consumer(member_id)
            if not member_id:
                member_id = self._next_id(owner)
            cm = ConsumerMember(member_id, owner, rebalance_timeout=body.get("rebalance_timeout", 300_000))
            self.cmembers[member_id] = cm
            self.group_epoch += 1
        elif cm is None:
            return err(UNKNOWN_MEMBER_ID)
        elif epoch != cm.epoch and not (
            epoch == cm.prev_epoch and owned is not None and owned <= cm.assigned
        ):
            return err(FENCED_MEMBER_EPOCH)
        cm.last_heartbeat = now
        topics = body.get("subscribed_topic_names")
        regex = body.get("subscribed_topic_regex")
        if topics is not None and sorted(topics) != sorted(cm.topics):
            cm.topics = list(topics)
            self.group_epoch += 1
        if regex is not None and regex != (cm.regex or ""):
            cm.regex = regex or None
            self.group_epoch += 1
        if (body.get("rebalance_timeout") or -1) > 0:
            cm.rebalance_timeout = body["rebalance_timeout"]
        if self.group_epoch > self.target_epoch:
            self._compute_target()
        self._reconcile(cm, owned, now)
        resp: dict[str, Any] = {
            "throttle_time": 0,
            "error_code": 0,
            "error_message": None,
            "member_id": member_id,
            "member_epoch": cm.epoch,
            "heartbeat_interval": self.hb_interval_848,
            "assignment": None,
        }
        current = frozenset(cm.assigned)
        if current != cm.last_sent or epoch == 0 or owned is not None:
            cm.last_sent = current
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(current, key=lambda x: (x.topic, x.partition)):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            resp["assignment"] = {
                "topic_partitions": [
                    {"topic_id": self.topics[t].topic_id, "partitions": ps} for t, ps in by_topic.items()
                ]
            }
        return resp

    # ------------------------------------------------------------------ ground truth for the checks
    def owner_of(self, tp: TopicPartition) -> str | None:
        for cm in self.cmembers.values():
            if tp in cm.assigned or tp in cm.revoking:
                return cm.owner
        return None


def _join_resp(code: int) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": code,
        "generation_id": -1,
        "protocol_type": "consumer",
        "protocol_name": None,
        "leader": "",
        "skip_assignment": False,
        "member_id": "",
        "members": [],
    }


def _commit_codes(body: dict[str, Any], code: Callable[[TopicPartition], int]) -> list[dict[str, Any]]:
    return [
        {
            "name": t["name"],
            "partitions": [
                {
                    "partition_index": p["partition_index"],
                    "error_code": code(TopicPartition(t["name"], p["partition_index"])),
                }
                for p in t.get("partitions", [])
            ],
        }
        for t in body.get("topics", [])
    ]


def _fetch_part(idx: int, code: int, hw: int, records: bytes | None = None) -> dict[str, Any]:
    return {
        "partition_index": idx,
        "error_code": code,
        "high_watermark": hw,
        "last_stable_offset": hw,
        "log_start_offset": 0,
        "diverging_epoch": {"epoch": -1, "end_offset": -1},
        "current_leader": {"leader_id": -1, "leader_epoch": -1},
        "snapshot_id": {"end_offset": -1, "epoch": -1},
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": records,
    }


_BATCHES: dict[tuple[int, int], bytes] = {}


def _batch(base: int, n: int) -> bytes:
    key = (base, n)
    data = _BATCHES.get(key)
    if data is None:
        data = encode_batch(
            [(b"k%d" % (base + i), b"v%d" % (base + i), 1000 + base + i) for i in range(n)],
            base_offset=base,
            partition_leader_epoch=0,
        )
        if len(_BATCHES) < 50_000:
            _BATCHES[key] = data
    return data
