"""The producer's sender and idempotence state machine against a fake broker, with a fake clock.

The fake broker keeps partition logs and applies the idempotent-append rules a Kafka broker applies
(per producer id and partition: epoch, next sequence, the last five batches for de-duplication), so the
tests check outcomes in the log -- no record lost, none duplicated, order kept -- not just requests.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_handoff.errors import ConnectionError_, KafkaTimeoutError, MessageTooLargeError
from kafka_handoff.producer.accumulator import RecordAccumulator
from kafka_handoff.producer.batch import RECORD_OVERHEAD_ESTIMATE, ProducerBatch
from kafka_handoff.producer.future import complete_all
from kafka_handoff.producer.idempotence import IdempotenceManager, ProducerState
from kafka_handoff.producer.sender import Sender
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.protocol.records import decode_batches, iter_batch_headers
from kafka_handoff.protocol.requests import FakeClock, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import BrokerNode, ClusterMetadata, PartitionInfo, RecordMetadata, TopicPartition

pytestmark = pytest.mark.unit

NOT_LEADER = 6
NOT_ENOUGH_REPLICAS = 19
OUT_OF_ORDER = 45
DUPLICATE_SEQUENCE = 46
UNKNOWN_PRODUCER_ID = 59
INVALID_RECORD = 87
CORRUPT_MESSAGE = 2
CLUSTER_AUTH = 31
MESSAGE_TOO_LARGE = 10


# ---------------------------------------------------------------------------------------------------------
# fake broker


@dataclass
class _ProducerEntry:
    epoch: int
    last_seq: int
    cache: collections.deque[tuple[int, int, int]] = field(
        default_factory=lambda: collections.deque(maxlen=5)
    )


class FakeBroker:
    """Partition logs with Kafka's idempotent append rules (enough of ``ProducerStateManager``)."""

    def __init__(self) -> None:
        self.logs: dict[TopicPartition, list[bytes | None]] = collections.defaultdict(list)
        self.producers: dict[tuple[int, TopicPartition], _ProducerEntry] = {}
        self.next_pid = 1000
        self.log_start: dict[TopicPartition, int] = collections.defaultdict(int)

    def append(self, tp: TopicPartition, data: bytes) -> tuple[int, int]:
        (header,) = list(iter_batch_headers(data))
        values = [r.value for r in decode_batches(data, topic=tp.topic, partition=tp.partition).records]
        pid, epoch, seq = header.producer_id, header.producer_epoch, header.base_sequence
        last = (seq + header.records_count - 1) & 0x7FFFFFFF if seq >= 0 else -1
        if pid >= 0:
            state = self.producers.get((pid, tp))
            if state is None:
                pass  # no state for this producer (new, or expired): any sequence is accepted
            elif epoch < state.epoch:
                return 47, -1  # INVALID_PRODUCER_EPOCH
            elif epoch > state.epoch:
                if seq != 0:
                    return OUT_OF_ORDER, -1
            else:
                for first_seq, last_seq, offset in state.cache:
                    if (first_seq, last_seq) == (seq, last):
                        return 0, offset  # duplicate of a recent batch: its original offset
                if seq != (state.last_seq + 1) & 0x7FFFFFFF:
                    return OUT_OF_ORDER, -1
        log = self.logs[tp]
        offset = len(log)
        log.extend(values)
        if pid >= 0:
            state = self.producers.get((pid, tp))
            if state is None or state.epoch != epoch:
                state = self.producers[(pid, tp)] = _ProducerEntry(epoch, last)
            state.last_seq = last
            state.cache.append((seq, last, offset))
        return 0, offset


Action = Callable[[TopicPartition, bytes], tuple[int, int] | str | None]
"""Fault injection per partition of a produce request: return ``(error_code, offset)`` to answer that
instead of appending, ``"append_then_fail"`` to append and then fail the whole request (a timeout after
the broker wrote), ``"fail"`` to fail the request without appending, or None for normal handling."""


