"""The seeds' promises under pressure (issue 26), against the real broker.

* A rebalance callback's blocking view calls raise only their own errors (KIP-1306: "other callbacks are
  not affected"): a raising ``on_partitions_revoked`` does not make ``view.committed()`` in the
  ``on_partitions_assigned`` of the same ``poll()`` fail, so its seek to external offsets takes effect.
* Positions are initialised only once ``on_partitions_assigned`` ran for a partition (as Java), and an
  assigned callback is not held behind an unrelated revoke the application keeps delaying (KIP-983's "full
  speed during a rebalance"): with ``auto.offset.reset=none`` and offsets kept outside Kafka, no
  ``NoOffsetForPartitionError`` and the new partitions are fetched while the revoke is still delayed.

The scenario that gives one member a revoke *and* new partitions in the same classic cooperative rebalance:
A and B share topic ``t1`` (one partition each), then A also subscribes to ``t2``: A gets both partitions of
``t2`` and, for balance, gives its ``t1`` partition to B (which is subscribed to ``t1`` only).
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Collection
from typing import Any

import pytest
from group_harness import base_config, pump, wait_for

from kafka_handoff.admin import AdminClient, NewTopic
from kafka_handoff.consumer.consumer import Consumer
from kafka_handoff.consumer.listener import RebalanceConsumer, RebalanceListenerBase
from kafka_handoff.errors import NoOffsetForPartitionError
from kafka_handoff.producer.producer import Producer
from kafka_handoff.types import OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.integration

EXTERNAL_OFFSET = 3  # where the application's own offset store says every new partition starts


class Boom(RuntimeError):
    pass


class ExternalOffsets(RebalanceListenerBase):
    """Seeks newly assigned partitions to offsets kept outside Kafka (the KIP-1306 use case)."""

    def __init__(self, *, raise_on_revoke: bool = False) -> None:
        self.raise_on_revoke = raise_on_revoke
        self.calls: list[tuple[str, frozenset[TopicPartition]]] = []
        self.committed_seen: dict[TopicPartition, OffsetAndMetadata | None] = {}
        self.assign_errors: list[BaseException] = []

    def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        self.calls.append(("revoked", frozenset(partitions)))
        if self.raise_on_revoke:
            self.raise_on_revoke = False
            raise Boom("revoke callback failed")

    def on_partitions_assigned(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        self.calls.append(("assigned", frozenset(partitions)))
        if not partitions:
            return
        try:
            # A blocking call of the view: must not raise another callback's error.
            self.committed_seen.update(consumer.committed(partitions))
        except BaseException as exc:
            self.assign_errors.append(exc)
            raise
        for tp in partitions:
            consumer.seek(tp, EXTERNAL_OFFSET)

    def on_partitions_lost(self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer) -> None:
        self.calls.append(("lost", frozenset(partitions)))


class Loop:
    """A poll loop driven from the test thread; keeps what each poll returned or raised."""

    def __init__(self, consumer: Consumer, *, delay: Callable[[TopicPartition], bool] | None = None) -> None:
        self.consumer = consumer
        self.delay = delay
        self.first_offset: dict[TopicPartition, int] = {}
        self.records: list[tuple[TopicPartition, int]] = []
        self.errors: list[BaseException] = []
        self.to_be_revoked_seen: set[TopicPartition] = set()
        self.fetched_while_delaying: set[TopicPartition] = set()

    def poll(self) -> None:
        try:
            result = self.consumer.poll(0.05)
        except Exception as exc:  # recorded: the test asserts on them
            self.errors.append(exc)
            return
        delaying = set()
        for tp in result.to_be_revoked_partitions:
            self.to_be_revoked_seen.add(tp)
            if self.delay is not None and self.delay(tp) and self.consumer.delay_revoke([tp]):
                delaying.add(tp)
        for tp, recs in result.by_partition().items():
            self.first_offset.setdefault(tp, recs[0].offset)
            self.records.extend((tp, r.offset) for r in recs)
            if delaying or self.consumer._dispatch.revoke.delayed_partitions():
                self.fetched_while_delaying.add(tp)


def _produce(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    try:
        for p in range(partitions):
            for i in range(count):
                producer.send(topic, value=f"{p}-{i}".encode(), partition=p)
        producer.flush(30)
    finally:
        producer.close(10)


def _revoke_and_assign_in_one_rebalance(
    broker: Any,
    topic_factory: Any,
    listener_a: ExternalOffsets,
    *,
    delay_revoke: bool,
    **extra: Any,
) -> tuple[Loop, Loop, str, str]:
    """Sets up A and B on t1, then A subscribes to t1 and t2; returns once A owns t2's partitions."""
    t1 = topic_factory(partitions=2)
    t2 = topic_factory(partitions=2)
    bootstrap = broker.bootstrap_servers
    _produce(bootstrap, t1, 2, 10)
    _produce(bootstrap, t2, 2, 10)
    group = f"seeds-{uuid.uuid4().hex[:8]}"
    config_a = base_config(bootstrap, group, "classic-cooperative", client_id="A", **extra)
    config_b = base_config(bootstrap, group, "classic-cooperative", client_id="B")
    a = Loop(Consumer(config_a))
    b = Loop(Consumer(config_b))
    raise_on_revoke, listener_a.raise_on_revoke = listener_a.raise_on_revoke, False
    a.consumer.set_rebalance_listener(listener_a)  # seeks every partition A gets (auto.offset.reset=none)
    a.consumer.subscribe([t1])
    pump([a], lambda: len(a.consumer.assignment()) == 2, 60, "A to own t1")
    b.consumer.subscribe([t1])
    pump(
        [a, b],
        lambda: len(a.consumer.assignment()) == 1 and len(b.consumer.assignment()) == 1,
        60,
        "A and B to own one t1 partition each",
    )
    assert a.errors == [] and b.errors == []
    listener_a.calls.clear()
    listener_a.committed_seen.clear()
    listener_a.raise_on_revoke = raise_on_revoke
    if delay_revoke:
        # A keeps delaying the revoke of its t1 partition for the whole test (its "processing" never ends).
        a.delay = lambda tp: tp.topic == t1
    a.consumer.subscribe([t1, t2])
    return a, b, t1, t2


