"""What the Avro, Protobuf and JSON Schema serdes share: Confluent's wire framing, subject name strategies,
the schema id in a header, and the configuration keys common to them (confluent-kafka's names).

Wire format (the schema id prefix): magic byte ``0``, the schema id as a 4-byte big-endian unsigned int,
then (Protobuf only) the message indexes, then the encoded payload.  Newer Confluent clients may carry the
schema id in a record header instead (``__key_schema_id``/``__value_schema_id``): magic byte ``1`` and the
schema's 16-byte GUID (then Protobuf's message indexes), with the payload left bare.  Deserializers look
for the header first and fall back to the prefix (``dual_schema_id_deserializer``, the default).

Message indexes locate a Protobuf message type in its ``.proto`` file: the path of indexes from the
top-level message down through nested ones, written as zig-zag varints, count first; the common ``[0]``
(the first top-level message) is the single byte ``0``.
"""

from __future__ import annotations

import io
import struct
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kafka_handoff.errors import SerializationError
from kafka_handoff.schema_registry._model import RegisteredSchema, Schema, SchemaReference
from kafka_handoff.serialization import MessageField, SerializationContext

__all__ = [
    "KEY_SCHEMA_ID_HEADER",
    "MAGIC_BYTE",
    "MAGIC_BYTE_V1",
    "VALUE_SCHEMA_ID_HEADER",
    "SchemaId",
    "decode_varint",
    "dual_schema_id_deserializer",
    "encode_varint",
    "header_schema_id_serializer",
    "prefix_schema_id_deserializer",
    "prefix_schema_id_serializer",
    "record_subject_name_strategy",
    "reference_subject_name_strategy",
    "topic_record_subject_name_strategy",
    "topic_subject_name_strategy",
]

MAGIC_BYTE = 0
MAGIC_BYTE_V1 = 1
KEY_SCHEMA_ID_HEADER = "__key_schema_id"
VALUE_SCHEMA_ID_HEADER = "__value_schema_id"

SubjectNameStrategy = Callable[[SerializationContext | None, str | None], str | None]


# ============================================================================================ strategies
def topic_subject_name_strategy(ctx: SerializationContext | None, record_name: str | None) -> str | None:
    """``{topic}-key`` or ``{topic}-value`` (the default; needs the context)."""
    if ctx is None:
        raise ValueError(
            "topic_subject_name_strategy needs a SerializationContext (the topic and field); "
            "use record_subject_name_strategy to serialize without one"
        )
    return f"{ctx.topic}-{ctx.field}"


def topic_record_subject_name_strategy(
    ctx: SerializationContext | None, record_name: str | None
) -> str | None:
    """``{topic}-{record name}`` (the record's fully-qualified name; needs the context)."""
    if ctx is None:
        raise ValueError("topic_record_subject_name_strategy needs a SerializationContext (the topic)")
    return None if record_name is None else f"{ctx.topic}-{record_name}"


def record_subject_name_strategy(ctx: SerializationContext | None, record_name: str | None) -> str | None:
    """The record's fully-qualified name (``com.example.Order``): one subject per type, on any topic."""
    return record_name


def reference_subject_name_strategy(ctx: SerializationContext | None, schema_ref: Any) -> str | None:
    """A referenced schema's subject: its name (a Protobuf import's file name: ``common/money.proto``)."""
    return None if schema_ref is None else str(schema_ref.name)


# ============================================================================================ varints
def encode_varint(value: int, zigzag: bool = True) -> bytes:
    """``value`` as a (zig-zag) varint, as Protobuf writes ``sint64``/``uint64``."""
    if zigzag:
        value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(buf: io.BytesIO, zigzag: bool = True) -> int:
    """The next (zig-zag) varint of ``buf``; :class:`SerializationError` when it ends inside one."""
    value = 0
    shift = 0
    while True:
        byte = buf.read(1)
        if not byte:
            raise SerializationError("the data ends inside a varint (Protobuf message indexes)")
        b = byte[0]
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
        if shift > 63:
            raise SerializationError("a varint longer than 10 bytes (Protobuf message indexes)")
    if zigzag:
        value = (value >> 1) ^ -(value & 1)
    return value


def encode_message_indexes(indexes: list[int]) -> bytes:
    """Protobuf message indexes: the count, then each index (zig-zag varints); ``[0]`` is one 0 byte."""
    if not indexes or indexes == [0]:
        return b"\x00"
    return encode_varint(len(indexes)) + b"".join(encode_varint(i) for i in indexes)