class Harness:
    def __init__(
        self,
        *,
        partitions: int = 1,
        leaders: dict[int, int] | None = None,
        idempotent: bool = True,
        acks: int = -1,
        linger_ms: int = 0,
        batch_size: int = 16384,
        max_in_flight: int = 5,
        delivery_timeout_ms: int = 120_000,
        retries: int = 2**31 - 1,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        max_request_size: int = 1048576,
    ) -> None:
        self.clock = FakeClock()
        self.broker = FakeBroker()
        self.metadata = MetadataManager()
        self.leaders = leaders or {p: 1 for p in range(partitions)}
        self.partitions = partitions
        self.set_leaders(self.leaders)
        self.acc = RecordAccumulator(
            batch_size=batch_size,
            linger_ms=linger_ms,
            buffer_memory=64 * 1024 * 1024,
            delivery_timeout_ms=delivery_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            max_request_size=max_request_size,
            rng=random.Random(0),
            clock=self.clock.now_ms,
        )
        self.acc.update_topic("t", partitions, list(range(partitions)))
        self.idem = IdempotenceManager() if idempotent else None
        self.done: list[tuple[ProducerBatch, int, BaseException | None]] = []
        self.sender = Sender(
            self.acc,
            self.metadata,
            self._on_done,
            idempotence=self.idem,
            acks=acks,
            retries=retries,
            delivery_timeout_ms=delivery_timeout_ms,
            max_in_flight=max_in_flight,
            max_request_size=max_request_size,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
        )
        self.in_flight: list[UnsentRequest] = []
        self.actions: list[Action] = []

    def set_leaders(self, leaders: dict[int, int]) -> None:
        self.leaders = leaders
        self.metadata.cluster = ClusterMetadata(
            brokers={n: BrokerNode(n, "127.0.0.1", 9000 + n) for n in (1, 2, 3)},
            partitions={
                "t": tuple(PartitionInfo("t", p, leaders.get(p, -1)) for p in range(self.partitions))
            },
        )

    def _on_done(
        self, batch: ProducerBatch, base_offset: int, log_append_ms: int, error: BaseException | None
    ) -> None:
        self.done.append((batch, base_offset, error))
        futures = [e[4] for e in batch.entries]
        if error is None:
            complete_all(
                futures,
                [
                    RecordMetadata(
                        batch.topic, batch.partition, base_offset + i if base_offset >= 0 else -1, e[2]
                    )
                    for i, e in enumerate(batch.entries)
                ],
            )
        else:
            complete_all(futures, None, error)
        self.acc.deallocate(batch)

    # -- driving --------------------------------------------------------------------------------------
    def send(self, value: bytes, partition: int = 0) -> Future[RecordMetadata]:
        fut: Future[RecordMetadata] = Future()
        self.acc.append(
            "t",
            partition,
            (None, value, 1000, None, fut, None),
            len(value) + RECORD_OVERHEAD_ESTIMATE,
            self.clock.now_ms(),
        )
        return fut

    def poll(self) -> list[UnsentRequest]:
        result = self.sender.poll(self.clock.now_ms())
        self.in_flight.extend(result.unsent)
        self.last_wait = result.wait_ms
        return result.unsent

    def produce_requests(self) -> list[UnsentRequest]:
        return [r for r in self.in_flight if r.api_key == ApiKey.PRODUCE]

    @staticmethod
    def batches_of(request: UnsentRequest) -> list[tuple[TopicPartition, bytes]]:
        # What the network client would send: the kio request entity of the version.
        entity = wire.build_request(ApiKey.PRODUCE, 11, request.body(11))
        return [
            (TopicPartition(str(t.name), int(p.index)), bytes(p.records))
            for t in entity.topic_data
            for p in t.partition_data
        ]

    @staticmethod
    def header(data: bytes) -> Any:
        (h,) = list(iter_batch_headers(data))
        return h

    def answer(self, request: UnsentRequest | None = None) -> None:
        """Let the fake broker handle one outstanding request (the oldest by default)."""
        if request is None:
            request = self.in_flight[0]
        self.in_flight.remove(request)
        now = self.clock.now_ms()
        if request.api_key == ApiKey.INIT_PRODUCER_ID:
            pid = self.broker.next_pid
            self.broker.next_pid += 1
            assert request.on_response is not None
            request.on_response(SimpleNamespace(error_code=0, producer_id=pid, producer_epoch=0), 5, now)
            return
        assert request.api_key == ApiKey.PRODUCE
        if not request.expect_response:
            for tp, data in self.batches_of(request):
                self.broker.append(tp, data)
            assert request.on_response is not None
            request.on_response(None, 11, now)
            return
        topics: dict[str, list[SimpleNamespace]] = collections.defaultdict(list)
        fail_request = False
        for tp, data in self.batches_of(request):
            outcome: tuple[int, int] | str | None = None
            for action in self.actions:
                outcome = action(tp, data)
                if outcome is not None:
                    break
            if outcome == "fail":
                fail_request = True
                continue
            if outcome == "append_then_fail":
                self.broker.append(tp, data)
                fail_request = True
                continue
            code, offset = outcome if isinstance(outcome, tuple) else self.broker.append(tp, data)
            topics[tp.topic].append(
                SimpleNamespace(
                    index=tp.partition,
                    error_code=code,
                    base_offset=offset,
                    log_append_time=None,
                    log_start_offset=self.broker.log_start[tp],
                    record_errors=(),
                    error_message=None,
                )
            )
        if fail_request:
            assert request.on_failure is not None
            request.on_failure(KafkaTimeoutError("Produce request timed out"), now)
            return
        response = SimpleNamespace(
            responses=[SimpleNamespace(name=t, partition_responses=parts) for t, parts in topics.items()],
            throttle_time=None,
        )
        assert request.on_response is not None
        request.on_response(response, 11, now)

    def run(self, max_steps: int = 10_000, advance_ms: int = 10) -> None:
        """Poll and answer until nothing is queued or in flight (advancing the clock when idle)."""
        for _ in range(max_steps):
            self.poll()
            if self.in_flight:
                self.answer()
                continue
            if not self.sender.has_pending():
                return
            self.clock.advance(advance_ms)
        raise AssertionError("the sender did not settle")

    def init(self) -> None:
        (request,) = self.poll()
        assert request.api_key == ApiKey.INIT_PRODUCER_ID
        self.answer(request)


