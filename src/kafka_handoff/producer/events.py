"""The producer's application events and their processor (as ``consumer/events.py`` for the consumer).

The producer's blocking calls that need the network thread -- the metadata wait of ``send()`` and
``partitions_for()``, the transaction calls, the terminating telemetry push of ``close()`` -- each become one
frozen event type below, carrying its parameters and its future.  The :class:`ProducerEventProcessor`
(network thread) has one handler per type; a handler changes only what the network thread owns (the
producer's metadata topics, the metadata manager, the transaction manager) and completes the future, now or
when the answer arrives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kafka_handoff.network.events import ApplicationEvent, ApplicationEventProcessor, TerminateTelemetryEvent
from kafka_handoff.producer.transactions import TransactionManager
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.protocol.telemetry import TelemetryManager
from kafka_handoff.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

__all__ = [
    "AbortTransactionEvent",
    "BeginTransactionEvent",
    "CommitTransactionEvent",
    "InitTransactionsEvent",
    "ProducerEventProcessor",
    "PurgeEvent",
    "SendOffsetsToTransactionEvent",
    "TerminateTelemetryEvent",
    "TopicMetadataEvent",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMetadataEvent(ApplicationEvent):
    """Add ``topic`` to the producer's metadata topics; the result comes with the next metadata update that
    covers it (Java ``waitOnMetadata``)."""

    topic: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PurgeEvent(ApplicationEvent):
    """``purge()``: completes with the number of queued, never sent records failed with ``error``."""

    error: BaseException


@dataclass(frozen=True, slots=True, kw_only=True)
class InitTransactionsEvent(ApplicationEvent):
    """``init_transactions()``: completes once the coordinator gave the producer id and epoch."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BeginTransactionEvent(ApplicationEvent):
    """``begin_transaction()``: completes at once."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SendOffsetsToTransactionEvent(ApplicationEvent):
    """``send_offsets_to_transaction()``: completes once the group coordinator took the offsets."""

    offsets: Mapping[TopicPartition, OffsetAndMetadata]
    group_metadata: ConsumerGroupMetadata


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitTransactionEvent(ApplicationEvent):
    """``commit_transaction()`` (after the flush): completes with the EndTxn answer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortTransactionEvent(ApplicationEvent):
    """``abort_transaction()``: completes with the EndTxn answer."""


class ProducerEventProcessor(ApplicationEventProcessor):
    """Network thread: one handler per producer event type (the transaction events only with a
    ``transactional.id``: without one the producer refuses those calls before any event is made)."""

    def __init__(
        self,
        *,
        metadata: MetadataManager,
        telemetry: TelemetryManager,
        txn: TransactionManager | None,
        add_topic: Callable[[str, int], None],
        purge: Callable[[BaseException, int], int],
    ) -> None:
        super().__init__()
        self._metadata = metadata
        self._telemetry = telemetry
        self._add_topic = add_topic
        self.register(TopicMetadataEvent, self._topic_metadata)
        self.register(TerminateTelemetryEvent, self._terminate_telemetry)
        self.register_result(PurgeEvent, lambda e, now: purge(e.error, now))
        if txn is not None:
            self.register(InitTransactionsEvent, lambda e, now: txn.init_transactions(e.future))
            self.register_result(BeginTransactionEvent, lambda e, now: txn.begin_transaction())
            self.register(
                SendOffsetsToTransactionEvent,
                lambda e, now: txn.send_offsets(e.offsets, e.group_metadata, e.future),
            )
            self.register(CommitTransactionEvent, lambda e, now: txn.commit(e.future))
            self.register(AbortTransactionEvent, lambda e, now: txn.abort(e.future, now))

    def _topic_metadata(self, event: TopicMetadataEvent, now: int) -> None:
        self._add_topic(event.topic, now)
        self._metadata.wait_for_update(event.future, frozenset({event.topic}))

    def _terminate_telemetry(self, event: TerminateTelemetryEvent, now: int) -> None:
        self._telemetry.terminate(now, event.future)
