"""Schedules (generated from a seed), one simulated run of a schedule, and the shrinker.

A :class:`Schedule` is plain data: the group's settings, the members, and a list of timed fault events.
``run(schedule)`` is a pure function of it (one RNG seeded by ``schedule.seed`` drives every latency, pace and
choice), so a failing schedule replays bit-for-bit; ``shrink`` removes events and members while the same
kind of violation still shows, and ``Schedule.to_json()`` is what the runner prints for replay.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
from dataclasses import dataclass, field
from typing import Any

from kafka_handoff.types import TopicPartition
from sim.broker import BROKERS, Broker
from sim.checks import Checks, Violation
from sim.member import Env, MemberSpec, SimMember
from sim.world import World

PROTOCOLS = ("eager", "cooperative", "consumer")


@dataclass
class Event:
    at: int
    kind: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class Schedule:
    seed: int
    protocol: str
    topics: dict[str, int]
    max_poll_ms: int
    session_ms: int
    members: list[MemberSpec]
    events: list[Event]
    fault_end: int
    settle_ms: int

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Schedule:
        d = json.loads(text)
        d["members"] = [MemberSpec(**m) for m in d["members"]]
        d["events"] = [Event(**e) for e in d["events"]]
        return Schedule(**d)

    def describe(self) -> str:
        lines = [
            f"seed={self.seed} protocol={self.protocol} topics={self.topics} "
            f"max.poll.interval.ms={self.max_poll_ms} session.timeout.ms={self.session_ms} "
            f"faults until {self.fault_end} ms, settle {self.settle_ms} ms"
        ]
        for m in self.members:
            lines.append(
                f"  member {m.name}: joins at {m.join_at} ms, polls every {m.pace_ms} ms "
                f"±{int(m.jitter * 100)}%, processing {m.process_ms} ms/record, delay_revoke policy "
                f"{m.delay_policy}, callbacks raise p={m.raise_p}, listener commits={m.listener_commits}"
                f"{', regex subscription' if m.pattern else ''}"
            )
        for e in self.events:
            lines.append(f"  at {e.at} ms: {e.kind} {e.args}")
        return "\n".join(lines)


def generate(seed: int, *, faults: bool = True) -> Schedule:
    """A random schedule.  The first ~third of seeds run a "clean" group (no network or coordinator faults,
    every loop faster than half the rebalance timeout): there any fencing is a bug of ours."""
    rng = random.Random(seed * 7919 + 1)
    protocol = PROTOCOLS[seed % 3]
    max_poll = rng.choice([6_000, 10_000, 15_000])
    session = rng.choice([10_000, 20_000, 45_000]) if protocol != "consumer" else 45_000
    ntopics = rng.choice([1, 1, 2])
    topics = {f"t{i}": rng.randint(2, 6) for i in range(ntopics)}
    clean = not faults or rng.random() < 0.35
    fault_end = rng.choice([40_000, 60_000, 90_000])
    members: list[MemberSpec] = []
    n = rng.randint(2, 4)
    for i in range(n):
        members.append(
            _member_spec(rng, f"c{i}", max_poll, 0 if i < 2 else rng.randint(0, fault_end // 2), clean)
        )
    events: list[Event] = []
    k = n
    for _ in range(rng.randint(1, 6)):
        at = rng.randint(2_000, fault_end)
        choice = rng.random()
        if choice < 0.30:
            members.append(_member_spec(rng, f"c{k}", max_poll, at, clean))
            k += 1
        elif choice < 0.45:
            events.append(Event(at, "leave", {"member": f"c{rng.randrange(k)}"}))
        elif choice < 0.55 and not clean:
            events.append(Event(at, "crash", {"member": f"c{rng.randrange(k)}"}))
        elif choice < 0.65:
            t = rng.choice(sorted(topics))
            events.append(Event(at, "grow", {"topic": t, "partitions": topics[t] + rng.randint(1, 3)}))
        elif clean:
            continue
        elif choice < 0.72:
            events.append(Event(at, "coordinator-move", {"load_ms": rng.choice([0, 500, 3000])}))
        elif choice < 0.80:
            api = {"eager": [12, 11, 14, 8], "cooperative": [12, 11, 14, 8], "consumer": [68, 8, 9]}[protocol]
            codes = [14, 16, 27, 25] if protocol != "consumer" else [14, 16, 110, 25]
            events.append(Event(at, "coordinator-error", {"api": rng.choice(api), "code": rng.choice(codes)}))
        elif choice < 0.87:
            events.append(
                Event(
                    at,
                    "network",
                    {
                        "drop_p": rng.choice([0.0, 0.05, 0.2]),
                        "delay_max_ms": rng.choice([0, 200, 2000]),
                        "for_ms": rng.randint(1000, 15000),
                    },
                )
            )
        elif choice < 0.93:
            events.append(
                Event(
                    at, "commit-failures", {"p": rng.choice([0.3, 1.0]), "for_ms": rng.randint(1000, 10000)}
                )
            )
        else:
            events.append(
                Event(
                    at,
                    "slow-loop",
                    {
                        "member": f"c{rng.randrange(k)}",
                        "pace_ms": int(max_poll * rng.uniform(0.6, 1.5)),
                        "for_ms": rng.randint(5000, 30000),
                    },
                )
            )
    events.sort(key=lambda e: e.at)
    settle = 2 * session + 3 * max_poll + 30_000
    return Schedule(seed, protocol, topics, max_poll, session, members, events, fault_end, settle)


def _member_spec(rng: random.Random, name: str, max_poll: int, join_at: int, clean: bool) -> MemberSpec:
    frac = rng.uniform(0.02, 0.35)
    return MemberSpec(
        name=name,
        pace_ms=int(max_poll * frac),
        jitter=rng.choice([0.0, 0.1, 0.3]),
        process_ms=int(max_poll * frac * rng.choice([0.2, 1.0, 3.0])),
        delay_policy=rng.choice(["needed", "needed", "eager", "always", "never"]),
        raise_p=0.0 if clean or rng.random() < 0.6 else rng.choice([0.2, 0.5]),
        listener_commits=rng.random() < 0.5,
        join_at=join_at,
        pattern=rng.random() < 0.2,
    )


@dataclass
class Result:
    schedule: Schedule
    violations: list[Violation]
    steps: int
    virtual_ms: int
    processed: int
    duplicates: int
    exchanges: int

    @property
    def kinds(self) -> set[str]:
        return {v.kind for v in self.violations}


class Simulation:
    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.broker = Broker(dict(schedule.topics))
        self.world = World(schedule.seed, self.broker)
        self.broker.rng = self.world.rng
        self.broker.later = lambda d, fn: self.world.sched.after(d, fn, owner="broker", label="broker")
        self.env = Env(self.world)
        self.checks = Checks(self)
        self.members: dict[str, SimMember] = {}
        self.faulty_since: int | None = None
        self.unclean: set[str] = set()
        self.world.sched.after_each.append(lambda label: self.checks.after_step())

    # ground truth the checks ask for --------------------------------------------------------------
    def deadline_of(self, m: SimMember) -> int | None:
        """The time by which the coordinator needs ``m``'s revocation (its rebalance-timeout deadline)."""
        b = self.broker
        for cm in b.cmembers.values():
            if cm.owner == m.name and cm.state == "UNREVOKED":
                return cm.revoke_deadline
        if b.state == "PREPARING":
            for cl in b.members.values():
                if cl.owner == m.name and cl.join is None:
                    return b.rebalance_deadline
        return None

    def clean_for(self, m: SimMember) -> bool:
        """Whether a removal of ``m`` by the coordinator is our fault: no network/coordinator faults so far,
        and ``m``'s loop never slower than half the rebalance timeout."""
        if self.faulty_since is not None or m.name in self.unclean:
            return False
        return m.spec.pace_ms * (1 + m.spec.jitter) < self.schedule.max_poll_ms / 2

    # --------------------------------------------------------------------------------------------
    def config(self, spec: MemberSpec) -> dict[str, Any]:
        s = self.schedule
        cfg: dict[str, Any] = {
            "bootstrap.servers": "b0:9092",
            "group.id": self.broker.group_id,
            "client.id": spec.name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "max.poll.interval.ms": s.max_poll_ms,
            "enable.metrics.push": False,
            "fetch.max.wait.ms": 500,
            "request.timeout.ms": 5_000,
            "default.api.timeout.ms": 10_000,
            "metadata.max.age.ms": 5_000,
        }
        if s.protocol == "consumer":
            cfg["group.protocol"] = "consumer"
        else:
            cfg["group.protocol"] = "classic"
            cfg["session.timeout.ms"] = s.session_ms
            cfg["heartbeat.interval.ms"] = 3_000
            cfg["partition.assignment.strategy"] = "range" if s.protocol == "eager" else "cooperative-sticky"
        return cfg

    def add_member(self, spec: MemberSpec) -> None:
        m = SimMember(self, spec, self.config(spec))
        self.members[spec.name] = m
        m.start()

    def _fault(self) -> None:
        if self.faulty_since is None:
            self.faulty_since = self.world.clock.t

    def apply(self, ev: Event) -> None:
        w = self.world
        a = ev.args
        m = self.members.get(a.get("member", ""))
        if ev.kind == "leave" and m is not None:
            m.close()
        elif ev.kind == "crash" and m is not None and not m.closed:
            m.crash()
        elif ev.kind == "grow":
            self.broker.grow(a["topic"], a["partitions"])
        elif ev.kind == "coordinator-move":
            self._fault()
            self.broker.move_coordinator(w.clock.t, a["load_ms"])
        elif ev.kind == "coordinator-error":
            self._fault()
            self.broker.errors.setdefault(a["api"], []).append(a["code"])
        elif ev.kind == "network":
            self._fault()
            w.faults.drop_p, w.faults.delay_max_ms = a["drop_p"], a["delay_max_ms"]

            def heal() -> None:
                w.faults.drop_p, w.faults.delay_max_ms = 0.0, 0

            w.sched.after(a["for_ms"], heal, owner="world", label="fault")
        elif ev.kind == "commit-failures":
            self._fault()
            self.broker.commit_fail_p = a["p"]

            def heal_commits() -> None:
                self.broker.commit_fail_p = 0.0

            w.sched.after(a["for_ms"], heal_commits, owner="world", label="fault")
        elif ev.kind == "slow-loop" and m is not None:
            self.unclean.add(m.name)
            old = m.spec.pace_ms
            m.spec = dataclasses.replace(m.spec, pace_ms=a["pace_ms"])

            def restore(mm: SimMember = m) -> None:
                mm.spec = dataclasses.replace(mm.spec, pace_ms=old)

            w.sched.after(a["for_ms"], restore, owner="world", label="fault")

    def produce(self) -> None:
        w = self.world
        if w.clock.t >= self.schedule.fault_end:
            return
        parts = self.broker.partitions()
        tp = parts[w.rng.randrange(len(parts))]
        self.broker.produce(tp, w.rng.randint(1, 3))
        w.sched.after(w.rng.randint(100, 500), self.produce, owner="world", label="produce")

    def run(self) -> Result:
        s = self.schedule
        w = self.world
        with self.env.active():
            for spec in s.members:
                w.sched.at(
                    spec.join_at, functools.partial(self.add_member, spec), owner="world", label="join"
                )
            for ev in s.events:
                w.sched.at(ev.at, functools.partial(self.apply, ev), owner="world", label=ev.kind)
            w.sched.at(0, self.produce, owner="world", label="produce")
            end = s.fault_end + s.settle_ms
            try:
                w.sched.run_until(lambda: False, end)
            except Exception as exc:
                import traceback

                self.checks.fail("exception", "-", "".join(traceback.format_exception(exc))[-1500:])
            else:
                self.converged()
            self.checks.finish()
            for m in self.members.values():
                if not m.crashed and not m.closed:
                    thread = m.consumer._thread
                    thread._dead = True  # type: ignore[attr-defined]
        return Result(
            s,
            self.checks.violations,
            w.sched.steps,
            w.clock.t,
            self.checks.processed_count,
            self.checks.duplicates,
            self.broker.exchanges,
        )

    def converged(self) -> None:
        """Once faults stopped: every partition owned by exactly one live member, nothing pending, and
        every record produced was processed."""
        live = [m for m in self.members.values() if not m.crashed and not m.closed]
        if not live:
            return
        want = set(self.broker.partitions())
        owners: dict[TopicPartition, list[str]] = {}
        for m in live:
            for tp in m.obs.owned:
                owners.setdefault(tp, []).append(m.name)
            if m.obs.pending_revoke:
                self.checks.fail(
                    "no-convergence", m.name, f"revocation still pending for {sorted(m.obs.pending_revoke)}"
                )
        missing = want - set(owners)
        doubled = {tp: o for tp, o in owners.items() if len(o) > 1}
        if missing or doubled:
            self.checks.fail("no-convergence", "-", f"unowned {sorted(missing)}; owned twice {doubled}")
            return
        in_flight: dict[TopicPartition, int] = {}  # records fetched, still being processed: not stuck
        for m in live:
            for tp, q in m.inflight.items():
                if q:
                    in_flight[tp] = max(off for off, _ in q) + 1
        behind = {
            tp: (self.checks.done.get(tp, 0), self.broker.log_end.get(tp, 0))
            for tp in want
            if self.checks.done.get(tp, 0) < self.broker.log_end.get(tp, 0)
            and in_flight.get(tp, -1) < self.broker.log_end.get(tp, 0)
        }
        if behind:
            self.checks.fail("no-convergence", "-", f"records never processed (processed, end): {behind}")