def decode_message_indexes(buf: io.BytesIO) -> list[int]:
    count = decode_varint(buf)
    if count == 0:
        return [0]
    if count < 0 or count > 1024:
        raise SerializationError(f"invalid Protobuf message index count {count}")
    return [decode_varint(buf) for _ in range(count)]


# ============================================================================================ schema ids
class SchemaId:
    """A schema's identity in a record: its registry id and/or GUID, and (Protobuf) the message indexes."""

    __slots__ = ("guid", "id", "message_indexes", "schema_type")

    def __init__(
        self,
        schema_type: str,
        schema_id: int | None = None,
        guid: str | None = None,
        message_indexes: list[int] | None = None,
    ) -> None:
        self.schema_type = schema_type
        self.id = schema_id
        self.guid = uuid.UUID(guid) if guid is not None else None
        self.message_indexes = message_indexes

    def __repr__(self) -> str:
        return f"SchemaId({self.schema_type}, id={self.id}, guid={self.guid}, indexes={self.message_indexes})"

    def from_bytes(self, payload: io.BytesIO) -> io.BytesIO:
        """Read the magic byte and the id (or GUID), and Protobuf's message indexes; ``payload`` is left at
        the encoded data."""
        magic = payload.read(1)
        if magic == b"\x00":
            raw = payload.read(4)
            if len(raw) != 4:
                raise SerializationError("the data ends inside the schema id (Confluent framing)")
            self.id = struct.unpack(">I", raw)[0]
        elif magic == b"\x01":
            raw = payload.read(16)
            if len(raw) != 16:
                raise SerializationError("the data ends inside the schema GUID (Confluent framing)")
            self.guid = uuid.UUID(bytes=raw)
        else:
            found = "no data" if not magic else f"{magic[0]}"
            raise SerializationError(
                f"unknown magic byte {found} (expected 0: not written by a Schema Registry serializer)"
            )
        if self.schema_type == "PROTOBUF":
            self.message_indexes = decode_message_indexes(payload)
        return payload

    def _indexes(self) -> bytes:
        return b"" if self.message_indexes is None else encode_message_indexes(self.message_indexes)

    def id_to_bytes(self) -> bytes:
        if self.id is None:
            raise SerializationError("the schema id is not known")
        return struct.pack(">bI", MAGIC_BYTE, self.id) + self._indexes()

    def guid_to_bytes(self) -> bytes:
        if self.guid is None:
            raise SerializationError(
                "the schema GUID is not known (the registry did not return one): the header-based schema "
                "id needs a registry that assigns GUIDs; use prefix_schema_id_serializer"
            )
        return bytes([MAGIC_BYTE_V1]) + self.guid.bytes + self._indexes()


def _header_name(ctx: SerializationContext) -> str:
    return KEY_SCHEMA_ID_HEADER if ctx.field == MessageField.KEY else VALUE_SCHEMA_ID_HEADER


def prefix_schema_id_serializer(
    payload: bytes, ctx: SerializationContext | None, schema_id: SchemaId
) -> bytes:
    """The schema id in front of the payload (magic byte 0; the default)."""
    return schema_id.id_to_bytes() + payload


def header_schema_id_serializer(
    payload: bytes, ctx: SerializationContext | None, schema_id: SchemaId
) -> bytes:
    """The schema GUID in the ``__key_schema_id``/``__value_schema_id`` header; the payload stays bare."""
    if ctx is None:
        raise SerializationError("header_schema_id_serializer needs a SerializationContext (the headers)")
    headers: Any = ctx.headers
    if headers is None:
        raise SerializationError("header_schema_id_serializer: the context has no headers to add to")
    value = schema_id.guid_to_bytes()
    if isinstance(headers, list):
        headers.append((_header_name(ctx), value))
    elif isinstance(headers, dict):
        headers[_header_name(ctx)] = value
    else:
        raise SerializationError(
            f"header_schema_id_serializer: cannot add to headers of {type(headers).__name__}"
        )
    return payload


def prefix_schema_id_deserializer(
    payload: bytes, ctx: SerializationContext | None, schema_id: SchemaId
) -> io.BytesIO:
    """Read the schema id from the payload's prefix."""
    return schema_id.from_bytes(io.BytesIO(payload))


