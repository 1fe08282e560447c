"""confluent-kafka's ``confluent_kafka.schema_registry.avro``: the native serdes, same names."""

from __future__ import annotations

from kafka_handoff.schema_registry.avro import *  # noqa: F403
from kafka_handoff.schema_registry.avro import __all__ as _native_all

__all__ = list(_native_all)
