"""kafka-python compat layer, the parts without a broker: configuration translation, serializers, the
future, value types, errors (issue 27)."""

from __future__ import annotations

import base64
import json
import time
from concurrent.futures import Future as CFuture
from typing import Any

import pytest

import kafka_handoff
from kafka_handoff.compat import kafka_python as kp
from kafka_handoff.compat.kafka_python import errors
from kafka_handoff.compat.kafka_python.admin import KafkaAdminClient
from kafka_handoff.compat.kafka_python.config import (
    ADMIN_KEYS,
    CONSUMER_KEYS,
    PRODUCER_KEYS,
    translate,
)
from kafka_handoff.compat.kafka_python.structs import native_offset

pytestmark = pytest.mark.unit


# ----------------------------------------------------------------------------------------- configuration
def test_consumer_keys_are_translated_to_dotted_names() -> None:
    native, compat = translate(
        "consumer",
        {
            "bootstrap_servers": ["a:1", "b:2"],
            "group_id": "g",
            "auto_offset_reset": "smallest",
            "enable_auto_commit": False,
            "session_timeout_ms": 10_000,
            "fetch_max_wait_ms": 100,
            "max_poll_records": 7,
            "isolation_level": kp.IsolationLevel.READ_COMMITTED,
            "partition_assignment_strategy": [kp.RoundRobinPartitionAssignor, kp.RangePartitionAssignor],
            "ssl_cafile": "/ca.pem",
            "ssl_certfile": "/c.pem",
            "ssl_keyfile": "/k.pem",
            "ssl_password": "pw",
            "ssl_check_hostname": False,
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "u",
            "sasl_plain_password": "p",
            "security_protocol": "SASL_SSL",
            "api_version": (2, 5, 0),
            "consumer_timeout_ms": 1000,
            "value_deserializer": bytes.decode,
        },
        CONSUMER_KEYS,
    )
    assert native == {
        "bootstrap.servers": "a:1,b:2",
        "group.id": "g",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 10_000,
        "fetch.max.wait.ms": 100,
        "max.poll.records": 7,
        "isolation.level": "read_committed",
        "partition.assignment.strategy": ("roundrobin", "range"),
        "ssl.truststore.location": "/ca.pem",
        "ssl.certificate.location": "/c.pem",
        "ssl.key.location": "/k.pem",
        "ssl.key.password": "pw",
        "ssl.endpoint.identification.algorithm": "",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "p",
        "security.protocol": "SASL_SSL",
    }
    assert compat == {"consumer_timeout_ms": 1000, "value_deserializer": bytes.decode}


def test_default_bootstrap_is_kafka_pythons_localhost() -> None:
    native, _ = translate("consumer", {}, CONSUMER_KEYS)
    assert native == {"bootstrap.servers": "localhost:9092"}


def test_ssl_check_hostname_true_keeps_the_native_default() -> None:
    native, _ = translate("admin", {"ssl_check_hostname": True}, ADMIN_KEYS)
    assert "ssl.endpoint.identification.algorithm" not in native


@pytest.mark.parametrize(
    ("value", "expected"),
    [("largest", "latest"), ("earliest", "earliest"), ("none", "none")],
)
def test_auto_offset_reset_spellings(value: str, expected: str) -> None:
    native, _ = translate("consumer", {"auto_offset_reset": value}, CONSUMER_KEYS)
    assert native["auto.offset.reset"] == expected


def test_unknown_keys_are_named_in_one_error() -> None:
    with pytest.raises(errors.KafkaConfigurationError, match=r"Unrecognized configs: \['bogus', 'zzz'\]"):
        translate("consumer", {"zzz": 1, "group_id": "g", "bogus": 2}, CONSUMER_KEYS)


def test_unknown_key_raises_from_the_constructors() -> None:
    with pytest.raises(errors.KafkaConfigurationError, match="linger_ms"):
        kp.KafkaConsumer(linger_ms=5)
    with pytest.raises(errors.KafkaConfigurationError, match="group_id"):
        kp.KafkaProducer(group_id="g")
    with pytest.raises(errors.KafkaConfigurationError, match="acks"):
        KafkaAdminClient(acks=1)


