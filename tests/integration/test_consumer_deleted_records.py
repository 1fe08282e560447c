"""A consumer whose fetch position was deleted (retention, DeleteRecords) before it read the records there:
it says so and goes on from where ``auto.offset.reset`` puts it -- never a silent skip, never a stall."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from kafka_handoff.admin import AdminClient, RecordsToDelete
from kafka_handoff.consumer import Consumer
from kafka_handoff.producer import Producer
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.integration


def test_a_deleted_position_is_reset_with_an_info_line(
    broker: Any, topic_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    topic = topic_factory(partitions=1)
    tp = TopicPartition(topic, 0)
    with Producer({"bootstrap.servers": broker.bootstrap_servers}) as producer:
        for i in range(10):
            producer.send(topic, b"%d" % i, partition=0)
        producer.flush(60)
    with AdminClient({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        deleted = admin.delete_records({tp: RecordsToDelete.before_offset(6)}, timeout=30)
    assert deleted[tp].low_watermark == 6
    got: list[Any] = []
    config = {"bootstrap.servers": broker.bootstrap_servers, "auto.offset.reset": "earliest"}
    with caplog.at_level(logging.INFO, logger="kafka_handoff.consumer.fetcher"), Consumer(config) as c:
        c.assign([tp])
        c.seek(tp, 2)  # records 2..5 are gone
        deadline = time.monotonic() + 60
        while len(got) < 4:
            assert time.monotonic() < deadline, f"read {len(got)} of 4 records"
            got.extend(c.poll(0.5))
    assert [(r.offset, r.value) for r in got] == [(i, b"%d" % i) for i in range(6, 10)]
    lines = [r for r in caplog.records if "out of range" in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.INFO]
    assert f"fetch position 2 of partition {tp} is out of range" in lines[0].getMessage()
    assert "auto.offset.reset=earliest" in lines[0].getMessage()
