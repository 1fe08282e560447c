"""confluent-kafka's ``serialization`` module: serializers, deserializers and their context."""

from __future__ import annotations

import struct
from typing import Any

from kafka_handoff.compat.confluent_kafka.error import KafkaException

# The native clients' context, under the same names (one class: a (de)serializer written for either works
# with both).
from kafka_handoff.serialization import MessageField, SerializationContext

__all__ = [
    "Deserializer",
    "DoubleDeserializer",
    "DoubleSerializer",
    "IntegerDeserializer",
    "IntegerSerializer",
    "MessageField",
    "SerializationContext",
    "SerializationError",
    "Serializer",
    "StringDeserializer",
    "StringSerializer",
]


class SerializationError(KafkaException):
    """A serializer or deserializer failed."""


class Serializer:
    """Base class: ``__call__(obj, ctx)`` returns bytes (or ``None``)."""

    __slots__: tuple[str, ...] = ()

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        raise NotImplementedError


class Deserializer:
    """Base class: ``__call__(value, ctx)`` returns the object."""

    __slots__: tuple[str, ...] = ()

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        raise NotImplementedError


class DoubleSerializer(Serializer):
    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        if obj is None:
            return None
        try:
            return struct.pack(">d", obj)
        except struct.error as e:
            raise SerializationError(str(e)) from e


class DoubleDeserializer(Deserializer):
    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        if value is None:
            return None
        try:
            return struct.unpack(">d", value)[0]
        except struct.error as e:
            raise SerializationError(str(e)) from e


class IntegerSerializer(Serializer):
    """32-bit big-endian signed integers (Java's ``IntegerSerializer``)."""

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        if obj is None:
            return None
        try:
            return struct.pack(">i", obj)
        except struct.error as e:
            raise SerializationError(str(e)) from e


class IntegerDeserializer(Deserializer):
    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        if value is None:
            return None
        try:
            return struct.unpack(">i", value)[0]
        except struct.error as e:
            raise SerializationError(str(e)) from e


class StringSerializer(Serializer):
    __slots__ = ("codec",)

    def __init__(self, codec: str = "utf_8") -> None:
        self.codec = codec

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        if obj is None:
            return None
        if not isinstance(obj, str):
            raise SerializationError(f"StringSerializer: expected a str, got {type(obj).__name__}")
        try:
            return obj.encode(self.codec)
        except UnicodeError as e:
            raise SerializationError(str(e)) from e


class StringDeserializer(Deserializer):
    __slots__ = ("codec",)

    def __init__(self, codec: str = "utf_8") -> None:
        self.codec = codec

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        if value is None:
            return None
        try:
            return value.decode(self.codec)
        except UnicodeError as e:
            raise SerializationError(str(e)) from e
