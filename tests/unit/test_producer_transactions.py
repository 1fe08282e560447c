"""The transactional producer's state machine (producer/transactions.py), driven with a fake clock and
scripted answers."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from crc32c import crc32c

from kafka_handoff.errors import (
    CommitFailedError,
    IllegalStateError,
    InvalidProducerEpochError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
)
from kafka_handoff.producer.batch import ProducerBatch
from kafka_handoff.producer.future import make_entry
from kafka_handoff.producer.idempotence import IdempotenceManager, ProducerState
from kafka_handoff.producer.transactions import TransactionManager, TxnState, mark_transactional
from kafka_handoff.protocol.records import iter_batch_headers
from kafka_handoff.protocol.requests import ANY_NODE, COORDINATOR, FakeClock, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import BrokerNode, ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.unit

TP0 = TopicPartition("out", 0)
TP1 = TopicPartition("out", 1)


def state_of(tm: TransactionManager) -> TxnState:
    """Read the state through a call, so mypy does not narrow it across the state machine's transitions."""
    return tm.state


class Harness:
    def __init__(self, transaction_version: tuple[int, int] | None = (1, 4)) -> None:
        self.transaction_version = transaction_version
        self.clock = FakeClock()
        self.idem = IdempotenceManager()
        self.coordinators: list[BrokerNode | None] = []
        self.pending = False
        self.aborted: list[BaseException] = []
        self.tm = TransactionManager(
            "tx",
            60_000,
            self.idem,
            retry_backoff_ms=100,
            retry_backoff_max_ms=1000,
            set_coordinator=lambda node, now: self.coordinators.append(node),
            transaction_version=lambda: self.transaction_version,
        )
        self.tm.has_pending_batches = lambda: self.pending
        self.tm.abort_undrained = lambda error, now: self.aborted.append(error)

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def poll(self) -> list[UnsentRequest]:
        return self.tm.poll(self.now).unsent

    def one(self, api_key: int) -> UnsentRequest:
        unsent = self.poll()
        assert [r.api_key for r in unsent] == [api_key]
        return unsent[0]

    def answer(self, request: UnsentRequest, version: int = 4, **fields: Any) -> None:
        assert request.on_response is not None
        request.on_response(SimpleNamespace(**fields), version, self.now)

    def find_coordinator(self, key_type: int = 1, node: int = 7) -> None:
        req = self.one(ApiKey.FIND_COORDINATOR)
        assert req.node == ANY_NODE
        assert dict(req.body(4))["key_type"] == key_type
        self.answer(
            req,
            coordinators=[
                SimpleNamespace(
                    key=dict(req.body(4))["coordinator_keys"][0],
                    error_code=0,
                    node_id=node,
                    host="h",
                    port=9092,
                    error_message=None,
                )
            ],
        )

    def init(self, pid: int = 1000, epoch: int = 0) -> Future[None]:
        fut: Future[None] = Future()
        self.tm.init_transactions(fut)
        assert self.tm.state is TxnState.INITIALIZING
        self.find_coordinator()
        req = self.one(ApiKey.INIT_PRODUCER_ID)
        assert req.node == COORDINATOR
        assert req.values is not None and req.values["transactional_id"] == "tx"
        assert req.values["transaction_timeout"] == 60_000
        self.answer(req, error_code=0, producer_id=pid, producer_epoch=epoch)
        return fut

    def add_partitions(self, *tps: TopicPartition) -> None:
        req = self.one(ApiKey.ADD_PARTITIONS_TO_TXN)
        assert req.max_version == 3
        assert req.values is not None
        topics = req.values["v3_and_below_topics"]
        assert sorted((t["name"], p) for t in topics for p in t["partitions"]) == sorted(
            (tp.topic, tp.partition) for tp in tps
        )
        self.answer(
            req,
            results_by_topic_v3_and_below=[
                SimpleNamespace(
                    name=t["name"],
                    results_by_partition=[
                        SimpleNamespace(partition_index=p, partition_error_code=0) for p in t["partitions"]
                    ],
                )
                for t in topics
            ],
        )


def test_init_finds_the_transaction_coordinator_and_gets_an_id() -> None:
    h = Harness()
    fut = h.init(pid=42, epoch=3)
    assert fut.result(0) is None
    assert state_of(h.tm) is TxnState.READY
    assert (h.idem.producer_id, h.idem.epoch, h.idem.state) == (42, 3, ProducerState.READY)
    assert [n.node_id for n in h.coordinators if n] == [7]
    assert h.poll() == []
    with pytest.raises(IllegalStateError):
        h.tm.init_transactions(Future())


