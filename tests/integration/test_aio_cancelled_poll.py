"""Issue 26 item 4: ``AsyncConsumer`` after a cancelled ``poll()``, against the real broker.

A ``poll()`` cancelled while it decodes keeps the records it already took (their positions moved) for the
next ``poll()``.  That next ``poll()`` must run the same start-of-poll step as every poll: when a revoke was
requested meanwhile, it reports the request, hands out none of the revoked partitions' carried records
(they are given back: the commit before the revoke and the next owner start at the first of them), and the
revoke completes at the start of the poll after it -- not a poll late.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Collection
from typing import Any

import pytest
from group_harness import base_config, wait_for

from kafka_handoff.aio import AsyncConsumer, AsyncRebalanceListenerBase
from kafka_handoff.aio.listener import AsyncRebalanceConsumer
from kafka_handoff.consumer.consumer import Consumer
from kafka_handoff.producer.producer import Producer
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.integration

PARTITIONS = 4
RECORDS = 3_000  # per partition: a poll() decodes in many slices, so it can be cancelled midway


class Committing(AsyncRebalanceListenerBase):
    def __init__(self) -> None:
        self.revoked: list[frozenset[TopicPartition]] = []

    async def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: AsyncRebalanceConsumer
    ) -> None:
        self.revoked.append(frozenset(partitions))
        await consumer.commit_sync()  # the consumed positions: what the application got


@pytest.mark.parametrize("protocol", ["classic-cooperative", "consumer"])
def test_the_poll_after_a_cancelled_one_runs_the_start_of_poll_step(
    broker: Any, topic_factory: Any, protocol: str
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    bootstrap = broker.bootstrap_servers
    group = f"aio-carry-{uuid.uuid4().hex[:8]}"
    asyncio.run(_scenario(bootstrap, topic, group, protocol))


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    try:
        for p in range(PARTITIONS):
            for i in range(RECORDS):
                producer.send(topic, value=b"x" * 20, key=str(i).encode(), partition=p)
        producer.flush(60)
    finally:
        producer.close(10)


async def _scenario(bootstrap: str, topic: str, group: str, protocol: str) -> None:
    config = base_config(bootstrap, group, protocol, client_id="A", max_poll_records=RECORDS * PARTITIONS)
    config["fetch.max.wait.ms"] = 500
    a = AsyncConsumer(config, decode_slice_ms=0.001)  # yields to the loop after every slice
    listener = Committing()
    a.set_rebalance_listener(listener)
    b: Consumer | None = None
    stop_b = threading.Event()
    b_thread: threading.Thread | None = None
    handed: dict[TopicPartition, list[int]] = {}
    try:
        await a.subscribe([topic])
        while len(a.assignment()) < PARTITIONS:
            for tp, recs in (await a.poll(0.05)).by_partition().items():
                handed.setdefault(tp, []).extend(r.offset for r in recs)
        _produce(bootstrap, topic)  # now that A owns everything: the next poll()s have much to decode
        # Cancel a poll() once it has taken records (a position moved) and before it returned them.
        before = {tp: await a.position(tp) for tp in a.assignment()}
        for _attempt in range(50):
            task = asyncio.create_task(a.poll(5))
            for _ in range(10_000):
                await asyncio.sleep(0)
                if task.done() or any([await a.position(tp) != before[tp] for tp in before]):
                    break
            task.cancel()
            try:
                records = await task
            except asyncio.CancelledError:
                records = None
            if records is not None:  # it completed first: count what it handed out, try again
                for tp, recs in records.by_partition().items():
                    handed.setdefault(tp, []).extend(r.offset for r in recs)
                before = {tp: await a.position(tp) for tp in a.assignment()}
                continue
            if a._carry:
                break
        assert a._carry, "no poll() could be cancelled after it took records"
        carried = {tp for tp, recs in a._carry.items() if recs}

        # B joins; A is asked to revoke some partitions while it does not poll.
        b = Consumer(base_config(bootstrap, group, protocol, client_id="B"))
        b.subscribe([topic])
        consumer_b = b

        def run_b() -> None:
            while not stop_b.is_set():
                consumer_b.poll(0.05)

        b_thread = threading.Thread(target=run_b, name="member-B", daemon=True)
        b_thread.start()
        wait_for(lambda: a._c._background.qsize() > 0, 60, "A to be asked to revoke")

        records = await a.poll(0)
        revoking = set(records.to_be_revoked_partitions)
        assert revoking, "the start-of-poll step did not run: the revoke request was not reported"
        got = set(records.by_partition())
        assert got.isdisjoint(revoking), (got, revoking)
        # The carried records of the partitions A keeps come first (none are lost); new ones only when no
        # carried partition was kept.
        assert got <= carried or not (carried - revoking), (got, carried, revoking)
        for tp, recs in records.by_partition().items():
            handed.setdefault(tp, []).extend(r.offset for r in recs)
        assert listener.revoked == []
        await a.poll(0)  # the revoke completes at the start of the next poll, not a poll late
        assert listener.revoked == [frozenset(revoking)]
        # What A committed for the revoked partitions is exactly what it handed out: the carried records it
        # never returned were given back.
        committed = await a.committed(revoking, timeout=10)
        for tp in revoking:
            om = committed[tp]
            last = max(handed.get(tp, []), default=-1)
            assert om is not None and om.offset == last + 1, (tp, om, last)
    finally:
        stop_b.set()
        if b_thread is not None:
            b_thread.join(30)
        if b is not None:
            b.close(10)
        await a.close(10)
