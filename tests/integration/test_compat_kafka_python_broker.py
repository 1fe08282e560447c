"""kafka-python compat layer against the real broker: the documented behaviours of KafkaProducer,
KafkaConsumer and KafkaAdminClient (issue 27)."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Collection
from typing import Any

import pytest

from kafka_handoff.compat.kafka_python import (
    ConsumerRebalanceListener,
    JsonSerializer,
    KafkaAdminClient,
    KafkaConsumer,
    KafkaProducer,
    NewTopic,
    OffsetAndMetadata,
    TopicPartition,
    errors,
)
from kafka_handoff.compat.kafka_python.admin import ConfigResource, ConfigResourceType, NewPartitions

pytestmark = pytest.mark.integration

TopicFactory = Callable[..., str]
WAIT_S = 60.0  # upper bound of every wait for records; the tests never depend on it being reached


@pytest.fixture
def bootstrap(broker: Any) -> str:
    return str(broker.bootstrap_servers)


def produce(bootstrap: str, topic: str, count: int, partitions: int = 1, **kw: Any) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap, **kw) as producer:
        futures = [
            producer.send(topic, value=b"v%d" % i, key=b"k%d" % i, partition=i % partitions)
            for i in range(count)
        ]
        producer.flush(60)
        for f in futures:
            f.get(0)


def take(consumer: KafkaConsumer, count: int) -> list[Any]:
    """``count`` records from the consumer's iterator (fails instead of hanging past WAIT_S)."""
    out: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    while len(out) < count:
        assert time.monotonic() < deadline, f"only {len(out)} of {count} records arrived"
        for tp_records in consumer.poll(timeout_ms=500, max_records=count - len(out)).values():
            out.extend(tp_records)
    return out


def group() -> str:
    return f"kp-{uuid.uuid4().hex[:8]}"


# =========================================================================================== producer
def test_send_get_returns_record_metadata_and_callbacks_run(
    bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=3)
    done = threading.Event()
    seen: list[Any] = []
    with KafkaProducer(bootstrap_servers=bootstrap, key_serializer=str.encode, linger_ms=5) as producer:
        future = producer.send(
            topic, b"value", key="key", headers=[("h", b"1")], timestamp_ms=1_700_000_000_000
        )

        def on_success(md: Any) -> None:
            seen.append(md)
            done.set()

        future.add_callback(on_success).add_errback(seen.append)
        md = future.get(timeout=30)
        assert done.wait(30)
        assert seen == [md]
        assert future.is_done and future.succeeded() and not future.failed()
        assert md.topic == topic and md.topic_partition == TopicPartition(topic, md.partition)
        assert md.offset == 0 and md.timestamp == 1_700_000_000_000
        assert (md.serialized_key_size, md.serialized_value_size, md.serialized_header_size) == (3, 5, 2)
        assert producer.partitions_for(topic) == {0, 1, 2}
        again = producer.send(topic, b"other", key="key").get(30)
        assert again.partition == md.partition  # keyed records stay in one partition
        metrics = producer.metrics()
        assert isinstance(metrics, dict) and all(isinstance(v, dict) for v in metrics.values())


