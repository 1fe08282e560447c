"""Resolving the Apache Kafka broker jars from Maven Central, once, into a per-version cache.

The POM kept next to this module (``pom.xml``) names the broker (``kafka_2.13``) and the SLF4J 1.x ->
Log4j2 binding that the published POMs leave out.  :func:`ensure_jars` runs
``mvn dependency:copy-dependencies`` on a copy of it into ``<cache>/kafka-<version>/libs`` the first
time, and afterwards only checks a marker file.  Concurrent callers (several test processes, a CLI and
a test run) serialise on a file lock; the jars are copied into a temporary directory first and renamed
into place, so a half-copied directory is never used.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kafka_handoff.devbroker import _posix

__all__ = [
    "KAFKA_VERSION",
    "JarResolutionError",
    "ResolvedJars",
    "cache_root",
    "ensure_jars",
    "pom_text",
]

#: The Kafka release the project runs.  Must match ``kafka.version`` in ``pom.xml``.
KAFKA_VERSION = "4.3.1"

_MARKER = ".resolved"
_MAVEN_TIMEOUT_S = 900.0


class JarResolutionError(RuntimeError):
    """Maven could not resolve the broker jars (no Maven, no network, bad POM)."""


@dataclass(frozen=True, slots=True)
class ResolvedJars:
    version: str
    libs: Path
    #: True when this call ran Maven; False when the cache already held the jars.
    resolved_now: bool
    seconds: float

    @property
    def classpath(self) -> str:
        return str(self.libs / "*")


def cache_root() -> Path:
    """``$HANDOFF_CACHE_DIR`` or ``~/.cache/kafka-handoff`` (XDG_CACHE_HOME respected)."""
    env = os.environ.get("HANDOFF_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "kafka-handoff"


def pom_text() -> str:
    return resources.files("kafka_handoff.devbroker").joinpath("pom.xml").read_text(encoding="utf-8")


def _pom_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def ensure_jars(*, quiet: bool = True) -> ResolvedJars:
    """Return the directory holding the broker's runtime jars, resolving them with Maven if needed."""
    started = time.monotonic()
    text = pom_text()
    if f"<kafka.version>{KAFKA_VERSION}</kafka.version>" not in text:
        raise JarResolutionError(f"pom.xml does not pin kafka.version {KAFKA_VERSION}; keep them in step")
    digest = _pom_digest(text)
    version_dir = cache_root() / f"kafka-{KAFKA_VERSION}"
    libs = version_dir / "libs"
    marker = version_dir / _MARKER
    if _marker_ok(marker, digest, libs):
        return ResolvedJars(KAFKA_VERSION, libs, False, time.monotonic() - started)

    version_dir.mkdir(parents=True, exist_ok=True)
    with open(version_dir / ".lock", "a+b") as lock_file:
        _posix.lock(lock_file)
        try:
            if _marker_ok(marker, digest, libs):  # another process finished while we waited
                return ResolvedJars(KAFKA_VERSION, libs, False, time.monotonic() - started)
            _resolve(version_dir, text, libs, quiet=quiet)
            marker.write_text(digest + "\n", encoding="utf-8")
        finally:
            _posix.unlock(lock_file)
    return ResolvedJars(KAFKA_VERSION, libs, True, time.monotonic() - started)


def _marker_ok(marker: Path, digest: str, libs: Path) -> bool:
    try:
        return (
            marker.read_text(encoding="utf-8").strip() == digest
            and (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file()
        )
    except OSError:
        return False


def _resolve(version_dir: Path, text: str, libs: Path, *, quiet: bool) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarResolutionError(
            "Maven ('mvn') is not on PATH; it is needed once to fetch the Kafka broker jars "
            "(Debian/Ubuntu: apt-get install maven)"
        )
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise JarResolutionError("no Java runtime found (need Java 17+ on PATH or JAVA_HOME)")
    pom = version_dir / "pom.xml"
    pom.write_text(text, encoding="utf-8")
    staging = version_dir / f"libs.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [
        mvn,
        "-B",
        *(["-q"] if quiet else []),
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]
    try:
        proc = subprocess.run(
            cmd, cwd=version_dir, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise JarResolutionError(
            f"Maven did not finish within {_MAVEN_TIMEOUT_S:.0f}s: {' '.join(cmd)}"
        ) from exc
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        output = (proc.stdout + proc.stderr).strip().splitlines()[-40:]
        raise JarResolutionError(
            f"Maven failed (exit {proc.returncode}) resolving Kafka {KAFKA_VERSION}:\n" + "\n".join(output)
        )
    if not (staging / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file():
        raise JarResolutionError(f"Maven succeeded but {staging} has no kafka_2.13-{KAFKA_VERSION}.jar")
    old = version_dir / f"libs.old-{os.getpid()}"
    if libs.exists():
        libs.rename(old)
    staging.rename(libs)
    shutil.rmtree(old, ignore_errors=True)
