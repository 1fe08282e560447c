"""The Delta sink on an object store: an S3 API served by moto's standalone server on loopback.

delta-rs reaches it through ``sink.storage_options`` (endpoint, plain HTTP, credentials, region) and commits
with S3 conditional puts (``AWS_CONDITIONAL_PUT = "etag"``): the pipeline runs end to end into
``s3://bucket/table`` exactly once, and a commit whose expected marks are stale is refused there as on a
local disk.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kafka_handoff.pipeline import testing as pt
from kafka_handoff.pipeline.config import parse_config
from kafka_handoff.pipeline.errors import MarkConflictError
from kafka_handoff.pipeline.sinks import MarkUpdate, make_sink
from kafka_handoff.pipeline.sinks.delta import DeltaSink
from kafka_handoff.pipeline.worker import Worker
from kafka_handoff.sample import generate_events
from kafka_handoff.types import TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """A moto S3 server on 127.0.0.1 and a bucket; yields delta-rs storage options for it."""
    pytest.importorskip("moto")
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    creds = {"aws_access_key_id": "test", "aws_secret_access_key": "test", "region_name": "us-east-1"}
    boto3.client("s3", endpoint_url=endpoint, **creds).create_bucket(Bucket="handoff-tests")
    try:
        yield {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_REGION": "us-east-1",
            "AWS_CONDITIONAL_PUT": "etag",
        }
    finally:
        server.stop()


def test_pipeline_writes_a_delta_table_on_s3_exactly_once(
    broker: Any, topic_factory: Any, spark: Any, s3: dict[str, str], tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(2, configs={"retention.ms": "-1"})
    events = generate_events(1500, seed=211, malformed_share=0.02, start_ms=time.time_ns() // 1_000_000)
    pt.produce(bootstrap, topic, events)
    table = f"s3://handoff-tests/{topic}"
    config = parse_config(
        {
            "kafka": {"topics": [topic], "bootstrap.servers": bootstrap, "group.id": f"g-{topic}"},
            "batch": {"max_records": 500, "max_interval_ms": 500},
            "transform": {"function": "kafka_handoff.pipeline.testing:records"},
            "sink": {"format": "delta", "path": table, "storage_options": s3},
        }
    )
    summary = Worker(config, spark=spark, max_records=1500, until_idle_s=60).run()
    assert summary.records_committed == 1500
    assert summary.batches_committed >= 3  # several conditional commits on the object store
    sink = make_sink(config.sink)
    assert pt.exactly_once_report(pt.valid_event_ids(events), pt.output_event_ids(sink.read_table())) == ""
    tps = [TopicPartition(topic, p) for p in (0, 1)]
    assert sum(m or 0 for m in sink.read_marks(tps).values()) == 1500


def test_a_stale_writer_is_refused_on_s3(s3: dict[str, str]) -> None:
    path = f"s3://handoff-tests/marks-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition("events", 0)
    first = DeltaSink(path, "app", storage_options=s3)
    zombie = DeltaSink(path, "app", storage_options=s3)
    rows = pa.table({"event_id": ["a", "b"]})
    first.commit(rows, {tp: MarkUpdate(None, 2)})
    # The zombie read "no mark" before the first commit: its commit must not land.
    with pytest.raises(MarkConflictError):
        zombie.commit(pa.table({"event_id": ["a", "b"]}), {tp: MarkUpdate(None, 2)})
    assert first.read_marks([tp]) == {tp: 2}
    assert first.read_table().num_rows == 2
