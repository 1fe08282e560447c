"""Tiny runs of ``handoff bench throughput``, ``produce`` and ``rebalance``: files written, numbers sane.

Speed is not asserted here (that is what the benchmarks are for); what is asserted is that every client
consumed every record, that the figures are consistent with each other, and that the rebalance scenario
finds no record processed twice or never for kafka-handoff.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff.bench.peers import CLIENTS
from kafka_handoff.cli.main import main
from kafka_handoff.devbroker import KAFKA_VERSION, cache_root

pytestmark = pytest.mark.integration

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _tools_jar_cached() -> bool:
    return (cache_root() / f"kafka-{KAFKA_VERSION}" / "tools" / f"kafka-tools-{KAFKA_VERSION}.jar").is_file()


def test_throughput_bench_writes_json_and_png_with_sane_numbers(broker: Any, tmp_path: Path) -> None:
    # The Java consumer only when its jar is cached already: the test does not download from Maven.
    clients = [c for c in CLIENTS if c != "java" or _tools_jar_cached()]
    records, value_bytes = 3000, 50
    code = main(
        [
            "bench", "throughput", "--bootstrap-servers", broker.bootstrap_servers,
            "--records", str(records), "--value-bytes", str(value_bytes), "--partitions", "2",
            "--repeat", "1", "--clients", ",".join(clients), "--out", str(tmp_path),
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads((tmp_path / "throughput.json").read_text())
    assert (tmp_path / "throughput.png").read_bytes()[:8] == PNG_MAGIC
    medians = {m["client"]: m for m in data["medians"]}
    assert sorted(medians) == sorted(clients)
    for name, m in medians.items():
        assert m["runs"] == 1 and m["failed"] == 0, name
        assert m["records"] == records, name
        assert m["records_per_s"] > 0 and m["peak_rss_mb"] > 5, name
        assert m["cpu_s_per_million"] >= 0, name
        # MB/s is value bytes over the same window as records/s.
        assert m["mb_per_s"] == pytest.approx(m["records_per_s"] * value_bytes / 1e6, rel=0.02), name
    for s in data["samples"]:
        assert s["ok"] and s["records"] == records
    assert data["config"]["records"] == records and data["environment"]["cpus"] >= 1


def test_rebalance_bench_finds_no_duplicates_or_gaps_for_handoff(broker: Any, tmp_path: Path) -> None:
    code = main(
        [
            "bench", "rebalance", "--bootstrap-servers", broker.bootstrap_servers, "--protocol", "consumer",
            "--clients", "handoff", "--partitions", "4", "--rate", "200", "--slow-every", "50",
            "--slow-ms", "300", "--steady", "2", "--leave-after", "4", "--stop-after", "2", "--warm-up", "1",
            "--out", str(tmp_path),
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads((tmp_path / "rebalance-consumer.json").read_text())
    assert (tmp_path / "rebalance-consumer.png").read_bytes()[:8] == PNG_MAGIC
    [result] = data["results"]
    assert "error" not in result
    assert result["produced"] > 0
    assert result["duplicates"] == 0 and result["missing"] == 0
    assert result["unique_processed"] == result["produced"]
    assert result["join_to_first_record_s"] is not None and result["join_to_first_record_s"] > 0
    assert [e["event"] for e in result["events"]] == ["m4 joins", "m3 leaves"]
    assert set(result["timeline"]["members"]) == {"m1", "m2", "m3", "m4"}
    # The joiner got partitions and the leaver gave its partitions up.
    m4_assigned = {
        p for _t, kind, parts in result["member_events"]["m4"] if kind == "assigned" for p in parts
    }
    m3_revoked = {p for _t, kind, parts in result["member_events"]["m3"] if kind == "revoked" for p in parts}
    assert m4_assigned and m3_revoked


def test_produce_bench_writes_json_and_png_with_every_record_acknowledged(
    broker: Any, tmp_path: Path
) -> None:
    from kafka_handoff.bench.produce import CLIENTS as PRODUCE_CLIENTS
    from kafka_handoff.bench.produce import client_available

    clients = [c for c in PRODUCE_CLIENTS if client_available(c)]
    records, value_bytes = 2000, 40
    code = main(
        [
            "bench", "produce", "--bootstrap-servers", broker.bootstrap_servers, "--records", str(records),
            "--value-bytes", str(value_bytes), "--partitions", "2", "--compression", "lz4", "--chunk", "300",
            "--repeat", "1", "--out", str(tmp_path),
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads((tmp_path / "produce.json").read_text())
    assert (tmp_path / "produce.png").read_bytes()[:8] == PNG_MAGIC
    assert data["config"]["compression"] == "lz4" and data["config"]["idempotence"] is True
    medians = {m["client"]: m for m in data["medians"]}
    assert sorted(medians) == sorted(clients)
    for name, m in medians.items():
        assert m["runs"] == 1 and m["failed"] == 0, name
        assert m["records"] == records, name
        assert m["records_per_s"] > 0 and m["peak_rss_mb"] > 5 and m["cpu_s_per_million"] > 0, name
        # The send loop is part of the measured window (first send to flush).
        assert m["send_seconds"] <= m["records"] / m["records_per_s"] + 1e-6, name
        assert m["mb_per_s"] == pytest.approx(m["records_per_s"] * value_bytes / 1e6, rel=0.02), name
