"""Protobuf serdes with Schema Registry framing (``protobuf``): confluent-kafka's ``ProtobufSerializer`` and
``ProtobufDeserializer`` -- the same constructors, conf keys and wire format.

The serializer registers the message's ``.proto`` file (its serialized descriptor, base64, as confluent-kafka
does) under the subject, after registering each file it imports (``reference.subject.name.strategy``:
under the import's file name; Google's well-known types are skipped with ``skip.known.types``) and
referencing them.  The record is the schema id, the message indexes (where the message type sits in its
file, zig-zag varints) and the message's bytes.

The deserializer parses into ``message_type``; without one (the generic mode) it builds the writer's
message type from the registry's schema (requested in the registry's ``serialized`` format) and returns a
dict (``MessageToDict``, field names as in the ``.proto``)."""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from typing import Any

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
    from google.protobuf.message import DecodeError
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "kafka_handoff.schema_registry.protobuf needs protobuf: pip install 'kafka-handoff[schema-registry]'"
    ) from exc

from kafka_handoff.errors import SerializationError
from kafka_handoff.schema_registry._model import Schema, SchemaReference
from kafka_handoff.schema_registry.serde import (
    BaseDeserializer,
    BaseSerializer,
    SchemaId,
    _no_rules,
    reference_subject_name_strategy,
    resolve_references,
)
from kafka_handoff.serialization import SerializationContext

__all__ = ["ProtobufDeserializer", "ProtobufSerializer", "message_indexes"]

PROTOBUF = "PROTOBUF"


def message_indexes(descriptor: Any) -> list[int]:
    """Where a message type sits in its ``.proto`` file: the index of its top-level message, then of each
    nested message down to it (``[0]``: the file's first message)."""
    path: list[int] = []
    d = descriptor
    while d.containing_type is not None:
        parent = d.containing_type
        names = [n.full_name for n in parent.nested_types]
        path.append(names.index(d.full_name))
        d = parent
    top = [m.full_name for m in d.file.message_types_by_name.values()]
    path.append(top.index(d.full_name))
    return path[::-1]


def _is_builtin(name: str) -> bool:
    return name.startswith(("confluent/", "google/protobuf/", "google/type/"))


def _schema_of(file_descriptor: Any) -> str:
    return base64.standard_b64encode(file_descriptor.serialized_pb).decode("ascii")


class ProtobufSerializer(BaseSerializer):
    """Protobuf messages of ``msg_type`` with Schema Registry framing.  conf: ``auto.register.schemas``,
    ``normalize.schemas``, ``use.schema.id``, ``use.latest.version``, ``use.latest.with.metadata``,
    ``skip.known.types``, ``subject.name.strategy`` (the record name is the message's full name),
    ``reference.subject.name.strategy``, ``schema.id.serializer``, ``use.deprecated.format`` (only
    False)."""

    _schema_type = PROTOBUF

    def __init__(
        self,
        msg_type: Any,
        schema_registry_client: Any,
        conf: Mapping[str, Any] | None = None,
        rule_conf: Mapping[str, Any] | None = None,
        rule_registry: Any = None,
    ) -> None:
        super().__init__(schema_registry_client)
        _no_rules("ProtobufSerializer", rule_conf, rule_registry)
        c = self._configure(
            conf,
            {
                "skip.known.types": True,
                "reference.subject.name.strategy": reference_subject_name_strategy,
                "use.deprecated.format": False,
            },
        )
        self._skip_known_types = c.boolean("skip.known.types")
        self._ref_subject = c.function("reference.subject.name.strategy")
        if c.boolean("use.deprecated.format"):
            raise ValueError(
                "ProtobufSerializer: use.deprecated.format is not supported (only the current format)"
            )
        c.done()
        descriptor = getattr(msg_type, "DESCRIPTOR", None)
        if descriptor is None or not hasattr(descriptor, "full_name"):
            raise ValueError("msg_type must be a generated Protobuf message class")
        self._msg_type = msg_type
        self._descriptor = descriptor
        self._indexes = message_indexes(descriptor)
        self._file = descriptor.file
        self._with_refs: dict[str, Schema] = {}

    def _references(self, ctx: SerializationContext | None, file_descriptor: Any) -> list[SchemaReference]:
        """The files ``file_descriptor`` imports, registered (``auto.register.schemas``) or looked up under
        their subjects, depth first."""
        refs: list[SchemaReference] = []
        for dep in file_descriptor.dependencies:
            if self._skip_known_types and _is_builtin(dep.name):
                continue
            dep_refs = self._references(ctx, dep)
            subject = self._ref_subject(ctx, dep)
            schema = Schema(_schema_of(dep), PROTOBUF, dep_refs)
            if self._auto_register:
                self._registry.register_schema(subject, schema, normalize_schemas=self._normalize_schemas)
            found = self._registry.lookup_schema(subject, schema, normalize_schemas=self._normalize_schemas)
            refs.append(SchemaReference(dep.name, subject, int(found.version)))
        return refs

    def __call__(self, message: Any, ctx: SerializationContext | None = None) -> bytes | None:
        if message is None:
            return None
        if not isinstance(message, self._msg_type):
            raise SerializationError(
                f"ProtobufSerializer: expected a {self._descriptor.full_name}, got {type(message).__name__}"
            )
        subject = self._subject(ctx, self._descriptor.full_name)
        key = subject or ""
        schema = self._with_refs.get(key)
        fixed = self._use_latest_version or self._use_latest_with_metadata or self._use_schema_id is not None
        if schema is None and not fixed:
            schema = Schema(_schema_of(self._file), PROTOBUF, self._references(ctx, self._file))
            self._with_refs[key] = schema
        schema_id, _ = self._schema_for(subject, schema, list(self._indexes))
        return self._schema_id_serializer(message.SerializeToString(), ctx, schema_id)  # type: ignore[no-any-return]


