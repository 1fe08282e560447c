"""Raising rebalance callbacks against the real broker, on both group protocols (issue 14 item 2).

KIP-1306 "Exception Handling" (and our classic path): if a callback raises, the rebalance completes
regardless, the exception propagates from ``poll()`` -- once --, the other callbacks still run, and the
consumer stays usable.  Under KIP-848 a raising ``on_partitions_revoked`` used to skip the assign callback
and be invoked again every couple of polls, and a raising ``on_partitions_assigned`` left the new partitions
unfetched for good.  Member A's revoke callback and member B's first non-empty assign callback raise; the
group must still settle with both members consuming, nobody fenced.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Collection
from typing import Any

import pytest
from group_harness import base_config, pump

from kafka_handoff.consumer.consumer import Consumer
from kafka_handoff.consumer.listener import RebalanceConsumer, RebalanceListenerBase
from kafka_handoff.group.assignors import RangeAssignor
from kafka_handoff.producer.producer import Producer
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.integration

PARTITIONS = 4


class Boom(RuntimeError):
    pass


class Recording(RebalanceListenerBase):
    def __init__(self, name: str, *, raise_on_revoke: bool = False, raise_on_assign: bool = False) -> None:
        self.name = name
        self.calls: list[tuple[str, frozenset[TopicPartition]]] = []
        self.raise_on_revoke = raise_on_revoke
        self.raise_on_assign = raise_on_assign

    def on_partitions_assigned(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        self.calls.append(("assigned", frozenset(partitions)))
        if self.raise_on_assign and partitions:
            self.raise_on_assign = False
            raise Boom(f"{self.name}: assign callback failed")

    def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        self.calls.append(("revoked", frozenset(partitions)))
        if self.raise_on_revoke:
            self.raise_on_revoke = False
            raise Boom(f"{self.name}: revoke callback failed")

    def on_partitions_lost(self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer) -> None:
        self.calls.append(("lost", frozenset(partitions)))

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.calls if k == kind)


class Polled:
    """One consumer polled from the test thread; keeps what it returned and what it raised."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.records: set[tuple[TopicPartition, int]] = set()
        self.errors: list[BaseException] = []

    def poll(self) -> None:
        try:
            for tp, recs in self.consumer.poll(0.05).by_partition().items():
                self.records.update((tp, r.offset) for r in recs)
        except Boom as exc:
            self.errors.append(exc)


@pytest.mark.parametrize("protocol", ["classic-cooperative", "consumer"])
def test_raising_callbacks_do_not_block_the_rebalance(broker: Any, topic_factory: Any, protocol: str) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    bootstrap = broker.bootstrap_servers
    group = f"cb-errors-{uuid.uuid4().hex[:8]}"
    listener_a = Recording("A", raise_on_revoke=True)
    listener_b = Recording("B", raise_on_assign=True)
    a = Polled(Consumer(base_config(bootstrap, group, protocol, client_id="A")))
    b = Polled(Consumer(base_config(bootstrap, group, protocol, client_id="B")))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    try:
        a.consumer.set_rebalance_listener(listener_a)
        a.consumer.subscribe([topic])
        pump([a], lambda: len(a.consumer.assignment()) == PARTITIONS, 60, "A to own every partition")

        b.consumer.set_rebalance_listener(listener_b)
        b.consumer.subscribe([topic])

        def settled() -> bool:
            owned_a, owned_b = a.consumer.assignment(), b.consumer.assignment()
            return (
                len(owned_a) + len(owned_b) == PARTITIONS
                and bool(owned_a)
                and bool(owned_b)
                and not a.consumer.to_be_revoked_partitions()
                and listener_b.count("assigned") >= 1
                and not listener_b.raise_on_assign
            )

        pump([a, b], settled, 90, "the group to settle with both members owning partitions")

        # Both members consume records of their partitions: the consumers stay usable, and the partitions
        # whose assign callback raised are fetched.
        for p in range(PARTITIONS):
            for i in range(5):
                producer.send(topic, value=f"{p}-{i}".encode(), partition=p)
        producer.flush(30)
        owned_a, owned_b = a.consumer.assignment(), b.consumer.assignment()
        pump(
            [a, b],
            lambda: {tp for tp, _ in a.records} >= owned_a and {tp for tp, _ in b.records} >= owned_b,
            60,
            "records from every partition, on the member that owns it",
        )
        for _ in range(10):  # some more polls: nothing re-raised, no callback re-invoked
            a.poll()
            b.poll()
        calls_a = list(listener_a.calls)  # before close() revokes the rest (or loses it mid-rebalance)
        calls_b = list(listener_b.calls)
    finally:
        producer.close(10)
        a.consumer.close(10)
        b.consumer.close(10)

    # Each exception was raised from poll() exactly once.
    assert [str(e) for e in a.errors] == ["A: revoke callback failed"]
    assert [str(e) for e in b.errors] == ["B: assign callback failed"]
    # A's revoke callback ran once (not again every couple of polls) and its assign callback still ran
    # after it (KIP-429 order; under KIP-848 it used to be skipped).
    revokes = [i for i, (kind, parts) in enumerate(calls_a) if kind == "revoked" and parts]
    assert len(revokes) == 1, calls_a
    assert "assigned" in [kind for kind, _ in calls_a[revokes[0] + 1 :]], calls_a
    # Nobody was fenced.
    assert [k for k, _ in calls_a + calls_b if k == "lost"] == [], (calls_a, calls_b)


class ThreadRecordingAssignor(RangeAssignor):
    """A custom assignor (a subclass is user code, unlike the built-in classes themselves)."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[tuple[str, str]] = []

    @property
    def name(self) -> str:
        return "thread-recording"

    def assign(self, partitions_per_topic: Any, subscriptions: Any) -> Any:
        self.threads.append(("assign", threading.current_thread().name))
        return super().assign(partitions_per_topic, subscriptions)

    def on_assignment(self, assignment: Any, generation_id: int) -> None:
        self.threads.append(("on_assignment", threading.current_thread().name))
        super().on_assignment(assignment, generation_id)


def test_custom_classic_assignor_runs_on_the_application_thread(broker: Any, topic_factory: Any) -> None:
    """Issue 14 item 5: a custom assignor's assign() and on_assignment() run on the application thread,
    inside poll(), as Java's classic consumer runs them -- not on the network thread."""
    topic = topic_factory(partitions=2)
    assignor = ThreadRecordingAssignor()
    config = base_config(broker.bootstrap_servers, f"assignor-{uuid.uuid4().hex[:8]}", "classic-eager")
    config["partition.assignment.strategy"] = [assignor]
    consumer = Polled(Consumer(config))
    try:
        consumer.consumer.subscribe([topic])
        pump([consumer], lambda: len(consumer.consumer.assignment()) == 2, 60, "the assignment")
    finally:
        consumer.consumer.close(10)
    app_thread = threading.current_thread().name
    assert ("assign", app_thread) in assignor.threads
    assert ("on_assignment", app_thread) in assignor.threads
    assert all(thread == app_thread for _, thread in assignor.threads), assignor.threads
