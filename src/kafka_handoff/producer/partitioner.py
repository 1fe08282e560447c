"""Java-compatible partitioning: murmur2 for keyed records, sticky (built-in) partitioning for the rest.

Keyed records go to ``to_positive(murmur2(key)) % partitions``, exactly as the Java client's default
(``BuiltInPartitioner.partitionForKey``), so a keyed record lands in the same partition whichever client
wrote it (librdkafka's ``murmur2_random`` partitioner computes the same).

Records without a key (or every record with ``partitioner.ignore.keys=true``) use *sticky* partitioning as
in the Java client since Kafka 3.3 (KIP-794): all of them go to one partition until about ``batch.size``
bytes were produced there, then a new partition is picked -- uniformly among partitions that have a
leader, or, with adaptive partitioning, with a probability that falls with the partition's queue length
(partitions whose broker drains more slowly get fewer records).

Sans-I/O: the accumulator calls these under its lock; randomness comes from an injectable ``random``.
"""

from __future__ import annotations

import bisect
import random
import struct
from collections.abc import Callable, Sequence
from typing import Final

from kafka_handoff._native import load_extension

__all__ = ["BuiltInPartitioner", "key_partition", "murmur2", "to_positive"]

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_MASK: Final = 0xFFFFFFFF


def _py_murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's 32-bit murmur2 of ``data`` as a signed Java ``int`` (``Utils.murmur2``)."""
    buf = bytes(data)
    length = len(buf)
    h = (_SEED ^ length) & _MASK
    m = _M
    end = length & ~3
    if end:
        for k in struct.unpack_from(f"<{end >> 2}I", buf):
            k = (k * m) & _MASK
            k ^= k >> 24
            k = (k * m) & _MASK
            h = ((h * m) & _MASK) ^ k
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= buf[end + 2] << 16
        if tail >= 2:
            h ^= buf[end + 1] << 8
        h ^= buf[end]
        h = (h * m) & _MASK
    h ^= h >> 13
    h = (h * m) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def _load_c_murmur2() -> Callable[[bytes | bytearray | memoryview], int] | None:
    module = load_extension("kafka_handoff.producer._fastencode")
    if module is None:
        return None
    fn: Callable[[bytes | bytearray | memoryview], int] = module.murmur2
    return fn


_c_murmur2 = _load_c_murmur2()
murmur2: Callable[[bytes | bytearray | memoryview], int] = (
    _c_murmur2 if _c_murmur2 is not None else _py_murmur2
)
"""Kafka's 32-bit murmur2 of ``data`` as a signed Java ``int`` (``Utils.murmur2``); the optional C extension's
when built (same results), else pure Python."""


def to_positive(number: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit (not ``abs``: ``MIN_VALUE`` maps to 0)."""
    return number & 0x7FFFFFFF


def key_partition(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition the Java client's default partitioner picks for a serialized key."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class BuiltInPartitioner:
    """Sticky partition choice for one topic (Java's ``BuiltInPartitioner``).

    :meth:`partition` returns the current sticky partition (choosing one first if needed);
    :meth:`on_append` is told how many bytes went to it and whether every batch of that partition is full,
    and switches partition once ``sticky_batch_size`` bytes were produced there (at once when the last
    batch is full, or in any case after twice that).  :meth:`update_load_stats` feeds adaptive partitioning
    with the partitions' queue lengths (in batches).
    """

    __slots__ = (
        "_load_ids",
        "_load_table",
        "_rng",
        "current",
        "produced",
        "sticky_batch_size",
        "switch_bytes",
        "topic",
    )

    def __init__(self, topic: str, sticky_batch_size: int, rng: random.Random | None = None) -> None:
        self.topic = topic
        self.sticky_batch_size = max(1, sticky_batch_size)
        self.switch_bytes = 2 * self.sticky_batch_size
        """Bytes after which the partition switches even if its last batch is not full."""
        self._rng = rng if rng is not None else random.Random()
        self.current = -1
        """The current sticky partition, or -1 before the first choice."""
        self.produced = 0
        """Bytes produced to the current sticky partition since it was chosen (the accumulator's fast path
        adds to it directly while ``produced + size < switch_bytes``)."""
        self._load_table: list[int] | None = None
        self._load_ids: list[int] = []

    def partition(self, num_partitions: int, available: Sequence[int]) -> int:
        """The sticky partition; ``available`` lists the partitions that have a leader."""
        current = self.current
        if current < 0 or current >= num_partitions:
            current = self.current = self._next(num_partitions, available)
            self.produced = 0
        return current

    def on_append(
        self,
        partition: int,
        appended_bytes: int,
        enable_switch: bool,
        num_partitions: int,
        available: Sequence[int],
    ) -> None:
        """Account ``appended_bytes`` to ``partition``; switch when enough was produced there."""
        if partition != self.current:
            return
        produced = self.produced + appended_bytes
        self.produced = produced
        size = self.sticky_batch_size
        if (produced >= size and enable_switch) or produced >= 2 * size:
            self.current = self._next(num_partitions, available)
            self.produced = 0

    def _next(self, num_partitions: int, available: Sequence[int]) -> int:
        rand = self._rng.getrandbits(31)
        table = self._load_table
        if table is not None and table:
            index = bisect.bisect_right(table, rand % table[-1])
            return self._load_ids[index]
        if available:
            return available[rand % len(available)]
        return rand % max(1, num_partitions)

    def update_load_stats(
        self, queue_sizes: Sequence[int], partition_ids: Sequence[int], num_partitions: int
    ) -> None:
        """Adaptive partitioning input: queue lengths of the partitions with a leader (same order as
        ``partition_ids``).  Partitions with shorter queues become proportionally more likely."""
        length = len(queue_sizes)
        if length < 1 or num_partitions < 2:
            self._load_table = None
            return
        top = max(queue_sizes)
        if length == num_partitions and min(queue_sizes) == top:
            self._load_table = None  # all equal: plain uniform choice
            return
        top += 1
        table: list[int] = []
        running = 0
        for size in queue_sizes:
            running += top - size
            table.append(running)
        self._load_table = table
        self._load_ids = list(partition_ids)

    def reset_load_stats(self) -> None:
        self._load_table = None
