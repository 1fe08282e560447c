"""The asyncio facade without a broker: the future bridge, the worker's loop round trip, cancellation of a
pending ``poll()``/``commit()``, and the wrong-loop error."""

from __future__ import annotations

import asyncio
import importlib.util
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import pytest

from kafka_handoff import AsyncAdminClient, AsyncConsumer, AsyncProducer, WrongEventLoopError
from kafka_handoff.aio._bridge import BlockingWorker, LoopBridge
from kafka_handoff.errors import IllegalStateError, KafkaTimeoutError, RecordPurgedError
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.threads  # real clients with their network thread, no broker

T = TypeVar("T")


def run(coro: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await coro()

    return asyncio.run(main())


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A port nothing listens on (bound, never accepting: connects are refused or hang)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    yield port


# ============================================================================================ the bridge
def test_bridge_delivers_a_result_set_on_another_thread() -> None:
    async def main() -> tuple[int, bool]:
        bridge = LoopBridge("test")
        fut: Future[int] = Future()
        wrapped = bridge.wrap(fut)
        loop_thread = threading.get_ident()
        seen: list[int] = []

        def complete() -> None:
            time.sleep(0.05)
            fut.set_result(42)

        threading.Thread(target=complete).start()
        wrapped.add_done_callback(lambda _: seen.append(threading.get_ident()))
        value = await asyncio.wait_for(wrapped, 5)
        await asyncio.sleep(0)
        return value, seen == [loop_thread]

    value, on_loop = asyncio.run(main())
    assert value == 42
    assert on_loop, "the asyncio future must complete on the loop's thread"


def test_bridge_delivers_an_exception_and_an_already_completed_future() -> None:
    async def main() -> None:
        bridge = LoopBridge("test")
        failed: Future[int] = Future()
        threading.Thread(target=lambda: failed.set_exception(KafkaTimeoutError("slow"))).start()
        with pytest.raises(KafkaTimeoutError, match="slow"):
            await asyncio.wait_for(bridge.wrap(failed), 5)
        done: Future[str] = Future()
        done.set_result("ready")
        assert await asyncio.wait_for(bridge.wrap(done), 5) == "ready"

    asyncio.run(main())


def test_cancelling_the_awaiting_side_leaves_the_source_future_alone() -> None:
    async def main() -> Future[int]:
        bridge = LoopBridge("test")
        fut: Future[int] = Future()
        wrapped = bridge.wrap(fut)
        wrapped.cancel()
        fut.set_result(1)  # the network thread completes it later: no error, the outcome is dropped
        await asyncio.sleep(0.01)
        return fut

    fut = asyncio.run(main())
    assert fut.result() == 1


def test_bridge_outcome_on_the_loop_thread_does_not_overtake_one_handed_over_before() -> None:
    """An outcome resolved on the loop's thread completes the outcomes other threads handed over before
    it first (the bulk delivery they scheduled has not run yet): futures complete in the order their
    outcomes arrived."""

    async def main() -> None:
        bridge = LoopBridge("test")
        loop = asyncio.get_running_loop()
        earlier: asyncio.Future[int] = loop.create_future()
        later: asyncio.Future[int] = loop.create_future()
        other = threading.Thread(target=lambda: bridge.resolve(earlier, 1, None))
        other.start()
        other.join()  # handed over; its delivery waits for the loop, which this coroutine holds
        assert not earlier.done()
        bridge.resolve(later, 2, None)
        assert earlier.done() and earlier.result() == 1, "the earlier outcome was overtaken"
        assert later.result() == 2

    asyncio.run(main())


def test_bridge_must_be_created_in_a_running_loop() -> None:
    with pytest.raises(WrongEventLoopError, match="inside a running asyncio event loop"):
        LoopBridge("AsyncThing")


def test_worker_runs_a_loop_coroutine_and_serves_its_blocking_calls() -> None:
    """The rebalance round trip: worker -> coroutine on the loop -> blocking job on the worker -> back."""

    async def main() -> tuple[str, list[str]]:
        bridge = LoopBridge("test")
        worker = BlockingWorker(bridge, "test-worker")
        where: list[str] = []

        async def callback() -> str:
            where.append("loop" if bridge.on_loop_thread() else "other")
            inner = await worker.submit(lambda: threading.current_thread().name)
            where.append(inner)
            return "done"

        result = await asyncio.wait_for(worker.submit(lambda: worker.run_on_loop(callback)), 5)
        worker.stop()
        return result, where

    result, where = asyncio.run(main())
    assert result == "done"
    assert where == ["loop", "test-worker"]


def test_worker_propagates_a_callback_error() -> None:
    async def main() -> None:
        bridge = LoopBridge("test")
        worker = BlockingWorker(bridge, "test-worker")

        async def callback() -> None:
            raise ValueError("from the callback")

        with pytest.raises(ValueError, match="from the callback"):
            await asyncio.wait_for(worker.submit(lambda: worker.run_on_loop(callback)), 5)
        worker.stop()

    asyncio.run(main())


# ============================================================================================ wrong loop
def test_consumer_used_from_another_loop_raises_a_clear_error(dead_port: int) -> None:
    holder: dict[str, AsyncConsumer] = {}

    async def create() -> None:
        holder["c"] = AsyncConsumer({"bootstrap.servers": f"127.0.0.1:{dead_port}"})

    loop_a = asyncio.new_event_loop()
    try:
        loop_a.run_until_complete(create())
        consumer = holder["c"]

        async def use() -> None:
            await consumer.assign([TopicPartition("t", 0)])

        with pytest.raises(WrongEventLoopError, match="can only be used from it"):
            asyncio.run(use())  # another loop (and thread-wise the same thread: still refused)

        errors: list[BaseException] = []

        def other_thread() -> None:
            try:
                consumer.assignment()  # no running loop at all
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        assert len(errors) == 1 and isinstance(errors[0], WrongEventLoopError)
        assert "no running event loop" in str(errors[0])
        loop_a.run_until_complete(consumer.close(timeout=2))
    finally:
        loop_a.close()


def test_clients_refuse_creation_outside_a_loop(dead_port: int) -> None:
    with pytest.raises(WrongEventLoopError):
        AsyncConsumer({"bootstrap.servers": f"127.0.0.1:{dead_port}"})
    with pytest.raises(WrongEventLoopError):
        AsyncProducer({"bootstrap.servers": f"127.0.0.1:{dead_port}"})


# ============================================================================================ cancellation
def test_cancelled_poll_leaves_the_consumer_usable(dead_port: int) -> None:
    async def main() -> None:
        consumer = AsyncConsumer({"bootstrap.servers": f"127.0.0.1:{dead_port}", "group.id": "g"})
        try:
            await consumer.assign([TopicPartition("t", 0)])
            task = asyncio.create_task(consumer.poll(30))
            await asyncio.sleep(0.2)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):  # not the poll's empty result 30 s later
                await task
            # Usable afterwards: polls again (nothing to fetch) and a second concurrent poll is refused.
            records = await consumer.poll(0.05)
            assert len(records) == 0
            first = asyncio.create_task(consumer.poll(1))
            await asyncio.sleep(0.05)
            with pytest.raises(IllegalStateError, match="already running"):
                await consumer.poll(0)
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            assert consumer.assignment() == {TopicPartition("t", 0)}
        finally:
            started = time.monotonic()
            await consumer.close(timeout=2)
            assert time.monotonic() - started < 8.0, "close() must be bounded by its timeout"

    asyncio.run(main())


