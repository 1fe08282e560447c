"""confluent-kafka's ``Consumer`` over the public native :class:`kafka_handoff.Consumer`.

How librdkafka's model maps onto ours:

* **single-message poll** -- a native ``poll()`` returns a batch; this layer hands it out one
  :class:`Message` at a time and calls the native ``poll()`` again only when the batch is used up, so
  rebalance callbacks (which run inside the native ``poll()``) never see undelivered records.
* **the offset store** -- the native consumer's own auto-commit is switched off; this layer keeps
  librdkafka's *stored offsets* (the offset after the last message ``poll()`` returned, or what
  ``store_offsets()`` stored when ``enable.auto.offset.store=false``) and commits *those*: every
  ``auto.commit.interval.ms``, before a revocation completes and on ``close()``.  Records fetched but not
  yet returned are never committed.
* **rebalance callbacks** -- ``on_assign``/``on_revoke``/``on_lost`` are called as
  ``cb(consumer, partitions)`` inside ``poll()``.  ``assign()``/``incremental_assign()`` called inside
  ``on_assign`` set the start offsets (``TopicPartition.offset``: an offset, ``OFFSET_BEGINNING``,
  ``OFFSET_END``, or ``OFFSET_STORED``/``OFFSET_INVALID`` for the committed offset);
  ``unassign()``/``incremental_unassign()`` inside ``on_revoke`` are accepted (the revocation completes
  when the callback returns).  Without ``on_lost``, lost partitions go to ``on_revoke``, as in
  confluent-kafka.
* **KIP-983** -- revocations complete at the start of the next native ``poll()``
  (``revoke.completion=next-poll``); :meth:`Consumer.to_be_revoked_partitions`,
  :meth:`Consumer.delay_revoke` and
  :meth:`Consumer.lost_partitions` stay reachable.
"""

from __future__ import annotations

import json
import logging
import math
import operator
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import kafka_handoff
from kafka_handoff import errors as native_errors
from kafka_handoff.compat.confluent_kafka import _stats
from kafka_handoff.compat.confluent_kafka.config import (
    TranslatedConfig,
    compat_bool,
    compat_callable,
    compat_int,
    translate_config,
)
from kafka_handoff.compat.confluent_kafka.error import KafkaError, KafkaException, from_exception
from kafka_handoff.compat.confluent_kafka.types import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    ClusterMetadata,
    Message,
    RecordMessage,
    TopicPartition,
    cluster_metadata_from,
)
from kafka_handoff.consumer.listener import RebalanceConsumer, RebalanceListenerBase
from kafka_handoff.types import ClusterMetadata as NativeClusterMetadata
from kafka_handoff.types import ConsumerRecord, OffsetAndMetadata, PartitionInfo
from kafka_handoff.types import TopicPartition as NativeTP

__all__ = ["Consumer"]

log = logging.getLogger(__name__)

RebalanceCallback = Callable[["Consumer", list[TopicPartition]], None]


def _exhausted() -> Message:
    raise StopIteration


_EXHAUSTED: Callable[[], Message] = _exhausted

_SLICE_S = 0.2
"""How long one native poll() waits inside a longer compat poll(), so callbacks and events are served."""


def _tp_out(tp: NativeTP, offset: int = OFFSET_INVALID) -> TopicPartition:
    return TopicPartition(tp.topic, tp.partition, offset)


def _timeout_s(timeout: float | None) -> float:
    """confluent's timeouts: ``None`` or a negative number wait forever."""
    if timeout is None or timeout < 0:
        return math.inf
    return float(timeout)


def _api_timeout(timeout: float | None) -> float | None:
    """A timeout for a native blocking call (``None``: the native default.api.timeout.ms)."""
    if timeout is None or timeout < 0:
        return None
    return float(timeout)


class _Chunk:
    """The undelivered records of one partition from one native batch."""

    __slots__ = ("index", "records", "tp")

    def __init__(self, tp: NativeTP, records: list[ConsumerRecord]) -> None:
        self.tp = tp
        self.records = records
        self.index = 0


class _Bridge(RebalanceListenerBase):
    """The native rebalance listener: forwards to the compat consumer's callbacks."""

    def __init__(self, owner: Consumer) -> None:
        self._owner = owner

    def on_partitions_assigned(self, partitions: Collection[NativeTP], consumer: RebalanceConsumer) -> None:
        self._owner._on_assigned(partitions, consumer)

    def on_partitions_revoked(self, partitions: Collection[NativeTP], consumer: RebalanceConsumer) -> None:
        self._owner._on_revoked(partitions, consumer, lost=False)

    def on_partitions_lost(self, partitions: Collection[NativeTP], consumer: RebalanceConsumer) -> None:
        self._owner._on_revoked(partitions, consumer, lost=True)


class _CallbackError(Exception):
    """Wraps an exception raised by an application callback while the native consumer runs it."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class _LogForwarder(logging.Handler):
    """Forwards kafka-handoff's log records to the application's ``logger=``."""

    def __init__(self, target: logging.Logger, level: int) -> None:
        super().__init__(level)
        self._target = target

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= self._target.getEffectiveLevel():
            self._target.handle(record)


class _ErrorWatcher(logging.Handler):
    """Turns the native client's "no broker reachable" warning into ``_ALL_BROKERS_DOWN`` for ``error_cb``."""

    def __init__(self, owner: Consumer) -> None:
        super().__init__(logging.WARNING)
        self._owner = owner

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == "%s: no broker reachable for %d ms; tried %s" and record.args:
            args = record.args if isinstance(record.args, tuple) else ()
            if args and args[0] == self._owner._client_id:
                self._owner._client_errors.append(
                    KafkaError(KafkaError._ALL_BROKERS_DOWN, f"{len(args) > 2 and args[2]}: all brokers down")
                )


