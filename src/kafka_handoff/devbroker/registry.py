"""A real Confluent-compatible Schema Registry beside the dev broker: Apicurio Registry, built from Maven
Central artifacts into a runnable Quarkus jar, run with in-memory storage (H2 in memory).

:func:`ensure_registry` builds it once (``mvn package`` on a copy of ``registry/``: its POM says which
Apicurio release and why) into ``<cache>/apicurio-registry-<version>/app``; afterwards only a marker
file is checked.  Concurrent callers serialise on a file lock and the build is renamed into place whole.

:func:`start_registry` runs it on a free 127.0.0.1 port -- supervised (dies with this Python process, even
on SIGKILL, through ``_supervisor.py``) or detached (``handoff broker start --schema-registry``; stopped by
``handoff broker stop``) -- and waits until its Confluent API answers.  Its state (pid, URL) is kept in
``<dir>/registry.json`` so that any process can stop it.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kafka_handoff.devbroker import _posix
from kafka_handoff.devbroker._procs import pid_alive, process_args
from kafka_handoff.devbroker.jars import JarResolutionError, cache_root
from kafka_handoff.errors import KafkaError

__all__ = [
    "APICURIO_VERSION",
    "CCOMPAT_PATH",
    "PreparedRegistry",
    "RegistryStartError",
    "SchemaRegistry",
    "ensure_registry",
    "registry_state",
    "start_registry",
    "stop_registry",
]

#: The Apicurio Registry release built (keep in step with ``apicurio.version`` in ``registry/pom.xml``).
APICURIO_VERSION = "2.4.2.Final"
#: Where Apicurio serves the Confluent Schema Registry API (v7 of Confluent's REST API).
CCOMPAT_PATH = "/apis/ccompat/v7"

_BUILD_FILES = ("pom.xml", "settings.xml", "NoDynamicConfigIndex.java")
_JAVA_SOURCE = Path("src/main/java/io/github/kafkahandoff/registry/NoDynamicConfigIndex.java")
_MARKER = ".built"
RUN_JAR = "registry-runner.jar"
_MAVEN_TIMEOUT_S = 1800.0
_STATE = "registry.json"
_SUPERVISOR = Path(__file__).with_name("_supervisor.py")
DEFAULT_START_TIMEOUT_S = 180.0
#: Heap and start-up options: a small heap (in-memory storage of a few test schemas) and the C1 compiler only
#: (a registry that serves tests starts faster without C2).
JVM_OPTS = ("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")


class RegistryStartError(KafkaError):
    """The Schema Registry did not start (its log's tail is in the message)."""


@dataclass(frozen=True, slots=True)
class PreparedRegistry:
    version: str
    app_dir: Path
    #: True when this call ran Maven; False when the cache already held the build.
    built_now: bool
    seconds: float

    @property
    def run_jar(self) -> Path:
        return self.app_dir / RUN_JAR


def _build_texts() -> dict[str, bytes]:
    base = resources.files("kafka_handoff.devbroker").joinpath("registry")
    return {name: base.joinpath(name).read_bytes() for name in _BUILD_FILES}


def _digest(texts: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(texts):
        h.update(name.encode() + b"\0" + texts[name] + b"\0")
    return h.hexdigest()


def ensure_registry(*, quiet: bool = True) -> PreparedRegistry:
    """The directory of the runnable registry (``registry-runner.jar`` and its ``lib/``), built with Maven
    if needed (raises :class:`JarResolutionError` when Maven or Java is missing or the build fails)."""
    started = time.monotonic()
    texts = _build_texts()
    if f"<apicurio.version>{APICURIO_VERSION}</apicurio.version>".encode() not in texts["pom.xml"]:
        raise JarResolutionError(f"registry/pom.xml does not pin apicurio.version {APICURIO_VERSION}")
    digest = _digest(texts)
    root = cache_root() / f"apicurio-registry-{APICURIO_VERSION}"
    app = root / "app"
    marker = root / _MARKER
    if _marker_ok(marker, digest, app):
        return PreparedRegistry(APICURIO_VERSION, app, False, time.monotonic() - started)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "a+b") as lock_file:
        _posix.lock(lock_file)
        try:
            if _marker_ok(marker, digest, app):
                return PreparedRegistry(APICURIO_VERSION, app, False, time.monotonic() - started)
            _build(root, texts, app, quiet=quiet)
            marker.write_text(digest + "\n", encoding="utf-8")
        finally:
            _posix.unlock(lock_file)
    return PreparedRegistry(APICURIO_VERSION, app, True, time.monotonic() - started)


def _marker_ok(marker: Path, digest: str, app: Path) -> bool:
    try:
        return marker.read_text(encoding="utf-8").strip() == digest and (app / RUN_JAR).is_file()
    except OSError:
        return False


def _build(root: Path, texts: dict[str, bytes], app: Path, *, quiet: bool) -> None:
    from kafka_handoff.devbroker.config import java_executable

    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarResolutionError(
            "Maven ('mvn') is not on PATH; it is needed once to build the Schema Registry "
            "(Debian/Ubuntu: apt-get install maven)"
        )
    try:
        java = java_executable()
    except KafkaError as exc:
        raise JarResolutionError(str(exc)) from None
    project = root / f"build-{os.getpid()}"
    shutil.rmtree(project, ignore_errors=True)
    (project / _JAVA_SOURCE).parent.mkdir(parents=True)
    (project / "pom.xml").write_bytes(texts["pom.xml"])
    (project / "settings.xml").write_bytes(texts["settings.xml"])
    (project / _JAVA_SOURCE).write_bytes(texts["NoDynamicConfigIndex.java"])
    cmd = [mvn, "-B", *(["-q"] if quiet else []), "-gs", "settings.xml", "package", "-DskipTests"]
    env = dict(os.environ)
    env.setdefault("JAVA_HOME", str(Path(java).resolve().parent.parent))
    try:
        proc = subprocess.run(
            cmd, cwd=project, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S, check=False, env=env
        )
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(project, ignore_errors=True)
        raise JarResolutionError(
            f"Maven did not build the Schema Registry within {_MAVEN_TIMEOUT_S:.0f}s"
        ) from exc
    target = project / "target"
    runner = next(iter(sorted(target.glob("*-runner.jar"))), None)
    if proc.returncode != 0 or runner is None or not (target / "lib").is_dir():
        output = (proc.stdout + proc.stderr).strip().splitlines()[-40:]
        shutil.rmtree(project, ignore_errors=True)
        raise JarResolutionError(
            f"Maven failed (exit {proc.returncode}) building Apicurio Registry {APICURIO_VERSION}:\n"
            + "\n".join(output)
        )
    # Quarkus's jar (Apicurio's settings ask for its "legacy" layout): the runner, whose manifest names the
    # jars in lib/ beside it.
    built = project / "app"
    built.mkdir()
    runner.rename(built / RUN_JAR)
    (target / "lib").rename(built / "lib")
    old = root / f"app.old-{os.getpid()}"
    if app.exists():
        app.rename(old)
    built.rename(app)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(project, ignore_errors=True)


# -------------------------------------------------------------------------------------------- running
@dataclass
class SchemaRegistry:
    """A running registry: its Confluent-compatible ``url`` and its process."""

    directory: Path
    url: str
    port: int
    pid: int
    supervisor_pid: int | None
    supervised: bool
    #: Seconds from launching the JVM until its API answered.
    start_seconds: float = 0.0

    @property
    def log_path(self) -> Path:
        return self.directory / "registry.log"

    def stop(self, timeout: float = 10.0) -> None:
        stop_registry(self.directory, timeout)

    def __enter__(self) -> SchemaRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# Registries this process started supervised: directory -> supervisor (stopped at exit if still running).
_owned: dict[Path, subprocess.Popen[bytes]] = {}
_owned_lock = threading.Lock()


@atexit.register
def _stop_owned() -> None:
    with _owned_lock:
        directories = list(_owned)
    for directory in directories:
        with contextlib.suppress(Exception):
            stop_registry(directory)


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def registry_command(java: str, app: PreparedRegistry, port: int) -> list[str]:
    return [
        java,
        *JVM_OPTS,
        "-Dquarkus.http.host=127.0.0.1",
        f"-Dquarkus.http.port={port}",
        "-Dquarkus.log.console.json=false",
        "-Dquarkus.profile=prod",
        "-Dregistry.ui.features.readOnly=true",
        "-jar",
        str(app.run_jar),
    ]


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


def _is_registry(pid: int, run_jar: str) -> bool:
    args = process_args(pid)
    if args is None:
        return True
    return run_jar.encode() in args


def start_registry(
    directory: str | os.PathLike[str],
    *,
    supervised: bool = True,
    timeout: float = DEFAULT_START_TIMEOUT_S,
) -> SchemaRegistry:
    """Start a registry whose state and log live in ``directory`` and wait until its Confluent API answers."""
    _posix.require_posix("the dev Schema Registry")
    from kafka_handoff.devbroker.config import java_executable

    prepared = ensure_registry()
    java = java_executable()
    where = Path(directory).resolve()
    where.mkdir(parents=True, exist_ok=True)
    stop_registry(where)  # a stale one from an earlier run of this directory
    port = _free_port()
    log_file = where / "registry.log"
    cmd = registry_command(java, prepared, port)
    launched = time.monotonic()
    sup_pid: int | None = None
    if supervised:
        sup = subprocess.Popen(
            [sys.executable, "-I", str(_SUPERVISOR), "10", str(log_file), "-", "--", *cmd],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=where,
            start_new_session=True,
        )
        assert sup.stdout is not None
        line = sup.stdout.readline()
        try:
            pid = int(line.strip())
        except ValueError:
            sup.kill()
            sup.wait()
            raise RegistryStartError(
                f"the Schema Registry's supervisor did not start it; see {log_file}"
            ) from None
        with _owned_lock:
            _owned[where] = sup
        sup_pid = sup.pid
    else:
        with open(log_file, "ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=where,
            )
        pid = proc.pid
    url = f"http://127.0.0.1:{port}{CCOMPAT_PATH}"
    state = {
        "pid": pid,
        "supervisor_pid": sup_pid,
        "port": port,
        "url": url,
        "run_jar": str(prepared.run_jar),
    }
    (where / _STATE).write_text(json.dumps(state) + "\n", encoding="utf-8")
    registry = SchemaRegistry(where, url, port, pid, sup_pid, supervised)
    deadline = launched + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/subjects", timeout=2.0) as response:
                if response.status == 200:
                    break
        except (OSError, urllib.error.URLError):
            pass
        if not pid_alive(pid):
            stop_registry(where)
            raise RegistryStartError(
                f"the Schema Registry exited during start-up; {log_file}:\n{_tail(log_file)}"
            )
        if time.monotonic() >= deadline:
            stop_registry(where)
            raise RegistryStartError(
                f"the Schema Registry did not answer on {url} within {timeout:.0f}s; "
                f"{log_file}:\n{_tail(log_file)}"
            )
        time.sleep(0.2)
    registry.start_seconds = time.monotonic() - launched
    return registry


def registry_state(directory: str | os.PathLike[str]) -> dict[str, object] | None:
    """What :func:`start_registry` recorded in ``directory`` (None when no registry was started there)."""
    try:
        state = json.loads((Path(directory) / _STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def stop_registry(directory: str | os.PathLike[str], timeout: float = 10.0) -> bool:
    """Stop the registry recorded in ``directory`` (SIGTERM, SIGKILL after ``timeout``); False when none
    was recorded there.  Any process may call it."""
    where = Path(directory).resolve()
    state = registry_state(where)
    with _owned_lock:
        sup = _owned.pop(where, None)
    if state is None and sup is None:
        return False
    pid = state.get("pid") if state else None
    run_jar = str(state.get("run_jar", "")) if state else ""
    if isinstance(pid, int) and pid_alive(pid) and _is_registry(pid, run_jar):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10.0
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
    if sup is not None:
        try:
            sup.wait(timeout)
        except subprocess.TimeoutExpired:
            sup.kill()
            sup.wait()
        for stream in (sup.stdin, sup.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
    with contextlib.suppress(FileNotFoundError):
        (where / _STATE).unlink()
    return True