def test_errback_gets_the_failure(bootstrap: str, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    failures: list[BaseException] = []
    with KafkaProducer(bootstrap_servers=bootstrap, max_request_size=1000) as producer:
        future = producer.send(topic, b"x" * 5000)  # larger than max_request_size: the future fails
        future.add_errback(failures.append)
        with pytest.raises(errors.KafkaError):
            future.get(30)
        assert future.failed() and failures == [future.exception]


def test_value_serializer_and_partitioner(bootstrap: str, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=4)
    calls: list[tuple[Any, list[int], list[int]]] = []

    def last_partition(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        calls.append((key, all_partitions, available))
        return all_partitions[-1]

    with KafkaProducer(
        bootstrap_servers=bootstrap, value_serializer=JsonSerializer(), partitioner=last_partition
    ) as producer:
        md = producer.send(topic, {"a": 1}, key=b"k").get(30)
    assert md.partition == 3
    assert calls == [(b"k", [0, 1, 2, 3], [0, 1, 2, 3])]
    with KafkaConsumer(
        bootstrap_servers=bootstrap, value_deserializer=JsonSerializer(), auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([TopicPartition(topic, 3)])
        (record,) = take(consumer, 1)
    assert record.value == {"a": 1}


def test_send_needs_a_key_or_a_value(bootstrap: str) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap) as producer, pytest.raises(AssertionError):
        producer.send("t")


# =========================================================================================== consumer
def test_iteration_yields_consumer_records_and_stops_after_consumer_timeout(
    bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, 10, partitions=2)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
        key_deserializer=bytes.decode,
    )
    try:
        records = list(consumer)  # no group: every partition of the topic, ends after 3 s without records
        assert sorted((r.partition, r.offset) for r in records) == [(p, o) for p in (0, 1) for o in range(5)]
        first = min(records, key=lambda r: (r.partition, r.offset))
        assert first.topic == topic and first.key == "k0" and first.value == b"v0"
        assert (first.serialized_key_size, first.serialized_value_size) == (2, 2)
        assert first.headers == [] and first.serialized_header_size == -1
        assert consumer.subscription() == {topic}
        assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
        produce(bootstrap, topic, 2, partitions=2)
        more = list(consumer)  # iterating again continues where it stopped
        assert sorted((r.partition, r.offset) for r in more) == [(0, 5), (1, 5)]
    finally:
        consumer.close()


def test_poll_returns_at_most_max_records_grouped_by_partition(
    bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=3)
    produce(bootstrap, topic, 30, partitions=3)
    tps = [TopicPartition(topic, p) for p in range(3)]
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        seen: dict[TopicPartition, list[int]] = {tp: [] for tp in tps}
        deadline = time.monotonic() + WAIT_S
        while sum(map(len, seen.values())) < 30:
            assert time.monotonic() < deadline
            batch = consumer.poll(timeout_ms=500, max_records=4)
            assert sum(map(len, batch.values())) <= 4
            for tp, records in batch.items():
                assert all(r.topic == tp.topic and r.partition == tp.partition for r in records)
                seen[tp].extend(r.offset for r in records)
        assert seen == {tp: list(range(10)) for tp in tps}  # each record once, in order
        assert consumer.poll(timeout_ms=0) == {}
        produce(bootstrap, topic, 1)
        assert [r.offset for r in consumer.poll(timeout_ms=None)[tps[0]]] == [10]  # None: until records
        assert {tp: consumer.position(tp) for tp in tps} == {tps[0]: 11, tps[1]: 10, tps[2]: 10}


def test_commit_counts_only_records_handed_out(bootstrap: str, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, 20)
    tp = TopicPartition(topic, 0)
    gid = group()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=gid,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        first = next(consumer)
        second = next(consumer)
        assert (first.offset, second.offset) == (0, 1)
        assert consumer.position(tp) == 2  # the rest of the fetched batch is not handed out yet
        consumer.commit()
        assert consumer.committed(tp) == 2
        consumer.commit({tp: OffsetAndMetadata(5, "meta", -1)})
        assert consumer.committed(tp, metadata=True) == OffsetAndMetadata(5, "meta", None)
        consumer.seek(tp, 3)
        assert next(consumer).offset == 3
        done = threading.Event()
        results: list[Any] = []

        def on_commit(offsets: Any, response: Any) -> None:
            results.append((offsets, response))
            done.set()

        consumer.commit_async(callback=on_commit)
        deadline = time.monotonic() + WAIT_S
        while not done.is_set():  # the callback runs inside a later poll, as kafka-python's
            assert time.monotonic() < deadline
            consumer.poll(timeout_ms=100, max_records=100)
        assert results[0][1] is None and results[0][0][tp].offset == 4
    finally:
        consumer.close()


def test_close_after_partial_iteration_loses_nothing(bootstrap: str, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, 20)
    gid = group()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=gid, auto_offset_reset="earliest")
    handed = [next(consumer).offset for _ in range(3)]
    consumer.close()  # auto-commit on close: the position after the three records, not the fetched batch
    assert handed == [0, 1, 2]
    with KafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=gid, auto_offset_reset="earliest"
    ) as again:
        assert next(again).offset == 3