def test_a_raising_revoke_callback_does_not_fail_the_assigned_callbacks_view_calls(
    broker: Any, topic_factory: Any
) -> None:
    listener = ExternalOffsets(raise_on_revoke=True)
    a, b, _t1, t2 = _revoke_and_assign_in_one_rebalance(broker, topic_factory, listener, delay_revoke=False)
    try:
        new = {TopicPartition(t2, 0), TopicPartition(t2, 1)}
        pump([a, b], lambda: new <= set(a.first_offset), 90, "A to consume t2's partitions")
        calls = list(listener.calls)
    finally:
        a.consumer.close(10)
        b.consumer.close(10)
    revoked = [i for i, (kind, parts) in enumerate(calls) if kind == "revoked" and parts]
    assigned = [i for i, (kind, parts) in enumerate(calls) if kind == "assigned" and parts & new]
    assert revoked and assigned and revoked[0] < assigned[0], calls
    # The assigned callback's committed() returned (no committed offsets yet), instead of raising the
    # revoke callback's exception ...
    assert listener.assign_errors == []
    assert set(listener.committed_seen) == new and all(v is None for v in listener.committed_seen.values())
    # ... so its seek took effect: t2 is consumed from the external offsets, not from the beginning.
    assert {tp: a.first_offset[tp] for tp in new} == {tp: EXTERNAL_OFFSET for tp in new}
    # poll() raised the revoke callback's error, once.
    assert [str(e) for e in a.errors] == ["revoke callback failed"]


