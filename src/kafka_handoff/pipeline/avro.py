"""Registry-framed Avro values into Arrow columns: the decoding core of :func:`~.transform.parse_avro`.

A Kafka value written by a Confluent-compatible Avro serializer is a 5-byte header -- magic byte 0, the
writer schema's id (4 bytes, big-endian) -- and one Avro record of that schema.  :class:`AvroColumns` turns a
binary Arrow array of such values into the columns of a *reader* schema (a record), resolving each writer
schema against it (Avro's schema resolution: fields matched by name or alias, missing ones filled with their
default, writer-only ones skipped, ``int -> long -> float -> double`` and ``string <-> bytes`` promotion,
enum symbols by name, ``["null", T]`` unions as nullable columns).  Writer schemas are fetched from the
registry by id, once per id (cached for the decoder's life).

Three ways to decode, chosen per writer schema id:

* **native** (``_avrodecode.c``): when writer and reader are *flat* -- every field ``null``, ``boolean``,
  ``int``, ``long``, ``float``, ``double``, ``bytes``, ``string``, an enum, a fixed, or a two-branch union of
  ``null`` and one of those -- the C extension decodes the values straight into Arrow buffers of the writer's
  fields (no Python object per record); the resolution to the reader's fields is then a handful of Arrow
  column operations (casts, enum symbol maps, constant default columns);
* **python**: the same, in pure Python (:func:`_py_decode`), when the extension is not built or
  ``KAFKA_HANDOFF_PURE_PYTHON`` is set: the very same results (status, rejects and columns);
* **fastavro**: anything else (records, arrays, maps nested in a field, other unions, promotions the flat
  plan does not do): ``fastavro.schemaless_reader`` per record with both schemas, into Python lists, then
  ``pyarrow.array``.

Reader types become Arrow types: boolean ``bool``, int ``int32``, long ``int64``, float ``float32``, double
``float64``, bytes/fixed ``binary``, string ``string``, enum ``string`` (the symbol), record ``struct``,
array ``list``, map ``map<string, ...>``, ``["null", T]`` a nullable T; the logical types
``timestamp-millis``/``timestamp-micros`` (``timestamp[ms|us, UTC]``) and ``date`` (``date32``) of a
top-level field; other logical types keep their physical type.

Every value that cannot be read is a *reject* with a reason (never dropped): ``null value``; ``not
registry-framed: ...`` (shorter than the header, or a magic byte other than 0); ``unknown schema id N``;
``schema id N is not an Avro schema``; ``schema mismatch: ...`` (the writer schema cannot be resolved
against the reader's, bytes left after the record, an enum symbol or a null the reader has no place for);
``truncated Avro payload ...``; ``invalid Avro data ...``.  A registry that cannot be reached is not a
reason to reject: :class:`RegistryUnavailableError` is raised and the batch fails (and is retried).
"""

from __future__ import annotations

import dataclasses
import io
import json
import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from kafka_handoff._native import load_extension
from kafka_handoff.errors import ConfigError

__all__ = [
    "HEADER_SIZE",
    "IMPLEMENTATION",
    "AvroColumns",
    "Decoded",
    "RegistryUnavailableError",
    "arrow_schema",
    "frame",
]

#: The Confluent header: magic byte 0 + 4-byte big-endian schema id.
HEADER_SIZE = 5
MAGIC = 0

_NATIVE: Any = load_extension("kafka_handoff.pipeline._avrodecode")
#: ``"native"`` when the C decoder is in use, else ``"python"``.
IMPLEMENTATION = "native" if _NATIVE is not None else "python"

# Field kinds of the flat decoders (the C extension's constants).
K_NULL, K_BOOL, K_INT, K_LONG, K_FLOAT, K_DOUBLE, K_BYTES, K_STRING, K_ENUM, K_FIXED = range(10)
_KINDS = {"null": K_NULL, "boolean": K_BOOL, "int": K_INT, "long": K_LONG, "float": K_FLOAT,
          "double": K_DOUBLE, "bytes": K_BYTES, "string": K_STRING}  # fmt: skip
# Row statuses of the flat decoders.
S_OK, S_TRUNCATED, S_TRAILING, S_UNION, S_ENUM, S_UTF8, S_LENGTH, S_VARINT = range(8)
_PHYSICAL = {K_BOOL: pa.bool_(), K_INT: pa.int32(), K_LONG: pa.int64(), K_FLOAT: pa.float32(),
             K_DOUBLE: pa.float64(), K_BYTES: pa.binary(), K_STRING: pa.string(), K_ENUM: pa.int32(),
             K_FIXED: pa.binary(), K_NULL: pa.null()}  # fmt: skip
