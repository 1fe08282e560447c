"""The Avro demo's transform: decode registry-framed Avro clickstream events, count page views per page per
minute (the same output as ``clickstream.py``, which parses JSON).

Input: the pipeline's Kafka DataFrame with values written by ``handoff produce-sample --format avro`` (the
Confluent framing: magic byte 0, the writer schema's id, the Avro record).  :func:`parse_avro` takes the
reader schema (``transform.reader_schema`` = ``clickstream.avsc``) and the registry (``[schema_registry]``)
from ``clickstream-avro.toml``; records it cannot decode come back as rejected, each with its reason, and
the pipeline routes them per ``errors.malformed``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from kafka_handoff.pipeline.transform import TransformResult, parse_avro


def transform(df: Any) -> TransformResult:
    events, rejected = parse_avro(df)
    views = (
        events.where(F.col("action") == "view")
        .select("page", F.date_trunc("minute", F.timestamp_millis("timestamp")).alias("minute"))
        .groupBy("page", "minute")
        .agg(F.count(F.lit(1)).cast("long").alias("views"))
    )
    return TransformResult(views, rejected)