def test_configuration_error_is_a_kafka_error() -> None:
    assert issubclass(errors.KafkaConfigurationError, errors.KafkaError)
    assert errors.KafkaConfigurationError is kafka_handoff.ConfigError


def test_refused_keys_name_the_key_and_reason() -> None:
    with pytest.raises(errors.KafkaConfigurationError, match=r"'ssl_context'.*ssl_cafile"):
        translate("consumer", {"ssl_context": object()}, CONSUMER_KEYS)
    with pytest.raises(errors.KafkaConfigurationError, match="'socks5_proxy'"):
        translate("producer", {"socks5_proxy": "socks5://x:1"}, PRODUCER_KEYS)


def test_refused_keys_at_kafka_pythons_default_are_accepted() -> None:
    import socket

    native, _ = translate(
        "consumer",
        {
            "ssl_context": None,
            "sasl_kerberos_service_name": "kafka",
            "socket_options": [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            "metric_reporters": [],
        },
        CONSUMER_KEYS,
    )
    assert native == {"bootstrap.servers": "localhost:9092"}


def test_noop_keys_are_accepted_and_dropped() -> None:
    native, compat = translate(
        "consumer",
        {"api_version": (0, 10), "api_version_auto_timeout_ms": 1, "metrics_enabled": True, "selector": None},
        CONSUMER_KEYS,
    )
    assert native == {"bootstrap.servers": "localhost:9092"}
    assert compat == {}


def test_producer_keys() -> None:
    native, compat = translate(
        "producer",
        {"acks": 1, "linger_ms": 10, "compression_type": None, "retries": 5, "key_serializer": str.encode},
        PRODUCER_KEYS,
    )
    assert native == {
        "bootstrap.servers": "localhost:9092",
        "acks": "1",
        "linger.ms": 10,
        "compression.type": "none",
        "retries": 5,
    }
    assert compat == {"key_serializer": str.encode}


def test_bad_assignor_is_a_configuration_error() -> None:
    with pytest.raises(errors.KafkaConfigurationError, match="partition_assignment_strategy"):
        translate("consumer", {"partition_assignment_strategy": [object()]}, CONSUMER_KEYS)


def test_oauth_token_provider_becomes_a_token_callback() -> None:
    exp = int(time.time()) + 1234
    payload = base64.urlsafe_b64encode(json.dumps({"exp": exp}).encode()).rstrip(b"=").decode()
    jwt = f"e30.{payload}.sig"

    class Provider:
        def token(self) -> str:
            return jwt

        def extensions(self) -> dict[str, str]:
            return {"logicalCluster": "lc"}

    native, _ = translate("consumer", {"sasl_oauth_token_provider": Provider()}, CONSUMER_KEYS)
    assert native["oauth_cb"]() == (jwt, float(exp), "", {"logicalCluster": "lc"})


def test_oauth_provider_without_token_method_is_refused() -> None:
    with pytest.raises(errors.KafkaConfigurationError, match="sasl_oauth_token_provider"):
        translate("consumer", {"sasl_oauth_token_provider": object()}, CONSUMER_KEYS)


def test_every_consumer_translation_is_a_native_key() -> None:
    from kafka_handoff.compat.kafka_python.config import Translated
    from kafka_handoff.config import ADMIN_CONFIG_DEF, CONSUMER_CONFIG_DEF, PRODUCER_CONFIG_DEF

    for table, cdef in ((CONSUMER_KEYS, CONSUMER_CONFIG_DEF), (PRODUCER_KEYS, PRODUCER_CONFIG_DEF)):
        for key, (target, _note) in table.items():
            if isinstance(target, Translated):
                assert target.name in cdef.names, key
    for key, (target, _note) in ADMIN_KEYS.items():
        if isinstance(target, Translated):
            assert target.name in ADMIN_CONFIG_DEF.names, key


# ----------------------------------------------------------------------------------------- serializers
def test_default_serializer_round_trip_and_passthrough() -> None:
    s = kp.DefaultSerializer("utf-16")
    data = s.serialize("t", [], "懂")
    assert data == "懂".encode("utf-16")
    assert s.deserialize("t", [], data) == "懂"
    assert kp.DefaultSerializer().serialize("t", [], b"raw") == b"raw"
    assert kp.DefaultSerializer().serialize("t", [], None) is None


def test_json_serializer_round_trip_and_tombstone() -> None:
    s = kp.JsonSerializer()
    assert s.deserialize("t", [], s.serialize("t", [], {"a": [1, 2]})) == {"a": [1, 2]}
    assert s.serialize("t", [], None) is None
    assert s.deserialize("t", [], None) is None
    with pytest.raises(TypeError):
        s.serialize("t", [], b"bytes")  # as kafka-python: json.dumps refuses bytes


def test_serializer_forms() -> None:
    from kafka_handoff.compat.kafka_python.serializer import deserializer, serializer

    plain = serializer(lambda v: v.encode(), "value_serializer")
    assert plain is not None and plain("t", [], "x") == b"x"
    seen: list[Any] = []

    class Headered(kp.Serializer):
        def serialize(self, topic: str, headers: Any, data: Any) -> bytes:
            seen.append((topic, headers))
            return b"s"

    obj = serializer(Headered(), "value_serializer")
    assert obj is not None and obj("t", [("h", b"1")], 1) == b"s"
    assert seen == [("t", [("h", b"1")])]
    de = deserializer(kp.JsonSerializer(), "value_deserializer")
    assert de is not None and de("t", [], b"[1]") == [1]
    with pytest.raises(errors.KafkaConfigurationError, match="value_deserializer"):
        deserializer(42, "value_deserializer")


# ----------------------------------------------------------------------------------------- future
def test_future_callbacks_get_value_and_partial_args() -> None:
    inner: CFuture[int] = CFuture()
    fut = kp.Future(inner, lambda v: v * 2)
    got: list[Any] = []
    assert fut.add_callback(got.append) is fut
    fut.add_callback(lambda tag, v: got.append((tag, v)), "tag")
    fut.add_errback(lambda e: got.append(("err", e)))
    assert not fut.is_done and fut.value is None
    inner.set_result(21)
    assert got == [42, ("tag", 42)]
    assert fut.succeeded() and not fut.failed() and fut.get() == 42 and fut.value == 42
    late: list[Any] = []
    fut.add_callback(late.append)  # already done: runs at once
    assert late == [42]


def test_future_errback_and_get_raise_the_failure() -> None:
    inner: CFuture[int] = CFuture()
    fut: kp.Future[int] = kp.Future(inner)
    got: list[Any] = []
    fut.add_callback(got.append).add_errback(lambda e: got.append(("err", e)))
    boom = errors.KafkaTimeoutError("x")
    inner.set_exception(boom)
    assert got == [("err", boom)]
    assert fut.failed() and fut.exception is boom and fut.retriable() is True  # timeouts are retriable
    with pytest.raises(errors.KafkaTimeoutError):
        fut.get(0)


def test_future_get_times_out_with_kafka_timeout_error() -> None:
    fut: kp.Future[int] = kp.Future(CFuture())
    with pytest.raises(errors.KafkaTimeoutError):
        fut.get(timeout=0.01)


# ----------------------------------------------------------------------------------------- values and errors
def test_structs_are_the_native_named_tuples() -> None:
    assert kp.TopicPartition is kafka_handoff.TopicPartition
    assert kp.OffsetAndMetadata is kafka_handoff.OffsetAndMetadata
    assert kp.OffsetAndTimestamp is kafka_handoff.OffsetAndTimestamp
    assert kp.ConsumerRecord._fields == (
        "topic",
        "partition",
        "leader_epoch",
        "offset",
        "timestamp",
        "timestamp_type",
        "key",
        "value",
        "headers",
        "checksum",
        "serialized_key_size",
        "serialized_value_size",
        "serialized_header_size",
    )
    assert kp.RecordMetadata._fields[:4] == ("topic", "partition", "topic_partition", "offset")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5, kafka_handoff.OffsetAndMetadata(5)),
        (kafka_handoff.OffsetAndMetadata(5, "m", -1), kafka_handoff.OffsetAndMetadata(5, "m", None)),
        ((7, None, 3), kafka_handoff.OffsetAndMetadata(7, "", 3)),
        ((7, "x"), kafka_handoff.OffsetAndMetadata(7, "x", None)),
    ],
)
def test_native_offset_reads_kafka_python_leader_epoch(value: Any, expected: Any) -> None:
    assert native_offset(value) == expected