_LOGICAL: dict[tuple[str, str] | None, Any] = {("long", "timestamp-millis"): pa.timestamp("ms", tz="UTC"),
            ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
            ("int", "date"): pa.date32()}  # fmt: skip
#: Writer kind -> reader kinds it may be read as (besides itself), by the flat plan.
_PROMOTIONS = {K_INT: (K_LONG, K_FLOAT, K_DOUBLE), K_LONG: (K_FLOAT, K_DOUBLE), K_FLOAT: (K_DOUBLE,),
               K_STRING: (K_BYTES,)}  # fmt: skip


class RegistryUnavailableError(RuntimeError):
    """The schema registry could not answer (not: the id is unknown); the batch fails and is retried."""


def frame(schema_id: int, payload: bytes) -> bytes:
    """``payload`` with the Confluent header of ``schema_id``."""
    return struct.pack(">bI", MAGIC, schema_id) + payload


# ------------------------------------------------------------------------------------------- schemas
def _load(schema: Any) -> Any:
    if isinstance(schema, str):
        try:
            return json.loads(schema)
        except json.JSONDecodeError:
            return schema  # a bare primitive name, e.g. "string"
    return schema


def _named(schema: Any, names: dict[str, Any], namespace: str = "") -> Any:
    """``schema`` with named types (records, enums, fixed) defined inline at each use (references by name
    resolved), so the flat plan can look at every field's type without a symbol table."""
    if isinstance(schema, str):
        if schema in _KINDS:
            return schema
        full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
        found = names.get(full, names.get(schema))
        if found is None:
            raise ValueError(f"unknown type name {schema!r}")
        return found
    if isinstance(schema, list):
        return [_named(s, names, namespace) for s in schema]
    if not isinstance(schema, dict):
        raise ValueError(f"not an Avro schema: {schema!r}")
    kind = schema.get("type")
    if kind in ("record", "error", "enum", "fixed"):
        ns = schema.get("namespace", namespace) or ""
        name = str(schema.get("name", ""))
        full = name if "." in name or not ns else f"{ns}.{name}"
        out = dict(schema)
        names[full] = out
        names.setdefault(name, out)
        if kind in ("record", "error"):
            inner = full.rsplit(".", 1)[0] if "." in full else ns
            out["fields"] = [{**f, "type": _named(f["type"], names, inner)} for f in schema.get("fields", [])]
        return out
    if kind == "array":
        return {**schema, "items": _named(schema["items"], names, namespace)}
    if kind == "map":
        return {**schema, "values": _named(schema["values"], names, namespace)}
    if isinstance(kind, str | list | dict) and kind not in _KINDS:
        return {**schema, "type": _named(kind, names, namespace)} if not isinstance(kind, str) else \
            _named(kind, names, namespace)  # fmt: skip
    return schema


def _unwrap(t: Any) -> tuple[Any, int]:
    """(T, union) of a field type: union -1 for a plain T, 0 for ["null", T], 1 for [T, "null"]; None
    for T when the type is another union."""
    if isinstance(t, list):
        if len(t) == 2 and "null" in t and t[0] != t[1]:
            return (t[1], 0) if t[0] == "null" else (t[0], 1)
        return None, -1
    return t, -1


def _base(t: Any) -> str | None:
    """The type name of ``t`` ("long", "record", "enum", ...), or None."""
    if isinstance(t, str):
        return t
    if isinstance(t, dict):
        kind = t.get("type")
        return kind if isinstance(kind, str) else None
    return None


def _flat_kind(t: Any) -> int | None:
    name = _base(t)
    if name in _KINDS:
        return _KINDS[name]
    if name == "enum":
        return K_ENUM
    if name == "fixed":
        return K_FIXED
    return None


