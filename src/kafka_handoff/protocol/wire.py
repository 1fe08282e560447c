"""Request/response framing on top of ``kio``'s generated Kafka message schemas (sans-I/O).

Kafka frames every request and response as ``int32 size`` followed by a header and a body.  The header
version follows from whether the API version is "flexible" (request header v2 / response header v1) or not
(v1 / v0); ApiVersions responses always use response header v0 so that a client can parse them before it
knows what the broker speaks.

Request managers describe what they want with :func:`build_request`, which takes plain Python values
(dicts for nested entities, ints for millisecond durations) and builds the kio entity of the negotiated
version.  That keeps the managers independent of versions, and the building is checked: a key that no
version of the schema has is a ``TypeError``, and a field the negotiated version lacks is dropped only
when nothing is lost (its default, or a field Kafka marks "ignorable"); otherwise the request fails with
``UnsupportedVersionError``.
"""

from __future__ import annotations

import datetime
import io
import struct
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass
from functools import cache
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i32Timedelta, i64Timedelta

from kafka_handoff.errors import KafkaError, UnsupportedVersionError

__all__ = [
    "API_KEYS",
    "API_NAMES",
    "EncodedBody",
    "FrameDecoder",
    "ProtocolError",
    "build_request",
    "build_response",
    "decode_response",
    "encode_request",
    "encode_response",
    "kio_version_range",
    "request_class",
    "response_class",
]

API_NAMES: Mapping[int, str] = api_key_map
API_KEYS: Mapping[str, int] = types.MappingProxyType({name: key for key, name in api_key_map.items()})

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")


class ProtocolError(KafkaError):
    """Bytes on the wire do not follow the Kafka protocol (bad frame, unknown correlation id, ...)."""


class EncodedBody:
    """A request body already encoded for one version, for hot paths that write their own bytes instead of
    building a kio entity (the producer's Produce requests, ``UnsentRequest.encode``): :func:`encode_request`
    frames it as is."""

    __slots__ = ("api_key", "data", "flexible", "version")

    def __init__(self, api_key: int, version: int, data: bytes) -> None:
        self.api_key = api_key
        self.version = version
        self.flexible = request_class(api_key, version).__flexible__
        self.data = data

    def __repr__(self) -> str:
        name = API_NAMES.get(self.api_key, self.api_key)
        return f"EncodedBody({name} v{self.version}, {len(self.data)} bytes)"


_F = typing.TypeVar("_F")


def _type_cache(fn: typing.Callable[[type[Any]], _F]) -> typing.Callable[[type[Any]], _F]:
    """Memoise a function of a class (``functools.cache`` is typed for hashable arguments only)."""
    memo: dict[type[Any], _F] = {}

    def wrapper(cls: type[Any]) -> _F:
        try:
            return memo[cls]
        except KeyError:
            value = memo[cls] = fn(cls)
            return value

    return wrapper


def kio_version_range(api_key: int) -> tuple[int, int]:
    """The lowest and highest version of an API that kio has schemas for."""
    versions = schema_name_map[API_NAMES[api_key]]
    return min(versions), max(versions)


@cache
def request_class(api_key: int, version: int) -> type[Any]:
    module = load_payload_module(api_key, version, EntityType.request)
    return _payload_class(module, "Request")


@cache
def response_class(api_key: int, version: int) -> type[Any]:
    module = load_payload_module(api_key, version, EntityType.response)
    return _payload_class(module, "Response")


def _payload_class(module: types.ModuleType, suffix: str) -> type[Any]:
    for name, value in vars(module).items():
        if (
            name.endswith(suffix)
            and isinstance(value, type)
            and getattr(value, "__type__", None) in (EntityType.request, EntityType.response)
        ):
            return value
    raise LookupError(f"no {suffix} payload class in {module.__name__}")


# --------------------------------------------------------------------------------------------------
# Building requests from plain values


