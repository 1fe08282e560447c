"""confluent-kafka-python's API on kafka-handoff: switch a program with one import line::

    from kafka_handoff.compat import confluent_kafka          # was: import confluent_kafka
    from kafka_handoff.compat.confluent_kafka import Consumer  # was: from confluent_kafka import Consumer

librdkafka's configuration names are translated (:mod:`.config`); docs/migrating.md lists the behaviour
differences and how to move to the native API (KIP-983 delayed revocation, listener views).
"""

from __future__ import annotations

from kafka_handoff.compat.confluent_kafka import admin, error, serialization
from kafka_handoff.compat.confluent_kafka.admin._types import (
    ConsumerGroupState,
    ConsumerGroupType,
    IsolationLevel,
)
from kafka_handoff.compat.confluent_kafka.consumer import Consumer
from kafka_handoff.compat.confluent_kafka.deserializing_consumer import DeserializingConsumer
from kafka_handoff.compat.confluent_kafka.error import KafkaError, KafkaException
from kafka_handoff.compat.confluent_kafka.producer import Producer, SerializingProducer
from kafka_handoff.compat.confluent_kafka.types import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    ConsumerGroupTopicPartitions,
    Message,
    Node,
    TopicCollection,
    TopicPartition,
)

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "Consumer",
    "ConsumerGroupState",
    "ConsumerGroupTopicPartitions",
    "ConsumerGroupType",
    "DeserializingConsumer",
    "IsolationLevel",
    "KafkaError",
    "KafkaException",
    "Message",
    "Node",
    "Producer",
    "SerializingProducer",
    "TopicCollection",
    "TopicPartition",
    "admin",
    "error",
    "libversion",
    "serialization",
    "version",
]

_VERSION = "2.6.0"
"""The confluent-kafka-python API level this layer follows."""


def version() -> tuple[str, int]:
    """``(version string, version int)`` of the confluent-kafka API this layer implements."""
    major, minor, patch = (int(x) for x in _VERSION.split("."))
    return (_VERSION, (major << 24) | (minor << 16) | (patch << 8))


def libversion() -> tuple[str, int]:
    """librdkafka's ``(version string, version int)`` -- here kafka-handoff's version (no librdkafka)."""
    from kafka_handoff import __version__

    parts = [int(x) for x in __version__.split(".")[:3]]
    while len(parts) < 3:
        parts.append(0)
    return (f"kafka-handoff {__version__}", (parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8))
