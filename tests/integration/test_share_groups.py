"""Share groups (KIP-932) against the real broker: cooperative consumption, RELEASE / REJECT / RENEW,
acquisition lock expiry after a SIGKILL, the delivery limit, close() releasing, and librdkafka in the same
share group.

Each test uses its own topic and share group; group configs (``share.auto.offset.reset=earliest``, short
``share.record.lock.duration.ms``, low ``share.delivery.count.limit``) are set with the admin client
before the first member joins (the dev broker allows locks down to 1 s).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import kafka_handoff
from kafka_handoff import AdminClient, IllegalStateError, Producer, TopicPartition
from kafka_handoff.share import AcknowledgeType, ShareConsumer, ShareConsumerRecord

pytestmark = pytest.mark.integration

A = AcknowledgeType


def _bootstrap(broker: Any) -> str:
    return str(broker.bootstrap_servers)


@pytest.fixture
def share_topic(broker: Any, topic_factory: Any) -> Callable[..., tuple[str, str]]:
    """``share_topic(**group_configs) -> (topic, group)``: a 1-partition topic and a share group reading
    it from the earliest offset."""

    def make(**configs: Any) -> tuple[str, str]:
        topic = topic_factory(partitions=1)
        group = f"share-{uuid.uuid4().hex[:10]}"
        group_configs = {"share.auto.offset.reset": "earliest"}
        group_configs.update({k.replace("_", "."): str(v) for k, v in configs.items()})
        with AdminClient({"bootstrap.servers": _bootstrap(broker)}) as admin:
            admin.alter_group_configs(group, group_configs, timeout=30)
        return topic, group

    return make


def _produce(broker: Any, topic: str, count: int, *, batches: int = 1) -> list[bytes]:
    """``count`` records in ``batches`` separate produce requests (separate record batches)."""
    values = [b"v-%04d" % i for i in range(count)]
    with Producer({"bootstrap.servers": _bootstrap(broker), "linger.ms": 0}) as producer:
        per = max(1, count // batches)
        for start in range(0, count, per):
            for value in values[start : start + per]:
                producer.send(topic, value)
            producer.flush(30)
    return values


@pytest.fixture
def consumers(broker: Any) -> Iterator[Callable[..., ShareConsumer]]:
    made: list[ShareConsumer] = []

    def make(group: str, topic: str, **config: Any) -> ShareConsumer:
        props = {"bootstrap.servers": _bootstrap(broker), "group.id": group}
        props.update({k.replace("_", "."): v for k, v in config.items()})
        consumer = ShareConsumer(props)
        consumer.subscribe([topic])
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.close(timeout=10)


def _poll_until(
    consumer: ShareConsumer,
    done: Callable[[], bool],
    on_record: Callable[[ShareConsumerRecord], object],
    timeout_s: float = 30.0,
) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "condition not reached in time"
        for record in consumer.poll(0.2):
            on_record(record)


def test_three_share_consumers_together_receive_every_record(
    broker: Any, share_topic: Callable[..., tuple[str, str]], consumers: Callable[..., ShareConsumer]
) -> None:
    topic, group = share_topic()
    members = [
        consumers(group, topic, share_acquire_mode="record_limit", max_poll_records=5) for _ in range(3)
    ]
    values = _produce(broker, topic, 60, batches=60)
    got: dict[int, list[bytes]] = {i: [] for i in range(3)}
    deadline = time.monotonic() + 60
    while sum(len(v) for v in got.values()) < len(values):
        assert time.monotonic() < deadline, f"received only {sum(len(v) for v in got.values())} records"
        for i, member in enumerate(members):
            records = member.poll(0.1)
            assert len(records) <= 5  # KIP-1206 record_limit
            got[i].extend(r.value for r in records)
    everything = [v for vs in got.values() for v in vs]
    assert sorted(everything) == values  # every record, each once (all accepted implicitly)
    assert sum(1 for vs in got.values() if vs) >= 2, "the partition's records were not shared"
    for member in members:
        assert member.commit_sync(timeout=30) in ({}, {TopicPartition(topic, 0): None})


def test_release_redelivers_with_higher_count_and_reject_never_again(
    broker: Any, share_topic: Callable[..., tuple[str, str]], consumers: Callable[..., ShareConsumer]
) -> None:
    topic, group = share_topic()
    consumer = consumers(group, topic, share_acknowledgement_mode="explicit")
    _produce(broker, topic, 5)
    deliveries: list[tuple[int, int]] = []

    def on_record(record: ShareConsumerRecord) -> None:
        deliveries.append((record.offset, record.delivery_count))
        if record.offset == 0 and record.delivery_count == 1:
            consumer.acknowledge(record, A.RELEASE)
        elif record.offset == 1:
            consumer.acknowledge(record, A.REJECT)
        else:
            consumer.acknowledge(record, A.ACCEPT)

    _poll_until(consumer, lambda: (0, 2) in deliveries and len(deliveries) >= 6, on_record)
    assert consumer.commit_sync(timeout=30) in ({}, {TopicPartition(topic, 0): None})
    # Offset 0 came back with delivery count 2; the REJECTed offset 1 never comes back.
    quiet_until = time.monotonic() + 2.0
    while time.monotonic() < quiet_until:
        for record in consumer.poll(0.2):
            deliveries.append((record.offset, record.delivery_count))
            consumer.acknowledge(record, A.ACCEPT)
    assert sorted(deliveries) == [(0, 1), (0, 2), (1, 1), (2, 1), (3, 1), (4, 1)]


def test_explicit_mode_poll_refuses_unacknowledged_records(
    broker: Any, share_topic: Callable[..., tuple[str, str]], consumers: Callable[..., ShareConsumer]
) -> None:
    topic, group = share_topic()
    consumer = consumers(group, topic, share_acknowledgement_mode="explicit")
    _produce(broker, topic, 3)
    records: list[ShareConsumerRecord] = []
    _poll_until(consumer, lambda: bool(records), records.append)
    with pytest.raises(IllegalStateError, match="not acknowledged"):
        consumer.poll(0)
    for record in records:
        consumer.acknowledge(record, A.ACCEPT)
    results = consumer.commit_sync(timeout=30)
    assert results == {records[0].topic_partition: None}


def test_undeserializable_record_raises_and_is_acknowledged_by_offset(
    broker: Any, share_topic: Callable[..., tuple[str, str]], consumers: Callable[..., ShareConsumer]
) -> None:
    from kafka_handoff.errors import SerializationError

    def value_deserializer(data: bytes) -> str:
        if data == b"v-0001":
            raise ValueError("bad value")
        return data.decode()

    topic, group = share_topic()
    consumer = consumers(
        group, topic, share_acknowledgement_mode="explicit", value_deserializer=value_deserializer
    )
    _produce(broker, topic, 3)
    deadline = time.monotonic() + 30
    with pytest.raises(SerializationError, match=rf"{topic}-0@1"):
        while time.monotonic() < deadline:
            assert len(consumer.poll(0.2)) == 0
    with pytest.raises(IllegalStateError, match="not acknowledged"):
        consumer.poll(0)
    consumer.acknowledge_offset(topic, 0, 1, A.REJECT)
    got: list[ShareConsumerRecord] = []

    def take(record: ShareConsumerRecord) -> None:
        got.append(record)
        consumer.acknowledge(record)

    _poll_until(consumer, lambda: len(got) >= 2, take)
    assert [(r.offset, r.value) for r in got] == [(0, "v-0000"), (2, "v-0002")]
    assert consumer.commit_sync(timeout=30) == {TopicPartition(topic, 0): None}


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from kafka_handoff.share import ShareConsumer
    consumer = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([sys.argv[3]])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        records = consumer.poll(0.5)
        if len(records):
            print("ACQUIRED " + ",".join(str(r.offset) for r in records), flush=True)
            time.sleep(600)
    """
)


