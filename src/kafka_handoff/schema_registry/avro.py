"""Avro serdes with Schema Registry framing (``fastavro``): confluent-kafka's ``AvroSerializer`` and
``AvroDeserializer`` -- the same constructors, conf keys and wire format.

Give either to a client as ``value.serializer``/``value.deserializer`` (or ``key.``): they take
``(value, ctx)``, so the client passes the topic, field and headers the subject name strategy and the
header-based schema id need::

    registry = SchemaRegistryClient({"url": "http://localhost:8081"})
    producer = Producer({"bootstrap.servers": ..., "value.serializer": AvroSerializer(registry, schema_str)})
    consumer = Consumer({..., "value.deserializer": AvroDeserializer(registry)})

Records are dicts (the generic mode) unless ``to_dict``/``from_dict`` convert them from/to objects.  The
deserializer decodes with the writer's schema (fetched by id, cached) and, given a reader schema
(``schema_str``, or the subject's latest version with ``use.latest.version``), resolves the writer's data to
it (Avro schema resolution: added fields take their defaults, removed ones are skipped).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from typing import Any

try:
    import fastavro
    from fastavro.read import SchemaResolutionError
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "kafka_handoff.schema_registry.avro needs fastavro: pip install 'kafka-handoff[schema-registry]'"
    ) from exc

from kafka_handoff.errors import SerializationError
from kafka_handoff.schema_registry._model import Schema, SchemaReference
from kafka_handoff.schema_registry.serde import (
    BaseDeserializer,
    BaseSerializer,
    SchemaId,
    _no_rules,
    resolve_references,
)
from kafka_handoff.serialization import SerializationContext

__all__ = ["AvroDeserializer", "AvroSerializer", "parse_schema_str"]

AVRO = "AVRO"


def _loads(schema_str: str) -> Any:
    """A schema's JSON text; a bare primitive name (``string``) is accepted as confluent-kafka does."""
    text = schema_str.strip()
    if text in {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}:
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the Avro schema is not valid JSON: {exc}") from exc


def _record_name(parsed: Any) -> str | None:
    """The fully-qualified name of a record/enum/fixed schema (None for a union or a primitive)."""
    if isinstance(parsed, dict):
        name = parsed.get("name")
        if isinstance(name, str):
            return name
        kind = parsed.get("type")
        return kind if isinstance(kind, str) else None
    return None


def parse_schema_str(schema: Schema, registry: Any = None) -> Any:
    """``schema`` parsed by fastavro, its references (named types registered under other subjects)
    fetched from ``registry`` and parsed first."""
    named: dict[str, Any] = {}
    if schema.references:
        if registry is None:
            raise ValueError(
                "the Avro schema has references: a schema_registry_client is needed to resolve them"
            )

        def visit(ref: SchemaReference, referenced: Schema) -> None:
            fastavro.parse_schema(_loads(referenced.schema_str), named_schemas=named)

        resolve_references(registry, schema.references, visit)
    return fastavro.parse_schema(_loads(schema.schema_str), named_schemas=named)


class _ParsedCache:
    def __init__(self, registry: Any) -> None:
        self._registry = registry
        self._parsed: dict[Schema, Any] = {}

    def get(self, schema: Schema) -> Any:
        parsed = self._parsed.get(schema)
        if parsed is None:
            parsed = parse_schema_str(schema, self._registry)
            self._parsed[schema] = parsed
        return parsed


