"""Kafka's own command-line tools (the ``kafka-tools`` jar: ``ConsumerGroupCommand``, ``AclCommand``, ...) as
the oracle of the ``handoff`` admin commands.  The jar and its dependencies are resolved from Maven Central
with ``mvn`` once into the project's cache; tests skip when that is impossible (no mvn, offline), except under
``CI=true``, where a missing oracle is an error."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

from kafka_handoff.devbroker.config import java_executable
from kafka_handoff.devbroker.jars import KAFKA_VERSION, cache_root, ensure_jars

_POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>kafka-handoff</groupId><artifactId>kafka-tools-oracle</artifactId><version>1</version>
<dependencies><dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId>
<version>{KAFKA_VERSION}</version></dependency></dependencies></project>
"""


def _unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it under CI=true (the oracle is part of what CI checks)."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true: {reason}")
    pytest.skip(reason)


def tools_classpath() -> str:
    """The classpath of Kafka's tools (resolved once; skips the test when it cannot be)."""
    root = cache_root() / f"kafka-tools-{KAFKA_VERSION}"
    cp = root / "classpath.txt"
    if cp.is_file() and all(Path(p).is_file() for p in cp.read_text().split(":")):
        return cp.read_text().strip()
    root.mkdir(parents=True, exist_ok=True)
    (root / "pom.xml").write_text(_POM, encoding="utf-8")
    try:
        done = subprocess.run(
            ["mvn", "-q", "-B", "dependency:build-classpath", f"-Dmdep.outputFile={cp}"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=600,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        _unavailable(f"cannot resolve kafka-tools with mvn: {exc}")
    if done.returncode != 0 or not cp.is_file():
        _unavailable(f"cannot resolve kafka-tools with mvn: {done.stdout[-500:]}{done.stderr[-500:]}")
    return cp.read_text().strip()


def run_tool(main_class: str, *args: str, timeout: float = 120, broker_jars: bool = False) -> str:
    """Run one of Kafka's tools; its stdout (fails the test with its output when it exits non-zero).
    ``broker_jars``: a tool that lives in the broker's own jar (``kafka.admin.ConfigCommand``), run from the
    broker's classpath the dev broker already resolved."""
    classpath = ensure_jars().classpath if broker_jars else tools_classpath()
    done = subprocess.run(
        [java_executable(), "-cp", classpath, main_class, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{main_class} {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout
