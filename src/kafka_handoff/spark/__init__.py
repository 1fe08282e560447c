"""``spark.read.format("kafka-handoff")`` / ``spark.readStream.format("kafka-handoff")``: Kafka as a Spark
data source read by kafka-handoff's consumer on the executors.

Spark's Kafka source's options and schema (``key``, ``value``, ``topic``, ``partition``, ``offset``,
``timestamp``, ``timestampType``, ``headers`` with ``includeHeaders``), plus ``groupId`` (each committed
micro-batch's offsets committed to that Kafka group, so lag tools see the job's progress) and
``startingOffsets = "group"``.  See docs/pipeline.md, "Reading Kafka from Spark".

Registration: :func:`register` (one call per session), or nothing at all where the package is installed --
Spark 4 looks for top-level modules named ``pyspark_*`` with a ``DefaultSource`` (``pyspark_kafka_handoff``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["NAME", "register"]

NAME = "kafka-handoff"


def register(spark: Any) -> str:
    """Register the ``kafka-handoff`` data source with ``spark`` (a SparkSession); returns its format name."""
    from kafka_handoff.spark.source import KafkaHandoffDataSource

    spark.dataSource.register(KafkaHandoffDataSource)
    return NAME
