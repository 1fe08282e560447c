"""JSON Schema serdes with Schema Registry framing (``jsonschema``): confluent-kafka's ``JSONSerializer`` and
``JSONDeserializer`` -- the same constructors, conf keys and wire format (the JSON text after the schema
id).

Values are validated against the schema (``validate``, default on) before they are written and after they
are read; a value that does not match raises :class:`~kafka_handoff.errors.SerializationError` naming the
failing path.  Schemas may reference others registered under other subjects (``$ref`` to a reference's
name)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

try:
    import jsonschema
    import referencing
    import referencing.jsonschema
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "kafka_handoff.schema_registry.json_schema needs jsonschema: "
        "pip install 'kafka-handoff[schema-registry]'"
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

__all__ = ["JSONDeserializer", "JSONSerializer"]

JSON = "JSON"


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the JSON schema is not valid JSON: {exc}") from exc


class _Validators:
    """A validator per schema (its references resolved from the registry), built once."""

    def __init__(self, registry: Any) -> None:
        self._registry = registry
        self._cache: dict[Schema, tuple[Any, Any]] = {}

    def get(self, schema: Schema) -> tuple[Any, Any]:
        """``(schema document, validator)``."""
        found = self._cache.get(schema)
        if found is not None:
            return found
        document = _loads(schema.schema_str)
        resources: list[tuple[str, Any]] = []
        if schema.references:
            if self._registry is None:
                raise ValueError("the JSON schema has references: a schema_registry_client is needed")

            def visit(ref: SchemaReference, referenced: Schema) -> None:
                doc = _loads(referenced.schema_str)
                resources.append(
                    (
                        ref.name,
                        referencing.jsonschema.specification_with(
                            doc.get("$schema", "https://json-schema.org/draft/2020-12/schema")
                            if isinstance(doc, dict)
                            else "https://json-schema.org/draft/2020-12/schema"
                        ).create_resource(doc),
                    )
                )

            resolve_references(self._registry, schema.references, visit)
        cls = jsonschema.validators.validator_for(document, default=jsonschema.Draft7Validator)
        cls.check_schema(document)
        registry: Any = referencing.Registry().with_resources(resources)
        validator = cls(document, registry=registry)
        found = (document, validator)
        self._cache[schema] = found
        return found


def _validate(validator: Any, value: Any, what: str) -> None:
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is not None:
        path = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise SerializationError(f"the {what} does not match its JSON schema at {path}: {error.message}")


class JSONSerializer(BaseSerializer):
    """JSON text with Schema Registry framing.

    ``schema_str`` (the JSON Schema's text, or a :class:`Schema` with references) is registered under the
    subject of ``subject.name.strategy`` (the record name is the schema's ``title``).  ``to_dict(obj,
    ctx)`` turns an object into the JSON value to write; ``json_encode`` replaces ``json.dumps``.  conf:
    ``auto.register.schemas``, ``normalize.schemas``, ``use.schema.id``, ``use.latest.version``,
    ``use.latest.with.metadata``, ``subject.name.strategy``, ``schema.id.serializer``, ``validate``."""

    _schema_type = JSON

    def __init__(
        self,
        schema_str: str | Schema | None,
        schema_registry_client: Any,
        to_dict: Callable[[Any, SerializationContext], Any] | None = None,
        conf: Mapping[str, Any] | None = None,
        rule_conf: Mapping[str, Any] | None = None,
        rule_registry: Any = None,
        json_encode: Callable[[Any], str | bytes] | None = None,
    ) -> None:
        super().__init__(schema_registry_client)
        _no_rules("JSONSerializer", rule_conf, rule_registry)
        c = self._configure(conf, {"validate": True})
        self._validate = c.boolean("validate")
        c.done()
        if isinstance(schema_str, str):
            schema_str = Schema(schema_str, JSON)
        elif schema_str is not None and not isinstance(schema_str, Schema):
            raise TypeError("schema_str must be the JSON schema's text, a Schema or None")
        fixed = self._use_latest_version or self._use_latest_with_metadata or self._use_schema_id is not None
        if schema_str is None and not fixed:
            raise ValueError("JSONSerializer: schema_str is needed unless use.latest.version is set")
        self._schema = schema_str
        self._validators = _Validators(schema_registry_client)
        self._schema_name: str | None = None
        if schema_str is not None:
            document, _ = self._validators.get(schema_str)
            title = document.get("title") if isinstance(document, dict) else None
            self._schema_name = title if isinstance(title, str) else None
        if to_dict is not None and not callable(to_dict):
            raise ValueError("to_dict must be callable: to_dict(object, SerializationContext) -> dict")
        self._to_dict = to_dict
        self._encode = json_encode or json.dumps

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        if obj is None:
            return None
        subject = self._subject(ctx, self._schema_name)
        schema_id, schema = self._schema_for(subject, self._schema)
        if self._to_dict is not None:
            if ctx is None:
                raise SerializationError("JSONSerializer: to_dict needs a SerializationContext")
            obj = self._to_dict(obj, ctx)
        if self._validate:
            _validate(self._validators.get(schema)[1], obj, "value")
        text = self._encode(obj)
        payload = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        return self._schema_id_serializer(payload, ctx, schema_id)  # type: ignore[no-any-return]


class JSONDeserializer(BaseDeserializer):
    """JSON text with Schema Registry framing, to JSON values (or, with ``from_dict(value, ctx)``, objects).

    Validated (``validate``) against ``schema_str`` when given, else the subject's latest version
    (``use.latest.version``), else the writer's schema (fetched by id from ``schema_registry_client``).
    ``json_decode`` replaces ``json.loads``."""

    _schema_type = JSON

    def __init__(
        self,
        schema_str: str | Schema | None,
        from_dict: Callable[[Any, SerializationContext], Any] | None = None,
        schema_registry_client: Any = None,
        conf: Mapping[str, Any] | None = None,
        rule_conf: Mapping[str, Any] | None = None,
        rule_registry: Any = None,
        json_decode: Callable[[bytes], Any] | None = None,
    ) -> None:
        super().__init__(schema_registry_client)
        _no_rules("JSONDeserializer", rule_conf, rule_registry)
        c = self._configure(conf, {"validate": True})
        self._validate = c.boolean("validate")
        c.done()
        if isinstance(schema_str, str):
            schema_str = Schema(schema_str, JSON)
        elif schema_str is not None and not isinstance(schema_str, Schema):
            raise TypeError("schema_str must be the JSON schema's text, a Schema or None")
        if schema_str is None and schema_registry_client is None:
            raise ValueError("JSONDeserializer: give schema_str or a schema_registry_client (or both)")
        self._schema = schema_str
        self._validators = _Validators(schema_registry_client)
        if schema_str is not None:
            self._validators.get(schema_str)
        if from_dict is not None and not callable(from_dict):
            raise ValueError("from_dict must be callable: from_dict(dict, SerializationContext) -> object")
        self._from_dict = from_dict
        self._decode = json_decode or json.loads

    def __call__(self, data: bytes | None, ctx: SerializationContext | None = None) -> Any:
        if data is None:
            return None
        schema_id = SchemaId(JSON)
        payload = self._schema_id_deserializer(data, ctx, schema_id).read()
        try:
            obj = self._decode(payload)
        except ValueError as exc:
            raise SerializationError(f"the data is not JSON: {exc}") from exc
        if self._validate:
            schema: Schema | None = None
            if (self._use_latest_version or self._use_latest_with_metadata is not None) and ctx is not None:
                subject = self._subject(ctx, None)
                latest = self._reader_schema(subject) if subject is not None else None
                schema = latest.schema if latest is not None else None
            if schema is None:
                schema = self._schema
            if schema is None:
                schema = self._writer_schema(schema_id, None)
            _validate(self._validators.get(schema)[1], obj, "value read")
        if self._from_dict is not None:
            return self._from_dict(obj, ctx)  # type: ignore[arg-type]
        return obj
