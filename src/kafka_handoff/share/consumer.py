"""``ShareConsumer``: a KIP-932 share group member (queues for Kafka), the application-thread facade.

The same threading model as :class:`kafka_handoff.Consumer`: one network thread runs the sans-I/O
managers (metadata, coordinator discovery, :class:`ShareMembership`, :class:`ShareFetchManager`); every
call here becomes an application event, and records are decoded on this thread.

Acknowledgement (Java's semantics):

* ``share.acknowledgement.mode=implicit`` (default): the records a ``poll()`` returned are acknowledged as
  ACCEPT by the next ``poll()``, ``commit_sync()`` or ``commit_async()``; ``acknowledge()`` is not
  allowed.
* ``explicit``: every record must be given a type with ``acknowledge(record, type)`` before the next
  ``poll()`` (which raises :class:`IllegalStateError` otherwise).  RENEW (KIP-1222) extends the record's
  acquisition lock; the next ``poll()`` returns the record again, to be acknowledged again.

Acknowledgements travel with the next ShareFetch to the broker (after ``poll()``), or in a ShareAcknowledge
(``commit_sync``/``commit_async``, which return/report per-partition results).  ``close()`` sends the
acknowledgements given and releases every record still acquired (in implicit mode: the last poll's records,
as Java does), closes the share sessions and leaves the group.

``share.acquire.mode=record_limit`` (KIP-1206) fetches only when ``poll()`` asks (no prefetching), at most
``max.poll.records`` records; ``batch_optimized`` (default) prefetches whole batches.  Not calling
``poll()`` for ``max.poll.interval.ms`` makes the member leave the group (its records are released); the
next ``poll()`` rejoins.
"""

from __future__ import annotations

import bisect
import collections
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

from kafka_handoff.client_setup import (
    client_properties,
    drain_background,
    group_coordinator,
    metadata_and_client,
    wait_result,
)
from kafka_handoff.clock import MonotonicClock
from kafka_handoff.errors import IllegalStateError, SerializationError, WakeupError
from kafka_handoff.group.membership import CoordinatorNeeded, MembershipError, MetadataNeeded
from kafka_handoff.group.share_membership import ShareAssignmentChanged, ShareMembership
from kafka_handoff.metrics import Avg, Max, Metrics
from kafka_handoff.network.events import ApplicationEvent
from kafka_handoff.network.thread import BackgroundError, NetworkThread
from kafka_handoff.protocol.records import decode_batches_columnar
from kafka_handoff.protocol.requests import RequestManager
from kafka_handoff.serialization import MessageField, SerializationContext, takes_context
from kafka_handoff.share.config import ShareConsumerConfig, parse_share_consumer_config
from kafka_handoff.share.events import (
    ShareAssignmentEvent,
    ShareCloseEvent,
    ShareCommitEvent,
    ShareEventProcessor,
    SharePollEvent,
    ShareSubscribeEvent,
    ShareUnsubscribeEvent,
)
from kafka_handoff.share.fetcher import (
    GAP,
    AcknowledgeType,
    AckResults,
    ShareBuffer,
    ShareFetchedData,
    ShareFetchManager,
)
from kafka_handoff.share.records import ShareConsumerRecord, ShareRecords
from kafka_handoff.types import ClusterMetadata, TopicPartition

__all__ = ["AcknowledgementCommitCallback", "ShareConsumer"]

log = logging.getLogger(__name__)
T = TypeVar("T")

SHARE_METRICS_GROUP = "consumer-share-metrics"
SHARE_COORDINATOR_METRICS_GROUP = "consumer-share-coordinator-metrics"

AcknowledgementCommitCallback = Callable[[dict[TopicPartition, set[int]], BaseException | None], None]
"""``callback(offsets, error)``: the offsets of one partition's acknowledgements and their outcome (Java's
``AcknowledgementCommitCallback``); runs on the application thread inside ``poll``/``commit_*``/``close``."""


