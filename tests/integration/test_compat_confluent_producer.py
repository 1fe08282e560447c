"""The confluent-kafka compat ``Producer`` on the real broker: delivery reports ``(err, msg)`` served inside
``poll()``/``flush()`` on the caller's thread, ``BufferError`` until reports are served, ``flush()`` returning
the count, keyed messages placed as librdkafka places them, broker errors in the report, ``stats_cb``, and
transactions (commit visible, abort invisible, offsets committed with the transaction).  Records are read
back with librdkafka (confluent-kafka) as the oracle."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import pytest
from oracle_helpers import read_confluent

from kafka_handoff.admin import AdminClient as NativeAdmin
from kafka_handoff.compat.confluent_kafka import KafkaError, KafkaException, Message, Producer
from kafka_handoff.types import ConsumerGroupMetadata
from kafka_handoff.types import TopicPartition as NativeTP

pytestmark = pytest.mark.integration


class Reports:
    """Delivery reports, with the thread each ran on and whether a poll()/flush() was running."""

    def __init__(self) -> None:
        self.got: list[tuple[KafkaError | None, Message]] = []
        self.threads: set[int] = set()
        self.inside = False
        self.outside_calls = 0

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        self.threads.add(threading.get_ident())
        if not self.inside:
            self.outside_calls += 1
        self.got.append((err, msg))


def _serve(producer: Producer, reports: Reports, expected: int) -> int:
    served = 0
    for _ in range(300):  # each poll waits up to 1 s for a report: ends long before with a broker
        if len(reports.got) >= expected:
            break
        reports.inside = True
        served += producer.poll(1.0)
        reports.inside = False
    return served


def test_delivery_reports_are_served_inside_poll_on_the_callers_thread(
    broker: Any, topic_factory: Any
) -> None:
    topic = topic_factory(partitions=3)
    reports = Reports()
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "on_delivery": reports})
    try:
        for i in range(20):
            producer.produce(topic, b"v%d" % i, key=b"k%d" % i, headers=[("h", b"%d" % i)])
        served = _serve(producer, reports, 20)
        assert served == len(reports.got) == 20  # poll() returns how many callbacks it served
        assert reports.outside_calls == 0
        assert reports.threads == {threading.get_ident()}
        assert len(producer) == 0
        by_value = {msg.value(): (err, msg) for err, msg in reports.got}
        for i in range(20):
            err, msg = by_value[b"v%d" % i]
            assert err is None and msg.error() is None
            assert (msg.topic(), msg.key(), msg.headers()) == (topic, b"k%d" % i, [("h", b"%d" % i)])
            assert msg.partition() in (0, 1, 2)
            offset = msg.offset()
            assert offset is not None and offset >= 0
        offsets = sorted((m.partition(), m.offset()) for _, m in reports.got)
        assert len(set(offsets)) == 20
    finally:
        producer.close()


def test_flush_serves_every_report_and_returns_zero(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    reports = Reports()
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    try:
        for i in range(25):
            producer.produce(topic, value=b"%d" % i, callback=reports)  # confluent's alias of on_delivery
        for i in range(25, 50):
            producer.produce(topic, b"%d" % i, None, -1, reports)  # confluent's positional order
        reports.inside = True
        assert producer.flush(60) == 0
        reports.inside = False
        assert len(reports.got) == 50 and reports.outside_calls == 0
        assert all(err is None for err, _ in reports.got)
        assert len(producer) == 0
    finally:
        producer.close()
    assert len(read_confluent(broker.bootstrap_servers, topic, "read_uncommitted", expected=50)) == 50


def test_unserved_reports_keep_the_queue_full_until_poll(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    reports = Reports()
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "queue.buffering.max.messages": 10, "dr_cb": reports}
    )
    try:
        for i in range(10):
            producer.produce(topic, b"%d" % i)
        with pytest.raises(BufferError):
            producer.produce(topic, b"11th")
        _serve(producer, reports, 10)
        assert len(producer) == 0
        producer.produce(topic, b"room again")
        assert producer.flush(60) == 0
        assert len(reports.got) == 11
    finally:
        producer.close()


def test_keyed_messages_land_where_librdkafka_puts_them(broker: Any, topic_factory: Any) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = topic_factory(partitions=7)
    keys = [b"customer-%d" % i for i in range(100)] + [uuid.uuid4().bytes for _ in range(50)]

    def placements(producer: Any) -> dict[bytes, int]:
        out: dict[bytes, int] = {}

        def on_delivery(err: Any, msg: Any) -> None:
            assert err is None
            out[msg.key()] = msg.partition()

        for key in keys:
            producer.produce(topic, b"x", key=key, on_delivery=on_delivery)
        assert producer.flush(60) == 0
        return out

    theirs = placements(confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers}))
    ours_producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    try:
        assert placements(ours_producer) == theirs
    finally:
        ours_producer.close()


def test_a_broker_rejection_reaches_the_delivery_report(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1, configs={"max.message.bytes": "200"})
    reports = Reports()
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "on_delivery": reports})
    try:
        producer.produce(topic, b"x" * 2000)
        assert producer.flush(60) == 0
        producer.produce(topic, b"small")  # a batch of its own: the broker rejects whole batches
        assert producer.flush(60) == 0
        by_value = {msg.value(): (err, msg) for err, msg in reports.got}
        err, msg = by_value[b"x" * 2000]
        assert err is not None and msg.error() == err
        assert err.code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert by_value[b"small"][0] is None
    finally:
        producer.close()


def test_stats_cb_gets_librdkafkas_json_from_poll(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    stats: list[dict[str, Any]] = []
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "statistics.interval.ms": 50,
            "stats_cb": lambda text: stats.append(json.loads(text)),
        }
    )
    try:
        producer.produce(topic, b"counted")
        assert producer.flush(60) == 0
        for _ in range(100):
            if stats and stats[-1]["txmsgs"] >= 1:
                break
            producer.poll(0.1)
        last = stats[-1]
        assert last["type"] == "producer" and last["txmsgs"] == 1 and last["msg_cnt"] == 0
        assert {"name", "client_id", "ts", "time", "replyq", "msg_size", "topics", "brokers"} <= set(last)
        assert last["topics"][topic]["partitions"]["0"]["txmsgs"] == 1
    finally:
        producer.close()


def test_transactions_commit_abort_and_offsets(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    source = topic_factory(partitions=1)
    group = f"txn-{uuid.uuid4().hex[:8]}"
    reports = Reports()
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "transactional.id": f"compat-{uuid.uuid4().hex[:8]}",
            "on_delivery": reports,
        }
    )
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, b"committed-%d" % i)
        producer.send_offsets_to_transaction([_tp(source, 0, 42)], ConsumerGroupMetadata(group), 30)
        reports.inside = True  # commit_transaction serves the reports (it flushes)
        producer.commit_transaction(30)
        reports.inside = False
        assert len(reports.got) == 10 and all(err is None for err, _ in reports.got)
        assert reports.outside_calls == 0

        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, b"aborted-%d" % i)
        producer.abort_transaction(30)
        producer.poll(0)
    finally:
        producer.close()
    values = read_confluent(broker.bootstrap_servers, topic, "read_committed", expected=10)
    assert sorted(values) == sorted(b"committed-%d" % i for i in range(10))
    with NativeAdmin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        offsets = admin.list_group_offsets(group)
    committed = offsets[NativeTP(source, 0)]
    assert committed is not None and committed.offset == 42


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(broker: Any) -> None:
    conf = {
        "bootstrap.servers": broker.bootstrap_servers,
        "transactional.id": f"fence-{uuid.uuid4().hex[:8]}",
    }
    first = Producer(conf)
    second = Producer(conf)
    try:
        first.init_transactions(30)
        second.init_transactions(30)
        first.begin_transaction()
        with pytest.raises(KafkaException) as info:
            first.produce("fenced-topic", b"x")
            first.commit_transaction(30)
        error = info.value.args[0]
        if error.txn_requires_abort():  # the fenced produce is abortable; the abort finds the fence
            with pytest.raises(KafkaException) as info:
                first.abort_transaction(30)
            error = info.value.args[0]
        assert error.fatal() and not error.txn_requires_abort()
        assert error.code() == KafkaError._FENCED
    finally:
        first.close(5)
        second.close(5)


def _tp(topic: str, partition: int, offset: int) -> Any:
    from kafka_handoff.compat.confluent_kafka import TopicPartition

    return TopicPartition(topic, partition, offset)


def test_produce_batch_queues_each_message_and_marks_failures(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    reports = Reports()
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    try:
        producer.produce(topic, b"first")  # the topic's metadata is known from here on
        assert producer.flush(60) == 0
        messages: list[dict[str, Any]] = [
            {"value": b"a", "key": b"k"},
            {"value": b"b", "partition": 1},
            {"value": b"c", "partition": 9},  # no such partition
        ]
        assert producer.produce_batch(topic, messages, on_delivery=reports) == 2
        assert messages[2]["_error"].code() == KafkaError._UNKNOWN_PARTITION
        assert "_error" not in messages[0] and "_error" not in messages[1]
        assert producer.flush(60) == 0
        assert sorted(m.value() for _, m in reports.got) == [b"a", b"b"]
        assert {m.value(): m.partition() for _, m in reports.got}[b"b"] == 1
    finally:
        producer.close()


def test_purge_fails_queued_messages_and_nothing_reaches_the_topic(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    reports = Reports()
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 600_000, "on_delivery": reports}
    )
    try:
        for i in range(20):
            producer.produce(topic, b"purged-%d" % i)
        producer.purge(in_queue=True, in_flight=False)
        assert producer.flush(30) == 0
        assert len(reports.got) == 20
        assert {err.code() for err, _ in reports.got if err is not None} == {KafkaError._PURGE_QUEUE}
        assert all(err is not None for err, _ in reports.got)
        producer.produce(topic, b"kept")
        assert producer.flush(30) == 0
    finally:
        producer.close()
    assert read_confluent(broker.bootstrap_servers, topic, "read_uncommitted", expected=1) == [b"kept"]


def test_produce_to_a_topic_without_metadata_yet_queues_in_order(broker: Any) -> None:
    topic = f"compat-new-{uuid.uuid4().hex[:8]}"  # auto-created by the first metadata request
    reports = Reports()
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "on_delivery": reports})
    try:
        for i in range(30):
            producer.produce(topic, b"%d" % i, partition=0)
        assert len(producer) == 30  # queued at once, behind the topic's metadata
        reports.inside = True
        assert producer.flush(60) == 0
        reports.inside = False
        assert all(err is None for err, _ in reports.got) and reports.outside_calls == 0
        in_offset_order = [m.value() for _, m in sorted(reports.got, key=lambda r: r[1].offset() or 0)]
        assert in_offset_order == [b"%d" % i for i in range(30)]
    finally:
        producer.close()
