"""Records for the admin tests (test_admin_operations.py, test_cli_admin.py), written with the project's own
producer."""

from __future__ import annotations

from kafka_handoff.producer import Producer


def produce_timestamped(
    bootstrap: str, topic: str, per_partition: int, partitions: int, base_ts: int
) -> None:
    """``per_partition`` records in each of ``partitions`` partitions of ``topic``, record i (value ``v<i>``)
    at ``base_ts + i * 1000``."""
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
        futures = [
            producer.send(topic, b"v%d" % i, partition=p, timestamp=base_ts + i * 1000)
            for p in range(partitions)
            for i in range(per_partition)
        ]
        producer.flush(60)
        for f in futures:
            f.result(0)
