"""The dev broker's secrets stay away from other local users: SCRAM passwords never on a command line
(``/proc/<pid>/cmdline`` is world-readable), the argument file that carries them private and removed."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff.devbroker import cluster
from kafka_handoff.devbroker.config import NodeSpec

pytestmark = pytest.mark.unit

SECRET = "s3cret-Pa55"


class RecordingPopen:
    """Stands in for the ``kafka-storage format`` process: records what a ``ps`` would show, and the
    argument file as the JVM would find it."""

    seen: list[tuple[list[str], dict[str, tuple[int, str]]]] = []

    def __init__(self, cmd: list[str], **_kw: Any) -> None:
        files = {}
        for arg in cmd:
            if arg.startswith("@"):
                path = Path(arg[1:])
                files[arg[1:]] = (stat.S_IMODE(path.lstat().st_mode), path.read_text(encoding="utf-8"))
        RecordingPopen.seen.append((list(cmd), files))
        self.returncode = 0

    def communicate(self, timeout: float | None = None) -> tuple[bytes, None]:
        return b"Formatting metadata directory\n", None


def test_scram_passwords_reach_kafka_storage_format_in_a_private_file_not_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subprocess, "Popen", RecordingPopen)
    RecordingPopen.seen = []
    spec = NodeSpec(1, 9001, 9101, tmp_path / "node-1")
    spec.node_dir.mkdir()
    scram = f"SCRAM-SHA-256=[name=alice,password={SECRET}]"
    cluster._format_all([spec], "cluster-id", "/libs/*", "java", 10.0, [], ["--add-scram", scram])

    ((cmd, files),) = RecordingPopen.seen
    assert not any(SECRET in arg for arg in cmd)  # what every local user sees in /proc/<pid>/cmdline
    ((argfile, (mode, text)),) = files.items()
    assert mode == 0o600
    from kafka_handoff.devbroker.config import java_argfile

    assert text == java_argfile(
        ["-cp", "/libs/*", "kafka.tools.StorageTool", "format", "-t", "cluster-id", "-c",
         str(spec.properties_path), "--add-scram", scram]
    )  # fmt: skip
    assert not Path(argfile).exists()  # removed once the tool is done
    assert (spec.logs_dir / "format.log").read_bytes() == b"Formatting metadata directory\n"


def test_java_argfile_quotes_every_argument() -> None:
    from kafka_handoff.devbroker.config import java_argfile

    assert java_argfile(["a b", 'q"\\', "x\ny"]) == '"a b"\n"q\\"\\\\"\n"x\\ny"\n'


def test_broker_properties_files_are_written_for_the_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("old\n", encoding="utf-8")
    path.chmod(0o644)  # an earlier run's file
    cluster.write_private(path, 'listener.name.sasl_ssl.plain.sasl.jaas.config=... user_alice="pw";\n')
    assert stat.S_IMODE(path.lstat().st_mode) == 0o600
    assert path.read_text(encoding="utf-8").endswith('user_alice="pw";\n')
    assert os.access(path, os.R_OK)
