"""What ``Consumer.poll()`` returns."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kafka_handoff.protocol.records import ColumnBuffers, Header
from kafka_handoff.types import ConsumerRecord, TopicPartition

__all__ = ["ColumnChunk", "ConsumerRecords"]

_EMPTY: frozenset[TopicPartition] = frozenset()


class ConsumerRecords:
    """Records of one ``poll()``, grouped by partition (iterable; ``len()`` is the record count).

    KIP-983 "Variant 1": the same three sets the consumer's methods return are attributes here, so one
    ``poll()`` tells everything: ``to_be_revoked_partitions`` (revoke requested; completes at the start of
    the next ``poll()`` unless delayed), ``lost_partitions`` (lost since the previous poll) and
    ``revoke_delayed_partitions`` is not exposed -- use ``Consumer.delay_revoke``.
    """

    __slots__ = ("_by_tp", "_count", "_on_revoke_seen", "_to_be_revoked", "lost_partitions")

    def __init__(
        self,
        by_partition: Mapping[TopicPartition, list[ConsumerRecord]] | None = None,
        *,
        to_be_revoked: frozenset[TopicPartition] = _EMPTY,
        lost: frozenset[TopicPartition] = _EMPTY,
    ) -> None:
        self._by_tp: dict[TopicPartition, list[ConsumerRecord]] = dict(by_partition or {})
        self._count = sum(len(v) for v in self._by_tp.values())
        self._to_be_revoked = to_be_revoked
        self._on_revoke_seen: Callable[[], None] | None = None  # set by the consumer (KIP-983 use)
        self.lost_partitions = lost

    @property
    def to_be_revoked_partitions(self) -> frozenset[TopicPartition]:
        """Partitions whose revoke was requested; it completes at the start of the next ``poll()`` unless
        delayed with ``Consumer.delay_revoke`` (KIP-983)."""
        if self._on_revoke_seen is not None:
            self._on_revoke_seen()  # the application follows KIP-983: revokes must wait for the next poll
        return self._to_be_revoked

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return itertools.chain.from_iterable(self._by_tp.values())

    def __len__(self) -> int:
        return self._count

    def count(self) -> int:
        return self._count

    def is_empty(self) -> bool:
        return self._count == 0

    def __bool__(self) -> bool:
        return self._count > 0

    def partitions(self) -> frozenset[TopicPartition]:
        return frozenset(self._by_tp)

    def records(self, partition: TopicPartition) -> list[ConsumerRecord]:
        return list(self._by_tp.get(partition, ()))

    def by_partition(self) -> dict[TopicPartition, list[ConsumerRecord]]:
        return dict(self._by_tp)

    def next_offsets(self) -> dict[TopicPartition, int]:
        """For each partition, the offset after its last record here (what to commit once processed)."""
        return {tp: recs[-1].offset + 1 for tp, recs in self._by_tp.items() if recs}

    def __repr__(self) -> str:
        return f"ConsumerRecords(count={self._count}, partitions={len(self._by_tp)})"

    def __getitem__(self, partition: TopicPartition) -> list[ConsumerRecord]:
        return self.records(partition)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ConsumerRecords) and self._by_tp == other._by_tp


_COLUMNS = ("offsets", "timestamps", "keys", "values", "headers")

Segment = tuple[ColumnBuffers, int, int]
"""Rows ``start:stop`` of one decoded fetch's :class:`~kafka_handoff.protocol.records.ColumnBuffers`."""