class Consumer:
    """confluent-kafka's high-level consumer (``confluent_kafka.Consumer``) on kafka-handoff."""

    # Until __init__ ran (a subclass that does not call it), every method raises "Consumer closed".
    _closed = True
    _chunk: _Chunk | None = None
    _next: Callable[[], Message] = staticmethod(lambda: _exhausted())

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        if config is None and not kwargs:
            raise TypeError("expected configuration dict")
        if config is not None and not isinstance(config, Mapping):
            raise TypeError("expected configuration dict")
        conf = dict(config or {})
        conf.update(kwargs)
        if not conf.get("group.id"):
            raise ValueError("Failed to create consumer: group.id must be set")
        self._prepare_config(conf)
        tc = translate_config(conf, "consumer")
        self._tc: TranslatedConfig = tc
        native_conf = dict(tc.native)
        self._auto_commit = bool(_bool_value(native_conf.pop("enable.auto.commit", True)))
        self._auto_commit_interval_s = _int_or(native_conf.get("auto.commit.interval.ms"), 5000) / 1000.0
        native_conf["enable.auto.commit"] = False
        if self._auto_commit and "group.id" not in native_conf:
            self._auto_commit = False
        native_conf.setdefault("revoke.completion", "next-poll")
        # librdkafka's default (Java's is read_uncommitted): aborted transactional records are not returned.
        native_conf.setdefault("isolation.level", "read_committed")
        self._incremental_protocol = str(native_conf.get("group.protocol", "classic")).lower() == "consumer"
        session = native_conf.get("session.timeout.ms")
        session_ms = _int_or(session, 45000)
        if session is not None and "heartbeat.interval.ms" not in native_conf and 0 < session_ms <= 3000:
            # librdkafka does not check heartbeat < session locally (the broker refuses a too short session);
            # keep that: derive the heartbeat from the session instead of refusing the configuration.
            native_conf["heartbeat.interval.ms"] = max(1, session_ms // 3)
        self._auto_store = compat_bool(tc, "enable.auto.offset.store", True)
        self._partition_eof = compat_bool(tc, "enable.partition.eof", False)
        self._error_cb = compat_callable(tc, "error_cb")
        self._stats_cb = compat_callable(tc, "stats_cb")
        self._on_commit = compat_callable(tc, "on_commit")
        self._stats_interval_s = compat_int(tc, "statistics.interval.ms", 0) / 1000.0
        compat_callable(tc, "throttle_cb")
        try:
            self._native = kafka_handoff.Consumer(native_conf)
        except native_errors.ConfigError as e:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, str(e))) from e
        self._client_id = self._native.client_id
        self._group_id: str | None = self._native.group_id
        self._native_conf = native_conf
        self._closed = False
        self._subscribed = False
        self._assigned_mode = False
        self._chunks: deque[_Chunk] = deque()
        self._chunk: _Chunk | None = None
        self._it: Iterator[ConsumerRecord] | None = None
        self._it_chunk = _Chunk(NativeTP("", -1), [])
        self._next: Callable[[], Message] = _EXHAUSTED
        self._events: deque[Message] = deque()
        self._stored: dict[NativeTP, int] = {}
        self._app_offsets: dict[NativeTP, int] = {}
        self._committed: dict[NativeTP, int] = {}
        self._eof_at: dict[NativeTP, int] = {}
        self._client_errors: list[KafkaError] = []
        self._pending_commit_cbs: deque[tuple[KafkaError | None, list[TopicPartition]]] = deque()
        self._view: RebalanceConsumer | None = None
        self._in_assign_cb = False
        self._assign_offsets: list[TopicPartition] | None = None
        self._on_assign: RebalanceCallback | None = None
        self._on_revoke: RebalanceCallback | None = None
        self._on_lost: RebalanceCallback | None = None
        self._rebalance_cnt = 0
        self._last_commit = time.monotonic()
        self._max_poll_s = _int_or(native_conf.get("max.poll.interval.ms"), 300000) / 1000.0
        self._last_native_poll: float | None = None
        self._start = time.monotonic()
        self._next_stats = self._start + self._stats_interval_s if self._stats_interval_s > 0 else math.inf
        self._admin: kafka_handoff.AdminClient | None = None
        self._log_handlers: list[tuple[logging.Logger, logging.Handler]] = []
        self._install_log_handlers()

    # ------------------------------------------------------------------------------------------ set-up
    def _prepare_config(self, conf: dict[str, Any]) -> None:
        """Hook for subclasses (``DeserializingConsumer`` takes its deserializers out)."""

    def _install_log_handlers(self) -> None:
        root = logging.getLogger("kafka_handoff")
        logger = self._tc.compat.get("logger")
        if logger is not None:
            if not isinstance(logger, logging.Logger):
                raise KafkaException(
                    KafkaError(
                        KafkaError._INVALID_ARG, 'Configuration property "logger": expected a logging.Logger'
                    )
                )
            level = _syslog_to_logging(compat_int(self._tc, "log_level", 6))
            handler: logging.Handler = _LogForwarder(logger, level)
            root.addHandler(handler)
            self._log_handlers.append((root, handler))
        if self._error_cb is not None:
            watcher = _ErrorWatcher(self)
            net = logging.getLogger("kafka_handoff.network.client")
            net.addHandler(watcher)
            self._log_handlers.append((net, watcher))

    def _remove_log_handlers(self) -> None:
        for logger, handler in self._log_handlers:
            logger.removeHandler(handler)
        self._log_handlers.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")

    def _ops(self) -> Any:
        """The native consumer, or inside a rebalance callback its view (KIP-1306)."""
        return self._view if self._view is not None else self._native

    # ------------------------------------------------------------------------------------------ subscribe
    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        """Subscribe to ``topics`` (names; a name starting with ``^`` is a regular expression)."""
        self._check_open()
        if isinstance(topics, str) or not isinstance(topics, Sequence | set | frozenset):
            raise TypeError("expected a list of topic (str) names")
        for cb, name in ((on_assign, "on_assign"), (on_revoke, "on_revoke"), (on_lost, "on_lost")):
            if cb is not None and not callable(cb):
                raise TypeError(f"{name} expects a callable")
        names = list(topics)
        patterns = [t for t in names if t.startswith("^")]
        target: Any
        if patterns:
            import re

            target = re.compile(
                "|".join(f"(?:{p[1:]})" for p in patterns) if len(names) == len(patterns) else ""
            )
            if len(patterns) != len(names):
                plain = [re.escape(t) for t in names if not t.startswith("^")]
                target = re.compile("|".join([*(f"(?:{p[1:]})" for p in patterns), *plain]))
        else:
            target = names
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        try:
            self._native.set_rebalance_listener(_Bridge(self))
            self._native.subscribe(target)
        except (native_errors.KafkaError, ValueError) as e:
            raise KafkaException(from_exception(e)) from e
        self._subscribed = True

    def unsubscribe(self) -> None:
        """Leave the group: ``on_revoke`` runs for the assignment and (auto-commit) the stored offsets are
        committed before the partitions go."""
        self._check_open()
        self._run_native(self._native.unsubscribe)
        self._subscribed = False
        self._assigned_mode = False
        self._clear_buffer()

    # ------------------------------------------------------------------------------------------ callbacks
    def _on_assigned(self, partitions: Collection[NativeTP], view: RebalanceConsumer) -> None:
        self._rebalance_cnt += 1
        parts = sorted(partitions)
        for tp in parts:
            self._eof_at.pop(tp, None)
        if self._on_assign is None or (not parts and self._incremental_protocol):
            # Under KIP-848 librdkafka reports only non-empty incremental assignments.
            return
        self._view = view
        self._in_assign_cb = True
        self._assign_offsets = None
        try:
            self._on_assign(self, [_tp_out(tp) for tp in parts])
            if self._assign_offsets:
                self._apply_offsets(self._assign_offsets, view)
        except BaseException as e:
            raise _CallbackError(e) from e
        finally:
            self._view = None
            self._in_assign_cb = False
            self._assign_offsets = None

    def _on_revoked(self, partitions: Collection[NativeTP], view: RebalanceConsumer, *, lost: bool) -> None:
        self._rebalance_cnt += 1
        parts = sorted(partitions)
        cb = self._on_lost if lost and self._on_lost is not None else self._on_revoke
        if not parts and self._incremental_protocol:
            cb = None
        self._view = view
        try:
            if cb is not None:
                cb(self, [_tp_out(tp) for tp in parts])
            if not lost:
                self._commit_stored_on_leave(frozenset(parts))
        except BaseException as e:
            raise _CallbackError(e) from e
        finally:
            self._view = None
            gone = set(parts)
            self._drop_chunks(gone, seek=False)
            for tp in gone:
                self._stored.pop(tp, None)
                self._app_offsets.pop(tp, None)
                self._eof_at.pop(tp, None)

    def _commit_stored_on_leave(self, partitions: frozenset[NativeTP] | None) -> None:
        """librdkafka's final commit of the stored offsets when partitions are revoked (auto-commit on)."""
        if not self._auto_commit or not self._subscribed:
            return
        offsets = self._stored_offsets(partitions)
        if not offsets:
            return
        try:
            self._ops().commit_sync(offsets)
            self._note_committed(offsets, None)
        except native_errors.KafkaError as e:
            log.warning("commit of stored offsets before revocation failed: %s", e)
            self._note_committed(offsets, from_exception(e))

    # ------------------------------------------------------------------------------------------ assign
    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Assign ``partitions`` (inside ``on_assign``: accept the assignment and set start offsets)."""
        self._check_open()
        parts = _check_tps(partitions)
        if self._in_assign_cb:
            self._assign_offsets = parts
            return
        if self._view is not None:
            return
        try:
            self._native.assign([NativeTP(p.topic, p.partition) for p in parts])
        except (native_errors.KafkaError, ValueError) as e:
            raise KafkaException(from_exception(e)) from e
        self._assigned_mode = True
        self._clear_buffer()
        self._stored.clear()
        self._app_offsets.clear()
        self._eof_at.clear()
        self._apply_offsets(parts, self._native)

    def incremental_assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Add ``partitions`` to the assignment (inside ``on_assign``: accept them with their offsets)."""
        self._check_open()
        parts = _check_tps(partitions)
        if self._in_assign_cb:
            self._assign_offsets = (self._assign_offsets or []) + parts
            return
        if self._view is not None:
            return
        current = set(self._native.assignment())
        new = [p for p in parts if NativeTP(p.topic, p.partition) not in current]
        if len(new) != len(parts):
            raise KafkaException(KafkaError(KafkaError._CONFLICT, "partition(s) already assigned"))
        try:
            self._native.assign([*current, *(NativeTP(p.topic, p.partition) for p in parts)])
        except (native_errors.KafkaError, ValueError) as e:
            raise KafkaException(from_exception(e)) from e
        self._assigned_mode = True
        self._apply_offsets(parts, self._native)

    def incremental_unassign(self, partitions: Sequence[TopicPartition]) -> None:
        """Remove ``partitions`` from the assignment (inside ``on_revoke``: accepted, nothing to do)."""
        self._check_open()
        parts = _check_tps(partitions)
        if self._view is not None:
            return
        gone = {NativeTP(p.topic, p.partition) for p in parts}
        current = set(self._native.assignment())
        if not gone <= current:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "partition(s) not assigned"))
        self._run_native(lambda: self._native.assign(sorted(current - gone)))
        self._drop_chunks(gone, seek=False)
        for tp in gone:
            self._stored.pop(tp, None)
            self._app_offsets.pop(tp, None)

    def unassign(self) -> None:
        """Drop the whole assignment (inside ``on_revoke``: accepted, nothing to do)."""
        self._check_open()
        if self._view is not None:
            return
        if self._subscribed:
            return
        self._run_native(lambda: self._native.assign([]))
        self._assigned_mode = False
        self._clear_buffer()
        self._stored.clear()
        self._app_offsets.clear()

    def _apply_offsets(self, parts: Iterable[TopicPartition], ops: Any) -> None:
        for p in parts:
            tp = NativeTP(p.topic, p.partition)
            try:
                if p.offset == OFFSET_BEGINNING:
                    ops.seek_to_beginning([tp])
                elif p.offset == OFFSET_END:
                    ops.seek_to_end([tp])
                elif p.offset >= 0:
                    ops.seek(tp, OffsetAndMetadata(p.offset, "", p.leader_epoch))
                elif p.offset not in (OFFSET_STORED, OFFSET_INVALID):
                    raise KafkaException(
                        KafkaError(KafkaError._INVALID_ARG, f"unsupported logical offset {p.offset} for {tp}")
                    )
            except native_errors.KafkaError as e:
                raise KafkaException(from_exception(e)) from e

    def assignment(self) -> list[TopicPartition]:
        self._check_open()
        return [_tp_out(tp) for tp in sorted(self._ops().assignment())]

    # ------------------------------------------------------------------------------------------ poll
    def poll(self, timeout: float | None = None) -> Message | None:
        """The next message or event (``Message.error()`` set), or ``None`` after ``timeout`` seconds
        (``None``/negative: wait until one arrives)."""
        try:
            return self._next()  # the current chunk's next message (armed only while no event is due)
        except StopIteration:
            return self._poll_slow(timeout)

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Message]:
        """Up to ``num_messages`` messages (and events), waiting up to ``timeout`` seconds for the first
        ones."""
        if (
            not isinstance(num_messages, int)
            or isinstance(num_messages, bool)
            or not 0 <= num_messages <= 1_000_000
        ):
            raise ValueError("num_messages must be between 0 and 1000000 (1M)")
        self._check_open()
        out: list[Message] = []
        if num_messages == 0:
            return out
        deadline = time.monotonic() + _timeout_s(timeout)
        while True:
            self._disarm()  # this loop moves chunk.index itself
            chunk = self._chunk
            if chunk is not None and not self._events:
                i = chunk.index
                recs = chunk.records
                j = min(len(recs), i + num_messages - len(out))
                if j > i:
                    out.extend(map(RecordMessage, recs[i:j]))
                    chunk.index = j
                    if len(out) >= num_messages:
                        self._arm()
                        return out
            msg = self._next_buffered()
            if msg is None:
                # Nothing buffered: wait (as librdkafka) until the batch is full or the timeout passed.
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._arm()
                    return out
                msg = self._poll_slow(remaining)
                if msg is None:
                    self._arm()
                    return out
            out.append(msg)
            if len(out) >= num_messages:
                self._arm()
                return out

    def _arm(self) -> None:
        """Point poll()'s fast path at the rest of the current chunk (or disarm it while an event is due)."""
        self._settle()
        chunk = self._chunk
        if chunk is None or self._events or chunk.index >= len(chunk.records):
            self._it = None
            self._next = _EXHAUSTED
            return
        self._it_chunk = chunk
        it = iter(chunk.records)
        if chunk.index:
            it.__setstate__(chunk.index)  # type: ignore[attr-defined]  # list_iterator: start there, no copy
        self._it = it
        self._next = map(RecordMessage, it).__next__

    def _disarm(self) -> None:
        """Settle ``chunk.index`` and switch poll()'s fast path off (the slow path re-arms it)."""
        self._settle()
        self._it = None
        self._next = _EXHAUSTED

    def _settle(self) -> None:
        """Bring ``chunk.index`` up to date with what the fast path handed out."""
        it = self._it
        if it is not None:
            chunk = self._it_chunk
            chunk.index = len(chunk.records) - operator.length_hint(it)
            self._it = None if chunk is not self._chunk else it

    def _buffered(self) -> int:
        self._settle()
        n = len(self._events)
        if self._chunk is not None:
            n += len(self._chunk.records) - self._chunk.index
        return n + sum(len(c.records) - c.index for c in self._chunks)

    def _poll_slow(self, timeout: float | None) -> Message | None:
        self._check_open()
        deadline = time.monotonic() + _timeout_s(timeout)
        while True:
            msg = self._next_buffered()
            if msg is not None:
                return msg
            self._serve_callbacks()
            if self._events:
                return self._events.popleft()
            remaining = deadline - time.monotonic()
            wait = max(0.0, min(remaining, _SLICE_S, max(0.0, self._next_stats - time.monotonic())))
            if not self._subscribed and not self._native.assignment():
                if remaining <= 0:
                    return None
                time.sleep(min(wait, 0.05) if wait > 0 else 0)
                continue
            self._native_poll(wait)
            if self._chunk is None and not self._chunks and not self._events:
                self._check_eof_idle()
            if self._chunk is None and not self._chunks and not self._events and remaining <= 0:
                self._serve_callbacks()
                return self._events.popleft() if self._events else None

    def _next_buffered(self) -> Message | None:
        """The next undelivered message, moving on to the next chunk (and its EOF event) as needed."""
        if self._events:
            return self._events.popleft()
        self._settle()
        while True:
            chunk = self._chunk
            if chunk is not None:
                if chunk.index < len(chunk.records):
                    self._arm()
                    return self._next()
                self._finish_chunk(chunk)
                self._chunk = None
                self._arm()
                if self._events:
                    return self._events.popleft()
            if not self._chunks:
                return None
            self._chunk = self._chunks.popleft()

    def _finish_chunk(self, chunk: _Chunk) -> None:
        """A chunk fully delivered: its partition's app offset (and stored offset) moves past it."""
        if chunk.index == 0:
            return
        tp = chunk.tp
        nxt = chunk.records[chunk.index - 1].offset + 1
        self._app_offsets[tp] = nxt
        if self._auto_store:
            self._stored[tp] = nxt
        if self._partition_eof and not any(c.tp == tp for c in self._chunks):
            self._maybe_eof(tp, nxt)

    def _sync_current_chunk(self) -> None:
        """Account the records delivered from the current chunk (before commits, position, stats)."""
        self._settle()
        chunk = self._chunk
        if chunk is not None and chunk.index > 0:
            nxt = chunk.records[chunk.index - 1].offset + 1
            self._app_offsets[chunk.tp] = nxt
            if self._auto_store:
                self._stored[chunk.tp] = nxt

    def _maybe_eof(self, tp: NativeTP, position: int) -> None:
        try:
            lag = self._native.current_lag(tp)
        except native_errors.KafkaError:
            return
        if lag == 0 and self._eof_at.get(tp) != position:
            self._eof_at[tp] = position
            self._events.append(
                Message(
                    tp.topic,
                    tp.partition,
                    position,
                    None,
                    None,
                    None,
                    KafkaError(
                        KafkaError._PARTITION_EOF,
                        f"Fetch from broker 0 reached end of partition at offset {position}",
                    ),
                )
            )

    def _check_eof_idle(self) -> None:
        if not self._partition_eof:
            return
        try:
            assigned = self._native.assignment()
        except native_errors.KafkaError:
            return
        for tp in sorted(assigned):
            try:
                lag = self._native.current_lag(tp)
            except native_errors.KafkaError:
                continue
            if lag != 0:
                continue
            pos = self._app_offsets.get(tp)
            if pos is None:
                try:
                    pos = self._native.position(tp, timeout=0)
                except native_errors.KafkaError:
                    continue
            self._maybe_eof(tp, pos)

    def _native_poll(self, wait: float) -> None:
        now = time.monotonic()
        last, self._last_native_poll = self._last_native_poll, now
        if self._subscribed and last is not None and now - last > self._max_poll_s:
            # As librdkafka: the first poll after max.poll.interval.ms was exceeded reports it; the member
            # has left the group, and the next poll rejoins (on_lost, then on_assign).
            self._events.append(
                Message(
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    KafkaError(
                        KafkaError._MAX_POLL_EXCEEDED,
                        f"Application maximum poll interval ({int(self._max_poll_s * 1000)}ms) exceeded by "
                        f"{int((now - last - self._max_poll_s) * 1000)}ms",
                    ),
                )
            )
            return
        try:
            records = self._native.poll(wait)
        except _CallbackError as e:
            raise e.error from None
        except native_errors.WakeupError:
            return
        except native_errors.IllegalStateError as e:
            if self._closed:
                return
            raise KafkaException(from_exception(e)) from e
        except native_errors.KafkaError as e:
            self._events.append(self._error_message(e))
            return
        if records:
            by_tp = records.by_partition()
            self._chunks.extend(_Chunk(tp, recs) for tp, recs in by_tp.items() if recs)
        lost = records.lost_partitions
        if lost:
            self._drop_chunks(set(lost), seek=False)

    def _error_message(self, e: BaseException) -> Message:
        err = from_exception(e)
        partitions = getattr(e, "partitions", None) or getattr(e, "partition", None)
        topic: str | None = None
        partition: int | None = None
        if isinstance(partitions, NativeTP):
            topic, partition = partitions.topic, partitions.partition
        elif isinstance(partitions, Mapping | set | frozenset | list | tuple) and partitions:
            first = next(iter(partitions))
            if isinstance(first, NativeTP):
                topic, partition = first.topic, first.partition
        if isinstance(e, native_errors.NoOffsetForPartitionError | native_errors.OffsetOutOfRangeError):
            err = KafkaError(KafkaError._AUTO_OFFSET_RESET, str(e))
        return Message(topic, partition, None, None, None, None, err)

    def _serve_callbacks(self) -> None:
        """error_cb, on_commit and stats_cb, on the caller's thread (from poll()/consume()/close())."""
        now = time.monotonic()
        if self._auto_commit and self._subscribed and now - self._last_commit >= self._auto_commit_interval_s:
            self._auto_commit_now()
        while self._pending_commit_cbs:
            err, parts = self._pending_commit_cbs.popleft()
            if self._on_commit is not None:
                self._on_commit(err, parts)
        if self._client_errors:
            errors, self._client_errors = self._client_errors, []
            for err in errors:
                if self._error_cb is not None:
                    self._error_cb(err)
        if now >= self._next_stats and self._stats_cb is not None:
            self._next_stats = now + self._stats_interval_s
            self._stats_cb(json.dumps(self._stats()))

    def _auto_commit_now(self) -> None:
        self._last_commit = time.monotonic()
        self._sync_current_chunk()
        offsets = {
            tp: off for tp, off in self._stored_offsets(None).items() if self._committed.get(tp) != off.offset
        }
        if not offsets:
            return

        def done(result: Mapping[NativeTP, OffsetAndMetadata], error: BaseException | None) -> None:
            self._note_committed(offsets, None if error is None else from_exception(error))

        try:
            self._native.commit_async(offsets, callback=done)
        except native_errors.KafkaError as e:
            self._note_committed(offsets, from_exception(e))

    def _note_committed(
        self, offsets: Mapping[NativeTP, OffsetAndMetadata], err: KafkaError | None, *, notify: bool = True
    ) -> None:
        """Remember what was committed; ``notify`` queues the result for ``on_commit`` (as confluent-kafka:
        auto-commits and asynchronous commits, not ``commit(asynchronous=False)``, which returns its
        result)."""
        parts = []
        for tp, om in sorted(offsets.items()):
            out = TopicPartition(tp.topic, tp.partition, om.offset, om.metadata or None)
            if err is None:
                self._committed[tp] = om.offset
            else:
                out.error = err
            parts.append(out)
        if notify and self._on_commit is not None:
            self._pending_commit_cbs.append((err, parts))

    # ------------------------------------------------------------------------------------------ buffer
    def _clear_buffer(self) -> None:
        self._chunk = None
        self._chunks.clear()
        self._events.clear()
        self._arm()

    def _drop_chunks(self, partitions: set[NativeTP], *, seek: bool) -> None:
        """Forget undelivered records of ``partitions``; with ``seek`` the native consumer is moved back
        to the first of them so they are fetched again (pause)."""
        if not partitions:
            return
        first: dict[NativeTP, int] = {}
        self._sync_current_chunk()
        chunks = ([self._chunk] if self._chunk is not None else []) + list(self._chunks)
        kept: list[_Chunk] = []
        for c in chunks:
            if c.tp in partitions:
                if c.index < len(c.records):
                    first.setdefault(c.tp, c.records[c.index].offset)
            else:
                kept.append(c)
        if self._chunk is not None and self._chunk.tp in partitions:
            self._chunk = None
        self._chunks = deque(c for c in kept if c is not self._chunk)
        self._arm()
        if seek:
            for tp, offset in first.items():
                self._native.seek(tp, offset)

    # ------------------------------------------------------------------------------------------ offsets
    def _stored_offsets(self, partitions: frozenset[NativeTP] | None) -> dict[NativeTP, OffsetAndMetadata]:
        self._sync_current_chunk()
        return {
            tp: OffsetAndMetadata(off)
            for tp, off in self._stored.items()
            if off >= 0 and (partitions is None or tp in partitions)
        }

    def store_offsets(
        self, message: Message | None = None, offsets: Sequence[TopicPartition] | None = None
    ) -> None:
        """Store the offset after ``message`` (or each ``TopicPartition.offset`` as given) for the next
        commit."""
        self._check_open()
        if message is not None and offsets is not None:
            raise ValueError("message and offsets are mutually exclusive")
        if message is None and offsets is None:
            raise ValueError("expected either message or offsets")
        assigned = self._ops().assignment()
        items: list[tuple[NativeTP, int]]
        if message is not None:
            if message.error() is not None:
                raise KafkaException(
                    KafkaError(KafkaError._INVALID_ARG, "Cannot store offsets of an error message")
                )
            items = [
                (
                    NativeTP(str(message.topic()), int(message.partition() or 0)),
                    int(message.offset() or 0) + 1,
                )
            ]
        else:
            items = [(NativeTP(p.topic, p.partition), p.offset) for p in _check_tps(offsets or [])]
        for tp, _ in items:
            if tp not in assigned:
                raise KafkaException(
                    KafkaError(
                        KafkaError._UNKNOWN_PARTITION,
                        f"Failed to store offset for {tp}: partition is not assigned",
                    )
                )
        for tp, off in items:
            self._stored[tp] = off

    def commit(
        self,
        message: Message | None = None,
        offsets: Sequence[TopicPartition] | None = None,
        asynchronous: bool = True,
        **kwargs: Any,
    ) -> list[TopicPartition] | None:
        """Commit ``message``'s offset + 1, ``offsets``, or (neither) the stored offsets; synchronous
        commits return the committed partitions and raise on failure."""
        self._check_open()
        if "async" in kwargs:
            asynchronous = bool(kwargs.pop("async"))
        if kwargs:
            raise TypeError(f"unexpected keyword argument(s): {', '.join(kwargs)}")
        if message is not None and offsets is not None:
            raise ValueError("message and offsets are mutually exclusive")
        if self._group_id is None:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_GROUP, "commit() needs group.id"))
        if message is not None:
            if message.error() is not None:
                raise KafkaException(
                    KafkaError(KafkaError._INVALID_ARG, "Cannot commit offsets of an error message")
                )
            commit = {
                NativeTP(str(message.topic()), int(message.partition() or 0)): OffsetAndMetadata(
                    int(message.offset() or 0) + 1, "", message.leader_epoch()
                )
            }
        elif offsets is not None:
            for p in _check_tps(offsets):
                if p.metadata is not None and "\x00" in p.metadata:
                    raise ValueError("embedded null character in TopicPartition.metadata")
            commit = {
                NativeTP(p.topic, p.partition): OffsetAndMetadata(p.offset, p.metadata or "", p.leader_epoch)
                for p in _check_tps(offsets)
            }
        else:
            commit = self._stored_offsets(None)
        # As librdkafka: logical offsets (OFFSET_INVALID, OFFSET_END, ...) in the list are skipped.
        commit = {tp: om for tp, om in commit.items() if om.offset >= 0}
        if not commit:
            if asynchronous:  # as librdkafka: the result (an error) goes to on_commit
                if self._on_commit is not None:
                    self._pending_commit_cbs.append((KafkaError(KafkaError._NO_OFFSET), []))
                return None
            raise KafkaException(KafkaError(KafkaError._NO_OFFSET, "Local: No offset stored"))
        if asynchronous:

            def done(result: Mapping[NativeTP, OffsetAndMetadata], error: BaseException | None) -> None:
                self._note_committed(commit, None if error is None else from_exception(error))

            try:
                self._ops().commit_async(commit, callback=done)
            except native_errors.KafkaError as e:
                raise KafkaException(from_exception(e)) from e
            return None
        try:
            self._ops().commit_sync(commit)
        except _CallbackError as e:
            raise e.error from None
        except native_errors.KafkaError as e:
            err = from_exception(e)
            self._note_committed(commit, err, notify=False)
            raise KafkaException(err) from e
        self._note_committed(commit, None, notify=False)
        return [
            TopicPartition(tp.topic, tp.partition, om.offset, om.metadata or None)
            for tp, om in commit.items()
        ]

    def committed(
        self, partitions: Sequence[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        """The committed offsets of ``partitions`` (``OFFSET_INVALID`` where nothing is committed)."""
        self._check_open()
        parts = _check_tps(partitions)
        try:
            result = self._ops().committed(
                [NativeTP(p.topic, p.partition) for p in parts], timeout=_api_timeout(timeout)
            )
        except native_errors.KafkaError as e:
            raise KafkaException(from_exception(e)) from e
        out = []
        for p in parts:
            om = result.get(NativeTP(p.topic, p.partition))
            tp = TopicPartition(p.topic, p.partition, OFFSET_INVALID if om is None else om.offset)
            if om is not None:
                tp.metadata = om.metadata or None
                tp.leader_epoch = om.leader_epoch
            out.append(tp)
        return out

    def position(self, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        """The offset after the last message ``poll()`` returned for each partition (``OFFSET_INVALID``:
        none yet)."""
        self._check_open()
        self._sync_current_chunk()
        return [
            TopicPartition(
                p.topic, p.partition, self._app_offsets.get(NativeTP(p.topic, p.partition), OFFSET_INVALID)
            )
            for p in _check_tps(partitions)
        ]

    def seek(self, partition: TopicPartition) -> None:
        """Move the fetch position of an assigned partition to ``partition.offset`` (messages fetched
        before are dropped)."""
        self._check_open()
        (p,) = _check_tps([partition])
        tp = NativeTP(p.topic, p.partition)
        self._drop_chunks({tp}, seek=False)
        self._events = deque(
            m for m in self._events if (m.topic(), m.partition()) != (tp.topic, tp.partition)
        )
        self._eof_at.pop(tp, None)
        try:
            self._apply_offsets([p], self._ops())
            if p.offset in (OFFSET_STORED, OFFSET_INVALID):
                raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "seek() needs an offset"))
        except native_errors.IllegalStateError as e:
            raise KafkaException(KafkaError(KafkaError._STATE, str(e))) from e
        if p.offset >= 0:
            self._app_offsets[tp] = p.offset

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int] | None:
        """``(low, high)`` offsets of ``partition``; ``cached``: from the last fetch, without a request
        (``OFFSET_INVALID`` for what is unknown; ``low`` always is)."""
        self._check_open()
        (p,) = _check_tps([partition])
        tp = NativeTP(p.topic, p.partition)
        if cached:
            try:
                lag = self._native.current_lag(tp)
                if lag is not None:
                    return (OFFSET_INVALID, self._native.position(tp, timeout=0) + lag)
            except native_errors.KafkaError:
                pass
            return (OFFSET_INVALID, OFFSET_INVALID)
        try:
            ops = self._ops()
            low = ops.beginning_offsets([tp], timeout=_api_timeout(timeout))[tp]
            high = ops.end_offsets([tp], timeout=_api_timeout(timeout))[tp]
        except native_errors.KafkaError as e:
            raise KafkaException(from_exception(e)) from e
        return (low, high)

    def offsets_for_times(
        self, partitions: Sequence[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        """For each partition (``offset`` holding a timestamp in ms), the first offset at or after it
        (``OFFSET_END`` (-1) when there is none)."""
        self._check_open()
        parts = _check_tps(partitions)
        query = {NativeTP(p.topic, p.partition): p.offset for p in parts}
        try:
            result = self._ops().offsets_for_times(query, timeout=_api_timeout(timeout))
        except native_errors.KafkaError as e:
            raise KafkaException(from_exception(e)) from e
        out = []
        for p in parts:
            found = result.get(NativeTP(p.topic, p.partition))
            tp = TopicPartition(p.topic, p.partition, OFFSET_END if found is None else found.offset)
            if found is not None:
                tp.leader_epoch = found.leader_epoch
            out.append(tp)
        return out

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        """Stop returning messages of ``partitions`` (those fetched but not returned are fetched again on
        ``resume()``)."""
        self._check_open()
        tps = {NativeTP(p.topic, p.partition) for p in _check_tps(partitions)}
        try:
            self._ops().pause(sorted(tps))
            self._drop_chunks(tps, seek=True)
        except native_errors.KafkaError as e:
            raise KafkaException(from_exception(e)) from e

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        self._check_open()
        tps = [NativeTP(p.topic, p.partition) for p in _check_tps(partitions)]
        try:
            self._ops().resume(tps)
        except native_errors.KafkaError as e:
            raise KafkaException(from_exception(e)) from e

    # ------------------------------------------------------------------------------------------ metadata
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """Cluster metadata: brokers, topics and their partitions (only ``topic`` when given)."""
        self._check_open()
        t = _api_timeout(timeout)
        try:
            if topic is not None:
                topics: dict[str, list[PartitionInfo]] = {topic: self._ops().partitions_for(topic, timeout=t)}
            else:
                topics = self._ops().list_topics(timeout=t)
            admin = self._admin_client()
            cluster = admin.describe_cluster(timeout=t)
        except native_errors.KafkaError as e:
            raise KafkaException(from_exception(e)) from e
        native = NativeClusterMetadata(
            brokers={b.node_id: b for b in cluster.brokers},
            controller_id=cluster.controller_id,
            cluster_id=cluster.cluster_id,
            partitions={name: tuple(parts) for name, parts in topics.items() if parts},
            topic_errors={name: 3 for name, parts in topics.items() if not parts},
        )
        return cluster_metadata_from(native, topic)

    def _admin_client(self) -> kafka_handoff.AdminClient:
        if self._admin is None:
            from kafka_handoff.config import ADMIN_CONFIG_DEF

            conf = {k: v for k, v in self._native_conf.items() if k in ADMIN_CONFIG_DEF.names}
            self._admin = kafka_handoff.AdminClient(conf)
        return self._admin

    def memberid(self) -> str | None:
        """This member's id in the group (``None`` before it joined)."""
        self._check_open()
        if self._group_id is None:
            return None
        try:
            member = self._native.group_metadata().member_id
        except native_errors.KafkaError:
            return None
        return member or None

    def consumer_group_metadata(self) -> Any:
        """The group metadata for ``Producer.send_offsets_to_transaction()``."""
        self._check_open()
        try:
            return self._native.group_metadata()
        except native_errors.KafkaError as e:
            raise KafkaException(from_exception(e)) from e

    def set_sasl_credentials(self, username: str, password: str) -> None:
        raise KafkaException(
            KafkaError(
                KafkaError._NOT_IMPLEMENTED, "set_sasl_credentials() is not supported by kafka-handoff"
            )
        )

    # ------------------------------------------------------------------------------------------ KIP-983
    def to_be_revoked_partitions(self) -> list[TopicPartition]:
        """Partitions whose revocation completes at the start of the next fetch unless delayed (KIP-983)."""
        self._check_open()
        return [_tp_out(tp) for tp in sorted(self._native.to_be_revoked_partitions())]

    def lost_partitions(self) -> list[TopicPartition]:
        """Partitions lost during the last fetch (KIP-983)."""
        self._check_open()
        return [_tp_out(tp) for tp in sorted(self._native.lost_partitions())]

    def delay_revoke(self, partitions: Sequence[TopicPartition]) -> bool:
        """Postpone the revocation of ``partitions`` by one more fetch (KIP-983); ``False`` if that is not
        possible."""
        self._check_open()
        return self._native.delay_revoke([NativeTP(p.topic, p.partition) for p in _check_tps(partitions)])

    @property
    def native(self) -> kafka_handoff.Consumer:
        """The underlying :class:`kafka_handoff.Consumer` (for what this API has no name for)."""
        return self._native

    # ------------------------------------------------------------------------------------------ close
    def close(self) -> None:
        """Commit the stored offsets (auto-commit), leave the group and release everything."""
        if self._closed:
            return
        try:
            if self._auto_commit and self._subscribed:
                offsets = {
                    tp: om
                    for tp, om in self._stored_offsets(None).items()
                    if self._committed.get(tp) != om.offset
                }
                if offsets:
                    try:
                        self._native.commit_sync(offsets)
                        self._note_committed(offsets, None)
                    except native_errors.KafkaError as e:
                        log.warning("commit of stored offsets on close failed: %s", e)
                        self._note_committed(offsets, from_exception(e))
            self._clear_buffer()
            self._subscribed = False
            try:
                self._native.close()
            except _CallbackError as e:
                raise e.error from None
            finally:
                if self._admin is not None:
                    self._admin.close()
                self._closed = True
                while self._pending_commit_cbs:
                    err, parts = self._pending_commit_cbs.popleft()
                    if self._on_commit is not None:
                        self._on_commit(err, parts)
        finally:
            self._closed = True
            self._remove_log_handlers()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run_native(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except _CallbackError as e:
            raise e.error from None
        except native_errors.KafkaError as e:
            raise KafkaException(from_exception(e)) from e

    def _stats(self) -> dict[str, Any]:
        self._sync_current_chunk()
        return _stats.consumer_stats(self)


def _check_tps(partitions: Iterable[TopicPartition] | None) -> list[TopicPartition]:
    if partitions is None or isinstance(partitions, str | bytes):
        raise TypeError("expected a list of TopicPartition")
    parts = list(partitions)
    for p in parts:
        if not isinstance(p, TopicPartition):
            raise TypeError(f"expected TopicPartition, got {type(p).__name__}")
    return parts


def _int_or(value: Any, default: int) -> int:
    """An integer setting, or ``default`` when unset or malformed (the native client then names the key)."""
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def _bool_value(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)


def _syslog_to_logging(level: int) -> int:
    """librdkafka's syslog levels (0 emergency .. 7 debug) as Python logging levels."""
    if level >= 7:
        return logging.DEBUG
    if level >= 5:
        return logging.INFO
    if level == 4:
        return logging.WARNING
    if level == 3:
        return logging.ERROR
    return logging.CRITICAL
