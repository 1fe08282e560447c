"""The fetch buffer: completed fetches handed from the network thread to the application thread.

:class:`CompletedFetch` (one partition's fetched bytes, or its error) and :class:`FetchBuffer` (the queue and
the application thread's wake-up point) live here, apart from the fetch manager in
:mod:`kafka_handoff.consumer.fetcher`, because the position validator (:mod:`.validation`) adds failed
validations to the same buffer and the fetcher drives the validator: both import this module, neither
imports the other.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka_handoff.types import TopicPartition

__all__ = ["CompletedFetch", "FetchBuffer"]


@dataclass(slots=True)
class CompletedFetch:
    tp: TopicPartition
    fetch_offset: int
    position_epoch: int
    records: bytes | None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: tuple[tuple[int, int], ...] = ()
    error: BaseException | None = None
    # Filled in by the collector as it consumes the batch:
    decoded: Any = None
    next_index: int = 0
    initialized: bool = False


@dataclass(slots=True)
class FetchBuffer:
    """Completed fetches waiting for the application thread; also the app thread's wake-up point."""

    _queue: collections.deque[CompletedFetch] = field(default_factory=collections.deque)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _buffered: set[TopicPartition] = field(default_factory=set)
    _woken: bool = False
    bytes_buffered: int = 0
    """Bytes of the fetches waiting in the queue (the collector's current fetch not included)."""
    _peak: int = 0
    on_release: Callable[[], None] | None = None
    """Called (on the application thread) when a partition was released and the buffer is down to its low
    water mark: set by the consumer to wake the network thread, so the next fetch goes out while the rest
    of the buffered data is handed out, instead of once the buffer ran dry."""
    on_signal: Callable[[], None] | None = None
    """Called (on any thread, outside the lock) after data was added or a waiter was notified or woken: the
    asyncio facade (kafka_handoff.aio) wakes its event loop with it instead of waiting on the condition."""

    def add(self, fetches: list[CompletedFetch]) -> None:
        with self._cond:
            for f in fetches:
                self._queue.append(f)
                self._buffered.add(f.tp)
                self.bytes_buffered += len(f.records or b"")
            self._peak = self.bytes_buffered
            self._cond.notify_all()
        if self.on_signal is not None:
            self.on_signal()

    def below_low_water(self) -> bool:
        """True when the queue is empty or holds at most half of what it held after the last fetch arrived.

        The fetch manager sends the next fetch only then (one fetch per broker is in flight at a time):
        released partitions are collected into one large fetch, sent early enough to arrive while the
        other half is handed out.  Sending one small fetch per released partition instead costs a full
        round trip per partition, and with the GIL shared by both threads, far more time than it saves.
        """
        with self._cond:
            return self.bytes_buffered == 0 or self.bytes_buffered * 2 <= self._peak

    def has_buffered(self, tp: TopicPartition) -> bool:
        with self._cond:
            return tp in self._buffered

    def buffered_partitions(self) -> set[TopicPartition]:
        with self._cond:
            return set(self._buffered)

    def peek(self) -> CompletedFetch | None:
        with self._cond:
            return self._queue[0] if self._queue else None

    def pop(self) -> CompletedFetch | None:
        with self._cond:
            if not self._queue:
                return None
            f = self._queue.popleft()
            self.bytes_buffered -= len(f.records or b"")
            return f

    def done_with(self, tp: TopicPartition) -> None:
        """The collector has fully consumed (or dropped) the partition's fetch: it may be fetched again."""
        with self._cond:
            if tp not in self._buffered:
                return
            self._buffered.discard(tp)
            wake = self.bytes_buffered == 0 or self.bytes_buffered * 2 <= self._peak
        if wake and self.on_release is not None:
            self.on_release()

    def push_front(self, f: CompletedFetch) -> None:
        with self._cond:
            self._queue.appendleft(f)
            self.bytes_buffered += len(f.records or b"")

    def drop(self, keep: Callable[[TopicPartition], bool]) -> None:
        with self._cond:
            kept = collections.deque(f for f in self._queue if keep(f.tp))
            for f in self._queue:
                if not keep(f.tp):
                    self._buffered.discard(f.tp)
            self._queue = kept
            self.bytes_buffered = sum(len(f.records or b"") for f in kept)

    def notify(self) -> None:
        with self._cond:
            self._cond.notify_all()
        if self.on_signal is not None:
            self.on_signal()

    def wakeup(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify_all()
        if self.on_signal is not None:
            self.on_signal()

    def take_wakeup(self) -> bool:
        with self._cond:
            woken, self._woken = self._woken, False
            return woken

    def wait(self, timeout_s: float, ready: Callable[[], bool]) -> None:
        """Block until ``ready()`` (evaluated under the lock), a wakeup, or the timeout."""
        with self._cond:
            if ready() or self._woken:
                return
            self._cond.wait(timeout_s)

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)
