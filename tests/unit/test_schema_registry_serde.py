"""The serdes' registry-free parts: Confluent framing, zig-zag varints and message indexes (checked against
confluent-kafka's own encoder, the oracle), the subject name strategies, the header-based schema id, and
conf validation."""

from __future__ import annotations

import io
import uuid
from typing import Any, cast

import pytest

from kafka_handoff.errors import SerializationError
from kafka_handoff.schema_registry import (
    SchemaId,
    dual_schema_id_deserializer,
    header_schema_id_serializer,
    prefix_schema_id_deserializer,
    prefix_schema_id_serializer,
    record_subject_name_strategy,
    topic_record_subject_name_strategy,
    topic_subject_name_strategy,
)
from kafka_handoff.schema_registry.protobuf import message_indexes
from kafka_handoff.schema_registry.serde import (
    decode_message_indexes,
    decode_varint,
    encode_message_indexes,
    encode_varint,
)
from kafka_handoff.serialization import MessageField, SerializationContext

pytestmark = pytest.mark.unit


def test_prefix_framing_is_magic_zero_and_a_big_endian_id() -> None:
    framed = prefix_schema_id_serializer(b"payload", None, SchemaId("AVRO", 0x01020304))
    assert framed == b"\x00\x01\x02\x03\x04payload"
    sid = SchemaId("AVRO")
    rest = prefix_schema_id_deserializer(framed, None, sid)
    assert (sid.id, rest.read()) == (0x01020304, b"payload")


def test_protobuf_framing_carries_the_message_indexes_after_the_id() -> None:
    framed = prefix_schema_id_serializer(b"m", None, SchemaId("PROTOBUF", 7, None, [1, 0, 2]))
    assert framed == b"\x00\x00\x00\x00\x07" + b"\x06\x02\x00\x04" + b"m"
    sid = SchemaId("PROTOBUF")
    assert prefix_schema_id_deserializer(framed, None, sid).read() == b"m"
    assert (sid.id, sid.message_indexes) == (7, [1, 0, 2])
    # The first message's [0] is the single byte 0.
    assert (
        prefix_schema_id_serializer(b"", None, SchemaId("PROTOBUF", 1, None, [0]))
        == b"\x00\x00\x00\x00\x01\x00"
    )


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, 300, -300, 2**31 - 1, -(2**31), 2**62, -(2**63)])
def test_zigzag_varints_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert decode_varint(io.BytesIO(encoded)) == value
    assert decode_varint(io.BytesIO(encode_varint(abs(value), zigzag=False)), zigzag=False) == abs(value)


def test_varints_and_message_indexes_match_confluent_kafkas_encoder() -> None:
    protobuf_mod = pytest.importorskip("confluent_kafka.schema_registry._sync.protobuf")
    ser = protobuf_mod.ProtobufSerializer
    for indexes in ([0], [1], [0, 0], [3, 1, 4], [127, 128, 300]):
        buf = io.BytesIO()
        ser._encode_varints(buf, indexes)
        assert encode_message_indexes(indexes) == buf.getvalue(), indexes
        assert decode_message_indexes(io.BytesIO(buf.getvalue())) == indexes


def test_message_indexes_locate_top_level_and_nested_messages() -> None:
    from sr_protos import Order, OrderLine, Refund

    assert message_indexes(Order.DESCRIPTOR) == [0]
    assert message_indexes(OrderLine.DESCRIPTOR) == [0, 0]
    assert message_indexes(Refund.DESCRIPTOR) == [1]


def test_truncated_or_foreign_data_is_refused_with_a_clear_error() -> None:
    with pytest.raises(SerializationError, match="magic byte 123"):
        prefix_schema_id_deserializer(b'{"json": 1}', None, SchemaId("AVRO"))
    with pytest.raises(SerializationError, match="inside the schema id"):
        prefix_schema_id_deserializer(b"\x00\x00\x01", None, SchemaId("AVRO"))
    with pytest.raises(SerializationError, match="varint"):
        prefix_schema_id_deserializer(b"\x00\x00\x00\x00\x01\x86", None, SchemaId("PROTOBUF"))


def test_subject_name_strategies() -> None:
    key = SerializationContext("orders", MessageField.KEY)
    value = SerializationContext("orders", MessageField.VALUE)
    assert topic_subject_name_strategy(key, "x.Y") == "orders-key"
    assert topic_subject_name_strategy(value, None) == "orders-value"
    assert record_subject_name_strategy(value, "com.acme.Order") == "com.acme.Order"
    assert record_subject_name_strategy(None, "com.acme.Order") == "com.acme.Order"
    assert topic_record_subject_name_strategy(value, "com.acme.Order") == "orders-com.acme.Order"
    with pytest.raises(ValueError, match="SerializationContext"):
        topic_subject_name_strategy(None, "x")