def test_cancelled_commit_leaves_the_consumer_usable(dead_port: int) -> None:
    async def main() -> None:
        consumer = AsyncConsumer({"bootstrap.servers": f"127.0.0.1:{dead_port}", "group.id": "g"})
        try:
            tp = TopicPartition("t", 0)
            await consumer.assign([tp])
            task = asyncio.create_task(consumer.commit({tp: 5}, timeout=30))
            await asyncio.sleep(0.2)
            assert not task.done(), "the coordinator is unreachable: the commit must still be pending"
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # A later commit runs (and times out on its own deadline, not hanging on the first one).
            with pytest.raises(KafkaTimeoutError):
                await consumer.commit({tp: 6}, timeout=0.3)
            assert len(await consumer.poll(0.05)) == 0
        finally:
            await consumer.close(timeout=1)

    asyncio.run(main())


def test_closed_consumer_refuses_calls(dead_port: int) -> None:
    async def main() -> None:
        async with AsyncConsumer({"bootstrap.servers": f"127.0.0.1:{dead_port}"}) as consumer:
            await consumer.assign([TopicPartition("t", 0)])
        with pytest.raises(IllegalStateError, match="closed"):
            await consumer.poll(0)

    asyncio.run(main())


@pytest.mark.skipif(
    importlib.util.find_spec("uvloop") is None, reason="uvloop (optional extra) not installed"
)
def test_bridge_and_cancellation_under_uvloop(dead_port: int) -> None:
    import uvloop

    async def main() -> tuple[int, int]:
        bridge = LoopBridge("test")
        fut: Future[int] = Future()
        threading.Thread(target=lambda: fut.set_result(7)).start()
        value = await asyncio.wait_for(bridge.wrap(fut), 5)
        consumer = AsyncConsumer({"bootstrap.servers": f"127.0.0.1:{dead_port}"})
        try:
            await consumer.assign([TopicPartition("t", 0)])
            task = asyncio.create_task(consumer.poll(30))
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            n = len(await consumer.poll(0.05))
        finally:
            await consumer.close(timeout=1)
        return value, n

    assert uvloop.run(main()) == (7, 0)


