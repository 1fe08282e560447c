"""The C fast path of ``Producer.send``/``send_nowait`` (``_fastencode.SendPath``) against the Python methods.

Two producers with no reachable broker get the same topic metadata and the same partitioner randomness by
hand; the same sequence of records goes through the C path of one and the Python methods of the other.
Their batches must hold the same records in the same order (the same bytes once encoded), the sticky
partitioner must end in the same state, and the futures must resolve to the same metadata.  The cases the
C path leaves to Python (headers, serializers, str values, bad partitions, a closed producer, the
accumulator's lock held by another thread) must behave as the Python methods do.
"""

from __future__ import annotations

import gc
import inspect
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_handoff.errors import IllegalStateError, KafkaError, SerializationError
from kafka_handoff.producer import Producer
from kafka_handoff.producer.accumulator import _TopicInfo
from kafka_handoff.producer.batch import ProducerBatch
from kafka_handoff.producer.future import C_FUTURES, RecordFuture
from kafka_handoff.producer.partitioner import BuiltInPartitioner
from kafka_handoff.producer.transactions import TxnState
from kafka_handoff.protocol.compression import CompressionType
from kafka_handoff.types import RecordMetadata, TopicPartition

pytestmark = pytest.mark.unit

needs_c = pytest.mark.skipif(
    C_FUTURES is None or not hasattr(C_FUTURES, "SendPath"), reason="the C extension is not built"
)
TOPIC = "orders"
PARTITIONS = 4


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _producer(port: int, **config: Any) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "linger.ms": 600_000,  # nothing is sent (there is no broker anyway)
            "batch.size": 1000,
            "reconnect.backoff.ms": 10_000,
            "reconnect.backoff.max.ms": 10_000,
            **config,
        }
    )
    acc = producer._accumulator
    acc._rng = random.Random(11)
    acc.update_topic(TOPIC, PARTITIONS, list(range(PARTITIONS)))
    producer._partition_counts = {TOPIC: PARTITIONS}
    return producer


@pytest.fixture
def pair() -> Iterator[tuple[Producer, Producer]]:
    port = _dead_port()
    fast, slow = _producer(port), _producer(port)
    try:
        yield fast, slow
    finally:
        fast.close(0)
        slow.close(0)


def _records(seed: int, n: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(n):
        kind = rng.random()
        record: dict[str, Any] = {
            "value": None if kind < 0.05 else bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 200))),
            "timestamp": 1_700_000_000_000 + i,
        }
        if 0.05 <= kind < 0.35:
            record["key"] = b"key-%d" % rng.randrange(50)
        elif 0.35 <= kind < 0.45:
            record["partition"] = rng.randrange(PARTITIONS)
        elif 0.45 <= kind < 0.5:
            record["headers"] = [("h", b"v%d" % i)]  # the Python path, in both producers
        out.append(record)
    return out


def _batches(producer: Producer) -> dict[int, list[ProducerBatch]]:
    acc = producer._accumulator
    return {p: acc.queued_batches(TopicPartition(TOPIC, p)) for p in range(PARTITIONS)}


def _shape(producer: Producer) -> dict[int, list[tuple[int, list[tuple[Any, ...]], bytes]]]:
    return {
        p: [
            (
                b.size,
                [(e[0], e[1], e[2], e[3], e[5]) for e in b.entries],
                b.encode(CompressionType.NONE, None),
            )
            for b in batches
        ]
        for p, batches in _batches(producer).items()
    }


@needs_c
def test_send_is_the_c_path_and_send_nowait_too(pair: tuple[Producer, Producer]) -> None:
    fast, _ = pair
    assert type(fast.send).__name__ == "SendPath"
    assert type(fast.send_nowait).__name__ == "SendPath"
    # Introspection sees the Python methods (help(), IDEs, inspect.signature).
    assert inspect.signature(fast.send) == inspect.signature(Producer.send.__get__(fast))
    assert inspect.signature(fast.send_nowait) == inspect.signature(Producer.send_nowait.__get__(fast))
    assert fast.send.__doc__ == Producer.send.__doc__


class CountedSend:
    """``Producer.send`` of ``producer`` (the Python path the C one falls back to), counting its calls."""

    def __init__(self, producer: Producer) -> None:
        self.send = Producer.send.__get__(producer)
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.send(*args, **kwargs)


