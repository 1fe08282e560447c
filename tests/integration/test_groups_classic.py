"""Classic-protocol group scenarios against the real broker: client-side regex subscription and a group
shared with confluent-kafka (librdkafka) consumers using cooperative-sticky (issue 5 acceptance)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from group_harness import (
    BackgroundProducer,
    GroupLog,
    base_config,
    run_mixed_group,
    run_regex_scenario,
)

from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("protocol", ["classic-cooperative", "classic-eager"])
def test_regex_subscription_picks_up_a_topic_created_later(broker: Any, protocol: str) -> None:
    """A pattern subscription (matched on the client from metadata) gets the partitions of a matching topic
    created after the member joined, and consumes its records; a non-matching topic stays out."""
    seconds = run_regex_scenario(
        broker.bootstrap_servers, protocol, assign_timeout=30, metadata_max_age_ms=1000
    )
    print(f"\n[{protocol}] regex picked up the new topic {seconds:.3f} s after it was created")


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_mixed_group_with_confluent_consumers(broker: Any, topic_factory: Any, strategy: str) -> None:
    """Our consumers and librdkafka consumers in one classic group (same assignor; either may lead): they
    share the partitions with no overlap, every partition is covered, every record is consumed."""
    pytest.importorskip("confluent_kafka")  # the librdkafka members
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
