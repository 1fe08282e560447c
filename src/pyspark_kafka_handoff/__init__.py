"""Spark 4 discovers Python data sources in installed top-level modules named ``pyspark_*`` that define
``DefaultSource``: this one makes ``format("kafka-handoff")`` available without
``kafka_handoff.spark.register(spark)``."""

from kafka_handoff.spark.source import KafkaHandoffDataSource as DefaultSource

__all__ = ["DefaultSource"]