@needs_c
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("slots", [True, False], ids=["slots", "getattr"])
@pytest.mark.parametrize("append", [True, False], ids=["append_entry", "python_send"])
def test_c_send_makes_the_same_batches_and_futures_as_python(
    pair: tuple[Producer, Producer], seed: int, slots: bool, append: bool
) -> None:
    fast, slow = pair
    seen: list[tuple[str, RecordMetadata | None]] = []

    def callback(md: RecordMetadata | None, exc: BaseException | None) -> None:
        seen.append(("cb", md))

    counted = CountedSend(fast)

    assert C_FUTURES is not None
    appended = 0

    def append_entry(*args: Any) -> Any:
        nonlocal appended
        appended += 1
        return fast._append_entry(*args)

    types = (_TopicInfo, ProducerBatch, BuiltInPartitioner) if slots else None
    send = C_FUTURES.SendPath(
        fast, fast._accumulator, counted, True, types, None, append_entry if append else None
    )
    fast_futures = []
    slow_futures = []
    for i, record in enumerate(_records(seed, 600)):
        extra: dict[str, Any] = {"callback": callback} if i % 7 == 0 else {}
        if i % 3 == 0:  # positional arguments too
            fast_futures.append(send(TOPIC, record.pop("value"), **record, **extra))
        else:
            fast_futures.append(send(TOPIC, **record, **extra))
        assert isinstance(fast_futures[-1], RecordFuture)
    # Most records took the C path (the rest: headers, new batches, sticky switches); with append_entry the
    # records that need a new batch skip send()'s Python checks (only the ones with headers remain).
    assert counted.calls < (60 if append else 200), counted.calls
    assert (appended > 50) if append else (appended == 0)
    for i, record in enumerate(_records(seed, 600)):
        extra = {"callback": callback} if i % 7 == 0 else {}
        slow_futures.append(Producer.send(slow, TOPIC, **record, **extra))
    assert _shape(fast) == _shape(slow)
    fp = fast._accumulator._topics[TOPIC].partitioner
    sp = slow._accumulator._topics[TOPIC].partitioner
    assert (fp.current, fp.produced) == (sp.current, sp.produced)
    assert all(not gc.is_tracked(f) for f in fast_futures[:50] if f._cond is None)

    for producer in (fast, slow):
        for p, batches in _batches(producer).items():
            offset = 1000 * p
            for batch in batches:
                producer._complete(batch, offset, -1, None)
                offset += len(batch.entries)
    fast_results = [f.result(0) for f in fast_futures]
    slow_results = [f.result(0) for f in slow_futures]
    assert fast_results == slow_results
    assert all(isinstance(md, RecordMetadata) and md.offset >= 0 for md in fast_results)
    assert len(seen) == 2 * len(range(0, 600, 7))


@needs_c
def test_c_send_nowait_makes_the_same_batches_as_python(pair: tuple[Producer, Producer]) -> None:
    fast, slow = pair
    for record in _records(9, 400):
        assert fast.send_nowait(TOPIC, **record) is None  # type: ignore[func-returns-value]
    for record in _records(9, 400):
        Producer.send_nowait(slow, TOPIC, **record)
    assert _shape(fast) == _shape(slow)
    assert all(e[4] is None for batches in _batches(fast).values() for b in batches for e in b.entries)


@needs_c
def test_c_send_stamps_now_when_no_timestamp_is_given(pair: tuple[Producer, Producer]) -> None:
    fast, _ = pair
    before = time.time_ns() // 1_000_000
    fast.send(TOPIC, b"v", partition=2)
    after = time.time_ns() // 1_000_000
    (entry,) = _batches(fast)[2][0].entries
    assert before <= entry[2] <= after


@needs_c
def test_cases_left_to_python_behave_as_python(pair: tuple[Producer, Producer]) -> None:
    fast, _ = pair
    fast.send(TOPIC, "text", key="k")  # str key and value: converted by the Python path
    entries = [e for batches in _batches(fast).values() for b in batches for e in b.entries]
    assert [(e[0], e[1]) for e in entries] == [(b"k", b"text")]
    with pytest.raises(SerializationError, match="value must be bytes"):
        fast.send(TOPIC, 42)
    with pytest.raises(KafkaError, match="invalid partition 4"):
        fast.send(TOPIC, b"v", partition=4)
    with pytest.raises(ValueError, match="invalid timestamp"):
        fast.send(TOPIC, b"v", timestamp=-5)
    with pytest.raises(TypeError):
        fast.send(TOPIC, b"v", colour="red")  # type: ignore[call-arg]
    too_big = fast.send(TOPIC, b"x" * 2_000_000)
    with pytest.raises(KafkaError, match=r"max\.request\.size"):
        too_big.result(0)
    fast.close(0)
    with pytest.raises(IllegalStateError, match="closed"):
        fast.send(TOPIC, b"v")
    with pytest.raises(IllegalStateError, match="closed"):
        fast.send_nowait(TOPIC, b"v")


@needs_c
def test_serializers_are_applied_by_the_python_path() -> None:
    producer = _producer(_dead_port(), **{"value.serializer": lambda v: repr(v).encode()})
    try:
        producer.send(TOPIC, {"a": 1}, partition=0)
        producer.send(TOPIC, b"raw", partition=0)
        (batch,) = _batches(producer)[0]
        assert [e[1] for e in batch.entries] == [b"{'a': 1}", b"b'raw'"]
    finally:
        producer.close(0)


@needs_c
def test_a_held_accumulator_lock_makes_send_wait_for_it(pair: tuple[Producer, Producer]) -> None:
    fast, _ = pair
    fast.send(TOPIC, b"first", partition=1)  # the batch exists: the C path would take this record
    acc = fast._accumulator
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with acc._lock:
            held.set()
            release.wait(5)

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(5)
    timer = threading.Timer(0.2, release.set)
    timer.start()
    started = time.monotonic()
    fast.send(TOPIC, b"second", partition=1)
    assert time.monotonic() - started >= 0.1  # it waited for the lock instead of appending meanwhile
    thread.join(5)
    (batch,) = _batches(fast)[1]
    assert [e[1] for e in batch.entries] == [b"first", b"second"]


