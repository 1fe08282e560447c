"""The producer's ``partitioner`` setting against librdkafka itself: the same keys produced by confluent-kafka
(librdkafka) and by our producer, with each named partitioner, to topics of several partition counts on the
real broker, land in the same partitions (as their delivery reports say).  Records whose partition librdkafka
picks at random (no key, or an empty key with ``consistent_random``) only have to land in one sticky
partition of the topic."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from kafka_handoff.producer import Producer
from kafka_handoff.producer.partitioner import PARTITIONERS, key_partitioner

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITION_COUNTS = (1, 3, 16, 31)


def _keys() -> list[bytes | None]:
    rng = random.Random(27)
    keys: list[bytes | None] = [None, b"", b"\x00", b"a", "ключ-€".encode()]
    keys += [b"user-%d" % i for i in range(120)]
    keys += [rng.randbytes(rng.randrange(1, 64)) for _ in range(120)]
    return keys


def _librdkafka_partitions(bootstrap: str, topic: str, name: str, keys: list[bytes | None]) -> list[int]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "partitioner": name, "linger.ms": 5})
    got: dict[int, int] = {}

    def report(index: int) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            assert err is None, err
            got[index] = msg.partition()

        return on_delivery

    for i, key in enumerate(keys):
        producer.produce(topic, value=b"%d" % i, key=key, on_delivery=report(i))
        producer.poll(0)
    assert producer.flush(60) == 0
    return [got[i] for i in range(len(keys))]


def _our_partitions(bootstrap: str, topic: str, name: str, keys: list[bytes | None]) -> list[int]:
    with Producer({"bootstrap.servers": bootstrap, "partitioner": name}) as producer:
        futures = [producer.send(topic, b"%d" % i, key=key) for i, key in enumerate(keys)]
        return [f.result(60).partition for f in futures]


@pytest.mark.parametrize("count", PARTITION_COUNTS)
def test_our_partitioners_place_keys_where_librdkafka_does(
    topic_factory: Any, broker: Any, count: int
) -> None:
    topic = topic_factory(partitions=count)
    keys = _keys()
    for name in PARTITIONERS:
        theirs = _librdkafka_partitions(broker.bootstrap_servers, topic, name, keys)
        ours = _our_partitions(broker.bootstrap_servers, topic, name, keys)
        choose = key_partitioner(name)
        decided = [i for i, key in enumerate(keys) if name != "random" and choose(key, count) is not None]
        assert [ours[i] for i in decided] == [theirs[i] for i in decided], name
        sticky = [ours[i] for i, key in enumerate(keys) if key is None or choose(key, count) is None]
        assert len(set(sticky)) <= 1, name  # nothing was produced to switch the sticky partition
        assert all(0 <= p < count for p in ours)
        if name in ("consistent", "murmur2", "fnv1a"):  # deterministic for every key, no key included
            assert ours == theirs, name
    # The default (no setting) is Java's: keyed records go where librdkafka's murmur2_random puts them.
    theirs = _librdkafka_partitions(broker.bootstrap_servers, topic, "murmur2_random", keys)
    with Producer({"bootstrap.servers": broker.bootstrap_servers}) as producer:
        keyed = [i for i, key in enumerate(keys) if key is not None]
        futures = [producer.send(topic, b"default", key=keys[i]) for i in keyed]
        assert [f.result(60).partition for f in futures] == [theirs[i] for i in keyed]
