"""The ``Consumer``: the application-thread facade of the threading model in seed 002.

Every API call becomes an application event run on the network thread; blocking calls wait on the
event's future with their timeout.  ``poll()`` posts a poll event (resets the poll timer, starts joining),
runs rebalance callbacks the membership asked for (on this thread, as in the seeds), then collects
records from the fetch buffer, decoding them here so the network thread stays free for heartbeats.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import logging
import math
import queue
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from kafka_handoff.client_setup import (
    client_properties,
    drain_background,
    group_coordinator,
    metadata_and_client,
    wait_result,
)
from kafka_handoff.clock import MonotonicClock
from kafka_handoff.config import ConsumerConfig, parse_consumer_config
from kafka_handoff.consumer.batch import ColumnarRecords
from kafka_handoff.consumer.collector import Collector
from kafka_handoff.consumer.dispatch import RebalanceDispatcher
from kafka_handoff.consumer.events import (
    AppCallEvent,
    AppTaskDoneEvent,
    AssignEvent,
    CallbackCompletedEvent,
    CommitEvent,
    ConsumerEventProcessor,
    EnforceRebalanceEvent,
    FetchCommittedEvent,
    GroupMetadataEvent,
    LeaveGroupEvent,
    LeaveStatusEvent,
    ListOffsetsEvent,
    MetadataUpdateEvent,
    OwnedPartitionsEvent,
    PollEvent,
    ReleaseMetadataTopicsEvent,
    SubscribeEvent,
    TerminateTelemetryEvent,
    UnsubscribeEvent,
)
from kafka_handoff.consumer.fetcher import FetchBuffer, FetchManager
from kafka_handoff.consumer.listener import (
    AnyRebalanceListener,
    RebalanceListenerHolder,
    invoke_callback,
)
from kafka_handoff.consumer.metrics import FetchMetrics, RebalanceMetrics
from kafka_handoff.consumer.offsets import EARLIEST, LATEST, CommitManager, OffsetsManager
from kafka_handoff.consumer.records import ConsumerRecords
from kafka_handoff.consumer.subscription import SubscriptionState, SubscriptionType
from kafka_handoff.errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    UnknownTopicOrPartitionError,
    WakeupError,
)
from kafka_handoff.group.coordinator import CoordinatorManager
from kafka_handoff.group.membership import (
    AppThreadTask,
    AssignmentChanged,
    CallbackKind,
    CallbackNeeded,
    CoordinatorNeeded,
    Membership,
    MembershipError,
    MetadataNeeded,
    Subscription,
)
from kafka_handoff.metrics import Metrics
from kafka_handoff.network.events import ApplicationEvent
from kafka_handoff.network.thread import BackgroundError, NetworkThread
from kafka_handoff.protocol.requests import RequestManager
from kafka_handoff.protocol.telemetry import TelemetryManager
from kafka_handoff.protocol.telemetry import client_instance_id as telemetry_client_instance_id
from kafka_handoff.types import (
    ClusterMetadata,
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    PartitionInfo,
    TopicPartition,
)

__all__ = ["Consumer"]

log = logging.getLogger(__name__)
T = TypeVar("T")


_client_ids = itertools.count(1)


class Consumer:
    """A Kafka consumer.  Not thread-safe, except :meth:`wakeup` (as in Java)."""

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        self._config: ConsumerConfig = parse_consumer_config(client_properties(config, kwargs))
        cfg = self._config
        self._closed = False
        self._clock = MonotonicClock()
        self.client_id: str = cfg.get("client.id") or f"consumer-{next(_client_ids)}"
        self.group_id: str | None = cfg.get("group.id")
        self._default_timeout_ms = int(cfg.get("default.api.timeout.ms"))
        self._subs = SubscriptionState(str(cfg.get("auto.offset.reset")))
        self._buffer = FetchBuffer()
        self._metrics = Metrics(clock=self._clock.now_ms, default_tags={"client-id": self.client_id})
        self._fetch_metrics = FetchMetrics(self._metrics, client_id=self.client_id)
        self._rebalance_metrics = RebalanceMetrics(
            self._metrics,
            client_id=self.client_id,
            assigned_partitions=lambda: len(self._subs.assigned()),
        )
        self._background: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # Errors the application must see, in the order they happened: background errors (network
        # thread) and rebalance-callback errors.  Each call that surfaces errors raises the first; the
        # rest stay queued for the next calls, so every error reaches the application exactly once.
        self._errors: collections.deque[BaseException] = collections.deque()
        self._wakeup_requested = threading.Event()
        self._fatal: BaseException | None = None

        isolation = 1 if cfg.get("isolation.level") == "read_committed" else 0
        self._read_committed = isolation == 1
        self._lag_version = -1  # the SubscriptionState.version the lag metrics were pruned for
        self._extra_metadata_topics: set[str] = set()
        self._metadata, client = metadata_and_client(
            cfg,
            self.client_id,
            allow_auto_topic_creation=cfg.allow_auto_create_topics,
            topics=self._metadata_topics,
        )
        self._client = client

        self._coordinator: CoordinatorManager | None = None
        self._commits: CommitManager | None = None
        self.membership: Membership | None = None
        managers: list[RequestManager] = [self._metadata]
        if self.group_id is not None:
            self._coordinator = group_coordinator(
                self.group_id, cfg, client, lambda exc: self._background.put(BackgroundError(exc))
            )
            self._commits = CommitManager(
                self.group_id,
                self._coordinator,
                self._subs,
                group_metadata=self._group_metadata_nt,
                owned=self._owned_nt,
                auto_commit=bool(cfg.get("enable.auto.commit")),
                auto_commit_interval_ms=int(cfg.get("auto.commit.interval.ms")),
                retry_backoff_ms=int(cfg.get("retry.backoff.ms")),
                retry_backoff_max_ms=int(cfg.get("retry.backoff.max.ms")),
                on_commit_latency=self._rebalance_metrics.record_commit,
                on_auto_commit_error=lambda exc: log.warning("auto-commit failed: %s", exc),
                stable_group_metadata=self._stable_group_metadata_nt,
                on_group_error=self._on_commit_group_error_nt,
            )
            managers += [self._coordinator, self._commits]
        self._offsets = OffsetsManager(
            self._subs,
            self._metadata,
            isolation_level=isolation,
            retry_backoff_ms=int(cfg.get("retry.backoff.ms")),
            retry_backoff_max_ms=int(cfg.get("retry.backoff.max.ms")),
            committed_lookup=self._committed_lookup_nt if self._commits is not None else None,
            wall_clock_ms=self._clock.wall_ms,
            on_error=lambda exc: self._background.put(BackgroundError(exc)),
        )
        self._fetcher = FetchManager(
            self._subs,
            self._metadata,
            self._buffer,
            fetch_min_bytes=int(cfg.get("fetch.min.bytes")),
            fetch_max_bytes=int(cfg.get("fetch.max.bytes")),
            fetch_max_wait_ms=int(cfg.get("fetch.max.wait.ms")),
            max_partition_fetch_bytes=int(cfg.get("max.partition.fetch.bytes")),
            isolation_level=isolation,
            rack_id=str(cfg.get("client.rack") or ""),
            retry_backoff_ms=int(cfg.get("retry.backoff.ms")),
            retry_backoff_max_ms=int(cfg.get("retry.backoff.max.ms")),
            on_fetched=self._fetch_metrics.record_fetch,
        )
        managers += [self._offsets, self._fetcher]
        group_id = self.group_id
        self._telemetry = TelemetryManager(
            self._metrics,
            enabled=bool(cfg.get("enable.metrics.push")),
            retry_backoff_ms=int(cfg.get("retry.backoff.ms")),
            retry_backoff_max_ms=int(cfg.get("retry.backoff.max.ms")),
            resource=lambda: {"group_id": group_id} if group_id else {},
            now_unix_nanos=self._clock.wall_ns,
        )
        managers.append(self._telemetry)
        self._managers = managers
        self._collector = Collector(
            self._subs,
            self._buffer,
            max_poll_records=int(cfg.get("max.poll.records")),
            check_crcs=bool(cfg.get("check.crcs")),
            max_decompressed_bytes=int(cfg.get("max.decompressed.batch.bytes")),
            read_committed=isolation == 1,
            key_deserializer=cfg.get("key.deserializer"),
            value_deserializer=cfg.get("value.deserializer"),
            on_records=self._on_records_consumed,
        )
        processor = ConsumerEventProcessor(
            subs=self._subs,
            metadata=self._metadata,
            offsets=self._offsets,
            telemetry=self._telemetry,
            coordinator=self._coordinator,
            commits=self._commits,
            membership=lambda: self.membership,
            managers=lambda: self._thread.managers,
            extra_metadata_topics=self._extra_metadata_topics,
            group_metadata=self._group_metadata_nt,
            owned=self._owned_nt,
        )
        self._thread = NetworkThread(
            client,
            managers,
            self._clock,
            name=f"kafka-handoff-network-{self.client_id}",
            background_events=self._background,
            on_close=self._on_close_nt,
            processor=processor,
        )
        self._buffer.on_release = self._thread.wakeup  # the buffer hit its low-water mark: fetch more
        self._group_hooks_init()
        self._thread.start()

    # ==================================================================================== helpers
    def _group_hooks_init(self) -> None:
        self._listeners = RebalanceListenerHolder()
        self._protocol = str(self._config.get("group.protocol"))
        self._dispatch = RebalanceDispatcher(
            _DispatchHost(self),
            now_ms=lambda: self._clock.now_ms(),
            max_poll_interval_ms=int(self._config.get("max.poll.interval.ms")),
            kip848=self._protocol == "consumer",
            same_poll_revoke=self._config.get("revoke.completion") == "same-poll",
        )
        self._collector.excluded = self._dispatch.revoke.is_revoke_requested
        self._thread.add_after_poll(self._drain_membership_nt)
        if self._coordinator is not None:
            coordinator = self._coordinator

            def on_coordinator(node: Any, now: int) -> None:
                if self.membership is not None:
                    self.membership.on_coordinator(
                        None if node is None else node.node_id, now, coordinator.epoch
                    )

            coordinator.listeners.append(on_coordinator)

            def on_metadata(cluster: ClusterMetadata, now: int) -> None:
                if self.membership is not None:
                    self.membership.on_metadata(cluster, now)

            self._metadata.listeners.append(on_metadata)

    def _create_membership(self) -> Membership:
        """The membership implementation ``group.protocol`` selects (the rest of the consumer does not know
        which one runs)."""
        cfg = self._config
        assert self.group_id is not None
        common = {
            "group_instance_id": cfg.get("group.instance.id"),
            "rack_id": cfg.get("client.rack") or None,
            "rebalance_timeout_ms": int(cfg.get("max.poll.interval.ms")),
            "retry_backoff_ms": int(cfg.get("retry.backoff.ms")),
            "retry_backoff_max_ms": int(cfg.get("retry.backoff.max.ms")),
            "metrics": self._rebalance_metrics,
        }
        if self._protocol == "consumer":
            from kafka_handoff.group.consumer_membership import ConsumerMembership

            return ConsumerMembership(
                self.group_id, server_assignor=cfg.get("group.remote.assignor"), **common
            )
        from kafka_handoff.group.assignors import get_assignors
        from kafka_handoff.group.classic_membership import ClassicMembership

        return ClassicMembership(
            self.group_id,
            get_assignors(cfg.get("partition.assignment.strategy")),
            session_timeout_ms=int(cfg.get("session.timeout.ms")),
            heartbeat_interval_ms=int(cfg.get("heartbeat.interval.ms")),
            request_timeout_ms=int(cfg.get("request.timeout.ms")),
            exclude_internal_topics=bool(cfg.get("exclude.internal.topics")),
            app_thread_assignors=True,
            **common,
        )

    def _drain_membership_nt(self, now: int) -> None:
        """Network thread, after every network poll: apply what the membership asked for."""
        membership = self.membership
        if membership is None:
            return
        notify = False
        for event in membership.drain_events():
            if isinstance(event, AssignmentChanged):
                self._subs.set_group_assignment(event.owned, event.awaiting_callback)
            elif isinstance(event, CallbackNeeded):
                if event.received_ms is None:
                    event = dataclasses.replace(event, received_ms=now)
                if event.kind is CallbackKind.REVOKE:
                    # From now on nothing more is fetched for them (KIP-983: no more records).
                    self._subs.mark_pending_revocation(event.partitions)
                self._background.put(event)
                notify = True
            elif isinstance(event, AppThreadTask):
                self._background.put(event)
                notify = True
            elif isinstance(event, MetadataNeeded):
                if event.topics:
                    self._extra_metadata_topics.update(event.topics)
                self._metadata.request_update()
            elif isinstance(event, CoordinatorNeeded):
                if self._coordinator is not None:
                    # Marks only the coordinator the event is about: a stale event must not invalidate a
                    # coordinator found since (in the same network poll: issue 13's livelock).
                    self._coordinator.on_coordinator_needed(event, now)
            elif isinstance(event, MembershipError):
                self._background.put(BackgroundError(event.error, fatal=event.fatal))
                notify = True
        if notify:
            self._buffer.notify()

    def _metadata_topics(self) -> frozenset[str] | None:
        if self._subs.type is SubscriptionType.AUTO_PATTERN:
            return None
        topics = {tp.topic for tp in self._subs.assigned()}
        topics |= set(self._subs.subscription.topics)
        topics |= self._extra_metadata_topics
        return frozenset(topics)

    def _group_metadata_nt(self) -> ConsumerGroupMetadata:
        if self.membership is not None:
            return self.membership.group_metadata()
        return ConsumerGroupMetadata(self.group_id or "", -1, "", self._config.get("group.instance.id"))

    def _stable_group_metadata_nt(self) -> ConsumerGroupMetadata | None:
        """``None`` while a classic rebalance is in progress (commits wait for it: issue 5 part 5)."""
        membership = self.membership
        if membership is not None and self._subs.has_auto_assignment:
            return membership.generation_if_stable()
        return self._group_metadata_nt()

    def _on_commit_group_error_nt(self, code: int, sent: ConsumerGroupMetadata, now: int) -> None:
        membership = self.membership
        if membership is not None and self._subs.has_auto_assignment:
            membership.on_commit_error(code, sent, now)

    def _owned_nt(self) -> frozenset[TopicPartition] | None:
        if self.membership is not None and self._subs.has_auto_assignment:
            return self.membership.owned
        return None

    def _committed_lookup_nt(
        self, parts: set[TopicPartition], done: Callable[[dict[TopicPartition, Any], int], None]
    ) -> bool:
        assert self._commits is not None
        fut: Future[dict[TopicPartition, OffsetAndMetadata | None]] = Future()

        def on_done(f: Future[dict[TopicPartition, OffsetAndMetadata | None]]) -> None:
            now = self._clock.now_ms()
            exc = f.exception()
            if exc is not None:
                done({tp: exc for tp in parts}, now)
            else:
                done(dict(f.result()), now)

        fut.add_done_callback(on_done)
        self._commits.fetch_committed(parts, fut, self._clock.now_ms() + self._default_timeout_ms)
        return True

    def _on_close_nt(self, now: int) -> bool:
        if self._fetcher.enabled:
            self._fetcher.close_sessions(now)  # KIP-227: stop fetching, close the brokers' fetch sessions
        done = self._fetcher.sessions_closed()
        if self.membership is not None:
            done = done and self.membership.left
        if self._commits is not None and self._commits.pending():
            done = False
        return done

    def _ensure_open(self) -> None:
        if self._closed:
            raise IllegalStateError("this consumer has already been closed")

    def _timeout_ms(self, timeout: float | None) -> int:
        if timeout is None:
            return self._default_timeout_ms
        return max(0, int(timeout * 1000))

    def _wait(self, future: Future[T], timeout_ms: int, what: str, *, internal: bool = False) -> T:
        """Wait for a network-thread result; honours wakeup() and surfaces background errors.  An
        ``internal`` wait (a step of the consumer's own, e.g. the auto-commit before a revocation) does
        neither: errors and a wakeup that arrive meanwhile stay pending for the application's next call."""
        return wait_result(
            future,
            timeout_ms,
            what,
            before_each=self._drain_background if internal else self._raise_background_errors,
            wakeup=None if internal else self._wakeup_requested,
            cancel_on_timeout=True,
        )

    def _deadline_ms(self, timeout_ms: int) -> int:
        return self._clock.now_ms() + timeout_ms

    def _call(self, event: ApplicationEvent, timeout_ms: int, what: str) -> Any:
        """Submit ``event`` (its deadline: now + ``timeout_ms``) and wait for its result, the poll timer
        standing still meanwhile."""
        self._ensure_open()
        with self._blocking_call():
            fut = self._thread.submit(event)
            return self._wait(fut, timeout_ms + 50, what)

    @contextlib.contextmanager
    def _blocking_call(self) -> Iterator[None]:
        """The poll timer (max.poll.interval.ms) stands still while the application waits for us inside."""
        membership = self.membership
        if membership is not None:
            self._thread.submit(AppCallEvent(inside=True))
        try:
            yield
        finally:
            if membership is not None:
                self._thread.submit(AppCallEvent(inside=False))

    def _send(self, event: ApplicationEvent, *, internal: bool = False) -> Any:
        """Submit a quick state change or query to the network thread and wait for its result
        (``internal``: see _wait)."""
        self._ensure_open()
        # While leaving (unsubscribe/close) pending errors do not abort the leave: they stay queued.
        internal = internal or self._dispatch.leaving
        return self._wait(self._thread.submit(event), 30_000, "network thread call", internal=internal)

    def _raise_background_errors(self) -> None:
        if self._dispatch.in_callback:
            # A rebalance callback's own calls (commit_sync, committed, position, offset lookups on its view)
            # raise only their own errors: what another callback or the network thread queued stays queued
            # for the application's next call (KIP-1306: "other callbacks are not affected").
            self._drain_background()
            return
        if self._fatal is not None:
            raise self._fatal
        self._drain_background()
        self._raise_pending_error()

    def _raise_pending_error(self) -> None:
        """Raise the oldest error the application has not seen yet (the others stay queued)."""
        if self._errors:
            raise self._errors.popleft()

    def _drain_background(self) -> None:
        """Take every event the network thread posted: run its application-thread work and queue its
        errors, in order.  Raises nothing."""
        fatal = drain_background(self._background, self._errors, self._handle_background_event)
        if fatal is not None and self._fatal is None:
            self._fatal = fatal

    def _handle_background_event(self, event: Any) -> None:
        """Run application-thread work posted by the network thread (commit callbacks; the group layer
        adds rebalance callbacks)."""
        if isinstance(event, _CommitCallback):
            event.callback(event.offsets, event.error)
        elif isinstance(event, (CallbackNeeded, AppThreadTask)):
            # Rebalance callbacks (and a custom assignor's assign()) run inside poll() (or while leaving),
            # never inside another call, and in the order the membership asked for them.
            self._dispatch.on_event(event)

    # ==================================================================================== rebalance callbacks
    # When each callback runs (KIP-983's lists, KIP-429 order) is decided by consumer/dispatch.py; the
    # _DispatchHost at the end of this module is what it calls back.
    def _record_callback_latency(self, kind: CallbackKind, ms: float) -> None:
        self._rebalance_metrics.record_callback(kind.value, ms)

    # ==================================================================================== assign mode
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        parts = self._assign_prepare(partitions)
        self._send(AssignEvent(partitions=tuple(parts)))
        self._assign_done(parts)

    def _assign_prepare(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """assign()'s checks (application thread, before the event; shared with the asyncio facade)."""
        self._ensure_open()
        parts = [TopicPartition(*tp) for tp in partitions]
        for tp in parts:
            if not tp.topic or not tp.topic.strip():
                raise ValueError("topic names must be non-empty")
        if self._subs.has_auto_assignment:
            raise IllegalStateError("assign() cannot be used while subscribed; call unsubscribe() first")
        return parts

    def _assign_done(self, parts: list[TopicPartition]) -> None:
        """assign()'s application-thread step once the network thread applied the assignment."""
        keep = set(parts)
        self._collector.drop_partitions(lambda tp: tp in keep)

    def assignment(self) -> frozenset[TopicPartition]:
        self._ensure_open()
        return self._subs.assigned()

    def subscription(self) -> frozenset[str]:
        self._ensure_open()
        return frozenset(self._subs.subscription.topics)

    # ==================================================================================== poll
    def poll(self, timeout: float | None = 0.0) -> ConsumerRecords:
        """Return records fetched for the assigned partitions, waiting up to ``timeout`` seconds
        (``None``: until records arrive, :meth:`wakeup` is called or the consumer is closed)."""
        result: ConsumerRecords = self._poll(timeout, columnar=False)
        return result

    def poll_columns(self, timeout: float | None = 0.0) -> ColumnarRecords:
        """:meth:`poll` with each partition's records as one
        :class:`~kafka_handoff.consumer.records.ColumnChunk` of columns (offsets, timestamps, keys, values,
        headers; Arrow-layout buffers, Python lists on first use) instead of one object per record -- the
        batch API for Arrow/Spark.  Same group semantics; deserializers are not applied."""
        result: ColumnarRecords = self._poll(timeout, columnar=True)
        return result

    def _poll(self, timeout: float | None, *, columnar: bool) -> Any:
        self._ensure_open()
        if self._subs.type is SubscriptionType.NONE:
            raise IllegalStateError("consumer is not subscribed to any topics or assigned any partitions")
        # poll(None) blocks until records arrive, wakeup() is called or the consumer is closed (Java's
        # poll(Duration.MAX)); a negative timeout is treated as 0.
        deadline = math.inf if timeout is None else time.monotonic() + max(0.0, float(timeout))
        self._on_poll_start()
        # While poll() waits for records the poll timer is reset now and then (Java sends a PollEvent per
        # iteration), so a poll(timeout) longer than max.poll.interval.ms does not expire it.
        refresh_s = min(1.0, int(self._config.get("max.poll.interval.ms")) / 4000)
        refreshed = time.monotonic()
        while True:
            self._raise_background_errors()
            self._raise_no_offset()
            self._check_wakeup()
            early = self._before_collect()
            records = self._collector.collect(columnar=columnar)
            if records or early:
                return self._make_records(records, columnar)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                return self._make_records({}, columnar)
            if self.membership is not None and time.monotonic() - refreshed >= refresh_s:
                refreshed = time.monotonic()
                self._send_poll_event()
            self._thread.wakeup()
            self._buffer.wait(
                min(remaining, 0.1),
                lambda: len(self._buffer) > 0 or not self._background.empty(),
            )

    def _raise_no_offset(self) -> None:
        """As Java: while a partition has no committed offset and ``auto.offset.reset=none``, every
        ``poll()`` (and ``position()``) raises, until the application seeks it."""
        missing = self._subs.partitions_without_offset()
        if missing:
            names = ", ".join(str(tp) for tp in sorted(missing))
            raise NoOffsetForPartitionError(
                f"no committed offset for partition(s) {names} and auto.offset.reset=none; seek() them (or "
                "seek_to_beginning/seek_to_end) to continue",
                missing,
            )

    _leave_deadline: float | None = None

    def _on_poll_start(self) -> None:
        """Start of poll(): KIP-983 start-of-poll rules (complete due revokes), then the poll event."""
        self._poll_start_prepare()
        self._poll_start_callbacks()
        self._poll_start_event()

    # The three steps of _on_poll_start, separate so that the asyncio facade (kafka_handoff.aio) can run the
    # middle one -- the only one that runs user code -- off the event loop when there is callback work.
    def _poll_start_prepare(self) -> None:
        # Records returned by earlier polls count as processed from now on: the auto-commit timer may
        # commit up to here, never the batch this poll hands out (at-least-once, as Java).
        self._subs.mark_poll_start()
        self._drain_background()  # errors posted before this poll come before those its callbacks raise
        self._listeners.begin_poll()
        self._dispatch.start_poll()

    def _poll_start_callbacks(self) -> None:
        if self.membership is not None and self._dispatch.revoke.to_be_revoked_partitions():
            self._poll_timer_checkpoint()
        self._dispatch.start_of_poll_callbacks()

    def _poll_timer_checkpoint(self) -> None:
        """Before a revoke completes at the start of ``poll()``: the membership learns of this poll first
        (its poll timer is reset), and a loss it declared before that -- ``max.poll.interval.ms`` expired
        while the application was away, so the member left the group -- is taken in, so that the loss
        supersedes the revoke (the dispatcher runs only the lost callback).  Java gets the same from
        ``ConsumerCoordinator.poll``: ``pollHeartbeat`` resets the poll timer under the coordinator lock the
        heartbeat thread checks it with, before ``onJoinPrepare`` revokes; either the member left first (then
        ``onPartitionsLost``) or it is still in the group when ``onPartitionsRevoked`` runs.  Only when a
        revoke is due (rare), so an ordinary ``poll()`` never waits for the network thread."""
        try:
            self._wait(self._thread.submit(PollEvent()), 30_000, "poll timer reset", internal=True)
        except KafkaError as exc:  # the network thread is stopping or stuck: its own error surfaces
            log.debug("poll timer reset before the revoke callback failed: %s", exc)
        self._drain_background()

    def _poll_start_event(self) -> None:
        self._send_poll_event()

    def _send_poll_event(self) -> None:
        """Reset the poll timer (and start joining), without waiting."""
        if self.membership is not None:
            self._thread.submit(PollEvent())

    def _before_collect(self) -> bool:
        """Run callbacks the membership asked for; True makes poll() return now (revoke requested or
        partitions lost, so the application learns at once)."""
        with self._dispatch.polling():
            self._dispatch.run_deferred()
            self._drain_background()
        self._raise_pending_error()
        return self._dispatch.take_early_return()

    def _make_records(self, records: dict[TopicPartition, Any], columnar: bool = False) -> Any:
        kind = ColumnarRecords if columnar else ConsumerRecords
        result = kind(
            records,
            to_be_revoked=self._dispatch.revoke.to_be_revoked_partitions(),
            lost=self._dispatch.revoke.lost_reported(),
        )
        if not self._dispatch.kip983_used:
            result._on_revoke_seen = self._dispatch.note_kip983_use
        return result

    # ==================================================================================== KIP-983
    def to_be_revoked_partitions(self) -> frozenset[TopicPartition]:
        """Partitions whose revoke was requested and completes at the start of the next ``poll()`` unless
        :meth:`delay_revoke` is called for them (KIP-983)."""
        self._ensure_open()
        return self._dispatch.to_be_revoked_partitions()

    def lost_partitions(self) -> frozenset[TopicPartition]:
        """Partitions lost during the last ``poll()`` (KIP-983); their work must be abandoned."""
        self._ensure_open()
        return self._dispatch.lost_partitions()

    def delay_revoke(self, partitions: Iterable[TopicPartition]) -> bool:
        """Postpone the revoke of ``partitions`` by one more ``poll()`` (KIP-983).

        Returns False (and changes nothing) when any of them is lost or not pending revocation, or when
        delaying further would run into the rebalance timeout (``max.poll.interval.ms``): under KIP-848 the
        broker fences a member that does not acknowledge a revocation within it, and every partition of the
        member is lost; under the classic protocol the follow-up rebalance waits for this member.  True only
        if the delayed revoke, at the pace this application has been polling, still completes within 80 %
        of the rebalance timeout after the group's target arrived; once False, the next ``poll()`` completes
        the revoke.
        """
        self._ensure_open()
        return self._dispatch.delay_revoke([TopicPartition(*tp) for tp in partitions])

    def set_rebalance_listener(self, listener: AnyRebalanceListener | None) -> None:
        """Set (or with ``None`` remove) the rebalance listener; it takes effect at the next ``poll()``.
        Of this and a listener given to ``subscribe()``, the one set last wins (KIP-1306, as Java)."""
        self._ensure_open()
        self._listeners.set_rebalance_listener(listener)

    def _check_wakeup(self) -> None:
        if self._wakeup_requested.is_set() or self._buffer.take_wakeup():
            self._wakeup_requested.clear()
            self._buffer.take_wakeup()
            raise WakeupError("poll() was interrupted by wakeup()")

    def wakeup(self) -> None:
        """Interrupt a blocking call from another thread: it raises
        :class:`~kafka_handoff.errors.WakeupError`."""
        self._wakeup_requested.set()
        self._buffer.wakeup()

    # ==================================================================================== positions
    def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The offset of the next record that will be fetched (initialising it if needed)."""
        self._ensure_open()
        tp = TopicPartition(*partition)
        if not self._subs.is_assigned(tp):
            raise IllegalStateError(f"position() of partition {tp}, which is not assigned to this consumer")
        deadline = time.monotonic() + self._timeout_ms(timeout) / 1000.0
        pos = self._subs.position(tp)
        if pos is not None:
            return pos.offset
        with self._blocking_call():
            while (offset := self._position_round(tp, time.monotonic() >= deadline)) is None:
                self._buffer.wait(0.02, lambda: False)
            return offset

    def _position_round(self, tp: TopicPartition, expired: bool) -> int | None:
        """One round of waiting for ``tp``'s position (``position()`` and its async twin): the offset once
        known; raises a background error, NoOffsetForPartitionError, or KafkaTimeoutError once ``expired``;
        otherwise wakes the network thread to work on it and returns None."""
        self._raise_background_errors()
        pos = self._subs.position(tp)
        if pos is not None:
            return pos.offset
        self._subs.request_position(tp)  # also before its assigned callback ran (as Java's position())
        if tp in self._subs.partitions_without_offset():
            self._raise_no_offset()
        if expired:
            raise KafkaTimeoutError(f"the position of {tp} could not be determined within the timeout")
        self._thread.wakeup()
        return None

    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        self._ensure_open()
        tp = TopicPartition(*partition)
        if isinstance(offset, OffsetAndMetadata):
            off, epoch = offset.offset, offset.leader_epoch
        else:
            off, epoch = int(offset), None
        if off < 0:
            raise ValueError(f"seek offset must not be negative, got {off}")
        self._subs.seek(tp, off, epoch)
        self._collector.drop_partitions(lambda p: p != tp)
        self._thread.wakeup()

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._reset_to("earliest", partitions)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._reset_to("latest", partitions)

    def _reset_to(self, strategy: str, partitions: Iterable[TopicPartition] | None) -> None:
        self._ensure_open()
        parts = self._subs.assigned() if partitions is None else [TopicPartition(*p) for p in partitions]
        for tp in parts:
            self._subs.request_reset(tp, strategy)
        keep = set(parts)
        self._collector.drop_partitions(lambda p: p not in keep)
        self._thread.wakeup()

    # ==================================================================================== offsets lookup
    def _list_offsets(
        self, timestamps: Mapping[TopicPartition, int], timeout: float | None, what: str
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        prepared = self._list_offsets_event(timestamps, timeout, what)
        if prepared is None:
            return {}
        event, topics, timeout_ms = prepared
        try:
            result: dict[TopicPartition, OffsetAndTimestamp | None] = self._call(event, timeout_ms, what)
        finally:
            if not self._closed:
                self._thread.submit(ReleaseMetadataTopicsEvent(topics=topics))
        return result

    def _list_offsets_event(
        self, timestamps: Mapping[TopicPartition, int], timeout: float | None, what: str
    ) -> tuple[ListOffsetsEvent, frozenset[str], int] | None:
        """The ListOffsets lookup's event, its topics (released once it completed) and timeout; ``None``
        for no partitions (shared with the asyncio facade)."""
        timeout_ms = self._timeout_ms(timeout)
        ts = {TopicPartition(*tp): t for tp, t in timestamps.items()}
        if not ts:
            return None
        topics = frozenset(tp.topic for tp in ts)
        event = ListOffsetsEvent(
            timestamps=ts, timeout_ms=timeout_ms, deadline_ms=self._deadline_ms(timeout_ms), name=what
        )
        return event, topics, timeout_ms

    @staticmethod
    def _check_target_times(timestamps: Mapping[TopicPartition, int]) -> None:
        for tp, t in timestamps.items():
            if t < 0:
                raise ValueError(f"the target time for partition {tp} is negative ({t})")

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        result = self._list_offsets({tp: EARLIEST for tp in partitions}, timeout, "beginning_offsets")
        return {tp: (v.offset if v is not None else 0) for tp, v in result.items()}

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        result = self._list_offsets({tp: LATEST for tp in partitions}, timeout, "end_offsets")
        return {tp: (v.offset if v is not None else 0) for tp, v in result.items()}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        self._check_target_times(timestamps)
        return self._list_offsets(timestamps, timeout, "offsets_for_times")

    def current_lag(self, partition: TopicPartition) -> int | None:
        """Lag from the last fetch response (``None`` if unknown), without a network call."""
        self._ensure_open()
        st = self._subs.get(TopicPartition(*partition))
        if st is None or st.position is None or st.high_watermark is None:
            return None
        end = st.last_stable_offset if self._config.get("isolation.level") == "read_committed" else None
        return max(0, (end if end is not None and end >= 0 else st.high_watermark) - st.position.offset)

    # ==================================================================================== pause
    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._ensure_open()
        parts = [TopicPartition(*p) for p in partitions]
        # Data already fetched for them is kept (not returned, not fetched again) until resume().
        self._subs.pause(parts)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._ensure_open()
        parts = [TopicPartition(*p) for p in partitions]
        self._subs.resume(parts)
        self._collector.unpark(parts)
        self._thread.wakeup()

    def paused(self) -> frozenset[TopicPartition]:
        self._ensure_open()
        return self._subs.paused()

    # ==================================================================================== commits
    def _require_group(self, what: str) -> CommitManager:
        if self._commits is None:
            raise KafkaError(f"{what} needs a group.id in the consumer configuration")
        return self._commits

    def _consumed_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {
            tp: OffsetAndMetadata(pos.offset, "", pos.leader_epoch)
            for tp, pos in self._subs.all_consumed().items()
        }

    @staticmethod
    def _normalize_offsets(
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, om in offsets.items():
            value = om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om))
            if value.offset < 0:
                raise ValueError(f"invalid negative offset {value.offset} for partition {tp}")
            out[TopicPartition(*tp)] = value
        return out

    def commit_sync(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Commit ``offsets`` (default: the consumed positions of all assigned partitions) and wait."""
        self._ensure_open()
        self._require_group("commit_sync()")
        event, timeout_ms = self._commit_event(offsets, self._consumed_offsets, timeout, "commit_sync()")
        self._call(event, timeout_ms, "commit_sync()")

    def _commit_event(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None,
        consumed: Callable[[], dict[TopicPartition, OffsetAndMetadata]],
        timeout: float | None,
        what: str,
    ) -> tuple[CommitEvent, int]:
        """The event of a waited-for commit (``commit_sync()``, the async ``commit()``) and its timeout in
        ms: ``offsets``, or else ``consumed()``, the consumed positions (of the owned partitions only)."""
        to_commit = consumed() if offsets is None else self._normalize_offsets(offsets)
        timeout_ms = self._timeout_ms(timeout)
        event = CommitEvent(
            offsets=to_commit,
            timeout_ms=timeout_ms,
            retry=True,
            only_owned=offsets is None,
            deadline_ms=self._deadline_ms(timeout_ms),
            name=what,
        )
        return event, timeout_ms

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        callback: Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], None]
        | None = None,
    ) -> Future[None]:
        """Commit without waiting; ``callback(offsets, error)`` runs on the application thread inside a
        later ``poll()`` (or another blocking call), as in Java."""
        self._ensure_open()
        self._require_group("commit_async()")
        to_commit = self._consumed_offsets() if offsets is None else self._normalize_offsets(offsets)
        fut: Future[None] = self._thread.submit(
            CommitEvent(
                offsets=to_commit,
                timeout_ms=self._default_timeout_ms,
                retry=False,
                only_owned=offsets is None,
                name="commit_async()",
            )
        )
        if callback is not None:
            cb = callback

            def done(f: Future[Any]) -> None:
                self._background.put(_CommitCallback(cb, to_commit, f.exception()))
                self._buffer.notify()

            fut.add_done_callback(done)
        return fut

    def committed(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        self._ensure_open()
        event, timeout_ms = self._committed_event(partitions, timeout)
        result: dict[TopicPartition, OffsetAndMetadata | None] = self._call(event, timeout_ms, "committed()")
        return result

    def _committed_event(
        self, partitions: Iterable[TopicPartition], timeout: float | None
    ) -> tuple[FetchCommittedEvent, int]:
        """``committed()``'s event (sync and async) and its timeout in ms; needs a group."""
        self._require_group("committed()")
        timeout_ms = self._timeout_ms(timeout)
        event = FetchCommittedEvent(
            partitions=frozenset(TopicPartition(*p) for p in partitions),
            timeout_ms=timeout_ms,
            deadline_ms=self._deadline_ms(timeout_ms),
            name="committed()",
        )
        return event, timeout_ms

    # ==================================================================================== metadata
    def _fresh_metadata(
        self, topics: frozenset[str] | None, timeout: float | None, what: str
    ) -> ClusterMetadata:
        timeout_ms = self._timeout_ms(timeout)
        event = MetadataUpdateEvent(topics=topics, deadline_ms=self._deadline_ms(timeout_ms), name=what)
        cluster: ClusterMetadata = self._call(event, timeout_ms, what)
        return cluster

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[PartitionInfo]:
        self._ensure_open()
        cluster = self._fresh_metadata(frozenset({topic}), timeout, "partitions_for()")
        return self._partitions_of(cluster, topic)

    @staticmethod
    def _partitions_of(cluster: ClusterMetadata, topic: str) -> list[PartitionInfo]:
        """partitions_for()'s answer from fresh metadata (shared with the asyncio facade)."""
        parts = cluster.partitions_for(topic)
        if parts is None:
            code = cluster.topic_errors.get(topic)
            if code is not None and code != ErrorCode.unknown_topic_or_partition:
                from kafka_handoff.errors import Needs, error_for_code

                raise error_for_code(
                    code, f"topic {topic}", needs=Needs("Metadata", topic=("DESCRIBE", topic))
                )
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        return list(parts)

    def list_topics(self, timeout: float | None = None) -> dict[str, list[PartitionInfo]]:
        self._ensure_open()
        cluster = self._fresh_metadata(None, timeout, "list_topics()")
        return self._topics_of(cluster)

    def _topics_of(self, cluster: ClusterMetadata) -> dict[str, list[PartitionInfo]]:
        """list_topics()'s answer from fresh metadata (shared with the asyncio facade)."""
        exclude_internal = bool(self._config.get("exclude.internal.topics"))
        return {
            t: list(parts)
            for t, parts in cluster.partitions.items()
            if not (exclude_internal and t in cluster.internal_topics)
        }

    def metrics(self) -> dict[str, float]:
        """Current metric values keyed ``"group:name"`` (Java's names)."""
        return self._metrics.as_dict()

    def _on_records_consumed(self, tp: TopicPartition, records: int, num_bytes: int) -> None:
        """Collector hook (application thread): consumption and lag metrics of ``tp``."""
        self._fetch_metrics.record_consumed(tp, records, num_bytes)
        st = self._subs.get(tp)
        if st is None or st.position is None:
            return
        end = st.last_stable_offset if self._read_committed else st.high_watermark
        if end is not None:
            self._fetch_metrics.record_partition_lag(tp, max(0, end - st.position.offset))
        version = self._subs.version  # bumped on every assignment change: no set built per partition batch
        if version != self._lag_version:
            self._lag_version = version
            self._fetch_metrics.retain_partitions(self._subs.assigned())

    def client_instance_id(self, timeout: float = 30.0) -> uuid.UUID | None:
        """The id the cluster gave this client for its telemetry (KIP-714), waiting up to ``timeout``
        seconds for it; ``None`` when it is not known by then or the brokers do not support client
        telemetry.  Raises :class:`~kafka_handoff.errors.IllegalStateError` when ``enable.metrics.push`` is
        false, as Java does."""
        self._ensure_open()
        return telemetry_client_instance_id(self._telemetry, timeout)

    def metric_registry(self) -> Metrics:
        """The client's metric registry (names with tags; what the Prometheus and OpenTelemetry exporters
        in :mod:`kafka_handoff.metrics` read)."""
        return self._metrics

    @property
    def config(self) -> ConsumerConfig:
        return self._config

    # ==================================================================================== group (base)
    def group_metadata(self) -> ConsumerGroupMetadata:
        self._ensure_open()
        if self.group_id is None:
            raise KafkaError("group_metadata() needs a group.id")
        meta: ConsumerGroupMetadata = self._send(GroupMetadataEvent())
        return meta

    def _group_metadata_any_thread(self, timeout: float = 30.0) -> ConsumerGroupMetadata:
        """:meth:`group_metadata` for a thread that does not own the consumer (a transactional writer
        committing offsets with ``send_offsets_to_transaction``): reads the membership on the network
        thread and neither raises nor consumes the application's pending errors and events."""
        self._ensure_open()
        if self.group_id is None:
            raise KafkaError("group_metadata() needs a group.id")
        meta: ConsumerGroupMetadata = self._thread.submit(GroupMetadataEvent()).result(timeout)
        return meta

    def subscribe(
        self,
        topics: Iterable[str] | re.Pattern[str] | str,
        listener: AnyRebalanceListener | None = None,
    ) -> None:
        """Join the group (on the next ``poll()``) for ``topics``: names, or a compiled pattern.

        ``listener`` is deprecated: use :meth:`set_rebalance_listener`.
        """
        subscription = self._subscribe_prepare(topics, listener, stacklevel=4)
        if subscription is None:
            self.unsubscribe()
            return
        self._send(SubscribeEvent(subscription=subscription))

    def _subscribe_prepare(
        self,
        topics: Iterable[str] | re.Pattern[str] | str,
        listener: AnyRebalanceListener | None,
        *,
        stacklevel: int,
    ) -> Subscription | None:
        """subscribe()'s checks and application-thread set-up before the event (shared with the asyncio
        facade); ``None``: an empty topic list, which means unsubscribe()."""
        self._ensure_open()
        if self.group_id is None:
            raise KafkaError(
                "subscribe() needs group.id in the consumer configuration (group management); "
                "use assign() without a group"
            )
        if isinstance(topics, re.Pattern):
            subscription = Subscription(pattern=topics)
        else:
            names = [topics] if isinstance(topics, str) else list(topics)
            for t in names:
                if not isinstance(t, str) or not t.strip():
                    raise ValueError(f"topic names must be non-empty strings, got {t!r}")
            if not names:
                return None
            subscription = Subscription(topics=frozenset(names))
        if self._subs.type is SubscriptionType.USER_ASSIGNED:
            raise IllegalStateError("subscribe() cannot be used after assign(); call unsubscribe() first")
        self._listeners.set_from_subscribe(listener, stacklevel=stacklevel)
        if self.membership is None:
            self.membership = self._create_membership()
        return subscription

    def unsubscribe(self) -> None:
        """Leave the group (running the revoke callback for everything owned) or drop the assignment."""
        self._ensure_open()
        if self.membership is not None and self._subs.has_auto_assignment:
            self._leave_group(self._default_timeout_ms)

        # Pending background errors stay queued for the next call.
        self._send(UnsubscribeEvent(), internal=True)
        self._unsubscribe_done()

    def _unsubscribe_done(self) -> None:
        """unsubscribe()'s application-thread step once the network thread dropped the subscription."""
        self._collector.drop_partitions(lambda tp: False)
        self._dispatch.revoke.clear()
        # As Java: a rebalance callback that failed while leaving makes unsubscribe() raise (once it
        # completed); further ones follow from the next calls.
        errors = self._dispatch.take_leave_errors()
        if errors:
            self._errors.extendleft(reversed(errors[1:]))
            raise errors[0]

    def _leave_group(self, timeout_ms: int) -> None:
        """Revoke everything (callbacks on this thread) and leave; bounded by ``timeout_ms``."""
        membership = self.membership
        if membership is None:
            return
        deadline = time.monotonic() + timeout_ms / 1000.0
        self._leave_deadline = deadline
        self._dispatch.leaving = True
        try:
            self._leave_group_loop(membership, deadline)
        except BaseException:
            # Aborted: the leave's callback errors are delivered by the next calls instead.
            self._errors.extend(self._dispatch.take_leave_errors())
            raise
        finally:
            self._dispatch.leaving = False

    def _leave_group_loop(self, membership: Membership, deadline: float) -> None:
        # Callbacks that arrived between polls, then pending delayed revokes, complete now.
        self._dispatch.complete_for_leave()
        self._send(LeaveGroupEvent())
        while time.monotonic() < deadline:
            self._drain_background()  # errors stay queued for the application
            if self._send(LeaveStatusEvent()):
                break
            self._thread.wakeup()
            self._buffer.wait(0.05, lambda: not self._background.empty())

    def enforce_rebalance(self, reason: str = "") -> None:
        self._ensure_open()
        if self.membership is not None:
            self._send(EnforceRebalanceEvent(reason=reason or "enforce_rebalance()"))

    # ==================================================================================== close
    def close(self, timeout: float | None = 30.0) -> None:
        """Close the consumer: leave the group (if a member), commit if auto-commit is on, stop the network
        thread.  Returns within ``timeout`` seconds even if brokers are unreachable."""
        if self._closed:
            return
        timeout_ms = self._timeout_ms(timeout)
        start = time.monotonic()
        try:
            self._close_group(timeout_ms)
        except Exception:
            log.debug("error leaving the group on close", exc_info=True)
        if self._commits is not None and self._commits.auto_commit and self._subs.assigned():
            offsets = self._consumed_offsets()
            left = timeout_ms - int((time.monotonic() - start) * 1000)
            owned: frozenset[TopicPartition] | None = None
            with contextlib.suppress(Exception):  # the network thread stopped: nothing to commit with
                owned = self._thread.submit(OwnedPartitionsEvent()).result(max(0, left) / 1000.0)
            if owned is not None:
                offsets = {tp: o for tp, o in offsets.items() if tp in owned}
            left = timeout_ms - int((time.monotonic() - start) * 1000)
            if offsets and left > 0:
                try:
                    fut = self._thread.submit(CommitEvent(offsets=offsets, timeout_ms=left, retry=True))
                    fut.result(left / 1000.0)
                except Exception:
                    log.debug("auto-commit on close failed", exc_info=True)
        self._terminate_telemetry(timeout_ms - int((time.monotonic() - start) * 1000))
        self._closed = True
        left = timeout_ms - int((time.monotonic() - start) * 1000)
        self._thread.close(max(0, left))
        self._close_finish()

    def _close_leaves_group(self) -> bool:
        """Whether close() leaves the group (running the revoke callbacks and the commit before them)."""
        return (
            self.membership is not None
            and self._subs.has_auto_assignment
            and bool(self._config.get("internal.leave.group.on.close"))
        )

    def _close_finish(self) -> None:
        """close()'s last step, once the network thread stopped (shared with the asyncio facade)."""
        # As Java: close() completes, then rethrows the first rebalance-callback error of the leave.  Errors
        # nobody will see any more (no call follows close) are logged.
        errors = self._dispatch.take_leave_errors()
        self._drain_background()
        for error in [*errors[1:], *self._errors]:
            log.warning("error not delivered to the application because the consumer closed: %r", error)
        self._errors.clear()
        if errors:
            raise errors[0]

    def _terminate_telemetry(self, left_ms: int) -> None:
        """KIP-714: the terminating push, within what is left of the close timeout."""
        if left_ms <= 0 or not self._telemetry.enabled:
            return
        try:
            self._thread.submit(TerminateTelemetryEvent()).result(left_ms / 1000.0)
        except Exception:
            log.debug("terminating telemetry push did not complete", exc_info=True)

    def _close_group(self, timeout_ms: int) -> None:
        if self._close_leaves_group():
            self._leave_group(timeout_ms)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except Exception as error:  # never replace the exception already leaving the with-block
            log.warning("close() failed while handling another exception: %r", error)

    @staticmethod
    def new_member_id() -> str:
        return str(uuid.uuid4())


class _CommitCallback:
    __slots__ = ("callback", "error", "offsets")

    def __init__(
        self,
        callback: Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], None],
        offsets: dict[TopicPartition, OffsetAndMetadata],
        error: BaseException | None,
    ) -> None:
        self.callback = callback
        self.offsets = offsets
        self.error = error


