"""The record accumulator: per-partition queues of batches between ``send()`` and the network thread.

``send()`` appends to the last open batch of the record's partition (a new batch once ``batch.size`` is
reached); the network thread asks which brokers have something to send (:meth:`RecordAccumulator.ready`)
and takes batches off the queues (:meth:`RecordAccumulator.drain`).  Behaviour follows the Java client's
``RecordAccumulator``:

* a partition's first batch is *sendable* when it is full (or not the only batch), when it waited
  ``linger.ms``, when a flush or close is in progress, or when senders are blocked waiting for memory;
  a broker is *ready* when one of its partitions is sendable -- and then every partition it leads gives its
  first batch to the request (up to ``max.request.size``);
* memory is bounded: every batch reserves ``max(batch.size, record size)`` bytes of ``buffer.memory`` until
  its outcome is delivered; ``send()`` blocks up to ``max.block.ms`` for memory, then fails;
* batches waiting longer than ``delivery.timeout.ms`` expire;
* a batch that failed with a retriable error goes back to the head of its queue (in sequence order with
  idempotence) and waits ``retry.backoff.ms`` (doubling up to ``retry.backoff.max.ms``, +-20% jitter).

Thread-safety: one lock guards all queues; ``send()`` holds it only for the append itself.  Times are
passed in by the caller (``now_ms``); only the memory wait in :meth:`append` blocks (on a condition).
"""

from __future__ import annotations

import collections
import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kafka_handoff.errors import IllegalStateError, KafkaTimeoutError
from kafka_handoff.producer.batch import (
    RECORD_OVERHEAD_ESTIMATE,
    Callback,
    Entry,
    ProducerBatch,
    append_values,
)
from kafka_handoff.producer.partitioner import BuiltInPartitioner
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.compression import CompressionType
from kafka_handoff.protocol.records import RECORD_BATCH_OVERHEAD
from kafka_handoff.protocol.requests import MonotonicClock
from kafka_handoff.types import TopicPartition

__all__ = ["ReadyCheck", "RecordAccumulator"]

_FAR: Final = 1 << 62
_COMPRESSION_ESTIMATION_FACTOR: Final = 1.05
_RATIO_DETERIORATE_STEP: Final = 0.05
_RATIO_IMPROVE_STEP: Final = 0.005


class _TopicInfo:
    __slots__ = ("available", "num_partitions", "open_batch", "partitioner", "tps")

    def __init__(
        self,
        topic: str,
        num_partitions: int,
        available: Sequence[int],
        sticky_batch_size: int,
        rng: random.Random,
    ) -> None:
        self.num_partitions = num_partitions
        self.available: tuple[int, ...] = tuple(available)
        self.tps = tuple(TopicPartition(topic, p) for p in range(num_partitions))
        self.partitioner = BuiltInPartitioner(topic, sticky_batch_size, rng)
        self.open_batch: ProducerBatch | None = None
        """The last batch of the current sticky partition (the unkeyed fast path appends to it)."""


@dataclass(slots=True)
class ReadyCheck:
    """What :meth:`RecordAccumulator.ready` found."""

    nodes: set[int] = field(default_factory=set)
    next_ready_ms: int = _FAR
    """The earliest time a partition that is not sendable yet becomes sendable (linger, backoff)."""
    unknown_leader_topics: set[str] = field(default_factory=set)
    expired: list[ProducerBatch] = field(default_factory=list)
    """Queued batches past ``delivery.timeout.ms`` (removed from their queues)."""
    next_expiry_ms: int = _FAR


