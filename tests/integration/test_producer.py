"""The producer against the real broker: what it writes is read back identically by confluent-kafka and by
our consumer for every codec; keyed records land where the Java client (librdkafka's murmur2_random) puts
them; callbacks, flush, limits and acks."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from concurrent.futures import Future
from typing import Any

import pytest

from kafka_handoff.consumer import Consumer
from kafka_handoff.errors import IllegalStateError, MessageTooLargeError, SerializationError
from kafka_handoff.producer import Producer, key_partition
from kafka_handoff.types import RecordMetadata, TopicPartition

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
T0 = 1_700_000_000_000
NO_RETENTION = {"retention.ms": "-1"}
"""For topics whose records carry old explicit timestamps (T0 is 2023): with the default retention (7 days,
measured from the records' largest timestamp) the broker deletes them at its next retention check (every
5 minutes), which now and then falls between the produce and the read-back."""


def sample_records(n: int) -> list[dict[str, Any]]:
    """Keys and values of many shapes (null, empty, large), headers, explicit timestamps."""
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else (b"" if i % 11 == 0 else b"key-%d" % (i % 50))
        value = None if i % 13 == 0 else (b"v%d|" % i) * (1 + i % 40)
        headers = [("h", b"%d" % i), ("empty", b""), ("null", None)] if i % 5 == 0 else None
        out.append({"key": key, "value": value, "headers": headers, "timestamp": T0 + i * 3})
    return out


def confluent() -> Any:
    """confluent-kafka, the independent reader/reference: a test skips for its lack only where it gets
    there, after its checks of our client ran."""
    return pytest.importorskip("confluent_kafka")


def read_confluent(bootstrap: str, topic: str, expected: int, timeout: float = 60) -> list[Any]:
    consumer = confluent().Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected:
            assert time.monotonic() < deadline, f"read {len(got)} of {expected} records"
            for m in consumer.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append(m)
        extra = consumer.consume(100, 0.5)
        assert not [m for m in extra if m.error() is None], "more records than produced"
    finally:
        consumer.close()
    return got


def read_ours(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60) -> list[Any]:
    got: list[Any] = []
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        deadline = time.monotonic() + timeout
        while len(got) < expected:
            assert time.monotonic() < deadline, (
                f"read {len(got)} of {expected} records; {where(consumer, tps)}"
            )
            got.extend(consumer.poll(0.5))
    return got


def where(consumer: Consumer, tps: list[TopicPartition]) -> str:
    """Each partition's position and offsets, for a read that fell short (a log start above 0: records
    were deleted before they were read)."""
    starts, ends = consumer.beginning_offsets(tps, 30), consumer.end_offsets(tps, 30)
    return ", ".join(
        f"{tp}: position {consumer.position(tp, 30)}, log start {starts[tp]}, end {ends[tp]}" for tp in tps
    )


@pytest.mark.parametrize("codec", CODECS)
def test_records_read_back_identically_by_both_consumers(broker: Any, topic_factory: Any, codec: str) -> None:
    topic = topic_factory(partitions=3, configs=NO_RETENTION)
    records = sample_records(600)
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "compression.type": codec}) as producer:
        futures = [producer.send(topic, **r) for r in records]
        producer.flush(60)
        metadata = [f.result(0) for f in futures]
    sent = {(m.partition, m.offset): r for m, r in zip(metadata, records, strict=True)}
    assert len(sent) == len(records)  # every record has its own offset

    def check(partition: int, offset: int, key: Any, value: Any, headers: Any, timestamp: int) -> None:
        expected = sent[(partition, offset)]
        assert key == expected["key"]
        assert value == expected["value"]
        assert timestamp == expected["timestamp"]
        assert list(headers or []) == list(expected["headers"] or [])

    for r in read_ours(broker.bootstrap_servers, topic, 3, len(records)):
        check(r.partition, r.offset, r.key, r.value, [tuple(h) for h in r.headers], r.timestamp)
    for m in read_confluent(broker.bootstrap_servers, topic, len(records)):
        check(m.partition(), m.offset(), m.key(), m.value(), m.headers(), m.timestamp()[1])


def test_keyed_partitions_match_librdkafka_murmur2_random(broker: Any, topic_factory: Any) -> None:
    partitions = 7
    topic_java = topic_factory(partitions=partitions)
    topic_ours = topic_factory(partitions=partitions)
    keys = [b"user-%d" % i for i in range(300)] + [b"", b"\x00\xff" * 9, "ünïcode-ключ".encode()]
    reference: dict[bytes, int] = {}

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        reference[msg.key()] = msg.partition()

    lib = confluent().Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "partitioner": "murmur2_random"}
    )
    for key in keys:
        lib.produce(topic_java, value=b"x", key=key, on_delivery=on_delivery)
    assert lib.flush(60) == 0
    with Producer({"bootstrap.servers": broker.bootstrap_servers}) as producer:
        futures = {key: producer.send(topic_ours, b"x", key=key) for key in keys}
        producer.flush(60)
    ours = {key: f.result(0).partition for key, f in futures.items()}
    assert ours == reference
    assert {key: key_partition(key, partitions) for key in keys if key} == {
        k: v for k, v in reference.items() if k
    }


def test_unkeyed_records_are_sticky(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=6)
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 50}) as producer:
        futures = [producer.send(topic, b"x" * 100) for _ in range(100)]
        producer.flush(30)
    partitions = {f.result(0).partition for f in futures}
    assert len(partitions) == 1  # ~11 KB < batch.size: one partition, one batch


def test_callbacks_run_off_the_network_thread_in_order(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    calls: list[tuple[int, str]] = []
    with Producer({"bootstrap.servers": broker.bootstrap_servers}) as producer:
        for i in range(300):

            def cb(md: RecordMetadata | None, exc: BaseException | None, i: int = i) -> None:
                assert exc is None and md is not None
                calls.append((md.offset, threading.current_thread().name))

            producer.send(topic, b"%d" % i, callback=cb)
        producer.flush(30)
        # flush returns once callbacks ran
        assert [o for o, _t in calls] == list(range(300))
    assert all("callbacks" in name for _o, name in calls)


def test_flush_sends_lingering_records_and_metrics_count_them(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 600_000}) as producer:
        fut = producer.send(topic, b"x")
        time.sleep(0.2)  # (a negative check needs some time to pass)
        assert not fut.done()  # lingering for 10 minutes...
        producer.flush(60)  # ...until flush: it returns with the record delivered
        assert fut.result(0).offset == 0
        metrics = producer.metrics()
        assert metrics["producer-metrics:record-send-total"] >= 1
        assert metrics["producer-metrics:request-total"] >= 1
        assert metrics["producer-metrics:buffer-total-bytes"] == 33554432
        infos = producer.partitions_for(topic)
        assert [p.partition for p in infos] == [0, 1]


def test_record_larger_than_max_request_size_fails_its_future(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    seen: list[BaseException | None] = []
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "max.request.size": 10_000}) as producer:
        fut = producer.send(topic, b"x" * 20_000, callback=lambda md, exc: seen.append(exc))
        ok = producer.send(topic, b"small")
        producer.flush(30)
    error = fut.exception(0)
    assert isinstance(error, MessageTooLargeError) and "max.request.size" in str(error)
    assert seen == [error]
    assert ok.result(0).offset == 0


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(broker: Any, topic_factory: Any, acks: str) -> None:
    topic = topic_factory(partitions=1)
    config = {"bootstrap.servers": broker.bootstrap_servers, "acks": acks}
    if acks != "all":
        config["enable.idempotence"] = "false"
    with Producer(config) as producer:
        futures = [producer.send(topic, b"%d" % i) for i in range(50)]
        producer.flush(30)
    offsets = [f.result(0).offset for f in futures]
    assert offsets == ([-1] * 50 if acks == "0" else list(range(50)))
    got = read_confluent(broker.bootstrap_servers, topic, 50)
    assert [m.value() for m in got] == [b"%d" % i for i in range(50)]


def test_serializers_and_misuse(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "key.serializer": lambda k: str(k).encode(),
            "value.serializer": lambda v: repr(v).encode(),
        }
    )
    fut = producer.send(topic, {"a": 1}, key=42)
    assert fut.result(30).partition == key_partition(b"42", 2)
    with pytest.raises(Exception, match="invalid partition 5"):
        producer.send(topic, 1, partition=5)
    producer.close()
    with pytest.raises(IllegalStateError):
        producer.send(topic, 1)
    got = read_confluent(broker.bootstrap_servers, topic, 1)
    assert (got[0].key(), got[0].value()) == (b"42", b"{'a': 1}")
    bare = Producer({"bootstrap.servers": broker.bootstrap_servers})
    try:
        with pytest.raises(SerializationError, match=r"value\.serializer"):
            bare.send(topic, 12345)
    finally:
        bare.close()


def test_many_sends_from_several_threads(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=4)
    futures: dict[int, list[Future[RecordMetadata]]] = defaultdict(list)
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "compression.type": "lz4"}) as producer:

        def worker(n: int) -> None:
            for i in range(5000):
                futures[n].append(producer.send(topic, b"%d-%d" % (n, i), key=b"%d" % n))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        producer.flush(60)
    for futs in futures.values():
        offsets = [f.result(0).offset for f in futs]
        assert offsets == sorted(offsets)  # one key, one partition: in send order
        assert len({f.result(0).partition for f in futs}) == 1
    assert len(read_confluent(broker.bootstrap_servers, topic, 20_000)) == 20_000


def test_produce_sample_cli_writes_the_generated_events(
    broker: Any, topic_factory: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from kafka_handoff.cli.main import main
    from kafka_handoff.sample import generate_events

    topic = topic_factory(partitions=3, configs=NO_RETENTION)  # --start-ms is in 2023
    argv = [
        "produce-sample",
        "-b",
        broker.bootstrap_servers,
        "--topic",
        topic,
        "--count",
        "3000",
        "--seed",
        "11",
        "--malformed-share",
        "0.05",
        "--start-ms",
        "1700000000000",
        "--no-progress",
    ]
    assert main(argv) == 0
    assert "produced 3,000 records" in capsys.readouterr().out
    expected = generate_events(3000, seed=11, malformed_share=0.05)
    got = read_confluent(broker.bootstrap_servers, topic, 3000)
    assert sorted((m.key(), m.value(), m.timestamp()[1]) for m in got) == sorted(
        (e.key, e.value, e.timestamp) for e in expected
    )
    # One user's events are in one partition, in generation order.
    by_user: dict[bytes, list[int]] = defaultdict(list)
    for m in sorted(got, key=lambda m: (m.partition(), m.offset())):
        by_user[m.key()].append(m.timestamp()[1])
    assert all(ts == sorted(ts) for ts in by_user.values())


def test_flush_and_close_from_a_callback(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    seen: list[BaseException] = []
    closed = threading.Event()

    def callback(md: RecordMetadata | None, exc: BaseException | None) -> None:
        try:
            producer.flush(1)
        except IllegalStateError as error:
            seen.append(error)
        producer.close()  # becomes close(0), as in Java
        closed.set()

    producer.send(topic, b"x", callback=callback)
    assert closed.wait(30)
    assert seen and "send callback" in str(seen[0])
    with pytest.raises(IllegalStateError):
        producer.send(topic, b"y")
