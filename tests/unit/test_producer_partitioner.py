"""Java-compatible partitioning: murmur2 vectors from Kafka's own tests, keyed partition choice, and the
sticky (built-in) partitioner for records without a key."""

from __future__ import annotations

import collections
import random
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_handoff.producer import partitioner
from kafka_handoff.producer.partitioner import BuiltInPartitioner, key_partition, murmur2, to_positive

pytestmark = pytest.mark.unit

# Kafka's clients UtilsTest.testMurmur2 (expected Java ints), plus values of Utils.murmur2 for short
# numeric strings published alongside other Java-compatible implementations.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"1": -1993445489,
    b"12": 126087238,
    b"123": -267702483,
    b"1234": -1614185708,
    b"12345": -1188365604,
}


IMPLEMENTATIONS = [pytest.param(partitioner._py_murmur2, id="python")]
if partitioner._c_murmur2 is not None:
    IMPLEMENTATIONS.append(pytest.param(partitioner._c_murmur2, id="c"))


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize(("data", "expected"), sorted(KAFKA_VECTORS.items()))
def test_murmur2_matches_java(impl: Callable[[bytes], int], data: bytes, expected: int) -> None:
    assert impl(data) == expected


@pytest.mark.skipif(partitioner._c_murmur2 is None, reason="the C extension is not built")
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_c_and_python_murmur2_agree(data: bytes) -> None:
    assert partitioner._c_murmur2 is not None
    assert partitioner._c_murmur2(data) == partitioner._py_murmur2(data)


def test_murmur2_accepts_bytes_like_and_empty() -> None:
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == -790332482
    # Empty input: h = seed ^ 0, then the final mix only.
    assert isinstance(murmur2(b""), int)
    assert -(2**31) <= murmur2(b"") < 2**31


def test_murmur2_covers_every_tail_length() -> None:
    # Lengths 0..3 mod 4 take different tail branches; all must stay 32-bit signed.
    for n in range(0, 40):
        h = murmur2(bytes(range(n)))
        assert -(2**31) <= h < 2**31


def test_to_positive_is_not_abs() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


def test_key_partition_is_java_formula() -> None:
    for key, h in KAFKA_VECTORS.items():
        for n in (1, 2, 3, 6, 12, 50, 1000):
            assert key_partition(key, n) == (h & 0x7FFFFFFF) % n


def test_key_partition_known_choices() -> None:
    # Worked by hand from the vectors: toPositive(-790332482) = 1357151166.
    assert key_partition(b"foobar", 6) == 1357151166 % 6 == 0
    assert key_partition(b"abc", 10) == 479470107 % 10 == 7


# ---------------------------------------------------------------------------------------------------------
# sticky partitioning


def test_sticky_stays_until_batch_size_then_switches_when_batches_full() -> None:
    choices: list[int] = []

    class Counting(BuiltInPartitioner):
        __slots__ = ()

        def _next(self, num_partitions: int, available: Sequence[int]) -> int:
            choice = super()._next(num_partitions, available)
            choices.append(choice)
            return choice

    p = Counting("t", 1000, random.Random(1))
    everything = list(range(8))
    first = p.partition(8, everything)
    assert choices == [first]
    for _ in range(9):
        p.on_append(first, 100, False, 8, everything)
        assert p.partition(8, everything) == first
    # 1000 bytes produced, but the last batch is not full: still sticky, no new choice.
    p.on_append(first, 100, False, 8, everything)
    assert p.current == first and len(choices) == 1
    # The next append finds every batch full (enable_switch): a new partition is chosen.
    p.on_append(first, 0, True, 8, everything)
    assert len(choices) == 2
    assert p.current == choices[1]


def test_sticky_does_not_switch_early_when_batches_full() -> None:
    p = BuiltInPartitioner("t", 1000, random.Random(1))
    first = p.partition(4, [0, 1, 2, 3])
    p.on_append(first, 999, True, 4, [0, 1, 2, 3])
    assert p.current == first


def test_sticky_switches_after_twice_batch_size_even_without_full_batches() -> None:
    p = BuiltInPartitioner("t", 1000, random.Random(7))
    first = p.partition(4, [0, 1, 2, 3])
    switches = 0
    produced = 0
    current = first
    for _ in range(100):
        p.on_append(current, 100, False, 4, [0, 1, 2, 3])
        produced += 100
        if p.produced == 0:
            switches += 1
            assert produced == 2000  # exactly at 2 x batch size
            produced = 0
        current = p.partition(4, [0, 1, 2, 3])
    assert switches == 5


def test_sticky_only_picks_available_partitions() -> None:
    p = BuiltInPartitioner("t", 10, random.Random(3))
    available = [1, 4]
    seen = set()
    for _ in range(200):
        part = p.partition(6, available)
        seen.add(part)
        p.on_append(part, 10, True, 6, available)
    assert seen == {1, 4}


def test_sticky_without_available_partitions_uses_any() -> None:
    p = BuiltInPartitioner("t", 10, random.Random(3))
    seen = set()
    for _ in range(300):
        part = p.partition(3, [])
        seen.add(part)
        p.on_append(part, 10, True, 3, [])
    assert seen == {0, 1, 2}


def test_sticky_choice_is_uniform_without_load_stats() -> None:
    p = BuiltInPartitioner("t", 1, random.Random(11))
    counts: collections.Counter[int] = collections.Counter()
    for _ in range(6000):
        part = p.partition(3, [0, 1, 2])
        counts[part] += 1
        p.on_append(part, 1, True, 3, [0, 1, 2])
    for part in (0, 1, 2):
        assert 1700 < counts[part] < 2300


def test_adaptive_load_stats_favour_short_queues() -> None:
    p = BuiltInPartitioner("t", 1, random.Random(5))
    # Queue sizes 0, 3, 1 -> weights 4, 1, 3 (Java's example): probabilities 4/8, 1/8, 3/8.
    p.update_load_stats([0, 3, 1], [0, 1, 2], 3)
    counts: collections.Counter[int] = collections.Counter()
    for _ in range(8000):
        part = p.partition(3, [0, 1, 2])
        counts[part] += 1
        p.on_append(part, 1, True, 3, [0, 1, 2])
    assert 3700 < counts[0] < 4300
    assert 800 < counts[1] < 1200
    assert 2700 < counts[2] < 3300


def test_adaptive_equal_queues_fall_back_to_uniform() -> None:
    p = BuiltInPartitioner("t", 1, random.Random(5))
    p.update_load_stats([2, 2, 2], [0, 1, 2], 3)
    assert p._load_table is None
    # ... but not when a partition was left out (no leader): then the stats stay in force.
    p.update_load_stats([2, 2], [0, 2], 3)
    assert p._load_table == [1, 2]
    for _ in range(50):
        part = p.partition(3, [0, 1, 2])
        assert part in (0, 2)
        p.on_append(part, 1, True, 3, [0, 1, 2])


def test_single_partition_topic_needs_no_stats() -> None:
    p = BuiltInPartitioner("t", 1, random.Random(5))
    p.update_load_stats([5], [0], 1)
    assert p._load_table is None
    assert p.partition(1, [0]) == 0
