"""The dev broker's POSIX-only parts are isolated (issue 31): importing it works without ``fcntl``, and on a
system without POSIX processes it refuses to start with a message that says what to do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kafka_handoff import devbroker
from kafka_handoff.devbroker import _posix

pytestmark = pytest.mark.unit


def test_importing_the_dev_broker_and_building_the_cli_need_no_fcntl() -> None:
    code = (
        "import sys; sys.modules['fcntl'] = None\n"
        "import kafka_handoff.devbroker\n"
        "from kafka_handoff.cli.main import build_parser\n"
        "build_parser(); print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"


def test_starting_the_dev_broker_off_posix_says_why_and_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_posix, "POSIX", False)
    with pytest.raises(_posix.UnsupportedPlatformError) as caught:
        devbroker.start(nodes=1)
    message = str(caught.value)
    assert "POSIX" in message and sys.platform in message and "HANDOFF_BOOTSTRAP" in message


def test_cache_locks_refuse_off_posix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_posix, "POSIX", False)
    with open(__file__, "rb") as file, pytest.raises(_posix.UnsupportedPlatformError):
        _posix.lock(file)


def test_a_busy_lock_is_reported_without_waiting(tmp_path: Path) -> None:
    path = f"{tmp_path}/lock"
    with open(path, "a+b") as first, open(path, "a+b") as second:
        assert _posix.lock(first)
        assert not _posix.lock(second, wait=False)
        _posix.unlock(first)
        assert _posix.lock(second, wait=False)
        _posix.unlock(second)
