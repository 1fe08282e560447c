"""A pipeline's configuration can be printed or logged: its repr and str never show a secret, while the
clients still get the real values."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_handoff.config import parse_admin_config, parse_consumer_config, parse_producer_config
from kafka_handoff.pipeline.config import parse_config

pytestmark = pytest.mark.unit

SECRETS = {
    "sasl.password": "sasl-pw-11",
    "ssl.key.password": "key-pw-22",
    "ssl.keystore.password": "store-pw-33",
    "ssl.truststore.password": "trust-pw-44",
    "sasl.oauthbearer.client.secret": "oidc-secret-55",
    "sasl.jaas.config": (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="jaas-66";'
    ),
}


def raw_config() -> dict[str, Any]:
    return {
        "kafka": {
            "topics": ["events"],
            "bootstrap.servers": "127.0.0.1:9092",
            "group.id": "g",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": SECRETS["sasl.password"],
            "ssl.key.password": SECRETS["ssl.key.password"],
            "ssl.keystore.location": "/etc/kafka/client.pem",
        },
        "spark": {"conf": {"spark.hadoop.fs.s3a.secret.key": "s3a-secret-77", "spark.driver.memory": "1g"}},
        "transform": {"function": "m:f"},
        "sink": {
            "format": "delta",
            "path": "s3://bucket/t",
            "storage_options": {"AWS_SECRET_ACCESS_KEY": "aws-secret-88", "AWS_REGION": "eu-west-1"},
        },
        "errors": {
            "malformed": "dead-letter-topic",
            "dead_letter_topic": "dlq",
            "producer": {"sasl.oauthbearer.client.secret": SECRETS["sasl.oauthbearer.client.secret"]},
        },
    }


def test_pipeline_config_repr_and_str_hide_every_secret() -> None:
    cfg = parse_config(raw_config())
    texts = [repr(cfg), str(cfg), repr(cfg.consumer), str(cfg.sink), repr(cfg.errors), repr(cfg.spark)]
    for text in texts:
        for secret in [*SECRETS.values(), "s3a-secret-77", "aws-secret-88"]:
            assert secret not in text, secret
    assert "[hidden]" in repr(cfg)
    # What is not secret stays readable...
    assert "'sasl.username': 'alice'" in repr(cfg) and "'AWS_REGION': 'eu-west-1'" in repr(cfg)
    assert "'/etc/kafka/client.pem'" in repr(cfg) and "'spark.driver.memory': '1g'" in repr(cfg)
    # ...and the clients get the real values.
    assert cfg.consumer["sasl.password"] == SECRETS["sasl.password"]
    assert dict(cfg.consumer)["ssl.key.password"] == SECRETS["ssl.key.password"]
    assert cfg.sink.storage_options["AWS_SECRET_ACCESS_KEY"] == "aws-secret-88"


def test_client_config_reprs_hide_every_password_key() -> None:
    base = {"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
    props = {**base, **SECRETS}
    props.pop("sasl.oauthbearer.client.secret")  # not with PLAIN
    props.pop("sasl.password")  # the JAAS line has it
    for cfg in (parse_consumer_config(props), parse_producer_config(props), parse_admin_config(props)):
        for text in (repr(cfg), str(cfg), repr(cfg.as_dict())):
            for secret in SECRETS.values():
                assert secret not in text, (secret, type(cfg).__name__)
