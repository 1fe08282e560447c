"""kafka-python's ``KafkaConsumer`` on kafka-handoff's native :class:`~kafka_handoff.Consumer`.

The compat consumer keeps the records of the last native ``poll()`` in a small per-partition buffer and
hands them out one at a time (iteration) or ``max_records`` at a time (``poll()``), so that, as in
kafka-python, ``position()`` and a ``commit()`` without offsets count only the records already handed out.
It calls the native ``poll()`` again only once the buffer is empty; records still buffered when the
application seeks, pauses, unsubscribes or closes are not handed out and the native position is moved back
to the first of them (nothing skipped, nothing committed past what the application saw).

Without a ``group_id``, ``subscribe()`` works as in kafka-python: the consumer assigns itself every partition
of the topics (or of the topics matching the pattern) and re-reads the topics' metadata every
``metadata_max_age_ms`` (and every ``poll()`` while a topic does not exist yet).
"""

from __future__ import annotations

import collections
import logging
import math
import re
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

from kafka_handoff.compat.kafka_python.config import CONSUMER_KEYS, translate
from kafka_handoff.compat.kafka_python.errors import (
    IllegalStateError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    UnknownTopicOrPartitionError,
)
from kafka_handoff.compat.kafka_python.future import Future
from kafka_handoff.compat.kafka_python.producer import nested_metrics
from kafka_handoff.compat.kafka_python.serializer import deserializer
from kafka_handoff.compat.kafka_python.structs import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
    native_offset,
)
from kafka_handoff.consumer import Consumer
from kafka_handoff.consumer.listener import RebalanceConsumer
from kafka_handoff.errors import KafkaError
from kafka_handoff.types import ConsumerGroupMetadata
from kafka_handoff.types import ConsumerRecord as NativeRecord

__all__ = ["ConsumerRebalanceListener", "KafkaConsumer"]

log = logging.getLogger(__name__)


class ConsumerRebalanceListener:
    """kafka-python's rebalance listener: subclass it and override the one-argument callbacks.

    ``on_partitions_lost`` defaults to ``on_partitions_revoked`` (as in Java and kafka-python 3).  The
    callbacks run on the application thread inside ``poll()`` / iteration, ``unsubscribe()`` and
    ``close()``; they may call the consumer (``commit()``, ``seek()``, ...).
    """

    def on_partitions_revoked(self, revoked: Collection[TopicPartition]) -> None:
        raise NotImplementedError("on_partitions_revoked must be overridden")

    def on_partitions_assigned(self, assigned: Collection[TopicPartition]) -> None:
        raise NotImplementedError("on_partitions_assigned must be overridden")

    def on_partitions_lost(self, lost: Collection[TopicPartition]) -> None:
        self.on_partitions_revoked(lost)