def test_records_of_a_killed_consumer_are_redelivered_after_the_lock_timeout(
    broker: Any, share_topic: Callable[..., tuple[str, str]], consumers: Callable[..., ShareConsumer]
) -> None:
    topic, group = share_topic(share_record_lock_duration_ms=2000)
    _produce(broker, topic, 10)
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.abspath(kafka_handoff.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, _bootstrap(broker), group, topic],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.startswith("ACQUIRED "), line
        held = {int(o) for o in line.split()[1].split(",")}
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    assert held == set(range(10))
    consumer = consumers(group, topic)
    redelivered: dict[int, int] = {}
    _poll_until(
        consumer,
        lambda: set(redelivered) >= held,
        lambda r: redelivered.setdefault(r.offset, r.delivery_count),
        timeout_s=30,
    )
    # Redelivered (count 2) once the 2 s lock ran out -- long before the member's session timed out.
    assert all(redelivered[o] == 2 for o in held), redelivered


def test_records_past_the_delivery_limit_are_archived(
    broker: Any, share_topic: Callable[..., tuple[str, str]], consumers: Callable[..., ShareConsumer]
) -> None:
    topic, group = share_topic(share_delivery_count_limit=2)
    consumer = consumers(group, topic, share_acknowledgement_mode="explicit")
    _produce(broker, topic, 2)
    deliveries: list[tuple[int, int]] = []

    def on_record(record: ShareConsumerRecord) -> None:
        deliveries.append((record.offset, record.delivery_count))
        # Offset 0 always fails; offset 1 is processed.
        consumer.acknowledge(record, A.RELEASE if record.offset == 0 else A.ACCEPT)

    _poll_until(consumer, lambda: (0, 2) in deliveries, on_record)
    consumer.commit_sync(timeout=30)
    quiet_until = time.monotonic() + 2.0
    while time.monotonic() < quiet_until:
        for record in consumer.poll(0.2):
            on_record(record)
    assert sorted(deliveries) == [(0, 1), (0, 2), (1, 1)]  # no third delivery: archived


