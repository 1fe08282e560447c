"""The pipeline on a Spark standalone cluster brought up from pyspark's own launcher.

The pip package has no ``sbin/start-master.sh``/``start-worker.sh`` (only ``sbin/start-connect-server.sh``
and friends), so the master and worker are started with ``bin/spark-class
org.apache.spark.deploy.master.Master`` / ``...worker.Worker`` from the installed pyspark.  The worker
process (``handoff pipeline run``) connects with ``spark.master = "spark://..."``; its Spark jobs run in an
executor the standalone worker launched.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff.pipeline import load_config
from kafka_handoff.pipeline import testing as pt
from kafka_handoff.pipeline.sinks import make_sink
from kafka_handoff.sample import generate_events

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_line(log: Path, needle: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while needle not in (log.read_text(errors="replace") if log.exists() else ""):
        assert proc.poll() is None, f"exited {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
        assert time.monotonic() < deadline, f"no {needle!r} within {timeout}s:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    pyspark = pytest.importorskip("pyspark")
    home = Path(pyspark.__file__).parent
    spark_class = home / "bin" / "spark-class"
    assert spark_class.exists(), f"{spark_class} is missing from the pyspark package"
    work = tmp_path_factory.mktemp("standalone")
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(work)}
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master_log, worker_log = work / "master.log", work / "worker.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(master_log, "wb") as out:
            master = subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(free_port())],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip
        procs.append(master)
        wait_for_line(master_log, "Starting Spark master", master, 120)
        with open(worker_log, "wb") as out:
            worker = subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--cores", "1", "--memory", "2g", "--webui-port", str(free_port()),
                 "--work-dir", str(work / "work"), url],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip
        procs.append(worker)
        wait_for_line(worker_log, "Successfully registered with master", worker, 120)
        yield {"url": url, "work": work / "work", "worker_log": worker_log}
    finally:
        for proc in reversed(procs):
            stop(proc)


def test_pipeline_runs_on_a_standalone_cluster(
    broker: Any, topic_factory: Any, standalone: dict[str, Any], tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(2, configs={"retention.ms": "-1"})
    events = generate_events(2000, seed=101, malformed_share=0.02, start_ms=time.time_ns() // 1_000_000)
    pt.produce(bootstrap, topic, events)
    cfg_path = pt.write_config_toml(
        tmp_path / "pipeline.toml",
        {
            "kafka": {"topics": [topic], "bootstrap.servers": bootstrap, "group.id": f"g-{topic}"},
            "batch": {"max_records": 1000, "max_interval_ms": 500},
            "spark": {"master": standalone["url"]},
            "spark.conf": {"spark.executor.memory": "1g", "spark.cores.max": "1"},
            "transform": {"function": "kafka_handoff.pipeline.testing:records"},
            "sink": {"format": "parquet", "path": str(tmp_path / "out")},
        },
    )
    summary_path = tmp_path / "summary.json"
    log = tmp_path / "driver.log"
    proc = pt.start_worker_process(
        cfg_path, member="on-cluster", until_idle_s=5, summary_json=summary_path, log_path=log
    )
    try:
        assert proc.wait(300) == 0, log.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    summary = json.loads(summary_path.read_text())
    assert summary["records_committed"] == 2000
    sink = make_sink(load_config(cfg_path).sink)
    assert pt.exactly_once_report(pt.valid_event_ids(events), pt.output_event_ids(sink.read_table())) == ""
    # The jobs ran in an executor of the standalone worker (it made an application directory for it).
    apps = list(Path(standalone["work"]).glob("app-*"))
    assert apps, standalone["worker_log"].read_text()[-3000:]
    assert "Asked to launch executor" in standalone["worker_log"].read_text()