def _arrow(t: Any, top: bool = False) -> Any:
    """The Arrow type of an Avro type (module docstring); ValueError for unions beyond ["null", T]."""
    inner, union = _unwrap(t)
    if inner is None:
        raise ValueError(f'unions other than ["null", T] are not supported: {json.dumps(t)}')
    name = _base(inner)
    logical = (str(name), str(inner.get("logicalType"))) if isinstance(inner, dict) else None
    if top and logical in _LOGICAL:
        return _LOGICAL[logical]
    if name == "enum":
        return pa.string()
    kind = _flat_kind(inner)
    if kind is not None:
        if kind == K_NULL and union >= 0:
            raise ValueError("a union of null and null")
        return _PHYSICAL[kind]
    if name in ("record", "error"):
        return pa.struct([pa.field(f["name"], _arrow(f["type"])) for f in inner["fields"]])
    if name == "array":
        return pa.list_(_arrow(inner["items"]))
    if name == "map":
        return pa.map_(pa.string(), _arrow(inner["values"]))
    raise ValueError(f"unsupported Avro type {json.dumps(inner)}")


def _nullable(t: Any) -> bool:
    return _unwrap(t)[1] >= 0 or t == "null"


def arrow_schema(reader_schema: Any) -> Any:
    """The Arrow schema of the columns :class:`AvroColumns` makes of ``reader_schema`` (a record)."""
    reader = _named(_load(reader_schema), {})
    if _base(reader) not in ("record", "error"):
        raise ValueError("the reader schema must be an Avro record")
    return pa.schema(
        [pa.field(f["name"], _arrow(f["type"], top=True), _nullable(f["type"])) for f in reader["fields"]]
    )


def _strip_logical(t: Any) -> Any:
    """``t`` without logicalType annotations (fastavro then returns physical values, like the flat path)."""
    if isinstance(t, list):
        return [_strip_logical(s) for s in t]
    if isinstance(t, dict):
        out = {k: _strip_logical(v) for k, v in t.items() if k != "logicalType"}
        return out
    return t


# --------------------------------------------------------------------------------------- resolution
@dataclass(frozen=True)
class _Take:
    """A reader column from a writer column."""

    name: str
    writer_index: int
    """Index among the writer's KEPT columns."""
    writer_field: str
    kind: int
    reader_kind: int
    writer_nullable: bool
    reader_nullable: bool
    enum_map: Any = None
    """Writer enum index -> reader symbol (None: the writer symbol is not in the reader's enum)."""
    arrow: Any = None
    writer_symbols: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Default:
    name: str
    value: Any
    arrow: Any


@dataclass
class _Writer:
    schema_id: int
    error: str | None = None
    """Why no record of this id can be read (a reject reason for all of them)."""
    ops: list[tuple[int, int, int, int]] | None = None
    """The flat decoders' field ops, or None: the fastavro path."""
    names: list[str] | None = None
    """Writer field names (per op)."""
    plan: list[_Take | _Default] | None = None
    parsed: Any = None
    """fastavro's parsed writer schema (the fastavro path)."""


def _default_value(t: Any, value: Any) -> Any:
    """A field's JSON default as the Python value of its (physical) Arrow column."""
    inner, union = _unwrap(t)
    if union == 0:
        return None  # a ["null", T] default must be null
    if inner is None:
        raise ValueError("default of an unsupported union")
    kind = _flat_kind(inner)
    if kind in (K_BYTES, K_FIXED) and isinstance(value, str):
        return value.encode("latin-1")
    return value


_Op = tuple[int, int, int, int]
_Plan = tuple[list[_Op], list[str], list[_Take | _Default]]


