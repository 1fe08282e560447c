"""The transactional producer's state machine (KIP-98, KIP-447), sans-I/O.

A request manager on the producer's network thread, beside the :class:`~kafka_handoff.producer.sender.Sender`,
with the states of Java's ``TransactionManager``::

    UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION -> COMMITTING -> READY
                                               |        \\-> ABORTABLE_ERROR -> ABORTING -> READY
                                               \\-> ABORTING -> READY              any -> FATAL_ERROR

* ``init_transactions`` finds the transaction coordinator (FindCoordinator, key type 1) and gets the producer
  id and epoch for the ``transactional.id`` (InitProducerId), which fences older producers of the same id
  and makes the coordinator finish their open transaction.
* While a transaction is open, a partition's first batch is held back until ``AddPartitionsToTxn`` added the
  partition to the transaction (the sender asks :meth:`TransactionManager.may_send`).
* ``send_offsets`` adds the group to the transaction (AddOffsetsToTxn), then writes the offsets with
  ``TxnOffsetCommit`` to the group coordinator, carrying the consumer's group metadata (KIP-447: a zombie
  member of an older generation is refused, so its transaction cannot commit).
* ``commit``/``abort`` end the transaction with ``EndTxn`` once no batch is queued or unanswered; an abort
  first fails the queued batches with :class:`~kafka_handoff.errors.TransactionAbortedError`.

Errors follow Java's split.  *Fatal* (``FATAL_ERROR``: only ``close()`` is left): fenced by a newer producer
(``PRODUCER_FENCED``, ``INVALID_PRODUCER_EPOCH`` from the coordinator), authorization of the transactional id,
an invalid transaction state.  *Abortable* (``ABORTABLE_ERROR``: ``abort_transaction()`` and go on): a batch
of the transaction failed, a group commit was refused (``CommitFailedError``), ``TRANSACTION_ABORTABLE``.
Coordinator moves and ``CONCURRENT_TRANSACTIONS`` are retried with exponential backoff.

**Transactions v2** (KIP-890 part 2) are used when the cluster's finalized ``transaction.version`` feature
(ApiVersions v3+) is 2 or more and the coordinator speaks EndTxn v5, decided at each ``begin_transaction``:
Produce v12 adds a partition to the transaction implicitly (no AddPartitionsToTxn), TxnOffsetCommit v5 adds
the group implicitly (no AddOffsetsToTxn), and every EndTxn v5 bumps the producer epoch (the answer carries
the new one, and sequences start again at 0), which fences a zombie's late writes to the ended transaction.
Otherwise transactions v1 (AddPartitionsToTxn v3, EndTxn v4, Produce v11), which Kafka 4.x still serves.
Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Final

from kio.schema.errors import ErrorCode

from kafka_handoff.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaError,
    Needs,
    TransactionAbortedError,
    error_for_code,
)
from kafka_handoff.group.coordinator import parse_find_coordinator
from kafka_handoff.producer.batch import ProducerBatch
from kafka_handoff.producer.idempotence import INVALID_PRODUCER_EPOCH, PRODUCER_FENCED, IdempotenceManager
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.records import ATTR_TRANSACTIONAL, ATTRIBUTES_OFFSET, restamp_batch
from kafka_handoff.protocol.requests import ANY_NODE, COORDINATOR, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import BrokerNode, ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

__all__ = ["TransactionManager", "TxnState", "mark_transactional"]

log = logging.getLogger(__name__)

# Error codes.
COORDINATOR_LOAD_IN_PROGRESS: Final = ErrorCode.coordinator_load_in_progress
COORDINATOR_NOT_AVAILABLE: Final = ErrorCode.coordinator_not_available
NOT_COORDINATOR: Final = ErrorCode.not_coordinator
ILLEGAL_GENERATION: Final = ErrorCode.illegal_generation
UNKNOWN_MEMBER_ID: Final = ErrorCode.unknown_member_id
TOPIC_AUTHORIZATION_FAILED: Final = ErrorCode.topic_authorization_failed
GROUP_AUTHORIZATION_FAILED: Final = ErrorCode.group_authorization_failed
CONCURRENT_TRANSACTIONS: Final = ErrorCode.concurrent_transactions
OPERATION_NOT_ATTEMPTED: Final = ErrorCode.operation_not_attempted
_NOT_ALL_ADDED: Final = -1000
"""AddPartitionsToTxn left partitions out or OPERATION_NOT_ATTEMPTED (no error of its own): try again."""
FENCED_INSTANCE_ID: Final = ErrorCode.fenced_instance_id
TRANSACTION_ABORTABLE: Final = ErrorCode.transaction_abortable
INVALID_TXN_STATE: Final = ErrorCode.invalid_txn_state
OUT_OF_ORDER_SEQUENCE_NUMBER: Final = ErrorCode.out_of_order_sequence_number
UNKNOWN_PRODUCER_ID: Final = ErrorCode.unknown_producer_id

_COORDINATOR_MOVED: Final = frozenset({COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})
_ABORTABLE: Final = frozenset({TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, TRANSACTION_ABORTABLE})
_COMMIT_FAILED: Final = frozenset({UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID})
#: Produce errors after which the epoch must be bumped when the transaction is aborted (KIP-360/KIP-588).
_BUMP_AFTER_ABORT: Final = frozenset(
    {OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH}
)

# Versions of transactions v1 (KIP-890's v2 changes the meaning of newer ones).
ADD_PARTITIONS_MAX_VERSION: Final = 3
END_TXN_MAX_VERSION: Final = 4
TXN_OFFSET_COMMIT_MAX_VERSION: Final = 4
PRODUCE_MAX_VERSION: Final = 11
# Transactions v2 (KIP-890).
END_TXN_V2: Final = 5
TXN_OFFSET_COMMIT_V2: Final = 5
PRODUCE_V2: Final = 12
_WAIT_FOR_BATCHES_MS: Final = 20


def mark_transactional(batch: ProducerBatch) -> bytes:
    """Set the *transactional* attribute (bit 4) of the batch's encoded bytes, once, and return them: the
    broker then keeps the records invisible to ``read_committed`` readers until the transaction's marker."""
    payload = batch.payload
    assert payload is not None, "encode the batch first"
    if payload[ATTRIBUTES_OFFSET + 1] & ATTR_TRANSACTIONAL:
        return payload
    batch.payload = restamp_batch(payload, set_attributes=ATTR_TRANSACTIONAL)
    return batch.payload


