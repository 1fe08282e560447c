"""The demo's transform: parse clickstream JSON, count page views per page per minute.

Input: the pipeline's Kafka DataFrame (topic, partition, offset, timestamp, key, value, headers) with
values written by ``handoff produce-sample``::

    {"event_id": "e0-000000017", "user": "user-0042", "session": "s-0042-3", "page": "/products/12",
     "action": "view", "timestamp": 1700000001234}

Output: one row per (page, minute) of this micro-batch with the number of ``view`` events, so the table
holds partial counts; ``handoff pipeline show`` sums them per (page, minute) (``[show]`` in
``clickstream.toml``).  Records that are not JSON, or lack a field, are returned as rejected: the
pipeline routes them per ``errors.malformed``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from kafka_handoff.pipeline.transform import TransformResult, parse_json

SCHEMA = "event_id STRING, user STRING, session STRING, page STRING, action STRING, timestamp LONG"
REQUIRED = ("event_id", "user", "session", "page", "action", "timestamp")


def transform(df: Any) -> TransformResult:
    events, rejected = parse_json(df, SCHEMA, required=REQUIRED)
    views = (
        events.where(F.col("action") == "view")
        .select("page", F.date_trunc("minute", F.timestamp_millis("timestamp")).alias("minute"))
        .groupBy("page", "minute")
        .agg(F.count(F.lit(1)).cast("long").alias("views"))
    )
    return TransformResult(views, rejected)
