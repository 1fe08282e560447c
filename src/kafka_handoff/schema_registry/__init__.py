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

# The serdes' shared pieces, exported here as confluent-kafka does (subject name strategies, schema id
# placement); the serdes themselves are in .avro, .protobuf and .json_schema (they need the extras).
from kafka_handoff.schema_registry.serde import (
    SchemaId,
    dual_schema_id_deserializer,
    header_schema_id_serializer,
    prefix_schema_id_deserializer,
    prefix_schema_id_serializer,
    record_subject_name_strategy,
    reference_subject_name_strategy,
    topic_record_subject_name_strategy,
    topic_subject_name_strategy,
)

__all__ += [
    "SchemaId",
    "dual_schema_id_deserializer",
    "header_schema_id_serializer",
    "prefix_schema_id_deserializer",
    "prefix_schema_id_serializer",
    "record_subject_name_strategy",
    "reference_subject_name_strategy",
    "topic_record_subject_name_strategy",
    "topic_subject_name_strategy",
]
