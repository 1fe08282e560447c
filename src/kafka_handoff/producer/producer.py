"""The ``Producer``: the application-thread facade over the accumulator, the sender and a network thread.

Design (the same threading model as the consumer, seed 002):

* ``send()`` runs on the caller's thread: serialize, pick the partition, append the record to its
  partition's open batch in the :class:`~kafka_handoff.producer.accumulator.RecordAccumulator`, return a
  :class:`concurrent.futures.Future`.  It never touches a socket.  ``send_nowait()`` does the same without
  a future; ``send_many()`` appends many records per call, runs that fit a batch by one C call.  Records
  sent without a future or callback that fail are logged and raised as one ``DeliveryFailedError`` from the
  next ``flush()``/``send_nowait()``/``send_many()``.  With compression, the thread whose append fills a
  batch also compresses it (not the network thread).
* The producer's own :class:`~kafka_handoff.network.thread.NetworkThread` polls two request managers, the
  shared :class:`~kafka_handoff.protocol.metadata.MetadataManager` and the
  :class:`~kafka_handoff.producer.sender.Sender`, which encodes and sends batches and handles answers.
* **Callbacks and futures are completed on a dedicated completion thread** (one per producer), never on the
  network thread: a slow callback delays other callbacks (they run in order, per partition in offset order,
  as in Java) but never the network I/O.  The memory of a batch is returned to ``buffer.memory`` only after
  its callbacks ran, so slow callbacks push back on ``send()`` instead of letting memory grow.  A record
  that fails inside ``send()`` itself (record too large, no metadata or no buffer memory within
  ``max.block.ms``) gets its future failed and its callback called on the caller's thread before ``send()``
  returns (Java delivers those errors the same way: through the future and the callback).

``flush(timeout)`` makes everything sendable now and waits until every record sent before it has its
outcome (callbacks included).  ``close(timeout)`` sends what it can within the timeout, then fails the
futures of the records that are still queued or unanswered with a clear error -- also when the brokers are
down -- and returns within about the timeout.
"""

from __future__ import annotations

import logging
import operator
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_futures
from time import monotonic_ns, time_ns
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.client_setup import client_properties, metadata_and_client
from kafka_handoff.config import ProducerConfig, parse_producer_config
from kafka_handoff.errors import (
    AuthenticationError,
    DeliveryFailedError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    MessageTooLargeError,
    Needs,
    RecordPurgedError,
    SerializationError,
    error_for_code,
)
from kafka_handoff.metrics import MetricConfig, Metrics
from kafka_handoff.network.events import ApplicationEvent, TerminateTelemetryEvent
from kafka_handoff.network.thread import BackgroundError, NetworkThread
from kafka_handoff.producer.accumulator import RecordAccumulator
from kafka_handoff.producer.accumulator import _TopicInfo as TopicInfo
from kafka_handoff.producer.batch import (
    RECORD_OVERHEAD_ESTIMATE,
    Callback,
    Entry,
    ProducerBatch,
    estimate_headers_size,
)
from kafka_handoff.producer.events import (
    AbortTransactionEvent,
    BeginTransactionEvent,
    CommitTransactionEvent,
    InitTransactionsEvent,
    ProducerEventProcessor,
    PurgeEvent,
    SendOffsetsToTransactionEvent,
    TopicMetadataEvent,
)
from kafka_handoff.producer.future import (
    C_FUTURES,
    complete_all,
    complete_exception,
    complete_lazily,
    make_entry,
    make_entry_no_future,
    new_future,
    record_metadata,
)
from kafka_handoff.producer.idempotence import IdempotenceManager
from kafka_handoff.producer.metrics import ProducerMetrics
from kafka_handoff.producer.partitioner import (
    BuiltInPartitioner,
    KeyPartitioner,
    key_partitioner,
    murmur2,
    partitioner_code,
)
from kafka_handoff.producer.sender import Sender
from kafka_handoff.producer.transactions import TransactionManager, TxnState
from kafka_handoff.protocol.compression import CompressionType, compression_type_from_name
from kafka_handoff.protocol.records import RECORD_BATCH_OVERHEAD
from kafka_handoff.protocol.requests import MonotonicClock
from kafka_handoff.protocol.telemetry import TelemetryManager
from kafka_handoff.protocol.telemetry import client_instance_id as telemetry_client_instance_id
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.serialization import MessageField, SerializationContext, takes_context
from kafka_handoff.types import (
    ClusterMetadata,
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    PartitionInfo,
    RecordMetadata,
    TopicPartition,
)

__all__ = ["Producer"]

log = logging.getLogger(__name__)

_FATAL_TOPIC_ERRORS = frozenset({ErrorCode.invalid_topic_exception, ErrorCode.topic_authorization_failed})
_Completion = tuple[ProducerBatch, int, int, BaseException | None]
_future_of = operator.itemgetter(4)
_callback_of = operator.itemgetter(5)
Header = tuple[str, bytes | None]