def values(n: int, prefix: str = "v") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


# ---------------------------------------------------------------------------------------------------------
# idempotence basics


def test_init_producer_id_comes_first() -> None:
    h = Harness()
    h.send(b"a")
    first = h.poll()
    assert [r.api_key for r in first] == [ApiKey.INIT_PRODUCER_ID]
    assert h.poll() == []  # nothing is produced while the id is pending
    h.answer(first[0])
    (produce,) = h.poll()
    ((_tp, data),) = h.batches_of(produce)
    header = h.header(data)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1000, 0, 0)


def test_init_producer_id_retried_after_failure_with_backoff() -> None:
    h = Harness()
    (request,) = h.poll()
    assert request.on_failure is not None
    request.on_failure(ConnectionError_("down"), h.clock.now_ms())
    h.in_flight.clear()
    assert h.poll() == []  # backing off
    h.clock.advance(200)
    (again,) = h.poll()
    assert again.api_key == ApiKey.INIT_PRODUCER_ID


def test_sequences_count_records_per_partition() -> None:
    h = Harness(partitions=2, batch_size=200)
    h.init()
    for v in values(12, "a"):
        h.send(v, 0)
    for v in values(5, "b"):
        h.send(v, 1)
    seen: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for _ in range(20):
        for request in h.poll():
            for tp, data in h.batches_of(request):
                header = h.header(data)
                seen[tp.partition].append((header.base_sequence, header.records_count))
        while h.in_flight:
            h.answer()
    for runs in seen.values():
        expected = 0
        for seq, count in runs:
            assert seq == expected
            expected += count
    assert sum(c for _s, c in seen[0]) == 12 and sum(c for _s, c in seen[1]) == 5
    assert h.broker.logs[TopicPartition("t", 0)] == values(12, "a")


# ---------------------------------------------------------------------------------------------------------
# retries keep the sequence; the broker de-duplicates


def test_retry_after_timeout_resends_same_bytes_and_is_deduplicated() -> None:
    h = Harness(retry_backoff_ms=100)
    h.init()
    futures = [h.send(v) for v in values(3)]
    (request,) = h.poll()
    ((_tp, original),) = h.batches_of(request)
    h.actions.append(lambda tp, data: "append_then_fail")  # broker writes, the answer is lost
    h.answer(request)
    h.actions.clear()
    assert h.broker.logs[TopicPartition("t", 0)] == values(3)
    assert not any(f.done() for f in futures)
    assert h.poll() == []  # retry backoff
    h.clock.advance(79)
    assert h.poll() == []  # still inside the backoff (100 ms -20% jitter at least)
    h.clock.advance(50)
    (retry,) = h.poll()
    ((_tp, resent),) = h.batches_of(retry)
    assert resent == original  # same producer id, epoch, sequence: same bytes
    h.answer(retry)
    assert h.broker.logs[TopicPartition("t", 0)] == values(3)  # no duplicate
    assert [f.result(0).offset for f in futures] == [0, 1, 2]


def test_duplicate_sequence_number_counts_as_success() -> None:
    h = Harness()
    h.init()
    fut = h.send(b"x")
    (request,) = h.poll()
    h.actions.append(lambda tp, data: (DUPLICATE_SEQUENCE, -1))
    h.answer(request)
    assert fut.result(0).offset == -1
    assert h.idem is not None and h.idem.last_acked_sequence(TopicPartition("t", 0)) == 0


def test_five_in_flight_and_ordering_survives_a_failed_first_request() -> None:
    h = Harness(batch_size=100, max_in_flight=5)
    h.init()
    h.send(b"first")
    h.run()  # the broker knows the producer now (sequence 0 acknowledged)
    data = values(40)
    futures = [h.send(v) for v in data]
    requests = h.poll()
    assert len(requests) == 5  # up to max.in.flight requests to the broker, one batch of the partition each
    assert h.poll() == []  # a sixth must wait
    first_seqs = [h.header(h.batches_of(r)[0][1]).base_sequence for r in requests]
    assert first_seqs == sorted(first_seqs) and first_seqs[0] == 1
    # The first request fails with a retriable error (nothing written); the broker then rejects the next
    # four, which would leave a gap, with OUT_OF_ORDER_SEQUENCE_NUMBER.
    h.actions.append(lambda tp, d: (NOT_ENOUGH_REPLICAS, -1) if h.header(d).base_sequence == 1 else None)
    for request in list(requests):
        h.answer(request)
    h.actions.clear()
    assert h.broker.logs[TopicPartition("t", 0)] == [b"first"]
    assert not any(f.done() for f in futures)
    # Retries go one at a time, starting with the lowest sequence, until the partition caught up.
    h.clock.advance(200)
    (retry,) = h.poll()
    assert h.header(h.batches_of(retry)[0][1]).base_sequence == 1
    assert h.poll() == []  # the next retried batch waits for the first one
    h.run()
    assert h.broker.logs[TopicPartition("t", 0)] == [b"first", *data]
    assert [f.result(0).offset for f in futures] == list(range(1, 41))
    assert h.idem is not None and h.idem.epoch == 0  # no epoch bump was needed