def test_close_releases_acquired_records_and_renew_keeps_the_lock(
    broker: Any, share_topic: Callable[..., tuple[str, str]], consumers: Callable[..., ShareConsumer]
) -> None:
    topic, group = share_topic(share_record_lock_duration_ms=3000)
    first = consumers(group, topic, share_acknowledgement_mode="explicit")
    _produce(broker, topic, 4)
    held: list[ShareConsumerRecord] = []
    _poll_until(first, lambda: len(held) >= 4, held.append)
    # RENEW (KIP-1222) about every second for 4 s, past the 3 s lock: a second member gets nothing meanwhile.
    second = consumers(group, topic)
    renew_until = time.monotonic() + 4.0
    while time.monotonic() < renew_until:
        for record in held:
            first.acknowledge(record, A.RENEW)
        assert first.commit_sync(timeout=30) == {held[0].topic_partition: None}
        assert len(second.poll(0.5)) == 0
    # Renewed records come back from the next poll() (to be acknowledged again) ...
    returned = first.poll(0)
    assert sorted((r.offset, r.delivery_count) for r in returned) == [(0, 1), (1, 1), (2, 1), (3, 1)]
    # ... and close() releases what first still holds: second gets all four at once, delivery count 2.
    first.close(timeout=10)
    again: dict[int, int] = {}
    _poll_until(second, lambda: len(again) >= 4, lambda r: again.setdefault(r.offset, r.delivery_count), 20)
    assert again == {0: 2, 1: 2, 2: 2, 3: 2}


def test_acknowledgement_commit_callback_reports_results(
    broker: Any, share_topic: Callable[..., tuple[str, str]], consumers: Callable[..., ShareConsumer]
) -> None:
    topic, group = share_topic()
    consumer = consumers(group, topic)
    reports: list[tuple[dict[Any, set[int]], BaseException | None]] = []
    consumer.set_acknowledgement_commit_callback(lambda offsets, error: reports.append((offsets, error)))
    _produce(broker, topic, 3)
    got: list[ShareConsumerRecord] = []
    _poll_until(consumer, lambda: len(got) >= 3, got.append)
    future = consumer.commit_async()
    results = future.result(30)
    tp = got[0].topic_partition
    assert results == {tp: None}
    consumer.poll(0)  # the callback runs on the application thread, inside poll()
    assert ({tp: {0, 1, 2}}, None) in reports
    metrics = consumer.metrics()  # Java's share metric names
    assert metrics["consumer-share-metrics:records-fetched-total"] >= 3
    assert metrics["consumer-share-metrics:acknowledgements-send-total"] >= 3
    assert metrics["consumer-share-metrics:acknowledgements-error-total"] == 0
    assert metrics["consumer-share-metrics:fetch-total"] >= 1
    assert metrics["consumer-share-coordinator-metrics:heartbeat-total"] >= 1


