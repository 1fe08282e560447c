"""confluent-kafka's ``Producer`` and ``SerializingProducer`` over :class:`kafka_handoff.Producer`.

What confluent-kafka programs rely on, kept:

* ``produce()`` never blocks on a full queue: it raises ``BufferError`` when ``queue.buffering.max.messages``
  messages or ``queue.buffering.max.kbytes`` are queued -- counting, as librdkafka does, the messages whose
  delivery report was not served yet (call ``poll()``).
* Delivery reports ``on_delivery(err, msg)`` run on the **caller's thread**, inside ``poll()``/``flush()``
  (and the transaction calls), never on a client thread; ``poll()`` returns how many callbacks it served.
  An exception raised by a callback propagates out of ``poll()``/``flush()``.
* ``flush(timeout)`` returns the number of messages still queued (0: all delivered and reported); it does
  not raise on a timeout.  ``len(producer)`` is that number at any time.
* Keyed messages land where librdkafka puts them: the default partitioner is ``consistent_random`` (CRC32
  of the key); ``partitioner`` takes librdkafka's other names.
* ``error_cb(KafkaError)``, ``stats_cb(json_str)`` (every ``statistics.interval.ms``) and ``logger`` work as
  with librdkafka; errors reach the application as ``KafkaException`` carrying a :class:`KafkaError` with
  librdkafka's codes and its ``fatal()``/``retriable()``/``txn_requires_abort()`` flags.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka_handoff import errors as native_errors
from kafka_handoff.compat.confluent_kafka.config import (
    TranslatedConfig,
    compat_bool,
    compat_callable,
    compat_int,
    translate_config,
)
from kafka_handoff.compat.confluent_kafka.error import (
    KafkaError,
    KafkaException,
    KeySerializationError,
    ValueSerializationError,
    from_exception,
)
from kafka_handoff.compat.confluent_kafka.serialization import MessageField, SerializationContext
from kafka_handoff.compat.confluent_kafka.types import (
    OFFSET_INVALID,
    TIMESTAMP_CREATE_TIME,
    ClusterMetadata,
    Message,
    TopicPartition,
)
from kafka_handoff.producer import Producer as NativeProducer
from kafka_handoff.types import ConsumerGroupMetadata, OffsetAndMetadata
from kafka_handoff.types import TopicPartition as NativeTopicPartition

__all__ = ["Producer", "SerializingProducer"]

log = logging.getLogger(__name__)

DeliveryCallback = Callable[[KafkaError | None, Message], Any]

_DEFAULT_MAX_MESSAGES = 100_000
_DEFAULT_MAX_KBYTES = 1_048_576  # librdkafka's queue.buffering.max.kbytes default (1 GiB)
_NATIVE_MIN_BUFFER = 33_554_432
_SLICE = 0.2  # longest uninterrupted wait (seconds): Ctrl-C, stats_cb and error_cb get through


def _seconds(timeout: float | None) -> float | None:
    """confluent's timeouts: ``None`` or a negative number wait forever."""
    if timeout is None or timeout < 0:
        return None
    return float(timeout)


_BYTES_LIKE = (bytes, str, bytearray, memoryview)


class _Record:
    """One produced message until its delivery report is served; the native producer's callback."""

    __slots__ = (
        "headers",
        "key",
        "on_delivery",
        "owner",
        "partition",
        "size",
        "started",
        "sync_error",
        "thread",
        "topic",
        "value",
    )

    def __init__(
        self,
        owner: Producer,
        topic: str,
        key: Any,
        value: Any,
        headers: Any,
        partition: int,
        on_delivery: DeliveryCallback | None,
        size: int,
    ) -> None:
        self.owner = owner
        self.topic = topic
        self.key = key
        self.value = value
        self.headers = headers
        self.partition = partition
        self.on_delivery = on_delivery
        self.size = size
        self.started = time.monotonic()
        self.thread: int | None = threading.get_ident()  # set while produce() runs: failures there raise
        self.sync_error: BaseException | None = None

    def __call__(self, metadata: Any, error: BaseException | None) -> None:
        if self.thread is not None and self.thread == threading.get_ident() and error is not None:
            self.sync_error = error  # inside produce(): it raises or reports this itself
            return
        self.owner._on_native_delivery(self, metadata, error)


