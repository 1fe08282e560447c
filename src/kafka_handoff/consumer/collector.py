"""Turning completed fetches into records on the application thread.

The collector takes raw partition data from the :class:`~kafka_handoff.consumer.fetcher.FetchBuffer`,
decodes it (CRC check, decompression, transaction filtering) and hands out at most ``max.poll.records``
records, advancing each partition's position as its records are returned.  Data fetched for a position
that has since changed (seek, reset, revocation) is dropped.  A corrupt batch raises
:class:`~kafka_handoff.errors.CorruptRecordError` after the good records before it were returned; the
position stays at the bad batch.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from kafka_handoff.consumer.fetcher import CompletedFetch, FetchBuffer
from kafka_handoff.consumer.records import ColumnChunk
from kafka_handoff.consumer.subscription import SubscriptionState
from kafka_handoff.errors import SerializationError
from kafka_handoff.protocol.compression import DEFAULT_MAX_DECOMPRESSED_BYTES
from kafka_handoff.protocol.records import (
    ColumnBuffers,
    DecodedBuffers,
    DecodedRecords,
    decode_batches,
    decode_batches_buffers,
    lists_to_buffers,
)
from kafka_handoff.serialization import MessageField, SerializationContext, takes_context
from kafka_handoff.types import ConsumerRecord, TopicPartition

__all__ = ["Collector"]

Deserializer = Callable[..., Any] | None


class Collector:
    def __init__(
        self,
        subscriptions: SubscriptionState,
        buffer: FetchBuffer,
        *,
        max_poll_records: int,
        check_crcs: bool,
        read_committed: bool,
        max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
        key_deserializer: Deserializer = None,
        value_deserializer: Deserializer = None,
        on_records: Callable[[TopicPartition, int, int], None] | None = None,
    ) -> None:
        self._subs = subscriptions
        self._buffer = buffer
        self._max = max_poll_records
        self._check_crcs = check_crcs
        self._max_decompressed = max_decompressed_bytes
        self._read_committed = read_committed
        self._kdes = key_deserializer
        self._vdes = value_deserializer
        # fn(value) or fn(value, ctx): decided here, once (the per-record loop stays as cheap as it was).
        self._des_ctx = takes_context(key_deserializer) or takes_context(value_deserializer)
        self._kctx = takes_context(key_deserializer)
        self._vctx = takes_context(value_deserializer)
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

    def collect(self, *, columnar: bool = False, max_records: int | None = None) -> dict[TopicPartition, Any]:
        """Up to ``max.poll.records`` records: per partition a list of :class:`ConsumerRecord` objects, or
        with ``columnar`` one :class:`ColumnChunk` (Arrow-layout buffers; deserializers not applied).

        Errors (corrupt batch, deserializer, error fetch) are raised only when no records were collected in
        this call: records already handed out (and whose positions moved) are never lost to an exception;
        the failing fetch stays current and raises on the next call.  ``max_records`` lowers the limit for
        this call (the asyncio facade collects a poll's records in slices)."""
        out: dict[TopicPartition, Any] = {}
        remaining = self._max if max_records is None else max(1, min(self._max, max_records))
        while remaining > 0:
            f = self._next_fetch()
            if f is None:
                break
            if f.error is not None:
                if out:
                    break
                self._finish(f)
                raise f.error
            decoded = self._decoded(f, columnar)
            total = len(decoded.columns) if columnar else len(decoded.records)
            start = f.next_index
            end = min(total, start + remaining)
            if end > start:
                bad: SerializationError | None = None
                if columnar:
                    last_offset, epoch = self._take_columns(f, decoded, start, end, out)
                else:
                    end, bad = self._take_records(f, decoded.records, start, end, out)
                    last_offset = decoded.records[end - 1].offset if end > start else -1
                    epoch = decoded.records[end - 1].leader_epoch if end > start else None
                if end > start:
                    f.next_index = end
                    remaining -= end - start
                    if bad is not None:
                        next_offset = decoded.records[end].offset  # at the record that failed to deserialize
                    elif end == total and decoded.error is None:
                        next_offset = decoded.next_offset
                    else:
                        next_offset = last_offset + 1
                    self._subs.advance(f.tp, f.position_epoch, next_offset, epoch)
                    if self._on_records is not None:
                        # Bytes for the metrics: the decoded batches' size, pro rata (no per-record work).
                        share = decoded.bytes_consumed * (end - start) // max(1, total)
                        self._on_records(f.tp, end - start, share)
                if bad is not None:
                    # The position stays at the bad record; raised now, or on the next call when records
                    # were collected (the fetch stays current, so it is raised until the app seeks past it).
                    if out:
                        break
                    raise bad
                if end < total:
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

    def _next_fetch(self) -> CompletedFetch | None:
        """The fetch to take records from: the current one, else the next valid unpaused one."""
        while True:
            f = self._current
            if f is None:
                f = self._buffer.pop()
                if f is None:
                    return None
                self._current = f
            if not self._valid(f):
                self._finish(f)
                continue
            if self._is_paused(f.tp):
                # Keep it: the partition stays "buffered" (not fetched again) until resume().
                self._parked[f.tp] = f
                self._current = None
                continue
            return f

    def _decoded(self, f: CompletedFetch, columnar: bool) -> Any:
        """The fetch decoded in the requested form (decoded once; converted if the form changed)."""
        if not f.initialized:
            decode = decode_batches_buffers if columnar else decode_batches
            f.decoded = decode(
                f.records or b"",
                topic=f.tp.topic,
                partition=f.tp.partition,
                check_crcs=self._check_crcs,
                read_committed=self._read_committed,
                aborted_transactions=f.aborted_transactions,
                start_offset=f.fetch_offset,
                max_decompressed_bytes=self._max_decompressed,
            )
            f.initialized = True
            f.next_index = 0
        elif columnar and isinstance(f.decoded, DecodedRecords):
            f.decoded = _records_to_columns(f.decoded)
        elif not columnar and isinstance(f.decoded, DecodedBuffers):
            f.decoded = _columns_to_records(f.decoded)
        return f.decoded

    def _take_records(
        self,
        f: CompletedFetch,
        records: list[ConsumerRecord],
        start: int,
        end: int,
        out: dict[TopicPartition, Any],
    ) -> tuple[int, SerializationError | None]:
        chunk = records[start:end]
        bad: SerializationError | None = None
        if self._kdes is not None or self._vdes is not None:
            chunk, bad = self._deserialize_chunk(chunk)
        if chunk:
            out.setdefault(f.tp, []).extend(chunk)
        return start + len(chunk), bad

    @staticmethod
    def _take_columns(
        f: CompletedFetch, decoded: DecodedBuffers, start: int, end: int, out: dict[TopicPartition, Any]
    ) -> tuple[int, int | None]:
        cols = decoded.columns
        piece = ColumnChunk.from_buffers(f.tp.topic, f.tp.partition, cols, start, end)
        chunk = out.get(f.tp)
        if chunk is None:
            out[f.tp] = piece
        else:
            chunk.extend(piece)
        batch_index = bisect.bisect_right(cols.batch_starts, end - 1) - 1
        epoch = cols.batch_leader_epochs[batch_index] if batch_index >= 0 else None
        return cols.offset_at(end - 1), epoch

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
        if self._des_ctx:
            return self._deserialize_chunk_ctx(chunk)
        for r in chunk:
            try:
                key = kdes(r.key) if kdes is not None else r.key
            except Exception as exc:
                return done, _deserialize_error(r, MessageField.KEY, exc)
            try:
                value = vdes(r.value) if vdes is not None else r.value
            except Exception as exc:
                return done, _deserialize_error(r, MessageField.VALUE, exc)
            r.key = key
            r.value = value
            done.append(r)
        return done, None

    def _deserialize_chunk_ctx(
        self, chunk: list[ConsumerRecord]
    ) -> tuple[list[ConsumerRecord], SerializationError | None]:
        """:meth:`_deserialize_chunk` when a deserializer takes ``(value, ctx)``."""
        done: list[ConsumerRecord] = []
        kdes, vdes, kctx, vctx = self._kdes, self._vdes, self._kctx, self._vctx
        for r in chunk:
            headers = r.headers
            if type(headers) is not list:
                headers = list(headers)
            try:
                if kdes is None:
                    key = r.key
                elif kctx:
                    key = kdes(r.key, SerializationContext(r.topic, MessageField.KEY, headers, r.partition))
                else:
                    key = kdes(r.key)
            except Exception as exc:
                return done, _deserialize_error(r, MessageField.KEY, exc)
            try:
                if vdes is None:
                    value = r.value
                elif vctx:
                    value = vdes(
                        r.value, SerializationContext(r.topic, MessageField.VALUE, headers, r.partition)
                    )
                else:
                    value = vdes(r.value)
            except Exception as exc:
                return done, _deserialize_error(r, MessageField.VALUE, exc)
            r.key = key
            r.value = value
            done.append(r)
        return done, None


def _deserialize_error(r: ConsumerRecord, field: str, exc: Exception) -> SerializationError:
    error = SerializationError(
        f"error deserializing the {field} of the record at offset {r.offset} of {r.topic}-{r.partition}: "
        f"{exc} (seek past it to continue)",
        topic=r.topic,
        partition=r.partition,
        offset=r.offset,
        field=field,
    )
    error.__cause__ = exc
    return error


def _columns_to_records(decoded: DecodedBuffers) -> DecodedRecords:
    """The object form of a columnar decode result (the form changed in the middle of a fetch)."""
    values = {f.name: getattr(decoded, f.name) for f in dataclasses.fields(DecodedBuffers)}
    del values["columns"]
    buffers = decoded.columns
    cols = buffers.to_lists()
    cols.batch_starts = buffers.batch_starts
    cols.batch_timestamp_types = buffers.batch_timestamp_types
    cols.batch_leader_epochs = buffers.batch_leader_epochs
    return DecodedRecords(**values, records=cols.to_records(decoded.topic, decoded.partition))


def _records_to_columns(decoded: DecodedRecords) -> DecodedBuffers:
    values = {f.name: getattr(decoded, f.name) for f in dataclasses.fields(DecodedRecords)}
    del values["records"]
    recs = decoded.records
    cols = ColumnBuffers(
        lists_to_buffers(
            [r.offset for r in recs],
            [r.timestamp for r in recs],
            [r.key for r in recs],
            [r.value for r in recs],
            [tuple(r.headers) for r in recs],
        )
    )
    cols.batch_starts = list(range(len(recs)))
    cols.batch_timestamp_types = [r.timestamp_type for r in recs]
    cols.batch_leader_epochs = [r.leader_epoch for r in recs]
    return DecodedBuffers(**values, columns=cols)
