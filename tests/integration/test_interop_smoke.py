"""Records go through the project's real broker: produced and consumed with confluent-kafka (librdkafka).

Also checks that the broker carries the settings made for tests, and that the project's own probe client
(kio-based wire code) reads the same metadata librdkafka sees.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from typing import Any

import pytest

from kafka_handoff import devbroker

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")


def produce(bootstrap: str, topic: str, count: int) -> dict[bytes, bytes]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    sent: dict[bytes, bytes] = {}
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for i in range(count):
        key, value = b"key-%05d" % i, b"value-%05d-" % i + uuid.uuid4().bytes
        producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
        sent[key] = value
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    return sent


def consume(bootstrap: str, topic: str, expected: int, extra: dict[str, Any]) -> list[Any]:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": f"g-{uuid.uuid4().hex[:10]}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **extra,
    }
    consumer = confluent_kafka.Consumer(conf)
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + 90
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def check_roundtrip(sent: dict[bytes, bytes], got: list[Any]) -> None:
    assert len(got) == len(sent)
    assert {m.key(): m.value() for m in got} == sent
    offsets: dict[int, list[int]] = defaultdict(list)
    for m in got:
        offsets[m.partition()].append(m.offset())
    for partition, seen in offsets.items():
        assert seen == list(range(len(seen))), f"partition {partition}: offsets out of order or with gaps"


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_produce_and_consume_through_the_real_broker(broker: Any, topic_factory: Any, protocol: str) -> None:
    topic = topic_factory(partitions=4)
    sent = produce(broker.bootstrap_servers, topic, 2000)
    extra: dict[str, Any] = {"group.protocol": protocol}
    if protocol == "classic":
        extra["session.timeout.ms"] = 6000  # below the broker default minimum; allowed by our settings
    got = consume(broker.bootstrap_servers, topic, len(sent), extra)
    check_roundtrip(sent, got)


def test_broker_runs_with_the_settings_made_for_tests(broker: Any) -> None:
    admin = admin_mod.AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    meta = admin.list_topics(timeout=10)
    (broker_id,) = meta.brokers
    resource = admin_mod.ConfigResource(admin_mod.ResourceType.BROKER, str(broker_id))
    configs = admin.describe_configs([resource])[resource].result(timeout=20)
    values = {name: entry.value for name, entry in configs.items()}
    assert values["group.initial.rebalance.delay.ms"] == "0"
    assert values["group.consumer.heartbeat.interval.ms"] == "500"
    assert values["group.consumer.min.heartbeat.interval.ms"] == "100"
    assert values["group.consumer.session.timeout.ms"] == "6000"
    assert values["group.consumer.min.session.timeout.ms"] == "1000"
    assert "consumer" in values["group.coordinator.rebalance.protocols"]
    assert values["offsets.topic.replication.factor"] == "1"


def test_probe_client_metadata_matches_librdkafka(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=3)
    ours = devbroker.fetch_metadata(broker.bootstrap_servers, [topic])
    theirs = admin_mod.AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(
        topic, timeout=10
    )
    assert set(ours.brokers) == set(theirs.brokers)
    assert ours.cluster_id == theirs.cluster_id
    parts = ours.partitions_for(topic)
    assert parts is not None
    assert {p.partition: p.leader for p in parts} == {
        pid: p.leader for pid, p in theirs.topics[topic].partitions.items()
    }
