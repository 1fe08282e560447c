"""The idempotent producer's state machine: producer id and epoch, per-partition sequence numbers (sans-I/O).

Behaviour follows the Java client's ``TransactionManager`` for a non-transactional idempotent producer
(KIP-98, KIP-360):

* Before the first batch is sent the producer gets a producer id and epoch with ``InitProducerId``.
* Each partition numbers its records: a batch gets ``base_sequence = next_sequence`` when it is first
  drained and keeps it for every retry, so the broker can tell a retry from new data: a batch it already
  wrote is answered with its original offset, or ``DUPLICATE_SEQUENCE_NUMBER`` (counted as success).
* Up to five requests per connection may be in flight.  Order is kept because a batch that is retried
  goes back into its queue in sequence order, and a retried batch is only sent again when it is the
  partition's *first* unacknowledged batch: retries flow one at a time until the partition has caught up.
* A partition's first batch under a producer id/epoch goes alone, and the next ones once it is
  acknowledged: the broker accepts any first sequence from a producer it has no state for, so a later batch
  written while the first one is refused with a retriable error (a fresh partition's leader answers
  ``NOT_LEADER_OR_FOLLOWER`` until it hosts the partition) would leave a gap before it that no retry can
  fill.  Should such a gap appear anyway (the broker lost the producer's state mid-stream), the batch
  whose ``OUT_OF_ORDER_SEQUENCE_NUMBER`` proves it -- the first unacknowledged one, behind the acknowledged
  sequence -- gets an epoch bump (with a WARNING: its records land after later ones) instead of being
  retried until ``delivery.timeout.ms``.
* A batch that failed for good after getting a sequence leaves a gap the broker would reject
  (``OUT_OF_ORDER_SEQUENCE_NUMBER``).  The fix is an *epoch bump*: the epoch is incremented locally and the
  partition's unacknowledged batches are renumbered from sequence 0 under the new epoch, which the broker
  accepts as a fresh start.  The same happens for ``OUT_OF_ORDER_SEQUENCE_NUMBER`` that is a real gap and for
  ``UNKNOWN_PRODUCER_ID`` (the broker lost this producer's state, e.g. the log was truncated).
* A batch that expired (``delivery.timeout.ms``) after being sent may or may not have been written: its
  sequence is *unresolved*.  No new batch of that partition is sent until the in-flight ones are answered;
  if the sequence is then still not acknowledged the epoch is bumped.
* At epoch ``Short.MAX_VALUE`` the producer gets a new producer id instead.

Nothing here does I/O or reads a clock; the sender asks it questions and reports outcomes.
"""

from __future__ import annotations

import bisect
import enum
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from kio.schema.errors import ErrorCode

from kafka_handoff.errors import KafkaError, Needs, error_for_code
from kafka_handoff.producer.batch import NO_SEQUENCE, ProducerBatch
from kafka_handoff.types import TopicPartition

__all__ = ["IdempotenceManager", "ProducerState"]

log = logging.getLogger(__name__)

NO_PRODUCER_ID: Final = -1
MAX_EPOCH: Final = 0x7FFF
INT32_MAX: Final = 0x7FFFFFFF

# Broker error codes used by the state machine.
OUT_OF_ORDER_SEQUENCE_NUMBER: Final = ErrorCode.out_of_order_sequence_number
DUPLICATE_SEQUENCE_NUMBER: Final = ErrorCode.duplicate_sequence_number
INVALID_PRODUCER_EPOCH: Final = ErrorCode.invalid_producer_epoch
UNKNOWN_PRODUCER_ID: Final = ErrorCode.unknown_producer_id
CLUSTER_AUTHORIZATION_FAILED: Final = ErrorCode.cluster_authorization_failed
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Final = ErrorCode.transactional_id_authorization_failed
PRODUCER_FENCED: Final = ErrorCode.producer_fenced
UNSUPPORTED_VERSION: Final = ErrorCode.unsupported_version

