"""The producer: batching, compression, idempotence and Java-compatible partitioning."""

from kafka_handoff.producer.partitioner import key_partition, murmur2
from kafka_handoff.producer.producer import Producer

__all__ = ["Producer", "key_partition", "murmur2"]
