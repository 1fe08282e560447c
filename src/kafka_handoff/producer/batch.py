"""One producer batch: the records of one partition sent (and retried) together as one v2 record batch.

``send()`` appends records as plain tuples (cheap on the caller's thread); the network thread encodes the
whole batch once, when it is first drained, into a v2 record batch (magic 2, same layout as the Java
producer's ``MemoryRecordsBuilder``; decoded by :mod:`kafka_handoff.protocol.records`).  A retry re-sends the
very same bytes, so the broker sees the same producer id, epoch and sequence and de-duplicates.  When the
idempotence state machine must move a batch to a new epoch/sequence (after an epoch bump), only the
producer fields of the header are rewritten and the CRC recomputed, as Java's ``ProducerBatch`` does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Final

from kafka_handoff._native import load_extension
from kafka_handoff.protocol.compression import CompressionType, compress
from kafka_handoff.protocol.records import (
    ENCODER_IMPLEMENTATION,
    RECORD_BATCH_OVERHEAD,
    assemble_batch,
    encode_records,
    restamp_batch,
)
from kafka_handoff.types import RecordMetadata, TopicPartition

log = logging.getLogger(__name__)

__all__ = [
    "IMPLEMENTATION",
    "NO_SEQUENCE",
    "RECORD_OVERHEAD_ESTIMATE",
    "Callback",
    "Entry",
    "Header",
    "ProducerBatch",
    "append_values",
    "encode_records",
    "estimate_headers_size",
]

NO_SEQUENCE: Final = -1

#: Upper estimate of a record's bytes besides key, value and headers (length, attributes, timestamp delta,
#: offset delta, key/value lengths, header count) used to size batches before they are encoded.
RECORD_OVERHEAD_ESTIMATE: Final = 12

Callback = Callable[[RecordMetadata | None, BaseException | None], Any]
"""A send callback: ``callback(metadata, None)`` on success, ``callback(None, exception)`` on failure."""

Header = tuple[str, bytes | None]
# key, value, timestamp, headers, future (None: the caller asked for none), callback
Entry = tuple[
    bytes | None, bytes | None, int, Sequence[Header] | None, "Future[RecordMetadata] | None", Callback | None
]


def estimate_headers_size(headers: Sequence[Header]) -> int:
    size = 1
    for hkey, hvalue in headers:
        size += 10 + len(hkey) * 3 + (len(hvalue) if hvalue is not None else 0)
    return size


def _py_append_values(
    entries: list[Entry],
    values: list[Any],
    keys: list[Any] | None,
    start: int,
    timestamp: int,
    callback: Callback | None,
    room: int,
    overhead: int,
) -> tuple[int, int]:
    """Append ``(key, value, timestamp, None, None, callback)`` entries from ``values[start]`` on while their
    estimated sizes add up to at most ``room``; stops at an item that is not bytes or None.  Returns (count,
    size).  The bulk append of ``Producer.send_many`` (a C loop with the extension)."""
    used = 0
    i = start
    n = len(values)
    while i < n:
        value = values[i]
        key = None if keys is None else keys[i]
        size = overhead
        if value is not None:
            if type(value) is not bytes:
                break
            size += len(value)
        if key is not None:
            if type(key) is not bytes:
                break
            size += len(key)
        if used + size > room:
            break
        entries.append((key, value, timestamp, None, None, callback))
        used += size
        i += 1
    return i - start, used


AppendValues = Callable[
    [list[Entry], list[Any], "list[Any] | None", int, int, "Callback | None", int, int], tuple[int, int]
]


def _load_append_values() -> AppendValues:
    module = load_extension("kafka_handoff.producer._fastencode")
    fn: AppendValues = getattr(module, "append_values", _py_append_values)
    return fn


append_values: AppendValues = _load_append_values()
"""``append_values(entries, values, keys, start, timestamp, callback, room, overhead) -> (count, size)``."""

#: ``"c"`` when the ``_fastrecords`` extension encodes records (:data:`records.ENCODER_IMPLEMENTATION`).
IMPLEMENTATION: Final = ENCODER_IMPLEMENTATION


def _load_gc_hooks() -> tuple[Callable[[object], None] | None, Callable[[object], None] | None]:
    """``_fastencode``'s ``untrack``/``track`` (keep a batch's entries out of the garbage collector's
    sight), or ``(None, None)`` without the extension."""
    module = load_extension("kafka_handoff.producer._fastencode")
    untrack = getattr(module, "untrack", None) if module is not None else None
    track = getattr(module, "track", None) if module is not None else None
    if untrack is None or track is None:
        return None, None
    return untrack, track


_untrack, _track = _load_gc_hooks()
_event_lock = threading.Lock()  # ProducerBatch.done_event's creation against mark_done


class ProducerBatch:
    """Records for one partition; mutable state shared by the accumulator, sender and idempotence manager.

    Appends happen under the accumulator's lock until the batch is *closed* (drained or full); from then on
    only the network thread touches it, and the completion thread once it is done.
    """

    __slots__ = (
        "_completed",
        "_done_event",
        "_last_error",
        "attempts",
        "base_sequence",
        "closed",
        "created_ms",
        "done",
        "done_hooks",
        "entries",
        "expired",
        "in_flight",
        "last_attempt_ms",
        "limit",
        "max_timestamp",
        "memory",
        "partition",
        "payload",
        "prepared",
        "producer_epoch",
        "producer_id",
        "retry_at_ms",
        "sent_to",
        "sequence_reset",
        "size",
        "topic",
        "tp",
        "uncompressed_size",
    )

    def __init__(self, tp: TopicPartition, created_ms: int, limit: int, memory: int) -> None:
        self.tp = tp
        self.topic = tp.topic
        self.partition = tp.partition
        self.entries: list[Entry] = []
        if _untrack is not None:
            # Out of the cyclic collector's sight, as its entries are (see future.new_future): a full
            # collection would otherwise walk every queued record.  The entries cannot lead back to it.
            _untrack(self.entries)
        self.size = RECORD_BATCH_OVERHEAD
        """Estimated encoded size (uncompressed)."""
        self.limit = limit
        """Appends stop once another record would take :attr:`size` past this."""
        self.memory = memory
        """Bytes reserved from ``buffer.memory`` for this batch."""
        self.created_ms = created_ms
        self.last_attempt_ms = created_ms
        self.attempts = 0
        self._last_error: BaseException | None = None
        self.retry_at_ms = 0
        self.sent_to = -1
        """The broker the last attempt went to: a retry to another (new) leader skips the backoff."""
        self.closed = False
        self.payload: bytes | None = None
        self.prepared: tuple[bytes, int, int] | None = None
        """(records section, compressed; max timestamp; uncompressed size) made by :meth:`prepare`."""
        self.uncompressed_size = 0
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = NO_SEQUENCE
        self.sequence_reset = False
        self.in_flight = False
        self.done = False
        self.expired = False
        self.max_timestamp = -1
        self._done_event: threading.Event | None = None  # made when someone waits (see done_event)
        self._completed = False
        self.done_hooks: list[Callable[[], None]] | None = None
        if _untrack is not None:
            # Out of the cyclic collector's sight while it holds nothing that could lead back to it (a
            # full collection otherwise walks every queued batch, and a queue of them makes collections
            # frequent): an error (its traceback) or a done hook puts it back (see last_error,
            # add_done_hook).
            _untrack(self)

    @property
    def last_error(self) -> BaseException | None:
        """Why the last attempt failed (a retried batch), for the stall warning."""
        return self._last_error

    @last_error.setter
    def last_error(self, error: BaseException | None) -> None:
        if error is not None and _track is not None:
            _track(self)  # its traceback may lead back to this batch
        self._last_error = error

    def add_done_hook(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` once the batch is done (``done_event`` set), on the completion thread -- or now,
        on this thread, if it already is.  It may run twice when the batch completes meanwhile: make it
        idempotent (an asynchronous ``flush()`` uses it)."""
        hooks = self.done_hooks
        if hooks is None:
            if _track is not None:
                _track(self)  # a hook (a closure) may lead back to this batch
            hooks = self.done_hooks = []
        hooks.append(hook)
        if self._completed:  # completed before the append was seen: the completion thread may miss it
            hook()

    @property
    def done_event(self) -> threading.Event:
        """Set once the batch's outcome was delivered (callbacks and futures completed).  Made on first use:
        most batches are never waited for one by one, and an Event (with its Condition) per batch is
        work for the send path and the garbage collector."""
        event = self._done_event
        if event is None:
            with _event_lock:
                event = self._done_event
                if event is None:
                    event = threading.Event()
                    if self._completed:
                        event.set()
                    self._done_event = event
        return event

    def mark_done(self) -> None:
        """On the completion thread, once the outcome was delivered: sets :attr:`done_event`."""
        with _event_lock:
            self._completed = True
            event = self._done_event
        if event is not None:
            event.set()

    @property
    def completed(self) -> bool:
        """Whether :meth:`mark_done` ran (``done_event.is_set()`` without making the event)."""
        return self._completed

    def run_done_hooks(self) -> None:
        """On the completion thread, right after ``done_event`` was set."""
        hooks = self.done_hooks
        if hooks:
            for hook in list(hooks):
                try:
                    hook()
                except Exception:
                    log.exception("error in a batch completion hook")

    def __repr__(self) -> str:
        return (
            f"ProducerBatch({self.tp}, records={len(self.entries)}, seq={self.base_sequence}, "
            f"epoch={self.producer_epoch}, attempts={self.attempts})"
        )

    @property
    def record_count(self) -> int:
        return len(self.entries)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + len(self.entries) - 1) & 0x7FFFFFFF

    @property
    def has_sequence(self) -> bool:
        return self.base_sequence != NO_SEQUENCE

    def set_producer_state(self, producer_id: int, epoch: int, base_sequence: int) -> None:
        """Assign (or, after an epoch bump, reassign) the idempotence fields; rewrites an encoded header."""
        self.producer_id = producer_id
        self.producer_epoch = epoch
        self.base_sequence = base_sequence
        if self.payload is not None:
            self.payload = restamp_batch(self.payload, producer=(producer_id, epoch, base_sequence))

    def reset_producer_state(self, producer_id: int, epoch: int, base_sequence: int) -> None:
        """Move the batch to a new epoch/sequence (Java ``ProducerBatch.resetProducerState``)."""
        self.sequence_reset = True
        self.set_producer_state(producer_id, epoch, base_sequence)

    def prepare(self, compression: CompressionType, level: int | None) -> None:
        """Encode and compress the records section ahead of :meth:`encode`, on the thread that filled the
        batch (it is closed: no more appends), so that compression does not run on the network thread.
        Harmless if the network thread drained the batch meanwhile: the first result is used."""
        if self.payload is not None or self.prepared is not None:
            return
        self.prepared = self._records(compression, level)  # one assignment: atomic for the network thread

    def _records(self, compression: CompressionType, level: int | None) -> tuple[bytes, int, int]:
        entries = self.entries
        base_ts = entries[0][2] if entries else -1
        records, max_ts = encode_records(entries, base_ts)
        uncompressed = len(records) + RECORD_BATCH_OVERHEAD
        if compression != CompressionType.NONE:
            records = compress(compression, records, level)
        return records, max_ts, uncompressed

    def encode(self, compression: CompressionType, level: int | None) -> bytes:
        """The batch's bytes: encoded once, at the first drain (from :meth:`prepare`'s records section when
        it ran), and reused for every retry."""
        payload = self.payload
        if payload is not None:
            return payload
        entries = self.entries
        base_ts = entries[0][2] if entries else -1
        prepared = self.prepared
        records, max_ts, self.uncompressed_size = (
            prepared if prepared is not None else self._records(compression, level)
        )
        self.prepared = None
        self.max_timestamp = max_ts
        count = len(entries)
        payload = self.payload = assemble_batch(
            records,
            count=count,
            attributes=int(compression),
            last_offset_delta=max(0, count - 1),
            base_timestamp=base_ts,
            max_timestamp=max_ts,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
        )
        return payload
