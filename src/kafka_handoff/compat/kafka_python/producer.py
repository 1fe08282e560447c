"""kafka-python's ``KafkaProducer`` on kafka-handoff's native :class:`~kafka_handoff.Producer`."""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka_handoff.compat.kafka_python.config import PRODUCER_KEYS, translate
from kafka_handoff.compat.kafka_python.errors import IllegalStateError, KafkaError
from kafka_handoff.compat.kafka_python.future import Future
from kafka_handoff.compat.kafka_python.serializer import serializer
from kafka_handoff.compat.kafka_python.structs import RecordMetadata, TopicPartition
from kafka_handoff.producer import Producer
from kafka_handoff.types import RecordMetadata as NativeRecordMetadata

__all__ = ["FutureRecordMetadata", "KafkaProducer"]

log = logging.getLogger(__name__)


def nested_metrics(flat: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """Native ``"group:name"`` metric keys as kafka-python's ``{group: {name: value}}``."""
    out: dict[str, dict[str, float]] = {}
    for key, value in flat.items():
        group, _, name = key.rpartition(":")
        out.setdefault(group or "kafka-handoff", {})[name] = value
    return out


class FutureRecordMetadata(Future[RecordMetadata]):
    """The outcome of one ``send()``: ``get(timeout)`` -> :class:`RecordMetadata`."""


def _header_size(headers: list[tuple[str, bytes | None]]) -> int:
    if not headers:
        return -1
    return sum(len(k.encode("utf-8")) + (len(v) if v is not None else 0) for k, v in headers)


def _close_at_exit(ref: weakref.ref[KafkaProducer]) -> Callable[[], None]:
    def close() -> None:
        producer = ref()
        if producer is not None:
            producer.close()

    return close


class KafkaProducer:
    """kafka-python's producer API: ``send()`` returns a :class:`FutureRecordMetadata`; serializers and a
    ``partitioner`` callable run in ``send()``; ``flush()``, ``close()``, ``partitions_for()``,
    ``metrics()`` and the transactional calls map onto the native producer.

    Configuration takes kafka-python's underscore names (``linger_ms=10``, ``acks='all'``, ...), translated
    by :mod:`kafka_handoff.compat.kafka_python.config`; defaults are the native (Java) ones, e.g.
    ``acks='all'`` with idempotence where kafka-python 2.x defaulted to ``acks=1``.
    """

    def __init__(self, **configs: Any) -> None:
        native, compat = translate("producer", configs, PRODUCER_KEYS)
        self.config: dict[str, Any] = dict(configs)
        self._key_ser = serializer(compat.get("key_serializer"), "key_serializer")
        self._value_ser = serializer(compat.get("value_serializer"), "value_serializer")
        partitioner = compat.get("partitioner")
        if partitioner is not None and not callable(partitioner):
            from kafka_handoff.compat.kafka_python.errors import KafkaConfigurationError

            raise KafkaConfigurationError(
                f"Invalid value {partitioner!r} for configuration 'partitioner' (allowed: a callable "
                "partitioner(key_bytes, all_partitions, available_partitions) -> partition)"
            )
        self._partitioner: Callable[..., int] | None = partitioner
        self._partitions: dict[str, tuple[list[int], list[int], float]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._native = Producer(native)
        # As kafka-python: a producer still open when the interpreter exits delivers what it queued first.
        self._atexit = _close_at_exit(weakref.ref(self))
        atexit.register(self._atexit)

    @property
    def native(self) -> Producer:
        """The native producer underneath (for what the kafka-python API lacks)."""
        return self._native

    # ------------------------------------------------------------------------------------------ send
    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Iterable[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Queue a record; ``value`` and ``key`` go through the serializers.  Misuse (no key and no value,
        closed producer) raises here; delivery failures fail the future."""
        if self._closed:
            raise IllegalStateError("Cannot send: the producer is closed")
        if value is None and key is None:
            raise AssertionError("Need at least one: key or value")
        hdrs = [(str(k), v) for k, v in headers] if headers else []
        key_bytes = self._key_ser(topic, hdrs, key) if self._key_ser is not None else key
        value_bytes = self._value_ser(topic, hdrs, value) if self._value_ser is not None else value
        if partition is None and self._partitioner is not None:
            partition = self._partition(topic, key_bytes)
        key_size = -1 if key_bytes is None else len(key_bytes)
        value_size = -1 if value_bytes is None else len(value_bytes)
        header_size = _header_size(hdrs)
        inner = self._native.send(
            topic,
            value_bytes,
            key=key_bytes,
            partition=partition,
            headers=hdrs or None,
            timestamp=timestamp_ms,
        )

        def convert(md: NativeRecordMetadata) -> RecordMetadata:
            return RecordMetadata(
                md.topic,
                md.partition,
                TopicPartition(md.topic, md.partition),
                md.offset,
                md.timestamp,
                -1,
                None,
                key_size,
                value_size,
                header_size,
            )

        return FutureRecordMetadata(inner, convert)

    def _partition(self, topic: str, key_bytes: bytes | None) -> int:
        assert self._partitioner is not None
        with self._lock:
            cached = self._partitions.get(topic)
        max_age = 300.0
        if cached is None or time.monotonic() - cached[2] > max_age:
            infos = self._native.partitions_for(topic)
            all_parts = sorted(p.partition for p in infos)
            available = sorted(p.partition for p in infos if p.leader >= 0)
            cached = (all_parts, available, time.monotonic())
            with self._lock:
                self._partitions[topic] = cached
        return int(self._partitioner(key_bytes, cached[0], cached[1]))

    # ------------------------------------------------------------------------------------------ others
    def flush(self, timeout: float | None = None) -> None:
        """Wait until every record sent so far has its outcome; :class:`KafkaTimeoutError` after
        ``timeout`` seconds."""
        self._native.flush(timeout)

    def close(self, timeout: float | None = None, null_logger: bool = False) -> None:
        """Deliver what is queued (up to ``timeout`` seconds, ``None``: as long as it takes) and stop."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._atexit)
        try:
            self._native.close(timeout)
        finally:
            for ser in (self.config.get("key_serializer"), self.config.get("value_serializer")):
                closer = getattr(ser, "close", None)
                if callable(closer) and not isinstance(ser, type):
                    try:
                        closer()
                    except Exception:
                        log.exception("closing serializer %r failed", ser)

    def partitions_for(self, topic: str) -> set[int]:
        """The partition ids of ``topic`` (waits for metadata up to ``max_block_ms``)."""
        return {p.partition for p in self._native.partitions_for(topic)}

    def metrics(self, raw: bool = False) -> dict[str, Any]:
        """Metric values as ``{group: {name: value}}`` (``raw=True``: the native ``"group:name"`` dict)."""
        flat = self._native.metrics()
        return dict(flat) if raw else nested_metrics(flat)

    def bootstrap_connected(self) -> bool:
        """Whether metadata was fetched from a bootstrap broker (asks for cluster metadata)."""
        try:
            self._native.partitions_for("__consumer_offsets", timeout=5.0)
        except KafkaError:
            return False
        return True

    # ------------------------------------------------------------------------------------ transactions
    def init_transactions(self) -> None:
        self._native.init_transactions()

    def begin_transaction(self) -> None:
        self._native.begin_transaction()

    def send_offsets_to_transaction(self, offsets: Mapping[Any, Any], consumer_group_id: Any) -> None:
        """Add consumed ``offsets`` to the transaction; ``consumer_group_id`` is a group id or a
        ``ConsumerGroupMetadata`` (from ``KafkaConsumer.group_metadata()``)."""
        from kafka_handoff.compat.kafka_python.structs import native_offset
        from kafka_handoff.types import ConsumerGroupMetadata

        meta = (
            consumer_group_id
            if isinstance(consumer_group_id, ConsumerGroupMetadata)
            else ConsumerGroupMetadata(str(consumer_group_id))
        )
        native = {TopicPartition(*tp): native_offset(om) for tp, om in offsets.items()}
        self._native.send_offsets_to_transaction(native, meta)

    def commit_transaction(self) -> None:
        self._native.commit_transaction()

    def abort_transaction(self) -> None:
        self._native.abort_transaction()

    def __enter__(self) -> KafkaProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