def _to_bytes(value: Any, what: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise SerializationError(
        f"the {what} must be bytes (or str, bytearray, memoryview) when no {what}.serializer is configured; "
        f"got {type(value).__name__}"
    )


def _convert(key: Any, value: Any) -> tuple[bytes | None, bytes | None, int]:
    """A ``send_many`` record as (key bytes, value bytes, size estimate)."""
    size = RECORD_OVERHEAD_ESTIMATE
    if key is not None:
        key = _to_bytes(key, "key")
        size += len(key)
    if value is not None:
        value = _to_bytes(value, "value")
        size += len(value)
    return key, value, size


def _headers(headers: Iterable[tuple[str, Any]] | Mapping[str, Any]) -> tuple[Header, ...]:
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: list[Header] = []
    for item in items:
        hkey, hvalue = item
        if not isinstance(hkey, str):
            raise SerializationError(f"header keys must be str, got {type(hkey).__name__}")
        out.append((hkey, None if hvalue is None else _to_bytes(hvalue, "header value")))
    return tuple(out)


class Producer:
    """A Kafka producer.  Thread-safe: several threads may call :meth:`send` concurrently.

    Three ways to send: :meth:`send` (a future per record, as Java's ``send``), :meth:`send_nowait` (no
    future: cheaper) and :meth:`send_many` (many values per call, no futures: the fastest).  All three keep
    idempotence, ordering per partition, retries and callbacks.

    ``Producer({"bootstrap.servers": "localhost:9092", "compression.type": "lz4"})``; keyword arguments with
    underscores are accepted too (``linger_ms=10``).  Idempotence is on by default (``acks=all``), as in
    the Java client.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        self._config: ProducerConfig = parse_producer_config(client_properties(config, kwargs))
        cfg = self._config
        self.client_id: str = cfg.client_id
        self._clock = MonotonicClock()
        self._closed = False
        self._close_lock = threading.Lock()
        self._background: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._fatal: BaseException | None = None
        # Delivery failures of records sent without a future or callback, not yet raised to the application
        # (completion thread writes, application thread takes; under _unreported_lock).
        self._unreported_lock = threading.Lock()
        self._unreported: BaseException | None = None
        self._unreported_count = 0

        self._key_serializer: Callable[..., Any] | None = cfg.key_serializer
        self._value_serializer: Callable[..., Any] | None = cfg.value_serializer
        # fn(value) or fn(value, ctx), decided once here (not per record).
        self._kser_ctx = takes_context(cfg.key_serializer)
        self._vser_ctx = takes_context(cfg.value_serializer)
        self._ser_ctx = self._kser_ctx or self._vser_ctx
        self._ignore_keys = cfg.partitioner_ignore_keys
        # The C send path reads the partitioner's code; None: Java's (murmur2_random), inlined below.
        self._partitioner_code = partitioner_code(cfg.partitioner)
        self._key_partition: KeyPartitioner | None = (
            None if cfg.partitioner == "murmur2_random" else key_partitioner(cfg.partitioner)
        )
        self._max_block_ms = cfg.max_block_ms
        self._max_request_size = cfg.max_request_size
        self._buffer_memory = cfg.buffer_memory
        # Largest record size estimate (key + value + headers + overhead) that fits a request and the buffer.
        self._max_record_size = min(cfg.max_request_size, cfg.buffer_memory) - RECORD_BATCH_OVERHEAD
        self._delivery_timeout_ms = cfg.delivery_timeout_ms
        compression = compression_type_from_name(cfg.compression_type)
        level = cfg.compression_level
        if compression == CompressionType.GZIP and level == -1:
            level = None

        self._metrics = Metrics(
            MetricConfig(cfg.metrics_num_samples, cfg.metrics_sample_window_ms),
            clock=self._clock,
            default_tags={"client-id": self.client_id},
        )
        self._producer_metrics = ProducerMetrics(self._metrics)

        self._accumulator = RecordAccumulator(
            batch_size=cfg.batch_size,
            linger_ms=cfg.linger_ms,
            buffer_memory=cfg.buffer_memory,
            compression=compression,
            max_request_size=cfg.max_request_size,
            delivery_timeout_ms=cfg.delivery_timeout_ms,
            retry_backoff_ms=cfg.retry_backoff_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            adaptive_partitioning=cfg.partitioner_adaptive_partitioning_enable,
            clock=self._clock.now_ms,
        )
        # Topics this producer writes to (network thread only) -> when first used.
        self._topics: dict[str, int] = {}
        # Published by the network thread (replaced, never mutated): topic -> partition count.
        self._partition_counts: dict[str, int] = {}
        self._topic_errors: Mapping[str, int] = {}
        self._metadata, client = metadata_and_client(
            cfg,
            self.client_id,
            allow_auto_topic_creation=True,
            topics=self._metadata_topics_nt,
            max_in_flight_per_connection=cfg.max_in_flight_requests_per_connection,
        )
        self._client = client
        self._idempotence = IdempotenceManager() if cfg.enable_idempotence else None
        self._txn: TransactionManager | None = None
        if cfg.transactional_id is not None and self._idempotence is not None:
            self._txn = TransactionManager(
                cfg.transactional_id,
                cfg.transaction_timeout_ms,
                self._idempotence,
                retry_backoff_ms=cfg.retry_backoff_ms,
                retry_backoff_max_ms=cfg.retry_backoff_max_ms,
                set_coordinator=client.set_coordinator,
                request_metadata=self._metadata.request_update,
                transaction_version=lambda: client.finalized_feature("transaction.version", ApiKey.END_TXN),
            )
        self._completions: queue.SimpleQueue[_Completion | None] = queue.SimpleQueue()
        self._sender = Sender(
            self._accumulator,
            self._metadata,
            self._on_done_nt,
            idempotence=self._idempotence,
            acks=cfg.acks,
            request_timeout_ms=cfg.request_timeout_ms,
            retries=cfg.retries,
            delivery_timeout_ms=cfg.delivery_timeout_ms,
            max_request_size=cfg.max_request_size,
            max_in_flight=cfg.max_in_flight_requests_per_connection,
            compression=compression,
            compression_level=level,
            retry_backoff_ms=cfg.retry_backoff_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            metrics=self._producer_metrics,
            transactions=self._txn,
        )
        self._metadata.listeners.append(self._on_metadata_nt)
        acc = self._accumulator
        acc.waker = client.wakeup
        if compression != CompressionType.NONE:
            # A full batch is compressed by the thread that filled it, not by the network thread.
            acc.on_batch_full = lambda batch: batch.prepare(compression, level)
        pm = self._producer_metrics
        pm.add_gauge("buffer-total-bytes", "Total buffer.memory", lambda: float(acc.buffer_memory))
        pm.add_gauge(
            "buffer-available-bytes",
            "buffer.memory not in use",
            lambda: float(acc.buffer_memory - acc.used_memory),
        )
        pm.add_gauge(
            "waiting-threads", "Threads blocked in send() waiting for memory", lambda: acc.waiting_threads
        )
        pm.add_gauge(
            "bufferpool-wait-time-ns-total",
            "Total time send() waited for memory (ns)",
            lambda: acc.wait_time_ns_total,
        )
        pm.add_gauge(
            "requests-in-flight",
            "Produce requests awaiting an answer",
            lambda: self._sender.in_flight_requests(),
        )

        self._completer_done: Future[None] = Future()  # the completion thread has ended (after close)
        self._completer = threading.Thread(
            target=self._complete_loop, name=f"kafka-handoff-producer-callbacks-{self.client_id}", daemon=True
        )
        self._telemetry = TelemetryManager(
            self._metrics,
            enabled=cfg.enable_metrics_push,
            retry_backoff_ms=cfg.retry_backoff_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            now_unix_nanos=self._clock.wall_ns,
        )
        self._thread = NetworkThread(
            client,
            [self._metadata, self._sender, self._telemetry, *([self._txn] if self._txn is not None else [])],
            self._clock,
            name=f"kafka-handoff-network-{self.client_id}",
            background_events=self._background,
            processor=ProducerEventProcessor(
                metadata=self._metadata,
                telemetry=self._telemetry,
                txn=self._txn,
                add_topic=self._add_topic_nt,
                purge=self._sender.purge_unsent,
            ),
            on_close=self._on_close_nt,
        )
        self._install_send_path()
        self._completer.start()
        self._thread.start()

    def _install_send_path(self) -> None:
        """With the C extension, ``send``/``send_nowait`` become C callables for the common record (bytes
        key/value, no headers, room in the partition's open batch): one call appends the record and makes
        its future; everything else goes on to the Python methods below (the same behaviour)."""
        ext = C_FUTURES
        if ext is None or not hasattr(ext, "SendPath"):
            return
        cls = type(self)
        acc = self._accumulator
        types = (TopicInfo, ProducerBatch, BuiltInPartitioner)  # their __slots__ are read directly
        in_txn = TxnState.IN_TRANSACTION
        append = self._append_entry
        if cls.send is Producer.send:  # a subclass that overrides send() keeps its own
            self.__dict__["send"] = ext.SendPath(
                self, acc, Producer.send.__get__(self), True, types, in_txn, append
            )
        if cls.send_nowait is Producer.send_nowait:
            self.__dict__["send_nowait"] = ext.SendPath(
                self, acc, Producer.send_nowait.__get__(self), False, types, in_txn, append
            )

    def _append_entry(
        self, topic: str, partition: int | None, entry: Entry, size: int
    ) -> Future[RecordMetadata] | None:
        """The C send path's second half: ``entry`` passed every check of :meth:`send` /
        :meth:`send_nowait` (its future, if any, is ``entry[4]``), but did not fit the partition's open
        batch; the accumulator's ordinary append takes it, as those methods would."""
        future = entry[4]
        try:
            wake = self._accumulator.append(topic, partition, entry, size, None, self._max_block_ms)
        except KafkaTimeoutError as exc:  # no buffer memory within max.block.ms
            if future is None:
                self._fail_nowait(entry[5], exc)
                return None
            return self._fail_now(future, entry[5], exc)
        if wake:
            self._client.wakeup()
        return future

    # ================================================================================ network thread side
    def _metadata_topics_nt(self) -> frozenset[str]:
        return frozenset(self._topics)

    def _add_topic_nt(self, topic: str, now: int) -> None:
        if topic not in self._topics:
            self._topics[topic] = now
            self._metadata.request_update()

    def _on_metadata_nt(self, cluster: ClusterMetadata, now: int) -> None:
        counts = dict(self._partition_counts)
        for topic in self._topics:
            parts = cluster.partitions.get(topic)
            if not parts:
                continue
            self._accumulator.update_topic(topic, len(parts), [p.partition for p in parts if p.leader >= 0])
            counts[topic] = len(parts)
        self._topic_errors = dict(cluster.topic_errors)
        self._partition_counts = counts

    def _on_done_nt(
        self, batch: ProducerBatch, base_offset: int, log_append_ms: int, error: BaseException | None
    ) -> None:
        self._completions.put((batch, base_offset, log_append_ms, error))

    def _on_close_nt(self, now: int) -> bool:
        return not self._sender.has_pending()

    # ================================================================================ completion thread
    def _complete_loop(self) -> None:
        get = self._completions.get
        try:
            while True:
                item = get()
                if item is None:
                    return
                try:
                    self._complete(*item)
                except BaseException:
                    log.exception("error completing a batch")
        finally:
            self._completer_done.set_result(None)

    def _complete(
        self, batch: ProducerBatch, base_offset: int, log_append_ms: int, error: BaseException | None
    ) -> None:
        try:
            entries = batch.entries
            if error is None and complete_lazily(
                batch.topic, batch.partition, base_offset, log_append_ms, entries
            ):
                return  # no callbacks: the futures (if any) build their RecordMetadata when read
            count = len(entries)
            # Records from send_nowait()/send_many() have no future (and usually no callback): a batch of
            # only those costs nothing per record here.
            futures = list(map(_future_of, entries))
            with_future = count - futures.count(None)
            callbacks = list(map(_callback_of, entries))
            with_callback = count - callbacks.count(None)
            if error is None:
                if not (with_future or with_callback):
                    return
                results = record_metadata(
                    RecordMetadata, batch.topic, batch.partition, base_offset, log_append_ms, entries
                )
                if with_future:
                    complete_all(futures, results)
                if with_callback:
                    for i, callback in enumerate(callbacks):
                        if callback is not None:
                            self._run_callback(callback, results[i], None, batch)
            else:
                if with_future:
                    complete_all(futures, None, error)
                if with_callback:
                    for callback in callbacks:
                        if callback is not None:
                            self._run_callback(callback, None, error, batch)
                silent = sum(1 for f, c in zip(futures, callbacks, strict=True) if f is None and c is None)
                if silent:
                    self._note_unreported(batch, error, silent)
        finally:
            batch.mark_done()
            batch.run_done_hooks()
            self._accumulator.deallocate(batch)

    def _note_unreported(self, batch: ProducerBatch, error: BaseException, count: int) -> None:
        """Records without a future or callback failed: keep the error for the application's next
        ``flush()``/``send_nowait()``/``send_many()`` (and log it now)."""
        with self._unreported_lock:
            first = self._unreported is None
            if first:
                self._unreported = error
            self._unreported_count += count
        # One error line until the application is told (a broker outage fails many batches).
        log.log(
            logging.ERROR if first else logging.DEBUG,
            "%d record(s) for %s sent without a future or callback could not be delivered: %s%s",
            count,
            batch.tp,
            error,
            " (further failures are counted until the next flush/send_nowait/send_many reports them)"
            if first
            else "",
        )

    def _raise_unreported(self) -> None:
        with self._unreported_lock:
            error = self._unreported
            count = self._unreported_count
            self._unreported = None
            self._unreported_count = 0
        if error is not None:
            raise DeliveryFailedError(
                f"{count} record(s) sent without a future or callback could not be delivered; "
                f"the first error: {error}",
                failed=count,
                cause=error,
            ) from error

    @staticmethod
    def _run_callback(
        callback: Callback, metadata: RecordMetadata | None, error: BaseException | None, batch: ProducerBatch
    ) -> None:
        try:
            callback(metadata, error)
        except Exception:
            log.exception("error in a send callback for %s", batch.tp)

    # ================================================================================ application side
    def _raise_background_errors(self) -> None:
        while True:
            try:
                event = self._background.get_nowait()
            except queue.Empty:
                break
            if isinstance(event, BackgroundError):
                if event.fatal:
                    self._fatal = event.error
                raise event.error
        if self._fatal is not None:
            raise self._fatal

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Iterable[tuple[str, Any]] | Mapping[str, Any] | None = None,
        timestamp: int | None = None,
        callback: Callback | None = None,
    ) -> Future[RecordMetadata]:
        """Queue one record; returns a future of its :class:`~kafka_handoff.types.RecordMetadata`.

        ``callback(metadata, exception)`` (one of them None) runs on the producer's completion thread once
        the outcome is known.  Raises for misuse (closed producer, unserializable key/value, partition out
        of range); delivery problems -- including a record larger than ``max.request.size`` and a
        metadata or buffer-memory wait longer than ``max.block.ms`` -- fail the future instead.
        """
        if self._closed:
            raise IllegalStateError("cannot send: the producer is closed")
        if self._txn is not None:
            self._txn.check_send()
        if self._fatal is not None or not self._background.empty():
            try:
                self._raise_background_errors()
            except AuthenticationError as exc:  # as Java: the record's future fails with it
                return self._fail_now(new_future(), callback, exc)
        try:
            key, value, hdrs, timestamp, partition, size, started = self._prepare(
                topic, value, key, partition, headers, timestamp
            )
        except (KafkaTimeoutError, AuthenticationError) as exc:  # the metadata wait (max.block.ms)
            return self._fail_now(new_future(), callback, exc)
        if size > self._max_record_size:
            return self._fail_now(new_future(), callback, self._too_large(topic, size))
        entry = make_entry(key, value, timestamp, hdrs, callback)
        future = entry[4]
        try:
            wake = self._accumulator.append(topic, partition, entry, size, started, self._max_block_ms)
        except KafkaTimeoutError as exc:
            return self._fail_now(future, callback, exc)
        if wake:
            self._client.wakeup()
        return future

    def send_nowait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Iterable[tuple[str, Any]] | Mapping[str, Any] | None = None,
        timestamp: int | None = None,
        callback: Callback | None = None,
    ) -> None:
        """:meth:`send` without a future (cheaper: no per-record future is made or completed).

        ``callback(metadata, exception)``, when given, runs as with :meth:`send`.  A record that cannot be
        queued (too large, no metadata or buffer memory within ``max.block.ms``) raises here when there is no
        callback (else the callback gets the error).  A record without a callback whose delivery fails
        later is logged, counted and raised as one
        :class:`~kafka_handoff.errors.DeliveryFailedError` from the next :meth:`flush`,
        :meth:`send_nowait` or :meth:`send_many` call.  Ordering, retries and idempotence are the same as
        for :meth:`send`.
        """
        if self._closed:
            raise IllegalStateError("cannot send: the producer is closed")
        if self._fatal is not None or not self._background.empty() or self._unreported is not None:
            self._raise_unreported()
            try:
                self._raise_background_errors()
            except AuthenticationError as exc:
                self._fail_nowait(callback, exc)
                return
        if self._txn is not None:
            self._txn.check_send()
        try:
            key, value, hdrs, timestamp, partition, size, started = self._prepare(
                topic, value, key, partition, headers, timestamp
            )
        except (KafkaTimeoutError, AuthenticationError) as exc:  # the metadata wait (max.block.ms)
            self._fail_nowait(callback, exc)
            return
        if size > self._max_record_size:
            self._fail_nowait(callback, self._too_large(topic, size))
            return
        entry = make_entry_no_future(key, value, timestamp, hdrs, callback)
        try:
            wake = self._accumulator.append(topic, partition, entry, size, started, self._max_block_ms)
        except KafkaTimeoutError as exc:
            self._fail_nowait(callback, exc)
            return
        if wake:
            self._client.wakeup()

    def _prepare(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        headers: Iterable[tuple[str, Any]] | Mapping[str, Any] | None,
        timestamp: int | None,
    ) -> tuple[bytes | None, bytes | None, tuple[Header, ...] | None, int, int | None, int, int | None]:
        """A record of :meth:`send`/:meth:`send_nowait` ready to append: ``(key, value, headers, timestamp,
        partition, size estimate, when the metadata wait started or None)``.  Raises for misuse;
        :class:`KafkaTimeoutError`/:class:`AuthenticationError` from the topic's metadata wait."""
        if self._key_serializer is not None or self._value_serializer is not None:
            if self._ser_ctx:
                key, value, headers = self._serialize_ctx(topic, partition, key, value, headers)
            else:
                key, value = self._serialize(topic, key, value)
        if key is None:
            size = RECORD_OVERHEAD_ESTIMATE
        else:
            if type(key) is not bytes:
                key = _to_bytes(key, "key")
            size = RECORD_OVERHEAD_ESTIMATE + len(key)
        if value is not None:
            if type(value) is not bytes:
                value = _to_bytes(value, "value")
            size += len(value)
        hdrs: tuple[Header, ...] | None = None
        if headers is not None:
            hdrs = _headers(headers)
            if hdrs:
                size += estimate_headers_size(hdrs)
            else:
                hdrs = None
        if timestamp is None:
            timestamp = time_ns() // 1_000_000
        elif timestamp < 0:
            raise ValueError(f"invalid timestamp {timestamp}: it must be non-negative (or None for now)")
        num_partitions = self._partition_counts.get(topic)
        started: int | None = None
        if num_partitions is None:
            started = monotonic_ns() // 1_000_000
            num_partitions = self._wait_for_topic(topic, started + self._max_block_ms)
        if partition is not None:
            if not 0 <= partition < num_partitions:
                raise KafkaError(
                    f"invalid partition {partition} for topic {topic}: "
                    f"it has partitions 0..{num_partitions - 1}"
                )
        elif not self._ignore_keys:
            by_key = self._key_partition
            if by_key is not None:
                partition = by_key(key, num_partitions)
            elif key is not None:
                partition = (murmur2(key) & 0x7FFFFFFF) % num_partitions
        return key, value, hdrs, timestamp, partition, size, started

    def _fail_nowait(self, callback: Callback | None, error: BaseException) -> None:
        if callback is None:
            raise error
        try:
            callback(None, error)
        except Exception:
            log.exception("error in a send callback")

    def send_many(
        self,
        topic: str,
        values: Iterable[Any],
        keys: Iterable[Any] | None = None,
        *,
        partition: int | None = None,
        timestamp: int | None = None,
        callback: Callback | None = None,
    ) -> None:
        """Queue many records at once, without futures: the fastest way to produce.

        ``values`` (and ``keys``, as many, or None for records without keys) are serialized as by
        :meth:`send`; every record gets ``timestamp`` (default: now) and no headers.  Records go to
        ``partition``, else keyed ones to their key's partition (the ``partitioner``, as :meth:`send`) and
        the rest to the topic's sticky partition; each partition's records keep their order in ``values``.
        Runs of records that fit a partition's open batch are appended by one C call, under one lock
        acquisition.

        ``callback(metadata, exception)``, when given, runs for every record as with :meth:`send`.
        Without one, a delivery failure is logged and raised as one
        :class:`~kafka_handoff.errors.DeliveryFailedError` by the next :meth:`flush`, :meth:`send_nowait`
        or :meth:`send_many`.  Raises :class:`~kafka_handoff.errors.MessageTooLargeError` before queuing
        anything if a record is too large; if buffer memory runs out for longer than ``max.block.ms`` it
        raises :class:`~kafka_handoff.errors.KafkaTimeoutError` saying how many records were queued
        (those are delivered as usual).
        """
        if self._closed:
            raise IllegalStateError("cannot send: the producer is closed")
        if self._fatal is not None or not self._background.empty() or self._unreported is not None:
            self._raise_unreported()
            self._raise_background_errors()
        if self._txn is not None:
            self._txn.check_send()
        vals = values if type(values) is list else list(values)
        ks: list[Any] | None = None
        if keys is not None:
            ks = keys if type(keys) is list else list(keys)
            if len(ks) != len(vals):
                raise ValueError(f"send_many: {len(ks)} keys for {len(vals)} values (they must match)")
        if not vals:
            return
        if self._key_serializer is not None and ks is not None:
            ks = self._serialize_many(
                self._key_serializer, self._kser_ctx, topic, partition, ks, MessageField.KEY
            )
        if self._value_serializer is not None:
            vals = self._serialize_many(
                self._value_serializer, self._vser_ctx, topic, partition, vals, MessageField.VALUE
            )
        self._check_sizes(topic, vals, ks)
        if timestamp is None:
            timestamp = time_ns() // 1_000_000
        elif timestamp < 0:
            raise ValueError(f"invalid timestamp {timestamp}: it must be non-negative (or None for now)")
        num_partitions = self._partition_counts.get(topic)
        started: int | None = None
        if num_partitions is None:
            started = monotonic_ns() // 1_000_000
            num_partitions = self._wait_for_topic(topic, started + self._max_block_ms)
        groups: list[tuple[int | None, list[Any], list[Any] | None]]
        if partition is not None:
            if not 0 <= partition < num_partitions:
                raise KafkaError(
                    f"invalid partition {partition} for topic {topic}: "
                    f"it has partitions 0..{num_partitions - 1}"
                )
            groups = [(partition, vals, ks)]
        elif self._ignore_keys or (ks is None and self._partitioner_code & 0x10):
            groups = [(None, vals, ks)]
        else:
            groups = self._group_by_key(
                ks if ks is not None else [None] * len(vals), vals, num_partitions, self._key_partition
            )
        limit = self._max_record_size

        def convert(key: Any, value: Any) -> tuple[bytes | None, bytes | None, int]:
            k, v, size = _convert(key, value)
            if size > limit:  # a str whose UTF-8 is longer than _check_sizes assumed
                raise self._too_large(topic, size)
            return k, v, size

        progress = [0]
        queued = 0
        wake = False
        try:
            for part, group_values, group_keys in groups:
                progress[0] = 0
                if self._accumulator.append_many(
                    topic,
                    part,
                    group_values,
                    group_keys,
                    timestamp,
                    callback,
                    convert,
                    started,
                    self._max_block_ms,
                    progress,
                ):
                    wake = True
                queued += progress[0]
        except KafkaTimeoutError as exc:
            queued += progress[0]
            raise KafkaTimeoutError(f"{exc}; {queued} of {len(vals)} record(s) were queued") from exc
        finally:
            if wake or queued:
                self._client.wakeup()

    @staticmethod
    def _group_by_key(
        keys: list[Any], values: list[Any], num_partitions: int, by_key: KeyPartitioner | None = None
    ) -> list[tuple[int | None, list[Any], list[Any] | None]]:
        """Records by their key's partition (``by_key``, default Java's: murmur2, a None key going to the
        sticky partition), each partition's in order."""
        by_part: dict[int | None, tuple[list[Any], list[Any]]] = {}
        for key, value in zip(keys, values, strict=True):
            part: int | None
            if key is not None and type(key) is not bytes:
                key = _to_bytes(key, "key")
            if by_key is not None:
                part = by_key(key, num_partitions)
            elif key is None:
                part = None
            else:
                part = (murmur2(key) & 0x7FFFFFFF) % num_partitions
            group = by_part.get(part)
            if group is None:
                group = by_part[part] = ([], [])
            group[0].append(key)
            group[1].append(value)
        return [(p, vs, ks) for p, (ks, vs) in by_part.items()]

    def _check_sizes(self, topic: str, values: list[Any], keys: list[Any] | None) -> None:
        limit = self._max_record_size - RECORD_OVERHEAD_ESTIMATE
        try:
            bound = max(map(len, values)) + (max(map(len, keys)) if keys else 0)
        except TypeError:  # None values or keys, or an unsupported type (that fails with a clear error later)
            bound = limit + 1
        if bound * 4 <= limit:  # even if every item were a str of 4-byte UTF-8 characters
            return
        for i, value in enumerate(values):
            key = keys[i] if keys is not None else None
            size = RECORD_OVERHEAD_ESTIMATE
            if value is not None:
                size += len(_to_bytes(value, "value"))
            if key is not None:
                size += len(_to_bytes(key, "key"))
            if size > self._max_record_size:
                raise self._too_large(topic, size)

    @staticmethod
    def _serialize_one(serializer: Callable[..., Any], topic: str, item: Any, what: str) -> Any:
        try:
            return serializer(item)
        except Exception as exc:
            raise SerializationError(
                f"cannot serialize the {what} of a record for topic {topic}: {exc}", topic=topic, field=what
            ) from exc

    @staticmethod
    def _serialize_many(
        serializer: Callable[..., Any],
        with_ctx: bool,
        topic: str,
        partition: int | None,
        items: list[Any],
        what: str,
    ) -> list[Any]:
        """``send_many``'s keys or values serialized; a serializer taking a context gets one per record (with
        no headers: ``send_many`` sends none, so one that adds a header fails the call)."""
        if not with_ctx:
            return [Producer._serialize_one(serializer, topic, item, what) for item in items]
        out: list[Any] = []
        for item in items:
            ctx = SerializationContext(topic, what, [], partition)
            try:
                out.append(serializer(item, ctx))
            except Exception as exc:
                raise SerializationError(
                    f"cannot serialize the {what} of a record for topic {topic}: {exc}",
                    topic=topic,
                    partition=-1 if partition is None else partition,
                    field=what,
                ) from exc
            if ctx.headers:
                raise SerializationError(
                    f"the {what} serializer added headers ({', '.join(h[0] for h in ctx.headers)}) for topic "
                    f"{topic}, but send_many() sends records without headers: use send() or send_nowait()",
                    topic=topic,
                    field=what,
                )
        return out

    def _serialize(self, topic: str, key: Any, value: Any) -> tuple[Any, Any]:
        ks = self._key_serializer
        if ks is not None:
            try:
                key = ks(key)
            except Exception as exc:
                raise SerializationError(
                    f"cannot serialize the key of a record for topic {topic}: {exc}", topic=topic, field="key"
                ) from exc
        vs = self._value_serializer
        if vs is not None:
            try:
                value = vs(value)
            except Exception as exc:
                raise SerializationError(
                    f"cannot serialize the value of a record for topic {topic}: {exc}",
                    topic=topic,
                    field="value",
                ) from exc
        return key, value

    def _serialize_ctx(
        self,
        topic: str,
        partition: int | None,
        key: Any,
        value: Any,
        headers: Iterable[tuple[str, Any]] | Mapping[str, Any] | None,
    ) -> tuple[Any, Any, list[tuple[str, Any]] | None]:
        """:meth:`_serialize` when a serializer takes ``(value, ctx)``: the context's headers are a list the
        serializers may add to; the record is sent with it."""
        if headers is None:
            hdrs: list[tuple[str, Any]] = []
        elif isinstance(headers, Mapping):
            hdrs = list(headers.items())
        else:
            hdrs = list(headers)
        part = -1 if partition is None else partition
        ks = self._key_serializer
        if ks is not None:
            try:
                if self._kser_ctx:
                    key = ks(key, SerializationContext(topic, MessageField.KEY, hdrs, partition))
                else:
                    key = ks(key)
            except Exception as exc:
                raise SerializationError(
                    f"cannot serialize the key of a record for topic {topic}: {exc}",
                    topic=topic,
                    partition=part,
                    field="key",
                ) from exc
        vs = self._value_serializer
        if vs is not None:
            try:
                if self._vser_ctx:
                    value = vs(value, SerializationContext(topic, MessageField.VALUE, hdrs, partition))
                else:
                    value = vs(value)
            except Exception as exc:
                raise SerializationError(
                    f"cannot serialize the value of a record for topic {topic}: {exc}",
                    topic=topic,
                    partition=part,
                    field="value",
                ) from exc
        return key, value, hdrs

    def _too_large(self, topic: str, size: int) -> MessageTooLargeError:
        serialized = size + RECORD_BATCH_OVERHEAD
        if serialized > self._max_request_size:
            return MessageTooLargeError(
                f"the record is {serialized} bytes when serialized, which is larger than "
                f"{self._max_request_size}, the value of max.request.size (topic {topic})"
            )
        return MessageTooLargeError(
            f"the record is {serialized} bytes when serialized, which is larger than the total "
            f"memory buffer (buffer.memory={self._buffer_memory}) (topic {topic})"
        )

    def _fail_now(
        self, future: Future[RecordMetadata], callback: Callback | None, error: BaseException
    ) -> Future[RecordMetadata]:
        complete_exception(future, error)
        if callback is not None:
            try:
                callback(None, error)
            except Exception:
                log.exception("error in a send callback")
        return future

    def _wait_for_topic(self, topic: str, deadline_ms: int) -> int:
        """Block until the topic's partition count is known (Java ``waitOnMetadata``)."""
        while True:
            count = self._partition_counts.get(topic)
            if count is not None:
                return count
            code = self._topic_errors.get(topic)
            if code in _FATAL_TOPIC_ERRORS:
                needs = Needs("Metadata", topic=("DESCRIBE", topic))
                raise error_for_code(code or 0, f"topic {topic}", needs=needs)
            remaining = deadline_ms - self._clock.now_ms()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"topic {topic} not present in metadata after {self._max_block_ms} ms"
                )
            fut = self._thread.submit(
                TopicMetadataEvent(topic=topic, deadline_ms=deadline_ms, name=f"metadata for topic {topic}")
            )
            try:
                # In slices: an authentication failure reported meanwhile ends the wait within moments.
                while not fut.done() and self._clock.now_ms() < deadline_ms:
                    if not self._background.empty():
                        self._raise_background_errors()
                    wait_futures([fut], timeout=0.2)
                fut.result(0)
            except (FutureTimeout, KafkaTimeoutError):
                continue
            except KafkaError:
                self._raise_background_errors()
                raise

    def flush(self, timeout: float | None = None) -> None:
        """Send everything now and wait until every record sent before this call has its outcome
        (callbacks included).  Raises :class:`~kafka_handoff.errors.KafkaTimeoutError` if that takes
        longer than ``timeout`` seconds (``None``: no limit)."""
        if threading.current_thread() is self._completer:
            raise IllegalStateError(
                "flush() cannot be called from a send callback: it would wait for the callback thread itself"
            )
        if not self._background.empty():
            self._raise_background_errors()
        batches = self._accumulator.begin_flush()
        self._client.wakeup()
        try:
            deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
            for batch in batches:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not batch.done_event.wait(remaining):
                    pending = sum(len(b.entries) for b in batches if not b.completed)
                    raise KafkaTimeoutError(
                        f"flush timed out after {timeout} s with {pending} record(s) not delivered"
                    )
        finally:
            self._accumulator.end_flush()
        if self._unreported is not None:
            self._raise_unreported()

    def purge(self, timeout: float | None = None) -> int:
        """Fail every queued record that was not sent yet with
        :class:`~kafka_handoff.errors.RecordPurgedError` (their futures and callbacks get it as usual) and
        return how many.  Records already sent -- in flight, or waiting for a retry -- are not touched: their
        outcome is reported as it comes.  Waits up to ``timeout`` s (default ``max.block.ms``)."""
        if self._closed:
            raise IllegalStateError("cannot purge: the producer is closed")
        timeout_ms = self._max_block_ms if timeout is None else max(0, int(timeout * 1000))
        fut = self._thread.submit(
            PurgeEvent(error=RecordPurgedError("the record was purged before it was sent"), name="purge")
        )
        try:
            purged: int = fut.result(timeout_ms / 1000.0)
        except FutureTimeout:
            raise KafkaTimeoutError(f"purge did not complete within {timeout_ms} ms") from None
        return purged

    # ================================================================================ transactions
    def _txn_call(self, event: ApplicationEvent, timeout: float | None) -> None:
        what = event.name
        if self._closed:
            raise IllegalStateError(f"cannot {what}: the producer is closed")
        if self._txn is None:
            raise IllegalStateError(f"cannot {what}: the producer has no transactional.id")
        timeout_ms = self._max_block_ms if timeout is None else max(0, int(timeout * 1000))
        fut = self._thread.submit(event)
        try:
            fut.result(timeout_ms / 1000.0)
        except FutureTimeout:
            raise KafkaTimeoutError(
                f"{what} did not complete within {timeout_ms} ms (it goes on: call it again to wait for it)"
            ) from None

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the ``transactional.id`` with its transaction coordinator (Java ``initTransactions``):
        fences older producers with the same id and completes their open transaction.  Call once, before
        the first transaction; waits up to ``timeout`` s (default ``max.block.ms``) -- after a
        :class:`~kafka_handoff.errors.KafkaTimeoutError` calling it again resumes the wait."""
        self._txn_call(InitTransactionsEvent(name="init_transactions"), timeout)

    def begin_transaction(self) -> None:
        """Start a transaction: what is sent until :meth:`commit_transaction` or :meth:`abort_transaction`
        becomes visible to ``read_committed`` consumers atomically, or never."""
        self._txn_call(BeginTransactionEvent(name="begin_transaction"), 5.0)

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata,
        timeout: float | None = None,
    ) -> None:
        """Commit the consumer group's ``offsets`` (the next offsets to consume) as part of the open
        transaction (KIP-447: ``group_metadata`` is ``consumer.group_metadata()``, so a member fenced by a
        rebalance cannot commit).  Blocks until the group coordinator took them (up to ``timeout`` s);
        they become the group's committed offsets only if the transaction commits."""
        normalized = {
            tp: om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om))
            for tp, om in offsets.items()
        }
        self._txn_call(
            SendOffsetsToTransactionEvent(
                offsets=normalized, group_metadata=group_metadata, name="send_offsets_to_transaction"
            ),
            timeout,
        )

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send everything queued, then commit the transaction.  Raises the abortable error (e.g. a record
        that could not be delivered) when it cannot commit -- then call :meth:`abort_transaction` -- and a
        fatal one (:class:`~kafka_handoff.errors.ProducerFencedError`, ...) when only ``close()`` is left."""
        txn = self._txn
        if txn is None:
            raise IllegalStateError("cannot commit_transaction: the producer has no transactional.id")
        start = time.monotonic()
        if txn.state is TxnState.IN_TRANSACTION:  # not when resuming a commit that timed out
            try:
                self.flush(timeout)
            except KafkaTimeoutError as exc:
                raise KafkaTimeoutError(f"commit_transaction: {exc}") from None
        remaining = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
        self._txn_call(CommitTransactionEvent(name="commit_transaction"), remaining)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the open transaction: queued records fail with
        :class:`~kafka_handoff.errors.TransactionAbortedError`, what was written stays invisible to
        ``read_committed`` consumers and the offsets sent with it are not committed."""
        self._txn_call(AbortTransactionEvent(name="abort_transaction"), timeout)

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[PartitionInfo]:
        """The topic's partitions (waits up to ``timeout`` s, default ``max.block.ms``, for metadata)."""
        if self._closed:
            raise IllegalStateError("the producer is closed")
        timeout_ms = self._max_block_ms if timeout is None else int(timeout * 1000)
        self._wait_for_topic(topic, self._clock.now_ms() + timeout_ms)
        parts = self._metadata.cluster.partitions.get(topic, ())
        return list(parts)

    def metrics(self) -> dict[str, float]:
        """Current metric values keyed ``"producer-metrics:<name>"``."""
        return self._metrics.as_dict()

    def client_instance_id(self, timeout: float = 30.0) -> uuid.UUID | None:
        """The id the cluster gave this client for its telemetry (KIP-714), waiting up to ``timeout``
        seconds; ``None`` when not known by then or unsupported by the brokers.  Raises
        :class:`~kafka_handoff.errors.IllegalStateError` when ``enable.metrics.push`` is false."""
        return telemetry_client_instance_id(self._telemetry, timeout)

    def metric_registry(self) -> Metrics:
        """The client's metric registry (names with tags; what the Prometheus and OpenTelemetry exporters
        in :mod:`kafka_handoff.metrics` read)."""
        return self._metrics

    @property
    def config(self) -> ProducerConfig:
        return self._config

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued, for up to ``timeout`` seconds (``None``: until everything has an outcome,
        which ``delivery.timeout.ms`` bounds), then stop.  Records without an outcome by then fail with
        :class:`~kafka_handoff.errors.IllegalStateError` ("closed before the record could be delivered")."""
        started = self._close_start(timeout)
        if started is None:
            return
        start, timeout_ms = started
        if self._telemetry.enabled and timeout_ms > 0:  # KIP-714's terminating push, first (as Java)
            try:
                self._thread.submit(TerminateTelemetryEvent()).result(timeout_ms / 2000.0)
            except Exception:
                log.debug("terminating telemetry push did not complete", exc_info=True)
        self._accumulator.close()
        self._client.wakeup()
        self._thread.close(max(0, timeout_ms - int((time.monotonic() - start) * 1000)))
        self._close_finish(timeout_ms)
        if threading.current_thread() is not self._completer:  # close() from a callback: cannot wait for it
            remaining = timeout_ms / 1000.0 - (time.monotonic() - start)
            self._completer.join(max(remaining, 0.5))

    def _close_start(self, timeout: float | None) -> tuple[float, int] | None:
        """close()'s first step (shared with the asyncio facade): mark the producer closed; its start time
        and timeout in ms (``None``: closed already)."""
        with self._close_lock:
            if self._closed:
                return None
            self._closed = True
        start = time.monotonic()
        if threading.current_thread() is self._completer and timeout != 0:
            # Java does the same: a callback cannot wait for the delivery of records queued behind it.
            log.warning("close() called from a send callback: closing with timeout 0")
            timeout = 0
        if timeout is None:
            timeout_ms = self._delivery_timeout_ms + self._config.request_timeout_ms + 5_000
        else:
            timeout_ms = max(0, int(timeout * 1000))
        return start, timeout_ms

    def _close_finish(self, timeout_ms: int) -> None:
        """close()'s step once the network thread stopped: fail what was not delivered, end the completion
        thread (shared with the asyncio facade)."""
        error = IllegalStateError(
            f"the producer was closed before the record could be delivered (close timeout {timeout_ms} ms)"
        )
        aborted = self._sender.abort_all(error, self._clock.now_ms())
        if aborted:
            log.warning("closing the producer failed %d record(s) that were not delivered", aborted)
        self._completions.put(None)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Producer(client_id={self.client_id!r}, closed={self._closed})"

    # ================================================================================ for tests/tools
    def _debug_state(self) -> dict[str, Any]:
        return {
            "in_flight_requests": self._sender.in_flight_requests(),
            "used_memory": self._accumulator.used_memory,
            "producer_id": self._idempotence.producer_id if self._idempotence else None,
            "epoch": self._idempotence.epoch if self._idempotence else None,
        }
