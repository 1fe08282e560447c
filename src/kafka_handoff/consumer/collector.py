"""Turning completed fetches into records on the application thread.

The collector takes raw partition data from the :class:`~kafka_handoff.consumer.fetcher.FetchBuffer`,
decodes it (CRC check, decompression, transaction filtering) and hands out at most ``max.poll.records``
records, advancing each partition's position as its records are returned.  Data fetched for a position
that has since changed (seek, reset, revocation) is dropped.  A corrupt batch raises
:class:`~kafka_handoff.errors.CorruptRecordError` after the good records before it were returned; the
position stays at the bad batch.
"""

from __future__ import annotations

from collections.abc import Callable
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
        self.excluded: Callable[[TopicPartition], bool] = lambda tp: False
        """Partitions whose records must not be returned (KIP-983: revoke requested)."""

    def _valid(self, f: CompletedFetch) -> bool:
        st = self._subs.get(f.tp)
        if st is None or st.position is None or st.position_epoch != f.position_epoch:
            return False
        if st.paused or st.pending_revocation or st.awaiting_callback or self.excluded(f.tp):
            return False
        return st.position.offset == f.fetch_offset or f.initialized

    def has_data(self) -> bool:
        return self._current is not None or len(self._buffer) > 0

    def drop_partitions(self, keep: Callable[[TopicPartition], bool]) -> None:
        if self._current is not None and not keep(self._current.tp):
            self._buffer.done_with(self._current.tp)
            self._current = None
        self._buffer.drop(keep)

    def collect(self) -> dict[TopicPartition, list[ConsumerRecord]]:
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
            if f.error is not None:
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
                if self._kdes is not None or self._vdes is not None:
                    chunk = [self._deserialize(r) for r in chunk]
                last = chunk[-1]
                f.next_index = end
                remaining -= end - start
                out.setdefault(f.tp, []).extend(chunk)
                at_end = end == len(records)
                next_offset = decoded.next_offset if at_end and decoded.error is None else last.offset + 1
                self._subs.advance(f.tp, f.position_epoch, next_offset, last.leader_epoch)
                if self._on_records is not None:
                    self._on_records(f.tp, end - start, sum(r.serialized_value_size for r in chunk))
                if not at_end:
                    break
            # All decoded records handed out.
            if decoded.error is not None:
                self._finish(f)
                if out:
                    # Return the good records first; the error surfaces on the next poll (position stays
                    # at the bad batch, so it is fetched and reported again).
                    break
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

    def _deserialize(self, r: ConsumerRecord) -> ConsumerRecord:
        try:
            if self._kdes is not None:
                r.key = self._kdes(r.key)
            if self._vdes is not None:
                r.value = self._vdes(r.value)
        except Exception as exc:
            raise SerializationError(
                f"error deserializing record at offset {r.offset} of {r.topic}-{r.partition}: {exc}"
            ) from exc
        return r