class AvroSerializer(BaseSerializer):
    """Avro binary with Schema Registry framing.

    ``schema_str`` (the Avro schema's JSON text, or a :class:`Schema` with references) is registered under
    the subject of ``subject.name.strategy`` (``auto.register.schemas``, default on) or looked up there;
    with ``use.latest.version`` the subject's latest version is used instead (``schema_str`` may be
    None).  ``to_dict(obj, ctx)`` turns an application object into the dict to write.  conf:
    ``auto.register.schemas``, ``normalize.schemas``, ``use.schema.id``, ``use.latest.version``,
    ``use.latest.with.metadata``, ``subject.name.strategy``, ``schema.id.serializer`` (prefix or
    header), ``validate.strict``, ``validate.strict.allow.default``."""

    _schema_type = AVRO

    def __init__(
        self,
        schema_registry_client: Any,
        schema_str: str | Schema | None = None,
        to_dict: Callable[[Any, SerializationContext], Any] | None = None,
        conf: Mapping[str, Any] | None = None,
        rule_conf: Mapping[str, Any] | None = None,
        rule_registry: Any = None,
    ) -> None:
        super().__init__(schema_registry_client)
        _no_rules("AvroSerializer", rule_conf, rule_registry)
        c = self._configure(conf, {"validate.strict": False, "validate.strict.allow.default": False})
        self._strict = c.boolean("validate.strict")
        self._strict_allow_default = c.boolean("validate.strict.allow.default")
        c.done()
        if to_dict is not None and not callable(to_dict):
            raise ValueError("to_dict must be callable: to_dict(object, SerializationContext) -> dict")
        self._to_dict = to_dict
        self._parsed = _ParsedCache(schema_registry_client)
        if isinstance(schema_str, str):
            schema_str = Schema(schema_str, AVRO)
        elif schema_str is not None and not isinstance(schema_str, Schema):
            raise TypeError("schema_str must be the schema's JSON text, a Schema or None")
        self._schema = schema_str
        self._schema_name: str | None = None
        if schema_str is not None:
            parsed = self._parsed.get(schema_str)
            self._schema_name = _record_name(parsed)
        elif not (
            self._use_latest_version or self._use_latest_with_metadata or self._use_schema_id is not None
        ):
            raise ValueError(
                "AvroSerializer: schema_str is needed unless use.latest.version or use.schema.id is set"
            )

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        if obj is None:
            return None
        subject = self._subject(ctx, self._schema_name)
        schema_id, schema = self._schema_for(subject, self._schema)
        parsed = self._parsed.get(schema)
        if self._to_dict is not None:
            if ctx is None:
                raise SerializationError("AvroSerializer: to_dict needs a SerializationContext")
            obj = self._to_dict(obj, ctx)
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(
                out, parsed, obj, strict=self._strict, strict_allow_default=self._strict_allow_default
            )
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            raise SerializationError(
                f"the value does not match the Avro schema {self._schema_name or ''}: {exc}"
            ) from exc
        return self._schema_id_serializer(out.getvalue(), ctx, schema_id)  # type: ignore[no-any-return]


class AvroDeserializer(BaseDeserializer):
    """Avro binary with Schema Registry framing, to dicts (or, with ``from_dict(dict, ctx)``, objects).

    The writer's schema comes from the registry by the record's schema id (prefix or header).  The reader
    schema is ``schema_str`` when given, or with ``use.latest.version`` the latest version of the subject
    (``subject.name.strategy``); else records are read as written.  ``return_record_name``: unions of
    records are read as ``(name, dict)`` tuples (fastavro's)."""

    _schema_type = AVRO

    def __init__(
        self,
        schema_registry_client: Any,
        schema_str: str | Schema | None = None,
        from_dict: Callable[[Any, SerializationContext], Any] | None = None,
        return_record_name: bool = False,
        conf: Mapping[str, Any] | None = None,
        rule_conf: Mapping[str, Any] | None = None,
        rule_registry: Any = None,
    ) -> None:
        super().__init__(schema_registry_client)
        _no_rules("AvroDeserializer", rule_conf, rule_registry)
        self._configure(conf).done()
        self._parsed = _ParsedCache(schema_registry_client)
        if isinstance(schema_str, str):
            schema_str = Schema(schema_str, AVRO)
        elif schema_str is not None and not isinstance(schema_str, Schema):
            raise TypeError("schema_str must be the schema's JSON text, a Schema or None")
        self._schema = schema_str
        self._reader = self._parsed.get(schema_str) if schema_str is not None else None
        if from_dict is not None and not callable(from_dict):
            raise ValueError("from_dict must be callable: from_dict(dict, SerializationContext) -> object")
        self._from_dict = from_dict
        if not isinstance(return_record_name, bool):
            raise ValueError("return_record_name must be a boolean value")
        self._return_record_name = return_record_name

    def __call__(self, data: bytes | None, ctx: SerializationContext | None = None) -> Any:
        if data is None:
            return None
        schema_id = SchemaId(AVRO)
        payload: io.BytesIO = self._schema_id_deserializer(data, ctx, schema_id)
        subject = None
        reader: Any = self._reader
        latest_wanted = self._use_latest_version or self._use_latest_with_metadata is not None
        if latest_wanted and ctx is not None:
            subject = self._subject(ctx, None)
        writer_schema = self._writer_schema(schema_id, subject)
        writer = self._parsed.get(writer_schema)
        if latest_wanted and ctx is not None:
            if subject is None:
                subject = self._subject(ctx, _record_name(writer))
            if subject is not None:
                latest = self._reader_schema(subject)
                if latest is not None:
                    reader = self._parsed.get(latest.schema)
        try:
            obj = fastavro.schemaless_reader(
                payload, writer, reader if reader is not None else writer, self._return_record_name
            )
        except SchemaResolutionError as exc:
            raise SerializationError(
                f"the writer's Avro schema (id {schema_id.id}) does not resolve to the reader's: {exc}"
            ) from exc
        except Exception as exc:
            raise SerializationError(
                f"the data does not decode with the writer's Avro schema (id {schema_id.id}): {exc!r}"
            ) from exc
        if self._from_dict is not None:
            return self._from_dict(obj, ctx)  # type: ignore[arg-type]
        return obj