def test_poll_wakes_on_the_fetch_buffer_signal(dead_port: int) -> None:
    """A waiting poll() is woken by the buffer's on_signal hook from another thread (not by its timeout)."""

    async def main() -> float:
        consumer = AsyncConsumer({"bootstrap.servers": f"127.0.0.1:{dead_port}"})
        try:
            await consumer.assign([TopicPartition("t", 0)])
            buffer: Any = consumer._c._buffer
            loop = asyncio.get_running_loop()
            waiter = asyncio.create_task(consumer._wait_for_work(10.0))
            await asyncio.sleep(0.05)
            started = loop.time()
            threading.Thread(target=buffer.notify).start()
            await asyncio.wait_for(waiter, 5)
            return loop.time() - started
        finally:
            await consumer.close(timeout=1)

    assert asyncio.run(main()) < 2.0


# ============================================================================================ sliced decode
def _batches(count: int, per_batch: int, start: int = 0) -> bytes:
    from kafka_handoff.protocol.records import encode_batch

    out = b""
    offset = start
    for _ in range(count):
        recs = [(b"k%d" % (offset + i), b"v" * 200, 1_000 + offset + i) for i in range(per_batch)]
        out += encode_batch(recs, base_offset=offset, partition_leader_epoch=3)
        offset += per_batch
    return out


def test_split_batches_cuts_at_batch_boundaries_only() -> None:
    from kafka_handoff.aio.consumer import _split_batches

    data = _batches(40, 50)
    pieces = _split_batches(data, 16 * 1024)
    assert len(pieces) > 3
    assert b"".join(pieces) == data
    truncated = data[:-7]  # a partial trailing batch stays in the last piece
    assert b"".join(_split_batches(truncated, 16 * 1024)) == truncated
    assert _split_batches(b"", 1024) == [b""]


def test_sliced_decode_equals_decoding_at_once(dead_port: int) -> None:
    from kafka_handoff.consumer.fetcher import CompletedFetch
    from kafka_handoff.protocol.records import decode_batches

    data = _batches(60, 100, start=1_000) + b"\x00\x00"  # 6,000 records, ~1.3 MB, plus a partial tail
    tp = TopicPartition("t", 0)
    whole = decode_batches(data, topic="t", partition=0, start_offset=1_050)

    async def main() -> Any:
        consumer = AsyncConsumer({"bootstrap.servers": f"127.0.0.1:{dead_port}"}, decode_slice_ms=0.01)
        try:
            fetch = CompletedFetch(tp, 1_050, 0, data)
            await consumer._decode_in_slices(fetch)
            assert fetch.initialized
            return fetch.decoded
        finally:
            await consumer.close(timeout=1)

    sliced = asyncio.run(main())
    assert [r.offset for r in sliced.records] == [r.offset for r in whole.records]
    assert sliced.records[0].offset == 1_050
    assert [r.key for r in sliced.records] == [r.key for r in whole.records]
    assert (
        sliced.next_offset,
        sliced.last_epoch,
        sliced.batches,
        sliced.bytes_consumed,
        sliced.partial_bytes,
    ) == (
        whole.next_offset,
        whole.last_epoch,
        whole.batches,
        whole.bytes_consumed,
        whole.partial_bytes,
    )
    assert sliced.error is None and whole.error is None