def test_the_header_schema_id_is_magic_one_and_the_guid_and_is_read_before_the_prefix() -> None:
    guid = uuid.uuid4()
    headers: list[tuple[str, bytes | None]] = [("app", b"1")]
    ctx = SerializationContext("t", MessageField.VALUE, headers)
    payload = header_schema_id_serializer(b"data", ctx, SchemaId("AVRO", 5, str(guid)))
    assert payload == b"data"
    assert headers == [("app", b"1"), ("__value_schema_id", b"\x01" + guid.bytes)]
    sid = SchemaId("AVRO")
    assert dual_schema_id_deserializer(payload, ctx, sid).read() == b"data"
    assert (sid.guid, sid.id) == (guid, None)
    # Keys use their own header; without the header the prefix is read.
    key_ctx = SerializationContext("t", MessageField.KEY, [])
    header_schema_id_serializer(b"k", key_ctx, SchemaId("AVRO", 5, str(guid)))
    assert [h[0] for h in key_ctx.headers or []] == ["__key_schema_id"]
    sid = SchemaId("AVRO")
    assert (
        dual_schema_id_deserializer(b"\x00\x00\x00\x00\x09v", key_ctx.__class__("t", "key", []), sid).read()
        == b"v"
    )
    assert sid.id == 9


def test_the_header_schema_id_matches_confluent_kafkas_reader() -> None:
    common = pytest.importorskip("confluent_kafka.schema_registry.common.serde")
    from confluent_kafka.serialization import MessageField as CMessageField
    from confluent_kafka.serialization import SerializationContext as CContext

    guid = uuid.uuid4()
    headers: list[tuple[str, bytes | None]] = []
    header_schema_id_serializer(
        b"x", SerializationContext("t", "value", headers), SchemaId("PROTOBUF", 1, str(guid), [1])
    )
    theirs = common.SchemaId("PROTOBUF")
    confluent_sr = pytest.importorskip("confluent_kafka.schema_registry")
    confluent_sr.dual_schema_id_deserializer(
        b"x", CContext("t", CMessageField.VALUE, cast(Any, headers)), theirs
    )
    assert (theirs.guid, theirs.message_indexes) == (guid, [1])


def test_a_header_id_without_a_guid_says_why() -> None:
    ctx = SerializationContext("t", MessageField.VALUE, [])
    with pytest.raises(SerializationError, match="GUID"):
        header_schema_id_serializer(b"x", ctx, SchemaId("AVRO", 5))


def test_serde_conf_is_checked_and_unknown_keys_are_named() -> None:
    pytest.importorskip("fastavro")
    from kafka_handoff.schema_registry.avro import AvroDeserializer, AvroSerializer

    schema = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}'
    with pytest.raises(ValueError, match=r"unrecognized properties: bogus\.key"):
        AvroSerializer(None, schema, conf={"bogus.key": 1})
    with pytest.raises(ValueError, match=r"auto\.register\.schemas must be a boolean"):
        AvroSerializer(None, schema, conf={"auto.register.schemas": "yes"})
    with pytest.raises(ValueError, match=r"both use\.latest\.version and auto\.register\.schemas"):
        AvroSerializer(None, schema, conf={"use.latest.version": True})
    with pytest.raises(ValueError, match="rules"):
        AvroDeserializer(None, rule_conf={"x": 1})


def test_the_compat_layer_serves_the_serdes_under_confluent_kafkas_module_paths() -> None:
    from kafka_handoff.compat.confluent_kafka.schema_registry import (
        SchemaRegistryClient,
    )
    from kafka_handoff.compat.confluent_kafka.schema_registry import (
        topic_record_subject_name_strategy as compat_strategy,
    )
    from kafka_handoff.compat.confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from kafka_handoff.compat.confluent_kafka.schema_registry.error import SchemaRegistryError
    from kafka_handoff.compat.confluent_kafka.schema_registry.json_schema import (
        JSONDeserializer,
        JSONSerializer,
    )
    from kafka_handoff.compat.confluent_kafka.schema_registry.protobuf import (
        ProtobufDeserializer,
        ProtobufSerializer,
    )
    from kafka_handoff.schema_registry import avro, json_schema, protobuf
    from kafka_handoff.schema_registry import client as native_client

    assert SchemaRegistryClient is native_client.SchemaRegistryClient
    assert compat_strategy is topic_record_subject_name_strategy
    assert (AvroSerializer, AvroDeserializer) == (avro.AvroSerializer, avro.AvroDeserializer)
    assert (JSONSerializer, JSONDeserializer) == (json_schema.JSONSerializer, json_schema.JSONDeserializer)
    assert (ProtobufSerializer, ProtobufDeserializer) == (
        protobuf.ProtobufSerializer,
        protobuf.ProtobufDeserializer,
    )
    assert SchemaRegistryError.__module__ == "kafka_handoff.schema_registry._model"
