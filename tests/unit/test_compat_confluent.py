"""The confluent-kafka compatibility layer's pure parts: librdkafka config translation, KafkaError codes and
the mapping from kafka-handoff's exceptions, TopicPartition, Message and the serializers."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from kafka_handoff import errors as native
from kafka_handoff.compat import confluent_kafka as ck
from kafka_handoff.compat.confluent_kafka.config import RULES, Client, rules_table, translate_config
from kafka_handoff.compat.confluent_kafka.error import ConsumeError, code_of, from_exception
from kafka_handoff.compat.confluent_kafka.serialization import (
    DoubleDeserializer,
    DoubleSerializer,
    IntegerDeserializer,
    IntegerSerializer,
    MessageField,
    SerializationContext,
    SerializationError,
    StringDeserializer,
    StringSerializer,
)
from kafka_handoff.compat.confluent_kafka.types import RecordMessage
from kafka_handoff.types import ConsumerRecord

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("smallest", "earliest"),
        ("beginning", "earliest"),
        ("largest", "latest"),
        ("end", "latest"),
        ("error", "none"),
    ],
)
def test_auto_offset_reset_librdkafka_values_are_translated(value: str, expected: str) -> None:
    tc = translate_config({"bootstrap.servers": "h:1", "auto.offset.reset": value}, "consumer")
    assert tc.native["auto.offset.reset"] == expected


def test_renamed_keys_reach_their_native_names() -> None:
    tc = translate_config(
        {"fetch.wait.max.ms": 50, "fetch.message.max.bytes": 1000, "metadata.broker.list": "h:1"}, "consumer"
    )
    assert tc.native == {
        "fetch.max.wait.ms": 50,
        "max.partition.fetch.bytes": 1000,
        "bootstrap.servers": "h:1",
    }


def test_producer_keys_are_translated_with_their_units() -> None:
    tc = translate_config(
        {"queue.buffering.max.ms": 7, "queue.buffering.max.kbytes": 2, "compression.codec": "LZ4"}, "producer"
    )
    assert tc.native == {"linger.ms": 7, "buffer.memory": 2048, "compression.type": "lz4"}


def test_compat_settings_are_kept_for_the_layer() -> None:
    def cb(*args: object) -> None:
        pass

    tc = translate_config(
        {
            "enable.partition.eof": "true",
            "enable.auto.offset.store": False,
            "statistics.interval.ms": 100,
            "error_cb": cb,
            "offset_commit_cb": cb,
        },
        "consumer",
    )
    assert tc.native == {}
    assert tc.compat == {
        "enable.partition.eof": "true",
        "enable.auto.offset.store": False,
        "statistics.interval.ms": 100,
        "error_cb": cb,
        "on_commit": cb,
    }


def test_no_op_keys_are_recorded_with_a_reason() -> None:
    tc = translate_config(
        {"debug": "all", "socket.keepalive.enable": True, "api.version.request": True}, "consumer"
    )
    assert tc.native == {}
    assert set(tc.ignored) == {"debug", "socket.keepalive.enable", "api.version.request"}
    assert all(reason for reason in tc.ignored.values())


def test_another_clients_key_is_ignored_like_librdkafka() -> None:
    tc = translate_config({"linger.ms": 5, "queue.buffering.max.ms": 5}, "consumer")
    assert tc.native == {}
    assert set(tc.ignored) == {"linger.ms", "queue.buffering.max.ms"}


@pytest.mark.parametrize(
    "key", ["rebalance_cb", "plugin.library.paths", "ssl.engine.location", "partitioner_cb"]
)
def test_refused_keys_name_the_key_and_the_reason(key: str) -> None:
    client: Client = "producer" if key == "partitioner_cb" else "consumer"
    with pytest.raises(ck.KafkaException) as info:
        translate_config({key: "x"}, client)
    error = info.value.args[0]
    assert error.code() == ck.KafkaError._INVALID_ARG
    assert f'"{key}"' in error.str()
    assert RULES[key].reason in error.str()


def test_unknown_key_is_refused_naming_it() -> None:
    with pytest.raises(ck.KafkaException, match=r"no\.such\.key"):
        translate_config({"no.such.key": 1}, "consumer")


def test_no_op_with_a_value_that_changes_meaning_is_refused() -> None:
    assert translate_config({"broker.address.family": "any"}, "consumer").ignored
    with pytest.raises(ck.KafkaException, match=r"broker\.address\.family"):
        translate_config({"broker.address.family": "v4"}, "consumer")


def test_default_topic_config_is_merged() -> None:
    tc = translate_config({"default.topic.config": {"auto.offset.reset": "smallest"}}, "consumer")
    assert tc.native == {"auto.offset.reset": "earliest"}


def test_rules_table_lists_every_rule() -> None:
    rows = rules_table()
    assert len(rows) == len(RULES)
    assert {kind for _, kind, _, _ in rows} <= {"translated", "compat", "no-op", "refused"}


# ------------------------------------------------------------------------------------------------ errors
def test_kafka_error_codes_follow_librdkafka() -> None:
    assert ck.KafkaError._PARTITION_EOF == -191
    assert ck.KafkaError._TIMED_OUT == -185
    assert ck.KafkaError._MSG_TIMED_OUT == -192
    assert ck.KafkaError._ALL_BROKERS_DOWN == -187
    assert ck.KafkaError._TRANSPORT == -195
    assert ck.KafkaError._QUEUE_FULL == -184
    assert ck.KafkaError.UNKNOWN_TOPIC_OR_PART == 3
    assert ck.KafkaError.NOT_LEADER_FOR_PARTITION == 6
    assert code_of("MSG_SIZE_TOO_LARGE") == 10


def test_kafka_error_compares_with_codes_and_names_itself() -> None:
    err = ck.KafkaError(ck.KafkaError._PARTITION_EOF)
    assert err == ck.KafkaError._PARTITION_EOF
    assert err == ck.KafkaError(-191, "other reason")
    assert err.name() == "_PARTITION_EOF"
    assert err.code() == -191
    assert not err.fatal()
    assert ck.KafkaError(ck.KafkaError._TRANSPORT).retriable()
    assert ck.KafkaError(ck.KafkaError.NOT_COORDINATOR).retriable()
    assert not ck.KafkaError(ck.KafkaError.TOPIC_AUTHORIZATION_FAILED).retriable()


def test_kafka_exception_carries_the_error() -> None:
    exc = ck.KafkaException(ck.KafkaError._STATE)
    assert isinstance(exc.args[0], ck.KafkaError)
    assert exc.args[0].code() == ck.KafkaError._STATE
    consume = ConsumeError(ck.KafkaError(ck.KafkaError._PARTITION_EOF))
    assert isinstance(consume, ck.KafkaException)
    assert consume.code == ck.KafkaError._PARTITION_EOF


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (native.error_for_code(3, "x"), 3),
        (native.KafkaTimeoutError("slow"), -185),
        (native.ConfigError("bad key"), -186),
        (native.IllegalStateError("closed"), -172),
        (native.FencedError("fenced"), -144),
        (native.AuthenticationError("no"), -169),
        (native.CommitFailedError("gone"), 27),
        (RuntimeError("other"), -196),
    ],
)
def test_native_exceptions_map_to_librdkafka_codes(exc: BaseException, code: int) -> None:
    err = from_exception(exc)
    assert err.code() == code
    assert err.str()


# ------------------------------------------------------------------------------------------------ types
def test_topic_partition_is_mutable_and_keyed_by_topic_and_partition() -> None:
    tp = ck.TopicPartition("t", 1)
    assert tp.offset == ck.OFFSET_INVALID
    assert tp.metadata is None and tp.leader_epoch is None and tp.error is None
    tp.offset = 42
    assert tp == ck.TopicPartition("t", 1, 7)
    assert hash(tp) == hash(ck.TopicPartition("t", 1))
    assert sorted([ck.TopicPartition("t", 2), ck.TopicPartition("s", 9), tp]) == [
        ck.TopicPartition("s", 9),
        tp,
        ck.TopicPartition("t", 2),
    ]
    assert ck.TopicPartition("t", 2) >= tp


def test_offset_constants() -> None:
    assert (ck.OFFSET_BEGINNING, ck.OFFSET_END, ck.OFFSET_STORED, ck.OFFSET_INVALID) == (-2, -1, -1000, -1001)


def test_message_accessors_setters_and_len() -> None:
    msg = ck.Message("t", 1, 2, b"k", b"value", [("h", b"1")], None, (ck.TIMESTAMP_CREATE_TIME, 99), None, 3)
    assert (msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value()) == ("t", 1, 2, b"k", b"value")
    assert msg.headers() == [("h", b"1")]
    assert msg.timestamp() == (1, 99)
    assert msg.leader_epoch() == 3
    assert msg.error() is None
    assert len(msg) == 5
    msg.set_value(b"xy")
    msg.set_key(b"other")
    assert (msg.key(), msg.value(), len(msg)) == (b"other", b"xy", 2)


def test_message_pickles_and_compares_by_content() -> None:
    msg = ck.Message("t", 1, 2, b"k", b"v", None, None, (0, -1), 1.5, 3, 2)
    restored = pickle.loads(pickle.dumps(msg))
    assert restored == msg and restored is not msg
    assert restored.delivery_count() == 2
    assert msg != ck.Message("t", 1, 3, b"k", b"v")
    empty = ck.Message()
    assert (empty.partition(), empty.offset(), empty.timestamp(), len(empty)) == (None, None, (0, 0), 0)


def _record(**changes: object) -> ConsumerRecord:
    fields: dict[str, Any] = {
        "topic": "t",
        "partition": 1,
        "offset": 7,
        "timestamp": 99,
        "timestamp_type": 0,
        "key": b"k",
        "value": b"value",
        "headers": [("h", b"1")],
        "leader_epoch": 3,
    }
    fields.update(changes)
    return ConsumerRecord(**fields)


def test_record_message_reads_the_native_record() -> None:
    msg = RecordMessage(_record())
    assert isinstance(msg, ck.Message)
    assert (msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value()) == ("t", 1, 7, b"k", b"value")
    assert (msg.error(), msg.latency(), msg.delivery_count()) == (None, None, None)
    assert msg.headers() == [("h", b"1")]
    assert msg.timestamp() == (ck.TIMESTAMP_CREATE_TIME, 99)
    assert msg.leader_epoch() == 3
    assert len(msg) == 5
    bare = RecordMessage(_record(headers=(), timestamp=-1, leader_epoch=None, value=None))
    assert (bare.headers(), bare.timestamp(), bare.leader_epoch(), len(bare)) == (
        None,
        (ck.TIMESTAMP_NOT_AVAILABLE, -1),
        None,
        0,
    )


def test_record_message_setters_copy_the_record_and_then_act_as_a_message() -> None:
    msg = RecordMessage(_record())
    msg.set_value(b"xy")
    assert (msg.value(), len(msg), msg.key(), msg.offset(), msg.headers()) == (
        b"xy",
        2,
        b"k",
        7,
        [("h", b"1")],
    )
    msg.set_error(ck.KafkaError(ck.KafkaError._PARTITION_EOF))
    assert msg.error() == ck.KafkaError._PARTITION_EOF
    msg.set_key(b"other")
    msg.set_topic("u")
    msg.set_headers(None)
    assert (msg.topic(), msg.key(), msg.headers(), msg.timestamp(), msg.leader_epoch()) == (
        "u",
        b"other",
        None,
        (ck.TIMESTAMP_CREATE_TIME, 99),
        3,
    )
    assert isinstance(msg, RecordMessage)


def test_record_message_pickles_and_compares_like_a_message() -> None:
    msg = RecordMessage(_record())
    plain = ck.Message(
        "t", 1, 7, b"k", b"value", [("h", b"1")], None, (ck.TIMESTAMP_CREATE_TIME, 99), None, 3
    )
    assert msg == plain
    restored = pickle.loads(pickle.dumps(RecordMessage(_record())))
    assert restored == plain and restored.value() == b"value" and restored.error() is None
    assert RecordMessage(_record()) != RecordMessage(_record(offset=8))


# ------------------------------------------------------------------------------------------------ serializers
def test_serializers_round_trip() -> None:
    ctx = SerializationContext("t", MessageField.VALUE)
    assert StringDeserializer()(StringSerializer()("héllo", ctx), ctx) == "héllo"
    assert IntegerDeserializer()(IntegerSerializer()(-7, ctx), ctx) == -7
    assert DoubleDeserializer()(DoubleSerializer()(2.5, ctx), ctx) == 2.5
    assert StringSerializer()(None, ctx) is None
    with pytest.raises(SerializationError):
        StringSerializer()(5, ctx)
    with pytest.raises(SerializationError):
        IntegerDeserializer()(b"\x00", ctx)