def _plan(writer: Any, reader: Any, reader_arrow: Any) -> _Plan | str | None:
    """The flat plan from ``writer`` to ``reader`` (both records with inline named types): (ops, writer
    names, per reader field a _Take or _Default); None when the fastavro path must run; a string when the
    schemas cannot be resolved (the reason)."""
    ops: list[_Op] = []
    wname = str(writer.get("name", "")).rsplit(".", 1)[-1]
    rnames = [str(n).rsplit(".", 1)[-1] for n in (reader.get("name", ""), *reader.get("aliases", ()))]
    if wname not in rnames:
        return f"the writer's record is named {wname!r}, the reader's {rnames[0]!r}"
    wfields: dict[str, tuple[int, Any, int, int]] = {}
    names: list[str] = []
    for f in writer.get("fields", []):
        inner, union = _unwrap(f["type"])
        kind = _flat_kind(inner) if inner is not None else None
        if kind is None:
            return None
        arg = len(inner["symbols"]) if kind == K_ENUM else int(inner["size"]) if kind == K_FIXED else 0
        wfields[f["name"]] = (len(ops), inner, union, kind)
        ops.append((kind, union, 0, arg))
        names.append(f["name"])
    plan: list[_Take | _Default] = []
    for rf, arrow_field in zip(reader.get("fields", []), reader_arrow, strict=True):
        rinner, runion = _unwrap(rf["type"])
        rkind = _flat_kind(rinner) if rinner is not None else None
        if rkind is None or rkind == K_NULL:
            return None
        match = next((n for n in (rf["name"], *rf.get("aliases", ())) if n in wfields), None)
        if match is None:
            if "default" not in rf:
                return f"reader field {rf['name']!r} is not in the writer schema and has no default"
            plan.append(_Default(rf["name"], _default_value(rf["type"], rf["default"]), arrow_field.type))
            continue
        at, winner, wunion, wkind = wfields[match]
        if wkind == K_NULL:
            return None
        if wkind != rkind and rkind not in _PROMOTIONS.get(wkind, ()):
            return f"field {rf['name']!r}: {_base(winner)} cannot be read as {_base(rinner)}"
        enum_map = None
        if wkind == K_ENUM:
            rsyms = list(rinner["symbols"])
            fallback = rinner.get("default")
            enum_map = [s if s in rsyms else fallback for s in winner["symbols"]]
        if wkind == K_FIXED and int(winner["size"]) != int(rinner["size"]):
            return f"field {rf['name']!r}: fixed of size {winner['size']} cannot be read as {rinner['size']}"
        if ops[at][2]:
            return None  # two reader fields of one writer field (aliases): fastavro's business
        kind, union, _, arg = ops[at]
        ops[at] = (kind, union, 1, arg)
        symbols = tuple(winner["symbols"]) if wkind == K_ENUM else ()
        plan.append(_Take(rf["name"], -1, match, wkind, rkind, wunion >= 0, runion >= 0, enum_map,
                          arrow_field.type, symbols))  # fmt: skip
    # Kept writer columns come out in writer order: number the takes accordingly.
    order = {names[i]: n for n, i in enumerate(i for i, op in enumerate(ops) if op[2])}
    plan = [p if isinstance(p, _Default) else dataclasses.replace(p, writer_index=order[p.writer_field])
            for p in plan]  # fmt: skip
    return ops, names, plan


# ----------------------------------------------------------------------------------- flat decoding
def _zigzag(data: bytes, at: int, end: int) -> tuple[int, int, int]:
    """(status, value, next position) of the varint at ``at``."""
    value = shift = 0
    while True:
        if at >= end:
            return S_TRUNCATED, 0, at
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift >= 70:
            return S_VARINT, 0, at
    value &= (1 << 64) - 1
    return S_OK, (value >> 1) ^ -(value & 1), at


def _py_record(data: bytes, at: int, end: int, ops: Sequence[tuple[int, int, int, int]],
               out: list[list[Any]]) -> tuple[int, int]:  # fmt: skip
    """Decode one record at data[at:end] into ``out`` (one list per kept op); (status, field index)."""
    col = 0
    for i, (kind, union, keep, arg) in enumerate(ops):
        present = True
        if union >= 0:
            st, v, at = _zigzag(data, at, end)
            if st:
                return st, i
            if v not in (0, 1):
                return S_UNION, i
            present = (v == 0) == (union == 1)
        value: Any = None
        if present and kind != K_NULL:
            if kind == K_BOOL:
                if at >= end:
                    return S_TRUNCATED, i
                value = data[at] != 0
                at += 1
            elif kind in (K_INT, K_ENUM, K_LONG):
                st, value, at = _zigzag(data, at, end)
                if st:
                    return st, i
                if kind != K_LONG and not -(1 << 31) <= value < 1 << 31:
                    return S_VARINT, i
                if kind == K_ENUM and not 0 <= value < arg:
                    return S_ENUM, i
            elif kind in (K_FLOAT, K_DOUBLE):
                w = 4 if kind == K_FLOAT else 8
                if end - at < w:
                    return S_TRUNCATED, i
                value = struct.unpack_from("<f" if w == 4 else "<d", data, at)[0]
                at += w
            else:
                if kind == K_FIXED:
                    n = arg
                else:
                    st, n, at = _zigzag(data, at, end)
                    if st:
                        return st, i
                    if n < 0:
                        return S_LENGTH, i
                if end - at < n:
                    return S_TRUNCATED, i
                value = data[at : at + n]
                if kind == K_STRING:
                    try:
                        value = value.decode("utf-8")
                    except UnicodeDecodeError:
                        return S_UTF8, i
                at += n
        if keep:
            out[col].append(value)
            col += 1
    return (S_OK if at == end else S_TRAILING), -1


