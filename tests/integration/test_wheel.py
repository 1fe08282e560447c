"""The installable package: sdist and platform wheel with the compiled extensions (issue: day one).

``python -m build`` makes the sdist and, from it, the wheel; the wheel goes into a fresh virtualenv, and a
process started outside the source tree produces and consumes through the dev broker with the C loops.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

CHECK = r"""
import importlib.util, json, sys, uuid
import kafka_handoff
from kafka_handoff import AdminClient, Consumer, NewTopic, Producer

bootstrap = sys.argv[1]
topic = "wheel-" + uuid.uuid4().hex[:8]
with AdminClient({"bootstrap.servers": bootstrap}) as admin:
    admin.create_topics([NewTopic(topic, 1, 1)], timeout=60)
with Producer({"bootstrap.servers": bootstrap}) as producer:
    for i in range(500):
        producer.send(topic, value=b"v%d" % i, key=b"k%d" % i)
    producer.flush(60)
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
consumer.subscribe([topic])
values = []
for _ in range(600):
    values += [r.value for r in consumer.poll(0.5)]
    if len(values) >= 500:
        break
consumer.close()
optional = ("rich", "pyspark", "pyarrow", "uvloop", "matplotlib")
absent = [m for m in optional if importlib.util.find_spec(m) is None]
print(json.dumps({"file": kafka_handoff.__file__, "info": kafka_handoff.build_info(), "absent": absent,
                  "ok": values == [b"v%d" % i for i in range(500)], "count": len(values)}))
"""


def test_wheel_installs_without_the_source_tree_and_uses_the_c_loops(broker: Any, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    sdists = list(dist.glob("kafka_handoff-*.tar.gz"))
    wheels = list(dist.glob("kafka_handoff-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, list(dist.iterdir())
    wheel = wheels[0]
    assert "-py3-none-any" not in wheel.name, f"{wheel.name} is not a platform wheel"
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("kafka_handoff/protocol/_fastrecords") and n.endswith(".so") for n in names)
    assert any(n.startswith("kafka_handoff/producer/_fastencode") and n.endswith(".so") for n in names)
    assert any(n.startswith("kafka_handoff/pipeline/_jsonscan") and n.endswith(".so") for n in names)
    assert "kafka_handoff/py.typed" in names
    # Spark 4 discovers installed Python data sources in top-level modules named pyspark_*
    assert "pyspark_kafka_handoff/__init__.py" in names and "kafka_handoff/spark/source.py" in names
    info_dir = wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"
    assert f"{info_dir}/licenses/LICENSE" in names, [n for n in names if "dist-info" in n]
    metadata = zipfile.ZipFile(wheel).read(f"{info_dir}/METADATA").decode()
    core = [
        line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert sorted(line.split()[1].split("<")[0].split(">")[0] for line in core) == [
        "cramjam",
        "crc32c",
        "kio",
    ]

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    # Without PYTHONPATH: a source tree on the path (with its egg-info) would make pip skip the install.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KAFKA_HANDOFF_PURE_PYTHON")}
    install = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", str(wheel)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]

    work = tmp_path / "elsewhere"
    work.mkdir()
    run = subprocess.run(
        [str(py), "-c", CHECK, broker.bootstrap_servers],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert not Path(result["file"]).resolve().is_relative_to(ROOT), result["file"]
    assert result["info"]["record_decoder"] == "c", result["info"]
    assert result["info"]["record_encoder"] == "c", result["info"]
    assert result["info"]["json_scanner"] == "c", result["info"]
    assert result["ok"], result["count"]
    # A core install: the client works without the optional packages, and the CLI names the extra to add.
    assert result["absent"] == ["rich", "pyspark", "pyarrow", "uvloop", "matplotlib"], result["absent"]
    cli = subprocess.run(
        [str(venv / "bin" / "handoff"), "topics", "list", "--bootstrap-servers", broker.bootstrap_servers],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 2, (cli.returncode, cli.stdout[-2000:], cli.stderr[-2000:])
    assert "pip install 'kafka-handoff[cli]'" in cli.stderr, cli.stderr[-2000:]
