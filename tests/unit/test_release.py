"""What a company adopting the library checks first (issue 31): the licence, the changelog, one version
string, a core install that needs only the client's dependencies, and a CLI that names the missing extra."""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

import pytest

import kafka_handoff
from kafka_handoff import _version
from kafka_handoff.cli import main as cli_main

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_is_written_in_one_place() -> None:
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    attr = PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "kafka_handoff._version.__version__"
    assert kafka_handoff.__version__ is _version.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.dev\d+)?", kafka_handoff.__version__)
    assert kafka_handoff.build_info()["version"] == kafka_handoff.__version__


def test_the_licence_is_the_apache_2_text_the_metadata_names() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]


def test_the_changelog_keeps_an_unreleased_section_first() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[([^\]]+)\]", text, flags=re.MULTILINE)
    assert versions[0] == "Unreleased"
    assert "keepachangelog.com" in text


def test_the_supported_pythons_are_declared() -> None:
    project = PYPROJECT["project"]
    assert project["requires-python"] == ">=3.11"
    prefix = "Programming Language :: Python :: 3."
    declared = {c.rsplit(" ", 1)[-1] for c in project["classifiers"] if c.startswith(prefix)}
    assert declared == {"3.11", "3.12", "3.13"}


def test_a_core_install_pulls_only_what_the_client_needs() -> None:
    core = {re.split(r"[<>=\[ ]", d, maxsplit=1)[0].lower() for d in PYPROJECT["project"]["dependencies"]}
    assert core == {"kio", "crc32c", "cramjam"}
    extras = PYPROJECT["project"]["optional-dependencies"]
    for extra in ("cli", "pipeline", "aio", "metrics", "schema-registry"):
        assert extra in extras, extra
    assert any(d.startswith("rich") for d in extras["cli"])
    assert any(d.startswith("pyspark") for d in extras["pipeline"])
    # every third-party module the CLI names an extra for is in that extra
    for module, extra in cli_main.EXTRA_FOR_MODULE.items():
        names = " ".join(extras[extra]).lower().replace("-", "_")
        wanted = {"kafka": "kafka_python", "numpy": "pandas"}.get(module, module)
        assert wanted in names, (module, extra)


def test_the_cli_names_the_extra_to_install_when_rich_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def needs_rich(args: argparse.Namespace) -> int:
        from rich.console import Console  # noqa: F401

        return 0

    parser = argparse.ArgumentParser(prog="handoff")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.set_defaults(func=needs_rich)
    monkeypatch.setattr(cli_main, "build_parser", lambda: parser)
    monkeypatch.setitem(sys.modules, "rich", None)
    monkeypatch.delitem(sys.modules, "rich.console", raising=False)

    assert cli_main.main([]) == 2
    err = capsys.readouterr().err
    assert "'rich'" in err and "pip install 'kafka-handoff[cli]'" in err


def test_a_missing_module_that_is_no_extra_is_not_disguised(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(args: argparse.Namespace) -> int:
        import kafka_handoff_no_such_module  # type: ignore[import-not-found]  # noqa: F401

        return 0

    parser = argparse.ArgumentParser(prog="handoff")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.set_defaults(func=broken)
    monkeypatch.setattr(cli_main, "build_parser", lambda: parser)
    with pytest.raises(ModuleNotFoundError):
        cli_main.main([])


def test_spark_is_the_same_extra_as_pipeline() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert sorted(extras["spark"]) == sorted(extras["pipeline"])


def test_build_info_says_why_each_fast_path_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from kafka_handoff.producer import future
    from kafka_handoff.protocol import records

    monkeypatch.setattr(records, "IMPLEMENTATION", "python")
    monkeypatch.setattr(records, "C_UNAVAILABLE_REASON", "ImportError: no _fastrecords")
    monkeypatch.setattr(future, "C_FUTURES", None)
    off = kafka_handoff.build_info()["fast_paths_off"]
    assert off["record_decoder"] == "ImportError: no _fastrecords"
    assert off.get("send_path")


def test_build_info_names_the_pure_python_switch() -> None:
    import json
    import os
    import subprocess

    code = "import json, kafka_handoff; print(json.dumps(kafka_handoff.build_info()))"
    env = {**os.environ, "KAFKA_HANDOFF_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    info = json.loads(out.stdout)
    assert info["record_decoder"] == "python" and info["json_scanner"] == "python"
    assert set(info["fast_paths_off"]) == {
        "record_decoder",
        "record_encoder",
        "send_path",
        "json_scanner",
        "avro_decoder",
    }
    assert all("KAFKA_HANDOFF_PURE_PYTHON" in why for why in info["fast_paths_off"].values())


def test_build_info_says_how_the_c_loops_check_overflow() -> None:
    from kafka_handoff.protocol import records

    checks = kafka_handoff.build_info()["c_overflow_checks"]
    if records._extension is None:
        assert checks is None
    else:
        assert checks in ("builtin", "portable")
        assert checks == records._extension.OVERFLOW_CHECKS


def test_the_cli_starts_without_any_optional_package() -> None:
    import subprocess

    optional = sorted({*cli_main.EXTRA_FOR_MODULE, "hypothesis"})
    code = (
        "import sys\n"
        f"for name in {optional!r}: sys.modules[name] = None\n"
        "from kafka_handoff.cli.main import build_parser\n"
        "parser = build_parser()\n"
        "print(sorted(parser._subparsers._group_actions[0].choices))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "bench" in out.stdout and "consume" in out.stdout
