"""A HotSpot class-data-sharing (AppCDS) archive of the broker's classes, built once per JDK.

Loading and verifying Kafka's classes is most of a broker JVM's start-up CPU.  A dynamic CDS archive
(``-XX:ArchiveClassesAtExit``, JDK 13+) recorded from one training run and mapped by later runs
(``-XX:SharedArchiveFile``) cut it by about 40% (6.7 s -> 3.9 s of CPU per node measured with Kafka 4.3.1
on JDK 17), which matters on a 2-core machine starting three nodes at once.

The archive lives next to the jars (``<cache>/kafka-<version>/broker-<jdk key>.jsa``); the key covers
the java binary, so a JDK upgrade trains a new archive.  A JVM that cannot use an archive (changed
classpath, other JDK) silently runs without it (``-Xshare:auto``, the default), so CDS is only ever an
optimisation.  Training needs a broker run, so it happens in ``handoff broker fetch-jars`` (``make
setup``) or, failing that, on the first start; a failed training is remembered and not retried for that
JDK.  ``HANDOFF_CDS=0`` turns the archive off.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from kafka_handoff.devbroker import _posix
from kafka_handoff.devbroker.jars import ResolvedJars

__all__ = ["archive_path", "discard", "ensure_archive", "jvm_opts"]

log = logging.getLogger("kafka_handoff.devbroker")


def _enabled() -> bool:
    return os.environ.get("HANDOFF_CDS", "1").strip().lower() not in ("0", "false", "no", "off")


def _java_key(java: str) -> str:
    real = os.path.realpath(java)
    try:
        st = os.stat(real)
        ident = f"{real}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        ident = real
    return hashlib.sha256(ident.encode()).hexdigest()[:12]


def archive_path(jars: ResolvedJars, java: str) -> Path:
    return jars.libs.parent / f"broker-{_java_key(java)}.jsa"


def jvm_opts(jars: ResolvedJars, java: str) -> list[str]:
    """``-XX:SharedArchiveFile=...`` when a trained archive exists (and CDS is enabled), else nothing."""
    if not _enabled():
        return []
    archive = archive_path(jars, java)
    return [f"-XX:SharedArchiveFile={archive}"] if archive.is_file() else []


TrainingRun = Callable[[list[str]], None]
"""Runs a short broker workload in a JVM started with the given extra options (``cluster`` supplies it, so
this module does not import ``cluster``, which imports it)."""


def ensure_archive(
    jars: ResolvedJars, java: str, training_run: TrainingRun, *, wait: bool = True
) -> Path | None:
    """Train the archive (with ``training_run``) if there is none yet; None when disabled, failed before, or
    (``wait=False``) someone else is training it right now."""
    if not _enabled():
        return None
    archive = archive_path(jars, java)
    failed = archive.with_suffix(".jsa.failed")
    if archive.is_file():
        return archive
    if failed.exists():
        return None
    with open(jars.libs.parent / ".cds.lock", "a+b") as lock_file:
        if not _posix.lock(lock_file, wait=wait):
            return None
        try:
            if archive.is_file():
                return archive
            if failed.exists():
                return None
            return _train(jars, archive, failed, training_run)
        finally:
            _posix.unlock(lock_file)


def _verify(jars: ResolvedJars, archive: Path) -> str:
    """'' when a JVM can map ``archive`` (``-Xshare:on`` fails instead of silently ignoring it)."""
    from kafka_handoff.devbroker.config import java_executable

    cmd = [
        java_executable(),
        "-Xshare:on",
        f"-XX:SharedArchiveFile={archive}",
        "-cp",
        jars.classpath,
        "kafka.Kafka",
        "--version",
    ]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=60, check=False, cwd=archive.parent
        )
    except subprocess.TimeoutExpired:
        return "verifying the archive timed out"
    if proc.returncode != 0:
        return f"the archive does not load (exit {proc.returncode}): {(proc.stdout + proc.stderr)[-500:]}"
    return ""


def discard(jars: ResolvedJars, java: str, why: str) -> None:
    """Stop using the archive for this JDK (a broker failed with it); remembered like a failed training."""
    archive = archive_path(jars, java)
    with contextlib.suppress(FileNotFoundError):
        archive.unlink()
    archive.with_suffix(".jsa.failed").write_text(why + "\n", encoding="utf-8")
    log.warning("discarded the broker's class-data-sharing archive: %s", why)


def _train(jars: ResolvedJars, archive: Path, failed: Path, training_run: TrainingRun) -> Path | None:
    started = time.monotonic()
    tmp = archive.with_name(f"{archive.name}.tmp-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    reason = ""
    try:
        training_run([f"-XX:ArchiveClassesAtExit={tmp}"])
    except Exception as exc:  # training is an optimisation; never fail a start because of it
        reason = f"training run failed: {exc}"
    if not reason and (not tmp.is_file() or tmp.stat().st_size == 0):
        reason = "the JVM wrote no archive"
    if not reason:
        reason = _verify(jars, tmp)
    if reason:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        failed.write_text(reason + "\n", encoding="utf-8")
        log.warning("no class-data-sharing archive for the broker (%s); brokers start without it", reason)
        return None
    tmp.replace(archive)
    log.info(
        "trained the broker's class-data-sharing archive in %.1fs: %s", time.monotonic() - started, archive
    )
    return archive
