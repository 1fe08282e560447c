"""The confluent-kafka compat ``AdminClient`` on the real broker: futures per topic/group, librdkafka's error
codes in them, topic creation (validate-only too), partitions, metadata, configs, cluster, offsets and the
consumer-group calls."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kafka_handoff import Consumer as NativeConsumer
from kafka_handoff import Producer as NativeProducer
from kafka_handoff.compat.confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from kafka_handoff.compat.confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    ConsumerGroupState,
    IsolationLevel,
    NewPartitions,
    NewTopic,
    OffsetSpec,
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
