"""Which serializers get a context (decided once from the signature), and the context's shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kafka_handoff.compat.confluent_kafka import serialization as confluent_serialization
from kafka_handoff.errors import SerializationError
from kafka_handoff.serialization import MessageField, SerializationContext, takes_context

pytestmark = pytest.mark.unit


def one(value: Any) -> bytes:
    return bytes(value)


def two(value: Any, ctx: SerializationContext) -> bytes:
    return bytes(value)


def optional_ctx(value: Any, ctx: SerializationContext | None = None) -> bytes:
    return bytes(value)


def optional_other(value: Any, encoding: str = "utf-8") -> bytes:
    return str(value).encode(encoding)


class CallableObject:
    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes:
        return bytes(obj)


def test_one_argument_callables_get_no_context() -> None:
    for fn in (one, optional_other, json.dumps, str.encode, bytes.decode, str, lambda v: v, None):
        assert not takes_context(fn), fn


def test_callables_with_a_required_or_ctx_named_second_parameter_get_the_context() -> None:
    for fn in (
        two,
        optional_ctx,
        CallableObject(),
        lambda v, c: v,
        confluent_serialization.StringSerializer(),
    ):
        assert takes_context(fn), fn


def test_context_carries_confluents_constructor_and_the_partition() -> None:
    headers: list[tuple[str, bytes | None]] = [("a", b"1")]
    ctx = SerializationContext("t", MessageField.VALUE, headers)
    assert (ctx.topic, ctx.field, ctx.headers, ctx.partition) == ("t", "value", headers, None)
    ctx.headers.append(("b", None))  # type: ignore[union-attr]
    assert headers == [("a", b"1"), ("b", None)]
    assert "partition=3" in repr(SerializationContext("t", MessageField.KEY, None, 3))


def test_compat_layer_reexports_the_same_classes() -> None:
    assert confluent_serialization.SerializationContext is SerializationContext
    assert confluent_serialization.MessageField is MessageField


def test_serialization_error_carries_the_record_as_attributes() -> None:
    e = SerializationError("bad", topic="t", partition=2, offset=41, field=MessageField.VALUE)
    assert (e.topic, e.partition, e.offset, e.field, str(e)) == ("t", 2, 41, "value", "bad")
    plain = SerializationError("bad")
    assert (plain.topic, plain.partition, plain.offset, plain.field) == ("", -1, -1, None)