def test_seeks_positions_and_offset_lookups(bootstrap: str, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, 10, partitions=2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="latest") as consumer:
        consumer.assign([tp0, tp1])
        assert consumer.position(tp0) == 5
        consumer.seek_to_beginning(tp0)
        assert consumer.position(tp0) == 0
        assert next(consumer).offset == 0
        consumer.seek_to_end()
        assert consumer.position(tp0) == 5 and consumer.position(tp1) == 5
        consumer.seek(tp1, 2)
        assert [r.offset for r in take(consumer, 3)] == [2, 3, 4]
        assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert consumer.end_offsets([tp0, tp1]) == {tp0: 5, tp1: 5}
        found = consumer.offsets_for_times({tp0: 0})[tp0]
        assert found is not None and found.offset == 0
        assert consumer.highwater(tp1) == 5
        assert consumer.partitions_for_topic(topic) == {0, 1}
        assert consumer.partitions_for_topic(f"absent-{uuid.uuid4().hex[:6]}") is None
        assert topic in consumer.topics()
        with pytest.raises(errors.IllegalStateError):
            consumer.seek(TopicPartition(topic, 7), 0)
        metrics = consumer.metrics()
        assert isinstance(metrics, dict) and metrics


def test_pause_and_resume(bootstrap: str, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, 10, partitions=2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp0, tp1])
        consumer.pause(tp0)
        assert consumer.paused() == {tp0}
        assert {r.partition for r in take(consumer, 5)} == {1}
        consumer.resume(tp0)
        assert consumer.paused() == set()
        assert [r.offset for r in take(consumer, 5)] == [0, 1, 2, 3, 4]


def test_pause_returns_buffered_records_after_resume(bootstrap: str, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, 10)
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        assert next(consumer).offset == 0
        consumer.pause(tp)  # the rest of the fetched batch is dropped, not skipped
        assert consumer.poll(timeout_ms=200) == {}
        consumer.resume(tp)
        assert [r.offset for r in take(consumer, 9)] == list(range(1, 10))


def test_group_subscription_with_rebalance_listener(bootstrap: str, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, 4, partitions=2)
    events: list[tuple[str, set[TopicPartition]]] = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Collection[TopicPartition]) -> None:
            events.append(("revoked", set(revoked)))

        def on_partitions_assigned(self, assigned: Collection[TopicPartition]) -> None:
            events.append(("assigned", set(assigned)))

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group(), auto_offset_reset="earliest")
    try:
        consumer.subscribe(topics=[topic], listener=Listener())
        assert consumer.subscription() == {topic}
        assert len(take(consumer, 4)) == 4
        everything = {TopicPartition(topic, 0), TopicPartition(topic, 1)}
        assert ("assigned", everything) in events
        assert consumer.assignment() == everything
        assert consumer.to_be_revoked_partitions() == frozenset()  # KIP-983 extras reachable
        assert consumer.lost_partitions() == frozenset()
        consumer.unsubscribe()
        assert events[-1] == ("revoked", everything)
        assert consumer.subscription() is None
    finally:
        consumer.close()


def test_pattern_subscription_without_group(bootstrap: str, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, 3)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.subscribe(pattern="^" + re.escape(topic) + "$")
        assert [r.value for r in take(consumer, 3)] == [b"v0", b"v1", b"v2"]
        assert consumer.subscription() == {topic}