def test_permanent_failure_leaves_a_gap_and_bumps_the_epoch() -> None:
    h = Harness(batch_size=100)
    h.init()
    h.send(b"first")
    h.run()
    data = values(12)
    futures = [h.send(v) for v in data]
    requests = h.poll()
    assert len(requests) >= 2
    first_batch = h.batches_of(requests[0])[0][1]
    first_count = h.header(first_batch).records_count
    # The first batch is rejected for good; the broker answers the rest with OUT_OF_ORDER (gap).
    h.actions.append(lambda tp, d: (INVALID_RECORD, -1) if h.header(d).base_sequence == 1 else None)
    for request in list(requests):
        h.answer(request)
    h.actions.clear()
    assert all(isinstance(f.exception(0), Exception) for f in futures[:first_count])
    h.run()
    assert h.idem is not None and h.idem.epoch == 1
    # Everything after the failed batch is in the log once, in order, under the new epoch from sequence 0.
    assert h.broker.logs[TopicPartition("t", 0)] == [b"first", *data[first_count:]]
    assert [f.result(0).offset for f in futures[first_count:]] == list(range(1, len(data) - first_count + 1))
    state = h.broker.producers[(1000, TopicPartition("t", 0))]
    assert state.epoch == 1 and state.cache[0][0] == 0  # the new epoch started at sequence 0


def test_out_of_order_for_a_later_batch_retries_without_bump() -> None:
    h = Harness(batch_size=100)
    h.init()
    h.send(b"first")
    h.run()
    data = values(10)
    futures = [h.send(v) for v in data]
    requests = h.poll()
    # The first request is still unanswered when the broker rejects the second (it has not seen seq 0).
    h.actions.append(lambda tp, d: (OUT_OF_ORDER, -1) if h.header(d).base_sequence > 1 else None)
    h.answer(requests[1])
    h.actions.clear()
    assert h.idem is not None and not h.idem.epoch_bump_required
    h.run()
    assert h.idem.epoch == 0
    assert h.broker.logs[TopicPartition("t", 0)] == [b"first", *data]
    assert all(f.result(0).offset >= 0 for f in futures)


def test_unknown_producer_id_bumps_epoch_and_resends_from_zero() -> None:
    h = Harness()
    h.init()
    h.send(b"a")
    h.run()
    fut = h.send(b"b")
    (request,) = h.poll()
    # The broker lost this producer's state (log start moved past the acknowledged records).
    h.broker.log_start[TopicPartition("t", 0)] = 5
    h.actions.append(lambda tp, d: (UNKNOWN_PRODUCER_ID, -1))
    h.answer(request)
    h.actions.clear()
    h.clock.advance(200)
    (retry,) = h.poll()
    header = h.header(h.batches_of(retry)[0][1])
    assert (header.producer_epoch, header.base_sequence) == (1, 0)
    h.answer(retry)
    assert fut.result(0).offset == 1
    assert h.broker.logs[TopicPartition("t", 0)] == [b"a", b"b"]


def test_epoch_exhausted_gets_a_new_producer_id() -> None:
    h = Harness()
    h.init()
    assert h.idem is not None
    h.idem.epoch = 32767
    h.idem.request_epoch_bump(TopicPartition("t", 0))
    h.send(b"x")
    (request,) = h.poll()
    assert request.api_key == ApiKey.INIT_PRODUCER_ID
    h.answer(request)
    (produce,) = h.poll()
    header = h.header(h.batches_of(produce)[0][1])
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1001, 0, 0)


def test_fatal_init_error_fails_queued_records() -> None:
    h = Harness()
    fut = h.send(b"x")
    (request,) = h.poll()
    assert request.on_response is not None
    request.on_response(SimpleNamespace(error_code=CLUSTER_AUTH, producer_id=-1, producer_epoch=-1), 5, 0)
    h.in_flight.clear()
    h.poll()
    assert h.idem is not None and h.idem.state is ProducerState.FATAL
    assert "CLUSTER_AUTHORIZATION_FAILED" in str(fut.exception(0))


# ---------------------------------------------------------------------------------------------------------
# delivery timeout


def test_queued_batch_expires_after_delivery_timeout() -> None:
    h = Harness(delivery_timeout_ms=30_000, leaders={0: -1})  # no leader: nothing can be sent
    h.init()
    fut = h.send(b"x")
    h.poll()
    assert h.metadata._need_update  # unknown leader -> metadata refresh requested
    h.clock.advance(29_999)
    h.poll()
    assert not fut.done()
    h.clock.advance(1)
    h.poll()
    error = fut.exception(0)
    assert isinstance(error, KafkaTimeoutError)
    assert "Expiring 1 record(s) for t-0" in str(error) and "delivery.timeout.ms=30000" in str(error)