@_type_cache
def _field_plan(cls: type[Any]) -> dict[str, tuple[Any, bool, bool]]:
    """Map each field name to (its type, whether it has a default, whether it holds entities)."""
    plan: dict[str, tuple[Any, bool, bool]] = {}
    for f in fields(cls):
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        plan[f.name] = (f.type, has_default, _entity_type(f.type) is not None)
    return plan


class _NoDefault:
    def __repr__(self) -> str:
        return "<no default>"


_NO_DEFAULT: Any = _NoDefault()

_Path = tuple[str, ...]


def _entity_type(tp: Any) -> type[Any] | None:
    """The nested entity class of a field type (``X``, ``X | None``, ``tuple[X, ...]``), else None."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType, tuple):
        for arg in typing.get_args(tp):
            if arg is not type(None) and arg is not Ellipsis:
                found = _entity_type(arg)
                if found is not None:
                    return found
        return None
    return tp if isinstance(tp, type) and is_dataclass(tp) else None


_ZERO: dict[str, Any] = {
    "bool": False, "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "uint32": 0, "uint64": 0,
    "float64": 0.0, "string": "", "bytes": b"",
}  # fmt: skip


def _declared_default(f: Any) -> Any:
    """A field's default as kio declares it; else Kafka's implicit one (null, empty, zero)."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    if type(None) in typing.get_args(f.type):
        return None
    if typing.get_origin(f.type) is tuple:
        return ()
    return _ZERO.get(f.metadata.get("kafka_type", ""), _NO_DEFAULT)


def _entity_at(cls: type[Any], path: _Path) -> type[Any] | None:
    """The nested entity class at ``path`` (field names from ``cls``), or None when this version lacks it."""
    for name in path:
        f = next((f for f in fields(cls) if f.name == name), None)
        nested = None if f is None else _entity_type(f.type)
        if nested is None:
            return None
        cls = nested
    return cls


@cache
def _field_entry(api_key: int, request: bool, version: int, path: _Path, name: str) -> tuple[Any, Any] | None:
    """``(type, default)`` of field ``name`` at ``path`` as the versions of the schema declare it (the one
    nearest to ``version`` that has it; one with a declared default preferred), or None when none has it.

    Versions are looked at nearest first, so a field a version dropped (Metadata's
    ``include_cluster_authorized_operations``, Fetch's ``replica_id``) costs the import of a version or two,
    not of every schema module kio has for the API (a startup cost of the first request of each kind)."""
    low, high = kio_version_range(api_key)
    order = [*range(min(version, high + 1) - 1, low - 1, -1), *range(max(version, low - 1) + 1, high + 1)]
    found: tuple[Any, Any] | None = None
    for v in order:
        cls = request_class(api_key, v) if request else response_class(api_key, v)
        entity = _entity_at(cls, path)
        f = None if entity is None else next((f for f in fields(entity) if f.name == name), None)
        if f is None:
            continue
        default = _declared_default(f)
        if default is not _NO_DEFAULT:
            return (f.type, default) if found is None else (found[0], default)
        if found is None:
            found = (f.type, default)
    return found


def _is_default(value: Any, tp: Any, default: Any) -> bool:
    """Whether ``value`` given for a field equals the field's default (so dropping it loses nothing):
    ``None``, an empty string or sequence for a field whose default is null or empty, or the default."""
    if value is None:
        return True
    if isinstance(value, (str, bytes, list, tuple, Mapping)) and not value:
        return default is None or not default
    if default is _NO_DEFAULT or _entity_type(tp) is not None or isinstance(value, (list, tuple, Mapping)):
        return False
    try:
        return bool(_convert(value, tp) == default)
    except (TypeError, ValueError):
        return False


