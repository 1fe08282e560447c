"""The invariants, checked as the simulation runs (after every scheduler step) and at its end."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka_handoff.types import TopicPartition

if TYPE_CHECKING:
    from sim.member import SimMember


@dataclass(frozen=True)
class Violation:
    kind: str
    at: int
    member: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.kind}] t={self.at}ms {self.member}: {self.detail}"


# The kinds of issue 26 (fixed in branch i26-seeds), by the item they come from.
ISSUE_26_KINDS = {
    "fenced-after-granted-delay": 1,
    "granted-delay-past-deadline": 1,
    "lost-after-granted-delay": 1,
    "error-leaked-into-callback": 2,
    "loss-not-reported": 5,
}


def _tps(parts: Iterable[TopicPartition]) -> str:
    return ",".join(
        f"{tp.topic}-{tp.partition}" for tp in sorted(parts, key=lambda x: (x.topic, x.partition))
    )


class Checks:
    def __init__(self, sim: Any) -> None:
        self.sim = sim
        self.violations: list[Violation] = []
        self.holder: dict[TopicPartition, str] = {}
        self.zombies: set[str] = set()  # members the coordinator removed (their holds are stale)
        self.excuses: dict[TopicPartition, int] = {}
        self.first_done: dict[tuple[TopicPartition, int], tuple[str, int]] = {}
        self.done: dict[TopicPartition, int] = {}
        self._ahead: dict[TopicPartition, set[int]] = {}
        self._commit_idx = 0
        self._event_idx = 0
        self.suspects: dict[tuple[TopicPartition, str], tuple[int, str]] = {}
        self.revoked_suspects: dict[tuple[TopicPartition, str], tuple[int, str]] = {}
        self.processed_count = 0
        self.duplicates = 0

    @property
    def now(self) -> int:
        return int(self.sim.world.clock.t)

    def fail(self, kind: str, member: str, detail: str) -> None:
        if sum(1 for v in self.violations if v.kind == kind) < 3:
            self.violations.append(Violation(kind, self.now, member, detail))

    def excuse(self, tp: TopicPartition, why: str) -> None:
        self.excuses[tp] = self.excuses.get(tp, 0) + 1

    # ------------------------------------------------------------------ application observations
    def on_poll(self, m: SimMember, recs: Any) -> None:
        self._condemn(m.name)
        parts = recs.partitions()
        tbr = recs.to_be_revoked_partitions
        bad = parts & (m.obs.pending_revoke | tbr)
        if bad:
            self.fail("records-from-pending-revocation", m.name, f"poll returned records of {_tps(bad)}")
        for tp in parts:
            h = self.holder.get(tp)
            if h is not None and h != m.name and h not in self.zombies and m.name not in self.zombies:
                # Two members at once -- unless the holder turns out to have lost it (its membership gave
                # the partition up at its deadline: it learns at its next poll, a loss reported once; a
                # delay granted before that is lost-after-granted-delay).  Decided when the holder learns.
                self.suspects.setdefault((tp, h), (self.now, m.name))
            self.holder[tp] = m.name
        m.obs.pending_revoke |= tbr
        reported = recs.lost_partitions
        extra = reported - m.obs.expect_lost
        if extra:
            self.fail(
                "loss-reported-twice", m.name, f"lost_partitions {_tps(extra)} not lost since last reported"
            )
        m.obs.expect_lost -= reported
        if m.obs.expect_lost:
            self.fail(
                "loss-not-reported",
                m.name,
                f"lost {_tps(m.obs.expect_lost)} never reported to the application",
            )
            m.obs.expect_lost.clear()

    def on_raised(self, m: SimMember, exc: BaseException) -> None:
        self._condemn(m.name)
        if any(e is exc for e in m.obs.raised):
            self.fail("error-raised-twice", m.name, repr(exc))
        m.obs.raised.append(exc)
        lost = getattr(exc, "lost_partitions", None)
        if lost:
            m.obs.expect_lost -= set(lost)

    def on_view_error(self, m: SimMember, exc: BaseException) -> None:
        from sim.member import _InjectedError

        if isinstance(exc, _InjectedError):
            self.fail("error-leaked-into-callback", m.name, f"a callback's view call raised {exc}")
            m.obs.raised.append(exc)  # it reached the application (in the wrong place)

    def on_callback(self, m: SimMember, kind: str, parts: frozenset[TopicPartition]) -> None:
        o = m.obs
        o.callbacks.append((self.now, kind, parts))
        if kind == "assigned":
            if self.sim.schedule.protocol == "eager" and o.owned and parts:
                self.fail(
                    "eager-assigned-before-revoke",
                    m.name,
                    f"assigned {_tps(parts)} while owning {_tps(o.owned)}",
                )
            if parts & o.owned:
                self.fail("assigned-already-owned", m.name, f"assigned {_tps(parts & o.owned)} again")
            o.owned |= parts
            o.pending_revoke -= parts
            o.delayed -= parts
        elif kind == "revoked":
            if parts - o.owned:
                self.fail("revoked-not-owned", m.name, f"revoked {_tps(parts - o.owned)} it did not own")
            o.owned -= parts
            o.pending_revoke -= parts
            self._release(m.name, parts)
            self._settle_suspects(m.name, parts, lost=False)
        else:
            delayed = parts & o.delayed
            if delayed and self.sim.clean_for(m) and not m.crashed:
                self.fail(
                    "lost-after-granted-delay",
                    m.name,
                    f"{_tps(delayed)} lost after delay_revoke() was granted",
                )
            o.expect_lost |= parts & o.owned
            o.owned -= parts
            self.zombies.discard(m.name)  # it learnt that it was removed: what it gets next is its own
            o.pending_revoke -= parts
            self._release(m.name, parts)
            self._settle_suspects(m.name, parts, lost=True)
            for tp in parts:
                self.excuse(tp, f"{m.name} lost it")

    def _settle_suspects(self, holder: str, parts: Iterable[TopicPartition], *, lost: bool) -> None:
        """The holder learnt: a loss excuses the overlap; a revoke condemns it -- once the holder's poll
        returns, since a LOST drained in the same poll may follow the revoke of the same partitions."""
        for tp in parts:
            if lost:
                self.suspects.pop((tp, holder), None)
                self.revoked_suspects.pop((tp, holder), None)
            elif (tp, holder) in self.suspects:
                self.revoked_suspects[(tp, holder)] = self.suspects.pop((tp, holder))

    def _condemn(self, holder: str) -> None:
        for key in [k for k in self.revoked_suspects if k[1] == holder]:
            at, member = self.revoked_suspects.pop(key)
            detail = (
                f"got records of {key[0]} while {holder} still held it (revoked, not lost, at {self.now})"
            )
            self.violations.append(Violation("two-members-processing", at, member, detail))

    def finish(self) -> None:
        """End of the run: a second processor whose holder never learnt of a loss is a violation."""
        for (tp, holder), (at, member) in sorted(self.suspects.items(), key=lambda kv: kv[1]):
            if holder not in self.zombies:
                detail = f"got records of {tp} while {holder} held it"
                self.violations.append(Violation("two-members-processing", at, member, detail))
        self.suspects.clear()
        for holder in {k[1] for k in self.revoked_suspects}:
            self._condemn(holder)

    def _release(self, name: str, parts: Iterable[TopicPartition]) -> None:
        for tp in parts:
            if self.holder.get(tp) == name:
                del self.holder[tp]

    def on_delay(self, m: SimMember, tp: TopicPartition, granted: bool) -> None:
        m.obs.grants.append((self.now, tp, granted))
        if not granted:
            return
        m.obs.delayed.add(tp)
        deadline = self.sim.deadline_of(m)
        times = m.obs.poll_times[-8:]
        pace = max((b - a for a, b in itertools.pairwise(times)), default=0)
        # A delay granted now moves the revoke to the poll after the next one: two intervals from now.
        if deadline is not None and self.now + 2 * pace > deadline:
            self.fail(
                "granted-delay-past-deadline",
                m.name,
                f"delay of {tp} granted at {self.now} with observed pace {pace} ms completes at "
                f"{self.now + 2 * pace} at the earliest; the group's deadline is {deadline}",
            )

    def on_processed(self, m: SimMember, tp: TopicPartition, off: int) -> None:
        self.processed_count += 1
        key = (tp, off)
        first = self.first_done.get(key)
        ex = self.excuses.get(tp, 0)
        if first is None:
            self.first_done[key] = (m.name, ex)
            done = self.done.get(tp, 0)
            if off == done:
                done += 1
                ahead = self._ahead.get(tp)
                while ahead and done in ahead:
                    ahead.discard(done)
                    done += 1
                self.done[tp] = done
            elif off > done:
                self._ahead.setdefault(tp, set()).add(off)
            return
        self.duplicates += 1
        if first[1] == ex and m.name not in self.zombies and first[0] not in self.zombies:
            self.fail(
                "duplicate-without-loss",
                m.name,
                f"{tp}@{off} processed again (first by {first[0]}) with no loss since",
            )
        self.first_done[key] = (m.name, ex)

    def on_gone(self, m: SimMember, why: str) -> None:
        for key in [k for k in self.suspects if k[1] == m.name]:
            if why == "crashed":
                del self.suspects[key]
            else:
                self._settle_suspects(m.name, [key[0]], lost=False)
        self._condemn(m.name)
        for tp, h in list(self.holder.items()):
            if h == m.name:
                del self.holder[tp]
                if why == "crashed":
                    self.excuse(tp, f"{m.name} crashed")

    # ------------------------------------------------------------------ the broker's side, after every step
    def after_step(self) -> None:
        broker = self.sim.broker
        log = broker.commit_log
        while self._commit_idx < len(log):
            _at, owner, tp, off = log[self._commit_idx]
            self._commit_idx += 1
            if off > self.done.get(tp, 0):
                self.fail(
                    "commit-ahead-of-processing",
                    owner,
                    f"committed {tp}@{off}, processed only up to {self.done.get(tp, 0)}",
                )
        events = broker.events
        while self._event_idx < len(events):
            ev = events[self._event_idx]
            self._event_idx += 1
            if ev.kind == "left":
                continue
            self.zombies.add(ev.member)
            m = self.sim.members.get(ev.member)
            for tp, h in self.holder.items():
                if h == ev.member:
                    self.excuse(tp, f"{ev.member} {ev.kind}")
            for tp in ev.partitions:
                self.excuse(tp, f"{ev.member} {ev.kind}")
            if m is None or m.crashed or m.closed or not self.sim.clean_for(m):
                continue
            granted = [g for g in m.obs.grants if g[2]]
            if ev.kind in ("fenced-rebalance-timeout", "removed-join-timeout") and granted:
                self.fail(
                    "fenced-after-granted-delay",
                    ev.member,
                    f"{ev.kind} while following KIP-983 (pace {m.spec.pace_ms}"
                    f"±{int(m.spec.jitter * 100)}% ms, "
                    f"timeout {self.sim.schedule.max_poll_ms} ms; last grant at {granted[-1][0]})",
                )
            else:
                self.fail(
                    ev.kind,
                    ev.member,
                    "a member with a clean loop and network was removed by the coordinator",
                )