def test_coordinator_moves_and_concurrent_transactions_are_retried_with_backoff() -> None:
    h = Harness()
    fut: Future[None] = Future()
    h.tm.init_transactions(fut)
    h.find_coordinator()
    h.answer(
        h.one(ApiKey.INIT_PRODUCER_ID), error_code=16, producer_id=-1, producer_epoch=-1
    )  # NOT_COORDINATOR
    assert h.coordinators[-1] is None
    assert h.poll() == []  # backing off
    h.clock.advance(200)
    h.find_coordinator(node=8)
    h.answer(
        h.one(ApiKey.INIT_PRODUCER_ID), error_code=51, producer_id=-1, producer_epoch=-1
    )  # CONCURRENT_TXNS
    assert h.coordinators[-1] is not None and h.coordinators[-1].node_id == 8  # kept
    assert h.poll() == []
    h.clock.advance(1200)
    h.answer(h.one(ApiKey.INIT_PRODUCER_ID), error_code=0, producer_id=5, producer_epoch=0)
    assert fut.done() and state_of(h.tm) is TxnState.READY


def test_a_request_without_an_answer_rediscovers_the_coordinator() -> None:
    h = Harness()
    h.tm.init_transactions(Future())
    h.find_coordinator()
    req = h.one(ApiKey.INIT_PRODUCER_ID)
    assert req.on_failure is not None
    req.on_failure(KafkaError("disconnected"), h.now)
    assert h.coordinators[-1] is None
    h.clock.advance(1000)
    assert h.one(ApiKey.FIND_COORDINATOR)


def test_partitions_join_the_transaction_before_their_batches_are_sent() -> None:
    h = Harness()
    h.init()
    with pytest.raises(IllegalStateError):
        h.tm.check_send()  # no transaction yet
    h.tm.begin_transaction()
    h.tm.check_send()
    assert not h.tm.may_send(TP0)
    assert not h.tm.may_send(TP1)
    h.add_partitions(TP0, TP1)
    assert h.tm.may_send(TP0) and h.tm.may_send(TP1)
    assert h.poll() == []


def test_commit_waits_for_the_batches_then_ends_the_transaction() -> None:
    h = Harness()
    h.init(pid=9, epoch=2)
    h.tm.begin_transaction()
    h.tm.may_send(TP0)
    h.add_partitions(TP0)
    h.pending = True
    fut: Future[None] = Future()
    h.tm.commit(fut)
    assert state_of(h.tm) is TxnState.COMMITTING
    assert h.poll() == []  # a batch is still unanswered
    h.pending = False
    req = h.one(ApiKey.END_TXN)
    assert req.max_version == 4
    assert req.values == {"transactional_id": "tx", "producer_id": 9, "producer_epoch": 2, "committed": True}
    h.answer(req, error_code=0)
    assert fut.result(0) is None
    assert state_of(h.tm) is TxnState.READY
    assert not h.tm.may_send(TP0)  # the next transaction adds its partitions again


def test_an_empty_transaction_ends_without_the_coordinator() -> None:
    h = Harness()
    h.init()
    h.tm.begin_transaction()
    fut: Future[None] = Future()
    h.tm.abort(fut, h.now)
    assert h.poll() == []
    assert fut.done() and state_of(h.tm) is TxnState.READY
    assert len(h.aborted) == 1 and isinstance(h.aborted[0], TransactionAbortedError)


