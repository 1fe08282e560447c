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
            "--slow-ms", "300", "--steady", "2", "--leave-after", "15", "--stop-after", "2", "--warm-up", "1",
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


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_java_slow_loop_member_compiles_runs_and_writes_the_bench_log(
    broker: Any, tmp_path: Path, protocol: str
) -> None:
    """The rebalance bench's Java member compiles against the cached kafka-clients jar, starts, stops on
    SIGTERM like the Python members (close, then the log) and writes a log the analysis reads."""
    import signal
    import subprocess

    from kafka_handoff.bench.peers import slow_loop_member_command
    from kafka_handoff.bench.rebalance import ScenarioConfig, analyse
    from kafka_handoff.bench.throughput import create_topic, delete_topic

    topic = create_topic(broker.bootstrap_servers, 1, prefix="bench-java-member")
    out = tmp_path / "m1.json"
    cmd = slow_loop_member_command(
        {
            "protocol": protocol,
            "bootstrap-servers": broker.bootstrap_servers,
            "topic": topic,
            "group": f"{topic}-group",
            "name": "m1",
            "out": str(out),
            "work-ms": "5.0",
            "slow-every": "0",
            "slow-ms": "0",
            "in-flight": "4",
            "workers": "2",
            "poll-timeout": "0.02",
            "commit-interval": "0.2",
            "max-poll-interval-ms": "10000",
            "loop-ms": "100.0",
        }
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        for line in proc.stdout:  # "ready" once it has subscribed and entered its loop
            lines.append(line)
            if line.strip() == "ready":
                break
        assert lines and lines[-1].strip() == "ready", "".join(lines)[-2000:]
        proc.send_signal(signal.SIGTERM)
        # 143 (128 + SIGTERM): the JVM's status for a shutdown by signal, once the shutdown hook (which
        # waits for the member to close and write its log) has returned.
        assert proc.wait(120) in (0, 143)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        delete_topic(broker.bootstrap_servers, topic)
    log = json.loads(out.read_text(encoding="utf-8"))
    assert log["client"] == "java" and log["protocol"] == protocol and log["name"] == "m1"
    kinds = [kind for _t, kind, _parts in log["events"]]
    assert kinds[0] == "subscribe" and kinds[-2:] == ["stopping", "closed"]
    result = analyse({"m1": log}, [0], {}, float(log["events"][0][0]), ScenarioConfig(partitions=1))
    assert result["processed"] == 0 and result["duplicates"] == 0 and result["fenced_members"] == 0


def test_compare_bench_runs_both_builds_and_prints_ratios(
    broker: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # HEAD's build (own virtualenv, under tmp_path) against this tree; tiny sizes, no speed asserted.
    code = main(
        [
            "bench", "compare", "HEAD", "--bootstrap-servers", broker.bootstrap_servers,
            "--records", "2000", "--produce-records", "2000", "--partitions", "2", "--repeat", "2",
            "--apis", "records,columns", "--modes", "send,nowait", "--cache-dir", str(tmp_path / "venvs"),
            "--out", str(tmp_path / "out"),
        ]
    )  # fmt: skip
    assert code == 0
    [path] = (tmp_path / "out").glob("compare-*.json")
    data = json.loads(path.read_text())
    assert [row["bench"] for row in data["summary"]] == [
        "consume-records", "consume-columns", "produce-send", "produce-nowait"
    ]  # fmt: skip
    for row in data["summary"]:
        sides = [k for k in row if isinstance(row[k], dict)]
        assert len(sides) == 2
        for side in sides:
            assert row[side]["runs"] == 2, (row["bench"], side, row[side])
        assert row["ratio_records_per_s"] > 0 and row["ratio_cpu_s_per_million"] > 0
    for sample in data["samples"]:
        assert sample["records"] == 2000 and not sample["error"]
    # Both rounds ran both builds, in swapped order.
    first = [s["side"] for s in data["samples"] if s["bench"] == "consume-records"]
    assert first[0] == first[3] and first[1] == first[2] and first[0] != first[1]
    out = capsys.readouterr().out
    assert "records/s" in out and "CPU/M" in out
    # The ref's virtualenv holds its own build (with the C extensions), not this tree.
    [venv_python] = (tmp_path / "venvs").glob("*/venv/bin/python")
    assert str(venv_python) in data["sides"].values()
