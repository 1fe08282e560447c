"""The confluent-kafka compat ``AdminClient`` on the real broker: futures per topic/group, librdkafka's error
codes in them, topic creation (validate-only too), partitions, metadata, configs, cluster, offsets and the
consumer-group calls; configs of every resource kind, record deletion, leader elections and group offset
alteration; ACLs and SCRAM credentials on the secured dev broker (StandardAuthorizer)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kafka_handoff import Consumer as NativeConsumer
from kafka_handoff import Producer as NativeProducer
from kafka_handoff import devbroker
from kafka_handoff.compat.confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from kafka_handoff.compat.confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ConsumerGroupState,
    DeletedRecords,
    ElectionType,
    IsolationLevel,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka_handoff.types import OffsetAndMetadata
from kafka_handoff.types import TopicPartition as NativeTP

pytestmark = pytest.mark.integration


@pytest.fixture
def admin(broker: Any) -> Any:
    client = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    yield client
    client.close()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_topic_lifecycle(admin: AdminClient) -> None:
    topic, checked = _name("compat-admin"), _name("compat-validate")
    fs = admin.create_topics(
        [NewTopic(checked, 2, 1)], validate_only=True, request_timeout=30
    )  # validated, not created
    assert fs[checked].result(60) is None
    assert admin.list_topics(checked, 30).topics[checked].error == KafkaError.UNKNOWN_TOPIC_OR_PART

    fs = admin.create_topics([NewTopic(topic, 2, 1, config={"compression.type": "gzip"})])
    assert set(fs) == {topic} and fs[topic].result(60) is None
    again = admin.create_topics([NewTopic(topic, 2, 1)])[topic]
    with pytest.raises(KafkaException) as info:
        again.result(60)
    assert info.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    assert admin.create_partitions([NewPartitions(topic, 5)])[topic].result(60) is None
    metadata = admin.list_topics(timeout=30)
    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2, 3, 4]
    assert metadata.brokers and metadata.cluster_id
    (description,) = admin.describe_topics(TopicCollection([topic]))[topic].result(60).partitions[:1]
    assert description.id == 0 and description.leader is not None and description.leader.port > 0

    resource = ConfigResource("topic", topic)
    configs = admin.describe_configs([resource])[resource].result(60)
    assert configs["compression.type"].value == "gzip"
    assert configs["compression.type"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert configs["retention.ms"].is_default

    assert admin.delete_topics([topic])[topic].result(60) is None
    missing = admin.delete_topics([topic])[topic]
    with pytest.raises(KafkaException) as info:
        missing.result(60)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_cluster_and_offsets(broker: Any, admin: AdminClient, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    cluster = admin.describe_cluster().result(60)
    port = int(broker.bootstrap_servers.rsplit(":", 1)[1])
    assert port in {n.port for n in cluster.nodes} and cluster.cluster_id
    with NativeProducer({"bootstrap.servers": broker.bootstrap_servers}) as producer:
        for ts in (1_000, 3_000, 2_000):
            producer.send(topic, b"v", partition=0, timestamp=ts)
        producer.flush(60)
    tp = TopicPartition(topic, 0)
    want = {
        "earliest": (OffsetSpec.earliest(), 0),
        "latest": (OffsetSpec.latest(), 3),
        "max_timestamp": (OffsetSpec.max_timestamp(), 1),
        "after 1500": (OffsetSpec.for_timestamp(1_500), 1),
    }
    for what, (spec, offset) in want.items():
        assert admin.list_offsets({tp: spec})[tp].result(60).offset == offset, what


def test_consumer_group_calls(broker: Any, admin: AdminClient, topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    group = _name("compat-group")
    with NativeConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group}) as consumer:
        consumer.commit_sync({NativeTP(topic, 0): OffsetAndMetadata(7, "meta"), NativeTP(topic, 1): 3})

    listing = admin.list_consumer_groups(request_timeout=30).result(60)
    (mine,) = [g for g in listing.valid if g.group_id == group]
    # Offsets committed without joining: a "simple" consumer group (no protocol type), as librdkafka says.
    assert mine.state == ConsumerGroupState.EMPTY and mine.is_simple_consumer_group
    stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(60)
    assert group not in {g.group_id for g in stable.valid}

    description = admin.describe_consumer_groups([group])[group].result(60)
    assert (description.group_id, description.state, description.members) == (
        group,
        ConsumerGroupState.EMPTY,
        [],
    )
    assert description.is_simple_consumer_group

    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    result = admin.list_consumer_group_offsets([request])[group].result(60)
    partitions = result.topic_partitions
    assert partitions is not None
    assert [(tp.partition, tp.offset) for tp in partitions] == [(0, 7), (1, 3)]
    assert partitions[0].metadata == "meta"

    assert admin.delete_consumer_groups([group])[group].result(60) is None
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(60).valid}
    assert group not in {g.id for g in admin.list_groups(timeout=30)}


def test_list_offsets_read_committed_stops_at_an_open_transaction(
    broker: Any, admin: AdminClient, topic_factory: Any
) -> None:
    topic = topic_factory(partitions=1)
    tp = TopicPartition(topic, 0)
    conf = {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": _name("lso")}
    with NativeProducer(conf) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        for _ in range(3):
            producer.send(topic, b"pending", partition=0)
        producer.flush(60)  # written, the transaction still open
        committed = admin.list_offsets(
            {tp: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_COMMITTED
        )
        uncommitted = admin.list_offsets(
            {tp: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_UNCOMMITTED
        )
        assert committed[tp].result(60).offset == 0  # the last stable offset
        assert uncommitted[tp].result(60).offset == 3  # the high watermark
        producer.abort_transaction(30)


def _code(future: Any) -> str:
    """The librdkafka error name a future failed with."""
    with pytest.raises(KafkaException) as info:
        future.result(60)
    return str(info.value.args[0].name())


def _configs_once(
    admin: AdminClient, resource: ConfigResource, check: Callable[[dict[str, ConfigEntry]], bool]
) -> dict[str, ConfigEntry]:
    """The resource's configs once ``check`` holds (bounded): an altered config reaches the broker that
    describes it through the metadata log, after the controller acknowledged the change."""
    deadline = time.monotonic() + 30
    while True:
        configs = admin.describe_configs([resource])[resource].result(60)
        if check(configs) or time.monotonic() > deadline:
            return configs
        time.sleep(0.1)


def test_configs_incremental_and_replacing_alters_and_broker_and_group_resources(
    admin: AdminClient, topic_factory: Any
) -> None:
    topic = topic_factory(partitions=1)
    good = ConfigResource(ResourceType.TOPIC, topic)
    good.add_incremental_config(
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    )
    good.add_incremental_config(
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
    )
    missing = ConfigResource(
        ResourceType.TOPIC,
        _name("missing"),
        incremental_configs=[ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    fs = admin.incremental_alter_configs([good, missing], request_timeout=30)
    assert set(fs) == {good, missing}
    assert fs[good].result(60) is None  # the good resource is altered although the other fails
    assert _code(fs[missing]) == "UNKNOWN_TOPIC_OR_PART"
    described = _configs_once(admin, good, lambda c: c["cleanup.policy"].value == "compact")
    assert described["retention.ms"].value == "3600000"
    assert described["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert described["cleanup.policy"].value == "compact"

    back = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
        ],
    )
    assert admin.incremental_alter_configs([back])[back].result(60) is None
    described = _configs_once(admin, good, lambda c: c["retention.ms"].is_default)
    assert described["retention.ms"].is_default and described["cleanup.policy"].value == "compact"

    # alter_configs replaces every dynamic config: cleanup.policy goes back to its default.
    replace = ConfigResource("topic", topic)
    replace.set_config("segment.ms", 7200000)  # not a str: sent as its text, as librdkafka does
    checked = admin.alter_configs([replace], validate_only=True)[replace]
    assert checked.result(60) is None
    assert admin.describe_configs([good])[good].result(60)["cleanup.policy"].value == "compact"
    assert admin.alter_configs([replace])[replace].result(60) is None
    described = _configs_once(admin, good, lambda c: c["segment.ms"].value == "7200000")
    assert described["segment.ms"].value == "7200000" and described["cleanup.policy"].is_default

    node = admin.describe_cluster().result(60).nodes[0].id
    broker_res = ConfigResource(ResourceType.BROKER, str(node))
    broker_configs = admin.describe_configs([broker_res])[broker_res].result(60)
    assert broker_configs["log.retention.hours"].source in (
        ConfigSource.DEFAULT_CONFIG,
        ConfigSource.STATIC_BROKER_CONFIG,
    )
    group_res = ConfigResource(ResourceType.GROUP, _name("cfg-group"))
    group_res.add_incremental_config(
        ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)
    )
    assert admin.incremental_alter_configs([group_res])[group_res].result(60) is None
    group_configs = _configs_once(
        admin, group_res, lambda c: c["consumer.session.timeout.ms"].value == "50000"
    )
    assert group_configs["consumer.session.timeout.ms"].value == "50000"

    with pytest.raises(TypeError, match="incremental_operation"):
        admin.incremental_alter_configs(
            [ConfigResource("topic", topic, incremental_configs=[ConfigEntry("a", "b")])]
        )


def test_delete_records_elect_leaders_and_alter_group_offsets(
    broker: Any, admin: AdminClient, topic_factory: Any
) -> None:
    topic = topic_factory(partitions=2)
    with NativeProducer({"bootstrap.servers": broker.bootstrap_servers}) as producer:
        for p in (0, 1):
            for _ in range(5):
                producer.send(topic, b"v", partition=p)
        producer.flush(60)
    tp0, tp1 = TopicPartition(topic, 0, 3), TopicPartition(topic, 1, -1)  # -1: OFFSET_END, every record
    fs = admin.delete_records([tp0, tp1], request_timeout=30)
    deleted = {tp.partition: fs[tp].result(60) for tp in (tp0, tp1)}
    assert all(isinstance(d, DeletedRecords) for d in deleted.values())
    assert {p: d.low_watermark for p, d in deleted.items()} == {0: 3, 1: 5}
    earliest = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})
    assert [f.result(60).offset for f in earliest.values()] == [3]
    # A read right after a change sees it without waiting for the change's future (librdkafka's order).
    more = TopicPartition(topic, 0, 4)
    deleting = admin.delete_records([more])[more]
    after = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})
    assert [f.result(60).offset for f in after.values()] == [4] == [deleting.result(60).low_watermark]
    gone = TopicPartition(topic, 7, 1)
    assert _code(admin.delete_records([gone])[gone]) == "UNKNOWN_TOPIC_OR_PART"

    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(60)
    ((tp, error),) = elected.items()
    assert (tp.topic, tp.partition) == (topic, 0)
    assert error is not None and error.name() == "ELECTION_NOT_NEEDED"  # the only replica leads

    group = _name("compat-alter")
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 5)])
    altered = admin.alter_consumer_group_offsets([request])[group].result(60)
    assert altered.group_id == group and altered.topic_partitions is not None
    assert [(t.partition, t.offset) for t in altered.topic_partitions] == [(0, 4), (1, 5)]
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(60)
    assert listed.topic_partitions is not None
    assert sorted((t.partition, t.offset) for t in listed.topic_partitions) == [(0, 4), (1, 5)]
    with pytest.raises(ValueError, match="single group"):
        admin.alter_consumer_group_offsets([request, ConsumerGroupTopicPartitions("other", [tp0])])


# ------------------------------------------------------------------------------------ secured broker
def _acls(admin: AdminClient, flt: AclBindingFilter, count: int) -> list[AclBinding]:
    """ACLs reach the authorizer through the metadata log: await the expected count (bounded)."""
    deadline = time.monotonic() + 30
    while True:
        found = sorted(admin.describe_acls(flt).result(60))
        if len(found) == count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_acls_create_describe_delete_and_deny_a_principal(secured: devbroker.Cluster) -> None:
    assert secured.security is not None
    topic = _name("compat-acl")
    with AdminClient({"bootstrap.servers": secured.bootstrap_servers}) as admin:
        assert admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60) is None
        deny = AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.DELETE,
            AclPermissionType.DENY,
        )
        allow = AclBinding("topic", topic, "literal", "User:bob", "*", "read", "allow")  # names work too
        see = AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.DESCRIBE,
            AclPermissionType.ALLOW,
        )
        created = admin.create_acls([deny, allow, see])
        assert set(created) == {deny, allow, see}
        assert all(f.result(60) is None for f in created.values())
        flt = AclBindingFilter(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        assert _acls(admin, flt, 3) == sorted([deny, allow, see])

        alice = secured.security.client_config("sasl_ssl", user="alice", mechanism="SCRAM-SHA-256")
        with AdminClient(alice) as as_alice:
            tp = TopicPartition(topic, 0, -1)
            assert _code(as_alice.delete_records([tp])[tp]) == "TOPIC_AUTHORIZATION_FAILED"

        bob = AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            "User:bob",
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        deleted = admin.delete_acls([bob])
        assert list(deleted) == [bob] and deleted[bob].result(60) == [allow]
        assert _acls(admin, flt, 2) == sorted([deny, see])
        assert sorted(admin.delete_acls([flt])[flt].result(60)) == sorted([deny, see])

        with pytest.raises(ValueError, match="AclBindingFilter"):
            AclBinding("any", topic, "literal", "User:x", "*", "read", "allow")
        with pytest.raises(TypeError):
            admin.create_acls([flt])


def test_scram_credentials_upsert_describe_and_delete(secured: devbroker.Cluster) -> None:
    assert secured.security is not None
    user, stranger = f"dave{uuid.uuid4().hex[:6]}", f"nobody{uuid.uuid4().hex[:6]}"
    with AdminClient({"bootstrap.servers": secured.bootstrap_servers}) as admin:
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
        upsert = UserScramCredentialUpsertion(user, info, b"pa55-word", b"some-salt")
        assert "pa55" not in repr(upsert)
        fs = admin.alter_user_scram_credentials([upsert])
        assert list(fs) == [user] and fs[user].result(60) is None

        described = admin.describe_user_scram_credentials([user, stranger])
        assert isinstance(described, dict)
        mine = described[user].result(60)
        assert mine.user == user and mine.scram_credential_infos == [info]
        assert _code(described[stranger]) == "RESOURCE_NOT_FOUND"
        everyone = admin.describe_user_scram_credentials()
        assert not isinstance(everyone, dict)
        assert everyone.result(60)[user].scram_credential_infos == [info]

        props = {
            **secured.security.client_config("sasl_ssl", user="alice", mechanism="SCRAM-SHA-512"),
            "sasl.username": user,
            "sasl.password": "pa55-word",
        }
        from kafka_handoff.admin import AdminClient as NativeAdmin

        with NativeAdmin(props) as as_user:  # the new credential authenticates
            assert as_user.describe_cluster(timeout=30).brokers

        gone = admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)]
        )
        assert gone[user].result(60) is None
        again = admin.describe_user_scram_credentials([user])
        assert isinstance(again, dict)
        assert _code(again[user]) == "RESOURCE_NOT_FOUND"