def test_a_failed_batch_makes_the_transaction_abortable_and_the_abort_bumps_the_epoch() -> None:
    h = Harness()
    h.init(pid=9, epoch=2)
    h.tm.begin_transaction()
    h.tm.may_send(TP0)
    h.add_partitions(TP0)
    h.tm.on_batch_failed(45, KafkaError("OUT_OF_ORDER_SEQUENCE_NUMBER"))
    assert state_of(h.tm) is TxnState.ABORTABLE_ERROR
    with pytest.raises(KafkaError, match="abort the transaction"):
        h.tm.check_send()
    with pytest.raises(KafkaError, match="OUT_OF_ORDER"):
        h.tm.commit(Future())
    with pytest.raises(IllegalStateError):
        h.tm.begin_transaction()
    fut: Future[None] = Future()
    h.tm.abort(fut, h.now)
    req = h.one(ApiKey.END_TXN)
    assert req.values is not None and req.values["committed"] is False
    h.answer(req, error_code=0)
    assert not fut.done()  # KIP-360: the epoch is bumped by the coordinator first
    bump = h.one(ApiKey.INIT_PRODUCER_ID)
    assert bump.values is not None
    assert (bump.values["producer_id"], bump.values["producer_epoch"]) == (9, 2)
    h.answer(bump, error_code=0, producer_id=9, producer_epoch=3)
    assert fut.result(0) is None
    assert state_of(h.tm) is TxnState.READY and h.idem.epoch == 3
    h.tm.begin_transaction()


def test_fencing_is_fatal() -> None:
    h = Harness()
    h.init()
    h.tm.begin_transaction()
    h.tm.may_send(TP0)
    h.add_partitions(TP0)
    fut: Future[None] = Future()
    h.tm.commit(fut)
    h.answer(h.one(ApiKey.END_TXN), error_code=90)  # PRODUCER_FENCED
    assert isinstance(fut.exception(0), ProducerFencedError)
    assert state_of(h.tm) is TxnState.FATAL_ERROR
    assert h.idem.state is ProducerState.FATAL
    with pytest.raises(ProducerFencedError):
        h.tm.begin_transaction()
    with pytest.raises(ProducerFencedError):
        h.tm.abort(Future(), h.now)
    with pytest.raises(KafkaError, match="close the producer"):
        h.tm.check_send()


def test_transaction_abortable_from_end_txn_fails_the_commit_but_allows_an_abort() -> None:
    h = Harness()
    h.init()
    h.tm.begin_transaction()
    h.tm.may_send(TP0)
    h.add_partitions(TP0)
    fut: Future[None] = Future()
    h.tm.commit(fut)
    h.answer(h.one(ApiKey.END_TXN), error_code=120)
    assert isinstance(fut.exception(0), TransactionAbortableError)
    assert state_of(h.tm) is TxnState.ABORTABLE_ERROR
    done: Future[None] = Future()
    h.tm.abort(done, h.now)
    h.answer(h.one(ApiKey.END_TXN), error_code=0)
    assert done.done() and state_of(h.tm) is TxnState.READY


def _offsets_answer(h: Harness, req: UnsentRequest, code: int) -> None:
    assert req.values is not None
    h.answer(
        req,
        topics=[
            SimpleNamespace(
                name=t["name"],
                partitions=[
                    SimpleNamespace(partition_index=p["partition_index"], error_code=code)
                    for p in t["partitions"]
                ],
            )
            for t in req.values["topics"]
        ],
    )


def test_send_offsets_adds_the_group_then_commits_with_the_members_generation() -> None:
    h = Harness()
    h.init(pid=9, epoch=2)
    h.tm.begin_transaction()
    group = ConsumerGroupMetadata("g", 5, "member-1", None)
    fut: Future[None] = Future()
    h.tm.send_offsets({TopicPartition("in", 0): OffsetAndMetadata(17, "m")}, group, fut)
    add = h.one(ApiKey.ADD_OFFSETS_TO_TXN)
    assert add.values == {"transactional_id": "tx", "producer_id": 9, "producer_epoch": 2, "group_id": "g"}
    h.answer(add, error_code=0)
    h.find_coordinator(key_type=0, node=3)
    commit = h.one(ApiKey.TXN_OFFSET_COMMIT)
    assert commit.node == 3 and commit.max_version == 4
    assert commit.values is not None
    assert (commit.values["generation_id"], commit.values["member_id"]) == (5, "member-1")
    assert commit.values["topics"] == [
        {
            "name": "in",
            "partitions": [
                {
                    "partition_index": 0,
                    "committed_offset": 17,
                    "committed_leader_epoch": -1,
                    "committed_metadata": "m",
                }
            ],
        }
    ]
    _offsets_answer(h, commit, 16)  # NOT_COORDINATOR: the group coordinator is looked up again
    h.clock.advance(1000)
    h.find_coordinator(key_type=0, node=4)
    commit = h.one(ApiKey.TXN_OFFSET_COMMIT)
    assert commit.node == 4
    _offsets_answer(h, commit, 0)
    assert fut.result(0) is None
    # the transaction started on the coordinator: the commit goes there
    h.tm.commit(Future())
    assert h.one(ApiKey.END_TXN)


