"""Request/response framing on top of ``kio``'s generated Kafka message schemas (sans-I/O).

Kafka frames every request and response as ``int32 size`` followed by a header and a body.  The header
version follows from whether the API version is "flexible" (request header v2 / response header v1) or not
(v1 / v0); ApiVersions responses always use response header v0 so that a client can parse them before it
knows what the broker speaks.

Request managers describe what they want with :func:`build_request`, which takes plain Python values
(dicts for nested entities, ints for millisecond durations) and builds the kio entity of the negotiated
version, dropping fields that version does not have.  That keeps the managers independent of versions.
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

from kafka_handoff.errors import KafkaError

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
def _field_plan(cls: type[Any]) -> dict[str, tuple[Any, bool]]:
    """Map each field name to (its type, whether it has a default)."""
    plan: dict[str, tuple[Any, bool]] = {}
    for f in fields(cls):
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        plan[f.name] = (f.type, has_default)
    return plan


def _convert(value: Any, tp: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(value, args[0]) if len(args) == 1 else value
    if origin is tuple:
        (inner, *_rest) = typing.get_args(tp)
        return tuple(_convert(v, inner) for v in value)
    if isinstance(tp, type):
        if is_dataclass(tp):
            if isinstance(value, tp):
                return value
            if isinstance(value, Mapping):
                return _build(tp, value)
            raise TypeError(f"expected a mapping for {tp.__name__}, got {type(value).__name__}")
        if issubclass(tp, ErrorCode):
            return value if isinstance(value, ErrorCode) else ErrorCode(int(value))
        if issubclass(tp, (i32Timedelta, i64Timedelta)):
            if isinstance(value, datetime.timedelta):
                return tp.parse(value)
            return tp.parse(datetime.timedelta(milliseconds=int(value)))
    return value


def _build(cls: type[Any], values: Mapping[str, Any]) -> Any:
    plan = _field_plan(cls)
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        entry = plan.get(name)
        if entry is None:
            continue  # field absent in this version: dropped on purpose
        kwargs[name] = _convert(value, entry[0])
    missing = [n for n, (_t, has_default) in plan.items() if not has_default and n not in kwargs]
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


def build_request(api_key: int, version: int, values: Mapping[str, Any]) -> Any:
    """Build the kio request entity of ``version`` from plain values.

    Nested entities are given as mappings, lists become tuples, ints given for ``timedelta`` fields are
    milliseconds.  Fields that the version lacks are dropped; missing nullable fields become ``None``.
    """
    return _build(request_class(api_key, version), values)


def build_response(api_key: int, version: int, values: Mapping[str, Any]) -> Any:
    """Build a kio response entity from plain values (tests and tools; same rules as
    :func:`build_request`)."""
    return _build(response_class(api_key, version), values)


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


_API_VERSIONS_KEY = 18


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
