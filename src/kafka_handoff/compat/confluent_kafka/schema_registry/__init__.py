"""confluent-kafka's ``confluent_kafka.schema_registry`` on kafka-handoff: the registry client, its objects
and the serdes' strategies are the native ones (:mod:`kafka_handoff.schema_registry`) under the same names, so
``from kafka_handoff.compat.confluent_kafka.schema_registry.avro import AvroSerializer`` replaces
``from confluent_kafka.schema_registry.avro import AvroSerializer``."""

from __future__ import annotations

from kafka_handoff.schema_registry import *  # noqa: F403
from kafka_handoff.schema_registry import __all__ as _native_all

__all__ = list(_native_all)