def test_a_fenced_group_member_cannot_commit_offsets_in_the_transaction() -> None:
    h = Harness()
    h.init()
    h.tm.begin_transaction()
    fut: Future[None] = Future()
    h.tm.send_offsets(
        {TopicPartition("in", 0): OffsetAndMetadata(1)}, ConsumerGroupMetadata("g", 1, "m"), fut
    )
    h.answer(h.one(ApiKey.ADD_OFFSETS_TO_TXN), error_code=0)
    h.find_coordinator(key_type=0)
    _offsets_answer(h, h.one(ApiKey.TXN_OFFSET_COMMIT), 22)  # ILLEGAL_GENERATION
    assert isinstance(fut.exception(0), CommitFailedError)
    assert state_of(h.tm) is TxnState.ABORTABLE_ERROR


def test_retried_calls_resume_the_pending_operation() -> None:
    h = Harness()
    first: Future[None] = Future()
    second: Future[None] = Future()
    h.tm.init_transactions(first)
    h.tm.init_transactions(second)  # e.g. after the first call timed out on the application thread
    h.find_coordinator()
    h.answer(h.one(ApiKey.INIT_PRODUCER_ID), error_code=0, producer_id=1, producer_epoch=0)
    assert first.done() and second.done()


def test_mark_transactional_sets_the_attribute_and_keeps_the_crc_valid() -> None:
    from kafka_handoff.protocol.compression import CompressionType

    batch = ProducerBatch(TP0, 0, 1 << 20, 1 << 20)
    batch.entries.append(make_entry(b"k", b"v", 1000, None, None))
    batch.set_producer_state(9, 2, 0)
    plain = batch.encode(CompressionType.NONE, None)
    assert not next(iter_batch_headers(plain)).is_transactional
    payload = mark_transactional(batch)
    assert mark_transactional(batch) is payload  # once
    header = next(iter_batch_headers(payload))
    assert header.is_transactional and (header.producer_id, header.producer_epoch) == (9, 2)
    assert header.crc == crc32c(payload[21:])
    batch.set_producer_state(9, 3, 0)  # a later rewrite keeps the attribute
    assert next(iter_batch_headers(batch.payload or b"")).is_transactional


def test_transactions_v2_add_partitions_and_the_group_implicitly_and_bump_the_epoch_at_each_end() -> None:
    h = Harness(transaction_version=(2, 5))
    h.init(pid=9, epoch=0)
    h.tm.begin_transaction()
    assert h.tm.v2 and h.tm.produce_max_version == 12
    assert h.tm.may_send(TP0)  # no AddPartitionsToTxn: Produce v12 adds the partition
    fut: Future[None] = Future()
    h.tm.send_offsets(
        {TopicPartition("in", 0): OffsetAndMetadata(3)}, ConsumerGroupMetadata("g", 1, "m"), fut
    )
    h.find_coordinator(key_type=0, node=3)  # straight to the group coordinator: no AddOffsetsToTxn
    commit = h.one(ApiKey.TXN_OFFSET_COMMIT)
    assert (commit.min_version, commit.max_version) == (5, 5)
    _offsets_answer(h, commit, 0)
    assert fut.result(0) is None
    done: Future[None] = Future()
    h.tm.commit(done)
    end = h.one(ApiKey.END_TXN)
    assert (end.min_version, end.max_version) == (5, 5)
    assert end.values is not None and end.values["producer_epoch"] == 0
    assert end.on_response is not None
    end.on_response(SimpleNamespace(error_code=0, producer_id=9, producer_epoch=1), 5, h.now)
    assert done.result(0) is None
    assert (h.idem.producer_id, h.idem.epoch) == (9, 1)  # the next transaction writes with the new epoch
    assert state_of(h.tm) is TxnState.READY and not h.tm.v2
    assert h.tm.produce_max_version == 11
    # an abort in v2 also ends with the coordinator's bump, no separate InitProducerId
    h.tm.begin_transaction()
    assert h.tm.may_send(TP1)
    h.tm.on_batch_failed(45, KafkaError("OUT_OF_ORDER_SEQUENCE_NUMBER"))
    aborted: Future[None] = Future()
    h.tm.abort(aborted, h.now)
    end = h.one(ApiKey.END_TXN)
    assert end.on_response is not None
    end.on_response(SimpleNamespace(error_code=0, producer_id=9, producer_epoch=2), 5, h.now)
    assert aborted.result(0) is None and h.idem.epoch == 2
    assert h.poll() == []


