"""Registry-framed Avro through the pipeline: the real broker, the real Schema Registry (the
``schema_registry`` fixture: Apicurio Registry started by the project's tooling), a real local Spark.

Clickstream events are written with our ``AvroSerializer`` (the schema registered in the registry), some of
them malformed as ``produce-sample --format avro`` makes them (not registry-framed, or cut short), plus a
poison record naming a schema id the registry does not have.  ``function = "parse_avro"`` (the built-in
transform: the decoded events themselves) runs in two workers one after the other (the first stops halfway):
every well-formed event is in the sink exactly once, every bad record is in the dead-letter table once with
the reason that names what is wrong, and the group's committed offsets reach the end of the topic.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from kafka_handoff.pipeline import load_config, run_worker
from kafka_handoff.pipeline import testing as pt
from kafka_handoff.pipeline.avro import frame
from kafka_handoff.pipeline.demo import avro_encoder
from kafka_handoff.pipeline.show import read_output
from kafka_handoff.pipeline.worker import Worker
from kafka_handoff.sample import avro_value, generate_events
from kafka_handoff.schema_registry import SchemaRegistryClient

pytestmark = [pytest.mark.integration, pytest.mark.spark]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clickstream-avro.toml"
NO_RETENTION = {"retention.ms": "-1"}


@pytest.fixture
def registry_url(schema_registry: str) -> str:
    """The real registry's URL (tests/conftest.py's ``schema_registry``: Apicurio Registry started by the
    project's tooling, or $HANDOFF_SCHEMA_REGISTRY_URL)."""
    return schema_registry


def test_avro_records_reach_the_sink_exactly_once_and_poison_the_dead_letter_table(
    broker: Any, topic_factory: Any, spark: Any, tmp_path: Path, registry_url: str
) -> None:
    topic = topic_factory(3, configs=NO_RETENTION)
    encode = avro_encoder(SchemaRegistryClient({"url": registry_url}), topic)
    events = generate_events(700, seed=29, malformed_share=0.05, start_ms=time.time_ns() // 1_000_000)
    records = [dataclasses.replace(e, value=avro_value(e, encode)) for e in events]
    poison = dataclasses.replace(records[0], index=-1, value=frame(987654, b"\x02x"), malformed="unknown_id")
    records.insert(350, poison)
    pt.produce(broker.bootstrap_servers, topic, records)
    config = load_config(
        EXAMPLE,
        [
            f"kafka.bootstrap.servers={broker.bootstrap_servers}",
            f'kafka.topics=["{topic}"]',
            f"kafka.group.id=g-{topic}",
            "transform.function=parse_avro",
            f"schema_registry.url={registry_url}",
            f"sink.path={tmp_path / 'out'}",
            f"errors.dead_letter_path={tmp_path / 'dead'}",
            "batch.adaptive=false",
            "batch.max_records=400",
            "batch.max_interval_ms=500",
            "batch.overlap=false",  # the first worker stops after its first batch
        ],
    )
    first = Worker(config, spark=spark, max_records=300, until_idle_s=30).run()
    assert 0 < first.records_committed <= len(records)  # (a slow Spark may let it take all of them)
    second = run_worker(config, spark=spark, until_idle_s=3)
    assert second.status == "idle"
    assert first.records_committed + second.records_committed == len(records)

    out = read_output(config)
    good = [e for e in events if not e.malformed]
    assert Counter(out.column("event_id").to_pylist()) == Counter(
        e.event["event_id"] for e in good if e.event
    )
    sample = good[0].event
    assert sample is not None
    row = out.filter(pc.equal(out.column("event_id"), sample["event_id"])).to_pylist()[0]
    assert {k: row[k] for k in sample} == sample

    dead = read_output(config, dead_letter=True)
    errors = dict(zip(dead.column("value").to_pylist(), dead.column("error").to_pylist(), strict=True))
    bad = [r for r in records if r.malformed]
    assert Counter(dead.column("value").to_pylist()) == Counter(r.value for r in bad)  # each once
    assert errors[poison.value].startswith("unknown schema id 987654: ")
    for r in bad:
        if r.malformed == "invalid_json" and len(r.value) < 5:
            assert errors[r.value].startswith("not registry-framed: shorter than the 5-byte header")
        elif r.malformed == "invalid_json":
            assert errors[r.value] == "not registry-framed: magic byte 0x7b, expected 0x00"
        elif r.malformed == "missing_field":
            assert errors[r.value].startswith("truncated Avro payload: the value ends inside field ")
    assert first.malformed + second.malformed == len(bad)
