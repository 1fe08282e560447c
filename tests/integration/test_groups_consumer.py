"""KIP-848 consumer-protocol group scenarios against the real broker: server-side regex subscription, a
group shared with confluent-kafka consumers on the consumer protocol, server-side assignors (issue 6)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from group_harness import (
    BackgroundProducer,
    GroupLog,
    Member,
    base_config,
    now,
    run_mixed_group,
    run_regex_scenario,
    wait_settled,
)

from kafka_handoff.consumer import Consumer
from kafka_handoff.errors import UnsupportedAssignorError
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.integration


@pytest.mark.slow  # the broker batches regex refreshes (about every 10 s)
def test_regex_subscription_is_resolved_by_the_broker_and_picks_up_a_new_topic(broker: Any) -> None:
    """subscribe(pattern) sends the regex to the broker (ConsumerGroupHeartbeat v1); a matching topic
    created later is assigned by the broker and consumed; a non-matching one is not."""
    # The broker re-resolves regexes periodically (it batches refreshes), hence the generous deadline.
    seconds = run_regex_scenario(broker.bootstrap_servers, "consumer", assign_timeout=60)
    print(f"\n[consumer] regex picked up the new topic {seconds:.3f} s after it was created")


def test_mixed_group_with_confluent_consumers_on_the_consumer_protocol(
    broker: Any, topic_factory: Any
) -> None:
    """Our consumers and librdkafka consumers (group.protocol=consumer) in one KIP-848 group: no partition
    owned twice, all covered, every record consumed, while members come and go."""
    pytest.importorskip("confluent_kafka")  # the librdkafka members
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(partitions=6)
    partitions = [TopicPartition(topic, p) for p in range(6)]
    group = f"g-mixed848-{uuid.uuid4().hex[:8]}"
    log = GroupLog()
    producer = BackgroundProducer(bootstrap, {topic: 6}, rate=300)
    producer.start()
    confluent_conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    duplicates = run_mixed_group(
        bootstrap, topic, partitions, log, producer, base_config(bootstrap, group, "consumer"), confluent_conf
    )
    print(f"\n[consumer] mixed group: {duplicates} duplicates")


def test_remote_assignor_range_and_an_unknown_assignor(broker: Any, topic_factory: Any) -> None:
    """group.remote.assignor=range: the broker co-partitions (each member gets the same partition numbers
    of both topics).  An assignor the broker does not know fails poll() with an error naming it."""
    bootstrap = broker.bootstrap_servers
    t1, t2 = topic_factory(partitions=2), topic_factory(partitions=2)
    partitions = [TopicPartition(t, p) for t in (t1, t2) for p in range(2)]
    group = f"g-range-{uuid.uuid4().hex[:8]}"
    log = GroupLog()
    conf = base_config(bootstrap, group, "consumer", group_remote_assignor="range")
    members = [Member(f"m{i}", log, conf, [t1, t2], commit_interval_s=None) for i in (1, 2)]
    try:
        for m in members:
            m.start()
        wait_settled(log, ["m1", "m2"], partitions)
        for m in members:
            numbers = {tp.partition for tp in m.owned}
            assert len(numbers) == 1 and {tp.topic for tp in m.owned} == {t1, t2}, m.owned
            m.finish()
    finally:
        for m in members:
            m.stop()

    bad = Consumer(
        base_config(bootstrap, f"{group}-bad", "consumer", group_remote_assignor="no-such-assignor")
    )
    try:
        bad.subscribe([t1])
        deadline = now() + 30
        with pytest.raises(UnsupportedAssignorError, match="no-such-assignor"):
            while now() < deadline:
                bad.poll(0.1)
    finally:
        bad.close(timeout=5)
