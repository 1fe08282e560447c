"""The ``kafka-handoff`` Spark data source (``pyspark.sql.datasource``, Spark 4).

``spark.read.format("kafka-handoff")`` (:class:`BatchReader`) and ``spark.readStream.format("kafka-handoff")``
(:class:`StreamReader`): Spark's Kafka source's options and schema; the driver plans offset ranges with our
admin client (:mod:`~kafka_handoff.spark.plan`), executors read them with our consumer
(:mod:`~kafka_handoff.spark.read`).  Stream offsets are Spark's JSON shape, ``{"topic": {"0": 42}}`` (the
next offset to read per partition), so a checkpoint reads like one of Spark's own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from kafka_handoff.spark.options import SourceOptions, parse_options, partition_json
from kafka_handoff.spark.plan import OffsetRange, Offsets, limit_offsets, split_ranges
from kafka_handoff.spark.read import read_range, spark_schema
from kafka_handoff.types import TopicPartition

__all__ = ["BatchReader", "KafkaHandoffDataSource", "StreamReader"]

NAME = "kafka-handoff"


def _from_json(offsets: dict[str, Any]) -> dict[TopicPartition, int]:
    return {TopicPartition(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[Any]:
    if isinstance(partition, OffsetRange):  # Spark hands an InputPartition(None) when there is nothing
        yield from read_range(options, partition)


class KafkaHandoffDataSource(DataSource):
    """``format("kafka-handoff")``: Kafka topics as a DataFrame, read by kafka-handoff's consumer."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        headers = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        schema: StructType = spark_schema(headers)
        return schema

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(parse_options(self.options, streaming=True))


class BatchReader(DataSourceReader):
    """``spark.read``: ``startingOffsets`` (default earliest) to ``endingOffsets`` (default latest), fixed
    when the query is planned."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        offsets = Offsets(o)
        try:
            tps = offsets.partitions()
            start = offsets.resolve(o.starting, tps, which="starting")
            end = offsets.resolve(o.ending, tps, which="ending")
            start = offsets.check_loss(start, offsets.earliest(tps))
        finally:
            offsets.close()
        ranges = [OffsetRange(tp.topic, tp.partition, start[tp], end[tp]) for tp in tps]
        return split_ranges(ranges, o.min_partitions, o.max_records_per_partition)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: micro-batches from ``startingOffsets`` on; ``maxOffsetsPerTrigger`` caps a
    micro-batch (as a :class:`ReadMaxRows` limit); with ``groupId`` each committed micro-batch's end
    offsets are committed to that Kafka group."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._offsets = Offsets(options)
        self._target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow's end

    # ------------------------------------------------------------------------------------ offsets
    def initialOffset(self) -> dict[str, Any]:
        tps = self._offsets.partitions()
        return partition_json(self._offsets.resolve(self.options.starting, tps, which="starting"))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def _start_with_new_partitions(
        self, start: dict[str, Any]
    ) -> tuple[dict[TopicPartition, int], list[Any]]:
        """``start`` plus partitions that appeared since (they start at their earliest offset)."""
        begin = _from_json(start)
        tps = self._offsets.partitions()
        new = [tp for tp in tps if tp not in begin]
        begin.update(self._offsets.earliest(new))
        return begin, tps

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin, tps = self._start_with_new_partitions(start)
        latest = self._target if self._target is not None else self._offsets.latest(tps)
        latest = {tp: max(off, begin.get(tp, off)) for tp, off in latest.items()}
        if isinstance(limit, ReadMaxRows):
            end = limit_offsets(begin, latest, int(limit.max_rows))
        else:
            end = {tp: latest.get(tp, off) for tp, off in begin.items()}
        for tp, off in begin.items():  # partitions that went away keep their offset
            end.setdefault(tp, off)
        return partition_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return partition_json(self._offsets.latest(self._offsets.partitions()))

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._offsets.latest(self._offsets.partitions())

    # ------------------------------------------------------------------------------------ batches
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = _from_json(start)
        stop = _from_json(end)
        new = [tp for tp in stop if tp not in begin]
        begin.update(self._offsets.earliest(new))
        changed = {tp: off for tp, off in begin.items() if stop.get(tp, off) > off}
        if changed:
            begin.update(self._offsets.check_loss(changed, self._offsets.earliest(changed)))
        ranges = [OffsetRange(tp.topic, tp.partition, begin[tp], stop[tp]) for tp in sorted(stop)]
        return split_ranges(ranges, self.options.min_partitions, self.options.max_records_per_partition)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._offsets.commit(_from_json(end))

    def stop(self) -> None:
        self._offsets.close()
