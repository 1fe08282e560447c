"""A Schema Registry client (Confluent's REST API) with confluent-kafka's names.

``SchemaRegistryClient(conf)`` and its asyncio twin ``AsyncSchemaRegistryClient``; the objects they take and
return (``Schema``, ``SchemaReference``, ``RegisteredSchema``, ``ServerConfig``) and their error
``SchemaRegistryError``.  The serializers live in ``kafka_handoff.schema_registry.avro``, ``.protobuf`` and
``.json_schema``."""

from kafka_handoff.schema_registry._model import (
    ConfigCompatibilityLevel,
    RegisteredSchema,
    Schema,
    SchemaReference,
    SchemaRegistryError,
    SchemaVersion,
    ServerConfig,
)
from kafka_handoff.schema_registry.client import AsyncSchemaRegistryClient, SchemaRegistryClient

__all__ = [
    "AsyncSchemaRegistryClient",
    "ConfigCompatibilityLevel",
    "RegisteredSchema",
    "Schema",
    "SchemaReference",
    "SchemaRegistryClient",
    "SchemaRegistryError",
    "SchemaVersion",
    "ServerConfig",
]
