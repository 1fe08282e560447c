"""Exactly-once consume-transform-produce: the worked example of transactions with group metadata (KIP-447)
and KIP-983 delayed revocation.

Each member of a consumer group reads the input topic with ``isolation.level=read_committed``, transforms
every record and writes the results to the output topic inside a producer transaction together with the
input offsets (``send_offsets_to_transaction(offsets, consumer.group_metadata())``).  The output and the
progress commit atomically, or neither does:

* a member that dies mid-transaction leaves an open transaction that the coordinator aborts
  (``transaction.timeout.ms``); the partitions' next owner starts at the last committed offsets, and
  ``read_committed`` readers never see the aborted output;
* a member fenced by a rebalance (an older generation / member epoch) cannot commit offsets for partitions
  it no longer owns: ``send_offsets_to_transaction`` fails with an abortable error and the transaction is
  aborted;
* when a revoke is requested (``records.to_be_revoked_partitions``) the open transaction is committed at
  once, before the next ``poll()`` completes the revoke; if that commit cannot finish yet (a broker is
  restarting) the member calls ``consumer.delay_revoke`` so the partitions stay until it has.

Use it as a library (``tests/faults/test_exactly_once.py`` runs three members under churn) or run one member::

    python examples/exactly_once.py --bootstrap 127.0.0.1:9092 --input orders --output orders-enriched \\
        --group enrich --transactional-id enrich-1

Start more members with other ``--transactional-id`` values (any unique id: KIP-447 fences zombies by the
group's generation, not by the id).  See ``docs/exactly-once.md``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_handoff import Consumer, Producer
from kafka_handoff.consumer.listener import RebalanceConsumer, RebalanceListenerBase
from kafka_handoff.errors import (
    InvalidTxnStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
)
from kafka_handoff.types import ConsumerRecord, OffsetAndMetadata, TopicPartition

__all__ = ["ExactlyOnceProcessor", "Transform", "TxnStats", "uppercase"]

log = logging.getLogger("exactly_once")

#: ``transform(record) -> [(key, value), ...]``: the output records of one input record (any number).
Transform = Callable[[ConsumerRecord], Iterable[tuple[bytes | None, bytes | None]]]

#: Errors after which the producer is unusable (Java's fatal transaction errors): the member must stop.
#: Others -- InvalidProducerEpochError too (KIP-588: the coordinator timed the transaction out) -- are
#: abortable: abort_transaction() recovers, or raises the fatal error if there really is a successor.
FATAL = (ProducerFencedError, TransactionalIdAuthorizationFailedError, InvalidTxnStateError)


def uppercase(record: ConsumerRecord) -> list[tuple[bytes | None, bytes | None]]:
    """The default transform: the value in upper case, the key kept."""
    return [(record.key, None if record.value is None else bytes(record.value).upper())]


@dataclass
class TxnStats:
    committed_transactions: int = 0
    aborted_transactions: int = 0
    records_in: int = 0
    records_out: int = 0
    delayed_revokes: int = 0
    errors: list[str] = field(default_factory=list)


class _Listener(RebalanceListenerBase):
    def __init__(self, owner: ExactlyOnceProcessor) -> None:
        self._owner = owner

    def on_partitions_lost(self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer) -> None:
        # Another member may own them already: our open transaction's offsets would be refused (KIP-447);
        # abort it before anything else.
        self._owner.lost(partitions)


class ExactlyOnceProcessor:
    """One member of the group: ``run()`` until ``stop()`` (or a fatal error)."""

    def __init__(
        self,
        bootstrap: str,
        input_topic: str,
        output_topic: str,
        group: str,
        transactional_id: str,
        *,
        transform: Transform = uppercase,
        protocol: str = "consumer",
        commit_interval_ms: int = 100,
        max_records_per_transaction: int = 1000,
        commit_timeout_s: float = 5.0,
        consumer_config: Mapping[str, Any] | None = None,
        producer_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.input_topic = input_topic
        self.output_topic = output_topic
        self.transform = transform
        self.commit_interval_ms = commit_interval_ms
        self.max_records_per_transaction = max_records_per_transaction
        self.commit_timeout_s = commit_timeout_s
        self.stats = TxnStats()
        self._running = True
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": protocol,
                "isolation.level": "read_committed",  # never read another member's aborted output
                "enable.auto.commit": False,  # offsets are committed by the transactions only
                "auto.offset.reset": "earliest",
                **(consumer_config or {}),
            }
        )
        self._producer_config = {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            **(producer_config or {}),
        }
        self.producer = Producer(self._producer_config)
        self.producer.init_transactions()
        # The open transaction: the next offset per input partition, and where it started (to rewind).
        self._next: dict[TopicPartition, int] = {}
        self._start: dict[TopicPartition, int] = {}
        self._open_since: float | None = None
        self._records_in_txn = 0
        self._must_abort = False
        self._committing = False
        self._revoking: set[TopicPartition] = set()

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        self.consumer.set_rebalance_listener(_Listener(self))
        self.consumer.subscribe([self.input_topic])
        try:
            while self._running:
                self.poll_once()
            while self._committing:
                self.poll_once()
            if self._open_since is not None:
                self._end_transaction(frozenset())
                while self._committing:
                    self.poll_once()
        finally:
            self.close()

    def stop(self) -> None:
        self._running = False

    def poll_once(self) -> None:
        if self._committing:
            # A commit did not finish within commit_timeout_s (a broker restarting): take no new records
            # until it has, but keep polling -- rebalance events flow and delay_revoke keeps the partitions.
            self.consumer.pause(self.consumer.assignment())
            records = self.consumer.poll(0.05)
            for tp, batch in records.by_partition().items():  # newly assigned: read them again later
                self.consumer.seek(tp, batch[0].offset)
            self._revoking |= records.to_be_revoked_partitions & self._next.keys()
            self._finish_commit()
            return
        records = self.consumer.poll(0.05)
        try:
            for record in records:
                tp = TopicPartition(record.topic, record.partition)
                if self._open_since is None:
                    self.producer.begin_transaction()
                    self._open_since = time.monotonic()
                self._start.setdefault(tp, record.offset)
                self._next[tp] = record.offset + 1
                self._records_in_txn += 1
                for key, value in self.transform(record):
                    self.producer.send(self.output_topic, value, key=key)
                    self.stats.records_out += 1
                self.stats.records_in += 1
        except FATAL:
            raise
        except KafkaError as exc:  # a send refused: the transaction cannot commit any more
            self.stats.errors.append(repr(exc))
            self._must_abort = True
        if self._open_since is None:
            return
        # KIP-983: a revoke requested in this poll completes at the start of the next one -- commit first.
        revoking = records.to_be_revoked_partitions & self._next.keys()
        due = (time.monotonic() - self._open_since) * 1000 >= self.commit_interval_ms
        if revoking or due or self._must_abort or self._records_in_txn >= self.max_records_per_transaction:
            self._end_transaction(revoking)

    def lost(self, partitions: Collection[TopicPartition]) -> None:
        """Partitions lost (on_partitions_lost, inside poll()): the open transaction's offsets for them would
        be refused (KIP-447), so it is aborted when poll() returns.  A transaction whose offsets were
        already accepted is committed (the next owner's offset fetch waits for it: require_stable)."""
        if (
            self._open_since is not None
            and not self._committing
            and any(tp in self._next for tp in partitions)
        ):
            self._must_abort = True

    def before_commit(self) -> None:
        """Called inside each transaction right before its commit (a hook for tests and tracing)."""

    # ------------------------------------------------------------------ ending a transaction
    def _end_transaction(self, revoking: Collection[TopicPartition]) -> None:
        if self._must_abort:
            self._abort("the transaction cannot commit (a partition was lost or a send failed)")
            return
        offsets = {tp: OffsetAndMetadata(offset) for tp, offset in self._next.items()}
        try:
            # KIP-447: the group metadata (generation / member epoch) fences a member that lost partitions.
            self.producer.send_offsets_to_transaction(offsets, self.consumer.group_metadata())
        except FATAL:
            raise
        except KafkaError as exc:
            self._abort(f"the offsets were not accepted: {exc!r}")
            return
        self.before_commit()
        self._committing = True
        self._revoking = set(revoking)
        self._finish_commit()

    def _finish_commit(self) -> None:
        try:
            self.producer.commit_transaction(self.commit_timeout_s)  # resumes a commit that timed out
        except FATAL:
            raise
        except KafkaTimeoutError as exc:
            log.warning("transaction commit not finished yet: %s", exc)
            if self._revoking and self.consumer.delay_revoke(self._revoking):
                self.stats.delayed_revokes += 1
            return
        except KafkaError as exc:
            self._committing = False
            self.consumer.resume(self.consumer.assignment())
            self._abort(f"the commit failed: {exc!r}")
            return
        self._committing = False
        self.consumer.resume(self.consumer.assignment())
        self.stats.committed_transactions += 1
        self._clear()

    def _abort(self, why: str) -> None:
        log.warning("aborting the transaction: %s", why)
        self.stats.errors.append(why)
        try:
            self.producer.abort_transaction()
        except (ProducerFencedError, TransactionalIdAuthorizationFailedError):
            raise  # a real successor, or no right to the id: the member must stop
        except KafkaError as exc:
            # The producer is unusable (an error Java too calls fatal, e.g. a coordinator's
            # UNKNOWN_SERVER_ERROR to EndTxn while a broker restarts) but nobody took this member's place.
            self._renew_producer(exc)
            return
        self.stats.aborted_transactions += 1
        # Process the aborted records again: rewind the partitions this member still owns.
        owned = self.consumer.assignment()
        for tp, offset in self._start.items():
            if tp in owned:
                self.consumer.seek(tp, offset)
        self._clear()

    def _renew_producer(self, error: KafkaError) -> None:
        """A new producer with the same transactional.id takes over: its init_transactions() completes or
        aborts the old producer's open transaction, whichever the coordinator had decided.  Input is then
        read again from the group's committed offsets, which say which of the two it was."""
        log.error("the producer cannot go on (%r): a new one takes over its transactional.id", error)
        self.stats.errors.append(f"producer renewed after {error!r}")
        try:
            self.producer.close(0)
        except KafkaError as exc:
            log.info("closing the unusable producer: %r", exc)
        self.producer = Producer(self._producer_config)
        self.producer.init_transactions()
        owned = self.consumer.assignment()
        committed = self.consumer.committed(owned)
        for tp in owned:
            om = committed.get(tp)
            if om is None:
                self.consumer.seek_to_beginning([tp])  # nothing committed: no transaction of it counted
            else:
                self.consumer.seek(tp, om.offset)
        self._clear()

    def _clear(self) -> None:
        self._next.clear()
        self._start.clear()
        self._revoking = set()
        self._open_since = None
        self._records_in_txn = 0
        self._must_abort = False

    def close(self) -> None:
        try:
            self.consumer.close()
        finally:
            self.producer.close(5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--protocol", choices=["consumer", "classic"], default="consumer")
    parser.add_argument("--commit-interval-ms", type=int, default=100)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    processor = ExactlyOnceProcessor(
        args.bootstrap,
        args.input,
        args.output,
        args.group,
        args.transactional_id,
        protocol=args.protocol,
        commit_interval_ms=args.commit_interval_ms,
    )
    signal.signal(signal.SIGINT, lambda *_: processor.stop())
    signal.signal(signal.SIGTERM, lambda *_: processor.stop())
    processor.run()
    print(processor.stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