def test_close_commits_through_the_listener_despite_a_pending_error(broker: Any, topic_factory: Any) -> None:
    """close(): the final commit_sync of on_partitions_revoked is not failed by an error still queued for
    the application (here: a commit_async callback's, which close() is the first call to drain)."""
    topic = topic_factory(partitions=2)
    bootstrap = broker.bootstrap_servers
    _produce(bootstrap, topic, 2, 10)
    group = f"seeds-close-{uuid.uuid4().hex[:8]}"

    class Committing(RebalanceListenerBase):
        def __init__(self) -> None:
            self.commit_errors: list[BaseException] = []
            self.revoked: list[frozenset[TopicPartition]] = []

        def on_partitions_revoked(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            self.revoked.append(frozenset(partitions))
            try:
                consumer.commit_sync({tp: OffsetAndMetadata(7) for tp in partitions})
            except BaseException as exc:
                self.commit_errors.append(exc)
                raise

    def failing_commit_callback(offsets: Any, error: BaseException | None) -> None:
        raise Boom("commit callback failed")

    listener = Committing()
    consumer = Consumer(base_config(bootstrap, group, "classic-cooperative"))
    consumer.set_rebalance_listener(listener)
    consumer.subscribe([topic])
    loop = Loop(consumer)
    pump([loop], lambda: len(consumer.assignment()) == 2, 60, "the assignment")
    parts = sorted(consumer.assignment())
    posted = threading.Event()
    offsets = {tp: OffsetAndMetadata(1) for tp in parts}
    future = consumer.commit_async(offsets, callback=failing_commit_callback)
    future.add_done_callback(lambda _: posted.set())  # runs after the consumer posted its callback event
    assert posted.wait(30)
    # The commit callback's error is not the revoke callback's: close() logs it (nobody can receive it any
    # more) and raises nothing.
    consumer.close(10)
    assert listener.revoked == [frozenset(parts)]
    assert listener.commit_errors == []
    check = Consumer(base_config(bootstrap, group, "classic-cooperative"))
    try:
        committed = check.committed(parts, timeout=10)
    finally:
        check.close(10)
    assert {tp: (om.offset if om is not None else None) for tp, om in committed.items()} == {
        tp: 7 for tp in parts
    }


def test_new_partitions_are_fetched_from_the_assigned_callbacks_seek_while_a_revoke_is_delayed(
    broker: Any, topic_factory: Any
) -> None:
    listener = ExternalOffsets()
    a, b, t1, t2 = _revoke_and_assign_in_one_rebalance(
        broker, topic_factory, listener, delay_revoke=True, auto_offset_reset="none"
    )
    try:
        new = {TopicPartition(t2, 0), TopicPartition(t2, 1)}
        pump([a, b], lambda: new <= set(a.first_offset) or bool(a.errors), 90, "A to consume t2")
        still_delayed = set(a.consumer._dispatch.revoke.revoke_requested_partitions())
    finally:
        a.consumer.close(10)
        b.consumer.close(10)
    assert [e for e in a.errors if isinstance(e, NoOffsetForPartitionError)] == []
    assert a.errors == []
    # A saw the revoke request (the KIP-983 loop works) and t2 was fetched while it was still delayed.
    assert any(tp.topic == t1 for tp in a.to_be_revoked_seen)
    assert any(tp.topic == t1 for tp in still_delayed), "the revoke was expected to be still delayed"
    assert new <= a.fetched_while_delaying
    assert {tp: a.first_offset[tp] for tp in new} == {tp: EXTERNAL_OFFSET for tp in new}


@pytest.mark.parametrize("protocol", ["classic-cooperative", "consumer"])
def test_a_loss_is_reported_by_the_next_poll_when_the_poll_it_happened_in_raised(
    broker: Any, topic_factory: Any, protocol: str
) -> None:
    """Issue 26 item 5: the member stops polling past max.poll.interval.ms, so it leaves the group and its
    partitions are lost; its lost callback raises, so the poll that runs it raises -- and the next poll
    still reports the loss in ``lost_partitions`` (once)."""
    topic = topic_factory(partitions=2)
    bootstrap = broker.bootstrap_servers
    group = f"seeds-lost-{uuid.uuid4().hex[:8]}"

    class RaisingLost(RebalanceListenerBase):
        def on_partitions_lost(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            raise Boom("lost callback failed")

    consumer = Consumer(base_config(bootstrap, group, protocol, max_poll_interval_ms=3000))
    consumer.set_rebalance_listener(RaisingLost())
    consumer.subscribe([topic])
    loop = Loop(consumer)
    pump([loop], lambda: len(consumer.assignment()) == 2, 60, "the assignment")
    owned = consumer.assignment()
    # Stop polling until the broker shows the member gone (its poll timer expired and it left).
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        wait_for(lambda: not admin.describe_groups([group])[group].members, 60, "the member to leave")
    reported: list[frozenset[TopicPartition]] = []
    errors: list[BaseException] = []
    try:
        for _ in range(6):
            try:
                reported.append(consumer.poll(0.05).lost_partitions)
            except Boom as exc:
                errors.append(exc)
    finally:
        consumer.close(10)
    assert [str(e) for e in errors] == ["lost callback failed"]
    assert [r for r in reported if r] == [owned], reported


REBALANCE_TIMEOUT_MS = 6_000


class Recorder(RebalanceListenerBase):
    def __init__(self) -> None:
        self.calls: list[tuple[str, frozenset[TopicPartition]]] = []

    def on_partitions_assigned(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        self.calls.append(("assigned", frozenset(partitions)))

    def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        self.calls.append(("revoked", frozenset(partitions)))

    def on_partitions_lost(self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer) -> None:
        self.calls.append(("lost", frozenset(partitions)))


@pytest.mark.parametrize("interval_ms", [700, 1_300])
@pytest.mark.parametrize("protocol", ["classic-cooperative", "consumer"])
def test_a_slow_loop_that_always_delays_is_never_fenced(
    broker: Any, topic_factory: Any, protocol: str, interval_ms: int
) -> None:
    """Issue 26 item 1: A's loop polls every ``interval_ms`` (12 % / 22 % of the rebalance timeout, not a
    divisor of it) and asks to delay every revoke for as long as delay_revoke() grants it.  B joins, and
    while A delays, C joins too (under the classic protocol that rebalance gives A a deadline to rejoin).
    delay_revoke() must stop granting early enough that every revoke completes in time: nobody is fenced and
    no partition is lost."""
    topic = topic_factory(partitions=6)
    bootstrap = broker.bootstrap_servers
    group = f"seeds-slow-{uuid.uuid4().hex[:8]}"

    def member(name: str) -> tuple[Consumer, Recorder]:
        config = base_config(
            bootstrap, group, protocol, client_id=name, max_poll_interval_ms=REBALANCE_TIMEOUT_MS
        )
        consumer = Consumer(config)
        recorder = Recorder()
        consumer.set_rebalance_listener(recorder)
        return consumer, recorder

    a, rec_a = member("A")
    b, rec_b = member("B")
    c, rec_c = member("C")
    granted = refused = 0
    lost_seen: set[TopicPartition] = set()
    try:
        a.subscribe([topic])
        while len(a.assignment()) < 6:
            a.poll(0.05)
        b.subscribe([topic])
        c_joined = False
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline, (rec_a.calls, rec_b.calls, rec_c.calls)
            records = a.poll(0)
            lost_seen |= records.lost_partitions
            for tp in records.to_be_revoked_partitions:  # A's processing of them "never ends"
                if a.delay_revoke([tp]):
                    granted += 1
                else:
                    refused += 1
            if records.to_be_revoked_partitions and not c_joined:
                c.subscribe([topic])
                c_joined = True
            for other in (b, c) if c_joined else (b,):
                lost_seen |= other.poll(0).lost_partitions
            owned = [len(m.assignment()) for m in (a, b, c)]
            if c_joined and owned == [2, 2, 2] and not a._dispatch.revoke.revoke_requested_partitions():
                break
            time.sleep(interval_ms / 1000)  # the slow part of A's loop (its processing), not a wait
        # What the members went through while A's loop ran.  The closes below are not part of it: while A
        # leaves (a classic rebalance), B and C do not poll, and on a loaded machine a close can outlast the
        # rebalance timeout -- B or C is then rightly removed and reports a loss from its own close().
        calls = [list(rec.calls) for rec in (rec_a, rec_b, rec_c)]
    finally:
        for consumer in (a, b, c):
            consumer.close(10)
    assert granted > 0 and refused > 0  # A delayed, and delay_revoke() bounded the delays
    assert lost_seen == set()
    for member_calls in calls:
        assert [k for k, _ in member_calls if k == "lost"] == [], member_calls


def test_a_deleted_topic_of_a_pattern_subscription_is_lost_not_revoked(broker: Any) -> None:
    """Issue 26 gap (classic, as Java): under a pattern subscription, a deleted topic's partitions are
    reported to on_partitions_lost and in lost_partitions -- nobody can commit for them any more -- not
    revoked (the pattern stops matching the topic only because it is gone)."""
    bootstrap = broker.bootstrap_servers
    prefix = f"seeds-pattern-{uuid.uuid4().hex[:8]}"
    kept, deleted = f"{prefix}-kept", f"{prefix}-deleted"
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(kept, 2, 1), NewTopic(deleted, 2, 1)], timeout=60)
    recorder = Recorder()
    config = base_config(
        bootstrap, f"seeds-pattern-{uuid.uuid4().hex[:8]}", "classic-cooperative", metadata_max_age_ms=500
    )
    consumer = Consumer(config)
    consumer.set_rebalance_listener(recorder)
    lost_seen: set[TopicPartition] = set()
    gone = {TopicPartition(deleted, 0), TopicPartition(deleted, 1)}
    try:
        consumer.subscribe(re.compile(re.escape(prefix) + "-.*"))
        loop = Loop(consumer)
        pump([loop], lambda: len(consumer.assignment()) == 4, 60, "all four partitions")
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            admin.delete_topics([deleted], timeout=30)
        deadline = time.monotonic() + 60
        while consumer.assignment() & gone or not lost_seen:
            assert time.monotonic() < deadline, recorder.calls
            lost_seen |= consumer.poll(0.05).lost_partitions
        calls = list(recorder.calls)  # before close(), which may lose the rest if a rebalance is running
    finally:
        consumer.close(10)
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            admin.delete_topics([kept], if_exists=True, wait=False, timeout=15)
    assert lost_seen == gone
    lost_calls = [parts for kind, parts in calls if kind == "lost"]
    revoked = set().union(*[parts for kind, parts in calls if kind == "revoked"])
    assert lost_calls and set().union(*lost_calls) == gone, calls
    assert revoked.isdisjoint(gone), calls