# ============================================================================================ callbacks
def test_async_callback_is_awaited_in_poll_and_survives_a_cancelled_poll(dead_port: int) -> None:
    """An ``async def`` assigned callback runs on the loop inside poll(); cancelling that poll while the
    callback is suspended does not abort it: the next poll() waits for the rebalance step, which completes."""
    from kafka_handoff.group.membership import CallbackKind, CallbackNeeded

    tp = TopicPartition("t", 0)
    events: list[str] = []

    async def main() -> None:
        consumer = AsyncConsumer(
            {"bootstrap.servers": f"127.0.0.1:{dead_port}", "group.id": "g", "group.protocol": "consumer"}
        )
        release = asyncio.Event()
        loop_thread = threading.get_ident()

        class Listener:
            async def on_partitions_assigned(self, partitions: Any, view: Any) -> None:
                assert threading.get_ident() == loop_thread, "callbacks run on the loop's thread"
                events.append("assigned-start")
                assert view.assignment() == frozenset()
                await release.wait()
                events.append("assigned-end")

        try:
            consumer.set_rebalance_listener(Listener())
            await consumer.subscribe(["t"])
            # What the network thread posts when the membership needs the assigned callback.
            consumer._c._background.put(CallbackNeeded(CallbackKind.ASSIGN, frozenset({tp}), seq=10_001))
            first = asyncio.create_task(consumer.poll(5))
            for _ in range(100):
                if events:
                    break
                await asyncio.sleep(0.02)
            assert events == ["assigned-start"]
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            second = asyncio.create_task(consumer.poll(0.05))
            await asyncio.sleep(0.1)
            assert not second.done(), "the next poll waits for the rebalance step of the cancelled one"
            release.set()
            await asyncio.wait_for(second, 5)
            assert events == ["assigned-start", "assigned-end"]
        finally:
            await consumer.close(timeout=1)

    asyncio.run(main())


def test_async_callback_error_is_raised_from_poll_once(dead_port: int) -> None:
    from kafka_handoff.group.membership import CallbackKind, CallbackNeeded

    async def main() -> None:
        consumer = AsyncConsumer(
            {"bootstrap.servers": f"127.0.0.1:{dead_port}", "group.id": "g", "group.protocol": "consumer"}
        )

        class Listener:
            async def on_partitions_assigned(self, partitions: Any) -> None:  # the one-argument form
                await asyncio.sleep(0)
                raise ValueError("boom in the callback")

        try:
            consumer.set_rebalance_listener(Listener())
            await consumer.subscribe(["t"])
            consumer._c._background.put(
                CallbackNeeded(CallbackKind.ASSIGN, frozenset({TopicPartition("t", 0)}), seq=10_002)
            )
            with pytest.raises(ValueError, match="boom in the callback"):
                await consumer.poll(1)
            assert len(await consumer.poll(0.05)) == 0  # raised once; the consumer goes on
        finally:
            await consumer.close(timeout=1)

    asyncio.run(main())


# ============================================================================ calls completed natively
def _helper_threads(before: set[threading.Thread]) -> list[str]:
    """The asyncio clients' worker threads (BlockingWorker names them kafka-handoff-aio-...) started since
    ``before`` was taken."""
    return [
        t.name for t in threading.enumerate() if t not in before and t.name.startswith("kafka-handoff-aio-")
    ]


