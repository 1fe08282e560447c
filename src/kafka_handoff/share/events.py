"""The share consumer's application events and their processor (the same model as consumer/events.py).

Each frozen event carries its parameters and its future; the :class:`ShareEventProcessor` (network thread)
has one handler per type and changes only what the network thread owns (the membership, the share fetcher,
metadata).  Acknowledgement results come back on a future of their own (``results``), completed when the
brokers answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass

from kafka_handoff.group.share_membership import ShareMembership
from kafka_handoff.network.events import ApplicationEvent, ApplicationEventProcessor
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.share.fetcher import AckResults, ShareFetchManager
from kafka_handoff.types import TopicPartition

__all__ = [
    "ShareAssignmentEvent",
    "ShareCloseEvent",
    "ShareCommitEvent",
    "ShareEventProcessor",
    "SharePollEvent",
    "ShareSubscribeEvent",
    "ShareUnsubscribeEvent",
]

Acks = Mapping[TopicPartition, Mapping[int, int]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareSubscribeEvent(ApplicationEvent):
    topics: frozenset[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareUnsubscribeEvent(ApplicationEvent):
    """Acknowledge what is due and leave the share group."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareAssignmentEvent(ApplicationEvent):
    """Result: the partitions the share group lets this member fetch from."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SharePollEvent(ApplicationEvent):
    """``poll()``: reset the poll timer, queue the implicit acknowledgements, fetch."""

    acks: Acks


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareCommitEvent(ApplicationEvent):
    """``commit_sync``/``commit_async``: send ``acks`` now; ``results`` gets every partition's outcome."""

    acks: Acks
    results: Future[AckResults]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareCloseEvent(ApplicationEvent):
    """Stop fetching, send the final acknowledgements and close the share sessions."""

    final_acks: Acks
    results: Future[AckResults]


class ShareEventProcessor(ApplicationEventProcessor):
    def __init__(
        self, *, membership: ShareMembership, fetcher: ShareFetchManager, metadata: MetadataManager
    ) -> None:
        super().__init__()
        self._membership = membership
        self._fetcher = fetcher
        self._metadata = metadata
        self.register_result(ShareSubscribeEvent, self._subscribe)
        self.register_result(ShareUnsubscribeEvent, lambda e, now: self._membership.unsubscribe(now))
        self.register_result(ShareAssignmentEvent, lambda e, now: self._fetcher.assignment)
        self.register_result(SharePollEvent, self._poll)
        self.register_result(ShareCommitEvent, self._commit)
        self.register_result(ShareCloseEvent, self._close)

    def _subscribe(self, event: ShareSubscribeEvent, now: int) -> None:
        self._metadata.request_update()
        self._membership.subscribe(event.topics, now)

    def _poll(self, event: SharePollEvent, now: int) -> None:
        self._membership.on_app_poll(now)
        if event.acks:
            self._fetcher.queue_acks(event.acks)
        self._fetcher.request_fetch()

    def _commit(self, event: ShareCommitEvent, now: int) -> None:
        self._fetcher.commit(event.acks, event.results.set_result)

    def _close(self, event: ShareCloseEvent, now: int) -> None:
        self._fetcher.close(event.final_acks, event.results.set_result)
