"""Consumer groups against the real broker, on every protocol (issues 5 and 6, integration acceptance).

Parametrized over ``classic-cooperative`` (classic protocol, cooperative-sticky), ``classic-eager`` (classic,
range) and ``consumer`` (KIP-848) where a scenario applies to all.  Records flow from a background
producer throughout; members log every processed record and every rebalance callback into a shared
:class:`~group_harness.GroupLog` with one monotonic clock, from which ownership intervals are checked.
Run with ``-s`` to see the measured numbers.
"""

from __future__ import annotations

import uuid
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

from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.integration

pytest.importorskip("confluent_kafka")

ALL_PROTOCOLS = ["classic-cooperative", "classic-eager", "consumer"]


def _group(tag: str) -> str:
    return f"g-{tag}-{uuid.uuid4().hex[:8]}"


def _wait_consumed(log: GroupLog, delivered: set[tuple[TopicPartition, int]], timeout: float = 60.0) -> None:
    def missing() -> set[tuple[TopicPartition, int]]:
        return delivered - set(log.consumed())

    wait_for(lambda: not missing(), timeout, lambda: f"{len(missing())} records never consumed")


@pytest.mark.parametrize("protocol", ALL_PROTOCOLS)
def test_scale_one_to_three_to_one(broker: Any, topic_factory: Any, protocol: str) -> None:
    """Members join and leave one at a time (1 -> 2 -> 3 -> 2 -> 1) while records flow: no partition is
    ever owned by two members, no record is processed outside its member's ownership, every record is
    consumed exactly once (commits in the revoke callback), and the last member ends with everything."""
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
            first = log.first(m.member, "first_record")
            wait_for(lambda: log.first(m.member, "first_record") is not None, 30, f"{m.member} gets records")
            first = log.first(m.member, "first_record")
            sub = log.first(m.member, "subscribe")
            assert first is not None and sub is not None
            measures.append(f"{m.member} subscribe -> first record: {first.t - sub.t:.3f} s")
        for m in reversed(members[1:]):
            m.finish()
            names = [x.member for x in members if x.is_alive()]
            wait_settled(log, names, partitions)
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


def _metrics_ok(metrics: dict[str, float], assigned: int) -> list[str]:
    """What is wrong with the rebalance metrics after at least one completed rebalance (empty: fine)."""
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
    ):
        if g + name not in metrics:
            problems.append(f"missing {name}")
    if problems:
        return problems
    if metrics[g + "rebalance-total"] < 1:
        problems.append(f"rebalance-total = {metrics[g + 'rebalance-total']}")
    if not metrics[g + "rebalance-latency-avg"] > 0:
        problems.append(f"rebalance-latency-avg = {metrics[g + 'rebalance-latency-avg']}")
    if metrics[g + "assigned-partitions"] != assigned:
        problems.append(f"assigned-partitions = {metrics[g + 'assigned-partitions']}, expected {assigned}")
    if not metrics[g + "last-rebalance-seconds-ago"] >= 0:
        problems.append(f"last-rebalance-seconds-ago = {metrics[g + 'last-rebalance-seconds-ago']}")
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
    m1 = Member("m1", log, conf, [topic])
    m2 = Member("m2", log, conf, [topic])
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
        metrics = {m.member: m.call(lambda m: m.consumer.metrics()) for m in (m1, m2)}
        m1.finish()
        m2.finish()
        producer.finish()
    finally:
        for m in (m1, m2):
            m.stop()
        producer.stop()
    log.check_no_overlap()
    log.check_records_within_ownership()

    after = log.owners()
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
    del after
    if protocol == "classic-eager":
        assert revokes[0].partitions == frozenset(partitions), "eager: the first revoke takes everything"
        # Eager: m1 owned nothing between that revoke and its next assignment.
        reassigned = [e for e in m1_calls if e.kind == "assigned" and e.t > revokes[0].t]
        assert reassigned, "eager: m1 was assigned again after the revoke"
        assert not log_owned_at(log, "m1", (revokes[0].t + reassigned[0].t) / 2)
    else:
        moved = frozenset(partitions) - kept
        assert kept and moved
        revoked = frozenset().union(*(e.partitions for e in revokes))
        assert revoked == moved, f"only the moving partitions are revoked: revoked {revoked}, moved {moved}"
        assert not [e for e in m1_calls if e.kind == "assigned" and e.partitions], "nothing new for m1"
        # The staying partitions received records between m1's revoke and the end of the rebalance.
        window = (revokes[0].t, t_moved)
        starved = [tp for tp in kept if _count(log, "m1", [tp], *window) == 0]
        assert not starved, f"{starved} received nothing during the rebalance {window}:\n{log.describe()}"
    for name, values in metrics.items():
        problems = _metrics_ok(values, len(log_owned_at(log, name, t_end)))
        assert not problems, f"{name}: {problems}"


def log_owned_at(log: GroupLog, member: str, t: float) -> frozenset[TopicPartition]:
    return frozenset(
        tp for tp, ivs in log.intervals().items() for iv in ivs if iv.member == member and iv.start <= t < iv.end
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