def dual_schema_id_deserializer(
    payload: bytes, ctx: SerializationContext | None, schema_id: SchemaId
) -> io.BytesIO:
    """The schema id from the ``__key_schema_id``/``__value_schema_id`` header when the record has one,
    else from the payload's prefix (the default)."""
    if ctx is not None and ctx.headers:
        name = _header_name(ctx)
        headers: Any = ctx.headers
        value: Any = None
        if isinstance(headers, Mapping):
            value = headers.get(name)
        else:
            for h in headers:
                if h[0] == name:
                    value = h[1]
                    break
        if value is not None:
            schema_id.from_bytes(io.BytesIO(value))
            return io.BytesIO(payload)
    return schema_id.from_bytes(io.BytesIO(payload))


# ============================================================================================ base classes
_SERIALIZER_DEFAULTS: dict[str, Any] = {
    "auto.register.schemas": True,
    "normalize.schemas": False,
    "use.schema.id": None,
    "use.latest.version": False,
    "use.latest.with.metadata": None,
    "subject.name.strategy": topic_subject_name_strategy,
    "schema.id.serializer": prefix_schema_id_serializer,
}
_DESERIALIZER_DEFAULTS: dict[str, Any] = {
    "use.latest.version": False,
    "use.latest.with.metadata": None,
    "subject.name.strategy": topic_subject_name_strategy,
    "schema.id.deserializer": dual_schema_id_deserializer,
}


class _Conf:
    """A serde's conf: defaults overlaid with the application's; each key taken once with its type
    checked; what is left over is an error naming it."""

    def __init__(self, owner: str, defaults: dict[str, Any], conf: Mapping[str, Any] | None) -> None:
        self._owner = owner
        self._values = dict(defaults)
        if conf is not None:
            if not isinstance(conf, Mapping):
                raise ValueError(f"{owner}: conf must be a dict, got {type(conf).__name__}")
            self._values.update(conf)

    def boolean(self, key: str) -> bool:
        value = self._values.pop(key)
        if not isinstance(value, bool):
            raise ValueError(f"{self._owner}: {key} must be a boolean value (True or False), got {value!r}")
        return value

    def optional_int(self, key: str) -> int | None:
        value = self._values.pop(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"{self._owner}: {key} must be an int (a schema id) or None, got {value!r}")
        return value

    def optional_dict(self, key: str) -> dict[str, str] | None:
        value = self._values.pop(key)
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"{self._owner}: {key} must be a dict or None, got {value!r}")
        return value

    def function(self, key: str) -> Callable[..., Any]:
        value = self._values.pop(key)
        if not callable(value):
            raise ValueError(f"{self._owner}: {key} must be callable, got {value!r}")
        return value  # type: ignore[no-any-return]

    def done(self) -> None:
        if self._values:
            raise ValueError(f"{self._owner}: unrecognized properties: {', '.join(sorted(self._values))}")


def _no_rules(owner: str, rule_conf: Any, rule_registry: Any) -> None:
    if rule_conf or rule_registry is not None:
        raise ValueError(f"{owner}: data-contract rules (rule_conf, rule_registry) are not supported")


class BaseSerde:
    """The registry look-ups every serde does (subject, latest version) and its caches."""

    _schema_type = "AVRO"

    def __init__(self, registry: Any) -> None:
        self._registry = registry
        self._lock = threading.Lock()
        self._use_latest_version = False
        self._use_latest_with_metadata: dict[str, str] | None = None
        self._subject_name_func: SubjectNameStrategy = topic_subject_name_strategy

    def _subject(self, ctx: SerializationContext | None, record_name: str | None) -> str | None:
        return self._subject_name_func(ctx, record_name)

    def _reader_schema(self, subject: str) -> RegisteredSchema | None:
        """The subject's latest version (or the latest with the metadata) when so configured, else None."""
        if self._use_latest_with_metadata is not None:
            return self._registry.get_latest_with_metadata(  # type: ignore[no-any-return]
                subject, self._use_latest_with_metadata
            )
        if self._use_latest_version:
            return self._registry.get_latest_version(subject)  # type: ignore[no-any-return]
        return None

    def _writer_schema(self, schema_id: SchemaId, subject: str | None) -> Schema:
        if self._registry is None:
            raise SerializationError(
                f"{type(self).__name__}: a schema_registry_client is needed to fetch the writer's schema"
            )
        if schema_id.id is not None:
            return self._registry.get_schema(schema_id.id, subject_name=subject)  # type: ignore[no-any-return]
        return self._registry.get_schema_by_guid(str(schema_id.guid))  # type: ignore[no-any-return]


