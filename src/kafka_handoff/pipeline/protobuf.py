"""Registry-framed Protobuf values into Arrow columns: the core of :func:`~.transform.parse_protobuf`.

A value written by a Confluent-compatible Protobuf serializer is magic byte 0, the writer schema's id (4
bytes, big-endian), the *message indexes* (where the message type sits in its ``.proto`` file: a zig-zag
varint count, then that many zig-zag varints; a single 0 means ``[0]``) and the message's bytes.
:class:`ProtobufColumns` parses them into a given message type (the reader's generated class: Protobuf's own
evolution rules apply -- unknown fields skipped, missing ones at their defaults) and makes one Arrow column
per top-level field of it.

The header checks are vectorised (numpy, as for Avro); the messages are parsed one by one with the protobuf
runtime (``ParseFromString``, C++/upb), then the fields read into column lists: a Python object per field
value, no native decoder (what the Avro path has is not done for Protobuf).

Columns: ``double`` float64, ``float`` float32, ``int32``/``sint32``/``sfixed32`` int32,
``uint32``/``fixed32`` uint32, the 64-bit ones int64/uint64, ``bool``, ``string``, ``bytes`` binary, an
enum the value's name (string; an unknown number as its decimal text), a repeated scalar a list of it; a
message, a map or a repeated message the JSON text of the value (``MessageToDict``, field names as in the
``.proto``).  A field with presence (``optional``, a message, a oneof member) that is not set is null;
others hold their default.

Reject reasons: ``null value``; ``not registry-framed: ...``; ``unknown schema id N: ...``; ``schema id N is
an AVRO schema, not Protobuf``; ``invalid Protobuf message indexes (schema id N)``; ``invalid Protobuf data
(schema id N): ...`` (the runtime's DecodeError).  A registry outage raises
:class:`~kafka_handoff.pipeline.avro.RegistryUnavailableError`.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from kafka_handoff.pipeline.avro import HEADER_SIZE, MAGIC, Decoded, RegistryUnavailableError

__all__ = ["ProtobufColumns", "arrow_schema", "read_message_indexes"]

SHORT = f"not registry-framed: shorter than the {HEADER_SIZE}-byte header (magic byte 0 + schema id)"


def _scalar_types() -> dict[int, Any]:
    from google.protobuf.descriptor import FieldDescriptor as F

    return {
        F.TYPE_DOUBLE: pa.float64(), F.TYPE_FLOAT: pa.float32(), F.TYPE_INT64: pa.int64(),
        F.TYPE_SINT64: pa.int64(), F.TYPE_SFIXED64: pa.int64(), F.TYPE_UINT64: pa.uint64(),
        F.TYPE_FIXED64: pa.uint64(), F.TYPE_INT32: pa.int32(), F.TYPE_SINT32: pa.int32(),
        F.TYPE_SFIXED32: pa.int32(), F.TYPE_UINT32: pa.uint32(), F.TYPE_FIXED32: pa.uint32(),
        F.TYPE_BOOL: pa.bool_(), F.TYPE_STRING: pa.string(), F.TYPE_BYTES: pa.binary(),
        F.TYPE_ENUM: pa.string(),
    }  # fmt: skip


def _is_repeated(field: Any) -> bool:
    from google.protobuf.descriptor import FieldDescriptor as F

    repeated = getattr(field, "is_repeated", None)
    return bool(repeated) if repeated is not None else field.label == F.LABEL_REPEATED


def _field_type(field: Any) -> tuple[Any, str]:
    """(Arrow type, how to read it): ``scalar``, ``enum``, ``json``, ``list`` (repeated scalar),
    ``list_enum``."""
    from google.protobuf.descriptor import FieldDescriptor as F

    scalars = _scalar_types()
    if field.type == F.TYPE_MESSAGE:
        return pa.string(), "json"
    kind = "enum" if field.type == F.TYPE_ENUM else "scalar"
    if _is_repeated(field):
        return pa.list_(scalars[field.type]), f"list_{kind}" if kind == "enum" else "list"
    return scalars[field.type], kind


def arrow_schema(message_type: Any) -> Any:
    """The Arrow schema of the columns :class:`ProtobufColumns` makes of ``message_type``."""
    return pa.schema([pa.field(f.name, _field_type(f)[0]) for f in message_type.DESCRIPTOR.fields])


def _zigzag(data: bytes, at: int) -> tuple[int, int] | None:
    value = shift = 0
    while True:
        if at >= len(data) or shift >= 70:
            return None
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    value &= (1 << 64) - 1
    return (value >> 1) ^ -(value & 1), at


def read_message_indexes(data: bytes, at: int = HEADER_SIZE) -> tuple[list[int], int] | None:
    """The message indexes at ``data[at:]`` and where the message starts, or None when they are invalid."""
    got = _zigzag(data, at)
    if got is None:
        return None
    count, at = got
    if count == 0:
        return [0], at
    if count < 0 or count > 100:
        return None
    indexes = []
    for _ in range(count):
        got = _zigzag(data, at)
        if got is None or got[0] < 0:
            return None
        indexes.append(got[0])
        at = got[1]
    return indexes, at


@dataclass
class _Writer:
    error: str | None = None


class ProtobufColumns:
    """Decodes registry-framed Protobuf values into the columns of ``message_type`` (module docstring).
    ``registry``: anything with ``get_schema(schema_id)`` (the writer schema is only checked to exist and be
    a Protobuf schema); None: the schema ids are not checked."""

    def __init__(self, message_type: Any, registry: Any = None) -> None:
        self.message_type = message_type
        self.schema = arrow_schema(message_type)
        self.registry = registry
        self._fields = [(f, *_field_type(f)) for f in message_type.DESCRIPTOR.fields]
        self._writers: dict[int, _Writer] = {}
        self._lock = threading.Lock()

    def _writer(self, schema_id: int) -> _Writer:
        if self.registry is None:
            return _Writer()
        with self._lock:
            known = self._writers.get(schema_id)
        if known is not None:
            return known
        try:
            got = self.registry.get_schema(schema_id)
        except Exception as exc:
            status = getattr(exc, "http_status_code", None)
            if status == 404 or getattr(exc, "error_code", None) in (40403, 404):
                return _Writer(f"unknown schema id {schema_id}: {exc}")
            raise RegistryUnavailableError(
                f"fetching schema id {schema_id} from the schema registry failed: {exc}"
            ) from exc
        kind = getattr(got, "schema_type", None) or "AVRO"
        writer = _Writer(
            None if kind == "PROTOBUF" else f"schema id {schema_id} is an {kind} schema, not Protobuf"
        )
        with self._lock:
            self._writers[schema_id] = writer
        return writer

    def decode(self, values: Any) -> Decoded:
        from google.protobuf import json_format
        from google.protobuf.message import DecodeError

        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
        if not pa.types.is_binary(values.type):
            values = values.cast(pa.binary())
        n = len(values)
        errors: list[str | None] = [None] * n
        valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        cols: list[list[Any]] = [[] for _ in self._fields]
        ok = np.zeros(n, dtype=bool)
        for r in range(n):
            if not valid[r]:
                errors[r] = "null value"
                continue
            data: bytes = values[r].as_py()
            if len(data) < HEADER_SIZE:
                errors[r] = SHORT
                continue
            if data[0] != MAGIC:
                errors[r] = f"not registry-framed: magic byte 0x{data[0]:02x}, expected 0x00"
                continue
            schema_id = int.from_bytes(data[1:5], "big")
            writer = self._writer(schema_id)
            if writer.error is not None:
                errors[r] = writer.error
                continue
            found = read_message_indexes(data)
            if found is None:
                errors[r] = f"invalid Protobuf message indexes (schema id {schema_id})"
                continue
            message = self.message_type()
            try:
                message.ParseFromString(data[found[1] :])
            except DecodeError as exc:
                errors[r] = f"invalid Protobuf data (schema id {schema_id}): {exc}"
                continue
            ok[r] = True
            for col, (field, _, how) in zip(cols, self._fields, strict=True):
                if getattr(field, "has_presence", False) and not _is_repeated(field) and \
                        not message.HasField(field.name):  # fmt: skip
                    col.append(None)
                    continue
                value = getattr(message, field.name)
                if how == "json":
                    if _is_repeated(field) and field.message_type.GetOptions().map_entry:
                        value = {str(k): _plain(v) for k, v in value.items()}
                    elif _is_repeated(field):
                        value = [_plain(v) for v in value]
                    else:
                        value = json_format.MessageToDict(value, preserving_proto_field_name=True)
                    col.append(json.dumps(value, separators=(",", ":"), sort_keys=True))
                elif how == "enum":
                    col.append(_enum_name(field, value))
                elif how == "list_enum":
                    col.append([_enum_name(field, v) for v in value])
                elif how == "list":
                    col.append(list(value))
                else:
                    col.append(value)
        arrays = [pa.array(col, t) for col, (_, t, _) in zip(cols, self._fields, strict=True)]
        table = pa.table(arrays, schema=self.schema) if arrays else self.schema.empty_table()
        bad = [e for e in errors if e is not None]
        return Decoded(ok, table, pa.array(bad, pa.string()))


def _enum_name(field: Any, number: int) -> str:
    found = field.enum_type.values_by_number.get(number)
    return found.name if found is not None else str(number)


def _plain(value: Any) -> Any:
    from google.protobuf import json_format
    from google.protobuf.message import Message

    if isinstance(value, Message):
        return json_format.MessageToDict(value, preserving_proto_field_name=True)
    return value
