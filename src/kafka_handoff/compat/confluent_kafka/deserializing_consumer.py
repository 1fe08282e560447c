"""confluent-kafka's ``DeserializingConsumer``: a :class:`Consumer` that applies ``key.deserializer`` and
``value.deserializer`` (``Deserializer`` objects or callables ``(bytes, SerializationContext) -> object``)
and raises :class:`ConsumeError` for error events instead of returning them."""

from __future__ import annotations

from typing import Any

from kafka_handoff.compat.confluent_kafka.consumer import Consumer
from kafka_handoff.compat.confluent_kafka.error import (
    ConsumeError,
    KafkaError,
    KafkaException,
    KeyDeserializationError,
    ValueDeserializationError,
)
from kafka_handoff.compat.confluent_kafka.serialization import MessageField, SerializationContext
from kafka_handoff.compat.confluent_kafka.types import Message

__all__ = ["DeserializingConsumer"]


class DeserializingConsumer(Consumer):
    """A consumer with deserializers (confluent-kafka's ``DeserializingConsumer``)."""

    _key_deserializer: Any = None
    _value_deserializer: Any = None

    def _prepare_config(self, conf: dict[str, Any]) -> None:
        for name, attr in (
            ("key.deserializer", "_key_deserializer"),
            ("value.deserializer", "_value_deserializer"),
        ):
            value = conf.pop(name, None)
            if value is not None and not callable(value):
                raise KafkaException(
                    KafkaError(
                        KafkaError._INVALID_ARG, f'Configuration property "{name}": expected a callable'
                    )
                )
            setattr(self, attr, value)

    def poll(self, timeout: float | None = -1) -> Message | None:
        """The next message with its key and value deserialized, or ``None`` after ``timeout`` seconds;
        raises :class:`ConsumeError` for an error event and ``Key``/``ValueDeserializationError`` when a
        deserializer fails."""
        msg = super().poll(timeout)
        if msg is None:
            return None
        error = msg.error()
        if error is not None:
            raise ConsumeError(error, kafka_message=msg)
        topic = str(msg.topic())
        headers = msg.headers()
        value = msg.value()
        if self._value_deserializer is not None:
            try:
                value = self._value_deserializer(
                    value, SerializationContext(topic, MessageField.VALUE, headers)
                )
            except Exception as e:
                raise ValueDeserializationError(exception=e, kafka_message=msg) from e
        key = msg.key()
        if self._key_deserializer is not None:
            try:
                key = self._key_deserializer(key, SerializationContext(topic, MessageField.KEY, headers))
            except Exception as e:
                raise KeyDeserializationError(exception=e, kafka_message=msg) from e
        msg.set_key(key)
        msg.set_value(value)
        return msg

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Message]:
        """Not offered by ``DeserializingConsumer`` (as in confluent-kafka): use :meth:`poll`."""
        raise NotImplementedError("DeserializingConsumer.consume() is not implemented; use poll()")
