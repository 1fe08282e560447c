"""Wire framing over kio, version negotiation and request building (sans-I/O)."""

from __future__ import annotations

import io
import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.serial import entity_writer

from kafka_handoff.errors import UnsupportedVersionError
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.versions import CLIENT_VERSIONS, ApiKey, negotiate, pick_version

pytestmark = pytest.mark.unit


def test_encode_request_frames_header_and_body() -> None:
    req = wire.build_request(
        ApiKey.API_VERSIONS, 3, {"client_software_name": "x", "client_software_version": "1"}
    )
    frame = wire.encode_request(req, 7, "cid")
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    api_key, version, correlation = struct.unpack_from(">hhi", frame, 4)
    assert (api_key, version, correlation) == (18, 3, 7)
    # header v2: client id as int16-length string, then an empty tagged-field section
    assert frame[12:14] == b"\x00\x03" and frame[14:17] == b"cid" and frame[17:18] == b"\x00"


def test_non_flexible_request_uses_header_v1() -> None:
    req = wire.build_request(ApiKey.METADATA, 1, {"topics": None})
    frame = wire.encode_request(req, 1, None)
    # header v1 ends with the nullable client id (-1) and no tagged fields
    assert frame[12:14] == b"\xff\xff"


def test_build_request_drops_fields_absent_in_version_and_converts_values() -> None:
    tid = uuid.uuid4()
    v1 = wire.build_request(
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        1,
        {
            "group_id": "g",
            "member_id": "m",
            "member_epoch": 3,
            "rebalance_timeout": 5000,
            "subscribed_topic_regex": "a.*",
            "topic_partitions": [{"topic_id": tid, "partitions": [1, 2]}],
        },
    )
    assert v1.subscribed_topic_regex == "a.*"
    assert v1.rebalance_timeout.total_seconds() == 5
    assert v1.topic_partitions[0].partitions == (1, 2)
    v0 = wire.build_request(
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        0,
        {"group_id": "g", "member_id": "m", "member_epoch": 3, "subscribed_topic_regex": ""},
    )
    assert not hasattr(v0, "subscribed_topic_regex")  # an empty value is dropped: nothing is lost
    assert v0.topic_partitions is None  # missing nullable field becomes None


def test_build_request_rejects_a_key_no_version_of_the_schema_has() -> None:
    values = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instnce_id": "x"}
    with pytest.raises(TypeError, match=r"'group_instnce_id' for heartbeat v4 request"):
        wire.build_request(ApiKey.HEARTBEAT, 4, values)
    nested = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1, "leader_epok": 3}]}],
    }
    with pytest.raises(
        TypeError, match=r"'leader_epok' for list_offsets v7 request \(in topics.partitions\)"
    ):
        wire.build_request(ApiKey.LIST_OFFSETS, 7, nested)


def test_build_request_refuses_to_drop_a_non_default_value_the_version_lacks() -> None:
    values = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": "static-1"}
    assert wire.build_request(ApiKey.HEARTBEAT, 3, values).group_instance_id == "static-1"
    with pytest.raises(
        UnsupportedVersionError, match=r"heartbeat v2 request has no field 'group_instance_id'"
    ):
        wire.build_request(ApiKey.HEARTBEAT, 2, values)
    with pytest.raises(UnsupportedVersionError, match="subscribed_topic_regex"):
        wire.build_request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            0,
            {"group_id": "g", "member_id": "m", "member_epoch": 3, "subscribed_topic_regex": "a.*"},
        )
    # The caller may accept the loss explicitly.
    dropped = wire.build_request(ApiKey.HEARTBEAT, 2, values, ignorable=frozenset({"group_instance_id"}))
    assert not hasattr(dropped, "group_instance_id")


def test_build_request_drops_default_values_and_ignorable_fields_the_version_lacks() -> None:
    hb = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None}
    assert not hasattr(wire.build_request(ApiKey.HEARTBEAT, 2, hb), "group_instance_id")
    # An undeclared bool default is Kafka's false; -1 as kio declares it.
    meta = wire.build_request(
        ApiKey.METADATA, 1, {"topics": None, "include_topic_authorized_operations": False}
    )
    assert not hasattr(meta, "include_topic_authorized_operations")
    commit = {
        "group_id": "g",
        "generation_id_or_member_epoch": 1,
        "member_id": "m",
        "retention_time": -1,
        "topics": [],
    }
    assert not hasattr(wire.build_request(ApiKey.OFFSET_COMMIT, 5, commit), "retention_time")
    with pytest.raises(UnsupportedVersionError, match="retention_time"):
        wire.build_request(ApiKey.OFFSET_COMMIT, 5, {**commit, "retention_time": 60_000})
    # Kafka marks JoinGroup's reason "ignorable": an older broker just does not get it.
    join = {
        "group_id": "g",
        "session_timeout": 10_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [],
        "reason": "rejoin",
    }
    assert wire.build_request(ApiKey.JOIN_GROUP, 8, join).reason == "rejoin"
    assert not hasattr(wire.build_request(ApiKey.JOIN_GROUP, 7, join), "reason")


