"""kafka-python 3's serializer classes (``kafka.serializer``) and how the compat clients call serializers.

kafka-python accepts a plain callable (``value_serializer=lambda v: json.dumps(v).encode()``) or, since
3.0, a :class:`Serializer` / :class:`Deserializer` object whose method also receives the topic and headers.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable
from typing import Any

__all__ = ["DefaultSerializer", "Deserializer", "JsonSerializer", "Serializer", "deserializer", "serializer"]

Headers = list[tuple[str, bytes | None]]


class Serializer(abc.ABC):
    @abc.abstractmethod
    def serialize(self, topic: str, headers: Headers, data: Any) -> bytes | None: ...

    def close(self) -> None:  # noqa: B027 -- optional hook
        """Called when the producer closes."""


class Deserializer(abc.ABC):
    @abc.abstractmethod
    def deserialize(self, topic: str, headers: Headers, data: bytes | None) -> Any: ...

    def close(self) -> None:  # noqa: B027 -- optional hook
        """Called when the consumer closes."""


class DefaultSerializer(Serializer, Deserializer):
    """Text in ``encoding`` (bytes and ``None`` pass through when serializing)."""

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def serialize(self, topic: str, headers: Headers, data: Any) -> bytes | None:
        if data is None or isinstance(data, (bytes, bytearray, memoryview)):
            return None if data is None else bytes(data)
        return str(data).encode(self.encoding)

    def deserialize(self, topic: str, headers: Headers, data: bytes | None) -> Any:
        return None if data is None else data.decode(self.encoding)


class JsonSerializer(DefaultSerializer):
    """JSON text in ``encoding`` (``None`` stays ``None``: a tombstone).  As kafka-python's, bytes are not
    passed through: ``json.dumps`` refuses them."""

    def serialize(self, topic: str, headers: Headers, data: Any) -> bytes | None:
        return None if data is None else super().serialize(topic, headers, json.dumps(data))

    def deserialize(self, topic: str, headers: Headers, data: bytes | None) -> Any:
        return None if data is None else json.loads(data.decode(self.encoding))


SerializeFn = Callable[[str, Headers, Any], Any]


def serializer(value: Any, key: str) -> SerializeFn | None:
    """``(topic, headers, data) -> bytes`` for a ``key_serializer``/``value_serializer`` setting."""
    return _adapt(value, key, Serializer, "serialize")


def deserializer(value: Any, key: str) -> SerializeFn | None:
    """``(topic, headers, data) -> value`` for a ``key_deserializer``/``value_deserializer`` setting."""
    return _adapt(value, key, Deserializer, "deserialize")


def _adapt(value: Any, key: str, base: type, method_name: str) -> SerializeFn | None:
    """``value`` (None, a ``base`` or anything with a ``method_name`` method, or a plain callable of the
    data) as a ``(topic, headers, data)`` function; anything else is a configuration error naming ``key``."""
    if value is None:
        return None
    if isinstance(value, base) or callable(getattr(value, method_name, None)):
        method = getattr(value, method_name)
        return lambda topic, headers, data: method(topic, headers, data)
    if callable(value):
        fn = value
        return lambda topic, headers, data: fn(data)
    from kafka_handoff.compat.kafka_python.errors import KafkaConfigurationError

    raise KafkaConfigurationError(f"{key} must be a callable or a {base.__name__}, got {value!r}")
