"""Where malformed records go (``errors.malformed``), behind one small interface.

* :class:`TableDeadLetter` -- a second table of the sink's format.  Exactly-once like the output: its
  marks (same app ids) say which offsets it already holds, rows below a mark are dropped before the write,
  and the write is conditional on the marks it read (a concurrent writer makes it re-read and retry).
* :class:`TopicDeadLetter` -- a Kafka topic, through the project's producer (``kafka_handoff.producer``).
  At-least-once: a crash between the produce and the sink commit re-sends the batch's rejects; each
  record carries ``handoff.source.*`` headers (topic, partition, offset) so readers can de-duplicate.
* :class:`CountingDeadLetter` -- counted (and the first ones logged with partition and offset), skipped.
* :class:`FailingDeadLetter` -- the batch fails, naming the malformed records; nothing is committed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

import pyarrow.compute as pc

from kafka_handoff.pipeline.config import PipelineConfig
from kafka_handoff.pipeline.errors import MalformedRecordError, MarkConflictError, SinkError
from kafka_handoff.pipeline.rejects import normalise_rejects
from kafka_handoff.pipeline.sinks import MarkUpdate, Sink, make_sink
from kafka_handoff.security import connection_settings
from kafka_handoff.types import TopicPartition

__all__ = [
    "CountingDeadLetter",
    "DeadLetter",
    "FailingDeadLetter",
    "TableDeadLetter",
    "TopicDeadLetter",
    "describe_rejects",
    "make_dead_letter",
]

log = logging.getLogger(__name__)


def describe_rejects(rejected: Any, limit: int = 5) -> str:
    """``events-3@1234 (invalid JSON ...), ...`` for the first ``limit`` rows."""
    rows = rejected.slice(0, limit).to_pylist()
    text = ", ".join(f"{r['topic']}-{r['partition']}@{r['offset']} ({r['error']})" for r in rows)
    more = rejected.num_rows - len(rows)
    return text + (f" and {more} more" if more > 0 else "")


class DeadLetter(Protocol):
    """What the worker calls for a batch's malformed records (``rejected``: an Arrow table with at least
    topic, partition, offset, error).  Returns how many records it stored; raises to fail the batch."""

    policy: str

    def handle(
        self,
        rejected: Any,
        ranges: Mapping[TopicPartition, tuple[int, int]],
        describe_batch: str,
    ) -> int: ...

    def close(self) -> None: ...


class CountingDeadLetter:
    policy = "skip"

    def __init__(self, log_first: int = 3) -> None:
        self.log_first = log_first

    def handle(
        self, rejected: Any, ranges: Mapping[TopicPartition, tuple[int, int]], describe_batch: str
    ) -> int:
        if rejected.num_rows:
            log.warning(
                "skipping %d malformed record(s) in %s: %s",
                rejected.num_rows,
                describe_batch,
                describe_rejects(rejected, self.log_first),
            )
        return 0

    def close(self) -> None:
        pass


class FailingDeadLetter:
    policy = "fail"

    def handle(
        self, rejected: Any, ranges: Mapping[TopicPartition, tuple[int, int]], describe_batch: str
    ) -> int:
        if rejected.num_rows:
            raise MalformedRecordError(
                f"{rejected.num_rows} malformed record(s) in {describe_batch} and errors.malformed = 'fail': "
                f"{describe_rejects(rejected)}; nothing was committed for this batch",
                ranges,
            )
        return 0

    def close(self) -> None:
        pass


class TableDeadLetter:
    policy = "dead-letter-table"

    def __init__(self, sink: Sink, attempts: int = 20) -> None:
        self.sink = sink
        self.attempts = attempts

    def handle(
        self, rejected: Any, ranges: Mapping[TopicPartition, tuple[int, int]], describe_batch: str
    ) -> int:
        if not rejected.num_rows:
            return 0  # nothing to de-duplicate later either: no write, marks unchanged
        table = normalise_rejects(rejected)
        for _ in range(self.attempts):
            marks = self.sink.read_marks(ranges)
            keep = None
            for tp in ranges:
                mark = marks[tp]
                in_tp = pc.and_(
                    pc.equal(table["topic"], tp.topic), pc.equal(table["partition"], tp.partition)
                )
                cond = in_tp if mark is None else pc.and_(in_tp, pc.greater_equal(table["offset"], mark))
                keep = cond if keep is None else pc.or_(keep, cond)
            fresh = table.filter(keep) if keep is not None else table
            updates = {
                tp: MarkUpdate(marks[tp], max(last + 1, marks[tp] or 0)) for tp, (_, last) in ranges.items()
            }
            try:
                self.sink.commit(fresh, updates)
            except MarkConflictError:
                continue  # a concurrent dead-letter write: re-read the marks and filter again
            except Exception as exc:
                raise SinkError(
                    f"writing {fresh.num_rows} malformed record(s) of {describe_batch} to the dead-letter "
                    f"table {self.sink.path} failed: {exc}",
                    ranges,
                ) from exc
            return int(fresh.num_rows)
        raise SinkError(
            f"the dead-letter table {self.sink.path} kept changing under {describe_batch}", ranges
        )

    def close(self) -> None:
        pass


class TopicDeadLetter:
    policy = "dead-letter-topic"

    def __init__(self, topic: str, producer_config: Mapping[str, Any], flush_timeout: float = 60.0) -> None:
        from kafka_handoff.producer import Producer

        self.topic = topic
        self.flush_timeout = flush_timeout
        self.producer = Producer(dict(producer_config))

    def handle(
        self, rejected: Any, ranges: Mapping[TopicPartition, tuple[int, int]], describe_batch: str
    ) -> int:
        if not rejected.num_rows:
            return 0
        table = normalise_rejects(rejected)
        futures = []
        for row in table.to_pylist():
            ts = row["timestamp"]
            headers = [
                ("handoff.source.topic", str(row["topic"]).encode()),
                ("handoff.source.partition", str(row["partition"]).encode()),
                ("handoff.source.offset", str(row["offset"]).encode()),
                ("handoff.error", str(row["error"]).encode()),
            ]
            futures.append(
                self.producer.send(
                    self.topic,
                    row["value"],
                    key=row["key"],
                    headers=headers,
                    timestamp=None if ts is None else int(ts.timestamp() * 1000),
                )
            )
        try:
            self.producer.flush(self.flush_timeout)
            for fut in futures:
                fut.result(0)
        except Exception as exc:
            raise SinkError(
                f"sending {len(futures)} malformed record(s) of {describe_batch} to the dead-letter topic "
                f"{self.topic!r} failed: {exc}",
                ranges,
            ) from exc
        return len(futures)

    def close(self) -> None:
        try:
            self.producer.close(10)
        except Exception:
            log.debug("closing the dead-letter producer failed", exc_info=True)


def make_dead_letter(config: PipelineConfig, sink: Sink | None = None) -> DeadLetter:
    """The dead-letter target of ``config``; with a Kafka ``sink`` the dead-letter topic joins its
    transactions (exactly once)."""
    policy = config.errors.malformed
    if policy == "skip":
        return CountingDeadLetter()
    if policy == "fail":
        return FailingDeadLetter()
    if policy == "dead-letter-table":
        assert config.errors.dead_letter_path is not None
        return TableDeadLetter(make_sink(config.sink, config.errors.dead_letter_path))
    assert config.errors.dead_letter_topic is not None
    from kafka_handoff.pipeline.sinks.kafka import KafkaSink, TransactionalTopicDeadLetter

    if isinstance(sink, KafkaSink):
        return TransactionalTopicDeadLetter(config.errors.dead_letter_topic, sink)
    # The consumer's connection and security settings ([kafka]) apply to the dead-letter producer too.
    producer = {
        "bootstrap.servers": config.bootstrap_servers,
        **connection_settings(config.consumer),
        **config.errors.producer,
    }
    return TopicDeadLetter(config.errors.dead_letter_topic, producer)