def test_poll_wait_covers_linger_and_expiry() -> None:
    h = Harness(linger_ms=50, delivery_timeout_ms=30_000)
    h.init()
    h.send(b"x")
    assert h.poll() == []
    assert 0 < h.last_wait <= 50
    h.clock.advance(50)
    assert len(h.poll()) == 1


def test_in_flight_expiry_holds_new_batches_until_resolved_then_continues() -> None:
    h = Harness(delivery_timeout_ms=30_000)
    h.init()
    first = h.send(b"a")
    (request,) = h.poll()
    h.clock.advance(30_000)
    h.poll()
    assert isinstance(first.exception(0), KafkaTimeoutError)
    second = h.send(b"b")
    assert h.poll() == []  # the sequence of the expired batch is unresolved: hold new data
    h.answer(request)  # ...the late answer says it was written
    h.run()
    assert h.idem is not None and h.idem.epoch == 0  # resolved: it was acknowledged, no bump
    assert second.result(0).offset == 1
    assert h.broker.logs[TopicPartition("t", 0)] == [b"a", b"b"]


def test_in_flight_expiry_bumps_epoch_when_the_batch_was_not_written() -> None:
    h = Harness(delivery_timeout_ms=30_000)
    h.init()
    first = h.send(b"a")
    (request,) = h.poll()
    h.clock.advance(30_000)
    h.poll()
    assert first.done()
    second = h.send(b"b")
    h.actions.append(lambda tp, d: "fail")  # the request fails: the batch was never written
    h.answer(request)
    h.actions.clear()
    h.run()
    assert h.idem is not None and h.idem.epoch == 1
    assert second.result(0).offset == 0
    assert h.broker.logs[TopicPartition("t", 0)] == [b"b"]


def test_gap_after_an_expired_retried_batch_bumps_the_epoch_at_once() -> None:
    """Regression: a batch retried across a leader outage expires (its sequence is unresolved); the batch
    after it is then answered OUT_OF_ORDER_SEQUENCE_NUMBER.  As Java does, that proves the gap: the epoch is
    bumped at once and the later batch is written -- it used to be retried without a bump until it expired
    too (the unresolved marker held the partition's next sequence, not the one after the expired batch)."""
    h = Harness(delivery_timeout_ms=30_000, batch_size=100)
    h.init()
    h.send(b"a0")
    h.run()  # the broker knows the producer (sequence 0 acknowledged)
    tp = TopicPartition("t", 0)
    lost = h.send(b"a1")
    (r1,) = h.poll()
    h.clock.advance(20_000)
    later = h.send(b"a2")
    (r2,) = h.poll()
    assert [h.header(h.batches_of(r)[0][1]).base_sequence for r in (r1, r2)] == [1, 2]
    h.actions.append(lambda tp_, d: "fail")  # the old leader dies: nothing written
    h.answer(r1)
    h.actions.clear()
    h.answer(r2)  # a new leader that never saw sequence 1: OUT_OF_ORDER, retried without a bump (not next)
    assert h.idem is not None and h.idem.epoch == 0
    h.clock.advance(1_000)
    (r3,) = h.poll()  # a1 retried
    assert h.header(h.batches_of(r3)[0][1]).base_sequence == 1
    h.clock.advance(10_000)  # a1 expires while its retry is unanswered
    assert h.poll() == []
    assert isinstance(lost.exception(0), KafkaTimeoutError)
    h.actions.append(lambda tp_, d: "fail")
    h.answer(r3)  # ...and it was not written
    h.actions.clear()
    steps_before = h.clock.now_ms()
    h.run()
    assert later.result(0).offset == 1  # delivered, not expired
    assert h.clock.now_ms() - steps_before < 5_000  # well before a2's own delivery timeout
    assert h.idem.epoch == 1
    assert h.broker.logs[tp] == [b"a0", b"a2"]


def test_retriable_error_after_delivery_timeout_fails_with_timeout() -> None:
    h = Harness(delivery_timeout_ms=30_000, idempotent=False)
    fut = h.send(b"a")
    (request,) = h.poll()
    h.clock.advance(30_001)
    h.in_flight.remove(request)
    assert request.on_failure is not None
    request.on_failure(ConnectionError_("connection lost"), h.clock.now_ms())
    error = fut.exception(0)
    assert isinstance(error, KafkaTimeoutError) and "Expiring 1 record(s)" in str(error)


# ---------------------------------------------------------------------------------------------------------
# limits, acks, leaders, backoff


def test_at_most_max_in_flight_requests_per_broker() -> None:
    h = Harness(partitions=10, batch_size=100, max_in_flight=5)
    h.init()
    for i in range(400):
        h.send(b"value-%d" % i, i % 10)
    peak = 0
    for _ in range(1000):
        h.poll()
        peak = max(peak, len(h.produce_requests()))
        if not h.in_flight:
            if not h.sender.has_pending():
                break
            h.clock.advance(10)
            continue
        h.answer()
    assert peak == 5
    assert sum(len(v) for v in h.broker.logs.values()) == 400