def test_transactions_v1_when_the_cluster_has_not_finalized_v2() -> None:
    for known in (None, (1, 5), (2, 4)):
        h = Harness(transaction_version=known)
        h.init()
        h.tm.begin_transaction()
        assert not h.tm.v2 and h.tm.produce_max_version == 11
        assert not h.tm.may_send(TP0)


def test_a_transaction_timed_out_by_the_coordinator_is_abortable_and_the_abort_claims_the_new_epoch() -> None:
    """KIP-588, transactions v1: INVALID_PRODUCER_EPOCH from the coordinator is abortable; the abort skips
    EndTxn (the coordinator aborted already) and re-initializes with the current id and epoch."""
    h = Harness()
    h.init(pid=9, epoch=4)
    h.tm.begin_transaction()
    fut: Future[None] = Future()
    h.tm.send_offsets(
        {TopicPartition("in", 0): OffsetAndMetadata(1)}, ConsumerGroupMetadata("g", 1, "m"), fut
    )
    h.answer(h.one(ApiKey.ADD_OFFSETS_TO_TXN), error_code=47)
    assert isinstance(fut.exception(0), InvalidProducerEpochError)
    assert state_of(h.tm) is TxnState.ABORTABLE_ERROR
    done: Future[None] = Future()
    h.tm.abort(done, h.now)
    bump = h.one(ApiKey.INIT_PRODUCER_ID)
    assert bump.values is not None
    assert (bump.values["producer_id"], bump.values["producer_epoch"]) == (9, 4)
    h.answer(bump, error_code=0, producer_id=9, producer_epoch=6)
    assert done.result(0) is None and h.idem.epoch == 6
    assert state_of(h.tm) is TxnState.READY


def test_a_transaction_timed_out_by_the_coordinator_v2_aborts_with_end_txn_which_returns_the_epoch() -> None:
    h = Harness(transaction_version=(2, 5))
    h.init(pid=9, epoch=4)
    h.tm.begin_transaction()
    assert h.tm.may_send(TP0)
    h.tm.commit(Future())
    h.answer(h.one(ApiKey.END_TXN), version=5, error_code=47)
    assert state_of(h.tm) is TxnState.ABORTABLE_ERROR
    done: Future[None] = Future()
    h.tm.abort(done, h.now)
    end = h.one(ApiKey.END_TXN)
    assert end.values is not None and end.values["committed"] is False
    assert end.on_response is not None
    end.on_response(SimpleNamespace(error_code=0, producer_id=9, producer_epoch=5), 5, h.now)
    assert done.result(0) is None and h.idem.epoch == 5
    # a real successor: the abort's EndTxn is fenced; the re-initialization then says so (fatal)
    h.tm.begin_transaction()
    assert h.tm.may_send(TP0)
    h.tm.commit(Future())
    h.answer(h.one(ApiKey.END_TXN), version=5, error_code=47)
    h.tm.abort(Future(), h.now)
    h.answer(h.one(ApiKey.END_TXN), version=5, error_code=90)
    h.answer(h.one(ApiKey.INIT_PRODUCER_ID), error_code=90, producer_id=-1, producer_epoch=-1)
    assert state_of(h.tm) is TxnState.FATAL_ERROR


# ------------------------------------------------------------------------------------ with the sender
def _sender_with_transactions(transaction_version: tuple[int, int]) -> tuple[Any, Harness]:
    from test_producer_sender import Harness as SenderHarness

    from kafka_handoff.producer.sender import Sender

    s = SenderHarness()
    t = Harness(transaction_version=transaction_version)
    assert s.idem is not None
    t.idem = s.idem
    t.tm = TransactionManager(
        "tx",
        60_000,
        s.idem,
        transaction_version=lambda: transaction_version,
        set_coordinator=lambda node, now: t.coordinators.append(node),
    )
    s.sender = Sender(s.acc, s.metadata, s._on_done, idempotence=s.idem, transactions=t.tm)
    t.init(pid=77, epoch=0)
    return s, t


