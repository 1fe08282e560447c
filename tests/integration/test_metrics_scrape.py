"""A consuming client's metrics scraped over HTTP as Prometheus would (issue: metrics out)."""

from __future__ import annotations

import re
import time
import urllib.request
from typing import Any

import pytest

from kafka_handoff import Consumer, Producer
from kafka_handoff.metrics.prometheus import KafkaCollector, start_http_server

pytestmark = pytest.mark.integration


def scrape(port: int) -> dict[str, float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in body.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def consumed_total(samples: dict[str, float]) -> float:
    """The client-wide series (an empty ``topic`` label is no label, in Prometheus' terms)."""
    return samples['kafka_consumer_fetch_manager_records_consumed_total{client_id="scraped",topic=""}']


def test_scraped_consumer_metrics_move(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5}) as producer:
        for i in range(2000):
            producer.send(topic, value=b"%d" % i, partition=i % 2)
        producer.flush(60)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "max.poll.records": 200,
            "client.id": "scraped",
        }
    )
    collector = KafkaCollector()
    collector.add(consumer)
    server = start_http_server(0, collector)
    port = server.server_address[1]
    try:
        consumer.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 60
        while got < 400 and time.monotonic() < deadline:
            got += len(consumer.poll(0.5))
        first = scrape(port)
        assert 0 < consumed_total(first) <= 2000, first
        lag = [k for k in first if k.startswith("kafka_consumer_fetch_manager_records_lag_max{")]
        assert len([k for k in lag if "partition=" in k]) == 2, lag
        assert first['kafka_consumer_coordinator_assigned_partitions{client_id="scraped"}'] == 2.0
        while got < 2000 and time.monotonic() < deadline:
            got += len(consumer.poll(0.5))
        second = scrape(port)
        assert got == 2000
        assert consumed_total(second) == 2000.0 > consumed_total(first)
    finally:
        server.shutdown()
        server.server_close()
        consumer.close()