def test_request_holds_one_batch_per_partition_within_max_request_size() -> None:
    h = Harness(partitions=4, batch_size=1000, max_request_size=2500, idempotent=False)
    for p in range(4):
        for _ in range(8):
            h.send(b"x" * 100, p)
    request = h.poll()[0]
    parts = [tp.partition for tp, _d in h.batches_of(request)]
    assert len(parts) == len(set(parts)) == 2  # two ~1 KB batches fit 2.5 KB, one per partition


def test_acks_zero_completes_without_offsets() -> None:
    h = Harness(idempotent=False, acks=0)
    fut = h.send(b"x")
    (request,) = h.poll()
    assert not request.expect_response
    h.answer(request)
    assert fut.result(0).offset == -1
    assert h.broker.logs[TopicPartition("t", 0)] == [b"x"]


def test_not_leader_refreshes_metadata_and_retries_on_new_leader() -> None:
    h = Harness(idempotent=False)
    fut = h.send(b"x")
    (request,) = h.poll()
    assert request.node == 1
    h.metadata._need_update = False
    h.actions.append(lambda tp, d: (NOT_LEADER, -1))
    h.answer(request)
    h.actions.clear()
    assert h.metadata._need_update
    h.set_leaders({0: 2})
    h.clock.advance(200)
    (retry,) = h.poll()
    assert retry.node == 2
    h.answer(retry)
    assert fut.result(0).offset == 0


def _not_leader_response(leader: int, epoch: int, endpoints: list[tuple[int, str, int]]) -> Any:
    """A Produce v10+ answer: NOT_LEADER_OR_FOLLOWER with the new leader (KIP-951)."""
    partition = SimpleNamespace(
        index=0,
        error_code=NOT_LEADER,
        base_offset=-1,
        log_append_time=None,
        log_start_offset=-1,
        record_errors=(),
        error_message=None,
        current_leader=SimpleNamespace(leader_id=leader, leader_epoch=epoch),
    )
    return SimpleNamespace(
        responses=[SimpleNamespace(name="t", partition_responses=[partition])],
        throttle_time=None,
        node_endpoints=[
            SimpleNamespace(node_id=n, host=host, port=port, rack=None) for n, host, port in endpoints
        ],
    )


def _with_epoch(h: Harness, leader: int, epoch: int) -> None:
    h.metadata.cluster = ClusterMetadata(
        brokers={n: BrokerNode(n, "127.0.0.1", 9000 + n) for n in (1, 2, 3)},
        partitions={"t": (PartitionInfo("t", 0, leader, leader_epoch=epoch),)},
    )


@pytest.mark.parametrize("idempotent", [False, True])
def test_kip951_leader_hint_sends_the_retry_to_the_new_leader_at_once(idempotent: bool) -> None:
    h = Harness(idempotent=idempotent, retry_backoff_ms=1000)
    _with_epoch(h, leader=1, epoch=3)
    if idempotent:
        h.init()
    fut = h.send(b"x")
    (request,) = h.poll()
    assert request.node == 1
    h.in_flight.remove(request)
    assert request.on_response is not None
    request.on_response(_not_leader_response(4, 4, [(4, "new-leader", 9094)]), 11, h.clock.now_ms())
    tp = TopicPartition("t", 0)
    assert h.metadata.cluster.leader_for(tp) == 4
    assert h.metadata.cluster.brokers[4] == BrokerNode(4, "new-leader", 9094)
    (retry,) = h.poll()  # no retry backoff, no metadata round trip
    assert retry.node == 4
    h.answer(retry)
    assert fut.result(0).offset == 0
    assert h.broker.logs[tp] == [b"x"]


def test_kip951_stale_leader_hint_is_ignored_and_the_retry_backs_off() -> None:
    h = Harness(idempotent=False, retry_backoff_ms=1000)
    _with_epoch(h, leader=1, epoch=3)
    fut = h.send(b"x")
    (request,) = h.poll()
    h.in_flight.remove(request)
    assert request.on_response is not None
    h.metadata._need_update = False
    request.on_response(_not_leader_response(2, 2, []), 11, h.clock.now_ms())  # epoch 2 < 3: stale
    assert h.metadata.cluster.leader_for(TopicPartition("t", 0)) == 1
    assert h.metadata._need_update  # a metadata refresh is still asked for
    assert h.poll() == []  # the retry waits for its backoff
    h.clock.advance(1_300)
    (retry,) = h.poll()
    assert retry.node == 1
    h.answer(retry)
    assert fut.result(0).offset == 0