def test_errors_alias_the_native_classes() -> None:
    assert errors.KafkaError is kafka_handoff.KafkaError
    assert errors.KafkaTimeoutError is kafka_handoff.KafkaTimeoutError
    assert errors.CommitFailedError is kafka_handoff.CommitFailedError
    assert issubclass(errors.NoBrokersAvailable, errors.KafkaError)
    assert errors.NotLeaderForPartitionError is errors.NotLeaderOrFollowerError
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), Exception), name


def test_every_exported_name_resolves() -> None:
    assert [n for n in kp.__all__ if not hasattr(kp, n)] == []


def test_admin_calls_the_native_client_lacks_raise_not_implemented() -> None:
    admin = KafkaAdminClient.__new__(KafkaAdminClient)  # no connection needed for the stubs
    with pytest.raises(NotImplementedError, match=r"alter_configs\(\).*altering configurations"):
        admin.alter_configs([])
    with pytest.raises(NotImplementedError, match="ACLs"):
        admin.describe_acls(None)
    with pytest.raises(AttributeError):
        admin.no_such_call  # noqa: B018


def test_config_resource_and_new_partitions() -> None:
    from kafka_handoff.compat.kafka_python.admin import ConfigResource, ConfigResourceType, NewPartitions

    assert ConfigResource("topic", "t").resource_type is ConfigResourceType.TOPIC
    assert ConfigResource(ConfigResourceType.BROKER, "1").resource_type is ConfigResourceType.BROKER
    assert NewPartitions(4).total_count == 4
    nt = kp.NewTopic("t", 3, 1, topic_configs={"retention.ms": 1000})
    assert nt.to_native() == kafka_handoff.NewTopic("t", 3, 1, {"retention.ms": "1000"}, None)
    manual = kp.NewTopic("t", replica_assignments={0: [1]})
    assert manual.to_native() == kafka_handoff.NewTopic("t", -1, -1, {}, {0: [1]})
    with pytest.raises(errors.InvalidRequestError, match="replica_assignments"):
        kp.NewTopic("t", 1, 1, replica_assignments={0: [1]}).to_native()  # as the broker refuses it


def test_partition_arguments_accept_varargs_and_one_collection() -> None:
    from kafka_handoff.compat.kafka_python.consumer import _partitions_arg

    a, b = kp.TopicPartition("t", 0), kp.TopicPartition("t", 1)
    assert _partitions_arg((a, b)) == [a, b]
    assert _partitions_arg(([a, b],)) == [a, b]
    assert _partitions_arg(({a},)) == [a]
    assert _partitions_arg((("t", 1),)) == [b]  # a bare (topic, partition) tuple is one partition


def test_metrics_are_nested_by_group() -> None:
    from kafka_handoff.compat.kafka_python.producer import nested_metrics

    assert nested_metrics({"producer-metrics:record-send-rate": 1.0, "a:b:c": 2.0, "plain": 3.0}) == {
        "producer-metrics": {"record-send-rate": 1.0},
        "a:b": {"c": 2.0},
        "kafka-handoff": {"plain": 3.0},
    }
