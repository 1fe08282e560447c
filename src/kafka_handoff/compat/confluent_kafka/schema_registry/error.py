"""confluent-kafka's ``confluent_kafka.schema_registry.error``."""

from __future__ import annotations

from kafka_handoff.schema_registry import SchemaRegistryError

__all__ = ["SchemaRegistryError"]