def _py_decode(
    values: Any, select: Any, ops: Sequence[tuple[int, int, int, int]]
) -> tuple[Any, Any, list[Any]]:
    """The pure-Python twin of the C ``decode``: (status per row, field index per row, kept columns as Arrow
    arrays of the accepted rows)."""
    n = len(values)
    status = np.zeros(n, dtype=np.uint8)
    where = np.zeros(n, dtype=np.int32)
    kept = [op for op in ops if op[2]]
    out: list[list[Any]] = [[] for _ in kept]
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * values.offset)
    data = values.buffers()[2]
    raw = b"" if data is None else data.to_pybytes()
    for r in np.flatnonzero(select).tolist():
        lo, hi = int(offsets[r]), int(offsets[r + 1])
        row: list[list[Any]] = [[] for _ in kept]
        st, field = _py_record(raw, lo + HEADER_SIZE, hi, ops, row)
        if st:
            status[r], where[r] = st, field
            continue
        for c, cell in zip(out, row, strict=True):
            c.append(cell[0])
    columns = [pa.array(col, _PHYSICAL[op[0]]) for col, op in zip(out, kept, strict=True)]
    return status, where, columns


def _c_decode(
    values: Any, select: Any, ops: Sequence[tuple[int, int, int, int]]
) -> tuple[Any, Any, list[Any]]:
    validity, offsets, data = values.buffers()[:3]
    status, where, accepted, columns = _NATIVE.decode(
        offsets, b"" if data is None else data, validity, values.offset, len(values),
        np.ascontiguousarray(select, dtype=np.uint8), [tuple(op) for op in ops],
    )  # fmt: skip
    n = len(values)
    kept = [op for op in ops if op[2]]
    arrays = []
    for (valid, nulls, offs, vals), op in zip(columns, kept, strict=True):
        t = _PHYSICAL[op[0]]
        if op[0] == K_NULL:
            arrays.append(pa.nulls(accepted))
            continue
        bufs = [_buf(valid), pa.py_buffer(vals)]
        if offs is not None:
            bufs.insert(1, _buf(offs))
        arrays.append(pa.Array.from_buffers(t, accepted, bufs, null_count=nulls))
    return (np.frombuffer(status, dtype=np.uint8, count=n), np.frombuffer(where, dtype=np.int32, count=n),
            arrays)  # fmt: skip


def _buf(data: Any) -> Any:
    return None if data is None else pa.py_buffer(data)


# ------------------------------------------------------------------------------------------ decoder
@dataclass
class Decoded:
    """The result of :meth:`AvroColumns.decode` on ``n`` values."""

    ok: Any
    """Per value: decoded (a numpy bool array)."""
    table: Any
    """The reader schema's columns of the decoded values, in value order (an Arrow table)."""
    errors: Any
    """The reason of each value that was not decoded, in value order (an Arrow string array)."""


_STATUS_TEXT = {
    S_UNION: "union branch index out of range",
    S_ENUM: "enum index out of range",
    S_UTF8: "string is not valid UTF-8",
    S_LENGTH: "negative length",
    S_VARINT: "varint too long, or int out of range",
}


