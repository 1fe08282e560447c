"""ConsumerProtocolSubscription / ConsumerProtocolAssignment codec: hand-made byte vectors, newer versions,
malformed input, round trips, and agreement with kio's generated schemas."""

from __future__ import annotations

import importlib
import io
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.serial import entity_writer

from kafka_handoff.group.assignors.base import MemberAssignment, MemberSubscription
from kafka_handoff.group.protocol_data import (
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
    decode_subscription_versioned,
    encode_assignment,
    encode_subscription,
)
from kafka_handoff.types import TopicPartition as TP

pytestmark = pytest.mark.unit


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def s(text: str) -> bytes:
    raw = text.encode()
    return i16(len(raw)) + raw


# topics [foo, bar], user data 01 02
V0_BODY = i32(2) + s("foo") + s("bar") + i32(2) + b"\x01\x02"
# owned: foo -> [0, 2], bar -> [1]
OWNED = i32(2) + s("foo") + i32(2) + i32(0) + i32(2) + s("bar") + i32(1) + i32(1)
OWNED_TPS = (TP("foo", 0), TP("foo", 2), TP("bar", 1))

SUB_V0 = i16(0) + V0_BODY
SUB_V1 = i16(1) + V0_BODY + OWNED
SUB_V2 = i16(2) + V0_BODY + OWNED + i32(7)
SUB_V3 = i16(3) + V0_BODY + OWNED + i32(7) + s("rack-1")


def full_subscription(**overrides: Any) -> MemberSubscription:
    values: dict[str, Any] = dict(
        topics=("foo", "bar"),
        user_data=b"\x01\x02",
        owned_partitions=OWNED_TPS,
        generation_id=7,
        rack_id="rack-1",
    )
    values.update(overrides)
    return MemberSubscription(**values)


# --------------------------------------------------------------------------------------------- subscription


@pytest.mark.parametrize(
    ("version", "expected"),
    [(0, SUB_V0), (1, SUB_V1), (2, SUB_V2), (3, SUB_V3)],
)
def test_encode_subscription_matches_hand_made_bytes(version: int, expected: bytes) -> None:
    assert encode_subscription(full_subscription(), version) == expected


def test_encode_subscription_defaults_to_v3() -> None:
    assert encode_subscription(full_subscription()) == SUB_V3


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (SUB_V0, MemberSubscription(topics=("foo", "bar"), user_data=b"\x01\x02")),
        (
            SUB_V1,
            MemberSubscription(topics=("foo", "bar"), user_data=b"\x01\x02", owned_partitions=OWNED_TPS),
        ),
        (SUB_V2, full_subscription(rack_id=None)),
        (SUB_V3, full_subscription()),
    ],
)
def test_decode_subscription_of_each_version(data: bytes, expected: MemberSubscription) -> None:
    assert decode_subscription(data) == expected


def test_decode_subscription_null_user_data_and_null_rack() -> None:
    data = i16(3) + i32(1) + s("t") + i32(-1) + i32(0) + i32(-1) + i16(-1)
    assert decode_subscription(data) == MemberSubscription(topics=("t",))


def test_decode_subscription_copies_group_instance_id() -> None:
    assert decode_subscription(SUB_V0, group_instance_id="static-1").group_instance_id == "static-1"


def test_decode_subscription_of_a_newer_version_reads_known_fields_and_ignores_the_rest() -> None:
    # a hypothetical v4 that appends an int32 and a string after the v3 fields
    data = i16(4) + V0_BODY + OWNED + i32(7) + s("rack-1") + i32(42) + s("future")
    version, sub = decode_subscription_versioned(data)
    assert version == 4
    assert sub == full_subscription()


def test_decode_subscription_ignores_trailing_bytes_of_a_known_version() -> None:
    assert decode_subscription(SUB_V1 + b"\x00\x01\x02") == decode_subscription(SUB_V1)


@pytest.mark.parametrize("cut", [0, 1, 3, 7, len(SUB_V3) - 1])
def test_truncated_subscription_is_a_clear_error(cut: int) -> None:
    with pytest.raises(ConsumerProtocolError, match="cannot decode ConsumerProtocolSubscription"):
        decode_subscription(SUB_V3[:cut])


def test_truncated_subscription_error_names_the_field() -> None:
    with pytest.raises(ConsumerProtocolError, match=r"generation_id at byte \d+"):
        decode_subscription(SUB_V2[:-2])


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (i16(-1) + V0_BODY, "unsupported version -1"),
        (i16(0) + i32(-1) + i32(-1), "topics.*null where an array is required"),
        (i16(0) + i32(1) + i16(-1) + i32(-1), "topics.*null where a string is required"),
        (i16(0) + i32(1) + i16(2) + b"\xff\xfe" + i32(-1), "invalid UTF-8"),
        (i16(0) + i32(0) + i32(-5), "user_data.*invalid bytes length -5"),
        (i16(1) + i32(0) + i32(-1) + i32(1) + s("t") + i32(-1), "owned_partitions.partitions"),
    ],
)
def test_malformed_subscription_errors(data: bytes, match: str) -> None:
    with pytest.raises(ConsumerProtocolError, match=match):
        decode_subscription(data)


def test_malformed_data_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        decode_subscription(b"")


@pytest.mark.parametrize("version", [-1, 4])
def test_encode_rejects_unknown_versions(version: int) -> None:
    with pytest.raises(ConsumerProtocolError, match=r"supported versions are 0\.\.3"):
        encode_subscription(full_subscription(), version)
    with pytest.raises(ConsumerProtocolError, match=r"supported versions are 0\.\.3"):
        encode_assignment(MemberAssignment(partitions=()), version)


# --------------------------------------------------------------------------------------------- assignment