class Producer:
    """confluent-kafka's ``Producer`` (see the module docstring for the semantics kept).

    ``Producer({"bootstrap.servers": "localhost:9092", "linger.ms": 10})``: librdkafka's configuration names
    are translated (docs/migrating.md has the table); kafka-handoff's own (Java) names work too.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        if config is None and not kwargs:
            raise TypeError("expected configuration dict")
        tc = translate_config(config, "producer", **kwargs)
        self._setup_compat(tc)
        native = self._native_config(tc)
        try:
            self._native = NativeProducer(native)
        except native_errors.ConfigError as exc:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, str(exc))) from exc
        self._native_props = native
        self._delivery_timeout = int(self._native.config.delivery_timeout_ms) / 1000.0
        # Topics whose metadata the native producer has: produce() hands their messages over at once.  The
        # messages of other topics wait here, in order, while a thread waits for the topic's metadata, so that
        # produce() never blocks on it (librdkafka queues them the same way).
        self._ready: set[str] = set()
        self._pending: dict[str, collections.deque[tuple[_Record, dict[str, Any]]]] = {}
        self._pending_lock = threading.Lock()
        # A transactional producer hands every message over in produce() (waiting for a new topic's
        # metadata there), so that commit_transaction() commits exactly what was produced before it.
        self._queue_new_topics = self._native.config.transactional_id is None
        self._admin: list[Any] = []  # list_topics()'s native admin client, made on first use
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_quietly, self._native, self._admin, self._log_handler)

    # ------------------------------------------------------------------------------------------- setup
    def _setup_compat(self, tc: TranslatedConfig) -> None:
        self._on_delivery: DeliveryCallback | None = compat_callable(tc, "on_delivery")
        self._error_cb = compat_callable(tc, "error_cb")
        self._stats_cb = compat_callable(tc, "stats_cb")
        self._stats_interval = compat_int(tc, "statistics.interval.ms", 0) / 1000.0
        self._next_stats = time.monotonic() + self._stats_interval
        self._errors_only = compat_bool(tc, "delivery.report.only.error", False)
        self._max_messages = compat_int(tc, "queue.buffering.max.messages", _DEFAULT_MAX_MESSAGES)
        if not 0 < self._max_messages <= 2_147_483_647:
            raise KafkaException(
                KafkaError(
                    KafkaError._INVALID_ARG,
                    f'Configuration property "queue.buffering.max.messages" value {self._max_messages} is '
                    "outside allowed range 1..2147483647",
                )
            )
        self._lock = threading.Lock()
        self._count = 0  # messages produced whose delivery report was not served (len())
        self._bytes = 0
        self._reports: queue.SimpleQueue[tuple[_Record, Any, BaseException | None]] = queue.SimpleQueue()
        self._events: queue.SimpleQueue[KafkaError] = queue.SimpleQueue()  # for error_cb
        self._delivered: dict[tuple[str, int], list[int]] = {}  # (topic, partition) -> [msgs, bytes]
        self._tx_msgs = 0
        self._tx_bytes = 0
        self._started = time.time()
        self._log_handler: logging.Handler | None = None
        logger = tc.compat.get("logger")
        if logger is not None:
            if not isinstance(logger, logging.Logger):
                raise KafkaException(
                    KafkaError(KafkaError._INVALID_ARG, "logger must be a logging.Logger instance")
                )
            self._log_handler = _ForwardingHandler(logger)
            logging.getLogger("kafka_handoff").addHandler(self._log_handler)

    def _native_config(self, tc: TranslatedConfig) -> dict[str, Any]:
        native = dict(tc.native)
        native["partitioner"] = tc.compat.get("partitioner", "consistent_random")  # librdkafka's default
        level = tc.compat.get("compression.level")
        codec = str(native.get("compression.type", "none"))
        if level is not None and int(level) != -1 and codec in ("gzip", "lz4", "zstd"):
            native[f"compression.{codec}.level"] = int(level)
        if "delivery.timeout.ms" in native:  # message.timeout.ms
            delivery = int(native["delivery.timeout.ms"])
            if delivery == 0:  # librdkafka's 0: no limit
                delivery = native["delivery.timeout.ms"] = 2_147_483_647
            # librdkafka lets message.timeout.ms be shorter than a request's timeout; Java requires
            # delivery.timeout.ms >= linger.ms + request.timeout.ms: shorten the request timeout to fit.
            linger = int(native.get("linger.ms", 5))
            request = int(native.get("request.timeout.ms", 30_000))
            if delivery < linger + request:
                native["request.timeout.ms"] = max(1, delivery - linger)
                native["linger.ms"] = min(linger, max(0, delivery - 1))
        limit = int(native.get("buffer.memory", _DEFAULT_MAX_KBYTES * 1024))
        self._max_bytes = limit
        # The native producer's own memory bound stays above this layer's (it would block, not raise).
        native["buffer.memory"] = max(limit + limit // 4, _NATIVE_MIN_BUFFER)
        return native

    # ----------------------------------------------------------------------------------------- produce
    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        callback: DeliveryCallback | None = None,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
    ) -> None:
        """Queue one message (confluent's argument order: ``callback`` and its alias ``on_delivery`` come
        before ``timestamp``); its delivery report ``on_delivery(err, msg)`` (or ``callback``, or the
        configured ``on_delivery``) is served by a later :meth:`poll`/:meth:`flush`.  Raises ``BufferError``
        when the queue is full, ``KafkaException`` for a message that cannot be queued."""
        if self._closed:
            raise RuntimeError("Producer has been closed")
        if type(topic) is not str:
            raise TypeError("topic must be a str")
        size = 0
        if value is not None:
            if type(value) is not bytes and not isinstance(value, _BYTES_LIKE):
                raise TypeError(f"value must be bytes or str (or None), not {type(value).__name__}")
            size = len(value)
        if key is not None:
            if type(key) is not bytes and not isinstance(key, _BYTES_LIKE):
                raise TypeError(f"key must be bytes or str (or None), not {type(key).__name__}")
            size += len(key)
        dr = on_delivery if on_delivery is not None else callback
        if dr is None:
            dr = self._on_delivery
        with self._lock:
            if self._count >= self._max_messages or self._bytes + size > self._max_bytes:
                raise BufferError(KafkaError(KafkaError._QUEUE_FULL).str())
            self._count += 1
            self._bytes += size
        rec = _Record(self, topic, key, value, headers, partition, dr, size)
        args = {
            "key": key,
            "partition": None if partition is None or partition < 0 else partition,
            "headers": headers,
            "timestamp": timestamp if timestamp and timestamp > 0 else None,
        }
        if topic not in self._ready and self._queue_new_topics and not self._hand_over_now(topic, rec, args):
            rec.thread = None
            return  # queued until the topic's metadata arrives
        try:
            self._native.send_nowait(topic, value, callback=rec, **args)
        except BaseException as exc:
            self._release(rec)
            raise self._produce_error(exc) from exc
        finally:
            rec.thread = None
        error = rec.sync_error
        if error is not None:
            if isinstance(error, native_errors.MessageTooLargeError):
                self._release(rec)
                raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, str(error))) from error
            # Anything else (no metadata, broker down, authentication) is the delivery report's error.
            self._on_native_delivery(rec, None, error)

    def _hand_over_now(self, topic: str, rec: _Record, args: dict[str, Any]) -> bool:
        """For a topic not known ready: True when the native producer has its metadata (and nothing of it
        waits), else queue the message behind the topic's metadata wait (started if needed)."""
        with self._pending_lock:
            waiting = self._pending.get(topic)
            if waiting is None:
                if topic in self._native._partition_counts:
                    self._ready.add(topic)
                    return True
                waiting = self._pending[topic] = collections.deque()
                threading.Thread(
                    target=self._await_topic, args=(topic,), name=f"compat-metadata-{topic}", daemon=True
                ).start()
            waiting.append((rec, args))
            return False

    def _await_topic(self, topic: str) -> None:
        """Wait for ``topic``'s metadata, then hand its queued messages to the native producer in order
        (or fail them in their delivery reports)."""
        error: BaseException | None = None
        try:
            self._native.partitions_for(topic, self._delivery_timeout)
        except BaseException as exc:
            error = exc
        while True:
            with self._pending_lock:
                waiting = self._pending[topic]
                if not waiting:
                    del self._pending[topic]
                    if error is None:
                        self._ready.add(topic)
                    return
                rec, args = waiting.popleft()
            if error is not None:
                self._on_native_delivery(rec, None, error)
                continue
            rec.thread = threading.get_ident()
            try:
                self._native.send_nowait(topic, rec.value, callback=rec, **args)
            except BaseException as exc:
                rec.sync_error = exc
            rec.thread = None
            if rec.sync_error is not None:
                self._on_native_delivery(rec, None, rec.sync_error)

    def produce_batch(
        self,
        topic: str,
        messages: list[dict[str, Any]],
        partition: int = -1,
        callback: DeliveryCallback | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> int:
        """Produce each message dict (``value``, ``key``, ``partition``, ``timestamp``, ``callback``);
        returns how many were queued.  A message that could not be queued gets an ``_error`` entry
        (a :class:`KafkaError`); ``BufferError`` when the queue is full stops the batch there."""
        if not isinstance(messages, list):
            raise TypeError("messages must be a list of dicts")
        default_cb = on_delivery if on_delivery is not None else callback
        queued = 0
        for message in messages:
            if not isinstance(message, dict):
                raise TypeError("each message must be a dict")
            try:
                self.produce(
                    topic,
                    message.get("value"),
                    message.get("key"),
                    message.get("partition", partition),
                    message.get("callback", default_cb),
                    timestamp=message.get("timestamp", 0),
                )
            except KafkaException as exc:
                message["_error"] = exc.args[0]
                continue
            queued += 1
        return queued

    def _produce_error(self, exc: BaseException) -> BaseException:
        if isinstance(exc, native_errors.SerializationError):
            return TypeError(str(exc))
        if isinstance(exc, native_errors.IllegalStateError):
            if "closed" in str(exc):
                return RuntimeError("Producer has been closed")
            return KafkaException(KafkaError(KafkaError._STATE, str(exc)))
        if type(exc) is native_errors.KafkaError and "invalid partition" in str(exc):
            return KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION, str(exc)))
        if isinstance(exc, native_errors.KafkaError):
            return KafkaException(self._txn_error(exc))
        return exc

    def _release(self, rec: _Record) -> None:
        with self._lock:
            self._count -= 1
            self._bytes -= rec.size

    def _on_native_delivery(self, rec: _Record, metadata: Any, error: BaseException | None) -> None:
        """The native producer's callback (its completion thread): queue the report for the application's
        thread; a message nobody wants a report of leaves the queue count at once."""
        if error is None and self._stats_cb is not None:
            key = (metadata.topic, metadata.partition)
            counts = self._delivered.get(key)
            if counts is None:
                counts = self._delivered[key] = [0, 0]
            counts[0] += 1
            counts[1] += rec.size
        if rec.on_delivery is None or (error is None and self._errors_only):
            self._release(rec)
            return
        self._reports.put((rec, metadata, error))

    # ----------------------------------------------------------------------------------- poll / flush
    def poll(self, timeout: float | None = -1) -> int:
        """Serve delivery reports (and error_cb/stats_cb events); waits up to ``timeout`` seconds for the
        first one (``None``/negative: until one arrives).  Returns the number of callbacks served."""
        if self._closed:
            raise RuntimeError("Producer has been closed")
        seconds = _seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            served = self._serve()
            if served:
                return served
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return 0
            wait = _SLICE if remaining is None else min(_SLICE, remaining)
            try:
                item = self._reports.get(timeout=wait)
            except queue.Empty:
                continue
            served = self._serve_one(*item)
            return served + self._serve()

    def _serve(self) -> int:
        served = self._serve_events()
        get = self._reports.get_nowait
        serve_one = self._serve_one
        while True:
            try:
                item = get()
            except queue.Empty:
                return served
            served += serve_one(*item)

    def _serve_one(self, rec: _Record, metadata: Any, error: BaseException | None) -> int:
        with self._lock:
            self._count -= 1
            self._bytes -= rec.size
        if error is not None and self._error_cb is not None and _is_client_error(error):
            self._events.put(from_exception(error))
        callback = rec.on_delivery
        if callback is None:
            return 0
        if error is None:
            headers = rec.headers
            msg = Message(
                rec.topic,
                metadata.partition,
                metadata.offset,
                rec.key,
                rec.value,
                None if headers is None else _headers_list(headers),
                None,
                (TIMESTAMP_CREATE_TIME, metadata.timestamp),
                time.monotonic() - rec.started,
            )
            err = None
        else:
            err = _delivery_error(error)
            msg = Message(
                rec.topic,
                rec.partition,
                OFFSET_INVALID,
                rec.key,
                rec.value,
                _headers_list(rec.headers),
                err,
                (0, -1),
                time.monotonic() - rec.started,
            )
        callback(err, msg)
        return 1

    def _serve_events(self) -> int:
        served = 0
        if self._error_cb is not None:
            while True:
                try:
                    event = self._events.get_nowait()
                except queue.Empty:
                    break
                self._error_cb(event)
                served += 1
        if self._stats_cb is not None and self._stats_interval > 0:
            now = time.monotonic()
            if now >= self._next_stats:
                self._next_stats = now + self._stats_interval
                self._stats_cb(self._stats_json())
                served += 1
        return served

    def flush(self, timeout: float | None = -1) -> int:
        """Send everything queued and serve every delivery report, waiting up to ``timeout`` seconds
        (``None``/negative: no limit).  Returns the number of messages still queued (0: all done)."""
        if self._closed:
            raise RuntimeError("Producer has been closed")
        seconds = _seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            self._serve()
            if self._count <= 0:
                return 0
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return self._count
            wait = _SLICE if remaining is None else min(_SLICE, remaining)
            try:
                self._native.flush(wait)
            except native_errors.KafkaTimeoutError:
                continue
            except native_errors.KafkaError as exc:  # a background error: error_cb, as librdkafka
                self._events.put(from_exception(exc))
            if self._count > 0 and self._reports.empty():
                # Left: messages waiting for their topic's metadata (or reports on their way).
                try:
                    item = self._reports.get(timeout=wait)
                except queue.Empty:
                    continue
                self._serve_one(*item)

    def __len__(self) -> int:
        """Messages produced whose delivery report has not been served yet."""
        return self._count

    def __bool__(self) -> bool:
        return True  # an empty producer is still a producer (len() would make it falsy)

    # ------------------------------------------------------------------------------------------ purge
    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """Fail the queued messages not sent yet (``in_queue``): their delivery reports carry
        ``_PURGE_QUEUE`` and are served by the next :meth:`poll`/:meth:`flush`.  Messages already sent are
        not purged (``in_flight`` has no effect): their reports tell their real outcome."""
        if self._closed:
            raise RuntimeError("Producer has been closed")
        if not in_queue:
            return
        purged = native_errors.RecordPurgedError("the message was purged before it was sent")
        with self._pending_lock:  # the messages still waiting for their topic's metadata
            waiting = [item for queued in self._pending.values() for item in queued]
            for queued in self._pending.values():
                queued.clear()
        for rec, _args in waiting:
            self._on_native_delivery(rec, None, purged)
        try:
            self._native.purge()
        except native_errors.KafkaError as exc:
            raise KafkaException(from_exception(exc)) from exc

    # ------------------------------------------------------------------------------------ transactions
    def _txn_error(self, exc: BaseException) -> KafkaError:
        base = from_exception(exc)
        state = getattr(getattr(getattr(self._native, "_txn", None), "state", None), "value", None)
        fatal = state == "FATAL_ERROR" or isinstance(exc, native_errors.ProducerFencedError)
        abortable = state == "ABORTABLE_ERROR" and not fatal
        retriable = isinstance(exc, native_errors.KafkaTimeoutError) or (base.retriable() and not fatal)
        code = base.code()
        if isinstance(exc, native_errors.ProducerFencedError | native_errors.FencedError):
            code = KafkaError._FENCED
        return KafkaError(
            code, base.str(), fatal=fatal, retriable=retriable and not abortable, txn_requires_abort=abortable
        )

    def _txn(self, call: Callable[[], None], serve: bool = False) -> None:
        """A transaction call; ``serve``: it flushes, so (as librdkafka's) it serves delivery reports."""
        if self._closed:
            raise RuntimeError("Producer has been closed")
        try:
            call()
        except native_errors.KafkaError as exc:
            raise KafkaException(self._txn_error(exc)) from exc
        finally:
            if serve:
                self._serve()

    def init_transactions(self, timeout: float | None = -1) -> None:
        """Register the ``transactional.id`` (fences older producers with the same id)."""
        self._txn(lambda: self._native.init_transactions(_seconds(timeout)))

    def begin_transaction(self) -> None:
        self._txn(self._native.begin_transaction)

    def send_offsets_to_transaction(
        self, positions: Iterable[TopicPartition], group_metadata: Any, timeout: float | None = -1
    ) -> None:
        """Commit the consumer's ``positions`` (next offsets to consume) with the transaction;
        ``group_metadata`` is ``consumer.consumer_group_metadata()``."""
        offsets = {
            NativeTopicPartition(tp.topic, tp.partition): OffsetAndMetadata(tp.offset, tp.metadata or "")
            for tp in positions
        }
        metadata = _native_group_metadata(group_metadata)
        self._txn(lambda: self._native.send_offsets_to_transaction(offsets, metadata, _seconds(timeout)))

    def commit_transaction(self, timeout: float | None = -1) -> None:
        """Flush, then commit the transaction (delivery reports are served on the way)."""
        self._txn(lambda: self._native.commit_transaction(_seconds(timeout)), serve=True)

    def abort_transaction(self, timeout: float | None = -1) -> None:
        """Abort the transaction: its undelivered messages fail, what was written stays invisible."""
        self._txn(lambda: self._native.abort_transaction(_seconds(timeout)), serve=True)

    # -------------------------------------------------------------------------------------- metadata
    def list_topics(self, topic: str | None = None, timeout: float | None = -1) -> ClusterMetadata:
        """The cluster's metadata (``topic``: only that topic)."""
        from kafka_handoff.compat.confluent_kafka.admin import cluster_metadata, native_admin

        seconds = _seconds(timeout)
        if topic is not None:  # as librdkafka: asking for a topic may auto-create it
            try:
                self._native.partitions_for(topic, 5.0 if seconds is None else seconds)
            except native_errors.KafkaError:
                pass  # reported as the topic's error below
        if not self._admin:
            self._admin.append(native_admin(self._native_props))
        return cluster_metadata(self._admin[0], topic, seconds)

    def set_sasl_credentials(self, username: str, password: str) -> None:
        raise NotImplementedError("set_sasl_credentials() is not supported: create a new client")

    # ----------------------------------------------------------------------------------------- close
    def close(self, timeout: float | None = -1) -> bool:
        """Send what is queued (up to ``timeout`` seconds), serve the remaining delivery reports, stop."""
        if self._closed:
            return True
        self._closed = True
        try:
            self._native.close(_seconds(timeout))
        finally:
            self._serve()
            self._finalizer()
        return True

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._closed:
            self.flush()
            self.close()

    def __repr__(self) -> str:
        return f"<confluent_kafka compat Producer {self._native.client_id!r}>"

    # ------------------------------------------------------------------------------------------ stats
    def _stats_json(self) -> str:
        """librdkafka's statistics (STATISTICS.md) as far as kafka-handoff knows them."""
        now = time.time()
        topics: dict[str, Any] = {}
        delivered = list(self._delivered.items())  # one snapshot: the completion thread adds entries
        for (topic, partition), (msgs, size) in delivered:
            entry = topics.setdefault(topic, {"topic": topic, "age": 0, "partitions": {}})
            entry["partitions"][str(partition)] = {
                "partition": partition,
                "leader": -1,
                "txmsgs": msgs,
                "txbytes": size,
                "msgq_cnt": 0,
                "xmit_msgq_cnt": 0,
            }
        sent_msgs = sum(counts[0] for _, counts in delivered)
        sent_bytes = sum(counts[1] for _, counts in delivered)
        stats = {
            "name": self._native.client_id,
            "client_id": self._native.client_id,
            "type": "producer",
            "ts": int(time.monotonic() * 1_000_000),
            "time": int(now),
            "age": int((now - self._started) * 1_000_000),
            "replyq": self._reports.qsize(),
            "msg_cnt": self._count,
            "msg_size": self._bytes,
            "msg_max": self._max_messages,
            "msg_size_max": self._max_bytes,
            "tx": 0,
            "tx_bytes": 0,
            "rx": 0,
            "rx_bytes": 0,
            "txmsgs": sent_msgs,
            "txmsg_bytes": sent_bytes,
            "rxmsgs": 0,
            "rxmsg_bytes": 0,
            "brokers": {},
            "topics": topics,
            "metrics": {k: v for k, v in self._native.metrics().items() if math.isfinite(v)},
        }
        return json.dumps(stats)


