"""``handoff broker start --schema-registry``: a detached broker and Schema Registry, the registry's URL
printed and added to DATA_DIR/client.json, both stopped by ``handoff broker stop``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from registry_helpers import avro_record, unique_subject

from kafka_handoff import devbroker
from kafka_handoff.devbroker import registry
from kafka_handoff.devbroker._procs import pid_alive
from kafka_handoff.schema_registry import SchemaRegistryClient

pytestmark = pytest.mark.integration


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafka_handoff.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "broker-with-registry"
    yield path
    devbroker.stop(path)  # never leave a detached broker or registry behind, even when the test fails


def wait_gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_cli_starts_the_registry_beside_the_broker_and_stops_it(data_dir: Path) -> None:
    started = run_cli("broker", "start", "--data-dir", str(data_dir), "--schema-registry")
    assert started.returncode == 0, started.stderr
    bootstrap, url = started.stdout.split()
    assert bootstrap.startswith("127.0.0.1:")
    assert url.startswith("http://127.0.0.1:") and url.endswith("/apis/ccompat/v7")
    settings = json.loads((data_dir / "client.json").read_text(encoding="utf-8"))
    assert settings == {"bootstrap.servers": bootstrap, "schema.registry.url": url}

    client = SchemaRegistryClient({"url": settings["schema.registry.url"]})
    subject = unique_subject("cli")
    schema_id = client.register_schema(subject, avro_record("Cli", [{"name": "a", "type": "int"}]))
    assert client.get_latest_version(subject).schema_id == schema_id  # it outlived the CLI process

    shown = run_cli("broker", "status", "--data-dir", str(data_dir))
    assert shown.returncode == 0 and f"schema registry: {url}" in shown.stdout and " up" in shown.stdout

    state = registry.registry_state(data_dir / "schema-registry")
    assert state is not None and isinstance(state["pid"], int)
    stopped = run_cli("broker", "stop", "--data-dir", str(data_dir))
    assert stopped.returncode == 0, stopped.stderr
    assert wait_gone(state["pid"])
    assert registry.registry_state(data_dir / "schema-registry") is None