#: Produce errors after which the idempotent producer cannot go on (Java: fatal for a non-transactional
#: producer).
FATAL_PRODUCE_ERRORS: Final = frozenset(
    {
        CLUSTER_AUTHORIZATION_FAILED,
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        PRODUCER_FENCED,
        INVALID_PRODUCER_EPOCH,
    }
)


class ProducerState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    FATAL = "fatal"


def _seq_add(sequence: int, count: int) -> int:
    """Sequences wrap to 0 after ``Integer.MAX_VALUE`` (Java ``DefaultRecordBatch.incrementSequence``)."""
    if sequence > INT32_MAX - count:
        return count - (INT32_MAX - sequence) - 1
    return sequence + count


def _seq_after(a: int, b: int) -> bool:
    """Whether sequence ``a`` comes after ``b`` (sequences wrap at ``Integer.MAX_VALUE``)."""
    return 0 < ((a - b) & INT32_MAX) < (1 << 30)


@dataclass
class _Partition:
    producer_id: int
    epoch: int
    next_sequence: int = 0
    last_acked_sequence: int = NO_SEQUENCE
    last_acked_offset: int = -1
    in_flight: list[ProducerBatch] = field(default_factory=list)
    """Batches that have a sequence and no final outcome yet (in a request or queued for a retry),
    ordered by base sequence."""

    def first_in_flight_sequence(self) -> int:
        return self.in_flight[0].base_sequence if self.in_flight else NO_SEQUENCE

    def remove(self, batch: ProducerBatch) -> None:
        try:
            self.in_flight.remove(batch)
        except ValueError:
            pass

    def add(self, batch: ProducerBatch) -> None:
        keys = [b.base_sequence for b in self.in_flight]
        self.in_flight.insert(bisect.bisect_right(keys, batch.base_sequence), batch)