# Fields Kafka's message schemas mark "ignorable": a sender drops them for a version that lacks them,
# whatever their value (the older broker just does not get the hint).  Keyed by API, then entity path.
_IGNORABLE: dict[int, frozenset[tuple[_Path, str]]] = {
    1: frozenset({((), "rack_id"), (("topics", "partitions"), "current_leader_epoch")}),  # Fetch
    2: frozenset({((), "timeout"), (("topics", "partitions"), "current_leader_epoch")}),  # ListOffsets
    8: frozenset({(("topics", "partitions"), "committed_leader_epoch")}),  # OffsetCommit
    11: frozenset({((), "reason"), ((), "rebalance_timeout")}),  # JoinGroup
    13: frozenset({(("members",), "reason")}),  # LeaveGroup
    14: frozenset({((), "protocol_type"), ((), "protocol_name")}),  # SyncGroup
}

# Callers that still send both sides of a version split and rely on the builder to drop the side the
# version lacks (to be made explicit by their owners, then removed): LeaveGroup's ``member_id`` (v0-2) and
# ``members`` (v3+) from group/classic_membership.py.
_VERSION_SPLIT: dict[int, frozenset[tuple[_Path, str]]] = {
    13: frozenset({((), "member_id"), ((), "members")}),
}


class _Ctx(typing.NamedTuple):
    api_key: int
    version: int
    request: bool
    ignorable: frozenset[str]


def _convert(value: Any, tp: Any, ctx: _Ctx | None = None, path: _Path = ()) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(value, args[0], ctx, path) if len(args) == 1 else value
    if origin is tuple:
        (inner, *_rest) = typing.get_args(tp)
        return tuple(_convert(v, inner, ctx, path) for v in value)
    if isinstance(tp, type):
        if is_dataclass(tp):
            if isinstance(value, tp):
                return value
            if isinstance(value, Mapping):
                return _build(tp, value, ctx, path)
            raise TypeError(f"expected a mapping for {tp.__name__}, got {type(value).__name__}")
        if issubclass(tp, ErrorCode):
            return value if isinstance(value, ErrorCode) else ErrorCode(int(value))
        if issubclass(tp, (i32Timedelta, i64Timedelta)):
            if isinstance(value, datetime.timedelta):
                return tp.parse(value)
            return tp.parse(datetime.timedelta(milliseconds=int(value)))
    return value


def _where(ctx: _Ctx, path: _Path) -> str:
    kind = "request" if ctx.request else "response"
    at = f" (in {'.'.join(path)})" if path else ""
    return f"{API_NAMES.get(ctx.api_key, ctx.api_key)} v{ctx.version} {kind}{at}"


def _absent_field(name: str, value: Any, ctx: _Ctx | None, path: _Path, cls: type[Any]) -> None:
    """A key the entity of this version lacks: an error unless dropping it loses nothing."""
    if ctx is None:  # an entity built outside build_request/build_response
        raise TypeError(f"{cls.__qualname__} has no field {name!r}")
    entry = _field_entry(ctx.api_key, ctx.request, ctx.version, path, name)
    if entry is None:
        raise TypeError(f"unknown field {name!r} for {_where(ctx, path)}: no version of the schema has it")
    if (
        not ctx.request  # responses are built by tests and tools for several versions at once
        or name in ctx.ignorable
        or (path, name) in _IGNORABLE.get(ctx.api_key, ())
        or (path, name) in _VERSION_SPLIT.get(ctx.api_key, ())
        or _is_default(value, *entry)
    ):
        return
    raise UnsupportedVersionError(
        f"{_where(ctx, path)} has no field {name!r}, and its value is not the default: "
        f"the broker would not receive it"
    )


