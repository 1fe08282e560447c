"""Turning completed fetches into records on the application thread.

The collector takes raw partition data from the :class:`~kafka_handoff.consumer.fetcher.FetchBuffer`,
decodes it (CRC check, decompression, transaction filtering) and hands out at most ``max.poll.records``
records, advancing each partition's position as its records are returned.  Data fetched for a position
that has since changed (seek, reset, revocation) is dropped.  A corrupt batch raises
:class:`~kafka_handoff.errors.CorruptRecordError` after the good records before it were returned; the
position stays at the bad batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kafka_handoff.consumer.fetcher import CompletedFetch, FetchBuffer
from kafka_handoff.consumer.subscription import SubscriptionState
from kafka_handoff.errors import SerializationError
from kafka_handoff.protocol.records import decode_batches
from kafka_handoff.types import ConsumerRecord, TopicPartition

__all__ = ["Collector"]

Deserializer = Callable[[bytes | None], Any] | None


class Collector:
    def __init__(
        self,
        subscriptions: SubscriptionState,
        buffer: FetchBuffer,
        *,
        max_poll_records: int,
        check_crcs: bool,
        read_committed: bool,
        key_deserializer: Deserializer = None,
        value_deserializer: Deserializer = None,
        on_records: Callable[[TopicPartition, int, int], None] | None = None,
    ) -> None:
        self._subs = subscriptions
        self._buffer = buffer
        self._max = max_poll_records
        self._check_crcs = check_crcs
        self._read_committed = read_committed
        self._kdes = key_deserializer
        self._vdes = value_deserializer
        self._on_records = on_records
        self._current: CompletedFetch | None = None
        self._parked: dict[TopicPartition, CompletedFetch] = {}
        """Fetched data of paused partitions, kept (as Java does) until resume() -- not fetched again."""
        self.excluded: Callable[[TopicPartition], bool] = lambda tp: False
        """Partitions whose records must not be returned (KIP-983: revoke requested)."""

    def _valid(self, f: CompletedFetch) -> bool:
        st = self._subs.get(f.tp)
        if st is None or st.position is None or st.position_epoch != f.position_epoch:
            return False
        if st.pending_revocation or st.awaiting_callback or self.excluded(f.tp):
            return False
        return st.position.offset == f.fetch_offset or f.initialized

    def has_data(self) -> bool:
        return self._current is not None or len(self._buffer) > 0

    def drop_partitions(self, keep: Callable[[TopicPartition], bool]) -> None:
        if self._current is not None and not keep(self._current.tp):
            self._buffer.done_with(self._current.tp)
            self._current = None
        for tp in [tp for tp in self._parked if not keep(tp)]:
            del self._parked[tp]
            self._buffer.done_with(tp)
        self._buffer.drop(keep)

    def unpark(self, partitions: Iterable[TopicPartition]) -> None:
        """resume(): the kept data of these partitions is collectable again (in front of newer data)."""
        for tp in partitions:
            f = self._parked.pop(tp, None)
            if f is not None:
                self._buffer.push_front(f)

    def _is_paused(self, tp: TopicPartition) -> bool:
        st = self._subs.get(tp)
        return st is not None and st.paused

    def collect(self) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to ``max.poll.records`` records.  Errors (corrupt batch, deserializer, error fetch) are raised
        only when no records were collected in this call: records already handed out (and whose positions
        moved) are never lost to an exception; the failing fetch stays current and raises on the next call."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        remaining = self._max
        while remaining > 0:
            f = self._current
            if f is None:
                f = self._buffer.pop()
                if f is None:
                    break
                self._current = f
            if not self._valid(f):
                self._finish(f)
                continue
            if self._is_paused(f.tp):
                # Keep it: the partition stays "buffered" (not fetched again) until resume().
                self._parked[f.tp] = f
                self._current = None
                continue
            if f.error is not None:
                if out:
                    break
                self._finish(f)
                raise f.error
            if not f.initialized:
                f.decoded = decode_batches(
                    f.records or b"",
                    topic=f.tp.topic,
                    partition=f.tp.partition,
                    check_crcs=self._check_crcs,
                    read_committed=self._read_committed,
                    aborted_transactions=f.aborted_transactions,
                    start_offset=f.fetch_offset,
                )
                f.initialized = True
                f.next_index = 0
            decoded = f.decoded
            records: list[ConsumerRecord] = decoded.records
            start = f.next_index
            end = min(len(records), start + remaining)
            if end > start:
                chunk = records[start:end]
                bad: SerializationError | None = None
                if self._kdes is not None or self._vdes is not None:
                    chunk, bad = self._deserialize_chunk(chunk)
                    end = start + len(chunk)
                if chunk:
                    last = chunk[-1]
                    f.next_index = end
                    remaining -= end - start
                    out.setdefault(f.tp, []).extend(chunk)
                    if bad is not None:
                        next_offset = records[end].offset  # at the record that failed to deserialize
                    elif end == len(records) and decoded.error is None:
                        next_offset = decoded.next_offset
                    else:
                        next_offset = last.offset + 1
                    self._subs.advance(f.tp, f.position_epoch, next_offset, last.leader_epoch)
                    if self._on_records is not None:
                        # Bytes for the metrics: the decoded batches' size, pro rata (no per-record work).
                        share = decoded.bytes_consumed * (end - start) // max(1, len(records))
                        self._on_records(f.tp, end - start, share)
                if bad is not None:
                    # The position stays at the bad record; raised now, or on the next call when records
                    # were collected (the fetch stays current, so it is raised until the app seeks past it).
                    if out:
                        break
                    raise bad
                if end < len(records):
                    break
            # All decoded records handed out.
            if decoded.error is not None:
                if out:
                    # Return the good records first; the fetch stays current and the next call raises
                    # (the position stays at the bad batch).
                    break
                self._finish(f)
                raise decoded.error
            if end == start and decoded.next_offset > f.fetch_offset:
                # Only control/aborted batches: move past them.
                self._subs.advance(f.tp, f.position_epoch, decoded.next_offset, None)
            self._finish(f)
        return out

    def _finish(self, f: CompletedFetch) -> None:
        self._buffer.done_with(f.tp)
        if self._current is f:
            self._current = None

    def _deserialize_chunk(
        self, chunk: list[ConsumerRecord]
    ) -> tuple[list[ConsumerRecord], SerializationError | None]:
        """Deserialize records in order; stop at the first failure and return the good ones with the error.
        A record is only changed once both its key and value deserialized, so a failed record can be tried
        again (the error repeats until the application seeks past it)."""
        done: list[ConsumerRecord] = []
        kdes, vdes = self._kdes, self._vdes
        for r in chunk:
            try:
                key = kdes(r.key) if kdes is not None else r.key
                value = vdes(r.value) if vdes is not None else r.value
            except Exception as exc:
                error = SerializationError(
                    f"error deserializing record at offset {r.offset} of {r.topic}-{r.partition}: {exc} "
                    "(seek past it to continue)"
                )
                error.__cause__ = exc
                return done, error
            r.key = key
            r.value = value
            done.append(r)
        return done, None
