"""The first hour with ``handoff`` against the real broker: commands find the broker ``handoff broker start``
started from the current directory, and a sending command stops at the first failed delivery."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from admin_helpers import produce_timestamped
from kafka_tools import run_tool

from kafka_handoff.admin import AdminClient
from kafka_handoff.cli.main import main
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.integration


def test_commands_find_the_broker_started_from_this_directory(
    broker: Any,
    topic_factory: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = topic_factory(partitions=2)
    state = tmp_path / ".handoff" / "broker"
    state.mkdir(parents=True)
    (state / "state.json").write_text(json.dumps({"bootstrap_servers": broker.bootstrap_servers}))
    monkeypatch.delenv("HANDOFF_BOOTSTRAP", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["topics", "list"]) == 0
    assert topic in capsys.readouterr().out


def test_produce_sample_stops_at_the_first_failed_delivery_and_says_why(
    broker: Any, topic_factory: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every batch is larger than the topic accepts: the very first delivery fails.
    topic = topic_factory(partitions=1, configs={"max.message.bytes": "64"})
    b = ["--bootstrap-servers", broker.bootstrap_servers]
    assert main(["produce-sample", *b, "--topic", topic, "--count", "2000", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "first failed delivery" in err
    assert "large" in err.lower()  # the broker's reason (RecordTooLarge / MessageTooLarge)
    with AdminClient({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        assert admin.list_offsets([TopicPartition(topic, 0)], timeout=30)[TopicPartition(topic, 0)] == 0


# ------------------------------------------------------------------------------------ operator commands
# Kafka's own tools are the oracle: what handoff changed is what they describe.
CGC = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def _kafka_group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """``kafka-consumer-groups --describe --offsets``: (topic, partition) -> CURRENT-OFFSET."""
    out = run_tool(CGC, "--bootstrap-server", bootstrap, "--describe", "--offsets", "--group", group)
    offsets: dict[tuple[str, int], int] = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[0] == group and cols[3].isdigit():
            offsets[(cols[1], int(cols[2]))] = int(cols[3])
    return offsets


def test_cli_groups_reset_offsets_lag_and_delete_offsets_checked_by_kafkas_tool(
    broker: Any, topic_factory: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import time
    import uuid

    bootstrap = broker.bootstrap_servers
    b = ["--bootstrap-servers", bootstrap]
    topic = topic_factory(partitions=2)
    base = int(time.time() * 1000) - 60_000
    produce_timestamped(bootstrap, topic, 10, 2, base)
    group = f"cli-reset-{uuid.uuid4().hex[:8]}"
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.alter_consumer_group_offsets(group, {TopicPartition(topic, 0): 2, TopicPartition(topic, 1): 3})
    capsys.readouterr()

    # Dry run by default: the plan is printed, nothing changes.
    reset = ["groups", "reset-offsets", "--group", group, "--topic", topic, *b]
    assert main([*reset, "--to-latest", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["executed"] is False
    assert [(p["partition"], p["current"], p["new"]) for p in plan["partitions"]] == [(0, 2, 10), (1, 3, 10)]
    assert _kafka_group_offsets(bootstrap, group) == {(topic, 0): 2, (topic, 1): 3}

    # --to-datetime: record i has timestamp base + i s; the first at or after base + 4.5 s is offset 5.
    from datetime import UTC, datetime

    when = datetime.fromtimestamp((base + 4500) / 1000, UTC).isoformat(timespec="milliseconds")
    assert main([*reset, "--to-datetime", when, "--execute"]) == 0
    assert "reset" in capsys.readouterr().out
    assert _kafka_group_offsets(bootstrap, group) == {(topic, 0): 5, (topic, 1): 5}

    assert main(["groups", "reset-offsets", "--group", group, "--topic", f"{topic}:1", "--shift-by", "-2",
                 "--execute", *b]) == 0  # fmt: skip
    assert _kafka_group_offsets(bootstrap, group) == {(topic, 0): 5, (topic, 1): 3}

    capsys.readouterr()
    assert main(["groups", "lag", group, "--json", *b]) == 0
    lag = json.loads(capsys.readouterr().out)
    assert lag["total_lag"] == (10 - 5) + (10 - 3)
    assert [(p["partition"], p["lag"]) for p in lag["partitions"]] == [(0, 5), (1, 7)]
    assert main(["groups", "lag", group, "--watch", "0.01", "--iterations", "2", *b]) == 0
    assert capsys.readouterr().out.count(f"total lag {12}") == 2

    assert main(["groups", "delete-offsets", "--group", group, "--topic", f"{topic}:0", *b]) == 0
    assert _kafka_group_offsets(bootstrap, group) == {(topic, 1): 3}


def test_cli_reset_offsets_bad_flags_and_unknown_topics_fail_with_one_line(
    broker: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    b = ["--bootstrap-servers", broker.bootstrap_servers]
    base = ["groups", "reset-offsets", "--group", "g", "--topic", "no-such-topic-xyz", *b]
    assert main([*base, "--by-duration", "ten minutes"]) == 2
    assert "not a duration" in capsys.readouterr().err
    assert main([*base, "--to-earliest"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("handoff groups:") and "no-such-topic-xyz" in err and "\n" not in err


def test_cli_metadata_configs_and_records(
    broker: Any, topic_factory: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import time

    bootstrap = broker.bootstrap_servers
    b = ["--bootstrap-servers", bootstrap]
    topic = topic_factory(partitions=3)
    capsys.readouterr()
    assert main(["metadata", "--topic", topic, "--json", *b]) == 0
    meta = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in meta["topics"]] == [topic]
    assert [p["partition"] for p in meta["topics"][0]["partitions"]] == [0, 1, 2]
    broker_ids = {br["id"] for br in meta["brokers"]}
    assert meta["controller_id"] in broker_ids or meta["controller_id"] < 0
    assert all(p["leader"] in broker_ids and p["isr"] for p in meta["topics"][0]["partitions"])

    assert (
        main(
            [
                "configs",
                "set",
                "--topic",
                topic,
                "--add-config",
                "retention.ms=86400000,segment.ms=3600000",
                *b,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["configs", "describe", "--entity-type", "topics", "--entity-name", topic, "--json", *b]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["retention.ms"]["value"] == "86400000"
    assert described["segment.ms"]["source"] == "TOPIC_CONFIG"
    # Kafka's ConfigCommand describes what handoff set
    config_command = ("kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, "--describe")
    oracle = run_tool(*config_command, "--entity-type", "topics", "--entity-name", topic, broker_jars=True)
    assert "retention.ms=86400000" in oracle and "segment.ms=3600000" in oracle, oracle
    assert main(["configs", "delete", "--topic", topic, "--delete-config", "segment.ms", *b]) == 0
    oracle = run_tool(*config_command, "--entity-type", "topics", "--entity-name", topic, broker_jars=True)
    assert "retention.ms=86400000" in oracle and "segment.ms=" not in oracle, oracle
    # a broker's dynamic config, likewise
    node = str(meta["brokers"][0]["id"])
    assert main(["configs", "set", "--broker", node, "--add-config", "log.cleaner.backoff.ms=14000", *b]) == 0
    oracle = run_tool(*config_command, "--entity-type", "brokers", "--entity-name", node, broker_jars=True)
    assert "log.cleaner.backoff.ms=14000" in oracle, oracle
    assert main(["configs", "delete", "--broker", node, "--delete-config", "log.cleaner.backoff.ms", *b]) == 0
    oracle = run_tool(*config_command, "--entity-type", "brokers", "--entity-name", node, broker_jars=True)
    assert "log.cleaner.backoff.ms=14000" not in oracle, oracle
    capsys.readouterr()
    assert main(["configs", "describe", "--topic", topic, "--json", *b]) == 0
    remaining = json.loads(capsys.readouterr().out)
    assert "segment.ms" not in remaining
    assert remaining["retention.ms"]["value"] == "86400000"

    produce_timestamped(bootstrap, topic, 4, 3, int(time.time() * 1000))
    assert (
        main(["records", "delete", "--topic", topic, "--partition", "1", "--offset", "3", "--json", *b]) == 0
    )
    assert json.loads(capsys.readouterr().out) == [{"topic": topic, "partition": 1, "low_watermark": 3}]
    # Kafka's DeleteRecordsCommand on partition 2 reports the low watermark handoff reports for partition 1
    offsets_file = tmp_path / "delete.json"
    offsets_file.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 2, "offset": 3}]})
    )
    out = run_tool(
        "org.apache.kafka.tools.DeleteRecordsCommand", "--bootstrap-server", bootstrap,
        "--offset-json-file", str(offsets_file),
    )  # fmt: skip
    assert f"partition: {topic}-2\tlow_watermark: 3" in out, out
    # Kafka's GetOffsetShell: the earliest offsets after the deletion.
    out = run_tool(
        "org.apache.kafka.tools.GetOffsetShell",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--time",
        "-2",
    )
    assert sorted(out.split()) == sorted([f"{topic}:0:0", f"{topic}:1:3", f"{topic}:2:3"])


def test_cli_acls_and_users_on_the_secured_broker_checked_by_kafkas_acl_command(
    secured: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import io
    import time
    import uuid

    bootstrap = secured.bootstrap_servers
    b = ["--bootstrap-servers", bootstrap]
    topic = f"cli-acl-{uuid.uuid4().hex[:8]}"
    add = ["acls", "add", "--topic", topic, "--deny-principal", "User:alice", "--operation", "Write",
           "--operation", "Read", *b]  # fmt: skip
    assert main(add) == 0
    capsys.readouterr()

    def kafka_lists() -> str:
        return run_tool(
            "org.apache.kafka.tools.AclCommand", "--bootstrap-server", bootstrap, "--list", "--topic", topic
        )

    deadline = time.monotonic() + 30
    while (listed := kafka_lists()).count("User:alice") < 2:  # ACLs propagate through the metadata log
        assert time.monotonic() < deadline, listed
    assert (
        "operation=WRITE, permissionType=DENY" in listed and "operation=READ, permissionType=DENY" in listed
    )

    assert main(["acls", "list", "--topic", topic, "--json", *b]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted((r["operation"], r["permission_type"], r["principal"]) for r in rows) == [
        ("READ", "DENY", "User:alice"),
        ("WRITE", "DENY", "User:alice"),
    ]
    assert main(["acls", "remove", "--topic", topic, "--operation", "Write", "--json", *b]) == 0
    assert [r["operation"] for r in json.loads(capsys.readouterr().out)] == ["WRITE"]
    deadline = time.monotonic() + 30
    while "WRITE" in (listed := kafka_lists()):
        assert time.monotonic() < deadline, listed
    assert "operation=READ, permissionType=DENY" in listed
    assert main(["acls", "remove", "--topic", topic, *b]) == 0

    user = f"dave{uuid.uuid4().hex[:6]}"
    stdin = io.StringIO("pw-of-dave\n")
    import sys as _sys

    saved, _sys.stdin = _sys.stdin, stdin
    try:
        assert (
            main(
                ["users", "scram-set", "--user", user, "--mechanism", "SCRAM-SHA-512", "--password-stdin", *b]
            )
            == 0
        )
    finally:
        _sys.stdin = saved
    capsys.readouterr()
    assert main(["users", "describe", "--user", user, "--json", *b]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"user": user, "mechanism": "SCRAM-SHA-512", "iterations": 8192}
    ]
    assert main(["users", "scram-delete", "--user", user, "--mechanism", "SCRAM-SHA-512", *b]) == 0
    assert main(["users", "describe", "--user", user, *b]) == 1
    assert user in capsys.readouterr().err


def test_cli_produce_json_lines_from_a_file_read_back_by_librdkafka(
    broker: Any, topic_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ck = pytest.importorskip("confluent_kafka")
    import base64
    import uuid

    topic = topic_factory(partitions=2)
    lines = [
        json.dumps({"key": f"k{i}", "value": {"n": i}, "headers": {"src": "file"}, "partition": i % 2})
        for i in range(20)
    ]
    data = tmp_path / "records.jsonl"
    data.write_text("\n".join(lines) + "\n")
    binary = tmp_path / "binary.txt"
    binary.write_text(base64.b64encode(b"\x00k").decode() + ":" + base64.b64encode(b"\xffv").decode() + "\n")
    b = ["--bootstrap-servers", broker.bootstrap_servers]
    assert main(["produce", "-t", topic, "--format", "json", str(data), *b]) == 0
    assert (
        main(["produce", "-t", topic, "-K", ":", "--base64", "-p", "0", "-H", "kind=bin", str(binary), *b])
        == 0
    )
    assert "produced 1 records" in capsys.readouterr().err

    consumer = ck.Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": f"o-{uuid.uuid4().hex[:6]}",
         "auto.offset.reset": "earliest", "enable.partition.eof": True}
    )  # fmt: skip
    consumer.subscribe([topic])
    got: list[tuple[int, bytes, bytes, list[tuple[str, bytes]]]] = []
    eof: set[int] = set()
    import time

    deadline = time.monotonic() + 60
    try:
        while len(got) < 21 or len(eof) < 2:
            assert time.monotonic() < deadline, got
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                eof.add(msg.partition())
                continue
            eof.discard(msg.partition())
            got.append((msg.partition(), msg.key(), msg.value(), list(msg.headers() or [])))
    finally:
        consumer.close()
    by_key = {k: (p, v, h) for p, k, v, h in got}
    assert by_key[b"k7"] == (1, b'{"n":7}', [("src", b"file")])
    assert by_key[b"\x00k"] == (0, b"\xffv", [("kind", b"bin")])
    assert len(got) == 21


def test_cli_produce_stops_at_the_first_failed_delivery(
    broker: Any, topic_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = topic_factory(partitions=1, configs={"max.message.bytes": "64"})
    data = tmp_path / "big.txt"
    data.write_text("".join("x" * 200 + "\n" for _ in range(500)))
    assert main(["produce", "-t", topic, str(data), "--bootstrap-servers", broker.bootstrap_servers]) == 1
    err = capsys.readouterr().err
    assert "first failed delivery" in err and "large" in err.lower()


def test_cli_consume_offsets_times_partitions_and_until_end(
    broker: Any, topic_factory: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    bootstrap = broker.bootstrap_servers
    topic = topic_factory(partitions=2)
    base = int(time.time() * 1000) - 60_000
    # record i: value v<i>, timestamp base + i s, in both partitions
    produce_timestamped(bootstrap, topic, 10, 2, base)
    c = ["consume", "-t", topic, "--bootstrap-servers", bootstrap, "--until-end"]
    capsys.readouterr()

    def lines(*flags: str) -> list[str]:
        assert main([*c, *flags]) == 0
        return sorted(capsys.readouterr().out.splitlines())

    assert lines("--offset", "-3", "--format", "{partition}:{offset}:{value}") == [
        f"{p}:{o}:v{o}" for p in (0, 1) for o in (7, 8, 9)
    ]
    assert lines("--timestamp", str(base + 8500), "--format", "{partition}:{offset}") == ["0:9", "1:9"]
    assert lines("--since", "1h", "--partition", "1", "--format", "{offset}") == sorted(
        str(o) for o in range(10)
    )
    assert lines("--offset", "end", "--format", "{offset}") == []
    assert lines("--partition", "0", "--offset", "4", "--count", "2", "--format", "{offset}") == ["4", "5"]
    (record,) = lines("--partition", "1", "--offset", "-1", "--format", "json")
    assert json.loads(record) == {
        "topic": topic, "partition": 1, "offset": 9, "timestamp": base + 9000, "key": None, "value": "v9",
        "headers": [],
    }  # fmt: skip


def test_cli_partitions_and_transactions(
    broker: Any, topic_factory: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import uuid

    from kafka_handoff.producer import Producer

    bootstrap = broker.bootstrap_servers
    b = ["--bootstrap-servers", bootstrap]
    topic = topic_factory(partitions=2)
    capsys.readouterr()
    assert (
        main(["partitions", "elect-leaders", "--election-type", "preferred", "--topic", topic, "--json", *b])
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert [(r["partition"], r["result"]) for r in rows] == [(0, "not needed"), (1, "not needed")]

    assert main(["partitions", "reassign", "--topic", topic, "--partition", "1", "--replicas", "99", *b]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("handoff partitions:") and f"{topic}-1" in err and "\n" not in err
    assert main(["partitions", "reassignments", "--json", *b]) == 0
    assert json.loads(capsys.readouterr().out) == []

    txn_id = f"cli-txn-{uuid.uuid4().hex[:8]}"
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id}) as producer:
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.send(topic, b"x", partition=1).result(60)
        assert main(["transactions", "describe", "--transactional-id", txn_id, "--json", *b]) == 0
        described = json.loads(capsys.readouterr().out)
        assert described["state"] == "Ongoing" and described["partitions"] == [f"{topic}-1"]
        assert main(["transactions", "list", "--state", "Ongoing", "--json", *b]) == 0
        assert txn_id in [t["transactional_id"] for t in json.loads(capsys.readouterr().out)]
        assert main(["transactions", "abort", "--topic", topic, "--partition", "1", *b]) == 0
        assert "aborted the transaction" in capsys.readouterr().out
        assert main(["transactions", "abort", "--topic", topic, "--partition", "1", *b]) == 1
        assert "no open transaction" in capsys.readouterr().err


def test_cli_reports_every_failed_resource_on_one_line(
    broker: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import uuid

    b = ["--bootstrap-servers", broker.bootstrap_servers]
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    assert (
        main(
            [
                "records",
                "delete",
                "--topic",
                missing,
                "--partition",
                "0",
                "--partition",
                "1",
                "--offset",
                "1",
                *b,
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{missing}-0" in err and f"{missing}-1" in err
