"""The dev Schema Registry's pieces that need no JVM: client.json, the command line, the state file."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from kafka_handoff.devbroker import registry
from kafka_handoff.devbroker.cluster import Cluster, Node, _add_registry_to_client_json

pytestmark = pytest.mark.unit


def _cluster(tmp_path: Path) -> Cluster:
    node = Node(1, "127.0.0.1", 19092, 19093, tmp_path / "node-1")
    cluster = Cluster(tmp_path, "cid", [node], supervised=False, ephemeral=False)
    cluster.schema_registry = registry.SchemaRegistry(
        tmp_path / "schema-registry", "http://127.0.0.1:18081/apis/ccompat/v7", 18081, 1, None, False
    )
    return cluster


def test_client_json_is_made_for_a_plaintext_broker(tmp_path: Path) -> None:
    _add_registry_to_client_json(_cluster(tmp_path))
    path = tmp_path / "client.json"
    assert json.loads(path.read_text()) == {
        "bootstrap.servers": "127.0.0.1:19092",
        "schema.registry.url": "http://127.0.0.1:18081/apis/ccompat/v7",
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_client_json_of_a_secured_broker_keeps_its_settings(tmp_path: Path) -> None:
    secured = {
        "bootstrap.servers": "127.0.0.1:19094",
        "security.protocol": "SSL",
        "ssl.ca.location": "/ca.pem",
    }
    (tmp_path / "client.json").write_text(json.dumps(secured))
    _add_registry_to_client_json(_cluster(tmp_path))
    written = json.loads((tmp_path / "client.json").read_text())
    assert written == {**secured, "schema.registry.url": "http://127.0.0.1:18081/apis/ccompat/v7"}


def test_command_listens_on_loopback_only() -> None:
    prepared = registry.PreparedRegistry(registry.APICURIO_VERSION, Path("/cache/app"), False, 0.0)
    cmd = registry.registry_command("/usr/bin/java", prepared, 18081)
    assert cmd[0] == "/usr/bin/java" and cmd[-2:] == ["-jar", "/cache/app/registry-runner.jar"]
    assert "-Dquarkus.http.host=127.0.0.1" in cmd and "-Dquarkus.http.port=18081" in cmd


def test_stop_without_a_registry_is_a_no_op(tmp_path: Path) -> None:
    assert registry.stop_registry(tmp_path) is False
    assert registry.registry_state(tmp_path) is None


def test_pom_pins_the_version_the_module_names() -> None:
    from importlib import resources

    pom = resources.files("kafka_handoff.devbroker").joinpath("registry/pom.xml").read_text(encoding="utf-8")
    assert f"<apicurio.version>{registry.APICURIO_VERSION}</apicurio.version>" in pom