def test_converted_consumer_calls_never_start_the_worker_thread(dead_port: int) -> None:
    """assign/subscribe/unsubscribe (assign mode), position, the offset and metadata lookups,
    group_metadata and enforce_rebalance are network-thread events awaited through the bridge: a session
    using only them never starts the client's worker thread, and they keep the synchronous checks."""

    async def main() -> None:
        consumer = AsyncConsumer(
            {"bootstrap.servers": f"127.0.0.1:{dead_port}", "group.id": "g", "default.api.timeout.ms": 300}
        )
        tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
        try:
            with pytest.raises(ValueError, match="non-empty"):
                await consumer.assign([TopicPartition(" ", 0)])
            await consumer.assign([tp0, tp1])
            assert consumer.assignment() == {tp0, tp1}
            with pytest.raises(IllegalStateError, match="after assign"):
                await consumer.subscribe(["t"])
            with pytest.raises(IllegalStateError, match="not assigned"):
                await consumer.position(TopicPartition("other", 0))
            consumer.seek(tp0, 7)
            assert await consumer.position(tp0) == 7
            # Unreachable brokers: each lookup fails on its own timeout, from the network thread's deadline.
            with pytest.raises(KafkaTimeoutError):
                await consumer.position(tp1, timeout=0.2)
            with pytest.raises(KafkaTimeoutError):
                await consumer.end_offsets([tp0], timeout=0.2)
            with pytest.raises(KafkaTimeoutError):
                await consumer.beginning_offsets([tp0], timeout=0.2)
            with pytest.raises(ValueError, match="negative"):
                await consumer.offsets_for_times({tp0: -5})
            with pytest.raises(KafkaTimeoutError):
                await consumer.offsets_for_times({tp0: 1000}, timeout=0.2)
            assert await consumer.end_offsets([]) == {}
            with pytest.raises(KafkaTimeoutError):
                await consumer.list_topics(timeout=0.2)
            with pytest.raises(KafkaTimeoutError):
                await consumer.partitions_for("t", timeout=0.2)
            await consumer.unsubscribe()
            assert consumer.assignment() == frozenset()
            await consumer.subscribe(["t", "u"])
            assert consumer.subscription() == {"t", "u"}
            meta = await consumer.group_metadata()
            assert meta.group_id == "g"
            await consumer.enforce_rebalance("test")
            assert consumer._worker._thread is None, "a converted call ran on the worker thread"
        finally:
            await consumer.close(timeout=1)

    asyncio.run(main())


def test_cancelled_converted_calls_leave_the_consumer_usable(dead_port: int) -> None:
    async def main() -> None:
        consumer = AsyncConsumer({"bootstrap.servers": f"127.0.0.1:{dead_port}", "group.id": "g"})
        tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
        try:
            await consumer.assign([tp0])
            # A lookup pending on unreachable brokers, cancelled: its outcome is dropped.
            task = asyncio.create_task(consumer.end_offsets([tp0], timeout=30))
            await asyncio.sleep(0.2)
            assert not task.done(), "the brokers are unreachable: the lookup must still be pending"
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # An assign cancelled while its event is in flight still completes its application-side step
            # before the next call goes on: the consumer is consistent afterwards.
            assign = asyncio.create_task(consumer.assign([tp1]))
            await asyncio.sleep(0)  # the event is submitted; the task awaits it
            assign.cancel()
            with pytest.raises(asyncio.CancelledError):
                await assign
            assert len(await consumer.poll(0.05)) == 0
            assert consumer.assignment() == {tp1}
            with pytest.raises(KafkaTimeoutError):
                await consumer.end_offsets([tp1], timeout=0.2)
            await consumer.assign([tp0, tp1])
            assert consumer.assignment() == {tp0, tp1}
            assert consumer._worker._thread is None
        finally:
            # No group to leave (assign mode): close() awaits its auto-commit (the coordinator is unreachable:
            # bounded by the timeout) and the network thread's end on the loop, without the worker.
            started = time.monotonic()
            await consumer.close(timeout=1)
            assert time.monotonic() - started < 8.0, "close() must be bounded by its timeout"
        assert consumer._c._thread.stopped.done()
        assert consumer._worker._thread is None, "close() without a group to leave ran on the worker"

    asyncio.run(main())