class _AckOutcome:
    __slots__ = ("error", "offsets")

    def __init__(self, offsets: dict[TopicPartition, set[int]], error: BaseException | None) -> None:
        self.offsets = offsets
        self.error = error


class ShareConsumer:
    """A member of a share group.  Not thread-safe, except :meth:`wakeup`."""

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        self._config: ShareConsumerConfig = parse_share_consumer_config(client_properties(config, kwargs))
        cfg = self._config
        self._closed = False
        self._clock = MonotonicClock()
        self.client_id: str = cfg.client_id
        self.group_id: str = cfg.group_id
        self._explicit = cfg.explicit_acknowledgement
        self._default_timeout_ms = cfg.default_api_timeout_ms
        self._max_poll_records = cfg.max_poll_records
        self._background: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._errors: collections.deque[BaseException] = collections.deque()
        self._fatal: BaseException | None = None
        self._wakeup_requested = threading.Event()
        self._ack_callback: AcknowledgementCommitCallback | None = None
        self._subscription: frozenset[str] = frozenset()
        # Records of the last poll() not acknowledged yet: (tp, offset) -> [record, type or None].
        self._in_flight: dict[TopicPartition, dict[int, ShareConsumerRecord]] = {}
        # The types given with acknowledge() to in-flight records: tp -> {offset: type}.
        self._ack_types: dict[TopicPartition, dict[int, int]] = {}
        # RENEWed records waiting for their final acknowledgement (explicit mode).
        self._renewed: dict[tuple[TopicPartition, int], ShareConsumerRecord] = {}
        # In-flight records whose key or value failed to deserialize (acknowledge_offset() them; implicit
        # acknowledgement and close() release them), and the errors poll() raises for them.
        self._undeserializable: set[tuple[TopicPartition, int]] = set()
        self._deserialization_errors: list[SerializationError] = []
        # fn(value) or fn(value, ctx), decided once.
        self._kdes_ctx = takes_context(self._config.key_deserializer)
        self._vdes_ctx = takes_context(self._config.value_deserializer)
        # Acknowledgements given since the last send: tp -> {offset: type}.
        self._acks: dict[TopicPartition, dict[int, int]] = {}
        # Decoded records of a fetch not handed out yet (max.poll.records), oldest first.
        self._pending: collections.deque[ShareConsumerRecord] = collections.deque()
        self._buffer = ShareBuffer()
        self._metrics = Metrics(clock=self._clock.now_ms, default_tags={"client-id": self.client_id})
        self._init_metrics()

        self._metadata, client = metadata_and_client(
            cfg, self.client_id, allow_auto_topic_creation=False, topics=lambda: self._subscription
        )
        self._client = client
        coordinator = group_coordinator(
            self.group_id, cfg, client, lambda exc: self._background.put(BackgroundError(exc))
        )
        self._coordinator = coordinator
        self.membership = ShareMembership(
            self.group_id,
            rack_id=cfg.client_rack or None,
            max_poll_interval_ms=cfg.max_poll_interval_ms,
            on_heartbeat=self._record_heartbeat,
            retry_backoff_ms=cfg.retry_backoff_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms,
        )
        membership = self.membership
        coordinator.listeners.append(
            lambda node, now: membership.on_coordinator(
                None if node is None else node.node_id, now, coordinator.epoch
            )
        )
        self._metadata.listeners.append(self._on_metadata_nt)
        self._fetcher = ShareFetchManager(
            self.group_id,
            self._metadata,
            self._buffer,
            member_id=lambda: membership.member_id,
            fetch_min_bytes=cfg.fetch_min_bytes,
            fetch_max_bytes=cfg.fetch_max_bytes,
            fetch_max_wait_ms=cfg.fetch_max_wait_ms,
            max_partition_fetch_bytes=cfg.max_partition_fetch_bytes,
            max_records=cfg.max_poll_records,
            prefetch=cfg.share_acquire_mode != "record_limit",
            batch_size=cfg.max_poll_records,
            acquire_mode=1 if cfg.share_acquire_mode == "record_limit" else 0,
            retry_backoff_ms=cfg.retry_backoff_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            on_error=lambda exc: self._background.put(BackgroundError(exc)),
            on_fetch=self._record_fetch,
            on_acks_sent=self._record_acks,
        )
        self._fetcher.ack_listener = self._on_ack_results_nt
        managers: list[RequestManager] = [self._metadata, coordinator, membership, self._fetcher]
        self._leave_started = False
        self._thread = NetworkThread(
            client,
            managers,
            self._clock,
            name=f"kafka-handoff-share-{self.client_id}",
            background_events=self._background,
            on_close=self._on_close_nt,
            processor=ShareEventProcessor(
                membership=self.membership, fetcher=self._fetcher, metadata=self._metadata
            ),
        )
        self._thread.add_after_poll(self._drain_membership_nt)
        self._thread.start()

    # ==================================================================================== metrics
    def _init_metrics(self) -> None:
        m = self._metrics
        tags = {"client-id": self.client_id}

        def name(metric: str, description: str, group: str = SHARE_METRICS_GROUP) -> Any:
            return m.metric_name(metric, group, description, tags)

        self._fetch_latency = (
            m.sensor("share-fetch-latency")
            .add(name("fetch-latency-avg", "Average time taken for a share fetch request (ms)"), Avg())
            .add(name("fetch-latency-max", "Maximum time taken for a share fetch request (ms)"), Max())
            .add_meter(
                name("fetch-rate", "Share fetch requests per second"),
                name("fetch-total", "Number of share fetch requests"),
                count=True,
            )
        )
        self._fetch_size = (
            m.sensor("share-fetch-size")
            .add(name("fetch-size-avg", "Average bytes fetched per share fetch request"), Avg())
            .add(name("fetch-size-max", "Maximum bytes fetched per share fetch request"), Max())
            .add_meter(
                name("bytes-fetched-rate", "Bytes fetched per second"),
                name("bytes-fetched-total", "Total bytes fetched"),
            )
        )
        self._fetch_records = (
            m.sensor("share-records-fetched")
            .add(name("records-per-request-avg", "Average records acquired per share fetch"), Avg())
            .add(name("records-per-request-max", "Maximum records acquired per share fetch"), Max())
            .add_meter(
                name("records-fetched-rate", "Records acquired per second"),
                name("records-fetched-total", "Total records acquired"),
            )
        )
        self._acks_sent = m.sensor("share-acknowledgements-send").add_meter(
            name("acknowledgements-send-rate", "Acknowledgements sent per second"),
            name("acknowledgements-send-total", "Total acknowledgements sent"),
        )
        self._acks_failed = m.sensor("share-acknowledgements-error").add_meter(
            name("acknowledgements-error-rate", "Acknowledgements failed per second"),
            name("acknowledgements-error-total", "Total acknowledgements failed"),
        )
        coordinator = SHARE_COORDINATOR_METRICS_GROUP
        self._heartbeats = (
            m.sensor("share-heartbeat-latency")
            .add(
                name("heartbeat-response-time-max", "Longest heartbeat response time (ms)", coordinator),
                Max(),
            )
            .add_meter(
                name("heartbeat-rate", "Heartbeats per second", coordinator),
                name("heartbeat-total", "Number of heartbeats", coordinator),
                count=True,
            )
        )
        self._last_heartbeat_ms: int | None = None
        clock = self._clock

        def seconds_ago() -> float:
            last = self._last_heartbeat_ms
            return -1.0 if last is None else (clock.now_ms() - last) / 1000.0

        m.add_gauge(
            name("last-heartbeat-seconds-ago", "Seconds since the last heartbeat response", coordinator),
            seconds_ago,
        )

    def _record_heartbeat(self, response_ms: int, now_ms: int) -> None:
        self._heartbeats.record(response_ms, now_ms)
        self._last_heartbeat_ms = now_ms

    def _record_fetch(self, latency_ms: int, num_bytes: int, num_records: int, now_ms: int) -> None:
        self._fetch_latency.record(latency_ms, now_ms)
        self._fetch_size.record(num_bytes, now_ms)
        self._fetch_records.record(num_records, now_ms)

    def _record_acks(self, sent: int, failed: int) -> None:
        if sent:
            self._acks_sent.record(sent)
        if failed:
            self._acks_failed.record(failed)

    def metrics(self) -> dict[str, float]:
        """Every metric, keyed ``group:name`` (``consumer-share-metrics:fetch-rate``, ...)."""
        return self._metrics.as_dict()

    @property
    def metric_registry(self) -> Metrics:
        return self._metrics

    # ==================================================================================== network thread side
    def _on_metadata_nt(self, cluster: ClusterMetadata, now: int) -> None:
        self.membership.on_metadata(cluster, now)

    def _drain_membership_nt(self, now: int) -> None:
        for event in self.membership.drain_events():
            if isinstance(event, ShareAssignmentChanged):
                self._fetcher.set_assignment(event.partitions)
            elif isinstance(event, MetadataNeeded):
                self._metadata.request_update()
            elif isinstance(event, CoordinatorNeeded):
                self._coordinator.on_coordinator_needed(event, now)
            elif isinstance(event, MembershipError):
                self._background.put(BackgroundError(event.error, fatal=event.fatal))
                self._buffer.notify()

    def _on_ack_results_nt(
        self, sent: Mapping[TopicPartition, Mapping[int, int]], results: AckResults
    ) -> None:
        if self._ack_callback is None:
            return
        for tp, error in results.items():
            self._background.put(_AckOutcome({tp: set(sent.get(tp, {}))}, error))

    def _on_close_nt(self, now: int) -> bool:
        if not self._fetcher.closed():
            return False
        if not self._leave_started:
            self._leave_started = True
            self.membership.leave(now)
        return self.membership.left

    # ==================================================================================== helpers
    def _ensure_open(self) -> None:
        if self._closed:
            raise IllegalStateError("this share consumer has already been closed")

    def _timeout_ms(self, timeout: float | None) -> int:
        if timeout is None:
            return self._default_timeout_ms
        return max(0, int(timeout * 1000))

    def _drain_background(self) -> None:
        fatal = drain_background(self._background, self._errors, self._on_background_event)
        if fatal is not None and self._fatal is None:
            self._fatal = fatal

    def _on_background_event(self, event: Any) -> None:
        """Application-thread work the network thread posted: the acknowledgement commit callback."""
        if isinstance(event, _AckOutcome):
            callback = self._ack_callback
            if callback is not None:
                callback(event.offsets, event.error)

    def _raise_background_errors(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        self._drain_background()
        if self._errors:
            raise self._errors.popleft()

    def _wait(self, future: Future[T], timeout_ms: int, what: str) -> T:
        return wait_result(
            future,
            timeout_ms,
            what,
            before_each=self._drain_background,
            wakeup=self._wakeup_requested,
            cancel_on_timeout=False,
        )

    def _send(self, event: ApplicationEvent) -> Any:
        """Submit ``event`` to the network thread and wait for its result."""
        self._ensure_open()
        return self._wait(self._thread.submit(event), 30_000, "network thread call")

    # ==================================================================================== subscription
    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the share group (if not a member yet) with this subscription; replaces the previous one."""
        self._ensure_open()
        if isinstance(topics, str):
            raise TypeError("subscribe() takes a collection of topic names, not a string")
        names = frozenset(topics)
        bad = [t for t in names if not isinstance(t, str) or not t.strip()]
        if bad:
            raise ValueError(f"topic names must be non-empty strings, got {bad[0]!r}")
        self._subscription = names
        self._send(ShareSubscribeEvent(topics=names))

    def unsubscribe(self) -> None:
        """Acknowledge what is due, and leave the share group."""
        self._ensure_open()
        self._subscription = frozenset()
        self._send(ShareUnsubscribeEvent())

    def subscription(self) -> frozenset[str]:
        return self._subscription

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions the share group currently lets this member fetch from."""
        assignment: frozenset[TopicPartition] = self._send(ShareAssignmentEvent())
        return assignment

    @property
    def member_id(self) -> str:
        return self.membership.member_id

    # ==================================================================================== acknowledgement
    def acknowledge(
        self, record: ShareConsumerRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT
    ) -> None:
        """Acknowledge a delivered record (explicit mode): ACCEPT, RELEASE, REJECT or RENEW (KIP-1222).

        The acknowledgement is sent with the next ``poll()``, ``commit_sync()`` or ``commit_async()``.
        A record may be acknowledged again (the last type wins) until it was sent; after RENEW the next
        ``poll()`` returns the record again, to be acknowledged again."""
        self._acknowledge(record.topic, record.partition, record.offset, type)

    def acknowledge_offset(
        self, topic: str, partition: int, offset: int, type: AcknowledgeType = AcknowledgeType.ACCEPT
    ) -> None:
        """Acknowledge a delivered record by its coordinates (explicit mode), e.g. one whose key or value
        could not be deserialized (``poll()`` raised :class:`SerializationError` naming it)."""
        self._acknowledge(topic, partition, offset, type)

    def _acknowledge(self, topic: str, partition: int, offset: int, type: AcknowledgeType) -> None:
        self._ensure_open()
        if not self._explicit:
            raise IllegalStateError(
                "acknowledge() needs share.acknowledgement.mode=explicit (this consumer acknowledges "
                "implicitly)"
            )
        try:
            ack_type = AcknowledgeType(type)
        except ValueError:
            raise ValueError(
                f"unknown acknowledge type {type!r} (allowed: ACCEPT, RELEASE, REJECT, RENEW)"
            ) from None
        tp = TopicPartition(topic, partition)
        key = (tp, offset)
        records = self._in_flight.get(tp)
        if (records is None or offset not in records) and key in self._renewed:
            records = self._in_flight.setdefault(tp, {})
            records[offset] = self._renewed.pop(key)
        if records is None or offset not in records:
            raise IllegalStateError(
                f"record {topic}-{partition}@{offset} is not in flight: it was not delivered by the last "
                "poll(), or it was acknowledged and sent already"
            )
        self._ack_types.setdefault(tp, {})[offset] = int(ack_type)

    def _collect_acks(self, *, implicit_type: int | None) -> dict[TopicPartition, dict[int, int]]:
        """Move the acknowledged in-flight records (all of them, as ``implicit_type``, when given) into the
        acknowledgements to send; RENEWed records move to the renewed set."""
        acks, self._acks = self._acks, {}
        keep: dict[TopicPartition, dict[int, ShareConsumerRecord]] = {}
        release = int(AcknowledgeType.RELEASE)
        for tp, records in self._in_flight.items():
            types = self._ack_types.pop(tp, None)
            if types is None and implicit_type is not None and not self._undeserializable:
                acks.setdefault(tp, {}).update(dict.fromkeys(records, implicit_type))  # the common case
                continue
            types = types or {}
            out = acks.setdefault(tp, {})
            kept: dict[int, ShareConsumerRecord] = {}
            for offset, record in records.items():
                ack_type = types.get(offset)
                key = (tp, offset)
                if ack_type is None and implicit_type is not None and key in self._undeserializable:
                    ack_type = release  # never ACCEPT what the application never saw
                if ack_type is None:
                    ack_type = implicit_type
                if ack_type is None:
                    kept[offset] = record
                    continue
                self._undeserializable.discard(key)
                out[offset] = ack_type
                if ack_type == AcknowledgeType.RENEW:
                    self._renewed[key] = record
            if kept:
                keep[tp] = kept
                leftover = {o: t for o, t in types.items() if o in kept}
                if leftover:
                    self._ack_types[tp] = leftover
            if not out:
                del acks[tp]
        self._in_flight = keep
        return acks

    def _commit_future(self) -> Future[AckResults]:
        self._ensure_open()
        self._raise_background_errors()
        acks = self._collect_acks(implicit_type=None if self._explicit else int(AcknowledgeType.ACCEPT))
        fut: Future[AckResults] = Future()
        self._thread.submit(ShareCommitEvent(acks=acks, results=fut))
        return fut

    def commit_sync(self, timeout: float | None = None) -> AckResults:
        """Send the pending acknowledgements now and wait for the brokers' answers.

        Returns ``{partition: None or the error}`` for each partition with acknowledgements (``{}`` when
        none were pending).  In implicit mode the records of the last poll() are accepted first."""
        fut = self._commit_future()
        results = self._wait(fut, self._timeout_ms(timeout), "commit_sync")
        self._drain_background()
        return results

    def commit_async(self) -> Future[AckResults]:
        """Send the pending acknowledgements without waiting; the results complete the returned future and
        are reported to the acknowledgement commit callback."""
        return self._commit_future()

    def set_acknowledgement_commit_callback(self, callback: AcknowledgementCommitCallback | None) -> None:
        self._ack_callback = callback

    def acquisition_lock_timeout_ms(self) -> int | None:
        """The acquisition lock duration the brokers reported (the group config
        ``share.record.lock.duration.ms``); ``None`` before the first fetch."""
        return self._fetcher.acquisition_lock_timeout_ms

    # ==================================================================================== poll
    def poll(self, timeout: float | None = 0.0) -> ShareRecords:
        """Acknowledge the previous poll's records (implicit mode) or send their acknowledgements
        (explicit mode, where each must have been acknowledged), then return newly acquired records:
        at most ``max.poll.records`` unless ``share.acquire.mode=batch_optimized`` let the broker acquire
        a larger batch."""
        self._ensure_open()
        if not self._subscription:
            raise IllegalStateError("poll() needs a subscription: call subscribe() first")
        self._raise_background_errors()
        if self._explicit:
            unacked = [
                (tp, offset)
                for tp, records in self._in_flight.items()
                for offset in records
                if offset not in self._ack_types.get(tp, ())
            ]
            if unacked:
                (tp, offset) = unacked[0]
                raise IllegalStateError(
                    f"{len(unacked)} records of the last poll() are not acknowledged (e.g. {tp.topic}-"
                    f"{tp.partition}@{offset}); explicit acknowledgement mode needs acknowledge() for each"
                )
        acks = self._collect_acks(implicit_type=int(AcknowledgeType.ACCEPT))
        # KIP-1222: records renewed since the last poll() are returned again (and acknowledged again).
        renewed = list(self._renewed.values())
        self._renewed.clear()
        self._thread.submit(SharePollEvent(acks=acks))
        # poll(None) blocks until records arrive, wakeup() is called or the consumer is closed.
        deadline = math.inf if timeout is None else time.monotonic() + self._timeout_ms(timeout) / 1000.0
        while True:
            out = renewed + self._collect(self._max_poll_records - len(renewed))
            if self._deserialization_errors:
                # As Java: poll() raises for the record that failed; the records collected with it come
                # from the next poll(), and the failed one waits for acknowledge_offset().
                self._pending.extendleft(reversed(out))
                first, *rest = self._deserialization_errors
                self._deserialization_errors = []
                self._errors.extend(rest)
                raise first
            if out:
                break
            if self._wakeup_requested.is_set():
                self._wakeup_requested.clear()
                raise WakeupError("poll() was interrupted by wakeup()")
            self._raise_background_errors()
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                break
            self._buffer.await_data(min(remaining, 0.5))
        self._track(out)
        return ShareRecords(out)

    def _track(self, records: list[ShareConsumerRecord]) -> None:
        """Records handed to the application: in flight until acknowledged."""
        current: dict[int, ShareConsumerRecord] | None = None
        current_key: tuple[str, int] | None = None
        for record in records:
            key = (record.topic, record.partition)
            if key != current_key:
                current_key = key
                current = self._in_flight.setdefault(TopicPartition(*key), {})
            assert current is not None
            current[record.offset] = record

    def _collect(self, limit: int) -> list[ShareConsumerRecord]:
        out: list[ShareConsumerRecord] = []
        now = self._clock.now_ms()
        while self._pending and len(out) < limit:
            record = self._pending.popleft()
            if record.lock_deadline_ms <= now:
                continue  # the broker released it already: it is someone else's now
            out.append(record)
        while len(out) < limit:
            data = self._buffer.pop()
            if data is None:
                break
            if self._buffer.count_from(data.node) < self._fetcher.buffer_limit:
                self._thread.wakeup()  # room for the broker's next fetch
            records = self._decode(data, now)
            if data.lock_deadline_ms <= now:
                log.warning(
                    "share group %s: %d records of %s were fetched but their acquisition lock expired before "
                    "poll() took them; the broker redelivers them",
                    self.group_id,
                    len(records),
                    data.tp,
                )
                continue
            room = limit - len(out)
            if self._config.share_acquire_mode == "batch_optimized" and not out:
                room = len(records)  # KIP-1206: a whole acquired batch may exceed max.poll.records
            out.extend(records[:room])
            self._pending.extend(records[room:])
        return out

    def _decode(self, data: ShareFetchedData, now_ms: int) -> list[ShareConsumerRecord]:
        """The acquired records of one partition's fetch; acquired offsets without a record are
        acknowledged as GAP."""
        decoded = decode_batches_columnar(
            data.records or b"",
            topic=data.tp.topic,
            partition=data.tp.partition,
            check_crcs=self._config.check_crcs,
            max_decompressed_bytes=self._config.max_decompressed_batch_bytes,
        )
        if decoded.error is not None:
            log.error("share group %s: %s", self.group_id, decoded.error)
        # Columns, not record objects: one object per record is built, the ShareConsumerRecord.
        cols = decoded.columns
        offsets = cols.offsets
        timestamp_types = cols.timestamp_types()
        leader_epochs = cols.leader_epochs()
        topic, partition = data.tp.topic, data.tp.partition
        kdes, vdes = self._config.key_deserializer, self._config.value_deserializer
        deadline = data.lock_deadline_ms
        out: list[ShareConsumerRecord] = []
        gaps: dict[int, int] = {}
        bad: dict[int, int] = {}
        for first, last, count in data.acquired:
            lo, hi = bisect.bisect_left(offsets, first), bisect.bisect_right(offsets, last)
            if hi - lo != last - first + 1:
                for offset in sorted(set(range(first, last + 1)).difference(offsets[lo:hi])):
                    if decoded.error is not None and offset >= decoded.next_offset:
                        # A corrupt batch: nobody can process the record -- release it so the broker's
                        # delivery limit archives it eventually; the application gets the error.
                        bad[offset] = int(AcknowledgeType.RELEASE)
                    else:
                        gaps[offset] = GAP
            chunk = [
                ShareConsumerRecord(
                    topic, partition, o, ts, tt, k, v, h, e, -1 if k is None else len(k),
                    -1 if v is None else len(v), count, deadline,
                )
                for o, ts, tt, k, v, h, e in zip(
                    offsets[lo:hi], cols.timestamps[lo:hi], timestamp_types[lo:hi], cols.keys[lo:hi],
                    cols.values[lo:hi], cols.headers[lo:hi], leader_epochs[lo:hi], strict=True,
                )
            ]  # fmt: skip
            if kdes is None and vdes is None:
                out += chunk
                continue
            kctx, vctx = self._kdes_ctx, self._vdes_ctx
            for record in chunk:
                key, value = record.key, record.value
                field = MessageField.KEY
                try:
                    if kdes is not None and key is not None:
                        if kctx:
                            hdrs = record.headers if type(record.headers) is list else list(record.headers)
                            record.key = kdes(key, SerializationContext(topic, field, hdrs, partition))
                        else:
                            record.key = kdes(key)
                    field = MessageField.VALUE
                    if vdes is not None and value is not None:
                        if vctx:
                            hdrs = record.headers if type(record.headers) is list else list(record.headers)
                            record.value = vdes(value, SerializationContext(topic, field, hdrs, partition))
                        else:
                            record.value = vdes(value)
                except Exception as exc:
                    record.key, record.value = key, value
                    error = SerializationError(
                        f"share group {self.group_id}: deserializing the {field} of the record at "
                        f"{topic}-{partition}@{record.offset} failed: {exc!r}; acknowledge it with "
                        "acknowledge_offset()"
                        + ("" if self._explicit else " (implicit mode: the next poll() releases it)"),
                        topic=topic,
                        partition=partition,
                        offset=record.offset,
                        field=field,
                    )
                    error.__cause__ = exc
                    self._in_flight.setdefault(data.tp, {})[record.offset] = record
                    self._undeserializable.add((data.tp, record.offset))
                    self._deserialization_errors.append(error)
                    continue
                out.append(record)
        extra = {**gaps, **bad}
        if extra:
            self._acks.setdefault(data.tp, {}).update(extra)
        if decoded.error is not None and bad:
            self._errors.append(decoded.error)
        return out

    # ==================================================================================== misc
    def wakeup(self) -> None:
        """Make a blocking ``poll()``/``commit_sync()`` raise :class:`WakeupError` (thread-safe)."""
        self._wakeup_requested.set()
        self._buffer.notify()

    def close(self, timeout: float | None = 30.0) -> None:
        """Send the acknowledgements given, RELEASE every record still acquired (delivered and not
        acknowledged -- in implicit mode the last poll's records, as Java does -- or fetched and never
        handed out), close the share sessions and leave the group.  Returns within ``timeout`` seconds
        even if brokers are unreachable."""
        if self._closed:
            return
        timeout_ms = self._timeout_ms(timeout)
        start = time.monotonic()
        release = int(AcknowledgeType.RELEASE)
        # As Java: what was acknowledged is sent; every record still acquired -- delivered and not
        # acknowledged (implicit mode: the last poll's records), renewed, or fetched and never handed out --
        # is released for other members.
        final = self._collect_acks(implicit_type=release)
        for tp, offset in list(self._renewed):
            final.setdefault(tp, {})[offset] = release
        self._renewed.clear()
        for record in self._pending:
            final.setdefault(TopicPartition(record.topic, record.partition), {})[record.offset] = release
        self._pending.clear()
        for data in self._buffer.drain():
            offsets = final.setdefault(data.tp, {})
            for first, last, _count in data.acquired:
                for offset in range(first, last + 1):
                    offsets[offset] = release
        done: Future[AckResults] = Future()
        try:
            self._thread.submit(ShareCloseEvent(final_acks=final, results=done))
            done.result(max(0.0, timeout_ms / 1000.0 - (time.monotonic() - start)))
        except Exception:
            log.debug(
                "share group %s: acknowledgements on close did not complete", self.group_id, exc_info=True
            )
        self._closed = True
        left = timeout_ms - int((time.monotonic() - start) * 1000)
        self._thread.close(max(0, left))
        self._drain_background()
        for error in self._errors:
            log.warning("error not delivered to the application because the share consumer closed: %r", error)
        self._errors.clear()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ShareConsumer(client_id={self.client_id!r}, group_id={self.group_id!r})"