class AvroColumns:
    """Decodes registry-framed Avro values into the columns of ``reader_schema`` (module docstring).

    ``registry``: anything with ``get_schema(schema_id)`` returning the writer schema (an object with
    ``schema_str`` and ``schema_type``, as :class:`kafka_handoff.schema_registry.SchemaRegistryClient` and
    confluent-kafka's client return, or the schema text).  An unknown id raises an error with
    ``http_status_code`` 404 or ``error_code`` 40403; any other error is a registry outage.
    ``implementation``: ``"native"``, ``"python"`` or ``"fastavro"`` forces one (tests, benchmarks);
    default: native when built, for every writer schema the flat decoders handle."""

    def __init__(self, reader_schema: Any, registry: Any, *, implementation: str | None = None) -> None:
        try:
            self._reader_raw = _load(reader_schema)
            self.reader = _named(self._reader_raw, {})
            self.schema = arrow_schema(self.reader)
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"reader schema: {exc}") from None
        if implementation not in (None, "native", "python", "fastavro"):
            raise ValueError(f"implementation: {implementation!r} (allowed: native, python, fastavro)")
        if implementation == "native" and _NATIVE is None:
            raise RuntimeError("the C extension kafka_handoff.pipeline._avrodecode is not available")
        self.implementation = implementation or IMPLEMENTATION
        self.registry = registry
        self._writers: dict[int, _Writer] = {}
        self._lock = threading.Lock()
        self._reader_parsed: Any = None
        #: Values decoded per way ("native", "python", "fastavro"), for reports.
        self.counts: dict[str, int] = {"native": 0, "python": 0, "fastavro": 0}

    # ---- writer schemas
    def _fetch(self, schema_id: int) -> _Writer:
        with self._lock:
            known = self._writers.get(schema_id)
        if known is not None:
            return known
        try:
            got = self.registry.get_schema(schema_id)
        except Exception as exc:
            status = getattr(exc, "http_status_code", None) or getattr(exc, "status_code", None)
            if status == 404 or getattr(exc, "error_code", None) in (40403, 404):
                # Not cached: the id may not exist *yet* (a registry being restored).
                return _Writer(schema_id, error=f"unknown schema id {schema_id}: {exc}")
            raise RegistryUnavailableError(
                f"fetching schema id {schema_id} from the schema registry failed: {exc}"
            ) from exc
        writer = self._writer(schema_id, got)
        with self._lock:
            self._writers[schema_id] = writer
        return writer

    def _writer(self, schema_id: int, got: Any) -> _Writer:
        text = got if isinstance(got, str) else getattr(got, "schema_str", None)
        kind = None if isinstance(got, str) else getattr(got, "schema_type", None)
        if kind not in (None, "", "AVRO"):
            return _Writer(schema_id, error=f"schema id {schema_id} is a {kind} schema, not Avro")
        try:
            import fastavro

            raw = _load(text)
            inline = _named(raw, {})
            parsed = fastavro.parse_schema(_strip_logical(raw))
        except Exception as exc:
            return _Writer(schema_id, error=f"schema id {schema_id}: not a valid Avro schema: {exc}")
        if _base(inline) not in ("record", "error"):
            return _Writer(schema_id, error=f"schema mismatch: schema id {schema_id} is not a record "
                                            f"({_base(inline)}); the reader schema is a record")  # fmt: skip
        plan = _plan(inline, self.reader, self.schema) if self.implementation != "fastavro" else None
        if isinstance(plan, str):
            return _Writer(schema_id, error=f"schema mismatch: writer schema id {schema_id} cannot be read "
                                            f"with the reader schema: {plan}")  # fmt: skip
        if plan is None:
            if self._reader_parsed is None:
                self._reader_parsed = fastavro.parse_schema(_strip_logical(self._reader_raw))
            return _Writer(schema_id, parsed=parsed)
        ops, names, steps = plan
        return _Writer(schema_id, ops=ops, names=names, plan=steps)

    # ---- decoding
    def decode(self, values: Any) -> Decoded:
        """Decode a binary (or string) Arrow array or chunked array of registry-framed values."""
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
        if not pa.types.is_binary(values.type):
            values = values.cast(pa.binary())
        n = len(values)
        reasons = np.zeros(n, dtype=np.int32)  # 0: decoded; else an index into texts
        texts: list[str] = [""]
        text_ids: dict[str, int] = {}

        def reason(text: str) -> int:
            at = text_ids.get(text)
            if at is None:
                at = text_ids[text] = len(texts)
                texts.append(text)
            return at

        valid = np.ones(n, dtype=bool) if values.null_count == 0 else \
            np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)  # fmt: skip
        offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * values.offset) \
            if n else np.zeros(1, dtype=np.int32)  # fmt: skip
        lengths = np.diff(offsets)
        data = values.buffers()[2]
        raw = np.frombuffer(data, dtype=np.uint8) if data is not None and data.size else np.zeros(8, np.uint8)
        reasons[~valid] = reason("null value")
        short = valid & (lengths < HEADER_SIZE)
        if short.any():
            reasons[short] = reason(
                f"not registry-framed: shorter than the {HEADER_SIZE}-byte header (magic byte 0 + schema id)"
            )
        framed = valid & ~short
        starts = offsets[:-1].astype(np.int64)
        magic = np.zeros(n, dtype=np.uint8)
        magic[framed] = raw[starts[framed]]
        for m in np.unique(magic[framed & (magic != MAGIC)]).tolist():
            reasons[framed & (magic == m)] = reason(
                f"not registry-framed: magic byte 0x{m:02x}, expected 0x00"
            )
        framed &= magic == MAGIC
        ids = np.zeros(n, dtype=np.int64)
        at = starts[framed]
        ids[framed] = (raw[at + 1].astype(np.int64) << 24 | raw[at + 2].astype(np.int64) << 16
                       | raw[at + 3].astype(np.int64) << 8 | raw[at + 4].astype(np.int64))  # fmt: skip
        parts: list[tuple[Any, Any]] = []  # (value indexes, table of reader columns), each ascending
        for schema_id in np.unique(ids[framed]).tolist():
            rows = framed & (ids == schema_id)
            writer = self._fetch(int(schema_id))
            if writer.error is not None:
                reasons[rows] = reason(writer.error)
                continue
            if writer.ops is not None:
                got_idx, table = self._flat(values, rows, writer, reasons, reason)
            else:
                got_idx, table = self._fastavro(values, rows, writer, reasons, reason)
            parts.append((got_idx, table))
        ok = reasons == 0
        table = _merge(parts, self.schema)
        bad = reasons[~ok]
        err = pa.array(texts, pa.string()).take(pa.array(bad)) if len(bad) else pa.array([], pa.string())
        return Decoded(ok, table, err)

    def _flat(self, values: Any, rows: Any, writer: _Writer, reasons: Any,
              reason: Callable[[str], int]) -> tuple[Any, Any]:  # fmt: skip
        assert writer.ops is not None and writer.plan is not None and writer.names is not None
        way = "native" if self.implementation == "native" else "python"
        status, where, columns = (_c_decode if way == "native" else _py_decode)(values, rows, writer.ops)
        self.counts[way] += int(rows.sum())
        bad = np.flatnonzero(rows & (status != S_OK))
        if len(bad):
            codes = status[bad].astype(np.int64) << 32 | (where[bad].astype(np.int64) + 1)
            uniq, inverse = np.unique(codes, return_inverse=True)
            ids = [
                reason(self._status_text(writer, int(c) >> 32, (int(c) & 0xFFFFFFFF) - 1))
                for c in uniq.tolist()
            ]
            reasons[bad] = np.asarray(ids, dtype=np.int32)[inverse.reshape(-1)]
        got = np.flatnonzero(rows & (status == S_OK))
        # Resolution: per reader field, the writer column (promoted, enum symbols) or the default.
        m = len(got)
        keep = np.ones(m, dtype=bool)
        row_reason = np.zeros(m, dtype=np.int32)
        arrays = []
        for step in writer.plan:
            if isinstance(step, _Default):
                physical = step.arrow if not _is_logical(step.arrow) else _storage(step.arrow)
                arrays.append(pa.repeat(pa.scalar(step.value, physical), m).cast(step.arrow))
                continue
            col = columns[step.writer_index]
            if step.kind == K_ENUM:
                symbols = pa.array(step.enum_map, pa.string())
                col = symbols.take(col)
                lost = _bools(col.is_null()) & _bools(columns[step.writer_index].is_valid())
                if lost.any():
                    enum_idx = np.asarray(
                        columns[step.writer_index].fill_null(0).to_numpy(zero_copy_only=False)
                    )
                    for e in np.unique(enum_idx[lost]).tolist():
                        sym = step.writer_symbols[int(e)]
                        hit = lost & (enum_idx == e) & (row_reason == 0)
                        row_reason[hit] = reason(
                            f"schema mismatch: field {step.name!r}: enum symbol {sym!r} (schema id "
                            f"{writer.schema_id}) is not in the reader's enum, which has no default"
                        )
                    keep &= ~lost
            elif step.kind != step.reader_kind:
                col = _promote(col, step.reader_kind)
            if step.writer_nullable and not step.reader_nullable and col.null_count:
                nulls = np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
                row_reason[nulls & (row_reason == 0)] = reason(
                    f"schema mismatch: field {step.name!r} is null (schema id {writer.schema_id}) and the "
                    "reader's field is not nullable"
                )
                keep &= ~nulls
            arrays.append(col.cast(step.arrow) if col.type != step.arrow else col)
        table = pa.table(arrays, schema=self.schema) if arrays else self.schema.empty_table()
        if not keep.all():
            reasons[got[~keep]] = row_reason[~keep]
            table = table.filter(pa.array(keep))
            got = got[keep]
        return got, table

    def _status_text(self, writer: _Writer, status: int, field: int) -> str:
        assert writer.names is not None
        name = writer.names[field] if 0 <= field < len(writer.names) else "?"
        sid = writer.schema_id
        if status == S_TRUNCATED:
            return f"truncated Avro payload: the value ends inside field {name!r} (schema id {sid})"
        if status == S_TRAILING:
            return (f"schema mismatch: bytes left after the record of schema id {sid} (the value was not "
                    "written with that schema)")  # fmt: skip
        return f"invalid Avro data in field {name!r} (schema id {sid}): {_STATUS_TEXT.get(status, status)}"

    def _fastavro(self, values: Any, rows: Any, writer: _Writer, reasons: Any,
                  reason: Callable[[str], int]) -> tuple[Any, Any]:  # fmt: skip
        import fastavro
        from fastavro._read_common import SchemaResolutionError

        idx = np.flatnonzero(rows)
        self.counts["fastavro"] += len(idx)
        names = self.schema.names
        cols: list[list[Any]] = [[] for _ in names]
        got = []
        sid = writer.schema_id
        for r in idx.tolist():
            value = values[r].as_py()
            buf = io.BytesIO(value)
            buf.seek(HEADER_SIZE)
            try:
                record = fastavro.schemaless_reader(buf, writer.parsed, self._reader_parsed)
            except SchemaResolutionError as exc:
                reasons[r] = reason(f"schema mismatch: schema id {sid}: {exc}")
                continue
            except (EOFError, struct.error, IndexError):
                reasons[r] = reason(f"truncated Avro payload (schema id {sid})")
                continue
            except UnicodeDecodeError:
                reasons[r] = reason(f"invalid Avro data (schema id {sid}): string is not valid UTF-8")
                continue
            except Exception as exc:
                reasons[r] = reason(f"invalid Avro data (schema id {sid}): {type(exc).__name__}: {exc}")
                continue
            if buf.tell() != len(value):
                reasons[r] = reason(f"schema mismatch: bytes left after the record of schema id {sid} (the "
                                    "value was not written with that schema)")  # fmt: skip
                continue
            got.append(r)
            for c, name in zip(cols, names, strict=True):
                c.append(record.get(name) if isinstance(record, dict) else None)
        arrays = []
        for c, f in zip(cols, self.schema, strict=True):
            physical = _storage(f.type) if _is_logical(f.type) else f.type
            arrays.append(pa.array(c, physical).cast(f.type))
        table = pa.table(arrays, schema=self.schema) if arrays else self.schema.empty_table()
        return np.asarray(got, dtype=np.int64), table