def _close_quietly(native: NativeProducer, admins: list[Any], handler: logging.Handler | None) -> None:
    if handler is not None:
        logging.getLogger("kafka_handoff").removeHandler(handler)
    try:
        native.close(0)
        for admin in admins:
            admin.close(0)
    except Exception:  # a finalizer must not raise
        log.debug("closing an unreferenced producer failed", exc_info=True)


class _ForwardingHandler(logging.Handler):
    """Hands kafka-handoff's log records to the application's ``logger``."""

    def __init__(self, target: logging.Logger) -> None:
        super().__init__()
        self._target = target

    def emit(self, record: logging.LogRecord) -> None:
        if self._target.isEnabledFor(record.levelno):
            self._target.handle(record)


def _headers_list(headers: Any) -> list[tuple[str, bytes | None]] | None:
    if headers is None:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: list[tuple[str, bytes | None]] = []
    for k, v in items:
        out.append((k, v.encode() if isinstance(v, str) else (None if v is None else bytes(v))))
    return out


def _is_client_error(error: BaseException) -> bool:
    return isinstance(error, native_errors.AuthenticationError | native_errors.ConnectionError_)


def _delivery_error(error: BaseException) -> KafkaError:
    if isinstance(error, native_errors.KafkaTimeoutError):
        return KafkaError(KafkaError._MSG_TIMED_OUT, str(error))
    if isinstance(error, native_errors.TransactionAbortedError | native_errors.RecordPurgedError):
        return KafkaError(KafkaError._PURGE_QUEUE, str(error))
    if isinstance(error, native_errors.IllegalStateError) and "closed" in str(error):
        return KafkaError(KafkaError._DESTROY, str(error))
    if type(error) is native_errors.KafkaError and "invalid partition" in str(error):
        return KafkaError(KafkaError._UNKNOWN_PARTITION, str(error))
    return from_exception(error)


