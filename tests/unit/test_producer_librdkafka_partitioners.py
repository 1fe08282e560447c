"""librdkafka's named partitioners (the producer's ``partitioner`` setting): the hashes against published
vectors, each partitioner's treatment of no key and of an empty key, the producer's C send path against its
Python methods, ``send_many``, and the setting's validation.  tests/integration/test_partitioners_oracle.py
checks the choices against librdkafka itself on a real broker."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_handoff.config import parse_producer_config
from kafka_handoff.errors import ConfigError
from kafka_handoff.producer import Producer
from kafka_handoff.producer import partitioner as part_mod
from kafka_handoff.producer.future import C_FUTURES
from kafka_handoff.producer.partitioner import (
    PARTITIONERS,
    crc32,
    fnv1a,
    key_partitioner,
    murmur2,
    partitioner_code,
)
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit

# Hash values published with librdkafka's partitioner test (tests/0048-partitioner.c): crc32 from the
# `crc32` command, murmur2 from Java's Utils.murmur2 (masked to 31 bits), FNV-1a from Go's hash/fnv.
KEYS: list[bytes | None] = [
    None,
    b"",
    b"23456",
    b"this is another string with more length to it perhaps",
    b"hejsan",
]
CRC32 = [0x0, 0x0, 0xB1B451D7, 0xB0150DF7, 0xD077037E]
MURMUR2 = [0x106E08D9, 0x106E08D9, 0x058D780F, 0x4F7703DA, 0x5EC19395]
FNV1A = [0x7EE3623B, 0x7EE3623B, 0x27E6F469, 0x155E3E5F, 0x17B1E27A]
STICKY = None  # the topic's sticky partition (a random one, kept for a while)

EXPECTED: dict[str, list[int | None]] = {
    "consistent": [h for h in CRC32],
    "consistent_random": [STICKY, STICKY, *CRC32[2:]],
    "murmur2": [h for h in MURMUR2],
    "murmur2_random": [STICKY, *MURMUR2[1:]],
    "fnv1a": [h for h in FNV1A],
    "fnv1a_random": [STICKY, *FNV1A[1:]],
}

# Go's hash/fnv FNV-1a (as librdkafka's rd_fnv1a unit test lists them), after librdkafka's absolute value.
FNV1A_VECTORS = {
    b"kafka": 0xD33C4E1,
    b"giberish123456789": 0x77A58295,
    b"1234": 0x23BDD03,
    b"234": 0x2DEA3CD2,
    b"34": 0x740FA83E,
    b"4": 0x310CA263,
    b"PreAmbleWillBeRemoved,ThePrePartThatIs": 0x65CBD69C,
    b"": 0x7EE3623B,
}


@pytest.mark.parametrize(("data", "expected"), sorted(FNV1A_VECTORS.items()))
@pytest.mark.parametrize("impl", [part_mod._py_fnv1a, fnv1a], ids=["python", "default"])
def test_fnv1a_matches_librdkafka(impl: Any, data: bytes, expected: int) -> None:
    assert impl(data) == expected


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=100))
def test_fnv1a_implementations_agree_and_stay_below_2_to_the_31_or_equal_it(data: bytes) -> None:
    value = fnv1a(data)
    assert value == part_mod._py_fnv1a(data)
    assert 0 <= value <= 0x80000000


def test_crc32_is_zlibs_crc() -> None:
    assert [crc32(k or b"") for k in KEYS] == CRC32


@pytest.mark.parametrize("count", [1, 7, 17, 64])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_partitioner_places_the_published_keys(name: str, count: int) -> None:
    choose = key_partitioner(name)
    got = [choose(key, count) for key in KEYS]
    assert got == [None if h is None else h % count for h in EXPECTED[name]]


def test_murmur2_random_is_javas_keyed_choice() -> None:
    choose = key_partitioner("murmur2_random")
    for i in range(500):
        key = b"k%d" % i
        assert choose(key, 13) == (murmur2(key) & 0x7FFFFFFF) % 13


def test_random_spreads_keyed_records_and_keeps_unkeyed_ones_sticky() -> None:
    choose = key_partitioner("random", random.Random(5))
    assert choose(None, 8) is None
    picks = {choose(b"same-key", 8) for _ in range(400)}
    assert picks == set(range(8))  # the key does not matter: any partition


def test_partitioner_codes_and_unknown_names() -> None:
    assert partitioner_code("murmur2_random") == 0x10
    assert partitioner_code("consistent_random") == 0x31
    assert partitioner_code("fnv1a") == 0x02
    with pytest.raises(ValueError, match="allowed: murmur2_random"):
        partitioner_code("sticky")


def test_the_setting_defaults_to_javas_and_refuses_unknown_names() -> None:
    assert parse_producer_config({"bootstrap.servers": "x:1"}).partitioner == "murmur2_random"
    assert parse_producer_config({"bootstrap.servers": "x:1", "partitioner": "FNV1A"}).partitioner == "fnv1a"
    allowed = r"'partitioner'.*allowed: murmur2_random, murmur2, consistent_random"
    with pytest.raises(ConfigError, match=allowed):
        parse_producer_config({"bootstrap.servers": "x:1", "partitioner": "round_robin"})
    assert set(PARTITIONERS) == {*EXPECTED, "random"}


# ----------------------------------------------------------------------------------------- the producer

TOPIC = "keyed"
PARTITIONS = 17


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _producer(name: str, **config: Any) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{_dead_port()}",
            "linger.ms": 600_000,  # nothing is sent (there is no broker)
            "reconnect.backoff.ms": 10_000,
            "reconnect.backoff.max.ms": 10_000,
            "partitioner": name,
            **config,
        }
    )
    producer._accumulator.update_topic(TOPIC, PARTITIONS, list(range(PARTITIONS)))
    producer._partition_counts = {TOPIC: PARTITIONS}
    return producer


def _placed(producer: Producer) -> dict[bytes | None, set[int]]:
    """Each queued record's value -> the partitions holding it."""
    out: dict[bytes | None, set[int]] = {}
    for p in range(PARTITIONS):
        for batch in producer._accumulator.queued_batches(TopicPartition(TOPIC, p)):
            for entry in batch.entries:
                out.setdefault(entry[1], set()).add(p)
    return out