def _bools(array: Any) -> Any:
    return np.asarray(array.to_numpy(zero_copy_only=False), dtype=bool)


def _is_logical(t: Any) -> bool:
    return bool(pa.types.is_timestamp(t) or pa.types.is_date32(t))


def _storage(t: Any) -> Any:
    return pa.int32() if pa.types.is_date32(t) else pa.int64()


def _promote(col: Any, reader_kind: int) -> Any:
    """A writer column read as ``reader_kind`` (Avro's promotions: the value converted like
    ``float(x)``)."""
    if reader_kind == K_FLOAT and col.type == pa.int64():
        return col.cast(pa.float64(), safe=False).cast(pa.float32(), safe=False)
    if reader_kind in (K_FLOAT, K_DOUBLE, K_LONG):
        return col.cast(_PHYSICAL[reader_kind], safe=False)
    if reader_kind == K_BYTES:
        return col.cast(pa.binary())
    return col


def _merge(parts: Sequence[tuple[Any, Any]], schema: Any) -> Any:
    """The tables of ``parts`` ((value indexes ascending, table of those values)) as one table in value
    order."""
    filled = [(rows, t) for rows, t in parts if len(rows)]
    if not filled:
        return schema.empty_table()
    if len(filled) == 1:
        return filled[0][1]
    rows = np.concatenate([r for r, _ in filled])
    merged = pa.concat_tables([t for _, t in filled])
    return merged.take(pa.array(np.argsort(rows, kind="stable")))


def schema_registry_lookup(get: Callable[[int], Any]) -> Any:
    """An object with ``get_schema(schema_id)`` calling ``get`` (wraps a plain function as a registry)."""

    class _Lookup:
        def get_schema(self, schema_id: int) -> Any:
            return get(schema_id)

    return _Lookup()


def reader_from_mapping(schema: Mapping[str, Any] | str) -> str:
    """``schema`` as JSON text."""
    return schema if isinstance(schema, str) else json.dumps(schema)
