"""The Schema Registry serdes against the real registry (the ``schema_registry`` fixture) and the real broker.

Wire compatibility both ways with confluent-kafka's own serializers as the oracle, for Avro, Protobuf and
JSON Schema: what theirs write, ours read, and the reverse -- directly, and through the broker (one side
produces, the other consumes).  Schema evolution (a reader schema v2 reads v1 and v2 records; an
incompatible registration is refused), the subject name strategies, the header-based schema id, and a
poison pill among registry-framed records."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kafka_handoff.consumer import Consumer
from kafka_handoff.errors import SerializationError
from kafka_handoff.producer import Producer
from kafka_handoff.schema_registry import (
    Schema,
    SchemaReference,
    SchemaRegistryClient,
    SchemaRegistryError,
    header_schema_id_serializer,
    record_subject_name_strategy,
    topic_record_subject_name_strategy,
)
from kafka_handoff.serialization import MessageField, SerializationContext
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.integration

avro = pytest.importorskip("kafka_handoff.schema_registry.avro")
protobuf = pytest.importorskip("kafka_handoff.schema_registry.protobuf")
json_schema = pytest.importorskip("kafka_handoff.schema_registry.json_schema")
confluent_kafka = pytest.importorskip("confluent_kafka")
c_sr = pytest.importorskip("confluent_kafka.schema_registry")
c_avro = pytest.importorskip("confluent_kafka.schema_registry.avro")
c_protobuf = pytest.importorskip("confluent_kafka.schema_registry.protobuf")
c_json = pytest.importorskip("confluent_kafka.schema_registry.json_schema")
c_ser = pytest.importorskip("confluent_kafka.serialization")

from sr_protos import Money, Order, Refund  # noqa: E402

USER_V1 = {
    "type": "record",
    "name": "User",
    "namespace": "kh.test",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
USER_V2 = {
    "type": "record",
    "name": "User",
    "namespace": "kh.test",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "email", "type": ["null", "string"], "default": None},
    ],
}
PERSON_JSON = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Person",
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def _url(registry: Any) -> str:
    return registry if isinstance(registry, str) else str(registry.url)


@pytest.fixture
def ours(schema_registry: Any) -> Iterator[SchemaRegistryClient]:
    client = SchemaRegistryClient({"url": _url(schema_registry)})
    yield client
    client.close()


@pytest.fixture
def theirs(schema_registry: Any) -> Any:
    return c_sr.SchemaRegistryClient({"url": _url(schema_registry)})


def _topic() -> str:
    return f"sr-{uuid.uuid4().hex[:10]}"


def _ctx(topic: str, field: str = MessageField.VALUE) -> tuple[SerializationContext, Any]:
    """The same record's context for our serdes and for confluent-kafka's."""
    their_field = c_ser.MessageField.KEY if field == MessageField.KEY else c_ser.MessageField.VALUE
    return SerializationContext(topic, field, []), c_ser.SerializationContext(topic, their_field, [])


# ================================================================================ wire compatibility
def test_avro_both_ways_with_confluent_kafkas_serdes(ours: Any, theirs: Any) -> None:
    topic = _topic()
    schema = json.dumps(USER_V1)
    ctx, cctx = _ctx(topic)
    mine = avro.AvroSerializer(ours, schema)(({"name": "ann", "age": 31}), ctx)
    assert mine is not None and mine[0] == 0
    assert c_avro.AvroDeserializer(theirs)(mine, cctx) == {"name": "ann", "age": 31}
    their_bytes = c_avro.AvroSerializer(theirs, schema)({"name": "bob", "age": 42}, cctx)
    assert their_bytes == avro.AvroSerializer(ours, schema)(
        {"name": "bob", "age": 42}, ctx
    )  # same id, same bytes
    assert avro.AvroDeserializer(ours)(their_bytes, ctx) == {"name": "bob", "age": 42}


def test_avro_references_to_named_types_of_other_subjects(ours: Any, theirs: Any) -> None:
    topic = _topic()
    ctx, cctx = _ctx(topic)
    address = {
        "type": "record",
        "name": "Address",
        "namespace": "kh.test",
        "fields": [{"name": "city", "type": "string"}],
    }
    address_subject = f"{topic}-kh.test.Address"
    ours.register_schema(address_subject, Schema(json.dumps(address), "AVRO"))
    version = ours.get_latest_version(address_subject).version
    customer = {
        "type": "record",
        "name": "Customer",
        "namespace": "kh.test",
        "fields": [{"name": "name", "type": "string"}, {"name": "home", "type": "kh.test.Address"}],
    }
    schema = Schema(
        json.dumps(customer), "AVRO", [SchemaReference("kh.test.Address", address_subject, version)]
    )
    value = {"name": "fay", "home": {"city": "Oslo"}}
    mine = avro.AvroSerializer(ours, schema)(value, ctx)
    assert avro.AvroDeserializer(ours)(mine, ctx) == value
    their_schema = c_sr.Schema(
        json.dumps(customer), "AVRO", [c_sr.SchemaReference("kh.test.Address", address_subject, version)]
    )
    assert c_avro.AvroDeserializer(theirs)(mine, cctx) == value
    assert c_avro.AvroSerializer(theirs, their_schema)(value, cctx) == mine


def test_protobuf_both_ways_with_confluent_kafkas_serdes_and_references(ours: Any, theirs: Any) -> None:
    topic = _topic()
    ctx, cctx = _ctx(topic)
    order = Order(id="o-1", total=Money(currency="EUR", units=1250))
    order.lines.add(sku="sku-9", qty=3)
    mine = protobuf.ProtobufSerializer(Order, ours)(order, ctx)
    assert mine is not None
    # The imported file was registered under its own subject and referenced.
    latest = ours.get_latest_version(f"{topic}-value")
    assert [(r.name, r.subject) for r in latest.schema.references] == [
        ("common/money.proto", "common/money.proto")
    ]
    parsed = c_protobuf.ProtobufDeserializer(Order, {"use.deprecated.format": False})(mine, cctx)
    assert parsed == order
    their_bytes = c_protobuf.ProtobufSerializer(Order, theirs, {"use.deprecated.format": False})(order, cctx)
    assert protobuf.ProtobufDeserializer(Order)(their_bytes, ctx) == order
    assert their_bytes == mine
    # The generic mode: no message type, the writer's (with its reference) built from the registry.
    generic = protobuf.ProtobufDeserializer(None, schema_registry_client=ours)(their_bytes, ctx)
    assert generic == {
        "id": "o-1",
        "total": {"currency": "EUR", "units": "1250"},
        "lines": [{"sku": "sku-9", "qty": 3}],
    }
    # A message that is not the file's first: message indexes [1], written and read by both.
    refund = Refund(order_id="o-1", reason="damaged")
    rctx, rcctx = _ctx(_topic())
    mine = protobuf.ProtobufSerializer(Refund, ours)(refund, rctx)
    assert mine is not None and mine[5:7] == b"\x02\x02"  # one index, 1 (zig-zag)
    assert c_protobuf.ProtobufDeserializer(Refund, {"use.deprecated.format": False})(mine, rcctx) == refund
    theirs_refund = c_protobuf.ProtobufSerializer(Refund, theirs, {"use.deprecated.format": False})(
        refund, rcctx
    )
    assert protobuf.ProtobufDeserializer(Refund)(theirs_refund, rctx) == refund


def test_json_schema_both_ways_with_confluent_kafkas_serdes(ours: Any, theirs: Any) -> None:
    topic = _topic()
    schema = json.dumps(PERSON_JSON)
    ctx, cctx = _ctx(topic)
    mine = json_schema.JSONSerializer(schema, ours)({"name": "cy", "age": 7}, ctx)
    assert mine is not None and mine[0] == 0
    assert c_json.JSONDeserializer(None, schema_registry_client=theirs)(mine, cctx) == {
        "name": "cy",
        "age": 7,
    }
    their_bytes = c_json.JSONSerializer(schema, theirs)({"name": "di", "age": 8}, cctx)
    assert json_schema.JSONDeserializer(None, schema_registry_client=ours)(their_bytes, ctx) == {
        "name": "di",
        "age": 8,
    }
    assert json_schema.JSONDeserializer(schema)(their_bytes, ctx) == {"name": "di", "age": 8}
    # Validation on: a value that breaks the schema is refused, naming where.
    with pytest.raises(SerializationError, match="age"):
        json_schema.JSONSerializer(schema, ours)({"name": "ed", "age": -1}, ctx)


def _consume(config: dict[str, Any], topic: str, count: int) -> list[Any]:
    with Consumer(
        {"group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest", **config}
    ) as consumer:
        consumer.subscribe([topic])
        got: list[Any] = []
        deadline = time.monotonic() + 60
        while len(got) < count:
            assert time.monotonic() < deadline, f"read {len(got)} of {count}"
            got.extend(consumer.poll(0.5))
        return got


def _confluent_consume(broker: Any, topic: str, deserializer: Any, count: int) -> list[Any]:
    consumer = confluent_kafka.DeserializingConsumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"c-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "value.deserializer": deserializer,
        }
    )
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count:
            assert time.monotonic() < deadline, f"read {len(got)} of {count}"
            msg = consumer.poll(0.5)
            if msg is not None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


FORMATS = ["avro", "protobuf", "json"]


def _serdes(fmt: str, ours: Any, theirs: Any) -> tuple[Any, Any, Any, Any, list[Any]]:
    """(our serializer, our deserializer, their serializer, their deserializer, values) for a format."""
    if fmt == "avro":
        schema = json.dumps(USER_V1)
        values: list[Any] = [{"name": f"u{i}", "age": i} for i in range(5)]
        return (
            avro.AvroSerializer(ours, schema),
            avro.AvroDeserializer(ours),
            c_avro.AvroSerializer(theirs, schema),
            c_avro.AvroDeserializer(theirs),
            values,
        )
    if fmt == "protobuf":
        off = {"use.deprecated.format": False}
        values = [Order(id=f"o{i}", total=Money(currency="USD", units=i)) for i in range(5)]
        return (
            protobuf.ProtobufSerializer(Order, ours),
            protobuf.ProtobufDeserializer(Order),
            c_protobuf.ProtobufSerializer(Order, theirs, off),
            c_protobuf.ProtobufDeserializer(Order, off),
            values,
        )
    schema = json.dumps(PERSON_JSON)
    values = [{"name": f"p{i}", "age": i} for i in range(5)]
    return (
        json_schema.JSONSerializer(schema, ours),
        json_schema.JSONDeserializer(None, schema_registry_client=ours),
        c_json.JSONSerializer(schema, theirs),
        c_json.JSONDeserializer(None, schema_registry_client=theirs),
        values,
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_through_the_broker_ours_produce_confluent_consumes(
    fmt: str, broker: Any, topic_factory: Callable[..., str], ours: Any, theirs: Any
) -> None:
    topic = topic_factory(partitions=1)
    serializer, _, _, their_deserializer, values = _serdes(fmt, ours, theirs)
    with Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "value.serializer": serializer}
    ) as producer:
        for value in values:
            producer.send(topic, value)
        producer.flush(30)
    assert _confluent_consume(broker, topic, their_deserializer, len(values)) == values


@pytest.mark.parametrize("fmt", FORMATS)
def test_through_the_broker_confluent_produces_ours_consume(
    fmt: str, broker: Any, topic_factory: Callable[..., str], ours: Any, theirs: Any
) -> None:
    topic = topic_factory(partitions=1)
    _, our_deserializer, their_serializer, _, values = _serdes(fmt, ours, theirs)
    producer = confluent_kafka.SerializingProducer(
        {"bootstrap.servers": broker.bootstrap_servers, "value.serializer": their_serializer}
    )
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0
    producer.close()
    records = _consume(
        {"bootstrap.servers": broker.bootstrap_servers, "value.deserializer": our_deserializer},
        topic,
        len(values),
    )
    assert [r.value for r in records] == values


# ================================================================================ evolution
def test_a_reader_schema_v2_reads_v1_and_v2_records_and_incompatible_changes_are_refused(
    broker: Any, topic_factory: Callable[..., str], ours: Any, theirs: Any
) -> None:
    topic = topic_factory(partitions=1)
    subject = f"{topic}-value"
    ours.set_compatibility(subject, "BACKWARD")
    config = {"bootstrap.servers": broker.bootstrap_servers}
    with Producer({**config, "value.serializer": avro.AvroSerializer(ours, json.dumps(USER_V1))}) as p1:
        p1.send(topic, {"name": "old", "age": 1}).result(30)
    # v2 adds a field with a default: a BACKWARD-compatible change.  Written by confluent-kafka's serializer.
    their_v2 = c_avro.AvroSerializer(theirs, json.dumps(USER_V2))
    producer = confluent_kafka.SerializingProducer({**config, "value.serializer": their_v2})
    producer.produce(topic, value={"name": "new", "age": 2, "email": "n@example.com"})
    assert producer.flush(30) == 0
    producer.close()
    assert len(ours.get_versions(subject)) == 2

    reader = avro.AvroDeserializer(ours, json.dumps(USER_V2))
    got = [r.value for r in _consume({**config, "value.deserializer": reader}, topic, 2)]
    assert got == [
        {"name": "old", "age": 1, "email": None},
        {"name": "new", "age": 2, "email": "n@example.com"},
    ]
    # The same with the subject's latest version as the reader schema.
    latest = avro.AvroDeserializer(ours, conf={"use.latest.version": True})
    assert [r.value for r in _consume({**config, "value.deserializer": latest}, topic, 2)] == got
    # A v1 reader reads the v2 record too (the added field is skipped).
    v1_reader = avro.AvroDeserializer(ours, json.dumps(USER_V1))
    assert [r.value for r in _consume({**config, "value.deserializer": v1_reader}, topic, 2)] == [
        {"name": "old", "age": 1},
        {"name": "new", "age": 2},
    ]

    # Incompatible: a new required field without a default.
    v3 = {
        "type": "record",
        "name": "User",
        "namespace": "kh.test",
        "fields": [
            {"name": "name", "type": "string"},
            {"name": "age", "type": "int"},
            {"name": "score", "type": "int"},
        ],
    }
    with pytest.raises(SchemaRegistryError) as info:
        ours.register_schema(subject, Schema(json.dumps(v3), "AVRO"))
    assert info.value.http_status_code == 409
    serializer = avro.AvroSerializer(ours, json.dumps(v3))
    producer3 = Producer({**config, "value.serializer": serializer})
    with producer3, pytest.raises(SerializationError, match="value") as failed:
        producer3.send(topic, {"name": "x", "age": 3, "score": 9})
    assert isinstance(failed.value.__cause__, SchemaRegistryError)
    assert failed.value.__cause__.http_status_code == 409
    assert len(ours.get_versions(subject)) == 2


# ================================================================================ strategies
def test_record_and_topic_record_subject_name_strategies(ours: Any, theirs: Any) -> None:
    topic = _topic()
    ctx, cctx = _ctx(topic)
    schema = json.dumps(USER_V1)
    by_record = avro.AvroSerializer(
        ours, schema, conf={"subject.name.strategy": record_subject_name_strategy}
    )
    data = by_record({"name": "a", "age": 1}, ctx)
    by_topic_record = avro.AvroSerializer(
        ours, schema, conf={"subject.name.strategy": topic_record_subject_name_strategy}
    )
    data2 = by_topic_record({"name": "b", "age": 2}, ctx)
    subjects = set(ours.get_subjects())
    assert {"kh.test.User", f"{topic}-kh.test.User"} <= subjects
    assert f"{topic}-value" not in subjects
    # confluent-kafka's serializer with its own strategy names the same subject: the same schema id.
    theirs_record = c_avro.AvroSerializer(
        theirs, schema, conf={"subject.name.strategy": c_sr.record_subject_name_strategy}
    )
    assert theirs_record({"name": "a", "age": 1}, cctx) == data
    assert avro.AvroDeserializer(ours)(data2, ctx) == {"name": "b", "age": 2}
    # Protobuf: the record name is the message's full name; JSON: the schema's title.
    pctx, _ = _ctx(topic)
    protobuf.ProtobufSerializer(Refund, ours, {"subject.name.strategy": record_subject_name_strategy})(
        Refund(order_id="1"), pctx
    )
    json_schema.JSONSerializer(
        json.dumps(PERSON_JSON), ours, conf={"subject.name.strategy": topic_record_subject_name_strategy}
    )({"name": "x", "age": 1}, pctx)
    assert {"kh.shop.Refund", f"{topic}-Person"} <= set(ours.get_subjects())


def test_use_latest_version_writes_with_the_subjects_latest_schema(ours: Any) -> None:
    topic = _topic()
    ctx, _ = _ctx(topic)
    ours.register_schema(f"{topic}-value", Schema(json.dumps(USER_V2), "AVRO"))
    serializer = avro.AvroSerializer(ours, conf={"use.latest.version": True, "auto.register.schemas": False})
    data = serializer({"name": "z", "age": 5, "email": None}, ctx)
    assert avro.AvroDeserializer(ours)(data, ctx) == {"name": "z", "age": 5, "email": None}
    # auto.register.schemas off and the schema not registered: the look-up fails with the registry's 404.
    other = avro.AvroSerializer(ours, json.dumps(USER_V1), conf={"auto.register.schemas": False})
    with pytest.raises(SchemaRegistryError) as info:
        other({"name": "z", "age": 5}, ctx)
    assert info.value.http_status_code == 404


# ================================================================================ header schema id
def test_header_schema_id_through_the_broker(
    broker: Any, topic_factory: Callable[..., str], ours: Any, theirs: Any
) -> None:
    """The schema id in the ``__value_schema_id`` header (magic byte 1 + GUID) when the registry assigns
    GUIDs; a registry that does not makes the serializer say so."""
    topic = topic_factory(partitions=1)
    registered = ours.register_schema_full_response(f"{topic}-value", Schema(json.dumps(USER_V1), "AVRO"))
    serializer = avro.AvroSerializer(
        ours, json.dumps(USER_V1), conf={"schema.id.serializer": header_schema_id_serializer}
    )
    config = {"bootstrap.servers": broker.bootstrap_servers, "value.serializer": serializer}
    if registered.guid is None:
        with Producer(config) as producer, pytest.raises(SerializationError, match="GUID"):
            producer.send(topic, {"name": "h", "age": 1})
        return
    with Producer(config) as producer:
        producer.send(topic, {"name": "h", "age": 1}).result(30)
    records = _consume(
        {"bootstrap.servers": broker.bootstrap_servers, "value.deserializer": avro.AvroDeserializer(ours)},
        topic,
        1,
    )
    assert records[0].value == {"name": "h", "age": 1}
    assert [h[0] for h in records[0].headers] == ["__value_schema_id"]
    assert _confluent_consume(broker, topic, c_avro.AvroDeserializer(theirs), 1) == [{"name": "h", "age": 1}]


# ================================================================================ poison pill
def test_a_record_that_is_not_registry_framed_is_named_and_skipped(
    broker: Any, topic_factory: Callable[..., str], ours: Any
) -> None:
    topic = topic_factory(partitions=1)
    serializer = avro.AvroSerializer(ours, json.dumps(USER_V1))
    with Producer({"bootstrap.servers": broker.bootstrap_servers}) as raw:
        ctx = SerializationContext(topic, MessageField.VALUE, [])
        raw.send(topic, serializer({"name": "a", "age": 1}, ctx), partition=0).result(30)
        raw.send(topic, b'{"name": "not avro"}', partition=0).result(30)
        raw.send(topic, serializer({"name": "c", "age": 3}, ctx), partition=0).result(30)
    config = {
        "bootstrap.servers": broker.bootstrap_servers,
        "group.id": f"g-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "value.deserializer": avro.AvroDeserializer(ours),
    }
    with Consumer(config) as consumer:
        consumer.subscribe([topic])
        got: list[Any] = []
        errors: list[SerializationError] = []
        deadline = time.monotonic() + 60
        while len(got) < 2:
            assert time.monotonic() < deadline, f"got {got}, errors {errors}"
            try:
                got.extend(r.value for r in consumer.poll(0.5))
            except SerializationError as exc:
                errors.append(exc)
                consumer.seek(TopicPartition(exc.topic, exc.partition), exc.offset + 1)
    assert got == [{"name": "a", "age": 1}, {"name": "c", "age": 3}]
    assert [(e.topic, e.partition, e.offset, e.field) for e in errors] == [(topic, 0, 1, "value")]
    assert "magic byte" in str(errors[0].__cause__)