@pytest.fixture(params=sorted(EXPECTED))
def named(request: pytest.FixtureRequest) -> Iterator[Producer]:
    producer = _producer(request.param)
    try:
        yield producer
    finally:
        producer.close(0)


@pytest.mark.parametrize("method", ["send", "send_nowait", "python_send", "send_many"])
def test_the_producer_places_keyed_records_with_its_partitioner(named: Producer, method: str) -> None:
    name = named.config.partitioner
    choose = key_partitioner(name)
    keys: list[bytes | None] = [*KEYS, *(b"key-%d" % i for i in range(200))]
    values = [b"v%d" % i for i in range(len(keys))]
    if method == "send_many":
        named.send_many(TOPIC, values, keys)
    else:
        send = {
            "send": named.send,
            "send_nowait": named.send_nowait,
            "python_send": Producer.send.__get__(named),  # the Python method even with the C extension
        }[method]
        for key, value in zip(keys, values, strict=True):
            send(TOPIC, value, key=key)
    placed = _placed(named)
    sticky: set[int] = set()
    for key, value in zip(keys, values, strict=True):
        expected = choose(key, PARTITIONS)
        (partition,) = placed[value]
        if expected is None:
            sticky.add(partition)
        else:
            assert partition == expected, (name, key)
    assert len(sticky) <= 1  # one sticky partition (nothing was produced to switch it)


@pytest.mark.skipif(
    C_FUTURES is None or not hasattr(C_FUTURES, "SendPath"), reason="the C extension is not built"
)
def test_the_c_send_path_reads_the_partitioner() -> None:
    producer = _producer("consistent")
    try:
        assert type(producer.send).__name__ == "SendPath"
        producer.send(TOPIC, b"by-c", key=b"hejsan")
        producer.send(TOPIC, b"no-key")  # consistent: no key hashes as empty, CRC32 0 -> partition 0
        assert _placed(producer) == {b"by-c": {0xD077037E % PARTITIONS}, b"no-key": {0}}
    finally:
        producer.close(0)


def test_random_with_keys_spreads_them_through_every_send_method() -> None:
    producer = _producer("random")
    try:
        for i in range(300):
            producer.send(TOPIC, b"s%d" % i, key=b"same")
        producer.send_many(TOPIC, [b"m%d" % i for i in range(300)], [b"same"] * 300)
        placed = _placed(producer)
        assert len({next(iter(placed[b"s%d" % i])) for i in range(300)}) > 1
        assert len({next(iter(placed[b"m%d" % i])) for i in range(300)}) > 1
    finally:
        producer.close(0)


def test_ignore_keys_overrides_the_partitioner() -> None:
    producer = _producer("consistent", **{"partitioner.ignore.keys": True})
    try:
        for i in range(50):
            producer.send(TOPIC, b"v%d" % i, key=b"k%d" % i)
        placed = _placed(producer)
        assert len({p for parts in placed.values() for p in parts}) == 1
    finally:
        producer.close(0)