def test_pattern_subscription_with_group(bootstrap: str, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, 4, partitions=2)
    with KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group(), auto_offset_reset="earliest"
    ) as consumer:
        consumer.subscribe(pattern=re.escape(topic) + "$")
        assert sorted(r.value for r in take(consumer, 4)) == [b"v0", b"v1", b"v2", b"v3"]
        assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
        with pytest.raises(errors.IllegalStateError):
            consumer.assign([TopicPartition(topic, 0)])


def test_subscribe_after_assign_is_refused(bootstrap: str, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    with KafkaConsumer(bootstrap_servers=bootstrap, group_id=group()) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        with pytest.raises(errors.IllegalStateError):
            consumer.subscribe([topic])
        consumer.assign([])  # as kafka-python: an empty assignment unsubscribes
        assert consumer.assignment() == set() and consumer.subscription() is None
        consumer.subscribe([topic])
        assert consumer.subscription() == {topic}


def test_poll_without_subscription_or_assignment_is_refused(bootstrap: str) -> None:
    with KafkaConsumer(bootstrap_servers=bootstrap) as consumer, pytest.raises(errors.IllegalStateError):
        consumer.poll()


def test_subscribe_rejects_topics_and_pattern_together(bootstrap: str) -> None:
    with KafkaConsumer(bootstrap_servers=bootstrap) as consumer, pytest.raises(errors.IllegalStateError):
        consumer.subscribe(["a"], pattern="b.*")


def test_closed_consumer_refuses_calls(bootstrap: str) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    consumer.close()
    with pytest.raises(errors.IllegalStateError):
        consumer.poll()


# =========================================================================================== admin
def test_admin_topics_partitions_configs_and_cluster(bootstrap: str) -> None:
    name = f"kp-admin-{uuid.uuid4().hex[:8]}"
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(name, 1, 1, topic_configs={"retention.ms": "123456"})])
        try:
            with pytest.raises(errors.TopicAlreadyExistsError):
                admin.create_topics([NewTopic(name, 1, 1)])
            assert name in admin.list_topics()
            (described,) = admin.describe_topics([name])
            assert described["topic"] == name and len(described["partitions"]) == 1
            admin.create_partitions({name: NewPartitions(3)})
            (described,) = admin.describe_topics([name])
            assert sorted(p["partition"] for p in described["partitions"]) == [0, 1, 2]
            (configs,) = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
            assert configs.configs["retention.ms"].value == "123456"
            with pytest.raises(NotImplementedError, match="BROKER"):
                admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")])
            cluster = admin.describe_cluster()
            assert cluster["brokers"] and cluster["cluster_id"]
        finally:
            admin.delete_topics([name])
        assert name not in admin.list_topics()


def test_admin_consumer_groups(bootstrap: str, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, 3)
    gid = group()
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=gid,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    ) as consumer:
        take(consumer, 3)
        consumer.commit()
        with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
            assert (gid, "consumer") in admin.list_consumer_groups()
            (info,) = admin.describe_consumer_groups([gid])
            assert info.group == gid and info.state == "Stable" and len(info.members) == 1
            assert info.members[0].member_assignment.partitions() == [tp]
            offsets = admin.list_consumer_group_offsets(gid)
            assert offsets[tp].offset == 3
            # kafka-python 3's names and shapes
            listed = {g["group_id"]: g for g in admin.list_groups()}
            assert listed[gid]["group_state"] == "Stable"
            described = admin.describe_groups([gid])[gid]
            (member,) = described["members"]
            assert member["member_assignment"]["assigned_partitions"] == [{"topic": topic, "partitions": [0]}]
            assert admin.list_group_offsets([gid])[gid][tp].offset == 3
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        assert admin.delete_consumer_groups([gid]) == [(gid, errors.NoError)]
        assert admin.delete_groups([gid]) == {gid: "GroupIdNotFoundError"}
        assert gid not in {g for g, _ in admin.list_consumer_groups()}
