"""Serializers and deserializers with a context against the real broker: headers a serializer adds are
sent, a deserializer sees topic/partition/field/headers, and a record that fails to deserialize is named by
the error's attributes so the application can seek past it (the asyncio consumer too)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from kafka_handoff.aio import AsyncConsumer
from kafka_handoff.consumer import Consumer
from kafka_handoff.errors import SerializationError
from kafka_handoff.producer import Producer
from kafka_handoff.serialization import MessageField, SerializationContext
from kafka_handoff.types import ConsumerRecord, TopicPartition

pytestmark = pytest.mark.integration


def _consumer_config(broker: Any, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap_servers,
        "group.id": f"g-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **extra,
    }


def _read(consumer: Consumer, count: int, timeout_s: float = 30) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {len(got)} of {count} records"
        got.extend(consumer.poll(0.5))
    return got


def test_serializer_headers_are_sent_and_deserializers_see_the_context(
    broker: Any, topic_factory: Any
) -> None:
    topic = topic_factory(partitions=2)
    seen: list[tuple[str, str, int | None]] = []

    def key_ser(key: str, ctx: SerializationContext) -> bytes:
        assert ctx.field == MessageField.KEY and ctx.topic == topic
        return key.encode()

    def value_ser(value: str, ctx: SerializationContext) -> bytes:
        assert ctx.headers is not None
        ctx.headers.append(("added-by", b"value-serializer"))
        seen.append((ctx.topic, ctx.field, ctx.partition))
        return value.encode()

    def value_des(data: bytes, ctx: SerializationContext) -> tuple[str, int | None, list[str]]:
        assert ctx.field == MessageField.VALUE and ctx.topic == topic
        return data.decode(), ctx.partition, [h[0] for h in ctx.headers or []]

    producer_config = {"bootstrap.servers": broker.bootstrap_servers, "key.serializer": key_ser}
    with Producer({**producer_config, "value.serializer": value_ser}) as producer:
        producer.send(topic, "a", key="k1", partition=1, headers=[("app", b"x")]).result(30)
        producer.send(topic, "b", key="k2", partition=0, headers={"app": b"y"}).result(30)
        producer.send_nowait(topic, "c", key="k3", partition=0)
        producer.flush(30)
    assert seen == [(topic, "value", 1), (topic, "value", 0), (topic, "value", 0)]

    config = _consumer_config(broker, **{"key.deserializer": bytes.decode, "value.deserializer": value_des})
    with Consumer(config) as consumer:
        consumer.subscribe([topic])
        records = sorted(_read(consumer, 3), key=lambda r: r.value)
    assert [(r.key, r.value) for r in records] == [
        ("k1", ("a", 1, ["app", "added-by"])),
        ("k2", ("b", 0, ["app", "added-by"])),
        ("k3", ("c", 0, ["added-by"])),
    ]
    assert list(records[0].headers) == [("app", b"x"), ("added-by", b"value-serializer")]


def test_send_many_refuses_a_serializer_that_adds_headers(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)

    def value_ser(value: str, ctx: SerializationContext) -> bytes:
        assert ctx.headers is not None
        ctx.headers.append(("h", b"1"))
        return value.encode()

    config = {"bootstrap.servers": broker.bootstrap_servers, "value.serializer": value_ser}
    with Producer(config) as producer, pytest.raises(SerializationError, match="send_many") as info:
        producer.send_many(topic, ["a", "b"])
    assert (info.value.topic, info.value.field) == (topic, "value")


def _poison_deserializer(data: bytes, ctx: SerializationContext) -> str:
    if data == b"poison":
        raise ValueError("not a valid record")
    return data.decode()


def _produce_with_poison(broker: Any, topic: str) -> None:
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0}) as producer:
        for value in (b"v0", b"v1", b"poison", b"v3", b"v4"):
            producer.send(topic, value, partition=0).result(30)


def test_a_poison_pill_is_named_by_the_error_and_skipped_by_seeking_past_it(
    broker: Any, topic_factory: Any
) -> None:
    topic = topic_factory(partitions=1)
    _produce_with_poison(broker, topic)
    with Consumer(_consumer_config(broker, **{"value.deserializer": _poison_deserializer})) as consumer:
        consumer.subscribe([topic])
        got: list[str] = []
        deadline = time.monotonic() + 30
        error: SerializationError | None = None
        while error is None:
            assert time.monotonic() < deadline, f"no error; read {got}"
            try:
                got.extend(r.value for r in consumer.poll(0.5))
            except SerializationError as exc:
                error = exc
        assert got == ["v0", "v1"]
        assert (error.topic, error.partition, error.offset, error.field) == (topic, 0, 2, MessageField.VALUE)
        assert isinstance(error.__cause__, ValueError)
        tp = TopicPartition(error.topic, error.partition)
        assert consumer.position(tp) == 2  # the position stays at the poison pill...
        with pytest.raises(SerializationError):  # ...which fails again until the application skips it
            consumer.poll(0.5)
        consumer.seek(tp, error.offset + 1)
        assert [r.value for r in _read(consumer, 2)] == ["v3", "v4"]


def test_the_asyncio_consumer_names_the_poison_pill_too(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    _produce_with_poison(broker, topic)

    async def run() -> tuple[list[str], SerializationError]:
        config = _consumer_config(broker, **{"value.deserializer": _poison_deserializer})
        async with AsyncConsumer(config) as consumer:
            await consumer.subscribe([topic])
            got: list[str] = []
            while True:
                try:
                    batch = await asyncio.wait_for(consumer.poll(0.5), 30)
                except SerializationError as exc:
                    consumer.seek(TopicPartition(exc.topic, exc.partition), exc.offset + 1)
                    error = exc
                    break
                got.extend(r.value for r in batch)
            while len(got) < 4:
                got.extend(r.value for r in await asyncio.wait_for(consumer.poll(0.5), 30))
            return got, error

    got, error = asyncio.run(run())
    assert got == ["v0", "v1", "v3", "v4"]
    assert (error.partition, error.offset) == (0, 2)
