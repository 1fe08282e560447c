"""Pipeline config: defaults, overrides, environment expansion, and errors that name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kafka_handoff.errors import ConfigError
from kafka_handoff.pipeline.config import apply_overrides, load_config, parse_config

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clickstream.toml"


def minimal(**sections: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "kafka": {"topics": ["ev"], "bootstrap.servers": "h:9092", "group.id": "g"},
        "transform": {"function": "mod:fn"},
        "sink": {"path": "out"},
    }
    for name, value in sections.items():
        raw[name] = {**raw.get(name, {}), **value}
    return raw


def test_defaults() -> None:
    cfg = parse_config(minimal())
    assert cfg.topics == ("ev",)
    assert cfg.consumer["group.protocol"] == "consumer"
    assert cfg.consumer["enable.auto.commit"] is False
    assert cfg.consumer["auto.offset.reset"] == "earliest"
    assert cfg.consumer["max.poll.records"] == 10000
    assert cfg.batch.max_records == 500_000 and cfg.batch.max_interval_ms == 2000
    assert cfg.spark.master == "local[2]" and cfg.spark.remote is None
    assert cfg.sink.format == "delta" and cfg.sink.app_id == "g"
    assert cfg.errors.malformed == "skip"
    assert cfg.name == "g"
    assert cfg.transform.native_json is True
    assert cfg.spark.handover == "auto" and cfg.spark.spool_dir is None and cfg.spark.local


def test_the_handover_and_its_spool_directory() -> None:
    cfg = parse_config(minimal(spark={"handover": "arrow"}))
    assert cfg.spark.handover == "arrow"
    cluster = {"master": "spark://h:7077", "handover": "files", "spool_dir": "/shared"}
    cfg = parse_config(minimal(spark=cluster))
    assert (cfg.spark.handover, cfg.spark.spool_dir, cfg.spark.local) == ("files", "/shared", False)
    assert not parse_config(minimal(spark={"remote": "sc://h:15002"})).spark.local


def test_the_native_json_parse_can_be_switched_off() -> None:
    assert parse_config(minimal(transform={"native_json": False})).transform.native_json is False
    assert parse_config(minimal(transform={"native_json": "false"})).transform.native_json is False


def test_small_batches_cap_max_poll_records() -> None:
    assert parse_config(minimal(batch={"max_records": 500})).consumer["max.poll.records"] == 500
    explicit = minimal(batch={"max_records": 500})
    explicit["kafka"]["max.poll.records"] = 2000
    assert parse_config(explicit).consumer["max.poll.records"] == 2000


def test_nested_tables_become_dotted_kafka_names() -> None:
    raw = minimal()
    raw["kafka"] = {
        "topics": "ev",
        "bootstrap": {"servers": "h:1"},
        "group": {"id": "g2", "protocol": "classic"},
    }
    cfg = parse_config(raw)
    assert cfg.bootstrap_servers == "h:1" and cfg.group_id == "g2"
    assert cfg.consumer["group.protocol"] == "classic"
    assert cfg.consumer["partition.assignment.strategy"] == "cooperative-sticky"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            {"errors": {"malformed": "drop"}},
            "errors.malformed: 'drop' is not allowed (allowed: dead-letter-table",
        ),
        ({"errors": {"malformed": "dead-letter-table"}}, "errors.dead_letter_path: required"),
        ({"errors": {"malformed": "dead-letter-topic"}}, "errors.dead_letter_topic: required"),
        ({"sink": {"format": "csv"}}, "sink.format: 'csv' is not allowed (allowed: delta, parquet, kafka)"),
        ({"sink": {"format": "parquet", "path": "s3://b/t"}}, "sink.path"),
        ({"batch": {"max_records": 0}}, "batch.max_records: expected an integer >= 1"),
        ({"batch": {"max_recs": 5}}, "batch.max_recs: unknown key"),
        ({"spark": {"master": "local[x]"}}, "spark.master"),
        ({"spark": {"master": "local[2]", "remote": "sc://h:15002"}}, "spark.remote: set either"),
        ({"spark": {"remote": "http://h"}}, "spark.remote: expected a Spark Connect URL"),
        ({"transform": {"function": "no_colon"}}, "transform.function: expected 'module:function'"),
        (
            {"spark": {"handover": "socket"}},
            "spark.handover: 'socket' is not allowed (allowed: auto, files, arrow)",
        ),
        (
            {"spark": {"master": "spark://h:7077", "handover": "files"}},
            "spark.handover: 'files' with a cluster or Spark Connect needs spark.spool_dir",
        ),
        (
            {"transform": {"native_json": "yes"}},
            "transform.native_json: 'yes' is not allowed (allowed: true, false)",
        ),
        ({"kafka": {"enable.auto.commit": True}}, "kafka.enable.auto.commit: must be false"),
        ({"kafka": {"group.protocol": "eager"}}, "group.protocol"),
        ({"kafka": {"topics": []}}, "kafka.topics: expected a non-empty list"),
        ({"nonsense": {"a": 1}}, "[nonsense]: unknown section"),
        (
            {
                "sink": {"format": "kafka", "path": "out"},
                "errors": {"malformed": "dead-letter-table", "dead_letter_path": "d"},
            },
            "errors.malformed: 'dead-letter-table' cannot join the Kafka sink's transactions",
        ),
        (
            {"sink": {"format": "delta", "producer": {"linger.ms": 5}}},
            "sink.producer: only for sink.format = 'kafka'",
        ),
    ],
)
def test_errors_name_the_key(change: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(minimal(**change))
    assert needle in str(info.value)


def test_kafka_sink_config_and_its_dead_letter_topic_join_its_transactions() -> None:
    from kafka_handoff.pipeline.deadletter import make_dead_letter
    from kafka_handoff.pipeline.sinks import KafkaSink, make_sink
    from kafka_handoff.pipeline.sinks.kafka import TransactionalTopicDeadLetter

    cfg = parse_config(
        minimal(
            sink={"format": "kafka", "path": "enriched", "producer": {"transaction.timeout.ms": 10000}},
            errors={"malformed": "dead-letter-topic", "dead_letter_topic": "dlq"},
        )
    )
    assert cfg.sink.format == "kafka" and cfg.sink.producer == {"transaction.timeout.ms": 10000}
    sink = make_sink(cfg.sink, pipeline=cfg)  # no connection until used
    assert isinstance(sink, KafkaSink) and sink.topic == "enriched" and sink.group_id == cfg.group_id
    dead = make_dead_letter(cfg, sink)
    assert isinstance(dead, TransactionalTopicDeadLetter) and dead.topic == "dlq"
    with pytest.raises(ConfigError, match="needs the pipeline's"):
        make_sink(cfg.sink)


def test_missing_required_kafka_keys() -> None:
    raw = minimal()
    del raw["kafka"]["group.id"]
    with pytest.raises(ConfigError, match=r"kafka.group.id: required"):
        parse_config(raw)


def test_environment_expansion(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = minimal(kafka={"bootstrap.servers": "${PIPE_TEST_BS:-fallback:1}"})
    monkeypatch.delenv("PIPE_TEST_BS", raising=False)
    assert parse_config(raw).bootstrap_servers == "fallback:1"
    monkeypatch.setenv("PIPE_TEST_BS", "env:2")
    assert parse_config(raw).bootstrap_servers == "env:2"
    with pytest.raises(ConfigError, match="PIPE_TEST_UNSET is not set"):
        parse_config(minimal(sink={"path": "${PIPE_TEST_UNSET}"}))


def test_overrides() -> None:
    raw = apply_overrides(
        minimal(),
        [
            "kafka.bootstrap.servers=other:9",
            'kafka.topics=["a", "b"]',
            "batch.max_records=123",
            "spark.conf.spark.driver.memory=4g",
            "sink.format=parquet",
            "errors.producer.linger.ms=5",
        ],
    )
    cfg = parse_config(raw)
    assert cfg.bootstrap_servers == "other:9"
    assert cfg.topics == ("a", "b")
    assert cfg.batch.max_records == 123
    assert cfg.spark.conf["spark.driver.memory"] == "4g"
    assert cfg.sink.format == "parquet"
    assert cfg.errors.producer == {"linger.ms": 5}
    with pytest.raises(ConfigError, match=r"expected section\.key=value"):
        apply_overrides(minimal(), ["nonsense"])


def test_the_example_config_loads_and_resolves_the_transform_path() -> None:
    cfg = load_config(EXAMPLE, ["kafka.bootstrap.servers=h:1"])
    assert cfg.transform.function == "clickstream:transform"
    assert cfg.transform.path == (str(EXAMPLE.parent),)
    assert cfg.errors.malformed == "dead-letter-table"
    assert cfg.show.group_by == ("page", "minute")


def test_unreadable_or_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read pipeline config"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[kafka\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
