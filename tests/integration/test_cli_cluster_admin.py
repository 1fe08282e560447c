"""``handoff partitions reassign`` and ``handoff partitions elect-leaders`` on the 3-node cluster, where a
replica really moves and a preferred leader really takes over -- each result checked with Kafka's own tool
(``ReassignPartitionsCommand --verify``, ``LeaderElectionCommand``, ``TopicCommand --describe``) as the
oracle."""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_tools import run_tool

from kafka_handoff.admin import AdminClient, NewTopic
from kafka_handoff.cli.main import main

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
ELECT = "org.apache.kafka.tools.LeaderElectionCommand"
TOPICS = "org.apache.kafka.tools.TopicCommand"


def _described(bootstrap: str, topic: str) -> tuple[int, list[int], list[int]]:
    """Leader, replicas and ISR of ``topic``'s partition 0 as Kafka's TopicCommand describes them."""
    out = run_tool(TOPICS, "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    line = next(x for x in out.splitlines() if "Partition: 0" in x)

    def field(name: str) -> str:
        found = re.search(rf"\b{name}: ([-0-9,]+)", line)
        assert found is not None, line
        return found.group(1)

    return (
        int(field("Leader")),
        [int(r) for r in field("Replicas").split(",")],
        [int(r) for r in field("Isr").split(",")],
    )


def _await(condition: Any, what: str, timeout: float = 120) -> Any:
    """Poll ``condition()`` (a Kafka tool run: each call is a JVM start, so no extra pause) until truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"


def test_cli_reassign_and_elect_leaders_checked_by_kafkas_tools(
    cluster: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bootstrap = cluster.bootstrap_servers
    b = ["--bootstrap-servers", bootstrap]
    topic = f"cli-reassign-{uuid.uuid4().hex[:8]}"
    nodes = sorted(cluster.node_ids)
    first, second, third = nodes[:3]
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, replica_assignments={0: [first, second]})], timeout=60)
    try:
        _await(lambda: _described(bootstrap, topic)[2] == [first, second], "both replicas in sync")

        # move the second replica to the third broker, which becomes the preferred leader
        target = [third, first]
        capsys.readouterr()
        assert main(["partitions", "reassign", "--topic", topic, "--partition", "0",
                     "--replicas", ",".join(map(str, target)), *b]) == 0  # fmt: skip
        plan = tmp_path / "plan.json"
        plan.write_text(
            json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": target}]})
        )

        def verified() -> bool:
            out = run_tool(REASSIGN, "--bootstrap-server", bootstrap, "--verify",
                           "--reassignment-json-file", str(plan))  # fmt: skip
            assert f"{topic}-0" in out, out
            return "is completed" in out

        _await(verified, "Kafka's tool to verify the reassignment")
        capsys.readouterr()
        assert main(["partitions", "reassignments", "--json", *b]) == 0
        assert json.loads(capsys.readouterr().out) == []

        def in_sync() -> tuple[int, list[int], list[int]] | None:
            described = _described(bootstrap, topic)
            return described if sorted(described[2]) == sorted(target) else None

        leader, replicas, _ = _await(in_sync, "the new replica in sync")
        assert replicas == target
        assert leader == first  # the moved partition kept its leader: the preferred one is not leading yet

        # a preferred election makes the third broker the leader
        assert main(["partitions", "elect-leaders", "--election-type", "preferred", "--topic", topic,
                     "--partition", "0", "--json", *b]) == 0  # fmt: skip
        rows = json.loads(capsys.readouterr().out)
        assert [(r["partition"], r["result"]) for r in rows] == [(0, "elected")]
        assert _described(bootstrap, topic)[0] == third
        # Kafka's own election tool finds nothing left to do
        out = run_tool(ELECT, "--bootstrap-server", bootstrap, "--election-type", "PREFERRED",
                       "--topic", topic, "--partition", "0")  # fmt: skip
        assert f"Valid replica already elected for partitions {topic}-0" in out, out
        # and asking again through handoff reports the same
        assert main(["partitions", "elect-leaders", "--election-type", "preferred", "--topic", topic,
                     "--json", *b]) == 0  # fmt: skip
        assert [r["result"] for r in json.loads(capsys.readouterr().out)] == ["not needed"]
    finally:
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            admin.delete_topics([topic], if_exists=True, timeout=60)