def _build(cls: type[Any], values: Mapping[str, Any], ctx: _Ctx | None = None, path: _Path = ()) -> Any:
    plan = _field_plan(cls)
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        entry = plan.get(name)
        if entry is None:
            _absent_field(name, value, ctx, path, cls)
            continue
        kwargs[name] = _convert(value, entry[0], ctx, (*path, name) if entry[2] else path)
    missing = [n for n, (_t, has_default, _e) in plan.items() if not has_default and n not in kwargs]
    for name in missing:
        tp = plan[name][0]
        # Nullable fields without default become None; required scalars are a programming error.
        if type(None) in typing.get_args(tp):
            kwargs[name] = None
        elif typing.get_origin(tp) is tuple:
            kwargs[name] = ()
        else:
            raise TypeError(f"{cls.__qualname__} v{getattr(cls, '__version__', '?')} needs field {name!r}")
    return cls(**kwargs)


def build_request(
    api_key: int, version: int, values: Mapping[str, Any], *, ignorable: frozenset[str] = frozenset()
) -> Any:
    """Build the kio request entity of ``version`` from plain values.

    Nested entities are given as mappings, lists become tuples, ints given for ``timedelta`` fields are
    milliseconds; missing nullable fields become ``None``.  Typed at build time:

    * a key that no version of the API's schema has (at its nesting level) is a :class:`TypeError`;
    * a key that this version lacks is dropped when its value is the field's default (or ``None``, or
      empty), or when it is named in ``ignorable`` (Java's "ignorable" fields: the caller accepts that an
      older broker does not receive it); any other value raises :class:`UnsupportedVersionError`.
    """
    return _build(request_class(api_key, version), values, _Ctx(api_key, version, True, ignorable))


def build_response(api_key: int, version: int, values: Mapping[str, Any]) -> Any:
    """Build a kio response entity from plain values (tests and tools; same rules as
    :func:`build_request`)."""
    return _build(response_class(api_key, version), values, _Ctx(api_key, version, False, frozenset()))


def encode_response(response: Any, correlation_id: int) -> bytes:
    """A response frame without its size prefix, as :func:`decode_response` takes it (tests and tools)."""
    buf = io.BytesIO()
    buf.write(_CORRELATION.pack(correlation_id))
    if response.__flexible__ and response.__api_key__ != _API_VERSIONS_KEY:
        buf.write(b"\0")
    entity_writer(type(response))(buf, response)
    return buf.getvalue()


# --------------------------------------------------------------------------------------------------
# Framing


@_type_cache
def _request_writer(cls: type[Any]) -> Any:
    return entity_writer(cls)


@cache
def _header_writer(flexible: bool) -> tuple[type[Any], Any]:
    if flexible:
        from kio.schema.request_header.v2.header import RequestHeader as H2

        return H2, entity_writer(H2)
    from kio.schema.request_header.v1.header import RequestHeader as H1

    return H1, entity_writer(H1)


@_type_cache
def _response_reader(cls: type[Any]) -> Any:
    return entity_reader(cls)


_API_VERSIONS_KEY = API_KEYS["api_versions"]


