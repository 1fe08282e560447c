"""What ``ShareConsumer.poll()`` returns: records with their delivery count."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kafka_handoff.types import ConsumerRecord, TopicPartition

__all__ = ["ShareConsumerRecord", "ShareRecords"]


@dataclass(slots=True, eq=False)
class ShareConsumerRecord(ConsumerRecord):
    """A record acquired from a share group.  ``delivery_count`` is how many times the broker has delivered
    it (1 the first time; higher after a RELEASE or an expired acquisition lock)."""

    delivery_count: int = 1
    lock_deadline_ms: int = 0
    """Monotonic time (ms) at which the acquisition lock of this delivery runs out, unless RENEWed."""


class ShareRecords:
    """The records of one ``poll()`` (iterable; ``len()`` is the record count)."""

    __slots__ = ("_records",)

    def __init__(self, records: list[ShareConsumerRecord] | None = None) -> None:
        self._records = records or []

    def __iter__(self) -> Iterator[ShareConsumerRecord]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def count(self) -> int:
        return len(self._records)

    def is_empty(self) -> bool:
        return not self._records

    def partitions(self) -> frozenset[TopicPartition]:
        return frozenset(TopicPartition(r.topic, r.partition) for r in self._records)

    def records(self, partition: TopicPartition) -> list[ShareConsumerRecord]:
        return [r for r in self._records if r.topic == partition.topic and r.partition == partition.partition]

    def __repr__(self) -> str:
        return f"ShareRecords({len(self._records)} records)"