def test_producer_flush_awaits_the_batches_without_the_worker_thread(dead_port: int) -> None:
    """flush() awaits the batches in flight through the completion thread's hooks: it times out like the
    synchronous flush, a cancelled flush leaves the producer usable, and a flush returns once the batch
    completed (here: expired, as nothing is reachable) -- without ever starting the worker thread."""

    async def main() -> None:
        before = set(threading.enumerate())
        producer = AsyncProducer(
            {
                "bootstrap.servers": f"127.0.0.1:{dead_port}",
                "linger.ms": 0,
                "request.timeout.ms": 500,
                "delivery.timeout.ms": 1500,
            }
        )
        try:
            await producer.flush()  # nothing in flight: returns at once
            # The topic's partition count as metadata would give it (no broker here).
            producer._p._partition_counts["t"] = 1
            producer._p._accumulator.update_topic("t", 1, [0])
            record = await producer.send_future("t", b"v", partition=0)
            with pytest.raises(KafkaTimeoutError, match="1 record"):
                await producer.flush(timeout=0.1)
            task = asyncio.create_task(producer.flush())
            await asyncio.sleep(0.05)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert producer._p._accumulator._flushes == 0, "a cancelled flush must end its flush"
            await asyncio.wait_for(producer.flush(), 30)  # returns once the batch expired
            assert record.done()
            with pytest.raises(KafkaTimeoutError):
                record.result()
            assert not _helper_threads(before), "flush() ran on a helper thread"
        finally:
            await producer.close(timeout=1)
        # close() awaited the end of the network and completion threads, on the loop.
        assert producer._p._thread.stopped.done()
        assert producer._p._completer_done.done()
        assert not _helper_threads(before)

    asyncio.run(main())


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_producer_flush_returns_with_every_record_future_done(dead_port: int, loop: str) -> None:
    """A record whose batch completed while the loop's thread was busy (a starved loop on a loaded
    machine): the completion thread handed its outcome over, the bridge's delivery has not run yet, and
    flush() -- with no batch left to await -- must still return only with the record's future done (as the
    synchronous flush).  It returned at once with the future pending (seen in the broker round-trip test
    under CPU starvation)."""
    if loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        pytest.skip("uvloop is not installed")

    async def main() -> None:
        producer = AsyncProducer({"bootstrap.servers": f"127.0.0.1:{dead_port}", "linger.ms": 0})
        try:
            # The topic's partition count as metadata would give it (no broker here).
            producer._p._partition_counts["t"] = 1
            producer._p._accumulator.update_topic("t", 1, [0])
            record = await producer.send_future("t", b"v", partition=0)
            batches = producer._p._accumulator.incomplete()
            assert batches
            # Not sent (nothing is reachable): purged, its outcome reaches the completion thread.  The loop's
            # thread blocks until the completion thread is done with the batch: its delivery cannot run.
            assert producer._p.purge(timeout=30) == 1
            for batch in batches:
                assert batch.done_event.wait(30)
            assert not record.done()
            await producer.flush()
            assert record.done(), "flush() returned before the record's future was completed"
            with pytest.raises(RecordPurgedError):
                record.result()
        finally:
            await producer.close(timeout=1)

    if loop == "uvloop":
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())


def test_admin_calls_are_driven_on_the_loop_without_the_worker_thread(dead_port: int) -> None:
    """Admin operations run as steps on the loop: the same validation errors and timeouts as the
    synchronous client, a cancelled call leaves the client usable, and no worker thread is started."""

    async def main() -> None:
        before = set(threading.enumerate())
        admin = AsyncAdminClient({"bootstrap.servers": f"127.0.0.1:{dead_port}"})
        try:
            with pytest.raises(ValueError, match="more than once"):
                await admin.describe_topics(["t", "t"])
            with pytest.raises(KafkaTimeoutError):
                await admin.list_topics(timeout=0.2)
            with pytest.raises(KafkaTimeoutError):
                await admin.list_offsets([TopicPartition("t", 0)], timeout=0.2)
            task = asyncio.create_task(admin.describe_cluster(timeout=30))
            await asyncio.sleep(0.2)
            assert not task.done(), "the brokers are unreachable: the call must still be pending"
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            with pytest.raises(KafkaTimeoutError):
                await admin.describe_configs(["t"], timeout=0.2)
            assert not _helper_threads(before), "an admin call ran on a helper thread"
        finally:
            await admin.close(timeout=1)
        assert admin._a._thread.stopped.done(), "close() awaits the end of the network thread"
        assert not _helper_threads(before)
        with pytest.raises(IllegalStateError, match="closed"):
            await admin.list_groups()

    asyncio.run(main())


def test_subscribe_with_a_listener_is_deprecated_as_in_the_synchronous_consumer(dead_port: int) -> None:
    """Issue 26 gap: KIP-1306 deprecates subscribe(..., listener); the asyncio twin warns too, and the
    listener still takes effect."""

    class Listener:
        def on_partitions_assigned(self, partitions: Any) -> None:
            pass

    async def main() -> None:
        consumer = AsyncConsumer({"bootstrap.servers": f"127.0.0.1:{dead_port}", "group.id": "g"})
        try:
            with pytest.warns(DeprecationWarning, match="set_rebalance_listener") as caught:
                await consumer.subscribe(["t"], listener=Listener())
            assert caught[0].filename == __file__  # points at the caller
            assert consumer._c._listeners.resolve() is not None
        finally:
            await consumer.close(1)

    run(main)
