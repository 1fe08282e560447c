"""The classic consumer group's embedded protocol: ConsumerProtocolSubscription/-Assignment codec.

These are the opaque ``metadata`` bytes a consumer puts in JoinGroup (one per assignor) and the
``assignment`` bytes the leader hands out through SyncGroup.  Both are non-flexible Kafka messages
prefixed by an int16 version:

* Subscription v0: ``topics: [string]``, ``user_data: nullable bytes``; v1 adds ``owned_partitions:
  [topic: string, partitions: [int32]]``; v2 adds ``generation_id: int32`` (default -1); v3 adds
  ``rack_id: nullable string``.
* Assignment v0-v3 (no change in layout): ``assigned_partitions: [topic: string, partitions: [int32]]``,
  ``user_data: nullable bytes``.

Decoders accept versions newer than the highest known one by reading the known fields and ignoring the rest
(as Java's ``ConsumerProtocol`` does); trailing bytes are ignored.  Malformed data raises
:class:`ConsumerProtocolError` saying what could not be read and where.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from kafka_handoff.errors import KafkaError
from kafka_handoff.group.assignors.base import MemberAssignment, MemberSubscription
from kafka_handoff.types import TopicPartition

__all__ = [
    "ASSIGNMENT_HIGHEST_VERSION",
    "SUBSCRIPTION_HIGHEST_VERSION",
    "ByteReader",
    "ConsumerProtocolError",
    "decode_assignment",
    "decode_subscription",
    "decode_subscription_versioned",
    "encode_assignment",
    "encode_subscription",
    "group_by_topic",
    "write_bytes",
    "write_int16",
    "write_int32",
    "write_string",
    "write_topic_partitions",
]

SUBSCRIPTION_HIGHEST_VERSION = 3
ASSIGNMENT_HIGHEST_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ConsumerProtocolError(KafkaError, ValueError):
    """Subscription/assignment bytes that cannot be decoded (or a value that cannot be encoded)."""


# --------------------------------------------------------------------------------------------- reading


class ByteReader:
    """Reads Kafka's non-flexible primitive types from a buffer, naming ``what`` is being read on errors."""

    __slots__ = ("_buf", "_pos", "what")

    def __init__(self, data: bytes | bytearray | memoryview, what: str) -> None:
        self._buf = bytes(data)
        self._pos = 0
        self.what = what

    @property
    def position(self) -> int:
        return self._pos

    @property
    def remaining(self) -> int:
        return len(self._buf) - self._pos

    def _fail(self, field: str, detail: str) -> ConsumerProtocolError:
        return ConsumerProtocolError(
            f"cannot decode {self.what}: {field} at byte {self._pos} of {len(self._buf)}: {detail}"
        )

    def _take(self, n: int, field: str) -> bytes:
        if n > self.remaining:
            raise self._fail(field, f"needs {n} bytes, only {self.remaining} left")
        start = self._pos
        self._pos += n
        return self._buf[start : self._pos]

    def int16(self, field: str) -> int:
        value: int = _I16.unpack(self._take(2, field))[0]
        return value

    def int32(self, field: str) -> int:
        value: int = _I32.unpack(self._take(4, field))[0]
        return value

    def string(self, field: str) -> str:
        value = self.nullable_string(field)
        if value is None:
            raise self._fail(field, "null where a string is required")
        return value

    def nullable_string(self, field: str) -> str | None:
        length = self.int16(field)
        if length < 0:
            if length != -1:
                raise self._fail(field, f"invalid string length {length}")
            return None
        raw = self._take(length, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._fail(field, f"invalid UTF-8 ({exc.reason})") from None

    def nullable_bytes(self, field: str) -> bytes | None:
        length = self.int32(field)
        if length < 0:
            if length != -1:
                raise self._fail(field, f"invalid bytes length {length}")
            return None
        return self._take(length, field)

    def array_length(self, field: str) -> int:
        n = self.int32(field)
        if n < 0:
            raise self._fail(field, f"invalid array length {n} (null where an array is required)")
        return n

    def topic_partitions(self, field: str) -> tuple[TopicPartition, ...]:
        """``[topic: string, partitions: [int32]]`` flattened to topic-partitions, in wire order."""
        out: list[TopicPartition] = []
        for _ in range(self.array_length(field)):
            topic = self.string(f"{field}.topic")
            count = self.array_length(f"{field}.partitions")
            raw = self._take(4 * count, f"{field}.partitions")
            out.extend(TopicPartition(topic, p) for p in struct.unpack(f">{count}i", raw))
        return tuple(out)


# --------------------------------------------------------------------------------------------- writing


def write_int16(out: bytearray, value: int) -> None:
    out += _I16.pack(value)


def write_int32(out: bytearray, value: int) -> None:
    out += _I32.pack(value)


def write_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += _I16.pack(-1)
        return
    raw = value.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ConsumerProtocolError(
            f"string too long for the consumer protocol ({len(raw)} bytes): {value[:40]!r}"
        )
    out += _I16.pack(len(raw))
    out += raw


def write_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += _I32.pack(-1)
        return
    out += _I32.pack(len(value))
    out += value


def group_by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partitions grouped by topic, topics in order of first appearance, partitions in the given order."""
    grouped: dict[str, list[int]] = {}
    for tp in partitions:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return grouped


def write_topic_partitions(out: bytearray, partitions: Iterable[TopicPartition]) -> None:
    grouped = group_by_topic(partitions)
    write_int32(out, len(grouped))
    for topic, parts in grouped.items():
        write_string(out, topic)
        write_int32(out, len(parts))
        out += struct.pack(f">{len(parts)}i", *parts)


def _check_version(kind: str, version: int, highest: int) -> None:
    if not 0 <= version <= highest:
        raise ConsumerProtocolError(
            f"cannot encode {kind} version {version}: supported versions are 0..{highest}"
        )


# --------------------------------------------------------------------------------------------- subscription


def encode_subscription(
    subscription: MemberSubscription, version: int = SUBSCRIPTION_HIGHEST_VERSION
) -> bytes:
    """ConsumerProtocolSubscription bytes of ``version`` (fields the version lacks are left out).

    ``group_instance_id`` is not part of the message (it travels in JoinGroup itself).
    """
    _check_version("ConsumerProtocolSubscription", version, SUBSCRIPTION_HIGHEST_VERSION)
    out = bytearray()
    write_int16(out, version)
    write_int32(out, len(subscription.topics))
    for topic in subscription.topics:
        write_string(out, topic)
    write_bytes(out, subscription.user_data)
    if version >= 1:
        write_topic_partitions(out, subscription.owned_partitions)
    if version >= 2:
        write_int32(out, subscription.generation_id)
    if version >= 3:
        write_string(out, subscription.rack_id)
    return bytes(out)


def decode_subscription_versioned(
    data: bytes | bytearray | memoryview, group_instance_id: str | None = None
) -> tuple[int, MemberSubscription]:
    """Decode ConsumerProtocolSubscription bytes; returns ``(version as written, subscription)``."""
    reader = ByteReader(data, "ConsumerProtocolSubscription")
    version = reader.int16("version")
    if version < 0:
        raise ConsumerProtocolError(
            f"cannot decode ConsumerProtocolSubscription: unsupported version {version}"
        )
    topics = tuple(reader.string("topics") for _ in range(reader.array_length("topics")))
    user_data = reader.nullable_bytes("user_data")
    owned: tuple[TopicPartition, ...] = ()
    generation_id = -1
    rack_id: str | None = None
    if version >= 1:
        owned = reader.topic_partitions("owned_partitions")
    if version >= 2:
        generation_id = reader.int32("generation_id")
    if version >= 3:
        rack_id = reader.nullable_string("rack_id")
        if rack_id == "":
            rack_id = None
    # Anything after the v3 fields belongs to a newer version (or is padding): ignored, as in Java.
    return version, MemberSubscription(
        topics=topics,
        user_data=user_data,
        owned_partitions=owned,
        generation_id=generation_id,
        rack_id=rack_id,
        group_instance_id=group_instance_id,
    )


def decode_subscription(
    data: bytes | bytearray | memoryview, group_instance_id: str | None = None
) -> MemberSubscription:
    """Decode ConsumerProtocolSubscription bytes of any version (newer ones: known fields only).

    ``group_instance_id`` (from the JoinGroup response's member entry) is copied into the result.
    """
    return decode_subscription_versioned(data, group_instance_id)[1]


# --------------------------------------------------------------------------------------------- assignment


def encode_assignment(assignment: MemberAssignment, version: int = ASSIGNMENT_HIGHEST_VERSION) -> bytes:
    """ConsumerProtocolAssignment bytes of ``version`` (v0-v3 share one layout)."""
    _check_version("ConsumerProtocolAssignment", version, ASSIGNMENT_HIGHEST_VERSION)
    out = bytearray()
    write_int16(out, version)
    write_topic_partitions(out, assignment.partitions)
    write_bytes(out, assignment.user_data)
    return bytes(out)


def decode_assignment(data: bytes | bytearray | memoryview) -> MemberAssignment:
    """Decode ConsumerProtocolAssignment bytes of any version.

    Empty bytes (what the broker hands a member the leader gave nothing) decode to an empty assignment.
    """
    if len(data) == 0:
        return MemberAssignment(partitions=())
    reader = ByteReader(data, "ConsumerProtocolAssignment")
    version = reader.int16("version")
    if version < 0:
        raise ConsumerProtocolError(
            f"cannot decode ConsumerProtocolAssignment: unsupported version {version}"
        )
    partitions = reader.topic_partitions("assigned_partitions")
    user_data = reader.nullable_bytes("user_data")
    return MemberAssignment(partitions=partitions, user_data=user_data)
