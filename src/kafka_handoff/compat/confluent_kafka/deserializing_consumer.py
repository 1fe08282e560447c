"""confluent-kafka's ``DeserializingConsumer`` (being written: branch i27-confluent)."""

from __future__ import annotations

from kafka_handoff.compat.confluent_kafka.consumer import Consumer

__all__ = ["DeserializingConsumer"]


class DeserializingConsumer(Consumer):
    pass
