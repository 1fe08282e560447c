"""Partitioning: Java's default (murmur2 for keyed records, sticky partitioning for the rest) and librdkafka's
named partitioners.

Keyed records go to ``to_positive(murmur2(key)) % partitions``, exactly as the Java client's default
(``BuiltInPartitioner.partitionForKey``), so a keyed record lands in the same partition whichever client
wrote it (librdkafka's ``murmur2_random`` partitioner computes the same).  The producer's ``partitioner``
setting picks another of librdkafka's key partitioners (:data:`PARTITIONERS`, :func:`key_partitioner`):
``consistent_random`` (librdkafka's default: CRC32 of the key), ``fnv1a``..., so records keyed by a
librdkafka-based client land where that client put them.

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
import zlib
from collections.abc import Callable, Sequence
from typing import Final

from kafka_handoff._native import load_extension
from kafka_handoff.config import PARTITIONERS as _PARTITIONERS

__all__ = [
    "PARTITIONERS",
    "BuiltInPartitioner",
    "KeyPartitioner",
    "crc32",
    "fnv1a",
    "key_partition",
    "key_partitioner",
    "murmur2",
    "partitioner_code",
    "to_positive",
]

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


def crc32(data: bytes | bytearray | memoryview) -> int:
    """The CRC-32 (ISO-HDLC, zlib's) of ``data``, unsigned: librdkafka's ``rd_crc32``."""
    return zlib.crc32(data)


_FNV_OFFSET: Final = 0x811C9DC5
_FNV_PRIME: Final = 0x01000193


def _py_fnv1a(data: bytes | bytearray | memoryview) -> int:
    """librdkafka's ``rd_fnv1a``: 32-bit FNV-1a of ``data``, then the absolute value of it read as a signed
    32-bit integer (as Sarama's hash partitioner does); returned unsigned (``0x80000000`` stays itself)."""
    h = _FNV_OFFSET
    for byte in bytes(data):
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    if h & 0x80000000:
        h = (-h) & _MASK
    return h


def _load_c_fnv1a() -> Callable[[bytes | bytearray | memoryview], int] | None:
    module = load_extension("kafka_handoff.producer._fastencode")
    fn: Callable[[bytes | bytearray | memoryview], int] | None = getattr(module, "fnv1a", None)
    return fn


_c_fnv1a = _load_c_fnv1a()
fnv1a: Callable[[bytes | bytearray | memoryview], int] = _c_fnv1a if _c_fnv1a is not None else _py_fnv1a
"""librdkafka's ``rd_fnv1a`` (unsigned); the optional C extension's when built (same results)."""


PARTITIONERS: Final = _PARTITIONERS
"""The ``partitioner`` setting's values (librdkafka's names).  ``murmur2_random`` is Java's default
partitioner; librdkafka's default is ``consistent_random``.

* ``murmur2_random``: murmur2 of the key (as Java); records without a key use sticky partitioning.
* ``murmur2``: murmur2 of the key; no key hashes as an empty key (one partition for all of them).
* ``consistent_random``: CRC32 of the key; records with no or an empty key use sticky partitioning.
* ``consistent``: CRC32 of the key; no key and empty keys go to one partition (CRC32 of nothing is 0).
* ``fnv1a_random``: FNV-1a of the key; records without a key use sticky partitioning.
* ``fnv1a``: FNV-1a of the key; no key hashes as an empty key.
* ``random``: a uniformly random partition per keyed record; records without a key use sticky partitioning.

Sticky partitioning (for the ``*_random`` ones and ``random``) is Java's: one partition until about
``batch.size`` bytes were produced there (librdkafka switches after ``sticky.partitioning.linger.ms``
instead); ``partitioner.ignore.keys=true`` uses it for every record whatever the partitioner."""

# partitioner_code(): the hash in the low bits, then when no key / an empty key means "sticky".
_HASH_MURMUR2: Final = 0
_HASH_CRC32: Final = 1
_HASH_FNV1A: Final = 2
_HASH_RANDOM: Final = 3
_NULL_STICKY: Final = 0x10
_EMPTY_STICKY: Final = 0x20
_CODES: Final = {
    "murmur2_random": _HASH_MURMUR2 | _NULL_STICKY,
    "murmur2": _HASH_MURMUR2,
    "consistent_random": _HASH_CRC32 | _NULL_STICKY | _EMPTY_STICKY,
    "consistent": _HASH_CRC32,
    "fnv1a_random": _HASH_FNV1A | _NULL_STICKY,
    "fnv1a": _HASH_FNV1A,
    "random": _HASH_RANDOM | _NULL_STICKY,
}


def partitioner_code(name: str) -> int:
    """The partitioner as the C send path reads it: the hash (0 murmur2, 1 CRC32, 2 FNV-1a, 3 random) in
    bits 0-3, ``0x10`` when records without a key are sticky, ``0x20`` when empty keys are too."""
    try:
        return _CODES[name]
    except KeyError:
        raise ValueError(f"unknown partitioner {name!r} (allowed: {', '.join(PARTITIONERS)})") from None


KeyPartitioner = Callable[[bytes | None, int], int | None]
"""``(serialized key or None, partition count) -> partition``, or None for the topic's sticky partition."""


def key_partitioner(name: str, rng: random.Random | None = None) -> KeyPartitioner:
    """The key partitioner called ``name`` (one of :data:`PARTITIONERS`); ``rng`` serves ``random``."""
    code = partitioner_code(name)
    kind = code & 0xF
    null_sticky = bool(code & _NULL_STICKY)
    empty_sticky = bool(code & _EMPTY_STICKY)
    if kind == _HASH_RANDOM:
        rand = (rng if rng is not None else random.Random()).randrange

        def by_random(key: bytes | None, num_partitions: int) -> int | None:
            return None if key is None else rand(num_partitions)

        return by_random
    hash_fn: Callable[[bytes | bytearray | memoryview], int]
    if kind == _HASH_MURMUR2:
        hash_fn = murmur2
        mask = 0x7FFFFFFF
    else:
        hash_fn = crc32 if kind == _HASH_CRC32 else fnv1a
        mask = _MASK

    def by_hash(key: bytes | None, num_partitions: int) -> int | None:
        if key is None:
            if null_sticky:
                return None
            key = b""
        elif empty_sticky and not key:
            return None
        return (hash_fn(key) & mask) % num_partitions

    return by_hash


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
