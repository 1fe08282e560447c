"""What ``Consumer.poll()`` returns."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_handoff.protocol.records import Header
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


@dataclass(slots=True)
class ColumnChunk:
    """Consecutive records of one partition as parallel lists (raw ``bytes`` keys and values)."""

    topic: str
    partition: int
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[tuple[Header, ...]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(self, other: ColumnChunk) -> None:
        self.offsets.extend(other.offsets)
        self.timestamps.extend(other.timestamps)
        self.keys.extend(other.keys)
        self.values.extend(other.values)
        self.headers.extend(other.headers)

    def drop_below(self, offset: int) -> int:
        """Remove the records whose offset is below ``offset`` (offsets ascend); returns how many."""
        cut = bisect.bisect_left(self.offsets, offset)
        if cut:
            del self.offsets[:cut], self.timestamps[:cut], self.keys[:cut], self.values[:cut]
            del self.headers[:cut]
        return cut