class BaseSerializer(BaseSerde):
    """Configuration of every serializer: ``auto.register.schemas``, ``normalize.schemas``,
    ``use.schema.id``, ``use.latest.version``, ``use.latest.with.metadata``, ``subject.name.strategy`` and
    ``schema.id.serializer``."""

    def _configure(self, conf: Mapping[str, Any] | None, extra: Mapping[str, Any] | None = None) -> _Conf:
        c = _Conf(type(self).__name__, {**_SERIALIZER_DEFAULTS, **(extra or {})}, conf)
        self._auto_register = c.boolean("auto.register.schemas")
        self._normalize_schemas = c.boolean("normalize.schemas")
        self._use_schema_id = c.optional_int("use.schema.id")
        self._use_latest_version = c.boolean("use.latest.version")
        self._use_latest_with_metadata = c.optional_dict("use.latest.with.metadata")
        if self._use_latest_version and self._auto_register:
            raise ValueError(
                f"{type(self).__name__}: cannot enable both use.latest.version and auto.register.schemas"
            )
        self._subject_name_func = c.function("subject.name.strategy")
        self._schema_id_serializer = c.function("schema.id.serializer")
        self._known: dict[str, tuple[SchemaId, Schema]] = {}
        return c

    def _schema_for(
        self, subject: str | None, schema: Schema | None, indexes: list[int] | None = None
    ) -> tuple[SchemaId, Schema]:
        """The schema id to write and the schema to write with, for ``subject``: ``use.schema.id``, else
        the subject's latest version (``use.latest.version``), else ``schema`` registered
        (``auto.register.schemas``) or looked up -- once per subject (cached)."""
        key = subject or ""
        with self._lock:
            known = self._known.get(key)
        if known is not None and not (self._use_latest_version or self._use_latest_with_metadata):
            return known
        if self._use_schema_id is not None:
            found = self._registry.get_schema(self._use_schema_id, subject_name=subject)
            result = (SchemaId(self._schema_type, self._use_schema_id, None, indexes), found)
        elif subject is None:
            raise SerializationError(
                f"{type(self).__name__}: the subject name strategy gave no subject (a record name is needed)"
            )
        elif self._use_latest_version or self._use_latest_with_metadata is not None:
            latest = self._reader_schema(subject)
            assert latest is not None
            result = (SchemaId(self._schema_type, latest.schema_id, latest.guid, indexes), latest.schema)
        else:
            if schema is None:
                raise SerializationError(
                    f"{type(self).__name__}: no schema given (schema_str) and use.latest.version is off"
                )
            if self._auto_register:
                registered = self._registry.register_schema_full_response(
                    subject, schema, normalize_schemas=self._normalize_schemas
                )
            else:
                registered = self._registry.lookup_schema(
                    subject, schema, normalize_schemas=self._normalize_schemas
                )
            result = (SchemaId(self._schema_type, registered.schema_id, registered.guid, indexes), schema)
        with self._lock:
            self._known[key] = result
        return result


class BaseDeserializer(BaseSerde):
    """Configuration of every deserializer: ``use.latest.version``, ``use.latest.with.metadata``,
    ``subject.name.strategy`` and ``schema.id.deserializer``."""

    def _configure(self, conf: Mapping[str, Any] | None, extra: Mapping[str, Any] | None = None) -> _Conf:
        c = _Conf(type(self).__name__, {**_DESERIALIZER_DEFAULTS, **(extra or {})}, conf)
        self._use_latest_version = c.boolean("use.latest.version")
        self._use_latest_with_metadata = c.optional_dict("use.latest.with.metadata")
        self._subject_name_func = c.function("subject.name.strategy")
        self._schema_id_deserializer = c.function("schema.id.deserializer")
        return c


def resolve_references(
    registry: Any,
    references: Any,
    visit: Callable[[SchemaReference, Schema], None],
    seen: set[str] | None = None,
) -> None:
    """Call ``visit(reference, schema)`` for every schema ``references`` lead to, depth first (a
    reference's own references before it), each (subject, version) once."""
    seen = set() if seen is None else seen
    for ref in references or ():
        key = f"{ref.subject}:{ref.version}"
        if key in seen:
            continue
        seen.add(key)
        registered = registry.get_version(ref.subject, ref.version)
        resolve_references(registry, registered.schema.references, visit, seen)
        visit(ref, registered.schema)
