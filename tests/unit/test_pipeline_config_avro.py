"""The pipeline config's keys for parse_avro: transform.reader_schema / reader_subject, [schema_registry], the
``parse_avro`` shorthand, client.json's ``schema.registry.url``; errors name the key, secrets stay hidden."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kafka_handoff.errors import ConfigError
from kafka_handoff.pipeline.config import load_config, parse_config

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REGISTRY = {"url": "http://127.0.0.1:8081"}


def minimal(**sections: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "kafka": {"topics": ["ev"], "bootstrap.servers": "h:9092", "group.id": "g"},
        "transform": {"function": "mod:fn"},
        "sink": {"path": "out"},
    }
    for name, value in sections.items():
        raw[name] = {**raw.get(name, {}), **value}
    return raw


def test_the_avro_example_config() -> None:
    cfg = load_config(EXAMPLES / "clickstream-avro.toml")
    assert cfg.transform.function == "clickstream_avro:transform"
    assert cfg.transform.reader_schema == str(EXAMPLES / "clickstream.avsc")
    assert cfg.schema_registry["url"].startswith("http://")


def test_parse_avro_is_a_builtin_transform_needing_a_reader_schema_and_a_registry() -> None:
    cfg = parse_config(minimal(transform={"function": "parse_avro", "reader_subject": "ev-value"},
                               schema_registry=REGISTRY))  # fmt: skip
    assert cfg.transform.function == "kafka_handoff.pipeline.transform:parse_avro"
    assert cfg.transform.reader_subject == "ev-value"
    with pytest.raises(ConfigError, match=r"^transform\.reader_schema: parse_avro needs a reader schema"):
        parse_config(minimal(transform={"function": "parse_avro"}, schema_registry=REGISTRY))
    with pytest.raises(ConfigError, match=r"^schema_registry\.url: required by parse_avro"):
        parse_config(minimal(transform={"function": "parse_avro", "reader_subject": "s"}))
    with pytest.raises(ConfigError, match=r"^schema_registry\.url: required by transform\.reader_subject"):
        parse_config(minimal(transform={"reader_subject": "s"}))


def test_reader_schema_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^transform\.reader_schema: 'nope\.avsc': no such file"):
        parse_config(minimal(transform={"reader_schema": "nope.avsc"}), source=tmp_path / "p.toml")
    (tmp_path / "r.avsc").write_text("{}")
    with pytest.raises(ConfigError, match=r"^transform\.reader_schema: set either"):
        both = {"reader_schema": "r.avsc", "reader_subject": "s"}
        parse_config(minimal(transform=both, schema_registry=REGISTRY), source=tmp_path / "p.toml")
    cfg = parse_config(minimal(transform={"reader_schema": "r.avsc"}), source=tmp_path / "p.toml")
    assert cfg.transform.reader_schema == str(tmp_path / "r.avsc")


def test_schema_registry_settings() -> None:
    with pytest.raises(ConfigError, match=r"^schema_registry\.url: expected http\(s\)://"):
        parse_config(minimal(schema_registry={"url": "ftp://x"}))
    with pytest.raises(ConfigError, match=r"^schema_registry\.timeout: expected a string"):
        parse_config(minimal(schema_registry={**REGISTRY, "timeout": [1]}))
    cfg = parse_config(minimal(schema_registry={"schema.registry.url": "https://r:8081",
                                                "basic.auth.user.info": "me:s3cret"}))  # fmt: skip
    assert dict(cfg.schema_registry) == {"url": "https://r:8081", "basic.auth.user.info": "me:s3cret"}
    assert "s3cret" not in repr(cfg) and "s3cret" not in str(cfg.schema_registry)


def test_client_json_registry_settings_go_to_the_schema_registry_section() -> None:
    settings = {
        "security.protocol": "PLAINTEXT",
        "schema.registry.url": "http://127.0.0.1:9999/apis/ccompat/v7",
    }
    cfg = load_config(EXAMPLES / "clickstream.toml", client_settings=settings)
    assert cfg.schema_registry["url"] == "http://127.0.0.1:9999/apis/ccompat/v7"
    assert "schema.registry.url" not in cfg.consumer and cfg.consumer["security.protocol"] == "PLAINTEXT"
    # like [kafka]'s, they win over the file's own keys; --set wins over them
    cfg = load_config(EXAMPLES / "clickstream-avro.toml", client_settings=settings)
    assert cfg.schema_registry["url"] == settings["schema.registry.url"]
    cfg = load_config(
        EXAMPLES / "clickstream-avro.toml", ["schema_registry.url=http://h:1"], client_settings=settings
    )
    assert cfg.schema_registry["url"] == "http://h:1"


def test_a_client_json_gives_the_pipeline_its_registry(tmp_path: Path) -> None:
    import json

    from kafka_handoff.cli.command_config import load_command_config, load_registry_settings

    client = tmp_path / "client.json"
    url = "http://127.0.0.1:41234/apis/ccompat/v7"
    client.write_text(json.dumps({"bootstrap.servers": "127.0.0.1:9092", "schema.registry.url": url}))
    assert load_registry_settings(client) == {"schema.registry.url": url}
    settings = {**load_command_config(client), **load_registry_settings(client)}
    cfg = load_config(EXAMPLES / "clickstream-avro.toml", client_settings=settings)
    assert cfg.schema_registry["url"] == url and cfg.bootstrap_servers == "127.0.0.1:9092"