class ColumnChunk:
    """Consecutive records of one partition as columns: ``offsets``, ``timestamps``, ``keys``, ``values``
    (raw ``bytes`` or ``None``) and ``headers`` (tuples of ``(str, bytes | None)``).

    Chunks from ``poll_columns`` hold the decoder's Arrow-layout buffers (:meth:`segments`; no Python
    object per record) and :func:`~kafka_handoff.pipeline.arrow.chunks_to_table` wraps them without a copy.
    The list attributes still work: reading one builds that column's Python list once (it then is the
    column: changes to it count); :meth:`first_offset`, :meth:`last_offset`, :meth:`drop_below`,
    ``extend()``, ``value_bytes()`` and ``len()`` build no list.  Chunks made from lists
    (``ColumnChunk(topic, partition, offsets, ...)``) are plain lists throughout.
    """

    __slots__ = ("_lists", "_segments", "partition", "topic")

    def __init__(
        self,
        topic: str,
        partition: int,
        offsets: list[int] | None = None,
        timestamps: list[int] | None = None,
        keys: list[bytes | None] | None = None,
        values: list[bytes | None] | None = None,
        headers: list[tuple[Header, ...]] | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self._segments: list[Segment] = []
        self._lists: dict[str, list[Any]] = {
            "offsets": [] if offsets is None else offsets,
            "timestamps": [] if timestamps is None else timestamps,
            "keys": [] if keys is None else keys,
            "values": [] if values is None else values,
            "headers": [] if headers is None else headers,
        }

    @classmethod
    def from_buffers(
        cls, topic: str, partition: int, buffers: ColumnBuffers, start: int = 0, stop: int | None = None
    ) -> ColumnChunk:
        """A chunk of rows ``start:stop`` of decoded buffers (no copy)."""
        chunk = cls(topic, partition)
        stop = len(buffers) if stop is None else stop
        chunk._lists = {}
        if stop > start:
            chunk._segments = [(buffers, start, stop)]
        else:
            chunk._lists = {name: [] for name in _COLUMNS}
        return chunk

    # ---------------------------------------------------------------------------------------- columns
    def _column(self, name: str) -> list[Any]:
        lst = self._lists.get(name)
        if lst is None:
            lst = self._lists[name] = self._from_segments(name)
            if len(self._lists) == len(_COLUMNS):
                self._segments = []
        return lst

    def _peek(self, name: str) -> list[Any]:
        """The column as a list, without keeping it (for reading another chunk)."""
        lst = self._lists.get(name)
        return lst if lst is not None else self._from_segments(name)

    def _from_segments(self, name: str) -> list[Any]:
        out: list[Any] = []
        for buffers, start, stop in self._segments:
            out.extend(getattr(buffers.to_lists(start, stop, (name,)), name))
        return out

    def _set(self, name: str, value: list[Any]) -> None:
        self._lists[name] = value
        if len(self._lists) == len(_COLUMNS):
            self._segments = []

    @property
    def offsets(self) -> list[int]:
        return self._column("offsets")

    @offsets.setter
    def offsets(self, value: list[int]) -> None:
        self._set("offsets", value)

    @property
    def timestamps(self) -> list[int]:
        return self._column("timestamps")

    @timestamps.setter
    def timestamps(self, value: list[int]) -> None:
        self._set("timestamps", value)

    @property
    def keys(self) -> list[bytes | None]:
        return self._column("keys")

    @keys.setter
    def keys(self, value: list[bytes | None]) -> None:
        self._set("keys", value)

    @property
    def values(self) -> list[bytes | None]:
        return self._column("values")

    @values.setter
    def values(self, value: list[bytes | None]) -> None:
        self._set("values", value)

    @property
    def headers(self) -> list[tuple[Header, ...]]:
        return self._column("headers")

    @headers.setter
    def headers(self, value: list[tuple[Header, ...]]) -> None:
        self._set("headers", value)

    def segments(self) -> list[Segment]:
        """The buffer segments behind the columns not (yet) turned into lists; ``[]`` when all are lists."""
        return list(self._segments)

    def lists(self) -> dict[str, list[Any]]:
        """The columns that are Python lists, by name (all five for a chunk made from lists)."""
        return dict(self._lists)

    # ---------------------------------------------------------------------------------------- rows
    def __len__(self) -> int:
        lst = self._lists.get("offsets")
        if lst is not None:
            return len(lst)
        return sum(stop - start for _, start, stop in self._segments)

    def first_offset(self) -> int:
        """The offset of the first record (the chunk must not be empty)."""
        lst = self._lists.get("offsets")
        if lst is not None:
            return int(lst[0])
        buffers, start, _ = self._segments[0]
        return buffers.offset_at(start)

    def last_offset(self) -> int:
        """The offset of the last record (the chunk must not be empty)."""
        lst = self._lists.get("offsets")
        if lst is not None:
            return int(lst[-1])
        buffers, _, stop = self._segments[-1]
        return buffers.offset_at(stop - 1)

    def value_bytes(self) -> int:
        """The total size of the values (nulls count 0), without building the ``values`` list."""
        lst = self._lists.get("values")
        if lst is not None:
            return sum(map(len, filter(None, lst)))
        total = 0
        for buffers, start, stop in self._segments:
            ends = memoryview(buffers.value_offsets).cast("i")
            total += ends[stop] - ends[start]
        return total

    def extend(self, other: ColumnChunk) -> None:
        for name in _COLUMNS:
            if name in self._lists or name in other._lists:
                self._column(name).extend(other._peek(name))
        if len(self._lists) < len(_COLUMNS):
            # every column still in segments here is in segments in `other` too (see the loop above)
            self._segments.extend(other._segments)

    def drop_below(self, offset: int) -> int:
        """Remove the records whose offset is below ``offset`` (offsets ascend); returns how many."""
        lst = self._lists.get("offsets")
        if lst is not None:
            cut = bisect.bisect_left(lst, offset)
        else:
            cut = 0
            for buffers, start, stop in self._segments:
                view = memoryview(buffers.offsets).cast("q")
                at = bisect.bisect_left(view, offset, start, stop)
                cut += at - start
                if at < stop:
                    break
        if cut:
            for column in self._lists.values():
                del column[:cut]
            left = cut
            segments = self._segments
            while left and segments:
                buffers, start, stop = segments[0]
                if stop - start <= left:
                    left -= stop - start
                    del segments[0]
                else:
                    segments[0] = (buffers, start + left, stop)
                    left = 0
        return cut

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ColumnChunk):
            return NotImplemented
        return (self.topic, self.partition) == (other.topic, other.partition) and all(
            self._peek(name) == other._peek(name) for name in _COLUMNS
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ColumnChunk(topic={self.topic!r}, partition={self.partition}, records={len(self)})"