ASSIGNED = i32(2) + s("foo") + i32(2) + i32(0) + i32(1) + s("bar") + i32(1) + i32(3)
ASSIGNED_TPS = (TP("foo", 0), TP("foo", 1), TP("bar", 3))


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_encode_assignment_matches_hand_made_bytes(version: int) -> None:
    assignment = MemberAssignment(partitions=ASSIGNED_TPS, user_data=b"ud")
    assert encode_assignment(assignment, version) == i16(version) + ASSIGNED + i32(2) + b"ud"
    assert decode_assignment(i16(version) + ASSIGNED + i32(2) + b"ud") == assignment


def test_assignment_null_user_data() -> None:
    data = i16(0) + ASSIGNED + i32(-1)
    assert encode_assignment(MemberAssignment(partitions=ASSIGNED_TPS), 0) == data
    assert decode_assignment(data) == MemberAssignment(partitions=ASSIGNED_TPS, user_data=None)


def test_decode_assignment_of_a_newer_version() -> None:
    data = i16(9) + ASSIGNED + i32(1) + b"x" + i32(123) + s("later")
    assert decode_assignment(data) == MemberAssignment(partitions=ASSIGNED_TPS, user_data=b"x")


def test_empty_assignment_bytes_mean_no_partitions() -> None:
    assert decode_assignment(b"") == MemberAssignment(partitions=())


def test_truncated_assignment_is_a_clear_error() -> None:
    with pytest.raises(ConsumerProtocolError, match="ConsumerProtocolAssignment: assigned_partitions"):
        decode_assignment(i16(0) + ASSIGNED[:-3])


def test_encoding_groups_partitions_by_topic_in_first_appearance_order() -> None:
    tps = (TP("b", 1), TP("a", 0), TP("b", 0))
    data = encode_assignment(MemberAssignment(partitions=tps), 0)
    assert data == i16(0) + i32(2) + s("b") + i32(2) + i32(1) + i32(0) + s("a") + i32(1) + i32(0) + i32(-1)
    assert decode_assignment(data).partitions == (TP("b", 1), TP("b", 0), TP("a", 0))


# --------------------------------------------------------------------------------------------- properties

topic_names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)
partition_lists = st.lists(st.integers(0, 2**31 - 1), max_size=5, unique=True)
grouped_partitions = st.dictionaries(topic_names, partition_lists, max_size=4).map(
    lambda d: tuple(TP(t, p) for t, ps in d.items() for p in ps)
)
subscriptions = st.builds(
    MemberSubscription,
    topics=st.lists(topic_names, max_size=5, unique=True).map(tuple),
    user_data=st.none() | st.binary(max_size=20),
    owned_partitions=grouped_partitions,
    generation_id=st.integers(-1, 2**31 - 1),
    rack_id=st.none() | topic_names,
)


@given(sub=subscriptions, version=st.integers(0, 3))
def test_subscription_round_trip(sub: MemberSubscription, version: int) -> None:
    decoded = decode_subscription(encode_subscription(sub, version))
    assert decoded.topics == sub.topics
    assert decoded.user_data == sub.user_data
    assert decoded.owned_partitions == (sub.owned_partitions if version >= 1 else ())
    assert decoded.generation_id == (sub.generation_id if version >= 2 else -1)
    assert decoded.rack_id == (sub.rack_id if version >= 3 else None)


@given(parts=grouped_partitions, user_data=st.none() | st.binary(max_size=20), version=st.integers(0, 3))
def test_assignment_round_trip(parts: tuple[TP, ...], user_data: bytes | None, version: int) -> None:
    assignment = MemberAssignment(partitions=parts, user_data=user_data)
    assert decode_assignment(encode_assignment(assignment, version)) == assignment


def _kio_bytes(schema: str, version: int, **fields: Any) -> bytes:
    module = importlib.import_module(f"kio.schema.{schema}.v{version}.data")
    entity_cls = next(
        getattr(module, n)
        for n in dir(module)
        if n.startswith("ConsumerProtocol") and isinstance(getattr(module, n), type)
    )
    nested = fields.pop("_partitions_field", None)
    if nested is not None:
        field_name, tps = nested
        grouped: dict[str, list[int]] = {}
        for tp in tps:
            grouped.setdefault(tp.topic, []).append(tp.partition)
        fields[field_name] = tuple(
            module.TopicPartition(topic=t, partitions=tuple(ps)) for t, ps in grouped.items()
        )
    buf = io.BytesIO()
    entity_writer(entity_cls)(buf, entity_cls(**fields))
    return i16(version) + buf.getvalue()


@given(sub=subscriptions, version=st.integers(0, 3))
def test_subscription_bytes_agree_with_kio(sub: MemberSubscription, version: int) -> None:
    fields: dict[str, Any] = {"topics": sub.topics, "user_data": sub.user_data}
    if version >= 1:
        fields["_partitions_field"] = ("owned_partitions", sub.owned_partitions)
    if version >= 2:
        fields["generation_id"] = sub.generation_id
    if version >= 3:
        fields["rack_id"] = sub.rack_id
    assert encode_subscription(sub, version) == _kio_bytes(
        "consumer_protocol_subscription", version, **fields
    )


@given(parts=grouped_partitions, user_data=st.none() | st.binary(max_size=20), version=st.integers(0, 3))
def test_assignment_bytes_agree_with_kio(
    parts: tuple[TP, ...], user_data: bytes | None, version: int
) -> None:
    ours = encode_assignment(MemberAssignment(partitions=parts, user_data=user_data), version)
    theirs = _kio_bytes(
        "consumer_protocol_assignment",
        version,
        user_data=user_data,
        _partitions_field=("assigned_partitions", parts),
    )
    assert ours == theirs
