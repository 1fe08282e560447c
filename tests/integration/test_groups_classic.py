"""Classic-protocol group scenarios against the real broker: client-side regex subscription and a group
shared with confluent-kafka (librdkafka) consumers using cooperative-sticky (issue 5 acceptance)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from group_harness import (
    BackgroundProducer,
    GroupLog,
    Member,
    base_config,
    create_topic,
    delete_topics,
    now,
    run_mixed_group,
    wait_for,
    wait_settled,
)

from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.integration

pytest.importorskip("confluent_kafka")


@pytest.mark.parametrize("protocol", ["classic-cooperative", "classic-eager"])
def test_regex_subscription_picks_up_a_topic_created_later(broker: Any, protocol: str) -> None:
    """A pattern subscription (matched on the client from metadata) gets the partitions of a matching topic
    created after the member joined, and consumes its records; a non-matching topic stays out."""
    bootstrap = broker.bootstrap_servers
    prefix = f"rx-{uuid.uuid4().hex[:8]}"
    first, later, other = f"{prefix}-a", f"{prefix}-b", f"x{prefix}-c"
    log = GroupLog()
    create_topic(bootstrap, first, 2)
    producer = BackgroundProducer(bootstrap, {first: 2}, rate=100)
    producer.start()
    conf = base_config(bootstrap, f"g-{prefix}", protocol, metadata_max_age_ms=1000)
    member = Member("m", log, conf, re.compile(re.escape(prefix) + r"-.*"))
    try:
        member.start()
        wait_settled(log, ["m"], [TopicPartition(first, p) for p in range(2)])
        create_topic(bootstrap, later, 3)
        create_topic(bootstrap, other, 1)
        producer.add_topic(later, 3)
        producer.add_topic(other, 1)
        t_created = now()
        expected = {TopicPartition(first, p) for p in range(2)} | {TopicPartition(later, p) for p in range(3)}
        wait_for(lambda: member.owned == expected, 30, lambda: f"the new topic assigned\n{log.describe()}")
        picked = next(e for e in log.callbacks("m") if e.kind == "assigned" and e.t >= t_created)
        delivered = producer.finish()
        wanted = {(tp, off) for tp, off in delivered if tp.topic != other}
        wait_for(lambda: wanted <= set(log.consumed()), 30, "records of both matching topics consumed")
        member.finish()
    finally:
        member.stop()
        producer.stop()
        delete_topics(bootstrap, [first, later, other])
    assert not [tp for tp, _ in log.consumed() if tp.topic == other]
    print(f"\n[{protocol}] regex picked up the new topic {picked.t - t_created:.3f} s after it was created")


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_mixed_group_with_confluent_consumers(broker: Any, topic_factory: Any, strategy: str) -> None:
    """Our consumers and librdkafka consumers in one classic group (same assignor; either may lead): they
    share the partitions with no overlap, every partition is covered, every record is consumed."""
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(partitions=6)
    partitions = [TopicPartition(topic, p) for p in range(6)]
    group = f"g-mixed-{uuid.uuid4().hex[:8]}"
    log = GroupLog()
    producer = BackgroundProducer(bootstrap, {topic: 6}, rate=300)
    producer.start()
    protocol = "classic-cooperative" if strategy == "cooperative-sticky" else "classic-eager"
    confluent_conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "partition.assignment.strategy": strategy,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
    }
    duplicates = run_mixed_group(
        bootstrap, topic, partitions, log, producer, base_config(bootstrap, group, protocol), confluent_conf
    )
    print(f"\n[classic {strategy}] mixed group: {duplicates} duplicates")