class _DispatchHost:
    """The consumer as the :class:`~kafka_handoff.consumer.dispatch.DispatchHost` of its dispatcher."""

    __slots__ = ("_c",)

    def __init__(self, consumer: Consumer) -> None:
        self._c = consumer

    def invoke_listener(
        self, kind: CallbackKind, partitions: frozenset[TopicPartition], in_poll: bool
    ) -> BaseException | None:
        c = self._c
        listener = c._listeners.active if in_poll else c._listeners.resolve()
        return invoke_callback(listener, kind, partitions, c, record_latency=c._record_callback_latency)

    def has_listener(self, in_poll: bool) -> bool:
        listeners = self._c._listeners
        return (listeners.active if in_poll else listeners.resolve()) is not None

    def assigned(self) -> frozenset[TopicPartition]:
        return self._c._subs.assigned()

    def drop_fetched(self, keep: Callable[[TopicPartition], bool]) -> None:
        self._c._collector.drop_partitions(keep)

    def clear_awaiting_callback(self, partitions: frozenset[TopicPartition]) -> None:
        self._c._subs.clear_awaiting_callback(partitions)

    def callback_completed(self, seq: int, error: BaseException | None) -> None:
        if self._c.membership is None:
            return
        self._c._thread.submit(CallbackCompletedEvent(seq=seq, error=error))

    def task_done(self, task: AppThreadTask, result: object, error: BaseException | None) -> None:
        self._c._thread.submit(AppTaskDoneEvent(task=task, result=result, error=error))

    def report_error(self, error: BaseException) -> None:
        self._c._errors.append(error)

    def wakeup_network(self) -> None:
        self._c._thread.wakeup()

    def commit_before_revoke(self, partitions: frozenset[TopicPartition]) -> None:
        """The auto-commit before a revocation (when auto-commit is on): waits for the commit only.
        Unrelated background errors and a wakeup() arriving meanwhile stay pending (they are not this
        commit's failure); a failed commit is logged."""
        c = self._c
        commits = c._commits
        if commits is None or not commits.auto_commit:
            return
        offsets = {tp: o for tp, o in c._consumed_offsets().items() if tp in partitions}
        if not offsets:
            return
        # Bounded by the rebalance timeout, and while leaving (close/unsubscribe) by what is left of the
        # caller's timeout.
        timeout_s = int(c._config.get("max.poll.interval.ms")) / 1000
        if c._dispatch.leaving and c._leave_deadline is not None:
            timeout_s = min(timeout_s, max(0.0, c._leave_deadline - time.monotonic()))
        timeout_ms = max(0, int(timeout_s * 1000))
        try:
            c._ensure_open()
            fut = c._thread.submit(
                CommitEvent(
                    offsets=offsets,
                    timeout_ms=timeout_ms,
                    retry=True,
                    deadline_ms=c._deadline_ms(timeout_ms),
                    name="auto-commit",
                )
            )
            c._wait(fut, timeout_ms + 50, "auto-commit before revocation", internal=True)
        except KafkaError as exc:
            log.warning("auto-commit before revocation failed: %s", exc)