def test_retry_to_a_new_leader_from_a_metadata_refresh_skips_the_backoff() -> None:
    """As Java's RecordAccumulator (KIP-951): the retry backoff is for a broker that failed; once the
    metadata names another leader the retried batch goes there at once."""
    h = Harness(idempotent=False, retry_backoff_ms=1000)
    fut = h.send(b"x")
    (request,) = h.poll()
    h.actions.append(lambda tp, d: (NOT_LEADER, -1))
    h.answer(request)
    h.actions.clear()
    assert h.poll() == []  # same leader: the backoff holds
    h.set_leaders({0: 2})  # the refresh names the new leader
    (retry,) = h.poll()
    assert retry.node == 2
    h.answer(retry)
    assert fut.result(0).offset == 0


def test_kip951_hint_moves_every_in_flight_batch_of_the_partition_in_order() -> None:
    h = Harness(batch_size=100, retry_backoff_ms=1000)
    _with_epoch(h, leader=1, epoch=3)
    h.init()
    h.send(b"first")
    h.run()  # the broker knows the producer now: the partition's batches are pipelined
    data = values(30)
    futures = [h.send(v) for v in data]
    requests = h.poll()
    assert len(requests) == 5 and all(r.node == 1 for r in requests)
    for request in list(requests):  # the old leader answers every request with the hint
        h.in_flight.remove(request)
        assert request.on_response is not None
        request.on_response(_not_leader_response(2, 4, [(2, "127.0.0.1", 9002)]), 11, h.clock.now_ms())
    start = h.clock.now_ms()
    h.run()
    assert h.clock.now_ms() - start < 1000  # no retry waited for its backoff
    assert h.broker.logs[TopicPartition("t", 0)] == [b"first", *data]  # once each, in order
    assert [f.result(0).offset for f in futures] == list(range(1, 31))
    assert h.idem is not None and h.idem.epoch == 0


def test_retry_backoff_grows_exponentially_up_to_the_maximum() -> None:
    h = Harness(idempotent=False, retry_backoff_ms=100, retry_backoff_max_ms=1000)
    fut = h.send(b"x")
    h.actions.append(lambda tp, d: (NOT_LEADER, -1))
    gaps = []
    last_send = h.clock.now_ms()
    for _ in range(7):
        while True:
            requests = h.poll()
            if requests:
                break
            h.clock.advance(1)
        gaps.append(h.clock.now_ms() - last_send)
        last_send = h.clock.now_ms()
        h.answer(requests[0])
    gaps = gaps[1:]  # the first send is immediate
    for gap, base in zip(gaps, [100, 200, 400, 800, 1000, 1000], strict=True):
        assert 0.8 * base - 1 <= gap <= 1.2 * base + 1
    assert not fut.done()


def test_retries_exhausted_fails_with_the_broker_error() -> None:
    h = Harness(idempotent=False, retries=2)
    fut = h.send(b"x")
    h.actions.append(lambda tp, d: (NOT_LEADER, -1))
    h.run()
    assert "NOT_LEADER_OR_FOLLOWER" in str(fut.exception(0))


def test_message_too_large_from_broker_is_not_retried() -> None:
    h = Harness()
    h.init()
    fut = h.send(b"x")
    h.actions.append(lambda tp, d: (MESSAGE_TOO_LARGE, -1))
    (request,) = h.poll()
    h.answer(request)
    assert isinstance(fut.exception(0), MessageTooLargeError)
    assert h.poll() == []


def test_abort_all_fails_queued_and_in_flight() -> None:
    h = Harness(partitions=2)
    h.init()
    in_flight = h.send(b"a", 0)
    h.poll()
    h.set_leaders({0: 1, 1: -1})
    queued = h.send(b"b", 1)
    h.poll()
    error = RuntimeError("closed")
    assert h.sender.abort_all(error, h.clock.now_ms()) == 2
    assert in_flight.exception(0) is error and queued.exception(0) is error
    assert not h.sender.has_pending()


def test_first_batch_of_a_fresh_partition_is_acknowledged_before_more_are_sent() -> None:
    # A fresh partition: the broker's metadata already names its leader, but the leader does not host the
    # partition yet (KRaft publishes the metadata image before the replica manager creates the partition),
    # so it answers NOT_LEADER_OR_FOLLOWER for a while.  Had a later pipelined batch been written then --
    # at its sequence: the broker accepts any first sequence from a producer it has no state for -- the
    # first batches would be refused for ever (OUT_OF_ORDER_SEQUENCE_NUMBER), a silent stall until
    # delivery.timeout.ms.  So the partition gets one batch until the broker acknowledged one.
    h = Harness(batch_size=100, retry_backoff_ms=10, retry_backoff_max_ms=50)
    h.init()
    data = values(30)
    futures = [h.send(v) for v in data]
    (first,) = h.poll()
    assert h.poll() == []
    h.actions.append(lambda tp, d: (NOT_LEADER, -1))
    h.answer(first)
    h.clock.advance(20)
    (retry,) = h.poll()
    assert h.header(h.batches_of(retry)[0][1]).base_sequence == 0
    h.answer(retry)  # still not hosted
    h.actions.clear()
    h.clock.advance(60)
    (retry,) = h.poll()
    h.answer(retry)  # hosted now: sequence 0 written
    requests = h.poll()
    assert len(requests) == 5  # pipelined from now on
    h.run()
    assert h.broker.logs[TopicPartition("t", 0)] == data  # once each, in order
    assert [f.result(0).offset for f in futures] == list(range(30))
    assert h.idem is not None and h.idem.epoch == 0


