"""The consumer's application events and their processor (seed 002, Java's ``ApplicationEventProcessor``).

Each public call of :class:`~kafka_handoff.consumer.consumer.Consumer` that needs the network thread becomes
one of the frozen event types below, carrying its parameters and its future.  The
:class:`ConsumerEventProcessor` (network thread) has one handler per type; a handler changes only what the
network thread owns -- request managers, the membership, subscription state -- and completes the future.
What the application thread owns (the record collector, rebalance-callback state) the facade changes itself
once the future completed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass

from kafka_handoff.consumer.offsets import CommitManager, OffsetsManager
from kafka_handoff.consumer.subscription import SubscriptionState
from kafka_handoff.group.coordinator import CoordinatorManager
from kafka_handoff.group.membership import AppThreadTask, Membership, Subscription
from kafka_handoff.network.events import ApplicationEvent, ApplicationEventProcessor, TerminateTelemetryEvent
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.protocol.requests import RequestManager
from kafka_handoff.protocol.telemetry import TelemetryManager
from kafka_handoff.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

__all__ = [
    "AppCallEvent",
    "AppTaskDoneEvent",
    "AssignEvent",
    "CallbackCompletedEvent",
    "CommitEvent",
    "ConsumerEventProcessor",
    "EnforceRebalanceEvent",
    "FetchCommittedEvent",
    "GroupMetadataEvent",
    "LeaveGroupEvent",
    "LeaveStatusEvent",
    "ListOffsetsEvent",
    "MetadataUpdateEvent",
    "OwnedPartitionsEvent",
    "PollEvent",
    "ReleaseMetadataTopicsEvent",
    "SubscribeEvent",
    "TerminateTelemetryEvent",
    "UnsubscribeEvent",
]


# ------------------------------------------------------------------------------------------- group
@dataclass(frozen=True, slots=True, kw_only=True)
class PollEvent(ApplicationEvent):
    """``poll()`` started (or still waits): reset the poll timer (max.poll.interval.ms), start joining."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AppCallEvent(ApplicationEvent):
    """The application entered (``inside=True``) or left one of our blocking calls: the poll timer stands
    still meanwhile."""

    inside: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscribeEvent(ApplicationEvent):
    subscription: Subscription


@dataclass(frozen=True, slots=True, kw_only=True)
class UnsubscribeEvent(ApplicationEvent):
    """Drop the subscription/assignment (after the group was left)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveGroupEvent(ApplicationEvent):
    """Start leaving the group (the revoke callbacks already ran on the application thread)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveStatusEvent(ApplicationEvent):
    """Result: True once the membership left the group."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EnforceRebalanceEvent(ApplicationEvent):
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CallbackCompletedEvent(ApplicationEvent):
    """A rebalance callback the membership asked for (its ``seq``) completed, with the listener's error."""

    seq: int
    error: BaseException | None


