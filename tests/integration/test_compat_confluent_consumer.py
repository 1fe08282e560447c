"""The confluent-kafka compatibility consumer against the real broker: confluent's semantics (single-message
poll, on_assign/on_revoke with assign() inside, the offset store, _PARTITION_EOF, commit/committed/position,
watermarks, stats_cb, DeserializingConsumer) on top of the native consumer.  Also the native API fix that
came with it: ``poll(None)`` blocks until records arrive (or ``wakeup()``) for Consumer, AsyncConsumer and
ShareConsumer."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kafka_handoff import AdminClient, AsyncConsumer, ShareConsumer, WakeupError
from kafka_handoff import Consumer as NativeConsumer
from kafka_handoff import Producer as NativeProducer
from kafka_handoff import TopicPartition as NativeTP
from kafka_handoff.compat import confluent_kafka as ck
from kafka_handoff.compat.confluent_kafka.serialization import StringDeserializer

pytestmark = pytest.mark.integration

DEADLINE_S = 60.0
BrokerLike = Any
TopicFactory = Callable[..., str]


def seed(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0) -> None:
    with NativeProducer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(start, start + count):
            producer.send(
                topic, b"v%d" % i, key=b"k%d" % i, partition=i % partitions, headers=[("n", b"%d" % i)]
            )
        producer.flush(60)


def conf(broker: BrokerLike, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap_servers,
        "group.id": f"compat-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "smallest",
    }
    base.update(extra)
    return base


def poll_until(
    consumer: ck.Consumer, done: Callable[[list[ck.Message]], bool], errors_ok: bool = True
) -> list[ck.Message]:
    """Poll single messages (and events) until ``done(collected)`` or the deadline."""
    collected: list[ck.Message] = []
    deadline = time.monotonic() + DEADLINE_S
    while not done(collected):
        assert time.monotonic() < deadline, f"gave up after {len(collected)} messages/events"
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error() is not None and not errors_ok:
            raise ck.KafkaException(msg.error())
        collected.append(msg)
    return collected


def records(msgs: list[ck.Message]) -> list[ck.Message]:
    return [m for m in msgs if m.error() is None]


def test_subscribe_poll_single_messages_with_on_assign_offsets(
    broker: BrokerLike, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=2)
    seed(broker.bootstrap_servers, topic, 10, 2)
    assigned: list[list[ck.TopicPartition]] = []

    def on_assign(consumer: ck.Consumer, partitions: list[ck.TopicPartition]) -> None:
        assigned.append(list(partitions))
        for p in partitions:
            p.offset = 3 if p.partition == 0 else ck.OFFSET_BEGINNING
        consumer.assign(partitions)

    consumer = ck.Consumer(conf(broker, **{"auto.offset.reset": "largest"}))
    try:
        consumer.subscribe([topic], on_assign=on_assign)
        msgs = records(poll_until(consumer, lambda got: len(records(got)) >= 7, errors_ok=False))
        assert [sorted(p.partition for p in parts) for parts in assigned] == [[0, 1]]
        by_partition = {p: [m.offset() for m in msgs if m.partition() == p] for p in (0, 1)}
        # partition 0 holds offsets 0..4: on_assign started it at 3; partition 1 from the beginning
        assert by_partition == {0: [3, 4], 1: [0, 1, 2, 3, 4]}
        first = next(m for m in msgs if m.partition() == 1)
        assert first.value() == b"v1" and first.key() == b"k1"
        assert first.headers() == [("n", b"1")]
        assert first.timestamp()[0] == ck.TIMESTAMP_CREATE_TIME and first.timestamp()[1] > 0
        assert consumer.consume(10, timeout=0) == []
    finally:
        consumer.close()


def test_partition_eof_after_the_last_message(broker: BrokerLike, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=2)
    seed(broker.bootstrap_servers, topic, 4, 2)
    consumer = ck.Consumer(conf(broker, **{"enable.partition.eof": True}))
    try:
        consumer.subscribe([topic])
        got = poll_until(consumer, lambda got: sum(1 for m in got if m.error() is not None) >= 2)
        eofs = [m for m in got if m.error() is not None]
        assert all(m.error().code() == ck.KafkaError._PARTITION_EOF for m in eofs)
        assert sorted((m.partition(), m.offset()) for m in eofs) == [(0, 2), (1, 2)]
        for eof in eofs:  # each EOF comes after the partition's last message
            index = got.index(eof)
            assert [
                m.offset() for m in got[:index] if m.error() is None and m.partition() == eof.partition()
            ] == [
                0,
                1,
            ]
        # More data, then EOF again at the new end
        seed(broker.bootstrap_servers, topic, 2, 2, start=4)
        more = poll_until(consumer, lambda got: sum(1 for m in got if m.error() is not None) >= 2)
        assert sorted((m.partition(), m.offset()) for m in more if m.error() is not None) == [(0, 3), (1, 3)]
    finally:
        consumer.close()


def test_commit_variants_and_committed_position(broker: BrokerLike, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    seed(broker.bootstrap_servers, topic, 6, 1)
    tp = ck.TopicPartition(topic, 0)
    commits: list[tuple[ck.KafkaError | None, list[ck.TopicPartition]]] = []
    consumer = ck.Consumer(
        conf(
            broker,
            **{"enable.auto.commit": False, "on_commit": lambda err, parts: commits.append((err, parts))},
        )
    )
    try:
        consumer.subscribe([topic])
        msgs = poll_until(consumer, lambda got: len(got) >= 3, errors_ok=False)
        assert consumer.position([tp])[0].offset == 3
        result = consumer.commit(message=msgs[0], asynchronous=False)
        assert result is not None and [(p.partition, p.offset) for p in result] == [(0, 1)]
        assert consumer.committed([tp])[0].offset == 1
        consumer.commit(offsets=[ck.TopicPartition(topic, 0, 2, "meta")], asynchronous=False)
        committed = consumer.committed([tp])[0]
        assert (committed.offset, committed.metadata) == (2, "meta")
        consumer.commit(asynchronous=False)  # the stored offsets: after the last returned message
        assert consumer.committed([tp])[0].offset == 3
        assert commits == []  # as confluent-kafka: a synchronous commit returns its result, no on_commit
        assert consumer.commit(asynchronous=True) is None
        poll_until(consumer, lambda got: len(commits) >= 1)
        assert [p.offset for _, parts in commits for p in parts] == [3]
        assert all(err is None for err, _ in commits)
    finally:
        consumer.close()
    assert len(commits) == 1  # close() with auto-commit off commits nothing and reports nothing


def test_aborted_transactions_are_not_returned_by_default(
    broker: BrokerLike, topic_factory: TopicFactory
) -> None:
    """librdkafka's default isolation.level is read_committed (Java's is read_uncommitted)."""
    topic = topic_factory(partitions=1)
    with NativeProducer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"t-{uuid.uuid4().hex[:8]}"}
    ) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic, b"aborted-%d" % i, partition=0)
        producer.flush(60)
        producer.abort_transaction()
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, b"kept-%d" % i, partition=0)
        producer.commit_transaction()
    consumer = ck.Consumer(conf(broker, **{"enable.partition.eof": True}))
    try:
        consumer.subscribe([topic])
        got = poll_until(consumer, lambda got: any(m.error() is not None for m in got), errors_ok=True)
        assert [m.value() for m in records(got)] == [b"kept-0", b"kept-1", b"kept-2"]
    finally:
        consumer.close()


def test_close_commits_what_was_returned_not_what_was_fetched(
    broker: BrokerLike, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=1)
    seed(broker.bootstrap_servers, topic, 50, 1)
    settings = conf(broker)
    consumer = ck.Consumer(settings)
    consumer.subscribe([topic])
    poll_until(consumer, lambda got: len(got) >= 5, errors_ok=False)  # the native batch held all 50
    consumer.close()
    with NativeConsumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": settings["group.id"]}
    ) as check:
        committed = check.committed([NativeTP(topic, 0)])[NativeTP(topic, 0)]
    assert committed is not None and committed.offset == 5


def test_store_offsets_without_auto_store(broker: BrokerLike, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    seed(broker.bootstrap_servers, topic, 10, 1)
    settings = conf(broker, **{"enable.auto.offset.store": False})
    consumer = ck.Consumer(settings)
    consumer.subscribe([topic])
    msgs = poll_until(consumer, lambda got: len(got) >= 8, errors_ok=False)
    consumer.store_offsets(message=msgs[3])  # processed up to offset 3
    with pytest.raises(ck.KafkaException) as info:
        consumer.store_offsets(offsets=[ck.TopicPartition("not-assigned", 0, 1)])
    assert info.value.args[0].code() == ck.KafkaError._UNKNOWN_PARTITION
    consumer.close()
    with NativeConsumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": settings["group.id"]}
    ) as check:
        committed = check.committed([NativeTP(topic, 0)])[NativeTP(topic, 0)]
    assert committed is not None and committed.offset == 4


def test_on_revoke_commits_stored_offsets_on_unsubscribe(
    broker: BrokerLike, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=2)
    seed(broker.bootstrap_servers, topic, 6, 2)
    revoked: list[list[ck.TopicPartition]] = []
    settings = conf(broker, **{"auto.commit.interval.ms": 3_600_000})
    consumer = ck.Consumer(settings)
    try:
        consumer.subscribe([topic], on_revoke=lambda c, parts: revoked.append(parts))
        poll_until(consumer, lambda got: len(got) >= 6, errors_ok=False)
        consumer.unsubscribe()
        assert [sorted(p.partition for p in parts) for parts in revoked] == [[0, 1]]
        assert consumer.assignment() == []
    finally:
        consumer.close()
    with NativeConsumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": settings["group.id"]}
    ) as check:
        committed = check.committed([NativeTP(topic, 0), NativeTP(topic, 1)])
    assert {tp.partition: om.offset for tp, om in committed.items() if om is not None} == {0: 3, 1: 3}


def test_assign_seek_pause_resume_and_watermarks(broker: BrokerLike, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    seed(broker.bootstrap_servers, topic, 20, 1)
    tp = ck.TopicPartition(topic, 0)
    consumer = ck.Consumer(conf(broker))
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 5)])
        assert consumer.assignment() == [tp]
        first = poll_until(consumer, lambda got: len(got) >= 2, errors_ok=False)
        assert [m.offset() for m in first] == [5, 6]
        consumer.pause([tp])
        assert consumer.poll(0.2) is None  # fetched-but-unreturned messages are not returned while paused
        consumer.resume([tp])
        after = poll_until(consumer, lambda got: len(got) >= 1, errors_ok=False)
        assert after[0].offset() == 7  # nothing skipped
        consumer.seek(ck.TopicPartition(topic, 0, 15))
        sought = poll_until(consumer, lambda got: len(got) >= 1, errors_ok=False)
        assert sought[0].offset() == 15
        assert consumer.get_watermark_offsets(tp, timeout=30) == (0, 20)
        cached = consumer.get_watermark_offsets(tp, cached=True)
        assert cached is not None and cached[1] == 20
        found = consumer.offsets_for_times([ck.TopicPartition(topic, 0, 0)], timeout=30)
        assert found[0].offset == 0
        metadata = consumer.list_topics(topic, timeout=30)
        assert list(metadata.topics[topic].partitions) == [0]
        assert metadata.brokers
    finally:
        consumer.close()


def test_stats_cb_reports_librdkafka_fields(broker: BrokerLike, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    seed(broker.bootstrap_servers, topic, 5, 1)
    stats: list[dict[str, Any]] = []
    consumer = ck.Consumer(
        conf(broker, **{"statistics.interval.ms": 100, "stats_cb": lambda s: stats.append(json.loads(s))})
    )
    try:
        consumer.subscribe([topic])
        poll_until(consumer, lambda got: len(got) >= 5, errors_ok=False)
        count = len(stats)
        poll_until(consumer, lambda got: len(stats) > count)
        last = stats[-1]
        assert last["type"] == "consumer" and last["client_id"]
        for key in ("name", "ts", "time", "replyq", "msg_cnt", "brokers", "topics", "cgrp"):
            assert key in last
        part = last["topics"][topic]["partitions"]["0"]
        assert part["app_offset"] == 5
        assert part["hi_offset"] == 5
        assert part["fetchq_cnt"] == 0
        for key in ("consumer_lag", "committed_offset", "lo_offset", "stored_offset"):
            assert key in part
        assert last["cgrp"]["assignment_size"] == 1 and last["cgrp"]["rebalance_cnt"] >= 1
    finally:
        consumer.close()


def test_deserializing_consumer(broker: BrokerLike, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    seed(broker.bootstrap_servers, topic, 1, 1)
    consumer = ck.DeserializingConsumer(
        conf(
            broker,
            **{
                "key.deserializer": StringDeserializer(),
                "value.deserializer": StringDeserializer(),
                "enable.partition.eof": True,
            },
        )
    )
    try:
        consumer.subscribe([topic])
        msg = poll_until(consumer, lambda got: len(got) >= 1)[0]
        assert (msg.key(), msg.value()) == ("k0", "v0")
        with pytest.raises(ck.error.ConsumeError) as info:
            poll_until(consumer, lambda got: False)
        assert info.value.code == ck.KafkaError._PARTITION_EOF
    finally:
        consumer.close()


def test_kip983_extras_are_reachable(broker: BrokerLike, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    consumer = ck.Consumer(conf(broker))
    try:
        consumer.subscribe([topic])
        assert consumer.to_be_revoked_partitions() == []
        assert consumer.lost_partitions() == []
        assert consumer.delay_revoke([ck.TopicPartition(topic, 0)]) is False  # nothing pending revocation
        assert isinstance(consumer.native, NativeConsumer)
    finally:
        consumer.close()


# ------------------------------------------------------------------------------------- native poll(None)
def test_native_poll_none_blocks_until_records(broker: BrokerLike, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    consumer = NativeConsumer(
        {"bootstrap.servers": broker.bootstrap_servers, "auto.offset.reset": "earliest"}
    )
    result: list[Any] = []
    try:
        consumer.assign([NativeTP(topic, 0)])
        thread = threading.Thread(target=lambda: result.append(consumer.poll(None)))
        thread.start()
        seed(broker.bootstrap_servers, topic, 1, 1)
        thread.join(DEADLINE_S)
        assert not thread.is_alive()
        assert [r.value for r in result[0]] == [b"v0"]  # poll(0) would have returned nothing
    finally:
        consumer.close()


def test_native_poll_none_returns_on_wakeup(broker: BrokerLike, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    consumer = NativeConsumer({"bootstrap.servers": broker.bootstrap_servers})
    outcome: list[BaseException] = []
    started = threading.Event()

    def run() -> None:
        started.set()
        try:
            consumer.poll(None)
        except BaseException as e:
            outcome.append(e)

    try:
        consumer.assign([NativeTP(topic, 0)])
        thread = threading.Thread(target=run)
        thread.start()
        started.wait(DEADLINE_S)
        consumer.wakeup()
        thread.join(DEADLINE_S)
        assert not thread.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], WakeupError)
    finally:
        consumer.close()


def test_poll_and_consume_interleaved_return_each_message_once(
    broker: BrokerLike, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=1)
    seed(broker.bootstrap_servers, topic, 40, 1)
    consumer = ck.Consumer(conf(broker))
    try:
        consumer.subscribe([topic])
        offsets: list[int] = []
        deadline = time.monotonic() + DEADLINE_S
        turn = 0
        while len(offsets) < 40:
            assert time.monotonic() < deadline
            turn += 1
            got = consumer.consume(3, timeout=0.5) if turn % 2 else [m for m in [consumer.poll(0.5)] if m]
            offsets.extend(int(m.offset() or 0) for m in got if m.error() is None)
        assert offsets == list(range(40))
        assert consumer.position([ck.TopicPartition(topic, 0)])[0].offset == 40
    finally:
        consumer.close()


def test_async_consumer_poll_none_waits_for_records(broker: BrokerLike, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)

    async def main() -> list[bytes]:
        consumer = AsyncConsumer(
            {"bootstrap.servers": broker.bootstrap_servers, "auto.offset.reset": "earliest"}
        )
        async with consumer:
            await consumer.assign([NativeTP(topic, 0)])
            waiting = asyncio.ensure_future(consumer.poll(None))
            await asyncio.to_thread(seed, broker.bootstrap_servers, topic, 1, 1)
            records = await asyncio.wait_for(waiting, DEADLINE_S)
            return [r.value for r in records]

    assert asyncio.run(main()) == [b"v0"]  # poll(0) would have returned nothing


def test_share_consumer_poll_none_waits_for_records(broker: BrokerLike, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    group = f"share-{uuid.uuid4().hex[:10]}"
    with AdminClient({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        admin.alter_group_configs(group, {"share.auto.offset.reset": "earliest"}, timeout=30)
    # A 1 ms default.api.timeout.ms: poll(None) must not fall back to it (it once did).
    consumer = ShareConsumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "default.api.timeout.ms": 1}
    )
    result: list[Any] = []
    try:
        consumer.subscribe([topic])
        thread = threading.Thread(target=lambda: result.append(consumer.poll(None)))
        thread.start()
        seed(broker.bootstrap_servers, topic, 1, 1)
        thread.join(DEADLINE_S)
        assert not thread.is_alive()
        assert [r.value for r in result[0]] == [b"v0"]
    finally:
        consumer.close()
