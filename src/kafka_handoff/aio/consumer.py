"""``AsyncConsumer``: the consumer for asyncio applications, on the same core as :class:`Consumer`.

It wraps a synchronous :class:`~kafka_handoff.consumer.Consumer` (same configuration, same group protocols,
same KIP-983/KIP-1306 behaviour) and replaces the two places where that one blocks:

* *waiting for fetched data or group events*: the fetch buffer's ``on_signal`` hook wakes the event loop
  (``loop.call_soon_threadsafe``) while ``poll()`` awaits, instead of a condition variable;
* *running rebalance callbacks* (and the auto-commit before a revoke): when the group has callback work,
  that step of ``poll()`` runs on the client's worker thread while ``poll()`` awaits it, and each user
  callback is sent back to the loop and awaited there (``async def`` callbacks are awaited; see
  ``kafka_handoff.aio.listener``).  Without callback work -- nearly every poll -- nothing leaves the loop.

Records are decoded on the loop thread in slices: after each slice that took longer than
``decode_slice_ms`` ``poll()`` yields to the loop (``await asyncio.sleep(0)``).  Every other call submits
the synchronous consumer's application event (commit, assign, subscribe, offset and metadata lookups, ...)
and awaits its future through the bridge; the facade's application-thread step after it (e.g. dropping
fetched data of partitions no longer assigned) then runs on the loop, even if the awaiting task was
cancelled, before the next call goes on.  Only leaving the group (``unsubscribe()``, ``close()`` of a
subscribed member: they run the revoke callback) and ``client_instance_id()`` run on the worker.

Cancelling a pending ``poll()``, ``commit()`` or lookup leaves the consumer usable: records a cancelled
``poll()`` had already taken are returned by the next one, a rebalance step it started finishes on the
worker before the next call goes on, and a cancelled commit's or lookup's outcome is dropped.  ``close()``
is bounded by its timeout.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

from kafka_handoff.aio._bridge import BlockingWorker, LoopBridge
from kafka_handoff.aio.listener import LoopListener
from kafka_handoff.consumer.consumer import Consumer
from kafka_handoff.consumer.events import (
    AppCallEvent,
    AssignEvent,
    CommitEvent,
    EnforceRebalanceEvent,
    GroupMetadataEvent,
    MetadataUpdateEvent,
    OwnedPartitionsEvent,
    ReleaseMetadataTopicsEvent,
    SubscribeEvent,
    TerminateTelemetryEvent,
    UnsubscribeEvent,
)
from kafka_handoff.consumer.fetcher import CompletedFetch
from kafka_handoff.consumer.offsets import EARLIEST, LATEST
from kafka_handoff.consumer.records import ConsumerRecords
from kafka_handoff.consumer.subscription import SubscriptionType
from kafka_handoff.errors import IllegalStateError, KafkaError, KafkaTimeoutError
from kafka_handoff.network.events import ApplicationEvent
from kafka_handoff.protocol.records import DecodedRecords, decode_batches
from kafka_handoff.types import (
    ClusterMetadata,
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    PartitionInfo,
    TopicPartition,
)

__all__ = ["AsyncConsumer"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# Records per collect() slice (the time check runs after each slice): handing out decoded records is list
# slicing, cheap; with a key/value deserializer each record runs user code, so slices are smaller.
_SLICE_RECORDS = 1024
_SLICE_RECORDS_DESERIALIZING = 128
_DECODE_CHUNK_BYTES = 64 * 1024  # a large fetched partition is decoded in pieces of about this size
_SEND_TIMEOUT_S = 30.0  # a quick network-thread call (as Consumer._send)
_POSITION_RECHECK_S = 0.02  # position(): how often an initialising position is looked at again


class AsyncConsumer:
    """A Kafka consumer for asyncio.  Create it inside the event loop that uses it (it belongs to that loop).

    One task polls at a time (a second concurrent ``poll()`` raises
    :class:`~kafka_handoff.errors.IllegalStateError`); ``commit()`` may run from other tasks of the loop.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        /,
        *,
        decode_slice_ms: float = 5.0,
        **kwargs: Any,
    ) -> None:
        if decode_slice_ms <= 0:
            raise ValueError(f"decode_slice_ms must be positive, got {decode_slice_ms}")
        self._bridge = LoopBridge("AsyncConsumer")
        self._c = Consumer(config, **kwargs)
        self.client_id = self._c.client_id
        self.group_id = self._c.group_id
        self._worker = BlockingWorker(self._bridge, f"kafka-handoff-aio-{self.client_id}")
        self._slice_s = decode_slice_ms / 1000.0
        self._waiter: asyncio.Future[None] | None = None
        self._c._buffer.on_signal = self._on_signal
        self._phase: asyncio.Future[Any] | None = (
            None  # a rebalance step still running (its poll was cancelled)
        )
        self._polling = False
        self._carry: dict[TopicPartition, list[ConsumerRecord]] | None = None
        self._carry_error: BaseException | None = None
        self._iter: collections.deque[ConsumerRecord] = collections.deque()
        self._iter_timeout_s = 1.0
        self._closed = False
        self._refresh_s = min(1.0, int(self._c.config.get("max.poll.interval.ms")) / 4000)
        self._refreshed = 0.0
        self._check_crcs = bool(self._c.config.get("check.crcs"))
        # Under read_committed a fetch decodes at once (aborted-transaction state spans its batches).
        self._slice_decode = not self._c._read_committed
        deserializing = self._c._collector._kdes is not None or self._c._collector._vdes is not None
        self._slice_records = _SLICE_RECORDS_DESERIALIZING if deserializing else _SLICE_RECORDS

    def __repr__(self) -> str:
        return (
            f"AsyncConsumer(client_id={self.client_id!r}, group_id={self.group_id!r}, closed={self._closed})"
        )

    @property
    def config(self) -> Any:
        return self._c.config

    # ============================================================================== wake-ups
    def _on_signal(self) -> None:
        """Fetch buffer hook (network thread, or the loop): wake a waiting ``poll()``."""
        waiter = self._waiter
        if waiter is None:
            return
        loop = self._bridge.loop
        if self._bridge.on_loop_thread():
            _wake(waiter)
            return
        try:
            loop.call_soon_threadsafe(_wake, waiter)
        except RuntimeError:  # the loop was closed
            pass

    async def _wait_for_work(self, timeout_s: float) -> None:
        c = self._c
        loop = self._bridge.loop
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiter = waiter  # before the readiness check: a signal from now on completes it
        handle = loop.call_later(timeout_s, _wake, waiter)
        try:
            if len(c._buffer) > 0 or not c._background.empty():
                return
            await waiter
        finally:
            handle.cancel()
            self._waiter = None

    # ============================================================================== plumbing
    def _check(self) -> Consumer:
        self._bridge.check()
        if self._closed:
            raise IllegalStateError("this consumer has already been closed")
        return self._c

    async def _settle(self) -> None:
        """Let a rebalance step of a cancelled ``poll()`` finish before anything else touches the consumer;
        an error it raised is raised here."""
        phase = self._phase
        if phase is not None:
            try:
                await asyncio.shield(phase)
            finally:
                if phase.done():
                    self._phase = None

    def _phase_running(self) -> bool:
        phase = self._phase
        return phase is not None and not phase.done()

    async def _run_phase(self, fn: Callable[[], T]) -> T:
        """Run a blocking step of the consumer (rebalance callbacks) on the worker and await it."""
        fut = self._worker.submit(fn)
        self._phase = fut
        result: T = await asyncio.shield(fut)
        self._phase = None
        return result

    async def _blocking(self, fn: Callable[[], T]) -> T:
        self._check()
        await self._settle()
        return await self._run_phase(fn)

    def _callbacks_runnable(self) -> bool:
        """True when the core has rebalance work that would run user code now."""
        return self._c._dispatch.callbacks_runnable()

    # ============================================================================== poll
    async def poll(self, timeout: float | None = 0.0) -> ConsumerRecords:
        """Records fetched for the assigned partitions, waiting up to ``timeout`` seconds (the same group
        semantics as :meth:`kafka_handoff.Consumer.poll`: rebalance callbacks run inside it, awaited)."""
        self._check()
        if self._polling:
            raise IllegalStateError("poll() is already running in another task of this consumer")
        self._polling = True
        try:
            await self._settle()
            return await self._poll(timeout)
        finally:
            self._polling = False

    async def _poll(self, timeout: float | None) -> ConsumerRecords:
        c = self._c
        if c._subs.type is SubscriptionType.NONE:
            raise IllegalStateError("consumer is not subscribed to any topics or assigned any partitions")
        if self._carry_error is not None:
            error, self._carry_error = self._carry_error, None
            raise error
        carried, self._carry = self._carry, None
        if carried:
            # Records a cancelled poll() took.  Those of a partition whose revoke was requested meanwhile are
            # given back before the start-of-poll step can complete the revoke (its commit counts only what
            # the application got).
            carried = self._give_back(carried)
        loop = self._bridge.loop
        timeout_s = 0.0 if timeout is None else max(0.0, float(timeout))
        deadline = loop.time() + timeout_s
        # Start of poll (KIP-983 start-of-poll rules): the callbacks step off the loop only when it runs
        # user code; otherwise it is bookkeeping.
        c._poll_start_prepare()
        if c._dispatch.start_of_poll_runs_callbacks():
            await self._run_phase(c._poll_start_callbacks)
        else:
            c._poll_start_callbacks()
        c._poll_start_event()
        if carried:
            # The same start-of-poll step as every poll() (above), and the callbacks due now; then the carried
            # records, without those of partitions no longer owned or whose revoke was requested since.
            try:
                c._raise_background_errors()
                await self._before_collect()
            except BaseException:
                self._carry = self._give_back(carried)  # not lost: the next poll() returns them
                raise
            kept = self._give_back(carried)
            if kept:
                result: ConsumerRecords = c._make_records(kept)
                return result
        while True:
            c._raise_background_errors()
            c._raise_no_offset()
            early = await self._before_collect()
            records = await self._collect()
            remaining = deadline - loop.time()
            if records or early or remaining <= 0:
                out: ConsumerRecords = c._make_records(records)
                return out
            now = time.monotonic()
            if c.membership is not None and now - self._refreshed >= self._refresh_s:
                self._refreshed = now
                c._send_poll_event()
            c._thread.wakeup()
            await self._wait_for_work(min(remaining, 0.1))

    def _give_back(
        self, carried: dict[TopicPartition, list[ConsumerRecord]]
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """The carried records the application may still get: of owned partitions whose revoke was not
        requested.  A still-owned partition whose revoke was requested is sought back to its first carried
        record (so the commit before its revoke, and the next owner, start there); the rest are dropped."""
        c = self._c
        owned = c._subs.assigned()
        requested = c._dispatch.revoke.is_revoke_requested
        kept: dict[TopicPartition, list[ConsumerRecord]] = {}
        for tp, records in carried.items():
            if tp not in owned or not records:
                continue
            if requested(tp):
                with contextlib.suppress(IllegalStateError):  # unassigned meanwhile: nothing to give back
                    c._subs.seek(tp, records[0].offset, None)
                continue
            kept[tp] = records
        return kept

    async def _before_collect(self) -> bool:
        c = self._c
        c._drain_background()  # outside poll's callback step: rebalance callbacks are only queued
        if self._callbacks_runnable():
            early: bool = await self._run_phase(c._before_collect)
            return early
        c._raise_pending_error()
        early = c._dispatch.take_early_return()
        return early

    async def _collect(self) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to ``max.poll.records`` records, decoded in slices; yields to the loop between slices once a
        slice budget (``decode_slice_ms``) is used up."""
        collector = self._c._collector
        limit = collector._max
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        count = 0
        started = time.perf_counter()
        try:
            while count < limit:
                if self._slice_decode:
                    current = collector._next_fetch()
                    if (
                        current is not None
                        and not current.initialized
                        and current.error is None
                        and len(current.records or b"") > 2 * _DECODE_CHUNK_BYTES
                    ):
                        await self._decode_in_slices(current)
                        started = time.perf_counter()
                got = collector.collect(max_records=min(self._slice_records, limit - count))
                if not got:
                    break
                for tp, recs in got.items():
                    have = out.get(tp)
                    if have is None:
                        out[tp] = recs
                    else:
                        have.extend(recs)
                    count += len(recs)
                if count < limit and time.perf_counter() - started >= self._slice_s:
                    await asyncio.sleep(0)
                    started = time.perf_counter()
        except asyncio.CancelledError:
            if out:
                self._carry = out  # their positions moved: the next poll() returns them
            raise
        except Exception as exc:
            if not out:
                raise
            self._carry_error = exc  # records first; the error comes from the next poll()
        return out

    async def _decode_in_slices(self, fetch: CompletedFetch) -> None:
        """Decode a large fetched partition chunk by chunk (whole record batches), yielding to the loop
        whenever a slice budget is used up, and hand the collector the merged result.  Not under
        ``read_committed``: the aborted-transaction state spans batches (such fetches decode at once)."""
        data = fetch.records or b""
        merged = DecodedRecords(fetch.tp.topic, fetch.tp.partition, fetch.fetch_offset)
        offset = fetch.fetch_offset
        started = time.perf_counter()
        for chunk in _split_batches(data, _DECODE_CHUNK_BYTES):
            part = decode_batches(
                chunk,
                topic=fetch.tp.topic,
                partition=fetch.tp.partition,
                check_crcs=self._check_crcs,
                start_offset=offset,
            )
            merged.records.extend(part.records)
            merged.batches += part.batches
            merged.control_batches += part.control_batches
            merged.bytes_consumed += part.bytes_consumed
            merged.partial_bytes = part.partial_bytes
            if part.batches:
                merged.last_epoch = part.last_epoch
            merged.next_offset = offset = part.next_offset
            if part.error is not None:
                merged.error = part.error
                break
            if time.perf_counter() - started >= self._slice_s:
                await asyncio.sleep(0)
                started = time.perf_counter()
                if fetch.initialized:  # decoded meanwhile (cannot happen while poll() runs; be safe)
                    return
        fetch.decoded = merged
        fetch.initialized = True
        fetch.next_index = 0

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """``async for record in consumer``: one record at a time (polls as needed; never ends)."""
        records = self._iter
        while not records:
            records.extend(await self.poll(self._iter_timeout_s))
        return records.popleft()

    # ============================================================================== KIP-983
    def to_be_revoked_partitions(self) -> frozenset[TopicPartition]:
        self._check()
        return self._c.to_be_revoked_partitions()

    def lost_partitions(self) -> frozenset[TopicPartition]:
        self._check()
        return self._c.lost_partitions()

    def delay_revoke(self, partitions: Iterable[TopicPartition]) -> bool:
        self._check()
        return self._c.delay_revoke(partitions)

    def set_rebalance_listener(self, listener: object | None) -> None:
        """Set (``None``: remove) the rebalance listener: an object with any of ``on_partitions_assigned``,
        ``on_partitions_revoked``, ``on_partitions_lost``, each ``def`` or ``async def`` (see
        ``kafka_handoff.aio.listener``).  Takes effect at the next ``poll()``."""
        c = self._check()
        c.set_rebalance_listener(
            None if listener is None else LoopListener(listener, self._bridge, self._worker)
        )

    # ============================================================================== group
    async def subscribe(
        self, topics: Iterable[str] | re.Pattern[str] | str, listener: object | None = None
    ) -> None:
        """Join the group for ``topics`` on the next ``poll()``.

        ``listener`` is deprecated (as for the synchronous consumer, KIP-1306): use
        :meth:`set_rebalance_listener`.
        """
        c = self._check()
        if listener is not None:
            self.set_rebalance_listener(listener)  # validates it first
            warnings.warn(
                "subscribe(..., listener=...) is deprecated; call consumer.set_rebalance_listener(listener) "
                "instead",
                DeprecationWarning,
                stacklevel=2,
            )
        topics_ = topics if isinstance(topics, (str, re.Pattern)) else list(topics)
        await self._settle()
        subscription = c._subscribe_prepare(topics_, None, stacklevel=4)
        if subscription is None:  # an empty topic list: as the synchronous subscribe(), unsubscribe
            await self._unsubscribe()
            return
        await self._native_step(SubscribeEvent(subscription=subscription))

    async def unsubscribe(self) -> None:
        self._check()
        await self._settle()
        await self._unsubscribe()

    async def _unsubscribe(self) -> None:
        c = self._c
        self._rewind_iterator()
        if c.membership is not None and c._subs.has_auto_assignment:
            # Leaving the group runs the revoke callbacks (and the auto-commit before them): on the worker.
            await self._run_phase(c.unsubscribe)
            return
        await self._native_step(UnsubscribeEvent(), internal=True, then=lambda _: c._unsubscribe_done())
        # As the synchronous unsubscribe(): a callback error of the leave is raised once it completed.
        errors = c._dispatch.take_leave_errors()
        if errors:
            c._errors.extendleft(reversed(errors[1:]))
            raise errors[0]

    async def assign(self, partitions: Iterable[TopicPartition]) -> None:
        c = self._check()
        await self._settle()
        parts = c._assign_prepare(partitions)
        await self._native_step(AssignEvent(partitions=tuple(parts)), then=lambda _: c._assign_done(parts))

    def assignment(self) -> frozenset[TopicPartition]:
        return self._check().assignment()

    def subscription(self) -> frozenset[str]:
        return self._check().subscription()

    async def enforce_rebalance(self, reason: str = "") -> None:
        c = self._check()
        await self._settle()
        if c.membership is not None:
            await self._native_step(EnforceRebalanceEvent(reason=reason or "enforce_rebalance()"))

    async def group_metadata(self) -> ConsumerGroupMetadata:
        c = self._check()
        await self._settle()
        if c.group_id is None:
            raise KafkaError("group_metadata() needs a group.id")
        meta: ConsumerGroupMetadata = await self._native_step(GroupMetadataEvent())
        return meta

    # ============================================================================== commits
    async def commit(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Commit ``offsets`` (default: the consumed positions) and await the broker's answer."""
        c = self._check()
        c._require_group("commit()")
        if not self._phase_running():
            # Errors the network thread posted (as Consumer.commit_sync).  Not while a rebalance step runs on
            # the worker: draining the queue there is that step's job (it may run callbacks).
            c._raise_background_errors()
        event, timeout_ms = c._commit_event(offsets, self._consumed_offsets, timeout, "commit()")
        await self._native(event, timeout_ms, "commit()")

    commit_sync = commit

    def _rewind_iterator(self) -> None:
        """Give back the records the ``async for`` iterator holds but has not yielded: each partition is
        sought back to the first of them, so no commit (the one before a revoke, on close) counts them as
        consumed and nobody loses them."""
        if not self._iter:
            return
        first: dict[TopicPartition, int] = {}
        for record in self._iter:
            first.setdefault(TopicPartition(record.topic, record.partition), record.offset)
        self._iter.clear()
        owned = self._c._subs.assigned()
        for tp, offset in first.items():
            if tp in owned:
                self._c.seek(tp, offset)

    def _consumed_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """The consumed positions, except that a partition with records still waiting in the ``async for``
        iterator's buffer commits up to the first of them (they were not handed to the application yet)."""
        offsets = self._c._consumed_offsets()
        if self._iter:
            first: dict[TopicPartition, int] = {}
            for record in self._iter:
                tp = TopicPartition(record.topic, record.partition)
                if tp not in first:
                    first[tp] = record.offset
            for tp, offset in first.items():
                if tp in offsets:
                    offsets[tp] = OffsetAndMetadata(offset, "", offsets[tp].leader_epoch)
        return offsets

    def commit_async(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None
    ) -> asyncio.Future[None]:
        """Start a commit without waiting; the returned future (of this loop) has its outcome."""
        c = self._check()
        return self._bridge.wrap(c.commit_async(self._consumed_offsets() if offsets is None else offsets))

    async def committed(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        c = self._check()
        event, timeout_ms = c._committed_event(partitions, timeout)
        result: dict[TopicPartition, OffsetAndMetadata | None] = await self._native(
            event, timeout_ms, "committed()"
        )
        return result

    async def _native(self, event: ApplicationEvent, timeout_ms: int, what: str) -> Any:
        """A network-thread call awaited through the bridge (the async twin of ``Consumer._call``): the poll
        timer stands still meanwhile; a timeout or cancellation drops the outcome."""
        c = self._c
        membership = c.membership
        if membership is not None:
            c._thread.submit(AppCallEvent(inside=True))
        try:
            fut = c._thread.submit(event)
            try:
                return await asyncio.wait_for(self._bridge.wrap(fut), timeout_ms / 1000.0 + 0.05)
            except TimeoutError as exc:
                if isinstance(exc, KafkaTimeoutError):
                    raise
                raise KafkaTimeoutError(f"{what} did not complete within {timeout_ms} ms") from None
        finally:
            if membership is not None and not self._closed:
                c._thread.submit(AppCallEvent(inside=False))

    async def _native_step(
        self,
        event: ApplicationEvent,
        *,
        internal: bool = False,
        then: Callable[[Any], Any] | None = None,
    ) -> Any:
        """A quick state change or query on the network thread, awaited through the bridge (the async twin
        of ``Consumer._send``).  ``then(result)`` is the facade's application-thread step once the event
        completed; it runs on the loop even if the awaiting task was cancelled meanwhile, and the next call
        waits for it (as for a rebalance step of a cancelled ``poll()``)."""
        c = self._c
        # While leaving, pending errors do not abort the call: they stay queued (as Consumer._send).
        if internal or c._dispatch.leaving:
            c._drain_background()
        else:
            c._raise_background_errors()
        source = self._bridge.wrap(c._thread.submit(event))
        step: asyncio.Future[Any] = self._bridge.loop.create_future()

        def finish(done: asyncio.Future[Any]) -> None:
            if step.done():
                return
            if done.cancelled():
                step.cancel()
                return
            error = done.exception()
            if error is not None:
                step.set_exception(error)
                return
            try:
                result = done.result() if then is None else then(done.result())
            except Exception as exc:
                step.set_exception(exc)
            else:
                step.set_result(result)

        source.add_done_callback(finish)
        self._phase = step
        try:
            result = await asyncio.wait_for(asyncio.shield(step), _SEND_TIMEOUT_S)
        except TimeoutError as exc:
            if isinstance(exc, KafkaTimeoutError):
                raise
            if self._phase is step:
                self._phase = None
            step.cancel()
            raise KafkaTimeoutError(
                f"network thread call did not complete within {int(_SEND_TIMEOUT_S * 1000)} ms"
            ) from None
        if self._phase is step:
            self._phase = None
        return result

    async def _lookup(self, event: ApplicationEvent, timeout_ms: int, what: str) -> Any:
        """A lookup with the caller's timeout (the async twin of ``Consumer._call``)."""
        await self._settle()
        self._c._raise_background_errors()
        return await self._native(event, timeout_ms, what)

    # ============================================================================== positions
    async def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The offset of the next record that will be fetched, awaiting its initialisation if needed."""
        c = self._check()
        tp = TopicPartition(*partition)
        if not c._subs.is_assigned(tp):
            raise IllegalStateError(f"position() of partition {tp}, which is not assigned to this consumer")
        pos = c._subs.position(tp)
        if pos is not None:
            return pos.offset
        await self._settle()
        loop = self._bridge.loop
        deadline = loop.time() + c._timeout_ms(timeout) / 1000.0
        membership = c.membership
        if membership is not None:
            c._thread.submit(AppCallEvent(inside=True))  # the poll timer stands still meanwhile
        try:
            while (offset := c._position_round(tp, loop.time() >= deadline)) is None:
                await asyncio.sleep(_POSITION_RECHECK_S)
            return offset
        finally:
            if membership is not None and not self._closed:
                c._thread.submit(AppCallEvent(inside=False))

    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        self._check().seek(partition, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._check().seek_to_beginning(partitions)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._check().seek_to_end(partitions)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._check().pause(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._check().resume(partitions)

    def paused(self) -> frozenset[TopicPartition]:
        return self._check().paused()

    def current_lag(self, partition: TopicPartition) -> int | None:
        return self._check().current_lag(partition)

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        self._check()
        result = await self._list_offsets({tp: EARLIEST for tp in partitions}, timeout, "beginning_offsets")
        return {tp: (v.offset if v is not None else 0) for tp, v in result.items()}

    async def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        self._check()
        result = await self._list_offsets({tp: LATEST for tp in partitions}, timeout, "end_offsets")
        return {tp: (v.offset if v is not None else 0) for tp, v in result.items()}

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        c = self._check()
        ts = dict(timestamps)
        c._check_target_times(ts)
        return await self._list_offsets(ts, timeout, "offsets_for_times")

    async def _list_offsets(
        self, timestamps: Mapping[TopicPartition, int], timeout: float | None, what: str
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        c = self._c
        prepared = c._list_offsets_event(timestamps, timeout, what)
        if prepared is None:
            return {}
        event, topics, timeout_ms = prepared
        try:
            result: dict[TopicPartition, OffsetAndTimestamp | None] = await self._lookup(
                event, timeout_ms, what
            )
        finally:
            if not self._closed:
                c._thread.submit(ReleaseMetadataTopicsEvent(topics=topics))
        return result

    async def _fresh_metadata(
        self, topics: frozenset[str] | None, timeout: float | None, what: str
    ) -> ClusterMetadata:
        c = self._c
        timeout_ms = c._timeout_ms(timeout)
        event = MetadataUpdateEvent(topics=topics, deadline_ms=c._deadline_ms(timeout_ms), name=what)
        cluster: ClusterMetadata = await self._lookup(event, timeout_ms, what)
        return cluster

    async def partitions_for(self, topic: str, timeout: float | None = None) -> list[PartitionInfo]:
        c = self._check()
        cluster = await self._fresh_metadata(frozenset({topic}), timeout, "partitions_for()")
        return c._partitions_of(cluster, topic)

    async def list_topics(self, timeout: float | None = None) -> dict[str, list[PartitionInfo]]:
        c = self._check()
        return c._topics_of(await self._fresh_metadata(None, timeout, "list_topics()"))

    def metrics(self) -> dict[str, float]:
        return self._c.metrics()

    async def client_instance_id(self, timeout: float = 30.0) -> uuid.UUID | None:
        c = self._check()
        return await self._blocking(lambda: c.client_instance_id(timeout))

    # ============================================================================== close
    async def close(self, timeout: float | None = 30.0) -> None:
        """Leave the group (the revoke callback runs, awaited, on this loop), commit if auto-commit is on
        and stop.  Returns within about ``timeout`` seconds even if brokers are unreachable."""
        self._bridge.check()
        if self._closed:
            return
        c = self._c
        self._rewind_iterator()
        self._closed = True
        limit = (30.0 if timeout is None else max(0.0, timeout)) + 5.0
        fut: asyncio.Future[None]
        if self._phase_running() or c._close_leaves_group():
            # Leaving the group runs the revoke callbacks (and the auto-commit before them): on the worker,
            # queued behind a rebalance step still running there, so it never overlaps one.
            fut = self._worker.submit(lambda: c.close(timeout))
        else:
            fut = asyncio.ensure_future(self._close_native(timeout))
        try:
            await asyncio.wait_for(asyncio.shield(fut), limit)
        except TimeoutError:
            if not fut.done():
                raise KafkaTimeoutError(f"close() did not complete within {limit:.0f} s") from None
            raise
        finally:
            c._buffer.on_signal = None
            self._worker.stop()

    async def _close_native(self, timeout: float | None) -> None:
        """``Consumer.close`` without a group to leave, each wait awaited on the loop: the auto-commit of
        the owned positions, the terminating telemetry push, the end of the network thread."""
        c = self._c
        bridge = self._bridge
        timeout_ms = c._timeout_ms(timeout)
        start = time.monotonic()

        def left_ms() -> int:
            return timeout_ms - int((time.monotonic() - start) * 1000)

        if c._commits is not None and c._commits.auto_commit and c._subs.assigned():
            offsets = c._consumed_offsets()
            owned_fut = c._thread.submit(OwnedPartitionsEvent())
            if await bridge.wait_future(owned_fut, max(0, left_ms()) / 1000.0):
                owned = _result_or_none(owned_fut)  # None: the network thread stopped
                if owned is not None:
                    offsets = {tp: o for tp, o in offsets.items() if tp in owned}
            left = left_ms()
            if offsets and left > 0:
                commit = c._thread.submit(CommitEvent(offsets=offsets, timeout_ms=left, retry=True))
                if (
                    not await bridge.wait_future(commit, left / 1000.0)
                    or _result_or_none(commit, True) is None
                ):
                    log.debug("auto-commit on close failed or did not complete")
        left = left_ms()
        if left > 0 and c._telemetry.enabled:  # KIP-714: the terminating push
            pushed = c._thread.submit(TerminateTelemetryEvent())
            if not await bridge.wait_future(pushed, left / 1000.0):
                log.debug("terminating telemetry push did not complete")
        c._closed = True
        left = max(0, left_ms())
        c._thread.begin_close(left)
        await bridge.wait_stopped(c._thread, left / 1000.0 + 2.0)
        c._close_finish()

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self.close()


def _split_batches(data: bytes, chunk_bytes: int) -> list[bytes]:
    """``data`` (a partition's fetched record batches) cut into pieces of about ``chunk_bytes`` at batch
    boundaries; whatever does not parse as a whole batch stays in the last piece (the decoder reports it)."""
    pieces: list[bytes] = []
    n = len(data)
    start = pos = 0
    while pos + 12 <= n:
        length = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
        end = pos + 12 + length
        if length <= 0 or end > n:
            break
        pos = end
        if pos - start >= chunk_bytes:
            pieces.append(data[start:pos])
            start = pos
    if start < n or not pieces:
        pieces.append(data[start:])
    return pieces


def _result_or_none(future: Future[Any], done_marker: bool = False) -> Any:
    """A completed future's result (``done_marker``: True instead of it), or None if it failed."""
    if future.cancelled() or future.exception() is not None:
        return None
    return True if done_marker else future.result()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
