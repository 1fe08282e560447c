"""Client configuration: Java 4.x defaults, coercions, validation messages and cross-key rules."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from kafka_handoff.config import (
    ADMIN_CONFIG_DEF,
    CONSUMER_CONFIG_DEF,
    PRODUCER_CONFIG_DEF,
    AdminConfig,
    ConfigDef,
    ConfigType,
    ConsumerConfig,
    ProducerConfig,
    Range,
    parse_admin_config,
    parse_bootstrap_address,
    parse_bootstrap_servers,
    parse_consumer_config,
    parse_iso8601_duration_ms,
    parse_producer_config,
    python_name,
)
from kafka_handoff.errors import ConfigError

pytestmark = pytest.mark.unit

BOOT = {"bootstrap.servers": "localhost:9092"}
INT_MAX = 2**31 - 1


def consumer() -> ConsumerConfig:
    return parse_consumer_config(BOOT)


def consumer_props(props: dict[str, Any]) -> ConsumerConfig:
    return parse_consumer_config({**BOOT, **props})


def producer_props(props: dict[str, Any]) -> ProducerConfig:
    return parse_producer_config({**BOOT, **props})


def raises_config_error(*fragments: str) -> Any:
    """pytest.raises(ConfigError) whose message contains the fragments, in order."""
    return pytest.raises(ConfigError, match=".*".join(re.escape(f) for f in fragments))


# ---------------------------------------------------------------------------------------------------------
# Defaults equal Java's (Kafka 4.x ConsumerConfig / ProducerConfig / AdminClientConfig)
# ---------------------------------------------------------------------------------------------------------

COMMON_DEFAULTS = {
    "client.id": "",
    "client.dns.lookup": "use_all_dns_ips",
    "metadata.max.age.ms": 300_000,
    "send.buffer.bytes": 131_072,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1_000,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1_000,
    "request.timeout.ms": 30_000,
    "socket.connection.setup.timeout.ms": 10_000,
    "socket.connection.setup.timeout.max.ms": 30_000,
    "security.protocol": "PLAINTEXT",
    # Java's security defaults (JKS stores are Java-only: PEM is the one format here).
    "ssl.truststore.location": None,
    "ssl.truststore.type": "PEM",
    "ssl.truststore.password": None,
    "ssl.truststore.certificates": None,
    "ssl.keystore.certificate.chain": None,
    "ssl.keystore.key": None,
    "ssl.keystore.location": None,
    "ssl.keystore.type": "PEM",
    "ssl.keystore.password": None,
    "ssl.key.password": None,
    "ssl.endpoint.identification.algorithm": "https",
    "sasl.mechanism": "GSSAPI",
    "sasl.jaas.config": None,
    "sasl.kerberos.service.name": "kafka",  # Java: null (then the JAAS serviceName); librdkafka: kafka
    "sasl.kerberos.ticket.renew.window.factor": 0.8,
    "sasl.kerberos.ticket.renew.jitter": 0.05,
    "sasl.kerberos.min.time.before.relogin": 60_000,
    "sasl.kerberos.kinit.cmd": "/usr/bin/kinit",
    "sasl.oauthbearer.token.endpoint.url": None,
    "sasl.oauthbearer.client.id": None,
    "sasl.oauthbearer.client.secret": None,
    "sasl.oauthbearer.scope": None,
    "sasl.login.retry.backoff.ms": 100,
    "sasl.login.retry.backoff.max.ms": 10_000,
    "sasl.scram.min.iterations": 4096,  # issue 34: Java's ScramMechanism bounds, configurable here
    "sasl.scram.max.iterations": 16384,
    "sasl.login.connect.timeout.ms": 10_000,  # Java: unset (the JDK's default)
    "sasl.login.read.timeout.ms": 10_000,  # Java: unset; issue 34: with the above, a token request's deadline
    "sasl.oauthbearer.token.endpoint.allow.http": False,  # issue 34: https only unless allowed
    # librdkafka's names and defaults.
    "ssl.certificate.location": None,
    "ssl.key.location": None,
    "enable.ssl.certificate.verification": True,
    "sasl.username": None,
    "sasl.password": None,
    "sasl.oauthbearer.method": "default",
    "sasl.oauthbearer.extensions": None,
    "sasl.oauthbearer.config": None,
    "sasl.kerberos.principal": None,  # librdkafka's names
    "sasl.kerberos.keytab": None,
    "oauth_cb": None,
    "metrics.sample.window.ms": 30_000,
    "metrics.num.samples": 2,
    "metrics.recording.level": "INFO",
}

JAVA_CONSUMER_DEFAULTS = {
    **COMMON_DEFAULTS,
    "receive.buffer.bytes": 65_536,
    "connections.max.idle.ms": 540_000,
    "enable.metrics.push": True,
    "group.id": None,
    "group.instance.id": None,
    "group.protocol": "classic",
    "group.remote.assignor": None,
    "session.timeout.ms": 45_000,
    "heartbeat.interval.ms": 3_000,
    "partition.assignment.strategy": ("range", "cooperative-sticky"),
    "max.poll.interval.ms": 300_000,
    "max.poll.records": 500,
    "enable.auto.commit": True,
    "auto.commit.interval.ms": 5_000,
    "auto.offset.reset": "latest",
    "isolation.level": "read_uncommitted",
    "fetch.min.bytes": 1,
    "fetch.max.bytes": 52_428_800,
    "fetch.max.wait.ms": 500,
    "max.partition.fetch.bytes": 1_048_576,
    "check.crcs": True,
    "exclude.internal.topics": True,
    "allow.auto.create.topics": True,
    "default.api.timeout.ms": 60_000,
    "client.rack": "",
    "key.deserializer": None,
    "value.deserializer": None,
    "interceptor.classes": (),
    "internal.leave.group.on.close": True,
}

JAVA_PRODUCER_DEFAULTS = {
    **COMMON_DEFAULTS,
    "receive.buffer.bytes": 32_768,
    "connections.max.idle.ms": 540_000,
    "enable.metrics.push": True,
    "acks": -1,
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.size": 16_384,
    "buffer.memory": 33_554_432,
    "max.block.ms": 60_000,
    "delivery.timeout.ms": 120_000,
    "retries": INT_MAX,
    "max.in.flight.requests.per.connection": 5,
    "compression.type": "none",
    "compression.gzip.level": -1,
    "compression.lz4.level": 9,
    "compression.zstd.level": 3,
    "partitioner.ignore.keys": False,
    "partitioner.adaptive.partitioning.enable": True,
    "partitioner.availability.timeout.ms": 0,
    "max.request.size": 1_048_576,
    "metadata.max.idle.ms": 300_000,
    "transactional.id": None,
    "transaction.timeout.ms": 60_000,
    "key.serializer": None,
    "value.serializer": None,
    "interceptor.classes": (),
}

# Keys kafka-handoff adds beyond Java's (with their defaults).
HANDOFF_CONSUMER_EXTRAS = {
    "revoke.completion": "next-poll",  # KIP-983 "Compatibility": next-poll | same-poll
    "max.decompressed.batch.bytes": 67_108_864,  # issue 34: the bound of one batch's decompressed records
}
HANDOFF_PRODUCER_EXTRAS = {
    "partitioner": "murmur2_random",  # librdkafka's partitioner names; this one is Java's default
}

JAVA_ADMIN_DEFAULTS = {
    **COMMON_DEFAULTS,
    "receive.buffer.bytes": 65_536,
    "connections.max.idle.ms": 300_000,
    "enable.metrics.push": False,
    "default.api.timeout.ms": 60_000,
    "retries": INT_MAX,
}


@pytest.mark.parametrize(
    ("cdef", "expected"),
    [
        (CONSUMER_CONFIG_DEF, {**JAVA_CONSUMER_DEFAULTS, **HANDOFF_CONSUMER_EXTRAS}),
        (PRODUCER_CONFIG_DEF, {**JAVA_PRODUCER_DEFAULTS, **HANDOFF_PRODUCER_EXTRAS}),
        (ADMIN_CONFIG_DEF, JAVA_ADMIN_DEFAULTS),
    ],
    ids=["consumer", "producer", "admin"],
)
def test_declared_defaults_equal_java(cdef: ConfigDef, expected: dict[str, Any]) -> None:
    assert cdef.defaults() == expected
    # bootstrap.servers is required (no default) everywhere
    assert cdef["bootstrap.servers"].required
    assert set(cdef.names) == set(expected) | {"bootstrap.servers"}


def test_parsed_consumer_defaults_equal_java_with_a_group() -> None:
    cfg = parse_consumer_config({**BOOT, "group.id": "g", "client.id": "me"})
    for key, value in JAVA_CONSUMER_DEFAULTS.items():
        if key in ("group.id", "client.id"):
            continue
        assert cfg.get(key) == value, key
        assert getattr(cfg, python_name(key)) == value, key
    assert cfg.bootstrap_servers == ("localhost:9092",)


def test_parsed_producer_and_admin_defaults_equal_java() -> None:
    p = parse_producer_config({**BOOT, "client.id": "p"})
    for key, value in JAVA_PRODUCER_DEFAULTS.items():
        if key != "client.id":
            assert p.get(key) == value, key
    a = parse_admin_config({**BOOT, "client.id": "a"})
    for key, value in JAVA_ADMIN_DEFAULTS.items():
        if key != "client.id":
            assert a.get(key) == value, key


@pytest.mark.parametrize("cls", [ConsumerConfig, ProducerConfig, AdminConfig])
def test_dataclass_fields_match_config_def(cls: type[Any]) -> None:
    declared = {f.name for f in dataclasses.fields(cls)} - {"explicit"}
    assert declared == {python_name(k) for k in cls.CONFIG_DEF.keys}


def test_every_key_has_doc_and_importance() -> None:
    for cdef in (CONSUMER_CONFIG_DEF, PRODUCER_CONFIG_DEF, ADMIN_CONFIG_DEF):
        for key in cdef.keys.values():
            assert key.doc, key.name
            assert key.importance is not None
    assert CONSUMER_CONFIG_DEF["internal.leave.group.on.close"].internal


# ---------------------------------------------------------------------------------------------------------
# Access, explicit keys, immutability
# ---------------------------------------------------------------------------------------------------------


def test_attribute_and_dotted_access_and_explicit() -> None:
    cfg = consumer_props({"max.poll.records": 100, "group.id": "g"})
    assert cfg.max_poll_records == 100
    assert cfg.get("max.poll.records") == 100
    assert cfg["max.poll.records"] == 100
    assert cfg.explicit == frozenset({"bootstrap.servers", "max.poll.records", "group.id"})
    assert cfg.is_explicit("group.id") and not cfg.is_explicit("fetch.min.bytes")
    assert cfg.as_dict()["fetch.max.wait.ms"] == 500
    assert set(cfg.as_dict()) == set(CONSUMER_CONFIG_DEF.names)


def test_get_unknown_key_suggests_closest() -> None:
    cfg = consumer()
    with raises_config_error("max.poll.recods", "did you mean 'max.poll.records'"):
        cfg.get("max.poll.recods")


def test_config_is_frozen() -> None:
    cfg = consumer()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.max_poll_records = 1  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------------------
# Unknown / missing keys
# ---------------------------------------------------------------------------------------------------------


def test_unknown_key_names_it_and_suggests_closest() -> None:
    with raises_config_error(
        "Unknown consumer configuration 'max.poll.record'", "did you mean 'max.poll.records'"
    ):
        consumer_props({"max.poll.record": 5})


def test_unknown_key_without_close_match_has_no_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        consumer_props({"zzzz": 5})
    assert "'zzzz'" in str(info.value)
    assert "did you mean" not in str(info.value)


def test_producer_key_is_unknown_to_consumer() -> None:
    with raises_config_error("'linger.ms'"):
        consumer_props({"linger.ms": 5})


def test_underscore_names_are_not_accepted() -> None:
    with raises_config_error("'max_poll_records'", "did you mean 'max.poll.records'"):
        consumer_props({"max_poll_records": 5})


def test_missing_bootstrap_servers() -> None:
    for parse in (parse_consumer_config, parse_producer_config, parse_admin_config):
        with raises_config_error("Missing required configuration 'bootstrap.servers'"):
            parse({})


def test_not_a_mapping_and_non_string_keys() -> None:
    with raises_config_error("must be a mapping"):
        parse_consumer_config([("bootstrap.servers", "a:1")])  # type: ignore[arg-type]
    with raises_config_error("keys must be strings"):
        parse_consumer_config({**BOOT, 5: 1})  # type: ignore[dict-item]


# ---------------------------------------------------------------------------------------------------------
# Coercions
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "given", "expected"),
    [
        ("max.poll.records", "500", 500),
        ("max.poll.records", " 42 ", 42),
        ("fetch.max.wait.ms", "+7", 7),
        ("metadata.max.age.ms", str(2**40), 2**40),  # LONG
        ("enable.auto.commit", "false", False),
        ("check.crcs", "FALSE", False),
        ("check.crcs", "True", True),
        ("allow.auto.create.topics", False, False),
        ("group.protocol", "CONSUMER", "consumer"),
        ("group.protocol", " Classic ", "classic"),
        ("isolation.level", "READ_COMMITTED", "read_committed"),
        ("auto.offset.reset", "Earliest", "earliest"),
        ("auto.offset.reset", "NONE", "none"),
        (
            "client.dns.lookup",
            "RESOLVE_CANONICAL_BOOTSTRAP_SERVERS_ONLY",
            "resolve_canonical_bootstrap_servers_only",
        ),
        ("security.protocol", "plaintext", "PLAINTEXT"),
        ("metrics.recording.level", "debug", "DEBUG"),
        ("client.rack", " rack-1 ", "rack-1"),
        ("group.remote.assignor", "uniform", "uniform"),
        ("bootstrap.servers", "a:1, b:2 ,c:3", ("a:1", "b:2", "c:3")),
        ("bootstrap.servers", ["a:1", " b:2"], ("a:1", "b:2")),
        ("partition.assignment.strategy", "range, roundrobin", ("range", "roundrobin")),
        ("partition.assignment.strategy", ["cooperative-sticky"], ("cooperative-sticky",)),
        ("interceptor.classes", "", ()),
        ("interceptor.classes", [], ()),
    ],
)
def test_consumer_coercions(key: str, given: Any, expected: Any) -> None:
    props: dict[str, Any] = {key: given}
    if key == "group.remote.assignor":
        props["group.protocol"] = "consumer"
    if key == "enable.auto.commit":
        props["group.id"] = "g"
    if key != "bootstrap.servers":
        props = {**BOOT, **props}
    assert parse_consumer_config(props).get(key) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [("all", -1), ("ALL", -1), ("-1", -1), (-1, -1), ("1", 1), (1, 1), ("0", 0), (0, 0)],
)
def test_acks_forms(given: Any, expected: int) -> None:
    props = {"acks": given}
    if expected != -1:
        props["enable.idempotence"] = False
    assert producer_props(props).acks == expected


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression_types_case_insensitive(codec: str) -> None:
    assert producer_props({"compression.type": codec.upper()}).compression_type == codec


def test_compression_level_of_the_chosen_codec() -> None:
    assert (
        producer_props({"compression.type": "zstd", "compression.zstd.level": "-5"}).compression_level == -5
    )
    assert producer_props({"compression.type": "gzip"}).compression_level == -1
    assert producer_props({"compression.type": "lz4"}).compression_level == 9
    assert producer_props({"compression.type": "snappy"}).compression_level is None


def test_java_assignor_class_names_map_to_protocol_names() -> None:
    cfg = consumer_props(
        {
            "partition.assignment.strategy": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor,"
            "org.apache.kafka.clients.consumer.RangeAssignor"
        }
    )
    assert cfg.partition_assignment_strategy == ("cooperative-sticky", "range")


def test_assignor_objects_and_module_paths_are_kept() -> None:
    class MyAssignor:
        name = "mine"

    instance = MyAssignor()
    cfg = consumer_props({"partition.assignment.strategy": [instance, MyAssignor, "pkg.mod:Cls"]})
    assert cfg.partition_assignment_strategy == (instance, MyAssignor, "pkg.mod:Cls")


def test_deserializers_accept_callables_and_none() -> None:
    def decode(data: bytes) -> str:
        return data.decode()

    cfg = consumer_props({"key.deserializer": decode, "value.deserializer": None})
    assert cfg.key_deserializer is decode
    assert cfg.value_deserializer is None


def test_enable_metrics_push_is_accepted() -> None:
    assert consumer_props({"enable.metrics.push": "false"}).enable_metrics_push is False


# ---------------------------------------------------------------------------------------------------------
# Bad values: message names the key, the value and what is allowed
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "fragments"),
    [
        ("max.poll.records", "abc", ["'abc'", "'max.poll.records'", "int", "[1,...]"]),
        ("max.poll.records", 1.5, ["1.5", "'max.poll.records'", "whole number"]),
        ("max.poll.records", True, ["True", "'max.poll.records'", "not a boolean"]),
        ("max.poll.records", 0, ["0", "'max.poll.records'", "out of range", "[1,...]"]),
        ("max.poll.records", None, ["None", "'max.poll.records'", "must not be None"]),
        ("fetch.min.bytes", "-1", ["-1", "'fetch.min.bytes'", "[0,...]"]),
        ("fetch.max.bytes", 2**31, [str(2**31), "'fetch.max.bytes'", "out of range for an int"]),
        ("send.buffer.bytes", -2, ["-2", "'send.buffer.bytes'", "[-1,...]"]),
        ("check.crcs", "yes", ["'yes'", "'check.crcs'", "true, false"]),
        ("check.crcs", 1, ["1", "'check.crcs'", "true, false"]),
        ("group.protocol", "eager", ["'eager'", "'group.protocol'", "classic, consumer"]),
        (
            "isolation.level",
            "committed",
            ["'committed'", "'isolation.level'", "read_uncommitted, read_committed"],
        ),
        (
            "auto.offset.reset",
            "smallest",
            ["'smallest'", "'auto.offset.reset'", "earliest, latest, none, by_duration"],
        ),
        ("auto.offset.reset", "by_duration:1d", ["'auto.offset.reset'", "ISO-8601", "by_duration"]),
        ("auto.offset.reset", "by_duration:", ["'auto.offset.reset'", "ISO-8601"]),
        ("auto.offset.reset", "by_duration:-P1D", ["'auto.offset.reset'", "negative duration"]),
        ("auto.offset.reset", "by_duration:PT-1S", ["'auto.offset.reset'", "negative duration"]),
        ("bootstrap.servers", "localhost", ["'localhost'", "'bootstrap.servers'", "host:port"]),
        ("bootstrap.servers", "a:70000", ["'a:70000'", "'bootstrap.servers'", "1..65535"]),
        ("bootstrap.servers", "a:1,,b:2", ["'bootstrap.servers'", "host:port"]),
        ("bootstrap.servers", "", ["'bootstrap.servers'", "at least one broker"]),
        ("bootstrap.servers", "a:1,a:1", ["'bootstrap.servers'", "duplicate entry 'a:1'"]),
        ("bootstrap.servers", 9092, ["9092", "'bootstrap.servers'", "expected a list"]),
        ("partition.assignment.strategy", "", ["'partition.assignment.strategy'", "at least one assignor"]),
        ("partition.assignment.strategy", "range,range", ["'partition.assignment.strategy'", "duplicate"]),
        (
            "partition.assignment.strategy",
            "range,,sticky",
            ["'partition.assignment.strategy'", "empty entry"],
        ),
        (
            "interceptor.classes",
            "com.Foo",
            ["'com.Foo'", "'interceptor.classes'", "not supported", "empty list"],
        ),
        ("group.instance.id", "bad id!", ["'bad id!'", "'group.instance.id'", "[a-zA-Z0-9._-]"]),
        ("group.instance.id", "x" * 250, ["'group.instance.id'", "1-249"]),
        ("group.instance.id", "", ["'group.instance.id'", "[a-zA-Z0-9._-]"]),
        ("group.id", "", ["''", "'group.id'", "non-empty"]),
        (
            "key.deserializer",
            "org.apache.kafka.common.serialization.StringDeserializer",
            ["StringDeserializer", "'key.deserializer'", "callable"],
        ),
        ("sasl.mechanism", "KERBEROS", ["'KERBEROS'", "'sasl.mechanism'", "PLAIN, SCRAM-SHA-256"]),
        (
            "ssl.endpoint.identification.algorithm",
            "http",
            ["'http'", "'ssl.endpoint.identification.algorithm'", "https, or empty/none"],
        ),
        (
            "security.protocol",
            "TLS",
            ["'TLS'", "'security.protocol'", "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"],
        ),
        ("metrics.num.samples", 0, ["0", "'metrics.num.samples'", "[1,...]"]),
        ("client.id", 1.5, ["1.5", "'client.id'", "expected a string"]),
    ],
)
def test_consumer_bad_values(key: str, value: Any, fragments: list[str]) -> None:
    props = {key: value} if key == "bootstrap.servers" else {**BOOT, key: value}
    with pytest.raises(ConfigError) as info:
        parse_consumer_config(props)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize(
    ("key", "value", "fragments"),
    [
        ("acks", "2", ["'2'", "'acks'", "all, -1, 0, 1"]),
        ("acks", "leader", ["'leader'", "'acks'", "all, -1, 0, 1"]),
        ("compression.type", "brotli", ["'brotli'", "'compression.type'", "none, gzip, snappy, lz4, zstd"]),
        ("compression.gzip.level", 0, ["0", "'compression.gzip.level'", "[1,...,9] or -1"]),
        ("compression.gzip.level", 10, ["10", "'compression.gzip.level'", "[1,...,9] or -1"]),
        ("compression.lz4.level", 18, ["18", "'compression.lz4.level'", "[1,...,17]"]),
        ("compression.zstd.level", 23, ["23", "'compression.zstd.level'", "[-131072,...,22]"]),
        ("retries", -1, ["-1", "'retries'", f"[0,...,{INT_MAX}]"]),
        ("linger.ms", "soon", ["'soon'", "'linger.ms'", "long"]),
        ("metadata.max.idle.ms", 4_999, ["4999", "'metadata.max.idle.ms'", "[5000,...]"]),
        (
            "max.in.flight.requests.per.connection",
            0,
            ["0", "'max.in.flight.requests.per.connection'", "[1,...]"],
        ),
        ("key.serializer", 3, ["3", "'key.serializer'", "callable"]),
    ],
)
def test_producer_bad_values(key: str, value: Any, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        producer_props({key: value})
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_zstd_and_gzip_level_bounds_are_accepted() -> None:
    assert producer_props({"compression.zstd.level": -131072}).compression_zstd_level == -131072
    assert producer_props({"compression.zstd.level": 22}).compression_zstd_level == 22
    assert producer_props({"compression.gzip.level": 9}).compression_gzip_level == 9
    assert producer_props({"compression.gzip.level": 1}).compression_gzip_level == 1


# ---------------------------------------------------------------------------------------------------------
# Consumer rules
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("partition.assignment.strategy", "range"),
        ("heartbeat.interval.ms", 1000),
        ("session.timeout.ms", "10000"),
    ],
)
def test_consumer_protocol_rejects_classic_only_keys(key: str, value: Any) -> None:
    with raises_config_error(f"{key} cannot be set when group.protocol=consumer"):
        consumer_props({"group.protocol": "consumer", key: value})


def test_consumer_protocol_lists_every_offending_key() -> None:
    with raises_config_error(
        "partition.assignment.strategy, heartbeat.interval.ms, session.timeout.ms cannot be set when "
        "group.protocol=consumer"
    ):
        consumer_props(
            {
                "group.protocol": "Consumer",
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 1_000,
                "partition.assignment.strategy": "range",
            }
        )


def test_unset_remote_assignor_is_fine_with_classic() -> None:
    # Java only counts keys whose original value is non-null and not blank.
    cfg = consumer_props({"group.protocol": "classic", "group.remote.assignor": None})
    assert cfg.group_remote_assignor is None
    assert "group.remote.assignor" in cfg.explicit


def test_consumer_protocol_accepts_any_remote_assignor() -> None:
    for assignor in ("uniform", "range", "my-custom"):
        cfg = consumer_props(
            {"group.protocol": "consumer", "group.id": "g", "group.remote.assignor": assignor}
        )
        assert cfg.group_remote_assignor == assignor


def test_empty_remote_assignor_is_rejected() -> None:
    with raises_config_error("'group.remote.assignor'", "must not be empty"):
        consumer_props({"group.protocol": "consumer", "group.remote.assignor": "  "})


def test_classic_protocol_rejects_remote_assignor() -> None:
    with raises_config_error("group.remote.assignor cannot be set when group.protocol=classic"):
        consumer_props({"group.remote.assignor": "uniform"})
    with raises_config_error("group.remote.assignor cannot be set when group.protocol=classic"):
        consumer_props({"group.protocol": "classic", "group.remote.assignor": "uniform"})


def test_classic_protocol_accepts_its_own_keys() -> None:
    cfg = consumer_props(
        {
            "group.id": "g",
            "session.timeout.ms": "10000",
            "heartbeat.interval.ms": 2_000,
            "partition.assignment.strategy": "cooperative-sticky",
        }
    )
    assert (cfg.session_timeout_ms, cfg.heartbeat_interval_ms) == (10_000, 2_000)
    assert cfg.partition_assignment_strategy == ("cooperative-sticky",)
    assert not cfg.uses_consumer_protocol


def test_no_group_id_disables_auto_commit_by_default() -> None:
    assert consumer().enable_auto_commit is False
    assert consumer_props({"enable.auto.commit": False}).enable_auto_commit is False
    assert consumer_props({"group.id": "g"}).enable_auto_commit is True


def test_no_group_id_with_explicit_auto_commit_true_is_an_error() -> None:
    with raises_config_error("'enable.auto.commit'", "group.id"):
        consumer_props({"enable.auto.commit": "true"})


@pytest.mark.parametrize(("heartbeat", "session"), [(10_000, 10_000), (20_000, 10_000)])
def test_heartbeat_must_be_lower_than_session_timeout(heartbeat: int, session: int) -> None:
    with raises_config_error(f"{heartbeat}", "'heartbeat.interval.ms'", f"session.timeout.ms ({session})"):
        consumer_props({"heartbeat.interval.ms": heartbeat, "session.timeout.ms": session})


def test_heartbeat_just_below_session_timeout_is_fine() -> None:
    cfg = consumer_props({"heartbeat.interval.ms": 9_999, "session.timeout.ms": 10_000})
    assert cfg.heartbeat_interval_ms == 9_999


def test_auto_offset_reset_by_duration() -> None:
    cfg = consumer_props({"auto.offset.reset": "by_duration:P1D"})
    assert cfg.auto_offset_reset == "by_duration:P1D"
    assert cfg.auto_offset_reset_duration_ms == 86_400_000
    cfg = consumer_props({"auto.offset.reset": "BY_DURATION:pt1h30m"})
    assert cfg.auto_offset_reset == "by_duration:PT1H30M"
    assert cfg.auto_offset_reset_duration_ms == 5_400_000
    assert consumer().auto_offset_reset_duration_ms is None


@pytest.mark.parametrize(
    ("text", "millis"),
    [
        ("P1D", 86_400_000),
        ("PT1H", 3_600_000),
        ("PT15M", 900_000),
        ("PT10S", 10_000),
        ("PT0.5S", 500),
        ("PT0,25S", 250),
        ("PT1.0009S", 1_000),  # truncated to whole milliseconds
        ("P2DT3H4M5.006S", 2 * 86_400_000 + 3 * 3_600_000 + 4 * 60_000 + 5_006),
        ("pt1m", 60_000),
        ("P0D", 0),
        ("-PT1S", -1_000),
        ("PT-0.5S", -500),
    ],
)
def test_iso8601_durations(text: str, millis: int) -> None:
    assert parse_iso8601_duration_ms(text) == millis


@pytest.mark.parametrize("text", ["", "P", "PT", "1D", "P1Y", "P1W", "PT1.5H", "P1DT", "P1H"])
def test_iso8601_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="ISO-8601"):
        parse_iso8601_duration_ms(text)


def test_reconnect_backoff_without_max_disables_exponential_backoff() -> None:
    cfg = consumer_props({"reconnect.backoff.ms": 200})
    assert cfg.reconnect_backoff_max_ms == 200
    cfg = consumer_props({"reconnect.backoff.ms": 200, "reconnect.backoff.max.ms": 5_000})
    assert cfg.reconnect_backoff_max_ms == 5_000
    assert consumer().reconnect_backoff_max_ms == 1_000


def test_consumer_client_id_generation() -> None:
    first = consumer_props({"group.id": "orders"}).client_id
    second = consumer_props({"group.id": "orders"}).client_id
    assert re.fullmatch(r"consumer-orders-\d+", first)
    assert first != second
    assert re.fullmatch(r"consumer-null-\d+", consumer().client_id)
    assert consumer_props({"group.id": "g", "group.instance.id": "i-1"}).client_id == "consumer-g-i-1"
    assert consumer_props({"client.id": "mine"}).client_id == "mine"


def test_bootstrap_addresses() -> None:
    cfg = consumer_props({"bootstrap.servers": "a.example:9092, [::1]:9093,PLAINTEXT://b:19092"})
    assert cfg.bootstrap_addresses() == (("a.example", 9092), ("::1", 9093), ("b", 19092))
    assert parse_bootstrap_address("10.0.0.1:1") == ("10.0.0.1", 1)
    with pytest.raises(ValueError, match="host:port"):
        parse_bootstrap_address("a:b")


def test_parse_bootstrap_servers_is_the_one_parser() -> None:
    assert parse_bootstrap_servers(" a:1 , [::1]:2,PLAINTEXT://b:3 ") == [("a", 1), ("::1", 2), ("b", 3)]
    assert parse_bootstrap_servers(["a:1", "b:2"]) == [("a", 1), ("b", 2)]
    with pytest.raises(ConfigError, match=r"Invalid value 'a:1,b' for configuration 'servers': entry 'b' is "
                       r"not of the form host:port \(allowed: comma-separated host:port"):  # fmt: skip
        parse_bootstrap_servers("a:1, b", key="servers")
    with pytest.raises(ConfigError, match=r"'bootstrap.servers': entry 'a:0' has port 0 outside 1..65535"):
        parse_bootstrap_servers("a:0")
    with pytest.raises(ConfigError, match=r"'bootstrap.servers': duplicate entry 'a:1'"):
        parse_bootstrap_servers("a:1,a:1")
    with pytest.raises(ConfigError, match="at least one broker address is required"):
        parse_bootstrap_servers(" , ")


# ---------------------------------------------------------------------------------------------------------
# Producer rules
# ---------------------------------------------------------------------------------------------------------


def test_idempotence_enabled_by_default() -> None:
    cfg = producer_props({})
    assert cfg.enable_idempotence is True
    assert cfg.acks == -1


@pytest.mark.parametrize("acks", ["0", "1", 1])
def test_idempotence_disabled_when_acks_conflicts_and_not_explicit(acks: Any) -> None:
    cfg = producer_props({"acks": acks})
    assert cfg.enable_idempotence is False
    assert cfg.acks == int(acks)


@pytest.mark.parametrize("acks", ["0", "1"])
def test_explicit_idempotence_with_acks_not_all_is_an_error(acks: str) -> None:
    with raises_config_error(
        f"Invalid value {acks} for configuration 'acks'", "must be all", "enable.idempotence"
    ):
        producer_props({"acks": acks, "enable.idempotence": "true"})


def test_retries_zero_disables_or_rejects_idempotence() -> None:
    assert producer_props({"retries": 0}).enable_idempotence is False
    with raises_config_error("Invalid value 0 for configuration 'retries'", "greater than 0"):
        producer_props({"retries": 0, "enable.idempotence": True})


def test_max_in_flight_above_five_with_idempotence() -> None:
    with raises_config_error("6", "'max.in.flight.requests.per.connection'", "at most 5", "[1,...,5]"):
        producer_props({"max.in.flight.requests.per.connection": 6})
    with raises_config_error("'max.in.flight.requests.per.connection'", "at most 5"):
        producer_props({"max.in.flight.requests.per.connection": "10", "enable.idempotence": True})
    cfg = producer_props({"max.in.flight.requests.per.connection": 10, "enable.idempotence": False})
    assert cfg.max_in_flight_requests_per_connection == 10
    assert producer_props({"max.in.flight.requests.per.connection": 5}).enable_idempotence is True


def test_max_in_flight_allowed_when_acks_already_disabled_idempotence() -> None:
    cfg = producer_props({"acks": 1, "max.in.flight.requests.per.connection": 10})
    assert cfg.enable_idempotence is False
    assert cfg.max_in_flight_requests_per_connection == 10


def test_transactional_id_needs_idempotence() -> None:
    cfg = producer_props({"transactional.id": "tx-1"})
    assert cfg.transactional_id == "tx-1" and cfg.enable_idempotence is True
    assert cfg.transaction_timeout_ms == 60_000  # Java's default
    assert producer_props({"transactional.id": None}).transactional_id is None
    with raises_config_error("transactional.id", "enable.idempotence=true"):
        producer_props({"transactional.id": "tx-1", "enable.idempotence": False})
    with raises_config_error("'acks'"):  # conflicting settings do not silently drop idempotence here
        producer_props({"transactional.id": "tx-1", "acks": 1})
    with raises_config_error("transactional.id", "non-empty"):
        producer_props({"transactional.id": ""})


def test_delivery_timeout_must_cover_linger_and_request_timeout() -> None:
    with raises_config_error("1000", "'delivery.timeout.ms'", "linger.ms + request.timeout.ms (30005)"):
        producer_props({"delivery.timeout.ms": 1_000})
    # not explicit: raised to the minimum, as Java does
    cfg = producer_props({"linger.ms": 100_000})
    assert cfg.delivery_timeout_ms == 130_000
    assert producer_props({"delivery.timeout.ms": 30_005}).delivery_timeout_ms == 30_005


def test_producer_client_id_generation() -> None:
    assert re.fullmatch(r"producer-\d+", producer_props({}).client_id)
    assert producer_props({"client.id": "p"}).client_id == "p"
    # Java keeps an explicitly configured client.id, even an empty one
    assert producer_props({"client.id": ""}).client_id == ""


def test_serializers_accept_callables() -> None:
    cfg = producer_props({"key.serializer": str.encode, "value.serializer": None})
    assert cfg.key_serializer is str.encode
    assert cfg.value_serializer is None


def test_unknown_producer_key_suggests() -> None:
    with raises_config_error("Unknown producer configuration 'linger_ms'", "did you mean 'linger.ms'"):
        producer_props({"linger_ms": 1})


# ---------------------------------------------------------------------------------------------------------
# Admin
# ---------------------------------------------------------------------------------------------------------


def test_admin_config() -> None:
    cfg = parse_admin_config({**BOOT, "default.api.timeout.ms": "1000"})
    assert cfg.default_api_timeout_ms == 1_000
    assert re.fullmatch(r"adminclient-\d+", cfg.client_id)
    assert cfg.connections_max_idle_ms == 300_000
    with raises_config_error("Unknown admin configuration 'group.id'"):
        parse_admin_config({**BOOT, "group.id": "g"})


# ---------------------------------------------------------------------------------------------------------
# ConfigDef machinery
# ---------------------------------------------------------------------------------------------------------


def test_config_def_rejects_duplicate_definitions_and_bad_defaults() -> None:
    cdef = ConfigDef("test").define("a.b", ConfigType.INT, 1, Range(0, 5))
    with pytest.raises(ValueError, match="defined twice"):
        cdef.define("a.b", ConfigType.INT, 2)
    with raises_config_error("'c.d'", "[0,...,5]"):
        cdef.define("c.d", ConfigType.INT, 9, Range(0, 5))


def test_config_def_parse_returns_values_and_explicit() -> None:
    cdef = ConfigDef("test").define("a.b", ConfigType.INT, 1).define("c", ConfigType.LIST, ())
    values, explicit = cdef.parse({"c": "x,y"})
    assert values == {"a.b": 1, "c": ("x", "y")}
    assert explicit == frozenset({"c"})
