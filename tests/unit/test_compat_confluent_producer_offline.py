"""The confluent-kafka compat ``Producer``/``SerializingProducer`` and admin types without a broker: the queue
limits (``BufferError``, ``len()``), ``flush()``/``poll()`` returning counts instead of raising, argument
checks, librdkafka's configuration (``consistent_random`` default, ``compression.level``), serializer errors
and the admin value types.  Delivery against the real broker:
tests/integration/test_compat_confluent_producer.py.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_handoff.admin import DeletedRecords as NativeDeletedRecords
from kafka_handoff.compat.confluent_kafka import (
    KafkaError,
    KafkaException,
    Producer,
    SerializingProducer,
    TopicPartition,
)
from kafka_handoff.compat.confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigEntry,
    ConfigResource,
    ConsumerGroupState,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka_handoff.compat.confluent_kafka.error import KeySerializationError, ValueSerializationError
from kafka_handoff.compat.confluent_kafka.serialization import MessageField, SerializationContext

pytestmark = pytest.mark.unit


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _conf(**extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{_dead_port()}",
        "reconnect.backoff.ms": 10_000,
        "reconnect.backoff.max.ms": 10_000,
        **extra,
    }


@pytest.fixture
def offline() -> Iterator[Producer]:
    """A producer whose topic ``t`` has 4 partitions, set by hand (no broker: nothing is ever sent)."""
    producer = Producer(_conf(**{"queue.buffering.max.messages": 5, "linger.ms": 600_000}))
    native = producer._native
    native._accumulator.update_topic("t", 4, [0, 1, 2, 3])
    native._partition_counts = {"t": 4}
    try:
        yield producer
    finally:
        producer.close(0)


def test_a_full_queue_raises_buffer_error_and_len_counts_the_queue(offline: Producer) -> None:
    for i in range(5):
        offline.produce("t", b"v%d" % i)
    assert len(offline) == 5
    with pytest.raises(BufferError, match=r"(?i)queue full"):
        offline.produce("t", b"one too many")
    assert len(offline) == 5  # the refused message was not counted


def test_the_byte_limit_raises_buffer_error_too() -> None:
    producer = Producer(_conf(**{"queue.buffering.max.kbytes": 1, "linger.ms": 600_000}))
    producer._native._accumulator.update_topic("t", 1, [0])
    producer._native._partition_counts = {"t": 1}
    try:
        producer.produce("t", b"x" * 1000)
        with pytest.raises(BufferError):
            producer.produce("t", b"x" * 100)  # 1100 bytes > 1 KiB
        assert len(producer) == 1
    finally:
        producer.close(0)


def test_flush_and_poll_return_counts_without_raising(offline: Producer) -> None:
    offline.produce("t", b"v")
    assert offline.poll(0) == 0  # nothing delivered: no callback served
    assert offline.flush(0.05) == 1  # still queued: the count, no exception


def test_produce_checks_its_arguments(offline: Producer) -> None:
    with pytest.raises(TypeError, match="value must be bytes or str"):
        offline.produce("t", 42)
    with pytest.raises(TypeError, match="key must be bytes or str"):
        offline.produce("t", b"v", key=1.5)
    with pytest.raises(KafkaException) as info:
        offline.produce("t", b"v", partition=4)
    assert info.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    assert len(offline) == 0


def test_a_message_larger_than_message_max_bytes_raises_msg_size_too_large() -> None:
    producer = Producer(_conf(**{"message.max.bytes": 2000, "linger.ms": 600_000}))
    producer._native._accumulator.update_topic("t", 1, [0])
    producer._native._partition_counts = {"t": 1}
    try:
        with pytest.raises(KafkaException) as info:
            producer.produce("t", b"x" * 5000)
        assert info.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert len(producer) == 0
    finally:
        producer.close(0)


def test_partition_minus_one_and_keys_use_librdkafkas_default_partitioner(offline: Producer) -> None:
    assert offline._native.config.partitioner == "consistent_random"
    offline.produce("t", b"a", key=b"hejsan", partition=-1)
    batches = offline._native._accumulator.queued_batches
    from kafka_handoff.types import TopicPartition as NativeTP

    # CRC32("hejsan") = 0xD077037E, modulo 4 partitions
    assert [len(b.entries) for b in batches(NativeTP("t", 0xD077037E % 4))] == [1]


def test_librdkafka_settings_reach_the_native_producer() -> None:
    producer = Producer(
        _conf(
            **{
                "partitioner": "murmur2_random",
                "compression.codec": "gzip",
                "compression.level": 4,
                "queue.buffering.max.ms": 7,
            }
        )
    )
    try:
        cfg = producer._native.config
        assert (cfg.partitioner, cfg.compression_type, cfg.compression_gzip_level, cfg.linger_ms) == (
            "murmur2_random",
            "gzip",
            4,
            7,
        )
    finally:
        producer.close(0)


def test_a_message_timeout_shorter_than_a_request_timeout_is_accepted() -> None:
    producer = Producer(_conf(**{"message.timeout.ms": 5000}))  # librdkafka allows it; Java needs >= 30005
    try:
        cfg = producer._native.config
        assert cfg.delivery_timeout_ms == 5000
        assert cfg.linger_ms + cfg.request_timeout_ms <= 5000
    finally:
        producer.close(0)
    unlimited = Producer(_conf(**{"message.timeout.ms": 0}))  # librdkafka's 0: no limit
    try:
        assert unlimited._native.config.delivery_timeout_ms == 2_147_483_647
    finally:
        unlimited.close(0)


def test_no_configuration_at_all_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="expected configuration dict"):
        Producer()
    with pytest.raises(TypeError, match="expected configuration dict"):
        AdminClient()


def test_bad_settings_raise_kafka_exception_naming_the_key() -> None:
    with pytest.raises(KafkaException, match=r"queue\.buffering\.max\.messages"):
        Producer(_conf(**{"queue.buffering.max.messages": 0}))
    with pytest.raises(KafkaException, match="partitioner"):
        Producer(_conf(partitioner="round_robin"))
    with pytest.raises(KafkaException, match="on_delivery"):
        Producer(_conf(on_delivery="not callable"))


def test_a_closed_producer_refuses_calls() -> None:
    producer = Producer(_conf())
    producer.close(0)
    with pytest.raises(RuntimeError, match="closed"):
        producer.produce("t", b"v")
    with pytest.raises(RuntimeError, match="closed"):
        producer.poll(0)
    assert producer.close() is True  # closing again is harmless


def test_purge_fails_the_queued_messages_in_their_delivery_reports(offline: Producer) -> None:
    reports: list[tuple[KafkaError | None, Any]] = []
    for i in range(3):
        offline.produce("t", b"v%d" % i, on_delivery=lambda err, msg: reports.append((err, msg)))
    offline.produce("t", b"no report wanted")
    assert len(offline) == 4
    offline.purge()
    assert offline.flush(5) == 0  # the reports are served, nothing is left
    assert sorted(m.value() for _, m in reports) == [b"v0", b"v1", b"v2"]
    assert {err.code() for err, _ in reports if err is not None} == {KafkaError._PURGE_QUEUE}
    assert len(reports) == 3 and all(err is not None for err, _ in reports)


def test_transaction_calls_without_transactional_id_raise_kafka_exception() -> None:
    producer = Producer(_conf())
    try:
        with pytest.raises(KafkaException) as info:
            producer.begin_transaction()
        assert info.value.args[0].code() == KafkaError._STATE
    finally:
        producer.close(0)


def test_serializing_producer_passes_the_context_and_wraps_failures() -> None:
    seen: list[tuple[Any, str, str]] = []

    def key_ser(obj: Any, ctx: SerializationContext) -> bytes:
        seen.append((obj, ctx.topic, ctx.field))
        return str(obj).encode()

    def value_ser(obj: Any, ctx: SerializationContext) -> bytes:
        if obj == "bad":
            raise ValueError("cannot")
        seen.append((obj, ctx.topic, ctx.field))
        return str(obj).encode()

    producer = SerializingProducer(
        _conf(**{"key.serializer": key_ser, "value.serializer": value_ser, "linger.ms": 600_000})
    )
    producer._native._accumulator.update_topic("t", 1, [0])
    producer._native._partition_counts = {"t": 1}
    try:
        producer.produce("t", key=7, value={"a": 1})
        assert seen == [(7, "t", MessageField.KEY), ({"a": 1}, "t", MessageField.VALUE)]
        with pytest.raises(ValueSerializationError) as info:
            producer.produce("t", key=1, value="bad")
        assert info.value.args[0].code() == KafkaError._VALUE_SERIALIZATION

        def failing(obj: Any, ctx: SerializationContext) -> bytes:
            raise RuntimeError("nope")

        producer._key_serializer = failing
        with pytest.raises(KeySerializationError):
            producer.produce("t", key=1, value=2)
        assert len(producer) == 1
    finally:
        producer.close(0)


# ------------------------------------------------------------------------------------ admin value types


def test_config_resource_accepts_enum_names_and_numbers() -> None:
    assert ConfigResource("topic", "x") == ConfigResource(ResourceType.TOPIC, "x") == ConfigResource(2, "x")
    assert ConfigResource("broker", "1").restype_int == 4
    with pytest.raises(ValueError, match="Unknown resource type"):
        ConfigResource("table", "x")
    resource = ConfigResource("topic", "x", set_config={"a": "1"})
    resource.set_config("a", "2", overwrite=False)
    assert resource.set_config_dict == {"a": "1"} and len(resource) == 1


def test_consumer_group_state_from_broker_names() -> None:
    assert ConsumerGroupState.of("Stable") is ConsumerGroupState.STABLE
    assert ConsumerGroupState.of("PreparingRebalance") is ConsumerGroupState.PREPARING_REBALANCING
    assert ConsumerGroupState.of("Reconciling") is ConsumerGroupState.COMPLETING_REBALANCING
    assert ConsumerGroupState.of(None) is ConsumerGroupState.UNKNOWN


def test_admin_operations_check_their_arguments_before_sending() -> None:
    admin = AdminClient(_conf())
    try:
        with pytest.raises(ValueError, match="configs exist for TOPIC, BROKER and GROUP"):
            admin.describe_configs([ConfigResource("transactional_id", "x")])
        with pytest.raises(TypeError, match="incremental_operation"):
            admin.incremental_alter_configs(
                [ConfigResource("topic", "x", incremental_configs=[ConfigEntry("a", "1")])]
            )
        with pytest.raises(ValueError, match="non-empty list of TopicPartition"):
            admin.delete_records([])
        with pytest.raises(TypeError, match="AclBinding objects"):
            admin.create_acls([AclBindingFilter("any", None, "any", None, None, "any", "any")])
        with pytest.raises(TypeError, match="ElectionType"):
            admin.elect_leaders(0)  # type: ignore[arg-type]
        with pytest.raises(NotImplementedError, match=r"set_sasl_credentials\(\)"):
            admin.set_sasl_credentials("u", "p")
        with pytest.raises(TypeError, match="NewTopic"):
            admin.create_topics(["not-a-NewTopic"])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="must be a set"):
            admin.list_consumer_groups(states=[ConsumerGroupState.STABLE])
    finally:
        admin.close()


def test_acl_bindings_take_enum_names_and_refuse_filter_values() -> None:
    by_name = AclBinding("topic", "t", "prefixed", "User:a", "*", "write", "deny")
    by_enum = AclBinding(
        ResourceType.TOPIC,
        "t",
        ResourcePatternType.PREFIXED,
        "User:a",
        "*",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )
    assert by_name == by_enum and hash(by_name) == hash(by_enum) and len({by_name, by_enum}) == 1
    with pytest.raises(ValueError, match="operation cannot be ANY"):
        AclBinding("topic", "t", "literal", "User:a", "*", "any", "allow")
    with pytest.raises(ValueError, match="principal must not be None"):
        AclBinding("topic", "t", "literal", None, "*", "read", "allow")
    with pytest.raises(ValueError, match="AclOperation"):
        AclBinding("topic", "t", "literal", "User:a", "*", "fly", "allow")
    flt = AclBindingFilter("any", None, "match", None, None, "any", "any")
    assert flt != AclBindingFilter("any", None, "any", None, None, "any", "any")


def test_scram_upsertion_repr_hides_the_password() -> None:
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    assert "hunter2" not in repr(UserScramCredentialUpsertion("u", info, b"hunter2"))


def test_new_topic_keeps_confluents_fields() -> None:
    topic = NewTopic("t", 3, 1, config={"cleanup.policy": "compact"})
    assert (topic.topic, topic.num_partitions, topic.replication_factor, topic.config) == (
        "t",
        3,
        1,
        {"cleanup.policy": "compact"},
    )


def test_every_name_confluents_admin_module_exports_is_there() -> None:
    from kafka_handoff.compat.confluent_kafka import admin

    names = [
        "AdminClient",
        "NewTopic",
        "NewPartitions",
        "ConfigResource",
        "ConfigEntry",
        "ConfigSource",
        "AlterConfigOpType",
        "ResourceType",
        "ResourcePatternType",
        "AclBinding",
        "AclBindingFilter",
        "AclOperation",
        "AclPermissionType",
        "BrokerMetadata",
        "ClusterMetadata",
        "GroupMember",
        "GroupMetadata",
        "PartitionMetadata",
        "TopicMetadata",
        "ConsumerGroupListing",
        "ListConsumerGroupsResult",
        "ConsumerGroupDescription",
        "MemberAssignment",
        "MemberDescription",
        "DescribeClusterResult",
        "TopicDescription",
        "ListOffsetsResultInfo",
        "OffsetSpec",
        "DeletedRecords",
        "UserScramCredentialAlteration",
        "UserScramCredentialUpsertion",
        "UserScramCredentialDeletion",
        "ScramCredentialInfo",
        "ScramMechanism",
        "UserScramCredentialsDescription",
        "KafkaException",
        "KafkaError",
        "TopicPartition",
        "ConsumerGroupTopicPartitions",
        "ConsumerGroupState",
        "ConsumerGroupType",
        "IsolationLevel",
        "ElectionType",
        "TopicCollection",
        "OFFSET_INVALID",
        "RESOURCE_TOPIC",
        "RESOURCE_BROKER",
        "RESOURCE_GROUP",
        "CONFIG_SOURCE_DEFAULT_CONFIG",
    ]
    assert [n for n in names if not hasattr(admin, n)] == []


def test_produce_never_waits_for_a_topics_metadata() -> None:
    """No broker: the message is queued at once and its report says it timed out (message.timeout.ms)."""
    reports: list[tuple[KafkaError | None, Any]] = []
    producer = Producer(_conf(**{"message.timeout.ms": 500}))
    try:
        producer.produce("unknown", b"v", on_delivery=lambda err, msg: reports.append((err, msg)))
        assert len(producer) == 1
        assert producer.poll(30) == 1
        ((err, msg),) = reports
        assert err is not None and err.code() == KafkaError._MSG_TIMED_OUT
        assert (msg.topic(), msg.value(), msg.error()) == ("unknown", b"v", err)
        assert len(producer) == 0
    finally:
        producer.close(0)


def test_admin_reads_start_after_earlier_changes_and_reads_run_side_by_side() -> None:
    admin = AdminClient(_conf())
    release = threading.Event()
    order: list[str] = []

    class Native:  # stands in for the native admin client: this checks the compat layer's ordering only
        def delete_records(self, offsets: Any, timeout: float | None = None) -> Any:
            release.wait(30)
            order.append("delete_records")
            return {tp: NativeDeletedRecords(o) for tp, o in offsets.items()}

        def list_offsets(self, tps: Any, spec: int, timeout: float | None = None, **kw: Any) -> Any:
            order.append("list_offsets")
            return dict.fromkeys(tps, 3)

        def describe_acls(self, flt: Any, timeout: float | None = None) -> Any:
            order.append("describe_acls")
            return []

    real = admin._native
    admin._native = Native()  # type: ignore[assignment]
    try:
        tp = TopicPartition("t", 0, 3)
        deleting = admin.delete_records([tp])[tp]
        listing = admin.list_offsets({TopicPartition("t", 0): OffsetSpec.earliest()})
        first_read = admin.describe_acls(AclBindingFilter("any", None, "any", None, None, "any", "any"))
        second_read = admin.describe_acls(AclBindingFilter("any", None, "any", None, None, "any", "any"))
        assert not listing[TopicPartition("t", 0)].done() and not first_read.done()  # waiting for the change
        release.set()
        assert deleting.result(30).low_watermark == 3
        assert [f.result(30).offset for f in listing.values()] == [3]
        assert first_read.result(30) == [] and second_read.result(30) == []
        assert order[0] == "delete_records" and sorted(order[1:]) == [
            "describe_acls",
            "describe_acls",
            "list_offsets",
        ]
    finally:
        release.set()
        admin._native = real
        admin.close()