def test_records_whose_lock_expired_are_not_handed_out_and_come_back(
    broker: Any, share_topic: Callable[..., tuple[str, str]], consumers: Callable[..., ShareConsumer]
) -> None:
    topic, group = share_topic(share_record_lock_duration_ms=1000)
    consumer = consumers(group, topic, max_poll_records=2)
    reports: list[BaseException | None] = []
    consumer.set_acknowledgement_commit_callback(lambda offsets, error: reports.append(error))
    _produce(broker, topic, 6, batches=6)
    held: list[ShareConsumerRecord] = []
    _poll_until(consumer, lambda: bool(held), held.append)
    time.sleep(1.6)  # past the 1 s lock: held records (and any prefetched ones) are the broker's again
    seen: list[tuple[int, int]] = []

    def on_record(record: ShareConsumerRecord) -> None:
        assert record.lock_deadline_ms > time.monotonic_ns() // 1_000_000, "handed out after its lock expired"
        seen.append((record.offset, record.delivery_count))

    first_offsets = {r.offset for r in held}
    _poll_until(consumer, lambda: first_offsets <= {o for o, c in seen if c >= 2}, on_record, timeout_s=30)
    consumer.commit_sync(timeout=30)
    # The implicit ACCEPT of the expired records failed at the broker and was reported, not swallowed.
    assert any(error is not None for error in reports)


def test_wakeup_interrupts_a_blocking_poll(
    broker: Any, share_topic: Callable[..., tuple[str, str]], consumers: Callable[..., ShareConsumer]
) -> None:
    import threading

    from kafka_handoff import WakeupError

    topic, group = share_topic()
    consumer = consumers(group, topic)
    timer = threading.Timer(0.5, consumer.wakeup)
    timer.start()
    with pytest.raises(WakeupError):  # not the poll's empty result 30 s later
        consumer.poll(30)
    assert len(consumer.poll(0)) == 0  # the consumer keeps working


def _confluent_share_consumer() -> Any:
    ck = pytest.importorskip("confluent_kafka")
    if not hasattr(ck, "ShareConsumer"):
        pytest.skip("the installed confluent-kafka has no ShareConsumer")
    return ck


def test_librdkafka_and_ours_in_one_share_group_process_every_record_once(
    broker: Any, share_topic: Callable[..., tuple[str, str]], consumers: Callable[..., ShareConsumer]
) -> None:
    ck = _confluent_share_consumer()
    topic, group = share_topic()
    ours = [consumers(group, topic, share_acquire_mode="record_limit", max_poll_records=5) for _ in range(2)]
    theirs = ck.ShareConsumer(
        {"bootstrap.servers": _bootstrap(broker), "group.id": group, "max.poll.records": 5}
    )
    try:
        theirs.subscribe([topic])
        values = _produce(broker, topic, 60, batches=60)
        got: list[bytes] = []
        by_client = {"ours": 0, "librdkafka": 0}
        deadline = time.monotonic() + 60
        while len(got) < len(values):
            assert time.monotonic() < deadline, f"received only {len(got)} records"
            for consumer in ours:
                records = consumer.poll(0.1)
                got.extend(r.value for r in records)
                by_client["ours"] += len(records)
            for message in theirs.poll(0.1):
                assert message.error() is None, message.error()
                got.append(message.value())
                by_client["librdkafka"] += 1
        assert sorted(got) == values  # each record processed once
        assert by_client["ours"] > 0 and by_client["librdkafka"] > 0, by_client
        theirs.commit_sync(30)
    finally:
        theirs.close()


