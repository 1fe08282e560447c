"""kafka-handoff: a Python Kafka client whose consumer hands partitions between group members
without stalls and without duplicates."""

from kafka_handoff.errors import (
    CommitFailedError,
    ConfigError,
    CorruptRecordError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    WakeupError,
)

__version__ = "0.1.0"

__all__ = [
    "CommitFailedError",
    "ConfigError",
    "CorruptRecordError",
    "IllegalStateError",
    "KafkaError",
    "KafkaTimeoutError",
    "WakeupError",
    "__version__",
]
