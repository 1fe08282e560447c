"""``AsyncProducer``: the producer for asyncio applications, on the same core as :class:`Producer`.

``await producer.send(...)`` queues the record and returns its :class:`~kafka_handoff.types.RecordMetadata`
once the broker acknowledged it; the record's future is completed by the producer's completion thread and
handed to the event loop with ``loop.call_soon_threadsafe`` (no thread waits).  To have many records in
flight, use :meth:`AsyncProducer.send_future` (returns an awaitable future once the record is queued) and
gather them.  A topic's first send awaits its metadata (natively, through the bridge), so it never blocks
the loop; a full ``buffer.memory`` still blocks the caller up to ``max.block.ms`` as in the synchronous
producer.  ``flush()`` awaits the in-flight batches, which the completion thread reports to the loop, and
``partitions_for()`` awaits metadata natively too, and ``close()`` awaits the end of the network and
completion threads: no call of this client blocks the loop's thread or runs on a helper thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka_handoff.aio._bridge import LoopBridge
from kafka_handoff.errors import IllegalStateError, KafkaTimeoutError
from kafka_handoff.network.events import TerminateTelemetryEvent
from kafka_handoff.producer import Producer
from kafka_handoff.producer.events import TopicMetadataEvent
from kafka_handoff.types import PartitionInfo, RecordMetadata

__all__ = ["AsyncProducer"]

log = logging.getLogger(__name__)

_METADATA_SLICE_S = 0.2


class AsyncProducer:
    """A Kafka producer for asyncio.  Create it inside the event loop that uses it."""

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        self._bridge = LoopBridge("AsyncProducer")
        self._p = Producer(config, **kwargs)
        self.client_id = self._p.client_id
        self._closed = False

    def __repr__(self) -> str:
        return f"AsyncProducer(client_id={self.client_id!r}, closed={self._closed})"

    @property
    def config(self) -> Any:
        return self._p.config

    def _check(self) -> Producer:
        self._bridge.check()
        if self._closed:
            raise IllegalStateError("cannot send: the producer is closed")
        return self._p

    async def _await_topic(self, topic: str, timeout_ms: int | None = None) -> None:
        """Await the topic's partition count (the synchronous producer blocks for it in ``send``), up to
        ``timeout_ms`` (default ``max.block.ms``)."""
        p = self._p
        if topic in p._partition_counts:
            return
        deadline_ms = p._clock.now_ms() + (p._max_block_ms if timeout_ms is None else timeout_ms)
        while topic not in p._partition_counts:
            if p._topic_errors.get(topic) is not None and topic not in p._partition_counts:
                # A fatal topic error: the synchronous send raises it without waiting.
                code = p._topic_errors.get(topic)
                from kafka_handoff.producer.producer import _FATAL_TOPIC_ERRORS

                if code in _FATAL_TOPIC_ERRORS:
                    return
            remaining_ms = deadline_ms - p._clock.now_ms()
            if remaining_ms <= 0:
                raise KafkaTimeoutError(f"topic {topic} not present in metadata after {p._max_block_ms} ms")
            fut = p._thread.submit(
                TopicMetadataEvent(topic=topic, deadline_ms=deadline_ms, name=f"metadata for topic {topic}")
            )
            try:
                await asyncio.wait_for(self._bridge.wrap(fut), min(remaining_ms / 1000.0, _METADATA_SLICE_S))
            except TimeoutError:
                pass
            if not p._background.empty():
                p._raise_background_errors()

    async def send_future(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Iterable[tuple[str, Any]] | Mapping[str, Any] | None = None,
        timestamp: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record (awaiting its topic's metadata if needed); returns a future of its metadata."""
        p = self._check()
        if topic not in p._partition_counts:
            await self._await_topic(topic)
        target: asyncio.Future[RecordMetadata] = self._bridge.loop.create_future()
        resolve = self._bridge.resolve

        def on_done(metadata: RecordMetadata | None, error: BaseException | None) -> None:
            # On the producer's completion thread.  A send callback rather than a done-callback on the record
            # future, which would make that lazy future build its condition variable for every record.
            resolve(target, metadata, error)

        p.send(topic, value, key, partition, headers, timestamp, on_done)
        return target

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Iterable[tuple[str, Any]] | Mapping[str, Any] | None = None,
        timestamp: int | None = None,
    ) -> RecordMetadata:
        """Send one record and return its metadata once the broker acknowledged it."""
        future = await self.send_future(topic, value, key, partition, headers, timestamp)
        return await future

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything now and await the outcome of every record sent before this call (callbacks
        included), as :meth:`kafka_handoff.Producer.flush`: the completion thread reports each batch it
        completes to the loop, nothing waits off the loop.  Cancelling it leaves the records in flight."""
        p = self._check()
        if not p._background.empty():
            p._raise_background_errors()
        batches = p._accumulator.begin_flush()
        p._client.wakeup()
        try:
            pending = {id(b) for b in batches if not b.done_event.is_set()}
            if pending:
                done: asyncio.Future[None] = self._bridge.loop.create_future()
                resolve = self._bridge.resolve

                def hook_for(batch_id: int) -> Callable[[], None]:
                    def hook() -> None:  # on the completion thread (or here, if already done)
                        pending.discard(batch_id)  # idempotent: a hook may run twice
                        if not pending:
                            resolve(done, None, None)

                    return hook

                for batch in batches:
                    if id(batch) in pending:
                        batch.add_done_hook(hook_for(id(batch)))
                limit = None if timeout is None else max(0.0, timeout)
                try:
                    await asyncio.wait_for(asyncio.shield(done), limit)
                except TimeoutError:
                    undelivered = sum(len(b.entries) for b in batches if not b.done_event.is_set())
                    raise KafkaTimeoutError(
                        f"flush timed out after {timeout} s with {undelivered} record(s) not delivered"
                    ) from None
        finally:
            p._accumulator.end_flush()
        # Every batch is done, so the completion thread handed each record's outcome to the bridge before
        # it marked the batch done -- but a batch done before this call (or before its hook was added) made
        # no await here, and the delivery it scheduled may not have run yet: settle those futures now, so
        # that every record sent before flush() has its outcome when it returns (as the synchronous flush).
        self._bridge.deliver_now()
        if p._unreported is not None:
            p._raise_unreported()

    async def partitions_for(self, topic: str, timeout: float | None = None) -> list[PartitionInfo]:
        """The topic's partitions, awaiting its metadata (up to ``timeout`` s, default ``max.block.ms``)."""
        p = self._check()
        timeout_ms = p._max_block_ms if timeout is None else int(timeout * 1000)
        await self._await_topic(topic, timeout_ms)
        if p._closed:
            raise IllegalStateError("the producer is closed")
        # Known now, or a fatal topic error that this raises; never waits (the deadline is now).
        p._wait_for_topic(topic, p._clock.now_ms())
        return list(p._metadata.cluster.partitions.get(topic, ()))

    def metrics(self) -> dict[str, float]:
        return self._p.metrics()

    async def close(self, timeout: float | None = None) -> None:
        """Send what is queued (for up to ``timeout`` seconds) and stop; see
        :meth:`kafka_handoff.Producer.close`."""
        self._bridge.check()
        if self._closed:
            return
        self._closed = True
        # Shielded: a cancelled close() still completes (the records are failed, the threads end).
        await asyncio.shield(self._close(timeout))

    async def _close(self, timeout: float | None) -> None:
        """``Producer.close`` step by step, awaiting each wait on the loop instead of blocking."""
        p = self._p
        started = p._close_start(timeout)
        if started is None:
            return
        start, timeout_ms = started
        bridge = self._bridge
        if p._telemetry.enabled and timeout_ms > 0:  # KIP-714's terminating push, first (as Java)
            pushed = p._thread.submit(TerminateTelemetryEvent())
            if not await bridge.wait_future(pushed, timeout_ms / 2000.0):
                log.debug("terminating telemetry push did not complete")
        p._accumulator.close()
        p._client.wakeup()
        left_ms = max(0, timeout_ms - int((time.monotonic() - start) * 1000))
        p._thread.begin_close(left_ms)
        await bridge.wait_stopped(p._thread, left_ms / 1000.0 + 2.0)
        p._close_finish(timeout_ms)
        remaining = timeout_ms / 1000.0 - (time.monotonic() - start)
        await bridge.wait_future(p._completer_done, max(remaining, 0.5))

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