@dataclass(frozen=True, slots=True, kw_only=True)
class AppTaskDoneEvent(ApplicationEvent):
    """An :class:`AppThreadTask` (a custom assignor's ``assign``) ran on the application thread."""

    task: AppThreadTask
    result: object
    error: BaseException | None


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataEvent(ApplicationEvent):
    """Result: the member's :class:`ConsumerGroupMetadata`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnedPartitionsEvent(ApplicationEvent):
    """Result: the partitions the membership owns (``None`` without group management)."""


# ------------------------------------------------------------------------------------------- assign mode
@dataclass(frozen=True, slots=True, kw_only=True)
class AssignEvent(ApplicationEvent):
    """``assign()``: auto-commit what is being unassigned (best effort), then take the new assignment."""

    partitions: tuple[TopicPartition, ...]


# ------------------------------------------------------------------------------------------- offsets
@dataclass(frozen=True, slots=True, kw_only=True)
class CommitEvent(ApplicationEvent):
    """Commit ``offsets``; ``retry``: retriable errors are retried until the deadline (commit_sync);
    ``only_owned``: partitions the member no longer owns are left out (the default offsets)."""

    offsets: Mapping[TopicPartition, OffsetAndMetadata]
    timeout_ms: int
    retry: bool
    only_owned: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchCommittedEvent(ApplicationEvent):
    partitions: frozenset[TopicPartition]
    timeout_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsEvent(ApplicationEvent):
    """ListOffsets for ``timestamps`` (EARLIEST/LATEST or a time); their topics join the metadata topics
    until a :class:`ReleaseMetadataTopicsEvent`."""

    timestamps: Mapping[TopicPartition, int]
    timeout_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseMetadataTopicsEvent(ApplicationEvent):
    """Topics a lookup added to the metadata topics that are not needed any more (unless assigned)."""

    topics: frozenset[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataUpdateEvent(ApplicationEvent):
    """Result: fresh cluster metadata for ``topics`` (``None``: all topics)."""

    topics: frozenset[str] | None


class ConsumerEventProcessor(ApplicationEventProcessor):
    """Network thread: one handler per consumer event type."""

    def __init__(
        self,
        *,
        subs: SubscriptionState,
        metadata: MetadataManager,
        offsets: OffsetsManager,
        telemetry: TelemetryManager,
        coordinator: CoordinatorManager | None,
        commits: CommitManager | None,
        membership: Callable[[], Membership | None],
        managers: Callable[[], list[RequestManager]],
        extra_metadata_topics: set[str],
        group_metadata: Callable[[], ConsumerGroupMetadata],
        owned: Callable[[], frozenset[TopicPartition] | None],
    ) -> None:
        super().__init__()
        self._subs = subs
        self._metadata = metadata
        self._offsets = offsets
        self._telemetry = telemetry
        self._coordinator = coordinator
        self._commits = commits
        self._membership = membership
        self._managers = managers
        self._extra_topics = extra_metadata_topics
        self.register_result(PollEvent, self._poll)
        self.register_result(AppCallEvent, self._app_call)
        self.register_result(SubscribeEvent, self._subscribe)
        self.register_result(UnsubscribeEvent, lambda e, now: self._subs.unsubscribe())
        self.register_result(LeaveGroupEvent, self._leave)
        self.register_result(LeaveStatusEvent, self._left)
        self.register_result(EnforceRebalanceEvent, self._enforce_rebalance)
        self.register_result(CallbackCompletedEvent, self._callback_completed)
        self.register_result(AppTaskDoneEvent, self._task_done)
        self.register_result(GroupMetadataEvent, lambda e, now: group_metadata())
        self.register_result(OwnedPartitionsEvent, lambda e, now: owned())
        self.register_result(AssignEvent, self._assign)
        self.register(CommitEvent, self._commit)
        self.register(FetchCommittedEvent, self._fetch_committed)
        self.register(ListOffsetsEvent, self._list_offsets)
        self.register_result(ReleaseMetadataTopicsEvent, self._release_topics)
        self.register(MetadataUpdateEvent, self._metadata_update)
        self.register(TerminateTelemetryEvent, self._terminate_telemetry)

    # ---------------------------------------------------------------------------------- group
    def _poll(self, event: PollEvent, now: int) -> None:
        membership = self._membership()
        if membership is not None:
            membership.on_app_poll(now)

    def _app_call(self, event: AppCallEvent, now: int) -> None:
        membership = self._membership()
        if membership is not None:
            membership.on_app_call(event.inside, now)

    def _subscribe(self, event: SubscribeEvent, now: int) -> None:
        membership = self._membership()
        coordinator = self._coordinator
        assert membership is not None and coordinator is not None
        self._subs.subscribe(event.subscription)
        if coordinator.coordinator is not None:
            membership.on_coordinator(coordinator.coordinator.node_id, now, coordinator.epoch)
        coordinator.wanted = True
        membership.subscribe(event.subscription, now)
        self._metadata.request_update()
        if self._metadata.cluster.brokers:
            membership.on_metadata(self._metadata.cluster, now)
        managers = self._managers()
        if membership not in managers:
            managers.insert(2, membership)

    def _leave(self, event: LeaveGroupEvent, now: int) -> None:
        membership = self._membership()
        if membership is not None:
            membership.leave(now)

    def _left(self, event: LeaveStatusEvent, now: int) -> bool:
        membership = self._membership()
        return membership is None or bool(membership.left)

    def _enforce_rebalance(self, event: EnforceRebalanceEvent, now: int) -> None:
        membership = self._membership()
        if membership is not None:
            membership.enforce_rebalance(event.reason, now)

    def _callback_completed(self, event: CallbackCompletedEvent, now: int) -> None:
        membership = self._membership()
        if membership is not None:
            membership.on_callback_completed(event.seq, event.error, now)

    def _task_done(self, event: AppTaskDoneEvent, now: int) -> None:
        event.task.done(event.result, event.error, now)

    def _assign(self, event: AssignEvent, now: int) -> None:
        parts = set(event.partitions)
        commits = self._commits
        if commits is not None and commits.auto_commit and self._subs.assigned():
            # As Java: commit consumed offsets of partitions being unassigned (async, best effort).
            removed = self._subs.assigned() - parts
            offsets = {tp: o for tp, o in commits.consumed_offsets().items() if tp in removed}
            if offsets:
                commits.commit(offsets, Future(), now + 5000, retry=False, now_ms=now)
        self._subs.assign_from_user(list(event.partitions))
        self._metadata.request_update()

    # ---------------------------------------------------------------------------------- offsets
    def _require_commits(self) -> CommitManager:
        if self._commits is None:
            raise RuntimeError("a commit event reached a consumer without group.id")
        return self._commits

    def _commit(self, event: CommitEvent, now: int) -> None:
        self._require_commits().commit(
            dict(event.offsets),
            event.future,
            now + event.timeout_ms,
            retry=event.retry,
            now_ms=now,
            only_owned=event.only_owned,
        )

    def _fetch_committed(self, event: FetchCommittedEvent, now: int) -> None:
        self._require_commits().fetch_committed(set(event.partitions), event.future, now + event.timeout_ms)

    def _list_offsets(self, event: ListOffsetsEvent, now: int) -> None:
        self._extra_topics.update(tp.topic for tp in event.timestamps)
        self._offsets.lookup(dict(event.timestamps), event.future, now + event.timeout_ms)

    def _release_topics(self, event: ReleaseMetadataTopicsEvent, now: int) -> None:
        assigned = {tp.topic for tp in self._subs.assigned()}
        self._extra_topics.difference_update(event.topics - assigned)

    def _metadata_update(self, event: MetadataUpdateEvent, now: int) -> None:
        self._metadata.wait_for_update(event.future, event.topics)

    def _terminate_telemetry(self, event: TerminateTelemetryEvent, now: int) -> None:
        self._telemetry.terminate(now, event.future)