def test_cli_consume_share_group_and_describe(
    broker: Any, topic_factory: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from kafka_handoff.cli.main import main

    topic = topic_factory(partitions=1)
    group = f"share-cli-{uuid.uuid4().hex[:8]}"
    _produce(broker, topic, 5)
    bootstrap = _bootstrap(broker)
    common = ["--bootstrap-servers", bootstrap]
    args = [
        "consume",
        "-t",
        topic,
        "--share-group",
        group,
        "--from-beginning",
        "-n",
        "3",
        "--idle-timeout",
        "20",
    ]
    assert main([*args, *common]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{topic}-0@{i}\tdelivery 1\tnull\tv-{i:04d}" for i in range(3)]
    # The two records fetched but not printed were released by close(): the next member gets them again.
    assert main([*args[:-4], "-n", "2", "--idle-timeout", "20", "--format", "json", *common]) == 0
    again = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [(r["offset"], r["delivery_count"]) for r in map(json.loads, again)] in (
        [(3, 2), (4, 2)],
        [(3, 1), (4, 1)],  # the first run's fetch acquired only what it printed
    )
    assert main(["share-groups", "describe", group, "-b", bootstrap]) == 0
    described = capsys.readouterr().out
    assert f"share group {group}" in described and topic in described
    assert main(["share-groups", "list", "-b", bootstrap]) == 0
    assert group in capsys.readouterr().out
    # The group has no members now: its start offset can be moved (AlterShareGroupOffsets).
    assert main(["share-groups", "reset-offsets", group, topic, "--to", "latest", "-b", bootstrap]) == 0
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        assert admin.list_share_group_offsets(group)[TopicPartition(topic, 0)].start_offset == 5


def test_share_throughput_bench_consumes_every_record(broker: Any, tmp_path: Any) -> None:
    from kafka_handoff.bench.share import confluent_has_share_consumer
    from kafka_handoff.cli.main import main

    clients = ["handoff-share"] + (["confluent-share"] if confluent_has_share_consumer() else [])
    code = main(
        [
            "bench", "throughput", "--share", "--bootstrap-servers", _bootstrap(broker),
            "--records", "1000", "--value-bytes", "20", "--partitions", "1", "--repeat", "1",
            "--clients", ",".join(clients), "--out", str(tmp_path),
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads((tmp_path / "throughput-share.json").read_text())
    medians = {m["client"]: m for m in data["medians"]}
    assert sorted(medians) == sorted(clients)
    for name, m in medians.items():
        assert m["runs"] == 1 and m["records"] == 1000 and m["records_per_s"] > 0, name


def test_a_poison_pill_is_rejected_by_the_errors_coordinates_and_the_rest_delivered(
    broker: Any, share_topic: Callable[..., tuple[str, str]], consumers: Callable[..., ShareConsumer]
) -> None:
    from kafka_handoff.errors import SerializationError
    from kafka_handoff.serialization import MessageField, SerializationContext

    def value_deserializer(data: bytes, ctx: SerializationContext) -> str:
        assert ctx.topic == topic and ctx.partition == 0 and ctx.field == MessageField.VALUE
        if data == b"v-0002":
            raise ValueError("poison")
        return data.decode()

    topic, group = share_topic()
    consumer = consumers(
        group, topic, share_acknowledgement_mode="explicit", value_deserializer=value_deserializer
    )
    _produce(broker, topic, 5)
    got: list[ShareConsumerRecord] = []
    error: SerializationError | None = None
    deadline = time.monotonic() + 30
    while error is None or len(got) < 4:
        assert time.monotonic() < deadline, f"error={error!r}, got {[r.offset for r in got]}"
        try:
            records = consumer.poll(0.2)
        except SerializationError as exc:
            assert error is None, "the poison pill was delivered twice"
            error = exc
            consumer.acknowledge_offset(exc.topic, exc.partition, exc.offset, A.REJECT)
            continue
        for record in records:
            got.append(record)
            consumer.acknowledge(record)
    assert (error.topic, error.partition, error.offset, error.field) == (topic, 0, 2, "value")
    assert sorted((r.offset, r.value) for r in got) == [
        (0, "v-0000"),
        (1, "v-0001"),
        (3, "v-0003"),
        (4, "v-0004"),
    ]
    assert consumer.commit_sync(timeout=30) == {TopicPartition(topic, 0): None}
    # Rejected means archived: a new member of the group gets only new records, never offset 2 again.
    consumer.close(timeout=10)
    with Producer({"bootstrap.servers": _bootstrap(broker)}) as producer:
        producer.send(topic, b"v-late").result(30)
    second = consumers(group, topic, share_acknowledgement_mode="explicit")
    later: list[ShareConsumerRecord] = []

    def take(record: ShareConsumerRecord) -> None:
        later.append(record)
        second.acknowledge(record)

    _poll_until(second, lambda: any(r.value == b"v-late" for r in later), take)
    assert [r.offset for r in later] == [5]
