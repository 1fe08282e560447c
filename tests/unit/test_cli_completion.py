"""``handoff completion bash``: the script completes commands, actions and options (run by a real bash)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kafka_handoff.cli.completion import completion_table, script
from kafka_handoff.cli.main import build_parser

pytestmark = pytest.mark.unit


def test_table_lists_commands_actions_and_options() -> None:
    table = completion_table(build_parser())
    assert {"groups", "acls", "configs", "produce", "consume", "completion"} <= set(table[""])
    assert "--version" in table[""]
    assert {"reset-offsets", "lag", "delete-offsets"} <= set(table["groups"])
    assert {"--to-earliest", "--shift-by", "--execute", "--dry-run", "--command-config"} <= set(
        table["groups reset-offsets"]
    )


def _complete(line: str) -> list[str]:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    words = line.split(" ")
    program = (
        script(build_parser(), "bash")
        + f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        + '_handoff_complete; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run([bash, "--norc", "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_bash_completes_commands_actions_and_options() -> None:
    assert "groups" in _complete("handoff gr")
    assert _complete("handoff groups res") == ["reset-offsets"]
    assert _complete("handoff groups reset-offsets --group g --to-e") == ["--to-earliest"]
