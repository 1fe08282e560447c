"""Transactions against the real broker, with librdkafka (confluent-kafka) as the oracle for what a
``read_committed`` reader must see."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from oracle_helpers import read_confluent

from kafka_handoff import Consumer, Producer
from kafka_handoff.errors import IllegalStateError, InvalidProducerEpochError, ProducerFencedError
from kafka_handoff.types import OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.integration


def _txn_producer(bootstrap: str, txn_id: str, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 2, **extra})


def read_ours(bootstrap: str, topic: str, expected: int, timeout: float = 30) -> list[bytes]:
    values: list[bytes] = []
    with Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"ours-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    ) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        quiet_since = None
        while time.monotonic() < deadline:
            records = consumer.poll(0.2)
            values.extend(r.value for r in records)
            if len(values) >= expected:
                # keep reading briefly: anything beyond what was expected (an aborted record) must show up
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 1.0:
                    break
    return values


@pytest.mark.parametrize("protocol", ["v2", "v1"])
def test_read_committed_sees_committed_transactions_only(
    broker: Any, topic_factory: Any, protocol: str
) -> None:
    """Kafka 4.x finalizes transactions v2 (KIP-890); v1 is forced by hiding the feature from the producer."""
    topic = topic_factory(partitions=3)
    bootstrap = broker.bootstrap_servers
    committed: list[bytes] = []
    aborted: list[bytes] = []
    with _txn_producer(bootstrap, f"txn-{uuid.uuid4().hex[:8]}") as producer:
        txn = producer._txn
        assert txn is not None
        if protocol == "v1":
            txn._transaction_version = lambda: None
        producer.init_transactions()
        for round_ in range(4):
            producer.begin_transaction()
            assert txn.v2 is (protocol == "v2")
            values = [b"r%d-%03d" % (round_, i) for i in range(40)]
            for i, v in enumerate(values):
                producer.send(topic, v, key=b"k%d" % i)
            if round_ % 2 == 1:
                producer.flush()  # the aborted records really reach the log before the abort
                producer.abort_transaction()
                aborted += values
            else:
                producer.commit_transaction()
                committed += values
        # misuse is refused: no send outside a transaction, no commit without one
        with pytest.raises(IllegalStateError):
            producer.send(topic, b"outside")
        with pytest.raises(IllegalStateError):
            producer.send_nowait(topic, b"outside")
        with pytest.raises(IllegalStateError):
            producer.send_many(topic, [b"outside"])
        with pytest.raises(IllegalStateError):
            producer.commit_transaction()

    uncommitted = read_confluent(bootstrap, topic, "read_uncommitted", len(committed) + len(aborted))
    assert set(aborted) <= set(uncommitted), "the aborted records must have been written to the log"
    oracle = read_confluent(bootstrap, topic, "read_committed", len(committed))
    assert sorted(oracle) == sorted(committed)
    ours = read_ours(bootstrap, topic, len(committed))
    assert sorted(ours) == sorted(committed)


def test_offsets_commit_with_the_transaction_and_not_with_an_abort(broker: Any, topic_factory: Any) -> None:
    source = topic_factory(partitions=2)
    sink = topic_factory(partitions=2)
    bootstrap = broker.bootstrap_servers
    group = f"eos-{uuid.uuid4().hex[:8]}"
    with Producer({"bootstrap.servers": bootstrap}) as plain:
        for i in range(20):
            plain.send(source, b"in-%02d" % i, partition=i % 2)
        plain.flush()
    with (
        Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        ) as consumer,
        _txn_producer(bootstrap, f"txn-{uuid.uuid4().hex[:8]}") as producer,
    ):
        consumer.subscribe([source])
        producer.init_transactions()
        records: list[Any] = []
        deadline = time.monotonic() + 30
        while len(records) < 20 and time.monotonic() < deadline:
            records.extend(consumer.poll(0.2))
        assert len(records) == 20
        tps = [TopicPartition(source, 0), TopicPartition(source, 1)]

        # Aborted: the output is invisible and the offsets are not committed.
        producer.begin_transaction()
        for r in records:
            producer.send(sink, r.value.replace(b"in", b"out"))
        producer.send_offsets_to_transaction({tp: 10 for tp in tps}, consumer.group_metadata())
        producer.abort_transaction()
        assert all(v is None for v in consumer.committed(tps, timeout=10).values())

        # Committed: both the output and the offsets.
        producer.begin_transaction()
        for r in records:
            producer.send(sink, r.value.replace(b"in", b"out"))
        producer.send_offsets_to_transaction(
            {tp: OffsetAndMetadata(10, "eos") for tp in tps}, consumer.group_metadata()
        )
        producer.commit_transaction()
        committed = consumer.committed(tps, timeout=10)
        assert {tp: (om.offset, om.metadata) for tp, om in committed.items() if om} == {
            tp: (10, "eos") for tp in tps
        }
    out = read_confluent(bootstrap, sink, "read_committed", 20)
    assert sorted(out) == sorted(b"out-%02d" % i for i in range(20))


def test_a_newer_producer_with_the_same_transactional_id_fences_the_older(
    broker: Any, topic_factory: Any
) -> None:
    topic = topic_factory(partitions=1)
    bootstrap = broker.bootstrap_servers
    txn_id = f"txn-{uuid.uuid4().hex[:8]}"
    old = _txn_producer(bootstrap, txn_id)
    new = _txn_producer(bootstrap, txn_id)
    try:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, b"zombie").result(10)  # written, in an open transaction
        new.init_transactions()  # fences `old` and aborts its open transaction
        new.begin_transaction()
        new.send(topic, b"successor")
        new.commit_transaction()
        with pytest.raises((ProducerFencedError, InvalidProducerEpochError)):
            old.commit_transaction()
        with pytest.raises((ProducerFencedError, InvalidProducerEpochError)):
            old.begin_transaction()  # fatal: only close() is left
    finally:
        old.close(5)
        new.close(5)
    assert read_confluent(bootstrap, topic, "read_committed", 1) == [b"successor"]