class ProtobufDeserializer(BaseDeserializer):
    """Schema Registry framed Protobuf to ``message_type`` instances (or, without a message type, dicts
    built from the writer's schema).  conf: ``use.latest.version``, ``use.latest.with.metadata``,
    ``subject.name.strategy``, ``schema.id.deserializer``, ``use.deprecated.format`` (only False)."""

    _schema_type = PROTOBUF

    def __init__(
        self,
        message_type: Any,
        conf: Mapping[str, Any] | None = None,
        schema_registry_client: Any = None,
        rule_conf: Mapping[str, Any] | None = None,
        rule_registry: Any = None,
    ) -> None:
        super().__init__(schema_registry_client)
        _no_rules("ProtobufDeserializer", rule_conf, rule_registry)
        c = self._configure(conf, {"use.deprecated.format": False})
        if c.boolean("use.deprecated.format"):
            raise ValueError("ProtobufDeserializer: use.deprecated.format is not supported")
        c.done()
        if message_type is None and schema_registry_client is None:
            raise ValueError(
                "ProtobufDeserializer: give a message_type, or a schema_registry_client for the generic mode"
            )
        self._message_type = message_type
        self._generic: dict[tuple[int | None, str, tuple[int, ...]], Any] = {}

    def __call__(self, data: bytes | None, ctx: SerializationContext | None = None) -> Any:
        if data is None:
            return None
        schema_id = SchemaId(PROTOBUF)
        payload: io.BytesIO = self._schema_id_deserializer(data, ctx, schema_id)
        body = payload.read()
        cls = self._message_type if self._message_type is not None else self._generic_class(schema_id)
        message = cls()
        try:
            message.ParseFromString(body)
        except DecodeError as exc:
            raise SerializationError(f"the data is not a valid {cls.DESCRIPTOR.full_name}: {exc}") from exc
        if self._message_type is None:
            return json_format.MessageToDict(message, preserving_proto_field_name=True)
        return message

    def _generic_class(self, schema_id: SchemaId) -> Any:
        """The writer's message type, built from its registered schema (and its references)."""
        key = (schema_id.id, str(schema_id.guid), tuple(schema_id.message_indexes or [0]))
        cls = self._generic.get(key)
        if cls is not None:
            return cls
        if schema_id.id is not None:
            schema = self._registry.get_schema(schema_id.id, fmt="serialized")
        else:
            schema = self._registry.get_schema_by_guid(str(schema_id.guid), fmt="serialized")
        pool = descriptor_pool.DescriptorPool()
        added: set[str] = set()

        def add(name: str, text: str) -> Any:
            proto = descriptor_pb2.FileDescriptorProto()
            try:
                proto.ParseFromString(base64.standard_b64decode(text))
            except (ValueError, DecodeError) as exc:
                raise SerializationError(
                    "the registry's Protobuf schema is not a serialized descriptor (the generic mode needs "
                    f"the registry's 'serialized' format; give a message_type instead): {exc}"
                ) from exc
            proto.name = name
            for dep in proto.dependency:
                if _is_builtin(dep) and dep not in added:
                    _add_builtin(pool, dep)
                    added.add(dep)
            added.add(name)
            return pool.Add(proto)

        def visit(ref: SchemaReference, referenced: Schema) -> None:
            if ref.name not in added:
                found = self._registry.get_version(ref.subject, ref.version, fmt="serialized")
                add(ref.name, found.schema.schema_str)

        resolve_references(self._registry, schema.references, visit)
        add(f"schema-{schema_id.id}.proto", schema.schema_str)
        file_desc = pool.FindFileByName(f"schema-{schema_id.id}.proto")
        indexes = schema_id.message_indexes or [0]
        desc = list(file_desc.message_types_by_name.values())[indexes[0]]
        for i in indexes[1:]:
            desc = desc.nested_types[i]
        cls = message_factory.GetMessageClass(desc)
        self._generic[key] = cls
        return cls


def _add_builtin(pool: Any, name: str) -> None:
    """Add one of Google's well-known ``.proto`` files (as compiled into the protobuf package) to ``pool``."""
    from google.protobuf import descriptor_pool as dp

    try:
        found = dp.Default().FindFileByName(name)
    except KeyError:
        module = "google.protobuf." + name.removeprefix("google/protobuf/").removesuffix(".proto") + "_pb2"
        try:
            __import__(module)
            found = dp.Default().FindFileByName(name)
        except (ImportError, KeyError):
            return
    proto = descriptor_pb2.FileDescriptorProto()
    found.CopyToProto(proto)
    for dep in proto.dependency:
        _add_builtin(pool, dep)
    try:
        pool.Add(proto)
    except (TypeError, ValueError):  # already there
        pass
