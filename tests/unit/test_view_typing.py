"""The view's static type: mypy --strict rejects the dangerous operations and accepts the safe ones.

One mypy run checks both snippets in ``typing_snippets/`` (about 7-10 s on 2 cores, fresh cache under
``tmp_path``, ``--no-incremental``).  ``--follow-imports=silent`` keeps errors in the imported project
modules from being reported against the snippets.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = Path(__file__).resolve().parent / "typing_snippets"
FORBIDDEN = SNIPPETS / "view_forbidden.py"
ALLOWED = SNIPPETS / "view_allowed.py"

_ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<message>.*)$")


def _run_mypy(cache_dir: str) -> tuple[int, str]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--follow-imports=silent",
            "--no-incremental",
            "--cache-dir",
            cache_dir,
            "--show-error-codes",
            "--no-color-output",
            "--no-error-summary",
            str(ALLOWED.relative_to(ROOT)),
            str(FORBIDDEN.relative_to(ROOT)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def mypy_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, list[tuple[int, str]]]]:
    code, output = _run_mypy(str(tmp_path_factory.mktemp("mypy-cache")))
    errors: dict[str, list[tuple[int, str]]] = {}
    for raw in output.splitlines():
        match = _ERROR.match(raw.strip())
        if match:
            errors.setdefault(Path(match["path"]).name, []).append((int(match["line"]), match["message"]))
        elif raw.strip() and "note:" not in raw:
            pytest.fail(f"unexpected mypy output: {raw!r}\n{output}")
    return code, errors


def _forbidden_markers() -> dict[int, str]:
    markers = {}
    for number, line in enumerate(FORBIDDEN.read_text().splitlines(), start=1):
        match = re.search(r"# forbidden: (\w+)", line)
        if match:
            markers[number] = match[1]
    return markers


def test_mypy_rejects_view_poll_and_every_other_forbidden_operation(
    mypy_report: tuple[int, dict[str, list[tuple[int, str]]]],
) -> None:
    code, errors = mypy_report
    assert code == 1, errors
    markers = _forbidden_markers()
    assert set(markers.values()) >= {
        "poll",
        "close",
        "subscribe",
        "unsubscribe",
        "assign",
        "wakeup",
        "enforce_rebalance",
    }
    reported = {line: message for line, message in errors.get(FORBIDDEN.name, [])}
    # exactly the marked lines fail, each because the RebalanceConsumer lacks that very operation
    assert set(reported) == set(markers), (reported, markers)
    for line, name in markers.items():
        assert f'has no attribute "{name}"' in reported[line], (line, reported[line])
        assert "RebalanceConsumer" in reported[line]
    poll_lines = [line for line, name in markers.items() if name == "poll"]
    assert poll_lines and all("poll" in reported[line] for line in poll_lines)


def test_mypy_accepts_every_allowed_operation_and_the_real_consumer(
    mypy_report: tuple[int, dict[str, list[tuple[int, str]]]],
) -> None:
    _, errors = mypy_report
    assert errors.get(ALLOWED.name, []) == []
    # the allowed snippet really exercises every operation of the view
    from kafka_handoff.consumer.listener import REBALANCE_CONSUMER_OPERATIONS

    text = ALLOWED.read_text()
    missing = [name for name in REBALANCE_CONSUMER_OPERATIONS if f"consumer.{name}(" not in text]
    assert missing == []
