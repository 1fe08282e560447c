"""Pure parts of the dev broker: cluster ids, server.properties, cache dir, bootstrap parsing, CLI wiring."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest

from kafka_handoff.cli.main import build_parser
from kafka_handoff.devbroker import cds, config, jars, probe
from kafka_handoff.devbroker.config import NodeSpec, broker_settings, generate_cluster_id, render_properties
from kafka_handoff.errors import ConfigError

pytestmark = pytest.mark.unit


def parse_properties(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in io.StringIO(text):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        assert key not in out, f"duplicate key {key}"
        out[key] = value
    return out


def nodes(count: int, root: Path) -> list[NodeSpec]:
    return [NodeSpec(i, 9000 + i, 9100 + i, root / f"node-{i}") for i in range(1, count + 1)]


def test_cluster_id_is_a_kafka_uuid_string() -> None:
    ids = {generate_cluster_id() for _ in range(500)}
    assert len(ids) == 500
    for cid in ids:
        assert len(cid) == 22
        assert not cid.startswith("-")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16
        assert config.is_valid_cluster_id(cid)


def test_cluster_id_skips_reserved_and_dash_prefixed_values(monkeypatch: pytest.MonkeyPatch) -> None:
    dash_first = base64.urlsafe_b64decode("-" + "A" * 21 + "==")
    candidates = iter([bytes(16), bytes(15) + b"\x01", dash_first, b"\x10" * 16])
    monkeypatch.setattr("kafka_handoff.devbroker.config.secrets.token_bytes", lambda n: next(candidates))
    cid = generate_cluster_id()
    assert cid == base64.urlsafe_b64encode(b"\x10" * 16).decode().rstrip("=")


@pytest.mark.parametrize("bad", ["", "abc", "A" * 22 + "=", "-" + "A" * 21, "AAAAAAAAAAAAAAAAAAAAAA"])
def test_invalid_cluster_ids_are_rejected(bad: str) -> None:
    assert not config.is_valid_cluster_id(bad)  # the last one is the all-zero (reserved) Uuid


def test_single_node_properties(tmp_path: Path) -> None:
    (node,) = nodes(1, tmp_path)
    props = parse_properties(render_properties(node, [node]))
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9101"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9001,CONTROLLER://127.0.0.1:9101"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9001"
    assert props["log.dirs"] == str(tmp_path / "node-1" / "data")
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "true"
    assert props["num.partitions"] == "1"


def test_three_node_properties_share_the_quorum_and_size_internal_topics(tmp_path: Path) -> None:
    specs = nodes(3, tmp_path)
    rendered = [parse_properties(render_properties(n, specs)) for n in specs]
    voters = {p["controller.quorum.voters"] for p in rendered}
    assert voters == {"1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"}
    assert [p["node.id"] for p in rendered] == ["1", "2", "3"]
    assert len({p["log.dirs"] for p in rendered}) == 3
    for p in rendered:
        assert p["offsets.topic.replication.factor"] == "3"
        assert p["transaction.state.log.replication.factor"] == "3"
        assert p["transaction.state.log.min.isr"] == "2"
        assert p["default.replication.factor"] == "3"


def test_consumer_group_timings_pass_the_brokers_validation_rules() -> None:
    s = {k: int(v) for k, v in broker_settings(1).items() if v.isdigit()}
    # Kafka's defaults for the maxima, which we leave alone.
    max_session, max_heartbeat = 60000, 15000
    assert s["group.consumer.min.session.timeout.ms"] <= s["group.consumer.session.timeout.ms"] <= max_session
    assert (
        s["group.consumer.min.heartbeat.interval.ms"]
        <= s["group.consumer.heartbeat.interval.ms"]
        <= max_heartbeat
    )
    assert s["group.consumer.heartbeat.interval.ms"] < s["group.consumer.session.timeout.ms"]
    assert s["group.consumer.session.timeout.ms"] <= 10000  # short enough for tests
    assert s["group.min.session.timeout.ms"] <= 1000


def test_overrides_replace_defaults_and_bad_names_are_rejected(tmp_path: Path) -> None:
    (node,) = nodes(1, tmp_path)
    props = parse_properties(render_properties(node, [node], overrides={"num.partitions": "4", "x.y": "z"}))
    assert props["num.partitions"] == "4"
    assert props["x.y"] == "z"
    with pytest.raises(ConfigError, match="not a valid broker config name"):
        render_properties(node, [node], overrides={"bad key": "1"})


def test_values_are_escaped_for_java_properties(tmp_path: Path) -> None:
    (node,) = nodes(1, tmp_path)
    text = render_properties(node, [node], overrides={"a.b": "C:\\dir\nnext", "c.d": " lead"})
    props = parse_properties(text)
    assert props["a.b"] == "C:\\\\dir\\nnext"
    assert props["c.d"] == "\\ lead"


@pytest.mark.parametrize("count", [0, 2, 4])
def test_node_count_must_be_1_or_3(count: int) -> None:
    with pytest.raises(ConfigError, match=r"nodes: .* allowed values: 1, 3"):
        broker_settings(count)


def test_node_must_be_a_voter(tmp_path: Path) -> None:
    a, b = nodes(2, tmp_path)
    with pytest.raises(ConfigError, match="not among the voters"):
        render_properties(a, [b])


def test_server_command_uses_bounded_heap_and_the_node_properties(tmp_path: Path) -> None:
    (node,) = nodes(1, tmp_path)
    cmd = config.server_command(node, "/libs/*", Path("/cfg/log4j2.properties"), "java")
    assert cmd[0] == "java"
    assert "-Xmx512m" in cmd
    assert "-XX:+UseG1GC" in cmd
    assert cmd[-2:] == ["kafka.Kafka", str(node.properties_path)]
    assert f"-Dkafka.logs.dir={node.logs_dir}" in cmd
    fmt = config.format_command(node, "abc", "/libs/*", Path("/cfg/log4j2.properties"), "java")
    assert fmt[-6:] == ["kafka.tools.StorageTool", "format", "-t", "abc", "-c", str(node.properties_path)]


def test_cache_root_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HANDOFF_CACHE_DIR", str(tmp_path / "c"))
    assert jars.cache_root() == tmp_path / "c"
    monkeypatch.delenv("HANDOFF_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert jars.cache_root() == tmp_path / "x" / "kafka-handoff"


def test_pom_pins_the_version_the_code_expects() -> None:
    text = jars.pom_text()
    assert f"<kafka.version>{jars.KAFKA_VERSION}</kafka.version>" in text
    assert "<artifactId>log4j-slf4j-impl</artifactId>" in text
    assert "<artifactId>maven-dependency-plugin</artifactId>" in text


def test_parse_bootstrap() -> None:
    assert probe.parse_bootstrap("127.0.0.1:9092, localhost:1") == [("127.0.0.1", 9092), ("localhost", 1)]
    with pytest.raises(ValueError, match=r"'bootstrap.servers'.*'localhost' is not of the form host:port"):
        probe.parse_bootstrap("localhost")
    with pytest.raises(ValueError, match=r"'bootstrap.servers': at least one broker address is required"):
        probe.parse_bootstrap(" , ")


def test_cli_has_broker_and_demo_subcommands() -> None:
    parser = build_parser()
    args = parser.parse_args(["broker", "start", "--nodes", "3", "--data-dir", "/tmp/x"])
    assert args.nodes == 3
    assert str(args.data_dir) == "/tmp/x"
    assert callable(args.func)
    assert callable(parser.parse_args(["demo"]).func)
    for action in ("stop", "status", "fetch-jars"):
        assert callable(parser.parse_args(["broker", action]).func)
    with pytest.raises(SystemExit):
        parser.parse_args(["broker", "start", "--nodes", "2"])


def test_cds_archive_is_used_only_when_present_and_enabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolved = jars.ResolvedJars("4.3.1", tmp_path / "libs", False, 0.0)
    monkeypatch.delenv("HANDOFF_CDS", raising=False)
    assert cds.jvm_opts(resolved, "/usr/bin/java") == []
    archive = cds.archive_path(resolved, "/usr/bin/java")
    assert archive.parent == tmp_path
    archive.write_bytes(b"x")
    assert cds.jvm_opts(resolved, "/usr/bin/java") == [f"-XX:SharedArchiveFile={archive}"]
    monkeypatch.setenv("HANDOFF_CDS", "0")
    assert cds.jvm_opts(resolved, "/usr/bin/java") == []
    assert cds.ensure_archive(resolved, "/usr/bin/java", lambda _opts: None) is None