def encode_request(payload: Any, correlation_id: int, client_id: str | None) -> bytes:
    """Frame a kio request entity (or an :class:`EncodedBody`): size prefix, request header, body."""
    if type(payload) is EncodedBody:
        return _frame_encoded(payload, correlation_id, client_id)
    header_cls, header_writer = _header_writer(bool(payload.__flexible__))
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    header_writer(
        buf,
        header_cls(
            request_api_key=payload.__api_key__,
            request_api_version=payload.__version__,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    _request_writer(type(payload))(buf, payload)
    data = buf.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    out = bytes(data)
    data.release()
    return out


_HEADER_FIXED = struct.Struct(">ihhih")  # size, api key, api version, correlation id, client id length


def _frame_encoded(payload: EncodedBody, correlation_id: int, client_id: str | None) -> bytes:
    # Request header v1 (v2 for flexible versions: + empty tagged fields): client id as a nullable
    # int16-length string, even in v2.
    cid = b"" if client_id is None else client_id.encode("utf-8")
    tags = b"\0" if payload.flexible else b""
    size = 10 + len(cid) + len(tags) + len(payload.data)
    head = _HEADER_FIXED.pack(
        size, payload.api_key, payload.version, correlation_id, -1 if client_id is None else len(cid)
    )
    return b"".join((head, cid, tags, payload.data))


def response_correlation_id(frame: bytes | memoryview) -> int:
    """The correlation id at the start of a response frame (size prefix already removed)."""
    if len(frame) < _CORRELATION.size:
        raise ProtocolError(f"response frame of {len(frame)} bytes has no correlation id")
    (cid,) = _CORRELATION.unpack_from(frame, 0)
    return int(cid)


def decode_response(api_key: int, version: int, frame: bytes | memoryview) -> Any:
    """Decode a response frame (without its size prefix) of a request sent with ``api_key``/``version``."""
    cls = response_class(api_key, version)
    name = f"{API_NAMES[api_key]} v{version} response"
    offset = 4  # correlation id
    if len(frame) < offset:
        raise ProtocolError(f"cannot decode {name}: frame of {len(frame)} bytes has no correlation id")
    if cls.__flexible__ and api_key != _API_VERSIONS_KEY:
        # Response header v1: correlation id followed by tagged fields (usually the single byte 0).
        num_tags, size = _read_uvarint(frame, offset)
        offset += size
        for _ in range(num_tags):
            _tag, size = _read_uvarint(frame, offset)
            offset += size
            length, size = _read_uvarint(frame, offset)
            offset += size + length
            if offset > len(frame):
                raise ProtocolError(f"cannot decode {name}: a header tagged field extends past the frame")
    _check_array_lengths(cls, frame, offset, name)
    try:
        value, _consumed = _response_reader(cls)(memoryview(frame)[offset:], 0)
    except Exception as exc:  # kio raises several error types for malformed input
        raise ProtocolError(f"cannot decode {name}: {exc}") from exc
    return value


# --------------------------------------------------------------------------------------------------
# Array lengths checked before kio decodes: kio's native reader reserves room for an array's declared
# length before reading its elements, so a corrupt length (2^31) aborts the process on a failed allocation.
# Every element takes at least one byte, so a length beyond the bytes left is rejected here first.

_FIXED_SIZES: dict[str, int] = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "uint64": 8, "datetime_i64": 8, "timedelta_i64": 8, "float64": 8,
    "uuid": 16,
}  # fmt: skip
_VARIABLE = ("string", "bytes", "records")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# A plan step: (kind, fixed size or kafka type, nested plan, array?, nullable entity?)
_Step = tuple[str, Any, Any, bool, bool]
_Plan = tuple[tuple[_Step, ...], dict[int, _Step] | None]


@_type_cache
def _length_plan(cls: type[Any]) -> _Plan:
    from kio.serial._introspect import (  # kio's own field classification (stable since 0.4)
        EntityField,
        EntityTupleField,
        classify_field,
        get_field_tag,
        is_optional,
    )

    steps: list[_Step] = []
    tagged: dict[int, _Step] = {}
    for f in fields(cls):
        fc = classify_field(f)
        if isinstance(fc, (EntityField, EntityTupleField)):
            step: _Step = (
                "entity",
                None,
                fc.type_,
                fc.is_array,
                isinstance(fc, EntityField) and is_optional(f),
            )
        else:
            kafka_type = f.metadata["kafka_type"]
            if kafka_type in _FIXED_SIZES:
                step = ("fixed", _FIXED_SIZES[kafka_type], None, fc.is_array, False)
            elif kafka_type in _VARIABLE:
                step = ("var", kafka_type, None, fc.is_array, False)
            else:
                raise LookupError(f"no length rule for kafka type {kafka_type!r} of {cls.__qualname__}")
        tag = get_field_tag(f)
        if tag is not None:
            tagged[int(tag)] = step
        elif steps and step[0] == "fixed" and not step[3] and steps[-1][0] == "fixed" and not steps[-1][3]:
            steps[-1] = ("fixed", steps[-1][1] + step[1], None, False, False)  # one skip for a run
        else:
            steps.append(step)
    return tuple(steps), (tagged if cls.__flexible__ else None)


def _check_array_lengths(cls: type[Any], frame: bytes | memoryview, offset: int, name: str) -> None:
    buf = bytes(frame) if not isinstance(frame, bytes) else frame
    try:
        _walk(cls, buf, offset, len(buf))
    except ProtocolError as exc:
        raise ProtocolError(f"cannot decode {name}: {exc}") from None
    except (IndexError, struct.error):
        raise ProtocolError(f"cannot decode {name}: the frame ends inside a field") from None


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value, size = _read_uvarint(buf, pos)
    return value, pos + size


def _walk(cls: type[Any], buf: bytes, pos: int, end: int) -> int:
    steps, tagged = _length_plan(cls)
    flexible = tagged is not None
    for step in steps:
        if step[0] == "fixed" and not step[3]:
            pos += step[1]
        else:
            pos = _walk_step(step, flexible, buf, pos, end)
    if flexible:
        if pos < end and buf[pos] == 0:
            return pos + 1  # no tagged fields (the usual case)
        pos = _walk_tags(tagged, buf, pos, end)
    elif pos > end:
        raise ProtocolError("a field extends past the frame")
    return pos


def _walk_tags(tagged: dict[int, _Step] | None, buf: bytes, pos: int, end: int) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        if size > end - pos:
            raise ProtocolError(f"tagged field {tag} of {size} bytes extends past the frame")
        step = tagged.get(tag) if tagged else None
        if step is not None:
            _walk_step(step, True, buf, pos, pos + size)
        pos += size
    return pos


def _walk_step(step: _Step, flexible: bool, buf: bytes, pos: int, end: int) -> int:
    kind, arg, nested, is_array, nullable = step
    count = 1
    if is_array:
        if flexible:
            count, pos = _uvarint(buf, pos)
            count -= 1  # 0 is null
        else:
            (count,) = _I32.unpack_from(buf, pos)
            pos += 4
        if count > end - pos:
            raise ProtocolError(f"array of {count} elements cannot fit in the {end - pos} bytes left")
    if kind == "fixed":
        pos += arg * max(count, 0)
        if pos > end:
            raise ProtocolError("a field extends past the frame")
        return pos
    for _ in range(max(count, 0)):
        if kind == "var":
            if flexible:
                length, pos = _uvarint(buf, pos)
                length -= 1
            elif arg == "string":
                (length,) = _I16.unpack_from(buf, pos)
                pos += 2
            else:
                (length,) = _I32.unpack_from(buf, pos)
                pos += 4
            pos += max(length, 0)
        else:
            if nullable:
                marker = buf[pos]
                pos += 1
                if marker == 0xFF:
                    continue
            pos = _walk(nested, buf, pos, end)
        if pos > end:
            raise ProtocolError("a field extends past the frame")
    return pos


def _read_uvarint(buf: bytes | memoryview, offset: int) -> tuple[int, int]:
    result = 0
    shift = 0
    start = offset
    while True:
        if offset >= len(buf):
            raise ProtocolError("response header ends inside a uvarint")
        byte = buf[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, offset - start
        shift += 7
        if shift > 28:
            raise ProtocolError("uvarint longer than 5 bytes in response header")


class FrameDecoder:
    """Splits a byte stream into size-prefixed frames.  Feed bytes, take whole frames."""

    def __init__(self, max_frame_bytes: int = 512 * 1024 * 1024) -> None:
        self._buf = bytearray()
        self._max = max_frame_bytes

    def feed(self, data: bytes | memoryview) -> list[bytes]:
        self._buf += data
        frames: list[bytes] = []
        buf = self._buf
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self._max:
                raise ProtocolError(f"invalid frame size {size}")
            if end - pos - 4 < size:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames

    def pending_bytes(self) -> int:
        return len(self._buf)
