"""A Kafka topic as the pipeline's sink, exactly once through producer transactions (KIP-98, KIP-447).

``[sink] format = "kafka"``, ``path = "<output topic>"``.  Each batch is one transaction of the sink's
transactional producer: the transform's output rows, the batch's dead-letter records when the dead-letter
target is a topic (:class:`TransactionalTopicDeadLetter`), and the input offsets
(``send_offsets_to_transaction`` with the worker's consumer group metadata).  So the *marks* of this sink are
the group's committed offsets, written in the same transaction as the data: a ``read_committed`` reader
sees a batch's output exactly when the group's offsets moved past its input.

The commit is conditional like every sink's: the stored marks (the committed offsets, read with
``require_stable``) must equal the batch's expected ones, and KIP-447 makes the offsets part fail for a
member that no longer owns the partitions (an older generation or member epoch).  Either way the
transaction is aborted -- nothing of the batch becomes visible -- and
:class:`~kafka_handoff.pipeline.errors.MarkConflictError` tells the worker to re-read from the marks.

Output rows: a ``value`` column (binary or string) and optionally ``key`` (binary or string), ``partition``
(int) and ``headers`` (a list of ``{key, value}`` structs) become the records' fields; any other table is
written as one JSON object per row (the value), keyed by its ``key`` column when there is one.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafka_handoff.errors import CommitFailedError, KafkaError
from kafka_handoff.pipeline.errors import MarkConflictError, SinkError
from kafka_handoff.pipeline.sinks.base import CommitInfo, MarkUpdate, Sink
from kafka_handoff.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

__all__ = ["KafkaSink", "TransactionalTopicDeadLetter"]

log = logging.getLogger(__name__)

_RECORD_COLUMNS = ("key", "value", "partition", "headers")


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return json.dumps(value, default=str).encode("utf-8")


class KafkaSink(Sink):
    kind = "kafka"

    def __init__(
        self,
        topic: str,
        app_id: str,
        *,
        group_id: str,
        client_config: Mapping[str, Any],
        producer_config: Mapping[str, Any] | None = None,
        transaction_timeout_ms: int = 60_000,
    ) -> None:
        super().__init__(topic, app_id)
        self.topic = topic
        self.group_id = group_id
        self._client_config = dict(client_config)
        # Any id unique to the worker does (KIP-447 fences zombies by the group's generation); a worker
        # restarted under the same member name (bind_consumer) fences its predecessor at once and aborts
        # the transaction it left open, instead of waiting for transaction.timeout.ms.
        self.transactional_id = f"handoff-{app_id}-{uuid.uuid4().hex[:12]}"
        self._producer_config = {
            **self._client_config,
            "transaction.timeout.ms": transaction_timeout_ms,
            **dict(producer_config or {}),
        }
        self._producer: Any = None
        self._lookup: Any = None
        self._lookup_lock = threading.Lock()
        self._group_metadata: Any = None
        self._open = False
        self._staged: list[tuple[frozenset[tuple[TopicPartition, int]], str, list[dict[str, Any]]]] = []
        self.transactions = 0

    # ------------------------------------------------------------------ wiring
    def bind_consumer(self, consumer: Any, member: str | None = None) -> None:
        """The worker's group member: its group metadata goes with every transaction's offsets; ``member``
        (the worker's name) makes the transactional id ``handoff-<app_id>-<member>``."""
        self._group_metadata = consumer._group_metadata_any_thread
        if member and self._producer is None:
            self.transactional_id = f"handoff-{self.app_id}-{member}"
        # init_transactions now, before the member gets partitions: it fences a predecessor with the same
        # id and aborts its open transaction, whose pending offsets would otherwise hold up the offset
        # fetch (require_stable) of the first assignment until transaction.timeout.ms.
        _ = self.producer

    @property
    def producer(self) -> Any:
        if self._producer is None:
            from kafka_handoff.producer import Producer

            producer = Producer({**self._producer_config, "transactional.id": self.transactional_id})
            producer.init_transactions()
            self._producer = producer
        return self._producer

    def _begin(self) -> None:
        if not self._open:
            self.producer.begin_transaction()
            self._open = True

    def stage_dead_letters(
        self, topic: str, ranges: Mapping[TopicPartition, tuple[int, int]], rows: list[dict[str, Any]]
    ) -> None:
        """Records for the dead-letter ``topic``, written by the commit of the batch with these ``ranges``
        (in its transaction); dropped if that batch never commits."""
        key = frozenset((tp, last + 1) for tp, (_, last) in ranges.items())
        self._staged.append((key, topic, rows))

    # ------------------------------------------------------------------ the contract
    def read_marks(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        parts = list(partitions)
        if not parts:
            return {}
        from kafka_handoff.consumer import Consumer

        with self._lookup_lock:  # the worker's main thread (assignments) and its Spark thread (commits)
            if self._lookup is None:
                # A consumer that never joins: only OffsetFetch (require_stable: waits for open transactions).
                self._lookup = Consumer(
                    {**self._client_config, "group.id": self.group_id, "enable.auto.commit": False}
                )
            committed = self._lookup.committed(parts, timeout=60)
        return {tp: (om.offset if om is not None else None) for tp, om in committed.items()}

    def commit(self, data: Any, updates: Mapping[TopicPartition, MarkUpdate]) -> CommitInfo:
        if self._group_metadata is None:
            raise SinkError(
                "the Kafka sink needs the worker's consumer (bind_consumer) to commit offsets", {}
            )
        key = frozenset((tp, u.new) for tp, u in updates.items())
        staged = [(topic, rows) for k, topic, rows in self._staged if k == key]
        self._staged = []
        stored = self.read_marks(updates)
        conflicts = {
            tp: (u.expected, stored.get(tp)) for tp, u in updates.items() if stored.get(tp) != u.expected
        }
        if conflicts:
            raise MarkConflictError(conflicts)
        producer = self.producer
        rows = 0
        try:
            self._begin()
            for topic, dead in staged:
                for record in dead:
                    producer.send(topic, record["value"], key=record["key"], headers=record["headers"],
                                  timestamp=record["timestamp"])  # fmt: skip
            rows = self._send_table(data)
            offsets = {tp: OffsetAndMetadata(u.new) for tp, u in updates.items()}
            meta: ConsumerGroupMetadata = self._group_metadata()
            producer.send_offsets_to_transaction(offsets, meta)
            producer.commit_transaction()
        except CommitFailedError as exc:
            # KIP-447: this member no longer owns (some of) the partitions.
            log.info("the group refused the batch's offsets (%s): aborting its transaction", exc)
            self._abort()
            raise MarkConflictError({tp: (u.expected, None) for tp, u in updates.items()}) from exc
        except KafkaError:
            self._abort()
            raise
        finally:
            self._open = False
        self.transactions += 1
        return CommitInfo(version=self.transactions, rows=rows, files=0)

    def _abort(self) -> None:
        if self._producer is None:
            return
        try:
            self._producer.abort_transaction()
        except KafkaError as exc:
            log.warning("aborting the Kafka sink's transaction failed: %s", exc)

    def _send_table(self, data: Any) -> int:
        if data is None:
            return 0
        names = list(data.column_names)
        producer = self.producer
        topic = self.topic
        if "value" in names and set(names) <= set(_RECORD_COLUMNS):
            for row in data.to_pylist():
                headers = row.get("headers")
                producer.send(
                    topic,
                    _as_bytes(row["value"]),
                    key=_as_bytes(row.get("key")),
                    partition=row.get("partition"),
                    headers=[(h["key"], _as_bytes(h["value"])) for h in headers] if headers else None,
                )
        else:
            for row in data.to_pylist():
                producer.send(topic, _as_bytes(row), key=_as_bytes(row.get("key")))
        return int(data.num_rows)

    def read_table(self, columns: Sequence[str] | None = None) -> Any:
        """Every committed record of the topic (read_committed, up to the last stable offsets): columns
        partition, offset, timestamp, key, value -- or, when every value is a JSON object (rows the sink
        wrote as JSON), partition, offset and the objects' fields."""
        import pyarrow as pa

        from kafka_handoff.consumer import Consumer

        rows: dict[str, list[Any]] = {"partition": [], "offset": [], "timestamp": [], "key": [], "value": []}
        with Consumer(
            {**self._client_config, "isolation.level": "read_committed", "enable.auto.commit": False}
        ) as c:
            parts = [TopicPartition(self.topic, p.partition) for p in c.partitions_for(self.topic) or ()]
            if not parts:
                return pa.table({})
            c.assign(parts)
            c.seek_to_beginning(parts)
            ends = c.end_offsets(parts)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(c.position(tp) < ends[tp] for tp in parts):
                for r in c.poll(0.2):
                    rows["partition"].append(r.partition)
                    rows["offset"].append(r.offset)
                    rows["timestamp"].append(r.timestamp)
                    rows["key"].append(r.key)
                    rows["value"].append(r.value)
        objects = _json_objects(rows["value"])
        if objects is not None:
            table = pa.Table.from_pylist(
                [
                    {"partition": p, "offset": o, **obj}
                    for p, o, obj in zip(rows["partition"], rows["offset"], objects, strict=True)
                ]
            )
            return table.select(list(columns)) if columns else table
        table = pa.table(
            {
                "partition": pa.array(rows["partition"], pa.int32()),
                "offset": pa.array(rows["offset"], pa.int64()),
                "timestamp": pa.array(rows["timestamp"], pa.int64()),
                "key": pa.array(rows["key"], pa.binary()),
                "value": pa.array(rows["value"], pa.binary()),
            }
        )
        return table.select(list(columns)) if columns else table

    def exists(self) -> bool:
        return True

    def describe(self) -> str:
        return f"Kafka topic {self.topic!r} (transactional)"

    def close(self) -> None:
        for client in (self._producer, self._lookup):
            if client is not None:
                try:
                    client.close(10)
                except Exception:
                    log.debug("closing a Kafka sink client failed", exc_info=True)
        self._producer = self._lookup = None


def _json_objects(values: list[Any]) -> list[dict[str, Any]] | None:
    if not values:
        return None
    out = []
    for value in values:
        try:
            obj = json.loads(value) if value is not None else None
        except ValueError:
            return None
        if not isinstance(obj, dict):
            return None
        out.append(obj)
    return out


class TransactionalTopicDeadLetter:
    """The dead-letter topic inside the Kafka sink's transactions: a batch's malformed records are written
    by the same transaction as its output and offsets, so they appear exactly once (or not at all)."""

    policy = "dead-letter-topic"

    def __init__(self, topic: str, sink: KafkaSink) -> None:
        self.topic = topic
        self.sink = sink

    def handle(
        self, rejected: Any, ranges: Mapping[TopicPartition, tuple[int, int]], describe_batch: str
    ) -> int:
        if not rejected.num_rows:
            return 0
        from kafka_handoff.pipeline.rejects import normalise_rejects

        records = []
        for row in normalise_rejects(rejected).to_pylist():
            ts = row["timestamp"]
            records.append(
                {
                    "key": row["key"],
                    "value": row["value"],
                    "timestamp": None if ts is None else int(ts.timestamp() * 1000),
                    "headers": [
                        ("handoff.source.topic", str(row["topic"]).encode()),
                        ("handoff.source.partition", str(row["partition"]).encode()),
                        ("handoff.source.offset", str(row["offset"]).encode()),
                        ("handoff.error", str(row["error"]).encode()),
                    ],
                }
            )
        self.sink.stage_dead_letters(self.topic, ranges, records)
        return len(records)

    def close(self) -> None:
        pass
