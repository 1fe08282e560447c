"""The asyncio clients on a real broker: AsyncAdminClient creates a topic, AsyncProducer's ``send`` returns
the record metadata, AsyncConsumer reads every record with ``async for`` in a group, runs an ``async def``
assigned callback, commits with ``await commit()`` and reads it back with ``committed()`` -- on the default
asyncio loop and on uvloop."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import uuid
from collections.abc import Callable, Collection, Coroutine
from typing import Any

import pytest

from kafka_handoff import (
    AdminClient,
    AsyncAdminClient,
    AsyncConsumer,
    AsyncProducer,
    AsyncRebalanceConsumer,
    AsyncRebalanceListenerBase,
    NewTopic,
    TopicPartition,
)

pytestmark = pytest.mark.integration

RECORDS = 300


def _runner(loop: str) -> Callable[[Coroutine[Any, Any, None]], None]:
    if loop == "uvloop":
        if importlib.util.find_spec("uvloop") is None:
            pytest.skip("uvloop (optional extra kafka-handoff[aio]) is not installed")
        import uvloop

        return uvloop.run
    return asyncio.run


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_async_clients_round_trip(broker: Any, loop: str) -> None:
    bootstrap = broker.bootstrap_servers
    topic = f"aio-clients-{uuid.uuid4().hex[:8]}"
    group = f"aio-clients-{uuid.uuid4().hex[:8]}"
    assigned: list[frozenset[TopicPartition]] = []
    # The dev broker's 6 s consumer-group session (fast fault tests) is shorter than a member's silences on
    # a 2-core machine at load ~50: the member was fenced (UNKNOWN_MEMBER_ID, partitions lost, rejoining)
    # and position() below met a partition not yet assigned again.  Session expiry is not what this test is
    # about: its group gets a 30 s session.
    with AdminClient({"bootstrap.servers": bootstrap}) as sync_admin:
        sync_admin.alter_group_configs(group, {"consumer.session.timeout.ms": 30_000}, timeout=60)

    class Listener(AsyncRebalanceListenerBase):
        async def on_partitions_assigned(
            self, partitions: Collection[TopicPartition], consumer: AsyncRebalanceConsumer
        ) -> None:
            await asyncio.sleep(0.01)  # a coroutine callback, awaited inside poll()
            for tp in partitions:
                assert await consumer.position(tp) == 0  # the view's blocking methods are awaitable
            assigned.append(frozenset(partitions))

    async def main() -> None:
        before = set(threading.enumerate())

        def helper_threads() -> list[threading.Thread]:  # BlockingWorker's, started by this test
            return [
                t
                for t in threading.enumerate()
                if t not in before and t.name.startswith("kafka-handoff-aio-")
            ]

        async with AsyncAdminClient({"bootstrap.servers": bootstrap}) as admin:
            await admin.create_topics([NewTopic(topic, 3, 1)])
            assert len((await admin.describe_topics([topic]))[topic].partitions) == 3
            assert (await admin.describe_cluster()).brokers
            assert not helper_threads(), "admin calls are driven on the loop"
        async with AsyncProducer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
            first = await producer.send(topic, b"v0", key=b"k0", partition=0)
            assert (first.topic, first.partition, first.offset) == (topic, 0, 0)
            futures = [
                await producer.send_future(topic, b"v%d" % i, key=b"k%d" % i, partition=i % 3)
                for i in range(1, RECORDS - 1)
            ]
            metadata = await asyncio.gather(*futures)
            assert all(m.offset >= 0 for m in metadata)
            assert [p.partition for p in await producer.partitions_for(topic)] == [0, 1, 2]
            last = await producer.send_future(topic, b"flushed", key=b"k%d" % (RECORDS - 1), partition=0)
            await producer.flush()
            assert last.done() and last.result().offset >= 0
            assert not helper_threads(), "send, partitions_for and flush complete natively"
        consumer = AsyncConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        async with consumer:
            consumer.set_rebalance_listener(Listener())
            await consumer.subscribe([topic])
            seen: set[bytes] = set()

            async def read_all() -> None:
                async for record in consumer:
                    assert record.key is not None
                    seen.add(bytes(record.key))
                    if len(seen) == RECORDS:
                        return

            await asyncio.wait_for(read_all(), 60)
            tps = [TopicPartition(topic, p) for p in range(3)]
            assert sum((await consumer.end_offsets(tps)).values()) == RECORDS
            assert set((await consumer.beginning_offsets(tps)).values()) == {0}
            assert (await consumer.offsets_for_times({tps[0]: 0}))[tps[0]] is not None
            assert len(await consumer.partitions_for(topic)) == 3
            assert topic in await consumer.list_topics()
            assert [await consumer.position(tp) for tp in tps] == [
                (await consumer.end_offsets([tp]))[tp] for tp in tps
            ]
            await consumer.commit()
            committed = await consumer.committed([TopicPartition(topic, p) for p in range(3)])
            total = sum(om.offset for om in committed.values() if om is not None)
            assert total == RECORDS
        assert seen == {b"k%d" % i for i in range(RECORDS)}
        assert assigned and frozenset().union(*assigned) == {TopicPartition(topic, p) for p in range(3)}

    _runner(loop)(main())


def test_close_commits_only_what_async_for_yielded(broker: Any) -> None:
    """With auto-commit, ``close()`` commits the position after the last record the iterator *yielded*,
    not after the last one its poll() fetched (those are given back, so nobody skips them)."""
    bootstrap = broker.bootstrap_servers
    topic = f"aio-iter-{uuid.uuid4().hex[:8]}"
    group = f"aio-iter-{uuid.uuid4().hex[:8]}"

    async def main() -> int | None:
        async with AsyncAdminClient({"bootstrap.servers": bootstrap}) as admin:
            await admin.create_topics([NewTopic(topic, 1, 1)])
        async with AsyncProducer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
            await asyncio.gather(*[await producer.send_future(topic, b"v%d" % i) for i in range(50)])
        consumer = AsyncConsumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
        )
        async with consumer:
            await consumer.subscribe([topic])
            taken = 0
            async for record in consumer:
                assert record.offset == taken
                taken += 1
                if taken == 10:
                    break
        checker = AsyncConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        async with checker:
            committed = await checker.committed([TopicPartition(topic, 0)])
        om = committed[TopicPartition(topic, 0)]
        return None if om is None else om.offset

    assert asyncio.run(main()) == 10


def test_assign_mode_close_commits_on_the_loop(broker: Any) -> None:
    """Without a group to leave (assign mode), close() runs on the loop: its auto-commit of the yielded
    position completes through the bridge and the consumer's worker thread is never started."""
    bootstrap = broker.bootstrap_servers
    topic = f"aio-assign-{uuid.uuid4().hex[:8]}"
    group = f"aio-assign-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)

    async def main() -> tuple[int | None, bool]:
        async with AsyncAdminClient({"bootstrap.servers": bootstrap}) as admin:
            await admin.create_topics([NewTopic(topic, 1, 1)])
        async with AsyncProducer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
            await asyncio.gather(
                *[await producer.send_future(topic, b"v%d" % i, partition=0) for i in range(20)]
            )
        consumer = AsyncConsumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
        )
        async with consumer:
            await consumer.assign([tp])
            assert await consumer.position(tp) == 0
            taken = 0
            async for record in consumer:
                assert record.offset == taken
                taken += 1
                if taken == 7:
                    break
        worker_unused = consumer._worker._thread is None
        checker = AsyncConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        async with checker:
            committed = await checker.committed([tp])
        om = committed[tp]
        return (None if om is None else om.offset), worker_unused

    offset, worker_unused = asyncio.run(main())
    assert offset == 7
    assert worker_unused, "assign, position, poll and close ran on the worker thread"