class TxnState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING = "COMMITTING"
    ABORTING = "ABORTING"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


@dataclass
class _Step:
    kind: str  # "init" | "add_offsets" | "txn_offset_commit" | "end_txn"
    futures: list[Future[None]] = field(default_factory=list)
    commit: bool = False
    group: ConsumerGroupMetadata | None = None
    offsets: Mapping[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    bump: bool = False  # "init" with the current producer id and epoch (KIP-360)


def _set_result(futures: list[Future[None]]) -> None:
    for f in futures:
        if not f.done():
            f.set_result(None)


def _set_error(futures: list[Future[None]], error: BaseException) -> None:
    for f in futures:
        if not f.done():
            f.set_exception(error)


class TransactionManager:
    """Network-thread request manager; the producer's app-thread calls reach it as typed events
    (``producer/events.py``; every public method except :meth:`check_send` runs on the network thread)."""

    def __init__(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        idempotence: IdempotenceManager,
        *,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        set_coordinator: Callable[[BrokerNode | None, int], None] | None = None,
        request_metadata: Callable[[], None] | None = None,
        transaction_version: Callable[[], tuple[int, int] | None] | None = None,
    ) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.idem = idempotence
        # A transactional producer never bumps its epoch by itself: an INVALID_PRODUCER_EPOCH answer to a
        # Produce is abortable (KIP-588), the bump comes from the coordinator after the abort.
        idempotence.fatal_produce_errors = idempotence.fatal_produce_errors - {INVALID_PRODUCER_EPOCH}
        self.state = TxnState.UNINITIALIZED
        self.last_error: KafkaError | None = None
        self._backoff = ExponentialBackoff(retry_backoff_ms, max(retry_backoff_ms, retry_backoff_max_ms))
        self._set_coordinator = set_coordinator or (lambda node, now: None)
        self._request_metadata = request_metadata or (lambda: None)
        self.coordinator: BrokerNode | None = None
        self._group_coordinators: dict[str, BrokerNode] = {}
        self._steps: deque[_Step] = deque()
        self._in_flight = False
        self._next_ms = 0
        self._failures = 0
        self.partitions_in_txn: set[TopicPartition] = set()
        self._new_partitions: set[TopicPartition] = set()
        self._txn_started = False
        self._bump_after_abort = False
        # KIP-588: the coordinator answered INVALID_PRODUCER_EPOCH (it aborted the transaction itself after
        # transaction.timeout.ms and bumped the epoch): abortable; the abort then claims the bumped epoch.
        self._epoch_invalid = False
        # (finalized transaction.version, negotiated EndTxn version) of the cluster, None while unknown.
        self._transaction_version = transaction_version or (lambda: None)
        self.v2 = False
        """Whether the open transaction uses transactions v2 (KIP-890); decided by begin_transaction."""
        # Set by the sender: whether any batch is queued or awaiting an answer; fails the queued ones.
        self.has_pending_batches: Callable[[], bool] = lambda: False
        self.abort_undrained: Callable[[BaseException, int], None] = lambda error, now: None

    # ========================================================== app-thread read (no lock: one attribute)
    def check_send(self) -> None:
        """Raise when a record may not be sent now (Java ``failIfNotReadyForSend``)."""
        state = self.state
        if state is TxnState.IN_TRANSACTION:
            return
        if state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR) and self.last_error is not None:
            raise KafkaError(
                f"cannot send: a previous transactional request failed ({self.last_error!r}); "
                + ("abort the transaction" if state is TxnState.ABORTABLE_ERROR else "close the producer")
            ) from self.last_error
        raise IllegalStateError(
            f"cannot send in state {state.value}: call begin_transaction() first"
            + (" (after init_transactions())" if state is TxnState.UNINITIALIZED else "")
        )

    # ================================================================ operations (network thread)
    def _raise_if_fatal(self) -> None:
        if self.state is TxnState.FATAL_ERROR:
            assert self.last_error is not None
            raise self.last_error

    def _pending(self, kind: str) -> _Step | None:
        for step in self._steps:
            if step.kind == kind:
                return step
        return None

    def init_transactions(self, future: Future[None]) -> None:
        self._raise_if_fatal()
        if self.state is TxnState.INITIALIZING:
            step = self._pending("init")
            if step is not None:  # a retried call after a timeout resumes the pending one (as Java)
                step.futures.append(future)
                return
        if self.state is not TxnState.UNINITIALIZED:
            raise IllegalStateError(f"init_transactions() was already called (state {self.state.value})")
        self.state = TxnState.INITIALIZING
        self._steps.append(_Step("init", [future]))

    def begin_transaction(self) -> None:
        self._raise_if_fatal()
        if self.state is TxnState.ABORTABLE_ERROR:
            raise IllegalStateError(
                f"cannot begin a transaction: the current one must be aborted first ({self.last_error!r})"
            )
        if self.state is not TxnState.READY:
            raise IllegalStateError(f"cannot begin a transaction in state {self.state.value}")
        self.state = TxnState.IN_TRANSACTION
        known = self._transaction_version()
        self.v2 = known is not None and known[0] >= 2 and known[1] >= END_TXN_V2
        self._txn_started = False
        self.partitions_in_txn.clear()
        self._new_partitions.clear()

    def send_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group: ConsumerGroupMetadata,
        future: Future[None],
    ) -> None:
        self._raise_if_fatal()
        if self.state is TxnState.ABORTABLE_ERROR:
            assert self.last_error is not None
            raise self.last_error
        if self.state is not TxnState.IN_TRANSACTION:
            raise IllegalStateError(f"cannot send offsets to a transaction in state {self.state.value}")
        if not group.group_id:
            raise IllegalStateError(
                "send_offsets_to_transaction() needs the group metadata of a consumer group"
            )
        if not offsets:
            future.set_result(None)
            return
        # v2: TxnOffsetCommit v5 adds the group to the transaction itself.
        kind = "txn_offset_commit" if self.v2 else "add_offsets"
        self._steps.append(_Step(kind, [future], group=group, offsets=dict(offsets)))

    def commit(self, future: Future[None]) -> None:
        self._raise_if_fatal()
        if self.state is TxnState.COMMITTING:
            step = self._pending("end_txn")
            if step is not None:
                step.futures.append(future)
                return
        if self.state is TxnState.ABORTABLE_ERROR:
            assert self.last_error is not None
            raise self.last_error
        if self.state is not TxnState.IN_TRANSACTION:
            raise IllegalStateError(f"cannot commit a transaction in state {self.state.value}")
        self.state = TxnState.COMMITTING
        self._steps.append(_Step("end_txn", [future], commit=True))

    def abort(self, future: Future[None], now_ms: int) -> None:
        self._raise_if_fatal()
        if self.state is TxnState.ABORTING:
            step = self._pending("end_txn")
            if step is not None:
                step.futures.append(future)
                return
        if self.state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
            raise IllegalStateError(f"cannot abort a transaction in state {self.state.value}")
        self.state = TxnState.ABORTING
        aborted = TransactionAbortedError("the transaction was aborted")
        for step in list(self._steps):  # an unfinished send_offsets of this transaction
            if step.kind in ("add_offsets", "txn_offset_commit"):
                self._steps.remove(step)
                _set_error(step.futures, aborted)
        self._new_partitions.clear()
        self.abort_undrained(aborted, now_ms)
        if self._epoch_invalid and not self.v2:
            # KIP-588 (transactions v1): the coordinator already aborted the transaction; EndTxn with the
            # old epoch would be refused, InitProducerId with it claims the bumped epoch.
            self._steps.append(_Step("init", [future], bump=True))
            return
        self._steps.append(_Step("end_txn", [future], commit=False))

    # ================================================================ sender hooks (network thread)
    def may_send(self, tp: TopicPartition) -> bool:
        """Whether a batch of ``tp`` may be sent: the partition is part of the transaction.  A new partition
        is queued for AddPartitionsToTxn."""
        if tp in self.partitions_in_txn:
            return True
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            if self.v2:  # Produce v12 adds the partition itself
                self.partitions_in_txn.add(tp)
                self._txn_started = True
                return True
            self._new_partitions.add(tp)
        return False

    @property
    def produce_max_version(self) -> int:
        """Produce v12 means "transactions v2" to the broker: a v1 transaction must not use it."""
        return PRODUCE_V2 if self.v2 else PRODUCE_MAX_VERSION

    def bump_epoch_after_abort(self) -> None:
        self._bump_after_abort = True

    def on_batch_failed(self, code: int | None, error: BaseException) -> None:
        """A batch of the transaction failed for good: the transaction cannot commit."""
        if code in _BUMP_AFTER_ABORT:
            self._bump_after_abort = True
        if code == INVALID_PRODUCER_EPOCH:  # KIP-588: the coordinator timed the transaction out
            self._epoch_invalid = True
        if isinstance(error, TransactionAbortedError):
            return
        if code == PRODUCER_FENCED:
            self._fatal(error_for_code(code, "a newer producer with the same transactional.id exists"))
        else:
            self._abortable(error if isinstance(error, KafkaError) else KafkaError(str(error)))

    def _abortable(self, error: KafkaError) -> None:
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            log.warning("transaction %r must be aborted: %s", self.transactional_id, error)
            self.state = TxnState.ABORTABLE_ERROR
            self.last_error = error
            for step in list(self._steps):
                if step.kind in ("add_offsets", "txn_offset_commit") or (
                    step.kind == "end_txn" and step.commit
                ):
                    self._steps.remove(step)
                    _set_error(step.futures, error)

    def _fatal(self, error: KafkaError) -> None:
        if self.state is not TxnState.FATAL_ERROR:
            log.error("transactional producer %r failed: %s", self.transactional_id, error)
        self.state = TxnState.FATAL_ERROR
        self.last_error = error
        self.idem.set_fatal(error)
        steps, self._steps = list(self._steps), deque()
        for step in steps:
            _set_error(step.futures, error)

    # ================================================================ poll
    def _retry_later(self, now_ms: int) -> None:
        self._failures += 1
        self._next_ms = now_ms + self._backoff.after_failures(self._failures)

    def _coordinator_lost(self, now_ms: int) -> None:
        if self.coordinator is not None:
            self.coordinator = None
            self._set_coordinator(None, now_ms)
        self._retry_later(now_ms)

    def poll(self, now_ms: int) -> PollResult:
        if self._in_flight or self.state is TxnState.FATAL_ERROR:
            return PollResult.idle()
        if not self._steps and not self._new_partitions:
            return PollResult.idle()
        if now_ms < self._next_ms:
            return PollResult.idle(self._next_ms - now_ms)
        if self.coordinator is None:
            return self._request(self._find_coordinator(1, self.transactional_id))
        if self._new_partitions and self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            return self._request(self._add_partitions())
        if not self._steps:
            return PollResult.idle()
        step = self._steps[0]
        if step.kind == "init":
            if step.bump and self.has_pending_batches():  # the epoch changes: no batch may be in flight
                return PollResult.idle(_WAIT_FOR_BATCHES_MS)
            return self._request(self._init_producer_id(step))
        if step.kind == "add_offsets":
            return self._request(self._add_offsets(step))
        if step.kind == "txn_offset_commit":
            assert step.group is not None
            group_id = step.group.group_id
            if group_id not in self._group_coordinators:
                return self._request(self._find_coordinator(0, group_id))
            return self._request(self._txn_offset_commit(step, self._group_coordinators[group_id]))
        # end_txn: only once every batch of the transaction has its outcome.
        if self.has_pending_batches() or self._new_partitions:
            return PollResult.idle(_WAIT_FOR_BATCHES_MS)
        if not self._txn_started:  # nothing reached the coordinator: nothing to end there
            self._steps.popleft()
            self._end_done(step, now_ms)
            return PollResult.idle(0)
        return self._request(self._end_txn(step))

    def _request(self, request: UnsentRequest) -> PollResult:
        self._in_flight = True
        return PollResult([request], 0)

    def _on_failure(self, what: str, to_coordinator: bool) -> Callable[[BaseException, int], None]:
        def on_failure(error: BaseException, now: int) -> None:
            self._in_flight = False
            log.debug("%s for transaction %r failed: %s", what, self.transactional_id, error)
            self._request_metadata()
            if to_coordinator:
                self._coordinator_lost(now)
            else:
                self._retry_later(now)

        return on_failure

    def _to_coordinator(
        self,
        api_key: int,
        what: str,
        values: dict[str, Any],
        on_success: Callable[[Any, int, int], None],
        on_error: Callable[[int, int, int], bool] | None = None,
        *,
        error_code: Callable[[Any], int] = lambda response: int(response.error_code),
        min_version: int = 0,
        max_version: int | None = None,
        needs: Callable[[], Needs] | None = None,
    ) -> UnsentRequest:
        """A request to the transaction coordinator.  ``error_code`` reads the answer's error (0: done, then
        ``on_success(response, version, now)``); ``on_error(code, version, now)`` handles the errors
        particular to the request (True when it did), the rest go to :meth:`_handle_common`."""

        def on_response(response: Any, version: int, now: int) -> None:
            self._in_flight = False
            code = error_code(response)
            if code == 0:
                self._failures = 0
                on_success(response, version, now)
            elif on_error is None or not on_error(code, version, now):
                self._handle_common(code, what, now, needs=needs() if needs else None)

        return UnsentRequest(
            api_key=api_key,
            node=COORDINATOR,
            values=values,
            on_response=on_response,
            on_failure=self._on_failure(what, True),
            min_version=min_version,
            max_version=max_version,
        )

    def _handle_common(
        self, code: int, what: str, now: int, *, txn_coordinator: bool = True, needs: Needs | None = None
    ) -> bool:
        """Retry, rediscovery and fatal errors shared by every coordinator request; True when handled.
        ``needs``: what the request needs from the authorizer (default: WRITE on the transactional.id)."""
        needs = needs or Needs(what, transactional_id=("WRITE", self.transactional_id))
        if code in _COORDINATOR_MOVED:
            if txn_coordinator:
                self._coordinator_lost(now)
            else:
                self._retry_later(now)
            return True
        if code in (COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS):
            self._retry_later(now)
            return True
        if code in _ABORTABLE:
            self._abortable(
                error_for_code(code, f"{what} for transaction {self.transactional_id!r}", needs=needs)
            )
            return True
        error = error_for_code(code, f"{what} for transaction {self.transactional_id!r}", needs=needs)
        if code == INVALID_PRODUCER_EPOCH and self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            # KIP-588: most likely the coordinator timed the transaction out (transaction.timeout.ms) and
            # bumped the epoch; a real successor answers PRODUCER_FENCED to the abort's request instead.
            self._epoch_invalid = True
            self._bump_after_abort = True
            self._abortable(error)
            return True
        if error.retriable:
            self._retry_later(now)
            return True
        self._fatal(error)
        return True

    # ---------------------------------------------------------------- FindCoordinator
    def _find_coordinator(self, key_type: int, key: str) -> UnsentRequest:
        def build(version: int) -> dict[str, Any]:
            if version >= 4:
                return {"key_type": key_type, "coordinator_keys": [key]}
            return {"key": key, "key_type": key_type}

        def on_response(response: Any, version: int, now: int) -> None:
            self._in_flight = False
            found = parse_find_coordinator(key, response, version, key_type=key_type)
            if isinstance(found, BaseException):
                code = int(getattr(found, "code", -1)) if hasattr(found, "code") else -1
                if code in (GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED) and key_type == 0:
                    self._abortable(found if isinstance(found, KafkaError) else KafkaError(str(found)))
                elif code == ErrorCode.transactional_id_authorization_failed:
                    self._fatal(found if isinstance(found, KafkaError) else error_for_code(code, repr(key)))
                else:
                    log.debug("FindCoordinator for %r: %s", key, found)
                    self._retry_later(now)
                return
            self._failures = 0
            if key_type == 1:
                log.debug("transaction coordinator for %r: node %d", key, found.node_id)
                self.coordinator = found
                self._set_coordinator(found, now)
            else:
                self._group_coordinators[key] = found
            self._next_ms = 0

        return UnsentRequest(
            api_key=ApiKey.FIND_COORDINATOR,
            node=ANY_NODE,
            build=build,
            on_response=on_response,
            on_failure=self._on_failure("FindCoordinator", False),
            min_version=1,
        )

    # ---------------------------------------------------------------- InitProducerId
    def _init_producer_id(self, step: _Step) -> UnsentRequest:
        idem = self.idem
        values = {
            "transactional_id": self.transactional_id,
            "transaction_timeout": self.transaction_timeout_ms,
            "producer_id": idem.producer_id if step.bump else -1,
            "producer_epoch": idem.epoch if step.bump else -1,
        }

        def on_success(response: Any, _version: int, _now: int) -> None:
            self._steps.popleft()
            idem.set_producer_id_and_epoch(int(response.producer_id), int(response.producer_epoch))
            self._epoch_invalid = False
            self._bump_after_abort = False
            log.info(
                "transactional.id %r: producer id %d, epoch %d",
                self.transactional_id,
                idem.producer_id,
                idem.epoch,
            )
            self.state = TxnState.READY
            _set_result(step.futures)

        return self._to_coordinator(
            ApiKey.INIT_PRODUCER_ID, "InitProducerId", values, on_success, min_version=3 if step.bump else 0
        )

    # ---------------------------------------------------------------- AddPartitionsToTxn (v1: up to v3)
    def _add_partitions(self) -> UnsentRequest:
        partitions = sorted(self._new_partitions)
        topics: dict[str, list[int]] = {}
        for tp in partitions:
            topics.setdefault(tp.topic, []).append(tp.partition)
        idem = self.idem
        values = {
            "v3_and_below_transactional_id": self.transactional_id,
            "v3_and_below_producer_id": idem.producer_id,
            "v3_and_below_producer_epoch": idem.epoch,
            "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }

        denied: list[str] = []  # the topic of the first partition the coordinator refused

        def error_code(response: Any) -> int:
            codes: dict[TopicPartition, int] = {}
            results = getattr(response, "results_by_topic_v3_and_below", None) or ()
            for topic in results:
                for p in topic.results_by_partition:
                    codes[TopicPartition(str(topic.name), int(p.partition_index))] = int(
                        p.partition_error_code
                    )
            top = int(getattr(response, "error_code", 0) or 0)
            failed = {tp: c for tp, c in codes.items() if c not in (0, OPERATION_NOT_ATTEMPTED)}
            code = top or next(iter(failed.values()), 0)
            denied[:] = [tp.topic for tp, c in failed.items() if c == TOPIC_AUTHORIZATION_FAILED][:1]
            if code == 0 and not all(codes.get(tp, -1) == 0 for tp in partitions):
                return _NOT_ALL_ADDED
            return code

        def on_success(_response: Any, _version: int, _now: int) -> None:
            self.partitions_in_txn.update(partitions)
            self._new_partitions.difference_update(partitions)
            self._txn_started = True

        def on_error(code: int, _version: int, now: int) -> bool:
            if code == _NOT_ALL_ADDED:  # only OPERATION_NOT_ATTEMPTED / missing: try again
                self._retry_later(now)
                return True
            if code == ErrorCode.unknown_topic_or_partition:  # metadata not there yet
                self._request_metadata()
                self._retry_later(now)
                return True
            return False

        return self._to_coordinator(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            "AddPartitionsToTxn",
            values,
            on_success,
            on_error,
            error_code=error_code,
            max_version=ADD_PARTITIONS_MAX_VERSION,
            needs=lambda: Needs(
                "AddPartitionsToTxn",
                topic=("WRITE", denied[0]) if denied else None,
                transactional_id=("WRITE", self.transactional_id),
            ),
        )

    # ---------------------------------------------------------------- AddOffsetsToTxn
    def _add_offsets(self, step: _Step) -> UnsentRequest:
        assert step.group is not None
        idem = self.idem
        values = {
            "transactional_id": self.transactional_id,
            "producer_id": idem.producer_id,
            "producer_epoch": idem.epoch,
            "group_id": step.group.group_id,
        }

        def on_success(_response: Any, _version: int, _now: int) -> None:
            self._txn_started = True
            step.kind = "txn_offset_commit"  # the same step goes on, to the group coordinator

        group_id = step.group.group_id
        return self._to_coordinator(
            ApiKey.ADD_OFFSETS_TO_TXN,
            "AddOffsetsToTxn",
            values,
            on_success,
            needs=lambda: Needs(
                "AddOffsetsToTxn", group=("READ", group_id), transactional_id=("WRITE", self.transactional_id)
            ),
        )

    # ---------------------------------------------------------------- TxnOffsetCommit
    def _txn_offset_commit(self, step: _Step, node: BrokerNode) -> UnsentRequest:
        group = step.group
        assert group is not None
        idem = self.idem
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, om in sorted(step.offsets.items()):
            topics.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": om.offset,
                    "committed_leader_epoch": -1 if om.leader_epoch is None else om.leader_epoch,
                    "committed_metadata": om.metadata,
                }
            )
        values = {
            "transactional_id": self.transactional_id,
            "group_id": group.group_id,
            "producer_id": idem.producer_id,
            "producer_epoch": idem.epoch,
            "generation_id": group.generation_id,
            "member_id": group.member_id,
            "group_instance_id": group.group_instance_id,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }

        def on_response(response: Any, _version: int, now: int) -> None:
            self._in_flight = False
            codes = [(str(t.name), int(p.error_code)) for t in response.topics for p in t.partitions]
            topic, code = next(((t, c) for t, c in codes if c != 0), ("", 0))
            if code == 0:
                self._failures = 0
                self._txn_started = True
                self._steps.popleft()
                _set_result(step.futures)
                return
            if code in _COMMIT_FAILED:
                self._abortable(
                    CommitFailedError(
                        f"the offsets of group {group.group_id!r} cannot be committed in the transaction: "
                        f"the member is no longer part of the group (generation {group.generation_id}, "
                        f"{error_for_code(code).__class__.__name__}); abort the transaction"
                    )
                )
                return
            if code in _COORDINATOR_MOVED:
                self._group_coordinators.pop(group.group_id, None)
                self._retry_later(now)
                return
            if code == ErrorCode.unknown_topic_or_partition:
                self._retry_later(now)
                return
            needs = Needs(
                "TxnOffsetCommit",
                topic=("READ", topic),
                group=("READ", group.group_id),
                transactional_id=("WRITE", self.transactional_id),
            )
            self._handle_common(code, "TxnOffsetCommit", now, txn_coordinator=False, needs=needs)

        def on_failure(error: BaseException, now: int) -> None:
            self._in_flight = False
            self._group_coordinators.pop(group.group_id, None)
            self._request_metadata()
            self._retry_later(now)
            log.debug("TxnOffsetCommit for transaction %r failed: %s", self.transactional_id, error)

        return UnsentRequest(
            api_key=ApiKey.TXN_OFFSET_COMMIT,
            node=node.node_id,
            values=values,
            on_response=on_response,
            on_failure=on_failure,
            min_version=TXN_OFFSET_COMMIT_V2 if self.v2 else 0,
            max_version=TXN_OFFSET_COMMIT_V2 if self.v2 else TXN_OFFSET_COMMIT_MAX_VERSION,
        )

    # ---------------------------------------------------------------- EndTxn
    def _end_txn(self, step: _Step) -> UnsentRequest:
        idem = self.idem
        values = {
            "transactional_id": self.transactional_id,
            "producer_id": idem.producer_id,
            "producer_epoch": idem.epoch,
            "committed": step.commit,
        }

        def on_success(response: Any, version: int, now: int) -> None:
            self._steps.popleft()
            if version >= END_TXN_V2 and int(getattr(response, "producer_id", -1)) >= 0:
                # v2: the coordinator bumped the epoch (or gave a new id at the epoch's end)
                idem.set_producer_id_and_epoch(int(response.producer_id), int(response.producer_epoch))
            self._end_done(step, now)

        def on_error(code: int, version: int, now: int) -> bool:
            if not step.commit and self._epoch_invalid and code in (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED):
                # KIP-588: claim the epoch the coordinator bumped when it aborted the transaction itself
                self._steps.popleft()
                self._steps.appendleft(_Step("init", list(step.futures), bump=True))
                return True
            if step.commit and code == INVALID_TXN_STATE and version >= END_TXN_V2:
                # v2: the coordinator aborted the transaction itself (transaction.timeout.ms) while this
                # commit was under way; brokers before KAFKA-20785 answer INVALID_TXN_STATE, later ones
                # INVALID_PRODUCER_EPOCH.  Recoverable as KIP-588: abort, which claims the bumped epoch (a
                # real problem makes that abort fail fatally).
                log.warning(
                    "transaction %r: the coordinator refused the commit (INVALID_TXN_STATE): it aborted the "
                    "transaction itself, most likely after transaction.timeout.ms",
                    self.transactional_id,
                )
                self._handle_common(INVALID_PRODUCER_EPOCH, "EndTxn", now)
                return True
            if step.commit and code == TRANSACTION_ABORTABLE:
                self._steps.popleft()
                self._abortable(error_for_code(code, "EndTxn"))
                _set_error(step.futures, self.last_error or KafkaError("abortable"))
                return True
            return False

        return self._to_coordinator(
            ApiKey.END_TXN,
            "EndTxn",
            values,
            on_success,
            on_error,
            min_version=END_TXN_V2 if self.v2 else 0,
            max_version=END_TXN_V2 if self.v2 else END_TXN_MAX_VERSION,
        )

    def _end_done(self, step: _Step, now_ms: int) -> None:
        self.partitions_in_txn.clear()
        self._new_partitions.clear()
        self._txn_started = False
        v2, self.v2 = self.v2, False
        if v2:
            self._bump_after_abort = False  # EndTxn v5 bumped the epoch already
            self._epoch_invalid = False
        elif not step.commit and (self._bump_after_abort or self.idem.epoch_bump_required):
            # KIP-360: a batch of the aborted transaction left its sequence unknown: get the next epoch
            # from the coordinator (the same producer id) before the next transaction.
            self._bump_after_abort = False
            self.state = TxnState.INITIALIZING
            self._steps.appendleft(_Step("init", list(step.futures), bump=True))
            return
        self.state = TxnState.READY
        self.last_error = None
        _set_result(step.futures)