def test_build_request_rejects_missing_required_field() -> None:
    with pytest.raises(TypeError, match="group_id"):
        wire.build_request(ApiKey.HEARTBEAT, 4, {"generation_id": 1, "member_id": "m"})


@pytest.mark.parametrize("version", [0, 3])
def test_api_versions_response_decodes_with_header_v0(version: int) -> None:
    resp = wire.build_response(
        ApiKey.API_VERSIONS,
        version,
        {
            "error_code": 0,
            "throttle_time": 0,
            "api_keys": [{"api_key": 1, "min_version": 4, "max_version": 17}],
        },
    )
    frame = wire.encode_response(resp, 99)
    assert wire.response_correlation_id(frame) == 99
    decoded = wire.decode_response(ApiKey.API_VERSIONS, version, frame)
    assert decoded.api_keys[0].max_version == 17


def test_flexible_response_header_with_tagged_fields_is_skipped() -> None:
    cls = wire.response_class(ApiKey.HEARTBEAT, 4)
    resp = wire.build_response(ApiKey.HEARTBEAT, 4, {"throttle_time": 0, "error_code": 27})
    body = io.BytesIO()
    entity_writer(cls)(body, resp)
    # correlation id, then one tagged field (tag 5, 2 bytes of data)
    frame = struct.pack(">i", 1) + b"\x01\x05\x02ab" + body.getvalue()
    assert int(wire.decode_response(ApiKey.HEARTBEAT, 4, frame).error_code) == 27


def test_decode_garbage_raises_protocol_error() -> None:
    with pytest.raises(wire.ProtocolError, match="heartbeat"):
        wire.decode_response(ApiKey.HEARTBEAT, 0, b"\x00\x00\x00\x01\x00")


@given(st.lists(st.binary(min_size=0, max_size=300), max_size=20), st.integers(min_value=1, max_value=50))
def test_frame_decoder_reassembles_any_chunking(payloads: list[bytes], chunk: int) -> None:
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    decoder = wire.FrameDecoder()
    frames: list[bytes] = []
    for i in range(0, len(stream), chunk):
        frames.extend(decoder.feed(stream[i : i + chunk]))
    assert frames == payloads
    assert decoder.pending_bytes() == 0


def test_frame_decoder_rejects_negative_size() -> None:
    with pytest.raises(wire.ProtocolError, match="frame size"):
        wire.FrameDecoder().feed(struct.pack(">i", -5))


def test_negotiation_picks_highest_common_version() -> None:
    broker = {ApiKey.FETCH: (4, 18), ApiKey.METADATA: (0, 13), ApiKey.PRODUCE: (13, 14), 999: (0, 1)}
    chosen = negotiate(broker)
    assert chosen[ApiKey.FETCH] == min(18, CLIENT_VERSIONS[ApiKey.FETCH][1])
    assert chosen[ApiKey.METADATA] == CLIENT_VERSIONS[ApiKey.METADATA][1]
    assert ApiKey.PRODUCE not in chosen  # no common version
    assert 999 not in chosen
    assert pick_version(chosen, ApiKey.FETCH, max_version=12) == 12
    with pytest.raises(UnsupportedVersionError, match="produce"):
        pick_version(chosen, ApiKey.PRODUCE)
    with pytest.raises(UnsupportedVersionError, match="needs version"):
        pick_version({ApiKey.FETCH: 10}, ApiKey.FETCH, min_version=13)


def test_clocks_give_monotonic_and_wall_time() -> None:
    import time

    from kafka_handoff.protocol.requests import FakeClock, MonotonicClock

    fake = FakeClock(start_ms=5_000, wall_start_ms=1_700_000_000_000)
    assert (fake.now_ms(), fake.wall_ms()) == (5_000, 1_700_000_000_000)
    fake.advance(250)
    assert (fake.now_ms(), fake.wall_ms()) == (5_250, 1_700_000_000_250)
    real = MonotonicClock()
    first = real.now_ms()
    assert real.now_ms() >= first
    assert abs(real.wall_ms() - time.time() * 1000) < 5_000
