"""The driver JVM's log4j2 file: written by this process under a new name, never a file another local user
planted at a predictable path in the shared temporary directory."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from kafka_handoff.pipeline import spark as spark_module

pytestmark = pytest.mark.unit

PLANTED = """\
appender.pwn.type = File
appender.pwn.name = pwn
appender.pwn.fileName = /nonexistent/authorized_keys
rootLogger.level = info
rootLogger.appenderRef.pwn.ref = pwn
"""


def test_a_log4j2_file_planted_at_the_old_fixed_path_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The shared temporary directory, as another local user sees it: they wrote the file first.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("HANDOFF_SPARK_LOG_LEVEL", raising=False)
    monkeypatch.setattr(spark_module, "_log4j2_files", {}, raising=False)  # a fresh process
    planted = tmp_path / "handoff-spark-log4j2-error.properties"
    planted.write_text(PLANTED, encoding="utf-8")

    path = Path(spark_module._quiet_log4j2())
    try:
        assert path != planted
        assert planted.read_text(encoding="utf-8") == PLANTED  # left alone, not read, not replaced
        text = path.read_text(encoding="utf-8")
        assert "pwn" not in text and "rootLogger.level = error" in text
        info = path.lstat()
        assert stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()
        assert stat.S_IMODE(info.st_mode) == 0o600
        assert Path(spark_module._quiet_log4j2()) == path  # one file per process and level
    finally:
        spark_module._remove_log4j2_files()
    assert not path.exists()  # removed when the process exits
