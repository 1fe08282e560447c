"""Consumer groups against the real broker, on every protocol (issues 5 and 6, integration acceptance).

Parametrized over ``classic-cooperative`` (classic protocol, cooperative-sticky), ``classic-eager`` (classic,
range) and ``consumer`` (KIP-848) where a scenario applies to all.  Records flow from a background
producer throughout; members log every processed record and every rebalance callback into a shared
:class:`~group_harness.GroupLog` with one monotonic clock, from which ownership intervals are checked.
Run with ``-s`` to see the measured numbers.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from group_harness import (
    BackgroundProducer,
    GroupLog,
    Member,
    base_config,
    now,
    steady_gap,
    wait_for,
    wait_settled,
)

from kafka_handoff.consumer import Consumer
from kafka_handoff.errors import CommitFailedError, ConfigError
from kafka_handoff.types import OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.integration

ALL_PROTOCOLS = ["classic-cooperative", "classic-eager", "consumer"]


def _group(tag: str) -> str:
    return f"g-{tag}-{uuid.uuid4().hex[:8]}"


def _stable_pause(log: GroupLog, members: list[str], start: float, end: float) -> str:
    """The longest gap between records, within [start, end], on partitions that one of ``members`` owned
    throughout (they did not move), as text."""
    gaps = []
    for tp, intervals in log.intervals().items():
        for iv in intervals:
            if iv.member in members and iv.start <= start and iv.end >= end:
                gaps.append(max(log.gaps(iv.member, tp, start, end)))
    if not gaps:
        return "no partition stayed owned" + (" (eager: all revoked)" if members else "")
    return f"staying partitions' longest gap {max(gaps) * 1000:.0f} ms"


def _has_event(log: GroupLog, member: str, kind: str) -> Callable[[], bool]:
    return lambda: log.first(member, kind) is not None


def _wait_consumed(log: GroupLog, delivered: set[tuple[TopicPartition, int]], timeout: float = 60.0) -> None:
    def missing() -> set[tuple[TopicPartition, int]]:
        return delivered - set(log.consumed())

    wait_for(lambda: not missing(), timeout, lambda: f"{len(missing())} records never consumed")


@pytest.mark.parametrize("protocol", ALL_PROTOCOLS)
def test_scale_one_to_three_to_one(broker: Any, topic_factory: Any, protocol: str) -> None:
    """Members join and leave one at a time (1 -> 2 -> 3 -> 2 -> 1) while records flow: no partition is
    ever owned by two members, no record is processed outside its member's ownership, every record is
    consumed exactly once (commits in the revoke callback), and the last member ends with everything.
    Measures (``-s``) the time to a new member's first record and the pause of partitions that did not move
    (members also commit_sync every 0.5 s, which under the classic protocol waits for a rebalance to end)."""
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(partitions=6)
    partitions = [TopicPartition(topic, p) for p in range(6)]
    group = _group("scale")
    log = GroupLog()
    producer = BackgroundProducer(bootstrap, {topic: 6}, rate=300)
    producer.start()
    members: list[Member] = []
    measures: list[str] = []
    try:
        for i in range(3):
            m = Member(f"m{i + 1}", log, base_config(bootstrap, group, protocol), [topic])
            members.append(m)
            m.start()
            names = [x.member for x in members]
            wait_settled(log, names, partitions)
            wait_for(_has_event(log, m.member, "first_record"), 30, f"{m.member} gets records")
            first = log.first(m.member, "first_record")
            sub = log.first(m.member, "subscribe")
            assert first is not None and sub is not None
            pause = _stable_pause(log, names[:-1], sub.t, now())
            measures.append(f"{m.member} joins: subscribe -> first record {first.t - sub.t:.3f} s; {pause}")
        for m in reversed(members[1:]):
            t_leave = now()
            m.finish()
            names = [x.member for x in members if x.is_alive()]
            wait_settled(log, names, partitions)
            pause = _stable_pause(log, names, t_leave, now())
            measures.append(f"{m.member} leaves: {pause}")
        delivered = producer.finish()
        _wait_consumed(log, delivered)
        last = members[0]
        assert last.owned == set(partitions)
        last.finish()
    finally:
        for m in members:
            m.stop()
        producer.stop()
    log.check_no_overlap()
    log.check_records_within_ownership()
    consumed = log.consumed()
    assert delivered <= set(consumed)
    duplicates = {k: n for k, n in consumed.items() if n > 1}
    lost = [e for e in log.callbacks(kinds=("lost",))]
    assert not lost, f"unexpected lost partitions: {lost}"
    commit_errors = [(m.member, e) for m in members for e in m.commit_errors]
    print(
        f"\n[{protocol}] scale 1->3->1: {len(delivered)} records, {len(duplicates)} duplicates, "
        f"{len(commit_errors)} commit errors"
    )
    for line in measures:
        print(f"[{protocol}]   {line}")
    assert not commit_errors, commit_errors
    assert not duplicates, f"{len(duplicates)} records consumed more than once:\n" + log.explain(
        {tp for tp, _ in duplicates}
    )


def _metrics_ok(metrics: dict[str, float], assigned: int, *, revoked: bool) -> list[str]:
    """What is wrong with the rebalance metrics after at least one completed rebalance (empty: fine).
    ``revoked``: the member went through a revoke (it committed in the callback; its rebalance took time)."""
    g = "consumer-coordinator-metrics:"
    problems = []
    for name in (
        "rebalance-total",
        "rebalance-latency-avg",
        "rebalance-latency-max",
        "rebalance-latency-total",
        "rebalance-rate-per-hour",
        "failed-rebalance-total",
        "last-rebalance-seconds-ago",
        "assigned-partitions",
        "partition-assigned-latency-avg",
        "partition-assigned-latency-max",
        "partitions-assigned-latency-avg",  # the KIP-429 alias
        "partition-revoked-latency-avg",
        "partitions-revoked-latency-avg",
        "partition-lost-latency-avg",
        "partitions-lost-latency-avg",
        "commit-latency-avg",
        "commit-total",
    ):
        if g + name not in metrics:
            problems.append(f"missing {name}")
    if problems:
        return problems
    if metrics[g + "rebalance-total"] < 1:
        problems.append(f"rebalance-total = {metrics[g + 'rebalance-total']}")
    # A KIP-848 reconciliation without a revoke can complete within the clock's millisecond: >= 0 then.
    if not metrics[g + "rebalance-latency-avg"] >= (1 if revoked else 0):
        problems.append(f"rebalance-latency-avg = {metrics[g + 'rebalance-latency-avg']}")
    if metrics[g + "assigned-partitions"] != assigned:
        problems.append(f"assigned-partitions = {metrics[g + 'assigned-partitions']}, expected {assigned}")
    if not metrics[g + "last-rebalance-seconds-ago"] >= 0:
        problems.append(f"last-rebalance-seconds-ago = {metrics[g + 'last-rebalance-seconds-ago']}")
    if revoked and not metrics[g + "commit-total"] >= 1:
        problems.append(f"commit-total = {metrics[g + 'commit-total']}")
    if not metrics[g + "partition-assigned-latency-avg"] >= 0:
        problems.append(f"partition-assigned-latency-avg = {metrics[g + 'partition-assigned-latency-avg']}")
    if metrics[g + "partition-assigned-latency-avg"] != metrics[g + "partitions-assigned-latency-avg"]:
        problems.append("the KIP-429 alias partitions-assigned-latency-avg differs from the code name")
    return problems


@pytest.mark.parametrize("protocol", ALL_PROTOCOLS)
def test_partitions_that_stay_keep_flowing_during_a_rebalance(
    broker: Any, topic_factory: Any, protocol: str
) -> None:
    """A second member joins a one-member group while records flow.  Eager: the first member's revoke
    callback gets everything it owned and it owns nothing until the rebalance completes.  Cooperative and
    KIP-848: only the partitions that move are revoked, and the partitions that stay go on receiving
    records throughout the rebalance.  Also measures the pause and checks the rebalance metrics."""
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(partitions=6)
    partitions = [TopicPartition(topic, p) for p in range(6)]
    group = _group("flow")
    log = GroupLog()
    producer = BackgroundProducer(bootstrap, {topic: 6}, rate=600)
    producer.start()
    conf = base_config(bootstrap, group, protocol)
    # Commits only in the revoke callback: a commit_sync mid-rebalance waits for the rebalance to complete
    # (test_commits_during_a_rebalance), which would pause this member's processing, not its fetching.
    m1 = Member("m1", log, conf, [topic], commit_interval_s=None)
    m2 = Member("m2", log, conf, [topic], commit_interval_s=None)
    try:
        m1.start()
        wait_settled(log, ["m1"], partitions)
        # Caught up with the backlog first, then a steady-state window of at least 50 records per partition.
        wait_for(lambda: len(log.consumed()) >= producer.sent - 60, 30, "m1 catches up")
        t_steady = now()
        wait_for(lambda: _min_count(log, "m1", partitions, t_steady) >= 50, 30, "steady flow to m1")
        t_join = now()
        m2.start()
        wait_settled(log, ["m1", "m2"], partitions)
        t_end = max(e.t for e in log.callbacks())
        wait_for(lambda: _min_count(log, "m1", log.owners()["m1"], t_end) >= 20, 30, "flow after")
        metrics = {m.member: m.call(lambda m: m.client.metrics()) for m in (m1, m2)}
        m1.finish()
        m2.finish()
        producer.finish()
    finally:
        for m in (m1, m2):
            m.stop()
        producer.stop()
    log.check_no_overlap()
    log.check_records_within_ownership()

    kept = frozenset(log_owned_at(log, "m1", t_end))
    m1_calls = [e for e in log.callbacks("m1") if t_join <= e.t <= t_end]
    revokes = [e for e in m1_calls if e.kind == "revoked"]
    m2_assigned = [e for e in log.callbacks("m2") if e.kind == "assigned" and e.partitions]
    assert revokes, f"m1 saw no revoke:\n{log.describe()}"
    assert m2_assigned
    t_moved = m2_assigned[0].t  # the rebalance is over for the moving partitions
    steady_med, steady_max = steady_gap(log, "m1", partitions, t_steady, t_join)
    rb_gaps = {tp: max(log.gaps("m1", tp, t_join, t_moved)) for tp in kept}
    sub, first = log.first("m2", "subscribe"), log.first("m2", "first_record")
    assert sub is not None and first is not None
    print(
        f"\n[{protocol}] new member subscribe -> first record {first.t - sub.t:.3f} s; rebalance window "
        f"(m2 subscribe -> m2 assigned) {t_moved - t_join:.3f} s; steady gap median {steady_med * 1000:.0f} "
        f"ms max {steady_max * 1000:.0f} ms; max gap on m1's staying partitions during the rebalance "
        f"{max(rb_gaps.values()) * 1000:.0f} ms"
    )
    if protocol == "classic-eager":
        assert revokes[0].partitions == frozenset(partitions), "eager: the first revoke takes everything"
        # Eager: m1 owned nothing between that revoke and its next assignment.
        reassigned = [e for e in m1_calls if e.kind == "assigned" and e.t > revokes[0].t]
        assert reassigned, "eager: m1 was assigned again after the revoke"
        assert not log_owned_at(log, "m1", (revokes[0].t + reassigned[0].t) / 2)
        requested = log.first("m1", "revoke_requested")
        assert requested is not None and requested.partitions == frozenset(partitions)
        # Eager members stop: no record at all from the revoke request until the new assignment.
        assert _count(log, "m1", partitions, requested.t, reassigned[0].t) == 0
        print(
            f"[{protocol}] m1 got no records from the revoke request to its new assignment: "
            f"{(reassigned[0].t - requested.t) * 1000:.0f} ms (owned nothing for "
            f"{(reassigned[0].t - revokes[0].t) * 1000:.0f} ms)"
        )
    else:
        moved = frozenset(partitions) - kept
        assert kept and moved
        revoked = frozenset().union(*(e.partitions for e in revokes))
        assert revoked == moved, f"only the moving partitions are revoked: revoked {revoked}, moved {moved}"
        assert not [e for e in m1_calls if e.kind == "assigned" and e.partitions], "nothing new for m1"
        # KIP-983: no record of a moving partition is returned once its revoke was requested.
        requested = log.first("m1", "revoke_requested")
        assert requested is not None and requested.partitions == moved
        assert _count(log, "m1", moved, requested.t) == 0
        # The staying partitions received records between m1's revoke and the end of the rebalance.
        window = (revokes[0].t, t_moved)
        starved = [tp for tp in kept if _count(log, "m1", [tp], *window) == 0]
        assert not starved, f"{starved} received nothing during the rebalance {window}:\n{log.describe()}"
    for name, values in metrics.items():
        problems = _metrics_ok(values, len(log_owned_at(log, name, t_end)), revoked=name == "m1")
        assert not problems, f"{name}: {problems}"


def log_owned_at(log: GroupLog, member: str, t: float) -> frozenset[TopicPartition]:
    return frozenset(
        tp
        for tp, ivs in log.intervals().items()
        for iv in ivs
        if iv.member == member and iv.start <= t < iv.end
    )


def _count(log: GroupLog, member: str, tps: Any, start: float, end: float = float("inf")) -> int:
    wanted = set(tps)
    _, records = log.snapshot()
    return sum(1 for t, m, tp, _ in records if m == member and tp in wanted and start <= t <= end)


def _min_count(log: GroupLog, member: str, tps: Any, start: float) -> int:
    _, records = log.snapshot()
    counts = dict.fromkeys(tps, 0)
    for t, m, tp, _ in records:
        if m == member and tp in counts and t >= start:
            counts[tp] += 1
    return min(counts.values()) if counts else 0


@pytest.mark.parametrize("protocol", ALL_PROTOCOLS)
def test_max_poll_interval_exceeded_loses_partitions_and_rejoins(
    broker: Any, topic_factory: Any, protocol: str
) -> None:
    """A member that stops polling for longer than max.poll.interval.ms leaves the group (classic: LeaveGroup;
    KIP-848: leave heartbeat, STALE); the other member gets its partitions meanwhile; the stalled member's
    next poll reports them lost (on_partitions_lost and records.lost_partitions), returns none of their
    records, and the member rejoins and gets a share again."""
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(partitions=4)
    partitions = [TopicPartition(topic, p) for p in range(4)]
    group = _group("mpi")
    log = GroupLog()
    producer = BackgroundProducer(bootstrap, {topic: 4}, rate=200)
    producer.start()
    slow = Member("slow", log, base_config(bootstrap, group, protocol, max_poll_interval_ms=3000), [topic])
    other = Member("other", log, base_config(bootstrap, group, protocol), [topic])
    try:
        slow.start()
        other.start()
        wait_settled(log, ["slow", "other"], partitions)
        before = frozenset(slow.owned)
        lost_metric_before = slow.call(lambda m: m.client.metrics())
        slow.stall(5.5)
        wait_for(lambda: log.first("slow", "stall_start") is not None, 10, "the stall to begin")
        # While the slow member is not polling, the other one gets everything.
        wait_for(
            lambda: other.owned == set(partitions),
            30,
            lambda: f"the other member owning everything during the stall\n{log.describe()}",
        )
        t_taken = now()
        stall_end = log.first("slow", "stall_end")
        assert stall_end is None or stall_end.t > t_taken, "the partitions moved only after the stall"
        wait_for(
            lambda: log.first("slow", "lost") is not None,
            30,
            lambda: f"slow's lost callback\n{log.describe()}",
        )
        wait_settled(log, ["slow", "other"], partitions)
        metrics = slow.call(lambda m: m.client.metrics())
        delivered = producer.finish()
        _wait_consumed(log, delivered)
        slow.finish()
        other.finish()
    finally:
        for m in (slow, other):
            m.stop()
        producer.stop()
    lost = log.first("slow", "lost")
    assert lost is not None and lost.partitions == before, f"lost {lost}, owned before the stall {before}"
    stall_end = log.first("slow", "stall_end")
    assert stall_end is not None and lost.t >= stall_end.t, (
        "the lost callback runs in the poll after the stall"
    )
    assert slow.lost_reported[:1] == [before], f"records.lost_partitions: {slow.lost_reported}"
    assert not [
        e for e in log.callbacks("slow", kinds=("revoked",)) if e.t < lost.t and e.partitions & before
    ]
    log.check_no_overlap(allow_lost=True)
    log.check_records_within_ownership()
    assert delivered <= set(log.consumed())
    g = "consumer-coordinator-metrics:"
    assert metrics[g + "partition-lost-latency-avg"] >= 0
    assert lost_metric_before[g + "rebalance-total"] < metrics[g + "rebalance-total"]
    duplicates = sum(1 for n in log.consumed().values() if n > 1)
    print(
        f"\n[{protocol}] max.poll.interval exceeded: lost {len(before)} partitions, {duplicates} duplicates"
    )


@pytest.mark.parametrize("protocol", ALL_PROTOCOLS)
def test_static_member_restart_within_session_timeout_keeps_its_partitions(
    broker: Any, topic_factory: Any, protocol: str
) -> None:
    """A static member (group.instance.id) closed and restarted within the session timeout gets the same
    partitions back, and the other member sees no rebalance at all (no callback)."""
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(partitions=4)
    partitions = [TopicPartition(topic, p) for p in range(4)]
    group = _group("static")
    log = GroupLog()
    producer = BackgroundProducer(bootstrap, {topic: 4}, rate=200)
    producer.start()

    def static(name: str, instance: str) -> Member:
        conf = base_config(bootstrap, group, protocol, group_instance_id=f"{group}-{instance}")
        return Member(name, log, conf, [topic])

    a, b = static("a", "a"), static("b", "b")
    a2: Member | None = None
    try:
        a.start()
        b.start()
        wait_settled(log, ["a", "b"], partitions)
        owned_by_a = frozenset(a.owned)
        b_calls = len(log.callbacks("b"))
        a.finish()  # static: no LeaveGroup / leave with epoch -2
        closed = log.first("a", "closed")
        assert closed is not None
        a2 = static("a2", "a")
        a2.start()
        wait_for(lambda: a2.owned == owned_by_a, 30, lambda: f"a2 owning {owned_by_a}\n{log.describe()}")
        restarted = next(e for e in log.callbacks("a2") if e.kind == "assigned" and e.partitions)
        # a2 processes records of all of them (for a while: more than a heartbeat interval); b never notices.
        wait_for(lambda: _min_count(log, "a2", owned_by_a, restarted.t) >= 20, 30, "records for a2")
        wait_for(lambda: _min_count(log, "b", b.owned, restarted.t) >= 20, 30, "records for b")
        delivered = producer.finish()
        _wait_consumed(log, delivered)
        new_b_calls = log.callbacks("b")[b_calls:]
        assert not new_b_calls, f"b saw a rebalance: {new_b_calls}"
        # (KIP-848: a fresh consumer may first reconcile the part of the assignment its metadata can resolve
        # -- nothing -- and get an empty assigned callback, as the Java client does.)
        a2_calls = [e for e in log.callbacks("a2") if e.partitions or e.kind != "assigned"]
        assert [(e.kind, e.partitions) for e in a2_calls] == [("assigned", owned_by_a)]
        back = restarted.t - closed.t
        print(f"\n[{protocol}] static member back with its partitions {back:.3f} s after close")
        a2.finish()
        b.finish()
    finally:
        for m in (a, b, a2):
            if m is not None:
                m.stop()
        producer.stop()
    log.check_no_overlap()
    log.check_records_within_ownership()
    assert delivered <= set(log.consumed())
    duplicates = [k for k, n in log.consumed().items() if n > 1]
    assert not duplicates, log.explain({tp for tp, _ in duplicates})


@pytest.mark.parametrize("protocol", ["classic-cooperative", "consumer"])
def test_commits_during_a_cooperative_rebalance(broker: Any, topic_factory: Any, protocol: str) -> None:
    """Commits while partitions move (issue 5 part 5, librdkafka #4059; issue 6 part 5): in the revoke
    callback the moving partitions commit; after it, commits of the partitions that stay succeed even though
    the rebalance is still going on (the broker refuses them mid-rebalance: the consumer waits for the
    rejoin, or retries with the new member epoch); a commit of a partition no longer owned fails with a
    CommitFailedError naming it, and nothing is committed for a partition another member owns."""
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(partitions=4)
    partitions = [TopicPartition(topic, p) for p in range(4)]
    group = _group("commits")
    log = GroupLog()
    producer = BackgroundProducer(bootstrap, {topic: 4}, rate=200)
    producer.start()
    state: dict[str, Any] = {"moved": frozenset(), "ok": [], "refused": [], "unexpected": []}

    def on_revoked(member: Member, parts: frozenset[TopicPartition], consumer: Any) -> None:
        state["moved"] = parts
        state["revoked_at"] = now()

    def mid_rebalance() -> bool:
        return bool(state["moved"]) and not [
            e for e in log.callbacks("m2") if e.kind == "assigned" and e.partitions
        ]

    def after_poll(member: Member, records: Any) -> None:
        if not mid_rebalance() or member.consumer is None:
            return
        consumer = member.consumer
        kept = {tp: OffsetAndMetadata(o) for tp, o in member.processed.items() if tp in member.owned}
        started = now()
        try:
            consumer.commit_sync(kept, timeout=20)
            state["ok"].append((started, now() - started, m2_owns_nothing_yet(started)))
        except Exception as exc:  # reported below
            state["unexpected"].append(exc)
        if not state["refused"]:
            moved_tp = min(state["moved"])
            try:
                consumer.commit_sync({moved_tp: OffsetAndMetadata(1)}, timeout=20)
                state["unexpected"].append(
                    AssertionError(f"committing {moved_tp} after its revoke succeeded")
                )
            except CommitFailedError as exc:
                state["refused"].append(exc)

    def m2_owns_nothing_yet(t: float) -> bool:
        return not [e for e in log.callbacks("m2") if e.kind == "assigned" and e.partitions and e.t <= t]

    m1 = Member(
        "m1",
        log,
        base_config(bootstrap, group, protocol),
        [topic],
        commit_interval_s=None,
        on_revoked=on_revoked,
        after_poll=after_poll,
    )
    m2 = Member("m2", log, base_config(bootstrap, group, protocol), [topic], commit_interval_s=0.2)
    try:
        m1.start()
        wait_settled(log, ["m1"], partitions)
        wait_for(lambda: len(m1.processed) == 4, 30, "m1 processes every partition")
        m2.start()
        wait_settled(log, ["m1", "m2"], partitions)
        moved = state["moved"]
        assert moved and moved == frozenset(m2.owned), (moved, m2.owned)
        moved_tp = min(moved)
        wait_for(lambda: moved_tp in m2.committed, 30, f"m2 committing {moved_tp}")
        m2_committed = m2.committed[moved_tp]
        # m1 tries to commit a partition m2 owns: refused before anything is sent.
        with pytest.raises(CommitFailedError, match=str(moved_tp)):
            m1.call(lambda m: m.client.commit_sync({moved_tp: OffsetAndMetadata(0)}, timeout=10))
        committed = m1.call(lambda m: m.client.committed([moved_tp], timeout=10))[moved_tp]
        assert committed is not None and committed.offset >= m2_committed > 0
        m1.finish()
        m2.finish()
        producer.finish()
    finally:
        for m in (m1, m2):
            m.stop()
        producer.stop()
    assert not state["unexpected"], state["unexpected"]
    assert not [e for m in (m1, m2) for e in m.commit_errors], [e for m in (m1, m2) for e in m.commit_errors]
    revoke_commits = [e for e in log.callbacks("m1", kinds=("committed",)) if e.partitions == moved]
    assert revoke_commits, "the moving partitions were committed in the revoke callback"
    assert state["refused"], "m1 tried to commit a moved partition after its revoke"
    assert str(moved_tp) in str(state["refused"][0])
    mid = [(t, d) for t, d, during in state["ok"] if during]
    assert mid, f"no commit of the staying partitions happened during the rebalance: {state['ok']}"
    print(
        f"\n[{protocol}] {len(mid)} commits of staying partitions during the rebalance, all succeeded; "
        f"longest commit_sync {max(d for _, d in mid) * 1000:.0f} ms; refused: {state['refused'][0]}"
    )
    log.check_no_overlap()
    log.check_records_within_ownership()


@pytest.mark.parametrize("protocol", ALL_PROTOCOLS)
def test_member_stuck_in_its_revoke_callback_loses_its_partitions_and_rejoins(
    broker: Any, topic_factory: Any, protocol: str
) -> None:
    """A member blocks in on_partitions_revoked for longer than max.poll.interval.ms (its rebalance timeout):
    the group does not wait for it forever -- while it is stuck, the other member gets the partitions it was
    revoking (classic cooperative: poll timer -> LeaveGroup; classic eager: the rebalance in progress goes on
    without them at the rebalance deadline; KIP-848: leave / broker fence).  When the callback returns, its
    commit of those partitions fails with CommitFailedError (nothing is committed for partitions another
    member owns); every partition it had is reported exactly once, revoked or lost, never a lost callback
    nested inside the revoke callback; then it takes part in the group again."""
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(partitions=4)
    partitions = [TopicPartition(topic, p) for p in range(4)]
    group = _group("stuck")
    log = GroupLog()
    producer = BackgroundProducer(bootstrap, {topic: 4}, rate=200)
    producer.start()
    stuck: list[tuple[float, frozenset[TopicPartition]]] = []

    def on_revoked(member: Member, parts: frozenset[TopicPartition], consumer: Any) -> None:
        if not stuck:
            stuck.append((now(), parts))
            time.sleep(5.0)  # the application is stuck in its callback: the behaviour under test

    slow = Member(
        "slow",
        log,
        base_config(bootstrap, group, protocol, max_poll_interval_ms=3000),
        [topic],
        on_revoked=on_revoked,
        commit_interval_s=None,
    )
    other = Member("other", log, base_config(bootstrap, group, protocol), [topic])
    try:
        slow.start()
        wait_settled(log, ["slow"], partitions)
        wait_for(lambda: len(slow.processed) == 4, 30, "slow processing every partition")
        other.start()
        wait_for(lambda: bool(stuck), 30, "slow's revoke callback")
        t_stuck, revoking = stuck[0]
        wait_for(
            lambda: bool(revoking & other.owned),
            30,
            lambda: f"the other member owning some of {sorted(map(str, revoking))}\n{log.describe()}",
        )
        t_moved = now()
        wait_for(lambda: log.first("slow", "revoked") is not None, 30, "slow's revoke callback returning")
        wait_settled(log, ["slow", "other"], partitions)
        delivered = producer.finish()
        wait_for(lambda: delivered <= set(log.consumed()), 60, "every record consumed")
        slow.finish()
        other.finish()
    finally:
        for m in (slow, other):
            m.stop()
        producer.stop()
    late = log.first("slow", "revoked")
    assert late is not None and late.partitions == revoking
    assert t_moved < late.t, "the other member got the partitions while slow was stuck"
    failed = [(offsets, exc) for kind, offsets, exc in slow.commit_errors if kind == "revoke"]
    assert failed and isinstance(failed[0][1], CommitFailedError), (slow.commit_errors, log.explain(revoking))
    assert not [
        e
        for e in log.callbacks("slow", kinds=("committed",))
        if t_stuck <= e.t <= late.t and e.partitions & revoking
    ]
    # Everything slow had is reported after the stall: revoked (late) and/or lost, each at most once, the lost
    # callback after the revoke returned.  (The lost callback gets every partition the membership still
    # counted as owned, also those whose revoke callback just ran -- KIP-1306, as Java: issue 14 item 6.)
    after = [e for e in log.callbacks("slow", kinds=("revoked", "lost")) if e.t >= t_stuck]
    reported = [(e.kind, tp) for e in after for tp in e.partitions]
    before = log_owned_at(log, "slow", t_stuck)
    assert before == frozenset(partitions)
    again = [e for e in log.callbacks("slow", kinds=("assigned",)) if e.t > late.t and e.partitions]
    gone = [(e.kind, tp) for e in after if not again or e.t < again[0].t for tp in e.partitions]
    assert {tp for _, tp in gone} == before, f"reported {reported}"
    assert len(gone) == len(set(gone)), f"reported {reported}"
    assert after[0] is late, "nothing (no lost) ran before the stuck revoke callback returned"
    # Nothing processed while stuck, nor of a partition after the other member got it.
    stall = [t for t, m, _, _ in log.snapshot()[1] if m == "slow" and t_stuck <= t <= late.t]
    assert not stall
    print(
        f"\n[{protocol}] revoke callback stuck 5 s: the other member had its partitions "
        f"{t_moved - t_stuck:.3f} s into it; then slow saw {[(e.kind, len(e.partitions)) for e in after]}"
    )


def test_protocol_specific_keys_are_refused_by_the_consumer() -> None:
    """Config rules per protocol reach the Consumer constructor (details: tests/unit/test_config.py)."""
    with pytest.raises(ConfigError, match=r"partition\.assignment\.strategy"):
        Consumer(
            {
                "bootstrap.servers": "127.0.0.1:1",
                "group.id": "g",
                "group.protocol": "consumer",
                "partition.assignment.strategy": "range",
            }
        )
    with pytest.raises(ConfigError, match=r"group\.remote\.assignor"):
        Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "group.remote.assignor": "uniform"})
