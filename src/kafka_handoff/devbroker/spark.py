"""A Spark standalone cluster (master + N workers, separate JVMs) from the installed pyspark package.

The pip package ships ``bin/spark-class`` but no ``sbin/start-master.sh``/``start-worker.sh``, so the
master and workers are started as ``spark-class org.apache.spark.deploy.master.Master`` /
``...deploy.worker.Worker spark://...``.  Executors the workers launch inherit the workers' environment:
``PYTHONPATH`` names the directory holding this ``kafka_handoff`` package (so executors import it, C
extensions included).  Which interpreter the executors run is the driver's choice: pyspark sends its
``PYSPARK_PYTHON`` (default ``python3``) with each task; the pipeline's ``build_session`` sets it to the
running interpreter.

>>> from kafka_handoff.devbroker.spark import SparkStandalone
>>> with SparkStandalone(workers=2).start() as cluster:     # doctest: +SKIP
...     print(cluster.url)                                    # spark://127.0.0.1:PORT

Ownership, as for brokers (:mod:`kafka_handoff.devbroker.cluster`):

* ``supervised=True`` (tests, benchmarks): each JVM runs under ``_supervisor.py``, which stops it when
  this Python process goes away (even by SIGKILL); an ``atexit`` hook stops what still runs at exit.
* ``supervised=False`` (``handoff spark start``): detached JVMs; ``state.json`` in the cluster directory
  records their pids for ``handoff spark stop`` (a pid is signalled only if its command line still is a
  Spark master/worker of that directory).

A standalone worker kills its executors when it stops; an executor whose worker died exits by itself.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from kafka_handoff.devbroker._procs import pid_alive, process_args

__all__ = ["SparkClusterError", "SparkConnectServer", "SparkStandalone", "spark_home"]

_SUPERVISOR = Path(__file__).with_name("_supervisor.py")
_STATE = "state.json"
_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_MASTER_READY = "Starting Spark master at"
_WORKER_READY = "Successfully registered with master"
_CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_CONNECT_READY = "Spark Connect server started"
_STOP_GRACE_S = 15.0


class SparkClusterError(RuntimeError):
    """The standalone cluster could not be started (no pyspark, a JVM died, not ready in time)."""


def spark_home() -> Path:
    """The installed pyspark package directory (it is a SPARK_HOME: ``bin/``, ``jars/``)."""
    try:
        import pyspark
    except ImportError as exc:  # pragma: no cover - the spark extra is missing
        raise SparkClusterError("pyspark is not installed (pip install 'kafka-handoff[spark]')") from exc
    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").exists():
        raise SparkClusterError(f"{home}/bin/spark-class is missing from the pyspark package")
    return home


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


@dataclass
class _Proc:
    name: str
    log: Path
    pid: int | None = None
    popen: subprocess.Popen[bytes] | None = None


@dataclass
class SparkStandalone:
    """A standalone master and ``workers`` workers on 127.0.0.1 (see the module docstring)."""

    workers: int = 2
    cores_per_worker: int = 1
    memory_per_worker: str = "1g"
    directory: Path | None = None
    """Logs, work dirs and ``state.json`` (default: a new temporary directory, removed by :meth:`stop`)."""
    supervised: bool = True
    host: str = "127.0.0.1"
    port: int = 0
    url: str = ""
    procs: list[_Proc] = field(default_factory=list)
    _ephemeral: bool = False

    # --------------------------------------------------------------------------------------- start/stop
    def start(self, timeout: float = 180.0) -> SparkStandalone:
        home = spark_home()
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="handoff-spark-"))
            self._ephemeral = True
        self.directory = Path(self.directory).absolute()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = self.port or _free_port()
        self.url = f"spark://{self.host}:{self.port}"
        env = self.environment(home)
        deadline = time.monotonic() + timeout
        if self.supervised:
            atexit.register(self.stop)
        try:
            master = self._spawn(
                "master",
                [_MASTER_CLASS, "--host", self.host, "--port", str(self.port),
                 "--webui-port", str(_free_port())],
                env,
            )  # fmt: skip
            self._wait_line(master, _MASTER_READY, deadline)
            started = []
            for i in range(1, self.workers + 1):
                work = self.directory / f"worker-{i}"
                work.mkdir(exist_ok=True)
                args = [_WORKER_CLASS, "--host", self.host, "--cores", str(self.cores_per_worker),
                        "--memory", self.memory_per_worker, "--webui-port", str(_free_port()),
                        "--work-dir", str(work), self.url]  # fmt: skip
                started.append(self._spawn(f"worker-{i}", args, env))
            for proc in started:
                self._wait_line(proc, _WORKER_READY, deadline)
        except BaseException:
            self.stop()
            raise
        self._write_state()
        return self

    def environment(self, home: Path | None = None) -> dict[str, str]:
        """The environment of the master/worker JVMs (and so of the executors)."""
        home = home or spark_home()
        package_root = str(Path(__file__).resolve().parents[2])  # the directory holding kafka_handoff/
        paths = [package_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        assert self.directory is not None
        return {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": self.host,
            "SPARK_LOG_DIR": str(self.directory),
            "SPARK_NO_DAEMONIZE": "1",
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
        }

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> _Proc:
        assert self.directory is not None
        cmd = [str(spark_home() / "bin" / "spark-class"), *args]
        proc = _Proc(name, self.directory / f"{name}.log")
        self.procs.append(proc)
        if self.supervised:
            sup = subprocess.Popen(
                [sys.executable, "-I", str(_SUPERVISOR), str(_STOP_GRACE_S), str(proc.log), "-", "--", *cmd],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=self.directory,
                env=env,
                start_new_session=True,
            )
            proc.popen = sup
            assert sup.stdout is not None
            line = sup.stdout.readline().decode().strip()
            if not line.isdigit():
                raise SparkClusterError(
                    f"the supervisor of the Spark {name} did not start it:\n{_tail(proc.log)}"
                )
            proc.pid = int(line)
        else:
            with open(proc.log, "ab") as out:
                popen = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    cwd=self.directory, env=env, start_new_session=True,
                )  # fmt: skip
            proc.popen, proc.pid = popen, popen.pid
        return proc

    def _wait_line(self, proc: _Proc, needle: str, deadline: float) -> None:
        while needle not in _tail(proc.log, 1_000_000):
            if proc.popen is not None and proc.popen.poll() is not None:
                raise SparkClusterError(
                    f"the Spark {proc.name} exited ({proc.popen.returncode}):\n{_tail(proc.log)}"
                )
            if time.monotonic() > deadline:
                raise SparkClusterError(f"the Spark {proc.name} was not ready in time:\n{_tail(proc.log)}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the workers, then the master (SIGTERM, SIGKILL after a grace period); idempotent."""
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        for proc in reversed(self.procs):
            self._stop_proc(proc)
        self.procs.clear()
        if self.directory is not None:
            with contextlib.suppress(OSError):
                (self.directory / _STATE).unlink()
            if self._ephemeral:
                shutil.rmtree(self.directory, ignore_errors=True)

    def _stop_proc(self, proc: _Proc) -> None:
        if proc.pid is not None and pid_alive(proc.pid) and self._is_ours(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
        end = time.monotonic() + _STOP_GRACE_S
        while proc.pid is not None and pid_alive(proc.pid) and time.monotonic() < end:
            if proc.popen is not None and proc.popen.poll() is not None:
                break
            time.sleep(0.1)
        if proc.pid is not None and pid_alive(proc.pid) and self._is_ours(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        if proc.popen is not None:
            if proc.popen.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.popen.stdin.close()  # the supervisor sees EOF (if it still runs)
            try:
                proc.popen.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(5)
            for stream in (proc.popen.stdout,):
                if stream is not None:
                    stream.close()

    def _is_ours(self, pid: int) -> bool:
        args = process_args(pid)
        if args is None:  # no /proc: trust the recorded pid
            return True
        text = b" ".join(args)
        return b"org.apache.spark.deploy" in text and (
            self.url.encode() in text or f"--port {self.port}".encode() in text
        )

    # --------------------------------------------------------------------------------------- state
    def _write_state(self) -> None:
        assert self.directory is not None
        state = {
            "url": self.url,
            "port": self.port,
            "workers": self.workers,
            "supervised": self.supervised,
            "procs": [{"name": p.name, "pid": p.pid, "log": str(p.log)} for p in self.procs],
        }
        tmp = self.directory / f".{_STATE}.tmp"
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.directory / _STATE)

    @classmethod
    def attach(cls, directory: Path) -> SparkStandalone | None:
        """The cluster recorded in ``directory/state.json`` (None if there is none or nothing of it runs)."""
        try:
            state: dict[str, Any] = json.loads((Path(directory) / _STATE).read_text())
        except (OSError, ValueError):
            return None
        cluster = cls(workers=int(state["workers"]), directory=Path(directory), supervised=False)
        cluster.url, cluster.port = str(state["url"]), int(state["port"])
        cluster.procs = [_Proc(p["name"], Path(p["log"]), int(p["pid"])) for p in state["procs"]]
        if not any(p.pid is not None and pid_alive(p.pid) and cluster._is_ours(p.pid) for p in cluster.procs):
            return None
        return cluster

    def alive(self) -> bool:
        return bool(self.procs) and all(
            p.pid is not None and pid_alive(p.pid) and self._is_ours(p.pid) for p in self.procs
        )

    def executor_dirs(self) -> list[Path]:
        """Application directories the workers created for executors (``worker-N/app-*/K``)."""
        assert self.directory is not None
        return sorted(self.directory.glob("worker-*/app-*/*"))

    def __enter__(self) -> SparkStandalone:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@dataclass
class SparkConnectServer(SparkStandalone):
    """The Spark Connect server of the pyspark package (``SparkConnectServer`` through ``spark-submit``,
    as ``sbin/start-connect-server.sh`` runs it) on 127.0.0.1, its own Spark on ``master``; clients use
    :attr:`url` (``sc://127.0.0.1:PORT``).  Supervised and stopped like :class:`SparkStandalone`."""

    master: str = "local[1]"
    conf: dict[str, str] = field(default_factory=dict)

    def start(self, timeout: float = 180.0) -> SparkConnectServer:
        home = spark_home()
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="handoff-spark-connect-"))
            self._ephemeral = True
        self.directory = Path(self.directory).absolute()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = self.port or _free_port()
        self.url = f"sc://{self.host}:{self.port}"
        conf = {
            "spark.connect.grpc.binding.address": self.host,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": self.host,
            "spark.driver.bindAddress": self.host,
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            **self.conf,
        }
        args = ["org.apache.spark.deploy.SparkSubmit", "--class", _CONNECT_CLASS, "--name",
                "Spark Connect server", "--master", self.master]  # fmt: skip
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        if self.supervised:
            atexit.register(self.stop)
        try:
            proc = self._spawn("connect", args, self.environment(home))
            self._wait_line(proc, _CONNECT_READY, time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise
        self._write_state()
        return self

    def _is_ours(self, pid: int) -> bool:
        args = process_args(pid)
        if args is None:
            return True
        return f"spark.connect.grpc.binding.port={self.port}".encode() in b" ".join(args)