class IdempotenceManager:
    def __init__(self) -> None:
        self.producer_id = NO_PRODUCER_ID
        self.epoch = -1
        self.state = ProducerState.UNINITIALIZED
        self.fatal_error: KafkaError | None = None
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._epoch_bump_required = False
        self._partitions_to_rewrite: set[TopicPartition] = set()
        self._unresolved: dict[TopicPartition, int] = {}
        self.epoch_bumps = 0
        #: Produce errors that make the producer fatal (a transactional producer narrows this set).
        self.fatal_produce_errors: frozenset[int] = FATAL_PRODUCE_ERRORS

    # ------------------------------------------------------------------ producer id
    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID and self.state is ProducerState.READY

    @property
    def needs_producer_id(self) -> bool:
        return self.state is ProducerState.UNINITIALIZED

    def init_producer_id_values(self) -> dict[str, Any]:
        """Values of the ``InitProducerId`` request (a new id for an idempotent producer)."""
        self.state = ProducerState.INITIALIZING
        return {
            "transactional_id": None,
            "transaction_timeout": INT32_MAX,
            "producer_id": NO_PRODUCER_ID,
            "producer_epoch": -1,
        }

    def on_init_producer_id(self, error_code: int, producer_id: int, epoch: int) -> KafkaError | None:
        """Handle the ``InitProducerId`` answer.  Returns the error when it failed (then the caller retries
        after a backoff if the error is retriable; a non-retriable one is fatal)."""
        if error_code == 0:
            self.producer_id = producer_id
            self.epoch = epoch
            self.state = ProducerState.READY
            log.debug("producer id %d, epoch %d", producer_id, epoch)
            return None
        # an idempotent producer needs IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679)
        error = error_for_code(
            error_code, "InitProducerId failed", needs=Needs("InitProducerId", cluster="IDEMPOTENT_WRITE")
        )
        if error.retriable:
            self.state = ProducerState.UNINITIALIZED
        else:
            self.set_fatal(error)
        return error

    def on_init_producer_id_failed(self) -> None:
        """The request did not get an answer (disconnect, timeout): try again later."""
        if self.state is ProducerState.INITIALIZING:
            self.state = ProducerState.UNINITIALIZED

    def set_producer_id_and_epoch(self, producer_id: int, epoch: int) -> None:
        """A producer id and epoch from the transaction coordinator (InitProducerId with a transactional id,
        or the epoch bump after an aborted transaction): every partition starts again at sequence 0."""
        self.producer_id = producer_id
        self.epoch = epoch
        self.state = ProducerState.READY
        self._partitions.clear()
        self._unresolved.clear()
        self._partitions_to_rewrite.clear()
        self._epoch_bump_required = False

    def set_fatal(self, error: KafkaError) -> None:
        self.state = ProducerState.FATAL
        self.fatal_error = error

    # ------------------------------------------------------------------ per partition
    def _entry(self, tp: TopicPartition) -> _Partition:
        entry = self._partitions.get(tp)
        if entry is None:
            entry = self._partitions[tp] = _Partition(self.producer_id, self.epoch)
        return entry

    def _is_stale(self, entry: _Partition) -> bool:
        return entry.producer_id != self.producer_id or entry.epoch != self.epoch

    def next_sequence(self, tp: TopicPartition) -> int:
        return self._entry(tp).next_sequence

    def last_acked_sequence(self, tp: TopicPartition) -> int:
        entry = self._partitions.get(tp)
        return entry.last_acked_sequence if entry is not None else NO_SEQUENCE

    def in_flight_batches(self, tp: TopicPartition) -> list[ProducerBatch]:
        entry = self._partitions.get(tp)
        return list(entry.in_flight) if entry is not None else []

    def has_in_flight(self, tp: TopicPartition) -> bool:
        entry = self._partitions.get(tp)
        return bool(entry is not None and entry.in_flight)

    def has_unresolved(self, tp: TopicPartition) -> bool:
        return tp in self._unresolved

    def may_drain(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` (the first queued batch of its partition) may be sent now
        (the negation of Java's ``shouldStopDrainBatchesForPartition``)."""
        return self.drain_veto(batch) is None

    def drain_veto(self, batch: ProducerBatch) -> str | None:
        """Why ``batch`` (the first queued batch of its partition) may not be sent now, or None."""
        if not self.has_producer_id:
            return "the idempotent producer has no producer id yet (InitProducerId)"
        tp = batch.tp
        entry = self._partitions.get(tp)
        if batch.base_sequence == NO_SEQUENCE:
            if entry is not None and entry.in_flight and self._is_stale(entry):
                # Earlier batches still carry the old epoch: a new batch at sequence 0 of the new epoch
                # could overtake them.
                return f"{len(entry.in_flight)} earlier batch(es) of the previous producer epoch are pending"
            if tp in self._unresolved:
                return (
                    f"sequence {self._unresolved[tp]} is unresolved (a batch expired in flight) until the "
                    "partition's requests are answered"
                )
            if entry is not None and entry.in_flight and entry.last_acked_sequence == NO_SEQUENCE:
                # The broker accepts any first sequence from a producer it has no state for: were a later
                # batch written while the first one is answered with a retriable error (a fresh
                # partition's leader answers NOT_LEADER_OR_FOLLOWER until it hosts the partition), the
                # first one would be refused for ever (OUT_OF_ORDER_SEQUENCE_NUMBER).  So nothing more is
                # sent to the partition until the broker acknowledged a batch of this producer id/epoch.
                return "the partition's first batch of this producer id/epoch is not acknowledged yet"
            return None
        first = entry.first_in_flight_sequence() if entry is not None else NO_SEQUENCE
        # A retried batch goes only when it is the partition's first unacknowledged batch.
        if first == NO_SEQUENCE or batch.base_sequence == first:
            return None
        return f"its retry (sequence {batch.base_sequence}) waits for the batch at sequence {first}"

    def assign_sequence(self, batch: ProducerBatch) -> None:
        """Give a newly drained batch the producer id, epoch and the partition's next sequence."""
        entry = self._entry(batch.tp)
        if self._is_stale(entry) and not entry.in_flight:
            self._start_at_beginning(batch.tp, entry)
        batch.set_producer_state(entry.producer_id, entry.epoch, entry.next_sequence)
        entry.next_sequence = _seq_add(entry.next_sequence, len(batch.entries))
        entry.in_flight.append(batch)

    def _start_at_beginning(self, tp: TopicPartition, entry: _Partition) -> list[ProducerBatch]:
        """Renumber the partition's unacknowledged batches from 0 under the current id/epoch."""
        sequence = 0
        rewritten = []
        for batch in entry.in_flight:
            batch.reset_producer_state(self.producer_id, self.epoch, sequence)
            sequence = _seq_add(sequence, len(batch.entries))
            rewritten.append(batch)
        entry.producer_id = self.producer_id
        entry.epoch = self.epoch
        entry.next_sequence = sequence
        entry.last_acked_sequence = NO_SEQUENCE
        return rewritten

    # ------------------------------------------------------------------ outcomes
    def on_success(self, batch: ProducerBatch, base_offset: int) -> None:
        entry = self._partitions.get(batch.tp)
        if entry is None:
            return
        entry.remove(batch)
        if batch.producer_id == entry.producer_id and batch.producer_epoch == entry.epoch:
            last = batch.last_sequence
            if last > entry.last_acked_sequence:
                entry.last_acked_sequence = last
            if base_offset >= 0:
                entry.last_acked_offset = max(entry.last_acked_offset, base_offset + len(batch.entries) - 1)

    def on_failure(self, batch: ProducerBatch, error_code: int | None, adjust_sequences: bool) -> None:
        """``batch`` failed for good (``error_code`` None: not a broker error, e.g. expiry)."""
        entry = self._partitions.get(batch.tp)
        if entry is not None:
            entry.remove(batch)
        if error_code in self.fatal_produce_errors:
            self.set_fatal(
                error_for_code(error_code or 0, f"the idempotent producer cannot continue ({batch.tp})")
            )
            return
        if not batch.has_sequence:
            return
        if error_code in (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID):
            self.request_epoch_bump(batch.tp)
        elif adjust_sequences:
            # The broker rejected the batch: its sequence range is a gap now.
            self.request_epoch_bump(batch.tp)

    def can_retry(
        self, batch: ProducerBatch, error_code: int, retriable: bool, log_start_offset: int
    ) -> bool:
        """Java's ``TransactionManager.canRetry`` for an idempotent producer (the caller has checked
        attempts and the delivery timeout)."""
        tp = batch.tp
        if error_code == UNKNOWN_PRODUCER_ID:
            if log_start_offset == -1:
                return True  # not known yet: retry until the broker can tell
            if batch.sequence_reset:
                return True
            self.request_epoch_bump(tp)
            return True
        if error_code == OUT_OF_ORDER_SEQUENCE_NUMBER:
            unresolved = tp in self._unresolved
            if not unresolved and (
                batch.sequence_reset or not self._is_next_sequence(tp, batch.base_sequence)
            ):
                if self._is_unfillable_gap(batch):
                    # No earlier batch is left to fill the gap (e.g. a later batch was written while this
                    # one was answered NOT_LEADER_OR_FOLLOWER by a fresh partition's leader): the broker
                    # would refuse this sequence for ever.  Renumber under a new epoch and resend.
                    entry = self._partitions[tp]
                    log.warning(
                        "%s: the broker refuses sequence %d (OUT_OF_ORDER_SEQUENCE_NUMBER) after "
                        "acknowledging up to %d, and no earlier batch is pending: bumping the epoch to resend"
                        " %d record(s), which now follow records sent after them",
                        tp,
                        batch.base_sequence,
                        entry.last_acked_sequence,
                        sum(len(b.entries) for b in entry.in_flight),
                    )
                    self.request_epoch_bump(tp)
                # Else not the batch right after the last acknowledged one: an earlier batch is being retried.
                return True
            if not unresolved or self._unresolved.get(tp) == batch.base_sequence:
                self.request_epoch_bump(tp)
            return True
        return retriable

    def _is_unfillable_gap(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` is its partition's first unacknowledged batch under the current producer id
        and epoch while the broker acknowledged a sequence that does not lead to it: no retry of an
        earlier batch can close that gap."""
        entry = self._partitions.get(batch.tp)
        return (
            entry is not None
            and not self._is_stale(entry)
            and batch.producer_id == entry.producer_id
            and batch.producer_epoch == entry.epoch
            and entry.last_acked_sequence != NO_SEQUENCE
            and bool(entry.in_flight)
            and entry.in_flight[0] is batch
            and not self._is_next_sequence(batch.tp, batch.base_sequence)
        )

    def _is_next_sequence(self, tp: TopicPartition, sequence: int) -> bool:
        entry = self._partitions.get(tp)
        last = entry.last_acked_sequence if entry is not None else NO_SEQUENCE
        return _seq_add(last, 1) == sequence if last != NO_SEQUENCE else sequence == 0

    def mark_unresolved(self, batch: ProducerBatch, *, awaiting_response: bool = False) -> None:
        """An expired batch may or may not have been written.

        With ``awaiting_response`` its request is still in flight: it stays among the partition's
        unacknowledged batches until the answer (or the request's failure) is reported through
        :meth:`on_success` / :meth:`on_failure`, so the partition is only resolved after that."""
        if not batch.has_sequence:
            return
        entry = self._entry(batch.tp)
        if not awaiting_response:
            entry.remove(batch)
        # The sequence right after the expired batch (the highest such, as Java's markSequenceUnresolved):
        # the batch that carries it is the one whose OUT_OF_ORDER_SEQUENCE_NUMBER proves the gap.
        after = _seq_add(batch.last_sequence, 1)
        known = self._unresolved.get(batch.tp)
        if known is None or _seq_after(after, known):
            self._unresolved[batch.tp] = after

    def request_epoch_bump(self, tp: TopicPartition | None = None) -> None:
        if tp is not None:
            self._partitions_to_rewrite.add(tp)
        self._epoch_bump_required = True

    @property
    def epoch_bump_required(self) -> bool:
        return self._epoch_bump_required

    def maybe_resolve_sequences(self) -> None:
        """Settle unresolved partitions whose in-flight batches are all answered."""
        for tp in list(self._unresolved):
            entry = self._partitions.get(tp)
            if entry is not None and entry.in_flight:
                continue
            del self._unresolved[tp]
            last = entry.last_acked_sequence if entry is not None else NO_SEQUENCE
            next_seq = entry.next_sequence if entry is not None else 0
            if (last == NO_SEQUENCE and next_seq == 0) or (
                last != NO_SEQUENCE and _seq_add(last, 1) == next_seq
            ):
                continue  # a later batch was acknowledged: the expired one was written
            log.info(
                "no in-flight batches left for %s; last acknowledged sequence %d, next %d: bumping the epoch",
                tp,
                last,
                next_seq,
            )
            self.request_epoch_bump(tp)

    def bump_epoch_if_needed(self) -> list[ProducerBatch]:
        """Apply a requested epoch bump; returns the batches whose producer state was rewritten."""
        if not self._epoch_bump_required or not self.has_producer_id:
            return []
        self._epoch_bump_required = False
        self.epoch_bumps += 1
        if self.epoch >= MAX_EPOCH:
            log.info("producer epoch exhausted; getting a new producer id")
            self.producer_id = NO_PRODUCER_ID
            self.epoch = -1
            self.state = ProducerState.UNINITIALIZED
            self._partitions_to_rewrite.clear()
            self._unresolved.clear()
            return []
        self.epoch += 1
        log.info("bumped the producer epoch to %d (producer id %d)", self.epoch, self.producer_id)
        rewritten: list[ProducerBatch] = []
        for tp in self._partitions_to_rewrite:
            rewritten += self._start_at_beginning(tp, self._entry(tp))
            self._unresolved.pop(tp, None)
        self._partitions_to_rewrite.clear()
        return rewritten

    def forget(self, batches: Iterable[ProducerBatch]) -> None:
        for batch in batches:
            entry = self._partitions.get(batch.tp)
            if entry is not None:
                entry.remove(batch)