class RecordAccumulator:
    def __init__(
        self,
        *,
        batch_size: int = 16384,
        linger_ms: int = 5,
        buffer_memory: int = 33554432,
        compression: CompressionType = CompressionType.NONE,
        max_request_size: int = 1048576,
        delivery_timeout_ms: int = 120000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        adaptive_partitioning: bool = True,
        rng: random.Random | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.batch_size = max(1, batch_size)
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self.compression = compression
        self.max_request_size = max_request_size
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_ms, retry_backoff_max_ms)
        self.adaptive = adaptive_partitioning
        self._rng = rng if rng is not None else random.Random()
        self._clock: Callable[[], int] = clock if clock is not None else MonotonicClock().now_ms
        """Monotonic milliseconds (the network thread's clock): batch creation times, memory waits."""
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)
        self._batches: dict[TopicPartition, collections.deque[ProducerBatch]] = {}
        self._topics: dict[str, _TopicInfo] = {}
        self._used = 0
        self._waiting = 0
        self._incomplete: set[ProducerBatch] = set()
        self._flushes = 0
        self._closed = False
        self._drain_index: dict[int, int] = {}
        self._ratio: dict[str, float] = {}
        self.wait_time_ns_total = 0
        # Wakeup bookkeeping (see append/ready/finish_poll): when the network thread will look next, and
        # whether a batch appeared since it last looked.
        self._next_check_ms = 0
        self._new_data = False
        self._coalescing = False
        """The network thread looks again by ``_next_check_ms`` anyway (requests are in flight): appends do
        not wake it (see :meth:`finish_poll`)."""
        self.coalesce_ms = min(max(0, linger_ms), 2)
        """How long a batch that became sendable may wait for the network thread while requests are in
        flight (0: wake it at once, as always without requests in flight)."""
        self.on_batch_full: Callable[[ProducerBatch], None] | None = None
        """Called (outside the lock, on the appending thread) with a batch an append closed because it was
        full: the producer compresses it there (:meth:`ProducerBatch.prepare`), off the network thread."""
        self.waker: Callable[[], None] | None = None
        """Wakes the network thread (called before ``send()`` blocks for memory: everything becomes
        sendable then)."""

    # ------------------------------------------------------------------ topics
    def update_topic(self, topic: str, num_partitions: int, available: Sequence[int]) -> None:
        """New metadata for ``topic`` (partition count and the partitions that have a leader)."""
        with self._lock:
            info = self._topics.get(topic)
            if info is None or info.num_partitions != num_partitions:
                self._topics[topic] = _TopicInfo(topic, num_partitions, available, self.batch_size, self._rng)
            else:
                info.available = tuple(available)

    def has_topic(self, topic: str) -> bool:
        return topic in self._topics

    # ------------------------------------------------------------------ append (caller's thread)
    def append(
        self,
        topic: str,
        partition: int | None,
        entry: Entry,
        size: int,
        now_ms: int | None = None,
        max_block_ms: int = 0,
    ) -> bool:
        """Append one record ``entry`` (estimated ``size`` bytes); ``partition=None`` uses the topic's
        sticky partition.  ``now_ms`` is when the send started (default: now), from which ``max_block_ms``
        counts.

        Returns True when the network thread must be woken: a batch became sendable (full, or a new one
        that lingers) earlier than the network thread planned to look again.  Blocks up to
        ``max_block_ms`` for buffer memory, then raises :class:`KafkaTimeoutError`; raises
        :class:`IllegalStateError` once closed.
        """
        with self._lock:
            # Fast path: the record fits the partition's open batch.
            info = self._topics.get(topic)
            if info is not None and not self._closed:
                if partition is None:
                    last = info.open_batch
                    if last is not None and not last.closed and last.size + size <= last.limit:
                        pt = info.partitioner
                        if pt.produced + size < pt.switch_bytes:
                            last.entries.append(entry)
                            last.size += size
                            pt.produced += size
                            return False
                elif partition < info.num_partitions:
                    dq = self._batches.get(info.tps[partition])
                    if dq:
                        last = dq[-1]
                        if not last.closed and last.size + size <= last.limit:
                            last.entries.append(entry)
                            last.size += size
                            return False
            full: list[ProducerBatch] = []
            wake = self._append_slow(topic, partition, entry, size, now_ms, max_block_ms, full)
        if full and self.on_batch_full is not None:
            self.on_batch_full(full[0])  # outside the lock
        return wake

    def append_many(
        self,
        topic: str,
        partition: int | None,
        values: list[Any],
        keys: list[Any] | None,
        timestamp: int,
        callback: Callback | None,
        convert: Callable[[Any, Any], tuple[bytes | None, bytes | None, int]],
        started_ms: int | None = None,
        max_block_ms: int = 0,
        progress: list[int] | None = None,
    ) -> bool:
        """Append ``values`` (with ``keys``, or without keys) as records of one timestamp, in order, to
        ``partition`` or, when None, to the topic's sticky partition (the caller partitions keyed records).
        Runs of records that fit the open batch are appended by one C call; the record that starts a new
        batch goes through the ordinary path (:meth:`append`'s slow path, which may block for memory).
        ``convert(key, value) -> (key bytes, value bytes, size estimate)`` prepares the record the bulk loop
        stopped at (a full batch, or an item that is not bytes).  The lock is taken per batch, not for the
        whole call, so the network thread drains meanwhile.

        Returns True when the network thread must be woken (see :meth:`append`).  ``progress[0]`` is set to
        the number of records appended, also when this raises (closed, memory timeout, conversion error).
        """
        wake = False
        i = 0
        n = len(values)
        overhead = RECORD_OVERHEAD_ESTIMATE
        full: list[ProducerBatch] = []
        try:
            while i < n:
                with self._lock:
                    info = self._topics.get(topic)
                    if info is not None and not self._closed:
                        last: ProducerBatch | None = None
                        room = 0
                        pt = info.partitioner
                        if partition is None:
                            last = info.open_batch
                            if last is not None and not last.closed:
                                room = min(last.limit - last.size, pt.switch_bytes - pt.produced - 1)
                        elif partition < info.num_partitions:
                            dq = self._batches.get(info.tps[partition])
                            if dq:
                                last = dq[-1]
                                if not last.closed:
                                    room = last.limit - last.size
                        if last is not None and room > 0:
                            count, used = append_values(
                                last.entries, values, keys, i, timestamp, callback, room, overhead
                            )
                            if count:
                                last.size += used
                                if partition is None:
                                    pt.produced += used
                                i += count
                                if i >= n:
                                    break
                    key, value, size = convert(None if keys is None else keys[i], values[i])
                    entry: Entry = (key, value, timestamp, None, None, callback)
                    if self._append_slow(topic, partition, entry, size, started_ms, max_block_ms, full):
                        wake = True
                    i += 1
                if full:
                    if self.on_batch_full is not None:
                        self.on_batch_full(full[0])  # outside the lock
                    full.clear()
        finally:
            if progress is not None:
                progress[0] = i
        return wake

    def _append_slow(
        self,
        topic: str,
        partition: int | None,
        entry: Entry,
        size: int,
        started_ms: int | None,
        max_block_ms: int,
        full: list[ProducerBatch] | None = None,
    ) -> bool:
        # Called with the lock held.  A batch this closes because it is full is added to ``full``.
        clock = self._clock
        now_ms = clock()
        deadline = (now_ms if started_ms is None else started_ms) + max_block_ms
        while True:
            if self._closed:
                raise IllegalStateError("cannot send: the producer is closed")
            info = self._topics.get(topic)
            if info is None:
                raise IllegalStateError(f"no metadata for topic {topic!r}")  # the producer waits first
            sticky = partition is None
            if partition is None:
                part = info.partitioner.partition(info.num_partitions, info.available)
                dq = self._batches.get(info.tps[part])
                if not dq or dq[-1].closed:
                    # Java: every batch of the sticky partition is full or sent -> maybe switch now.
                    info.partitioner.on_append(part, 0, True, info.num_partitions, info.available)
                    part = info.partitioner.partition(info.num_partitions, info.available)
                    dq = self._batches.get(info.tps[part])
            else:
                part = partition
                if part >= info.num_partitions:
                    raise IllegalStateError(f"partition {part} of {topic} does not exist")
                dq = self._batches.get(info.tps[part])
            tp = info.tps[part]
            ready_at = now_ms + self.linger_ms
            if dq:
                last = dq[-1]
                if not last.closed:
                    if last.size + size <= last.limit:
                        last.entries.append(entry)
                        last.size += size
                        if sticky:
                            self._after_sticky_append(info, part, last, size)
                        return False
                    last.closed = True  # full: no more appends, sendable
                    if full is not None:
                        full.append(last)
                    ready_at = now_ms
            need = max(self.batch_size, size + RECORD_BATCH_OVERHEAD)
            if self._used + need <= self.buffer_memory:
                break
            # Wait for memory (Java: BufferPool.allocate), then start over: the partition may change.
            now = clock()
            remaining = deadline - now
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"failed to allocate {need} bytes within the configured max blocking time "
                    f"{max_block_ms} ms (total memory: {self.buffer_memory} bytes, available: "
                    f"{self.buffer_memory - self._used} bytes; buffer.memory)"
                )
            self._waiting += 1
            if self.waker is not None:
                self.waker()
            try:
                self._space.wait(remaining / 1000.0)
            finally:
                self._waiting -= 1
            now_ms = clock()
            self.wait_time_ns_total += max(0, now_ms - now) * 1_000_000
        self._used += need
        batch = ProducerBatch(tp, now_ms, self._limit(topic), need)
        batch.entries.append(entry)
        batch.size += size
        if dq is None:
            dq = self._batches[tp] = collections.deque()
        dq.append(batch)
        self._incomplete.add(batch)
        if sticky:
            self._after_sticky_append(info, part, batch, size)
        self._new_data = True
        if ready_at < self._next_check_ms and not self._coalescing:
            self._next_check_ms = ready_at
            return True
        return False

    def _after_sticky_append(self, info: _TopicInfo, part: int, batch: ProducerBatch, size: int) -> None:
        pt = info.partitioner
        pt.on_append(part, size, False, info.num_partitions, info.available)
        current = pt.current
        if current == part:
            info.open_batch = batch
        elif 0 <= current < info.num_partitions:
            # Switched: the new sticky partition's open batch, if it has one, takes the next records on the
            # fast path (what _append_slow would do with them: append while they fit).
            dq = self._batches.get(info.tps[current])
            info.open_batch = dq[-1] if dq and not dq[-1].closed else None
        else:
            info.open_batch = None

    def _limit(self, topic: str) -> int:
        if self.compression == CompressionType.NONE:
            return self.batch_size
        ratio = self._ratio.get(topic, 1.0) * _COMPRESSION_ESTIMATION_FACTOR
        # Uncompressed bytes that should compress to about batch.size, capped by max.request.size (a batch
        # must fit a request; brokers limit batches to about 1 MB by default).
        return max(self.batch_size, min(int(self.batch_size / ratio), self.max_request_size))

    def update_compression_ratio(self, topic: str, observed: float) -> None:
        """Java's ``CompressionRatioEstimator``: adapt quickly upwards, slowly downwards."""
        current = self._ratio.get(topic, 1.0)
        if observed > current:
            self._ratio[topic] = max(current + _RATIO_DETERIORATE_STEP, observed)
        elif observed < current:
            self._ratio[topic] = max(current - _RATIO_IMPROVE_STEP, observed)

    # ------------------------------------------------------------------ network thread
    def backoff_ms(self, attempts: int) -> int:
        """The retry backoff before attempt ``attempts + 1`` (exponential, without jitter)."""
        return ExponentialBackoff(self.retry_backoff_ms, self.retry_backoff_max_ms, jitter=0).after_failures(
            attempts
        )

    def ready(self, leaders: Mapping[TopicPartition, int], now_ms: int) -> ReadyCheck:
        """Which brokers have a sendable batch; expires queued batches past the delivery timeout."""
        result = ReadyCheck()
        nodes = result.nodes
        linger = self.linger_ms
        delivery = self.delivery_timeout_ms
        with self._lock:
            self._new_data = False
            force = self._flushes > 0 or self._closed or self._waiting > 0
            for tp, dq in self._batches.items():
                if not dq:
                    continue
                while dq:
                    first = dq[0]
                    expires = first.created_ms + delivery
                    if expires <= now_ms:
                        dq.popleft()
                        first.closed = True
                        result.expired.append(first)
                        continue
                    if expires < result.next_expiry_ms:
                        result.next_expiry_ms = expires
                    break
                if not dq:
                    continue
                leader = leaders.get(tp, -1)
                if leader < 0:
                    result.unknown_leader_topics.add(tp.topic)
                    continue
                if leader in nodes:
                    continue
                first = dq[0]
                if first.attempts > 0:
                    if first.retry_at_ms > now_ms and first.sent_to in (leader, -1):
                        result.next_ready_ms = min(result.next_ready_ms, first.retry_at_ms)
                        continue
                    nodes.add(leader)  # backoff over, or the leader moved (KIP-951: no backoff then)
                    continue
                if force or len(dq) > 1 or first.closed:
                    nodes.add(leader)
                    continue
                sendable_at = first.created_ms + linger
                if sendable_at <= now_ms:
                    nodes.add(leader)
                else:
                    result.next_ready_ms = min(result.next_ready_ms, sendable_at)
            if self.adaptive:
                self._update_load_stats(leaders)
        return result

    def finish_poll(self, next_check_ms: int, coalescing: bool = False) -> bool:
        """The network thread will look again at ``next_check_ms``.  Returns True when a batch was created
        since :meth:`ready` ran (then it must look again at once instead).

        ``coalescing``: requests are in flight and ``next_check_ms`` is at most :attr:`coalesce_ms` away, so
        the network thread looks again soon in any case: until then a batch that becomes sendable does not
        wake it.  Under the GIL every wake-up costs a whole poll of the network thread, which then sends
        one batch per request; gathered for a moment, the batches go several to a request."""
        with self._lock:
            self._coalescing = coalescing
            if self._new_data and not coalescing:
                self._next_check_ms = 0
                return True
            self._next_check_ms = next_check_ms
            return False

    def _update_load_stats(self, leaders: Mapping[TopicPartition, int]) -> None:
        for info in self._topics.values():
            if info.partitioner.current < 0 or info.num_partitions < 2:
                continue
            sizes: list[int] = []
            ids: list[int] = []
            for p in info.available:
                tp = info.tps[p]
                if leaders.get(tp, -1) < 0:
                    continue
                dq = self._batches.get(tp)
                sizes.append(len(dq) if dq else 0)
                ids.append(p)
            info.partitioner.update_load_stats(sizes, ids, info.num_partitions)

    def drain(
        self,
        partitions_by_node: Mapping[int, Sequence[TopicPartition]],
        nodes: Iterable[int],
        max_request_size: int,
        now_ms: int,
        may_drain: Callable[[ProducerBatch], bool] | None = None,
        on_drained: Callable[[ProducerBatch], None] | None = None,
    ) -> dict[int, list[ProducerBatch]]:
        """Take up to ``max_request_size`` bytes of batches, one per partition, for each node.

        ``may_drain`` vetoes a partition's first batch (idempotence ordering); ``on_drained`` runs (under the
        lock) for each batch taken, e.g. to assign its sequence number."""
        out: dict[int, list[ProducerBatch]] = {}
        with self._lock:
            for node in nodes:
                parts = partitions_by_node.get(node)
                if not parts:
                    continue
                n = len(parts)
                start = self._drain_index.get(node, 0) % n
                size = 0
                taken: list[ProducerBatch] = []
                last_index = start
                for i in range(n):
                    index = (start + i) % n
                    dq = self._batches.get(parts[index])
                    if not dq:
                        continue
                    first = dq[0]
                    if first.attempts > 0 and first.retry_at_ms > now_ms and first.sent_to in (node, -1):
                        continue
                    estimate = self._wire_estimate(first)
                    if taken and size + estimate > max_request_size:
                        break
                    if may_drain is not None and not may_drain(first):
                        continue
                    dq.popleft()
                    first.closed = True
                    if on_drained is not None:
                        on_drained(first)
                    taken.append(first)
                    size += estimate
                    last_index = index
                if taken:
                    self._drain_index[node] = last_index + 1
                    out[node] = taken
        return out

    def _wire_estimate(self, batch: ProducerBatch) -> int:
        if batch.payload is not None:
            return len(batch.payload)
        if self.compression == CompressionType.NONE:
            return batch.size
        ratio = self._ratio.get(batch.topic, 1.0) * _COMPRESSION_ESTIMATION_FACTOR
        return RECORD_BATCH_OVERHEAD + int((batch.size - RECORD_BATCH_OVERHEAD) * ratio)

    def reenqueue(self, batch: ProducerBatch, now_ms: int, *, in_sequence_order: bool) -> None:
        """Put a batch that will be retried back at the head of its queue."""
        with self._lock:
            batch.attempts += 1
            batch.last_attempt_ms = now_ms
            backoff = self.backoff_ms(batch.attempts) * self._rng.uniform(0.8, 1.2)
            batch.retry_at_ms = now_ms + int(backoff)
            batch.in_flight = False
            dq = self._batches.get(batch.tp)
            if dq is None:
                dq = self._batches[batch.tp] = collections.deque()
            if in_sequence_order and batch.has_sequence and dq and dq[0].has_sequence:
                ahead: list[ProducerBatch] = []
                while dq and dq[0].has_sequence and dq[0].base_sequence < batch.base_sequence:
                    ahead.append(dq.popleft())
                dq.appendleft(batch)
                for b in reversed(ahead):
                    dq.appendleft(b)
            else:
                dq.appendleft(batch)

    def deallocate(self, batch: ProducerBatch) -> None:
        """The batch's outcome was delivered: release its memory and forget it."""
        with self._lock:
            if batch in self._incomplete:
                self._incomplete.discard(batch)
                self._used -= batch.memory
                if self._waiting:  # senders wait only while counted (under this lock)
                    self._space.notify_all()

    def abort_undrained(self) -> list[ProducerBatch]:
        """Remove and return every queued batch (close, fatal error)."""
        with self._lock:
            out: list[ProducerBatch] = []
            for dq in self._batches.values():
                while dq:
                    batch = dq.popleft()
                    batch.closed = True
                    out.append(batch)
            return out

    def remove_unsent(self) -> list[ProducerBatch]:
        """Remove and return every queued batch that was never sent (no sequence number yet: removing it
        leaves no gap); batches waiting for a retry stay.  Closes them, so no record is appended to them."""
        with self._lock:
            out: list[ProducerBatch] = []
            for dq in self._batches.values():
                if not dq:
                    continue
                keep = [b for b in dq if b.has_sequence]
                if len(keep) == len(dq):
                    continue
                for batch in dq:
                    if not batch.has_sequence:
                        batch.closed = True
                        out.append(batch)
                dq.clear()
                dq.extend(keep)
            return out

    # ------------------------------------------------------------------ flush / close / state
    def begin_flush(self) -> list[ProducerBatch]:
        """Make every batch sendable now; returns the batches not yet completed (to wait for)."""
        with self._lock:
            self._flushes += 1
            return list(self._incomplete)

    def end_flush(self) -> None:
        with self._lock:
            self._flushes -= 1

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._space.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def urgent(self) -> bool:
        """Everything is sendable at once: a flush or close is in progress, or senders wait for memory."""
        return self._flushes > 0 or self._closed or self._waiting > 0

    def has_undrained(self) -> bool:
        with self._lock:
            return any(self._batches.values())

    def incomplete(self) -> list[ProducerBatch]:
        with self._lock:
            return list(self._incomplete)

    @property
    def used_memory(self) -> int:
        return self._used

    @property
    def waiting_threads(self) -> int:
        return self._waiting

    def queue_heads(self) -> list[tuple[ProducerBatch, int]]:
        """The first queued batch of every partition that has one, with the number of queued records."""
        with self._lock:
            return [(dq[0], sum(len(b.entries) for b in dq)) for dq in self._batches.values() if dq]

    def queued_batches(self, tp: TopicPartition) -> list[ProducerBatch]:
        with self._lock:
            return list(self._batches.get(tp, ()))