@needs_c
def test_a_transactional_producer_takes_the_c_path_only_in_a_transaction() -> None:
    producer = _producer(_dead_port(), **{"transactional.id": "tx-1"})
    try:
        txn = producer._txn
        assert txn is not None
        counted = CountedSend(producer)

        assert C_FUTURES is not None
        types = (_TopicInfo, ProducerBatch, BuiltInPartitioner)
        send = C_FUTURES.SendPath(
            producer, producer._accumulator, counted, True, types, TxnState.IN_TRANSACTION
        )
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            send(TOPIC, b"v", partition=0)  # not in a transaction: Python's check_send raises
        assert counted.calls == 1
        txn.state = TxnState.IN_TRANSACTION  # (what begin_transaction() does, without a broker)
        for _ in range(5):
            send(TOPIC, b"v", partition=0)
        assert counted.calls == 2  # the first record made the batch; the other four took the C path
        (batch,) = _batches(producer)[0]
        assert len(batch.entries) == 5
        txn.state = TxnState.ABORTABLE_ERROR
        txn.last_error = KafkaError("boom")
        with pytest.raises(KafkaError, match="abort the transaction"):
            send(TOPIC, b"v", partition=0)
    finally:
        producer.close(0)


def test_a_subclass_that_overrides_send_keeps_it() -> None:
    class Mine(Producer):
        def send(self, *args: Any, **kwargs: Any) -> Any:
            return "mine"

    producer = Mine({"bootstrap.servers": f"127.0.0.1:{_dead_port()}"})
    try:
        assert producer.send("t", b"v") == "mine"
        assert "send" not in producer.__dict__
    finally:
        producer.close(0)


def test_pure_python_mode_keeps_the_python_methods() -> None:
    code = (
        "from kafka_handoff.producer import Producer\n"
        f"p = Producer({{'bootstrap.servers': '127.0.0.1:{_dead_port()}'}})\n"
        "print(type(p.send).__name__, type(p.send_nowait).__name__)\n"
        "p.close(0)\n"
    )
    env = {**os.environ, "KAFKA_HANDOFF_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["method", "method"]


@needs_c
def test_batches_are_untracked_until_they_hold_an_error_or_a_hook() -> None:
    tp = TopicPartition(TOPIC, 0)
    batch = ProducerBatch(tp, 0, 1000, 1000)
    assert not gc.is_tracked(batch) and not gc.is_tracked(batch.entries)
    batch.last_error = KafkaError("boom")  # its traceback could lead back to the batch
    assert gc.is_tracked(batch) and isinstance(batch.last_error, KafkaError)
    other = ProducerBatch(tp, 0, 1000, 1000)
    other.add_done_hook(lambda: None)
    assert gc.is_tracked(other)


def test_done_event_is_made_on_first_use_and_set_by_mark_done() -> None:
    tp = TopicPartition(TOPIC, 0)
    early = ProducerBatch(tp, 0, 1000, 1000)
    event = early.done_event  # made before completion
    assert not event.is_set() and not early.completed
    early.mark_done()
    assert event.is_set() and early.completed
    late = ProducerBatch(tp, 0, 1000, 1000)
    late.mark_done()
    assert late.done_event.is_set()  # made after completion: already set
    ran: list[int] = []
    late.add_done_hook(lambda: ran.append(1))
    assert ran == [1]  # a hook added after completion runs at once


@needs_c
@pytest.mark.parametrize("c_path", [True, False], ids=["c", "python"])
def test_a_memory_wait_past_max_block_ms_fails_the_record_as_python_does(c_path: bool) -> None:
    producer = _producer(_dead_port(), **{"buffer.memory": 2000, "max.block.ms": 50})
    try:
        send = producer.send if c_path else Producer.send.__get__(producer)
        send_nowait = producer.send_nowait if c_path else Producer.send_nowait.__get__(producer)
        send(TOPIC, b"x" * 500, partition=0)
        send(TOPIC, b"x" * 900, partition=1)  # two batches: buffer.memory is used up
        failed = send(TOPIC, b"x" * 900, partition=2)
        with pytest.raises(KafkaError, match=r"buffer\.memory"):
            failed.result(0)
        with pytest.raises(KafkaError, match=r"buffer\.memory"):
            send_nowait(TOPIC, b"x" * 900, partition=2)
        seen: list[BaseException | None] = []
        assert send_nowait(TOPIC, b"x" * 900, partition=2, callback=lambda md, exc: seen.append(exc)) is None
        assert len(seen) == 1 and isinstance(seen[0], KafkaError)
        send(TOPIC, b"fits", partition=0)  # the open batch of partition 0 still takes records
        assert [len(b.entries) for b in _batches(producer)[0]] == [2]
    finally:
        producer.close(0)
