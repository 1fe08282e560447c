"""librdkafka (confluent-kafka) as the oracle reader of transactional topics, shared by the transaction and
pipeline tests."""

from __future__ import annotations

import time
import uuid

import pytest


def read_confluent(
    bootstrap: str, topic: str, isolation: str = "read_committed", expected: int = 0, timeout: float = 30
) -> list[bytes]:
    """Every value in ``topic`` as librdkafka's consumer sees it: reads until every partition reached its end
    (the last stable offset for ``read_committed``) and at least ``expected`` values arrived.  Skips the test
    when confluent-kafka is not installed (an error under CI=true, see tests/conftest.py)."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"oracle-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    eof: set[int] = set()
    parts = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and (len(values) < expected or len(eof) < parts):
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    eof.add(msg.partition())
                    continue
                raise AssertionError(msg.error())
            eof.discard(msg.partition())
            values.append(msg.value())
    finally:
        consumer.close()
    return values