class _ListenerAdapter:
    """The native (two-argument) listener the compat consumer installs: drops buffered records of the
    partitions that go away, then calls the application's kafka-python listener (if any)."""

    def __init__(self, owner: KafkaConsumer, listener: Any) -> None:
        self._owner = owner
        self._listener = listener

    def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        self._owner._forget(partitions)
        if self._listener is not None:
            self._listener.on_partitions_revoked(set(partitions))

    def on_partitions_assigned(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        if self._listener is not None:
            self._listener.on_partitions_assigned(set(partitions))

    def on_partitions_lost(self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer) -> None:
        self._owner._forget(partitions)
        if self._listener is None:
            return
        lost = getattr(self._listener, "on_partitions_lost", None)
        if callable(lost):
            lost(set(partitions))
        else:
            self._listener.on_partitions_revoked(set(partitions))


def _check_listener(listener: Any) -> None:
    if listener is None:
        return
    for name in ("on_partitions_revoked", "on_partitions_assigned"):
        if not callable(getattr(listener, name, None)):
            raise TypeError(f"listener must be a ConsumerRebalanceListener (it has no {name}() method)")


def _header_size(headers: list[tuple[str, bytes | None]]) -> int:
    if not headers:
        return -1
    return sum(len(k.encode("utf-8")) + (len(v) if v is not None else 0) for k, v in headers)


def _partitions_arg(partitions: tuple[Any, ...]) -> list[TopicPartition]:
    """kafka-python's varargs (``pause(tp1, tp2)``); a single list is accepted too."""
    if len(partitions) == 1 and not isinstance(partitions[0], TopicPartition):
        first = partitions[0]
        if isinstance(first, (set, frozenset)) or (
            isinstance(first, (list, tuple)) and not (len(first) == 2 and isinstance(first[0], str))
        ):
            partitions = tuple(first)
    return [TopicPartition(*tp) for tp in partitions]


class KafkaConsumer(Iterator[ConsumerRecord]):
    """kafka-python's consumer API on the native consumer.

    ``KafkaConsumer(*topics, **configs)`` takes kafka-python's underscore configuration names (see
    :mod:`kafka_handoff.compat.kafka_python.config`); unknown keys raise ``KafkaConfigurationError`` naming
    them.  Iterate it (``for msg in consumer``) for :class:`ConsumerRecord` tuples -- iteration ends after
    ``consumer_timeout_ms`` without a record (default: never) -- or call :meth:`poll` for
    ``{TopicPartition: [ConsumerRecord, ...]}``.

    kafka-handoff's own extras stay reachable: :meth:`delay_revoke`, :meth:`to_be_revoked_partitions`,
    :meth:`lost_partitions` (KIP-983) and :attr:`native`, the native consumer.
    """

    def __init__(self, *topics: str, **configs: Any) -> None:
        native, compat = translate("consumer", configs, CONSUMER_KEYS)
        self.config: dict[str, Any] = dict(configs)
        if native.get("group.id") is None and native.pop("enable.auto.commit", None):
            log.warning("group_id is None: disabling auto-commit.")
        self._key_de = deserializer(compat.get("key_deserializer"), "key_deserializer")
        self._value_de = deserializer(compat.get("value_deserializer"), "value_deserializer")
        timeout_ms = compat.get("consumer_timeout_ms", float("inf"))
        self._consumer_timeout_s = math.inf if timeout_ms is None else float(timeout_ms) / 1000.0
        self._default_commit_cb: Callable[..., Any] | None = compat.get("default_offset_commit_callback")
        self._max_poll_records = int(configs.get("max_poll_records", 500))
        self._metadata_max_age_s = int(configs.get("metadata_max_age_ms", 300_000)) / 1000.0
        self._group_id: str | None = native.get("group.id")
        self._native = Consumer(native)
        self._buffer: dict[TopicPartition, collections.deque[ConsumerRecord]] = {}
        self._closed = False
        # Subscription without a group (kafka-python assigns every partition of the topics itself).
        self._groupless_topics: frozenset[str] | None = None
        self._groupless_pattern: re.Pattern[str] | None = None
        self._groupless_listener: Any = None
        self._groupless_complete = False
        self._groupless_checked = -math.inf
        self._mode: str | None = None  # "group", "groupless" (subscribed without a group), "assigned"
        if topics:
            self.subscribe(topics)

    @property
    def native(self) -> Consumer:
        """The native consumer underneath (for what the kafka-python API lacks)."""
        return self._native

    # ====================================================================================== iteration
    def __iter__(self) -> KafkaConsumer:
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record; ``StopIteration`` after ``consumer_timeout_ms`` without one.  Iterating again
        afterwards continues where it stopped (as kafka-python)."""
        self._ensure_open()
        deadline = time.monotonic() + self._consumer_timeout_s
        while True:
            record = self._take_one()
            if record is not None:
                return record
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StopIteration
            self._fetch(min(remaining, 1.0))

    def _take_one(self) -> ConsumerRecord | None:
        for tp, records in self._buffer.items():
            if records:
                record = records.popleft()
                if not records:
                    del self._buffer[tp]
                return record
        self._buffer.clear()
        return None

    # ====================================================================================== poll
    def poll(
        self, timeout_ms: float | None = 0, max_records: int | None = None, update_offsets: bool = True
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records of the assigned partitions, waiting up to ``timeout_ms`` for some (``None``: until
        there are some): at most ``max_records`` (default ``max_poll_records``), grouped by partition."""
        self._ensure_open()
        if not update_offsets:
            raise NotImplementedError(
                "poll(update_offsets=False) is not supported by kafka-handoff: the position always "
                "moves past the records returned (seek() back to re-read them)"
            )
        limit = self._max_poll_records if max_records is None else int(max_records)
        if limit < 1:
            raise ValueError(f"max_records must be at least 1, got {limit}")
        wait_s = math.inf if timeout_ms is None else max(0.0, float(timeout_ms)) / 1000.0
        deadline = time.monotonic() + wait_s
        while not self._buffer:
            self._fetch(
                min(1.0, max(0.0, deadline - time.monotonic()))
                if math.isinf(wait_s)
                else max(0.0, deadline - time.monotonic())
            )
            if self._buffer or time.monotonic() >= deadline:
                break
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        count = 0
        for tp in list(self._buffer):
            records = self._buffer[tp]
            take = min(len(records), limit - count)
            out[tp] = [records.popleft() for _ in range(take)]
            count += take
            if not records:
                del self._buffer[tp]
            if count >= limit:
                break
        return out

    def _fetch(self, timeout_s: float) -> None:
        """One native ``poll()`` (the buffer is empty), its records converted into the buffer."""
        if self._groupless_topics is not None or self._groupless_pattern is not None:
            self._groupless_refresh(timeout_s)
            if not self._native.assignment():
                # No partition yet (the topic does not exist yet): wait a little, then look again.
                time.sleep(min(timeout_s, 0.2))
                return
        elif self._mode is None:
            raise IllegalStateError(
                "No topics subscribed and no partitions assigned: call subscribe() or assign()"
            )
        batch = self._native.poll(timeout_s)
        for tp, records in batch.by_partition().items():
            self._buffer[tp] = collections.deque(self._convert(r) for r in records)

    def _convert(self, r: NativeRecord) -> ConsumerRecord:
        headers = [(k, v) for k, v in r.headers]
        key = r.key
        value = r.value
        key_size = -1 if key is None else len(key)
        value_size = -1 if value is None else len(value)
        if self._key_de is not None:
            key = self._key_de(r.topic, headers, key)
        if self._value_de is not None:
            value = self._value_de(r.topic, headers, value)
        return ConsumerRecord(
            r.topic,
            r.partition,
            r.leader_epoch,
            r.offset,
            r.timestamp,
            r.timestamp_type,
            key,
            value,
            headers,
            None,
            key_size,
            value_size,
            _header_size(headers),
        )

    # ====================================================================================== buffer
    def _forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Drop buffered records of ``partitions`` (revoked, lost, sought)."""
        for tp in partitions:
            self._buffer.pop(TopicPartition(*tp), None)

    def _rewind(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Drop buffered records (of ``partitions``, default all) not handed out yet, moving the native
        position back to the first of them so that they are fetched again and never committed past."""
        wanted = None if partitions is None else {TopicPartition(*tp) for tp in partitions}
        for tp in list(self._buffer):
            if wanted is not None and tp not in wanted:
                continue
            records = self._buffer.pop(tp)
            if records:
                try:
                    self._native.seek(tp, records[0].offset)
                except KafkaError:
                    log.debug("could not move %s back to %d", tp, records[0].offset, exc_info=True)

    def _next_offsets(self) -> dict[TopicPartition, int]:
        """The first offset not handed out, of partitions with buffered records."""
        return {tp: records[0].offset for tp, records in self._buffer.items() if records}

    # ====================================================================================== subscriptions
    def subscribe(
        self,
        topics: Iterable[str] | str = (),
        pattern: str | re.Pattern[str] | None = None,
        listener: Any = None,
    ) -> None:
        """Subscribe to ``topics`` or to the topics matching ``pattern`` (a regex, matched from the start
        of the name); ``listener`` is a :class:`ConsumerRebalanceListener`.  Replaces the previous
        subscription."""
        self._ensure_open()
        names = [topics] if isinstance(topics, str) else list(topics or ())
        if names and pattern is not None:
            raise IllegalStateError("You must choose only one way to subscribe: topics or pattern")
        if not names and pattern is None:
            raise IllegalStateError("You must choose topics or pattern to subscribe")
        _check_listener(listener)
        if self._mode == "assigned":
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive")
        compiled = (
            None if pattern is None else (pattern if isinstance(pattern, re.Pattern) else re.compile(pattern))
        )
        if self._group_id is None:
            self._groupless_topics = None if compiled is not None else frozenset(names)
            self._groupless_pattern = compiled
            self._groupless_listener = listener
            self._groupless_complete = False
            self._groupless_checked = -math.inf
            self._mode = "groupless"
            return
        self._native.set_rebalance_listener(_ListenerAdapter(self, listener))
        self._native.subscribe(compiled if compiled is not None else names)
        self._mode = "group"

    def _groupless_refresh(self, timeout_s: float) -> None:
        now = time.monotonic()
        if self._groupless_complete and now - self._groupless_checked < self._metadata_max_age_s:
            return
        self._groupless_checked = now
        lookup = max(0.5, min(timeout_s, 5.0))
        wanted: set[TopicPartition] = set()
        complete = True
        if self._groupless_pattern is not None:
            pattern = self._groupless_pattern
            for topic, infos in self._native.list_topics(lookup).items():
                if pattern.match(topic):
                    wanted.update(TopicPartition(topic, p.partition) for p in infos)
        else:
            for topic in sorted(self._groupless_topics or ()):
                try:
                    infos = self._native.partitions_for(topic, lookup)
                except (UnknownTopicOrPartitionError, KafkaTimeoutError):
                    complete = False
                    continue
                wanted.update(TopicPartition(topic, p.partition) for p in infos)
        self._groupless_complete = complete
        current = set(self._native.assignment())
        if wanted == current:
            return
        removed = current - wanted
        added = wanted - current
        if removed:
            self._rewind(removed)
            if self._groupless_listener is not None:
                self._groupless_listener.on_partitions_revoked(removed)
        self._native.assign(sorted(wanted))
        if added and self._groupless_listener is not None:
            self._groupless_listener.on_partitions_assigned(added)

    def subscription(self) -> set[str] | None:
        """The subscribed topics (``None`` when not subscribed)."""
        self._ensure_open()
        if self._groupless_topics is not None:
            return set(self._groupless_topics)
        if self._groupless_pattern is not None:
            return {tp.topic for tp in self._native.assignment()}
        if self._mode != "group":
            return None
        return set(self._native.subscription())

    def unsubscribe(self) -> None:
        """Leave the group (revoke callbacks run) or drop the assignment."""
        self._ensure_open()
        self._rewind()
        self._groupless_topics = None
        self._groupless_pattern = None
        self._groupless_listener = None
        self._mode = None
        self._native.unsubscribe()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Take exactly these partitions (no group management); an empty list unsubscribes."""
        self._ensure_open()
        parts = [TopicPartition(*tp) for tp in partitions]
        if self._mode in ("group", "groupless"):
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive")
        if not parts:
            self.unsubscribe()
            return
        keep = set(parts)
        self._rewind([tp for tp in self._buffer if tp not in keep])
        self._native.assign(parts)
        self._mode = "assigned"

    def assignment(self) -> set[TopicPartition]:
        self._ensure_open()
        return set(self._native.assignment())

    # ====================================================================================== positions
    def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        """The offset of the next record this consumer hands out for ``partition``."""
        self._ensure_open()
        tp = TopicPartition(*partition)
        records = self._buffer.get(tp)
        if records:
            return records[0].offset
        return self._native.position(tp, None if timeout_ms is None else timeout_ms / 1000.0)

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's high watermark as of the last fetch (``None`` before one)."""
        self._ensure_open()
        tp = TopicPartition(*partition)
        lag = self._native.current_lag(tp)
        if lag is None:
            return None
        return self._native.position(tp) + lag

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Hand out ``partition`` from ``offset`` next."""
        self._ensure_open()
        tp = TopicPartition(*partition)
        if int(offset) < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        if tp not in self._native.assignment():
            raise IllegalStateError(f"Unassigned partition {tp}")
        self._forget([tp])
        self._native.seek(tp, int(offset))

    def _seek_to(self, partitions: tuple[Any, ...], which: str) -> None:
        self._ensure_open()
        parts = _partitions_arg(partitions) if partitions else None
        if parts is not None:
            assigned = self._native.assignment()
            missing = [tp for tp in parts if tp not in assigned]
            if missing:
                raise IllegalStateError(f"Unassigned partitions: {missing}")
            self._forget(parts)
        else:
            self._buffer.clear()
        if which == "beginning":
            self._native.seek_to_beginning(parts)
        else:
            self._native.seek_to_end(parts)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Hand out ``partitions`` (default: all assigned) from their first offset next."""
        self._seek_to(partitions, "beginning")

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Hand out only records written after now for ``partitions`` (default: all assigned)."""
        self._seek_to(partitions, "end")

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop handing out records of ``partitions`` until :meth:`resume`; buffered ones are fetched again
        after it."""
        self._ensure_open()
        parts = _partitions_arg(partitions)
        self._rewind(parts)
        self._native.pause(parts)

    def resume(self, *partitions: TopicPartition) -> None:
        self._ensure_open()
        self._native.resume(_partitions_arg(partitions))

    def paused(self) -> set[TopicPartition]:
        self._ensure_open()
        return set(self._native.paused())

    # ====================================================================================== commits
    def _consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        pending = self._next_offsets()
        for tp in self._native.assignment():
            if tp in pending:
                offsets[tp] = OffsetAndMetadata(pending[tp])
                continue
            try:
                offsets[tp] = OffsetAndMetadata(self._native.position(tp, 0.0))
            except (KafkaTimeoutError, NoOffsetForPartitionError):
                continue
        return offsets

    def commit(
        self, offsets: Mapping[TopicPartition, Any] | None = None, timeout_ms: int | None = None
    ) -> None:
        """Commit ``offsets`` (values: ``OffsetAndMetadata`` or an int), by default the positions of every
        assigned partition after the records handed out so far; blocks until done (raises
        ``CommitFailedError`` when the group rebalanced)."""
        self._ensure_open()
        timeout = None if timeout_ms is None else timeout_ms / 1000.0
        if offsets is None:
            if not self._next_offsets():
                self._native.commit_sync(timeout=timeout)
                return
            native = self._consumed()
        else:
            native = {TopicPartition(*tp): native_offset(om) for tp, om in offsets.items()}
        self._native.commit_sync(native, timeout)

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, Any] | None = None,
        callback: Callable[[dict[TopicPartition, OffsetAndMetadata], Any], Any] | None = None,
    ) -> Future[None]:
        """Commit without waiting; ``callback(offsets, response)`` (default:
        ``default_offset_commit_callback``) runs inside a later ``poll()``/iteration with ``response``
        the exception, or ``None`` on success."""
        self._ensure_open()
        if offsets is None:
            native = self._consumed() if self._next_offsets() else None
        else:
            native = {TopicPartition(*tp): native_offset(om) for tp, om in offsets.items()}
        cb = callback if callback is not None else self._default_commit_cb
        native_cb = None
        if cb is not None:
            user_cb = cb

            def native_cb(done: dict[TopicPartition, OffsetAndMetadata], error: BaseException | None) -> None:
                user_cb(done, error)

        return Future(self._native.commit_async(native, native_cb))

    def committed(self, partition: TopicPartition, metadata: bool = False) -> Any:
        """The group's committed offset of ``partition`` (``None`` when there is none); with
        ``metadata=True`` the :class:`OffsetAndMetadata`."""
        self._ensure_open()
        tp = TopicPartition(*partition)
        om = self._native.committed([tp]).get(tp)
        if om is None:
            return None
        return om if metadata else om.offset

    # ====================================================================================== lookups
    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        self._ensure_open()
        return self._native.beginning_offsets(
            [TopicPartition(*tp) for tp in partitions], None if timeout_ms is None else timeout_ms / 1000.0
        )

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        self._ensure_open()
        return self._native.end_offsets(
            [TopicPartition(*tp) for tp in partitions], None if timeout_ms is None else timeout_ms / 1000.0
        )

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        self._ensure_open()
        return self._native.offsets_for_times(
            {TopicPartition(*tp): int(ts) for tp, ts in timestamps.items()},
            None if timeout_ms is None else timeout_ms / 1000.0,
        )

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partition ids of ``topic``; ``None`` when it does not exist."""
        self._ensure_open()
        try:
            return {p.partition for p in self._native.partitions_for(topic)}
        except UnknownTopicOrPartitionError:
            return None

    def topics(self) -> set[str]:
        """Every topic the cluster has (internal ones excluded unless ``exclude_internal_topics=False``)."""
        self._ensure_open()
        return set(self._native.list_topics())

    def metrics(self, raw: bool = False) -> dict[str, Any]:
        """Metric values as ``{group: {name: value}}`` (``raw=True``: the native ``"group:name"`` dict)."""
        flat = self._native.metrics()
        return dict(flat) if raw else nested_metrics(flat)

    def bootstrap_connected(self) -> bool:
        """Whether a bootstrap broker answered a metadata request."""
        try:
            self._native.list_topics(5.0)
        except KafkaError:
            return False
        return True

    def group_metadata(self) -> ConsumerGroupMetadata:
        """For ``KafkaProducer.send_offsets_to_transaction()``."""
        return self._native.group_metadata()

    # ====================================================================================== KIP-983 extras
    def delay_revoke(self, partitions: Iterable[TopicPartition]) -> bool:
        """Postpone the revoke of ``partitions`` by one more poll (KIP-983; see the native consumer)."""
        return self._native.delay_revoke(partitions)

    def to_be_revoked_partitions(self) -> frozenset[TopicPartition]:
        """Partitions whose revoke completes at the start of the next native poll (KIP-983)."""
        return self._native.to_be_revoked_partitions()

    def lost_partitions(self) -> frozenset[TopicPartition]:
        """Partitions lost during the last poll (KIP-983)."""
        return self._native.lost_partitions()

    def wakeup(self) -> None:
        """Interrupt a blocking call from another thread (it raises ``WakeupError``)."""
        self._native.wakeup()

    # ====================================================================================== close
    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        """Leave the group and stop.  With ``enable_auto_commit`` the positions after the records handed
        out are committed first (the native consumer always does this: ``autocommit=False`` cannot turn it
        off and is logged)."""
        if self._closed:
            return
        if not autocommit and self._group_id is not None and self._native.config.get("enable.auto.commit"):
            log.warning(
                "close(autocommit=False): kafka-handoff still commits on close with enable_auto_commit"
            )
        self._rewind()
        self._closed = True
        try:
            self._native.close(30.0 if timeout_ms is None else timeout_ms / 1000.0)
        finally:
            for name in ("key_deserializer", "value_deserializer"):
                de = self.config.get(name)
                closer = getattr(de, "close", None)
                if callable(closer) and not isinstance(de, type):
                    try:
                        closer()
                    except Exception:
                        log.exception("closing %s %r failed", name, de)

    def _ensure_open(self) -> None:
        if self._closed:
            raise IllegalStateError("This consumer has already been closed.")

    def __enter__(self) -> KafkaConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