def test_the_sender_holds_a_new_partitions_batch_until_it_joined_the_transaction_v1() -> None:
    s, t = _sender_with_transactions((1, 4))
    assert s.poll() == []  # no InitProducerId of the sender's own: the transaction manager has the id
    with pytest.raises(IllegalStateError):
        t.tm.check_send()
    t.tm.begin_transaction()
    fut = s.send(b"in-a-transaction")
    assert s.produce_requests() == [] and s.poll() == []  # held back: not in the transaction yet
    t.add_partitions(TopicPartition("t", 0))
    (produce,) = [r for r in s.poll() if r.api_key == ApiKey.PRODUCE]
    assert produce.max_version == 11
    assert dict(produce.body(11))["transactional_id"] == "tx"
    ((_tp, data),) = s.batches_of(produce)
    header = s.header(data)
    assert header.is_transactional and (header.producer_id, header.producer_epoch) == (77, 0)
    assert t.tm.has_pending_batches()
    done: Future[None] = Future()
    t.tm.commit(done)
    assert t.poll() == []  # EndTxn waits for the unanswered batch
    s.answer(produce)
    assert fut.result(0).offset == 0
    end = t.one(ApiKey.END_TXN)
    t.answer(end, error_code=0)
    assert done.result(0) is None


def test_the_sender_uses_produce_v12_in_a_v2_transaction_and_v11_otherwise() -> None:
    s, t = _sender_with_transactions((2, 5))
    t.tm.begin_transaction()
    s.send(b"v2")
    (produce,) = [r for r in s.poll() if r.api_key == ApiKey.PRODUCE]  # no AddPartitionsToTxn round trip
    assert produce.max_version == 12
    assert t.poll() == []
    s.answer(produce)
    t.tm.commit(Future())
    end = t.one(ApiKey.END_TXN)
    assert end.on_response is not None
    end.on_response(SimpleNamespace(error_code=0, producer_id=77, producer_epoch=1), 5, t.now)
    # the next transaction's batches carry the bumped epoch, from sequence 0
    t.tm.begin_transaction()
    s.send(b"next")
    (produce,) = [r for r in s.poll() if r.api_key == ApiKey.PRODUCE]
    ((_tp, data),) = s.batches_of(produce)
    header = s.header(data)
    assert (header.producer_epoch, header.base_sequence) == (1, 0)


def test_an_aborted_transactions_queued_records_fail_with_transaction_aborted() -> None:
    s, t = _sender_with_transactions((1, 4))
    t.tm.begin_transaction()
    fut = s.send(b"never sent")
    s.poll()  # held back (partition not added yet)
    done: Future[None] = Future()
    t.tm.abort(done, t.now)
    assert isinstance(fut.exception(0), TransactionAbortedError)
    assert t.poll() == []
    assert done.done() and state_of(t.tm) is TxnState.READY  # nothing reached the coordinator


def test_a_v2_commit_refused_with_invalid_txn_state_after_a_coordinator_abort_is_recoverable() -> None:
    """KAFKA-20785: a broker that aborted the transaction itself (timeout) answers the in-flight commit
    with INVALID_TXN_STATE; the transaction is abortable and the abort's EndTxn gets the bumped epoch."""
    h = Harness(transaction_version=(2, 5))
    h.init(pid=9, epoch=4)
    h.tm.begin_transaction()
    assert h.tm.may_send(TP0)
    commit: Future[None] = Future()
    h.tm.commit(commit)
    h.answer(h.one(ApiKey.END_TXN), version=5, error_code=48)
    assert isinstance(commit.exception(0), InvalidProducerEpochError)
    assert state_of(h.tm) is TxnState.ABORTABLE_ERROR
    done: Future[None] = Future()
    h.tm.abort(done, h.now)
    end = h.one(ApiKey.END_TXN)
    assert end.on_response is not None
    end.on_response(SimpleNamespace(error_code=0, producer_id=9, producer_epoch=5), 5, h.now)
    assert done.result(0) is None and state_of(h.tm) is TxnState.READY and h.idem.epoch == 5
    # in v1, INVALID_TXN_STATE stays fatal
    v1 = Harness()
    v1.init()
    v1.tm.begin_transaction()
    v1.tm.may_send(TP0)
    v1.add_partitions(TP0)
    v1.tm.commit(Future())
    v1.answer(v1.one(ApiKey.END_TXN), error_code=48)
    assert state_of(v1.tm) is TxnState.FATAL_ERROR
