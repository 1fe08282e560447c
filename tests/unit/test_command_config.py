"""``--command-config`` files (properties and JSON) and security settings flowing into the pipeline's
consumer and dead-letter producer."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from kafka_handoff.cli.command_config import client_config, load_command_config
from kafka_handoff.errors import ConfigError
from kafka_handoff.pipeline.config import load_config
from kafka_handoff.pipeline.deadletter import TopicDeadLetter, make_dead_letter

pytestmark = pytest.mark.threads  # real clients with their network threads (no broker)

SECURE = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "SCRAM-SHA-256",
    "sasl.username": "alice",
    "sasl.password": "hunter2-pw",
}


def test_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# comment\n! also a comment\nsecurity.protocol=SASL_SSL\nsasl.mechanism: PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        '   username="u" password="p=q";\n\nbootstrap.servers = b1:9093\n'
    )
    props = load_command_config(path)
    assert props == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
        'password="p=q";',
        "bootstrap.servers": "b1:9093",
    }


def test_json_file_and_bootstrap_precedence(tmp_path: Path) -> None:
    path = tmp_path / "client.json"
    path.write_text(json.dumps({**SECURE, "bootstrap.servers": "from-file:9092"}))
    args = argparse.Namespace(command_config=str(path))
    assert client_config(args, None, "fallback:1")["bootstrap.servers"] == "from-file:9092"
    assert client_config(args, "cli:2", "fallback:1")["bootstrap.servers"] == "cli:2"
    assert client_config(argparse.Namespace(command_config=None), None, "fallback:1") == {
        "bootstrap.servers": "fallback:1"
    }


def test_bad_files_name_the_file_not_the_values(tmp_path: Path) -> None:
    spaced = tmp_path / "spaced.properties"
    spaced.write_text("sasl.password hunter2-pw\nsasl.username  =  bob\n")
    assert load_command_config(spaced) == {"sasl.password": "hunter2-pw", "sasl.username": "bob"}
    with pytest.raises(ConfigError, match="cannot read"):
        load_command_config(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"sasl.password": "hunter2-pw",')
    with pytest.raises(ConfigError, match="not valid JSON") as info:
        load_command_config(broken)
    assert "hunter2-pw" not in str(info.value)


def test_pipeline_kafka_security_reaches_consumer_and_dead_letter_producer(tmp_path: Path) -> None:
    toml = tmp_path / "p.toml"
    toml.write_text(
        '[kafka]\ntopics = ["ev"]\n"bootstrap.servers" = "127.0.0.1:1"\n"group.id" = "g"\n'
        '[transform]\nfunction = "mod:fn"\n[sink]\npath = "out"\n'
        '[errors]\nmalformed = "dead-letter-topic"\ndead_letter_topic = "dlq"\n'
    )
    cfg = load_config(toml, ["kafka.sasl.username=bob"], client_settings=SECURE)
    assert cfg.consumer["security.protocol"] == "SASL_PLAINTEXT"
    assert cfg.consumer["sasl.username"] == "bob"  # --set wins over the file
    dead_letter = make_dead_letter(cfg)
    try:
        assert isinstance(dead_letter, TopicDeadLetter)
        producer_cfg = dead_letter.producer._config
        assert producer_cfg.get("security.protocol") == "SASL_PLAINTEXT"
        assert producer_cfg.get("sasl.mechanism") == "SCRAM-SHA-256"
        assert producer_cfg.get("sasl.username") == "bob"
        assert producer_cfg.get("sasl.password").value == "hunter2-pw"
    finally:
        dead_letter.close()


@pytest.mark.parametrize("suffix", [".json", ".properties"])
def test_schema_registry_keys_are_not_client_settings(tmp_path: Path, suffix: str) -> None:
    """``client.json`` of ``handoff broker start --schema-registry`` (and Confluent's client files) carry
    ``schema.registry.*`` for the serdes: a command's clients do not get them."""
    path = tmp_path / f"client{suffix}"
    settings = {"bootstrap.servers": "b1:9092", "schema.registry.url": "http://r:8081"}
    if suffix == ".json":
        path.write_text(json.dumps(settings))
    else:
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    assert load_command_config(path) == {"bootstrap.servers": "b1:9092"}