def run(schedule: Schedule) -> Result:
    return Simulation(schedule).run()


def shrink(schedule: Schedule, kind: str, *, budget: int = 40) -> Schedule:
    """A smaller schedule that still shows a violation of ``kind``: drop events, then members (greedy, one
    at a time, at most ``budget`` runs)."""
    best = schedule
    runs = 0

    def fails(s: Schedule) -> bool:
        nonlocal runs
        runs += 1
        return kind in run(s).kinds

    changed = True
    while changed and runs < budget:
        changed = False
        for i in range(len(best.events)):
            cand = dataclasses.replace(best, events=best.events[:i] + best.events[i + 1 :])
            if runs < budget and fails(cand):
                best, changed = cand, True
                break
        if changed:
            continue
        for i in range(len(best.members)):
            if len(best.members) <= 1:
                break
            cand = dataclasses.replace(best, members=best.members[:i] + best.members[i + 1 :])
            if runs < budget and fails(cand):
                best, changed = cand, True
                break
        if not changed and best.settle_ms > 20_000:
            cand = dataclasses.replace(best, fault_end=max(5_000, best.fault_end // 2))
            if runs < budget and fails(cand):
                best, changed = cand, True
    return best


__all__ = ["BROKERS", "Event", "Result", "Schedule", "Simulation", "generate", "run", "shrink"]
