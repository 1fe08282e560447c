"""The top-level package exports everything an application names (issue: what a user expects on day one)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

import kafka_handoff

pytestmark = pytest.mark.unit


def test_every_name_in_all_resolves() -> None:
    missing = [name for name in kafka_handoff.__all__ if not hasattr(kafka_handoff, name)]
    assert missing == []


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("Consumer", "kafka_handoff.consumer"),
        ("ConsumerRecords", "kafka_handoff.consumer"),
        ("Producer", "kafka_handoff.producer"),
        ("AdminClient", "kafka_handoff.admin"),
        ("NewTopic", "kafka_handoff.admin"),
        ("TopicPartition", "kafka_handoff.types"),
        ("OffsetAndMetadata", "kafka_handoff.types"),
        ("ConsumerRecord", "kafka_handoff.types"),
        ("RecordMetadata", "kafka_handoff.types"),
        ("RebalanceListener", "kafka_handoff.consumer.listener"),
        ("RebalanceConsumer", "kafka_handoff.consumer.listener"),
        ("ConsumerRebalanceListener", "kafka_handoff.consumer.listener"),
        ("KafkaError", "kafka_handoff.errors"),
        ("CommitFailedError", "kafka_handoff.errors"),
    ],
)
def test_top_level_names_are_the_submodule_objects(name: str, module: str) -> None:
    assert getattr(kafka_handoff, name) is getattr(importlib.import_module(module), name)


def test_importing_the_package_does_not_load_spark() -> None:
    import subprocess
    import sys

    code = "import sys, kafka_handoff; print(any(m.startswith('pyspark') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_build_info_reports_the_active_fast_paths() -> None:
    from kafka_handoff.producer import batch
    from kafka_handoff.protocol import records

    info = kafka_handoff.build_info()
    assert info["version"] == kafka_handoff.__version__
    assert info["record_decoder"] == records.IMPLEMENTATION
    assert info["record_encoder"] == batch.IMPLEMENTATION
    assert (info["record_decoder_unavailable"] is None) == ("c" in records.available_implementations())


def test_missing_fast_paths_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    from kafka_handoff._build import missing_fast_paths
    from kafka_handoff.protocol import records

    monkeypatch.setattr(records, "IMPLEMENTATION", "python")
    monkeypatch.setattr(records, "C_UNAVAILABLE_REASON", "ImportError: no _fastrecords")
    missing = missing_fast_paths()
    assert any("C record decoder (ImportError: no _fastrecords)" in m for m in missing)


def test_missing_fast_paths_names_a_missing_send_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from kafka_handoff._build import missing_fast_paths
    from kafka_handoff.producer import batch, future

    monkeypatch.setattr(batch, "IMPLEMENTATION", "c")
    monkeypatch.setattr(future, "C_FUTURES", None)
    assert any("C send path" in m for m in missing_fast_paths())


def test_missing_fast_paths_names_a_missing_json_scanner(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.machinery
    import sys

    from kafka_handoff._build import build_info, missing_fast_paths

    real = importlib.machinery.PathFinder.find_spec

    def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
        return None if name.endswith("_jsonscan") else real(name, path, target)

    assert build_info()["json_scanner"] == "c"
    monkeypatch.delitem(sys.modules, "kafka_handoff.pipeline._jsonscan", raising=False)
    monkeypatch.setattr(importlib.machinery.PathFinder, "find_spec", find_spec)
    assert build_info()["json_scanner"] == "python"
    assert "C JSON scanner (kafka_handoff.pipeline._jsonscan)" in missing_fast_paths()
