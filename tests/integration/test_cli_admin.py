"""The first hour with ``handoff`` against the real broker: commands find the broker ``handoff broker start``
started from the current directory, and a sending command stops at the first failed delivery."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

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