def test_out_of_order_behind_the_acknowledged_sequence_bumps_the_epoch_instead_of_stalling() -> None:
    # The broker lost this producer's state for the partition (it accepts any sequence again); while the
    # first pipelined batches are answered NOT_LEADER_OR_FOLLOWER a later one is written.  The earlier
    # batches' sequences are behind the acknowledged one and no earlier batch can fill the gap: without an
    # epoch bump their retries get OUT_OF_ORDER_SEQUENCE_NUMBER until delivery.timeout.ms.
    h = Harness(batch_size=100, retry_backoff_ms=10, retry_backoff_max_ms=50)
    h.init()
    h.send(b"v-1")
    h.run()
    h.broker.producers.clear()
    data = values(30)
    futures = [h.send(v) for v in data]
    requests = h.poll()
    assert len(requests) >= 3
    h.actions.append(lambda tp, d: (NOT_LEADER, -1))
    h.answer(requests[0])
    h.answer(requests[1])
    h.actions.clear()
    h.answer(requests[2])  # written at its sequence
    h.run(max_steps=2000)  # 20 s of fake time, far below the delivery timeout
    assert all(f.exception(0) is None for f in futures)
    log = h.broker.logs[TopicPartition("t", 0)]
    assert sorted(log, key=lambda v: int((v or b"v")[1:])) == [b"v-1", *data]  # each record once
    assert h.idem is not None and h.idem.epoch == 1  # the gap was closed by an epoch bump


def test_records_stalled_longer_than_request_timeout_are_warned_about_with_the_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness(partitions=2, leaders={0: 1})  # partition 1 has no leader
    h.init()
    h.send(b"a", partition=0)
    stuck = h.send(b"b", partition=1)
    h.actions.append(lambda tp, d: (NOT_ENOUGH_REPLICAS, -1) if tp.partition == 0 else None)
    with caplog.at_level("INFO", logger="kafka_handoff.producer.sender"):
        for _ in range(300):  # 30 s of fake time: nothing is warned about before request.timeout.ms
            h.poll()
            while h.in_flight:
                h.answer()
            h.clock.advance(100)
        assert h.sender.stall_warnings == 0
        for _ in range(20):
            h.poll()
            while h.in_flight:
                h.answer()
            h.clock.advance(100)
        assert h.sender.stall_warnings == 1  # one line for both partitions, not one per poll
        (line,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert "t-0: 1 record(s)" in line and "attempt(s) failed, the last with" in line
        assert "t-1: 1 record(s)" in line and "no leader in metadata" in line
        assert not stuck.done()
        # The partition gets a leader and the broker recovers: delivered, and said so.
        h.actions.clear()
        h.set_leaders({0: 1, 1: 1})
        h.clock.advance(2000)
        h.run()
        h.clock.advance(1000)
        h.poll()
        assert stuck.result(0).offset == 0
        infos = [m for r in caplog.records if r.levelname == "INFO" and "again" in (m := r.getMessage())]
        assert sorted(infos) == ["records for t-0 are delivered again", "records for t-1 are delivered again"]


def test_batches_filled_while_requests_are_in_flight_wait_up_to_coalesce_ms_and_go_together() -> None:
    h = Harness(partitions=3, batch_size=200, linger_ms=5, idempotent=False)
    assert h.acc.coalesce_ms == 2  # min(linger.ms, 2)
    for _ in range(2):
        h.send(b"x" * 90, 0)  # 102 bytes each: the second closes the first batch (full)
    first = h.poll()
    assert [tp.partition for tp, _d in h.batches_of(first[0])] == [0]
    for p in (1, 2):
        for _ in range(2):
            h.send(b"x" * 90, p)
    assert h.poll() == []  # a request is in flight: the full batches of 1 and 2 wait ...
    assert 0 < h.last_wait <= 2  # ... at most coalesce_ms
    h.clock.advance(2)
    (together,) = h.poll()
    # One request, not one per batch (and, as in Java, the broker's lingering partition 0 comes along).
    assert sorted(tp.partition for tp, _d in h.batches_of(together)) == [0, 1, 2]
    for _ in range(2):
        h.send(b"y" * 90, 1)
    assert h.poll() == []
    h.acc.begin_flush()  # a flush drains at once
    try:
        assert h.poll() != []
    finally:
        h.acc.end_flush()
    h.run()
    assert sum(len(v) for v in h.broker.logs.values()) == 8


def test_without_linger_nothing_is_held() -> None:
    h = Harness(partitions=2, batch_size=200, linger_ms=0, idempotent=False)
    assert h.acc.coalesce_ms == 0
    h.send(b"x" * 90, 0)
    assert h.poll() != []
    h.send(b"x" * 90, 1)
    assert h.poll() != []  # sent at once although a request is in flight