def _native_group_metadata(group_metadata: Any) -> ConsumerGroupMetadata:
    if isinstance(group_metadata, ConsumerGroupMetadata):
        return group_metadata
    for attr in ("_native", "native", "_metadata"):
        inner = getattr(group_metadata, attr, None)
        if isinstance(inner, ConsumerGroupMetadata):
            return inner
    raise KafkaException(
        KafkaError(
            KafkaError._INVALID_ARG,
            "group_metadata must be the value of consumer.consumer_group_metadata()",
        )
    )


class SerializingProducer(Producer):
    """confluent-kafka's ``SerializingProducer``: ``key.serializer``/``value.serializer`` are called as
    ``serializer(obj, SerializationContext(topic, field, headers))``."""

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        conf = dict(config or {})
        conf.update(kwargs)
        self._key_serializer: Callable[[Any, SerializationContext], Any] | None = conf.pop(
            "key.serializer", None
        )
        self._value_serializer: Callable[[Any, SerializationContext], Any] | None = conf.pop(
            "value.serializer", None
        )
        super().__init__(conf)

    def produce(  # type: ignore[override]
        self,
        topic: str,
        key: Any = None,
        value: Any = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
    ) -> None:
        """Serialize ``key`` and ``value`` (raising ``KeySerializationError``/``ValueSerializationError``)
        and produce the message."""
        hdrs = _headers_list(headers)
        if self._key_serializer is not None:
            try:
                key = self._key_serializer(key, SerializationContext(topic, MessageField.KEY, hdrs))
            except Exception as exc:
                raise KeySerializationError(exc) from exc
        if self._value_serializer is not None:
            try:
                value = self._value_serializer(value, SerializationContext(topic, MessageField.VALUE, hdrs))
            except Exception as exc:
                raise ValueSerializationError(exc) from exc
        super().produce(
            topic, value, key, partition, on_delivery=on_delivery, timestamp=timestamp, headers=hdrs
        )
