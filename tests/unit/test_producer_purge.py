"""``Producer.purge()``: the queued records that were never sent fail with ``RecordPurgedError`` through their
futures (and callbacks); a batch that was sent once (it has a sequence number, waiting for a retry) stays, so
idempotence keeps no gap.  No broker: the topic's metadata is set by hand and nothing is ever sent."""

from __future__ import annotations

import socket
import threading
from concurrent.futures import wait

import pytest

from kafka_handoff.errors import RecordPurgedError
from kafka_handoff.producer import Producer
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit


def _offline() -> Producer:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "linger.ms": 600_000,
            "batch.size": 200,
            "reconnect.backoff.ms": 10_000,
            "reconnect.backoff.max.ms": 10_000,
        }
    )
    producer._accumulator.update_topic("t", 2, [0, 1])
    producer._partition_counts = {"t": 2}
    return producer


def test_purge_fails_every_unsent_record_and_keeps_a_sent_batch() -> None:
    producer = _offline()
    try:
        kept = producer.send("t", b"sent-once", partition=1)
        acc = producer._accumulator
        (retrying,) = acc.queued_batches(TopicPartition("t", 1))
        retrying.set_producer_state(1000, 0, 0)  # as if drained once: it has a sequence now
        retrying.closed = True
        errors: list[BaseException | None] = []
        called = threading.Event()

        def callback(metadata: object, exc: BaseException | None) -> None:
            errors.append(exc)
            called.set()

        futures = [producer.send("t", b"x" * 50, partition=i % 2) for i in range(8)]
        producer.send_nowait("t", b"cb", partition=0, callback=callback)
        assert producer.purge(10) == 9
        _, pending = wait(futures, timeout=10)
        assert not pending
        assert all(isinstance(f.exception(), RecordPurgedError) for f in futures)
        assert called.wait(10)  # the callback runs on the completion thread
        assert len(errors) == 1 and isinstance(errors[0], RecordPurgedError)
        assert not kept.done()  # the sent batch is left to its outcome
        assert acc.queued_batches(TopicPartition("t", 1)) == [retrying]
        assert acc.queued_batches(TopicPartition("t", 0)) == []
        producer.send("t", b"after", partition=0)  # the producer goes on
        assert len(acc.queued_batches(TopicPartition("t", 0))) == 1
    finally:
        producer.close(0)
