"""Consume throughput against the peers: ``handoff bench throughput``.

The data is produced once (confluent-kafka's producer, Java's batching defaults: ``batch.size=16384``,
``linger.ms=5``, no compression) to one topic; then every client consumes all of it from the beginning, each
in a fresh child process (:mod:`kafka_handoff.bench.peers`), one after the other.  Repeats are interleaved
(A, B, C, A, B, C, ...) so that changing load on the machine hits every client alike, and the report shows
the median of the repeats.  Per run:

* records/s and MB/s (value bytes) from the first record to the last (Java: ``ConsumerPerformance``'s own
  ``fetch.time.ms``, which also leaves out the group join);
* CPU seconds per million records in that window (all threads of the process; Java: the CPU of the whole
  run minus that of a run that reads a single record, i.e. JVM start and group join taken out);
* peak RSS of the process (``ru_maxrss`` from ``wait4()``).

``client_config`` (``handoff bench throughput --security MODE``): a JSON file of client settings (the
secured dev broker's ``client-<mode>.json``); the data is still produced over the given (plaintext)
bootstrap servers, but every client consumes with those settings, e.g. over SASL_SSL -- TLS costs CPU.
Only kafka-handoff and confluent-kafka take them.
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kafka_handoff.bench.peers import (
    CLIENT_CONFIG_ENV,
    CLIENTS,
    ClientSpec,
    client_version,
    java_command,
    parse_java_output,
)
from kafka_handoff.bench.runs import BenchReport

__all__ = [
    "DEFAULT_CLIENTS",
    "Sample",
    "ThroughputReport",
    "create_topic",
    "median_samples",
    "produce_data",
    "run_benchmark",
    "run_client",
]

DEFAULT_CLIENTS: tuple[str, ...] = tuple(CLIENTS)


@dataclass
class Sample:
    """One client's run."""

    client: str
    label: str
    records: int
    value_bytes: int
    consume_s: float
    cpu_window_s: float
    cpu_total_s: float
    peak_rss_mb: float
    startup_s: float
    load_1m: float
    ok: bool = True
    error: str = ""

    @property
    def records_per_s(self) -> float:
        return self.records / self.consume_s if self.consume_s > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.value_bytes / 1e6 / self.consume_s if self.consume_s > 0 else 0.0

    @property
    def cpu_s_per_million(self) -> float:
        return self.cpu_window_s * 1e6 / self.records if self.records else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "records_per_s": self.records_per_s,
            "mb_per_s": self.mb_per_s,
            "cpu_s_per_million": self.cpu_s_per_million,
        }


class ThroughputReport(BenchReport[Sample]):
    def medians(self) -> list[dict[str, Any]]:
        return median_samples(self.samples, list(self.config["clients"]))


def median_samples(samples: Sequence[Sample], order: Sequence[str]) -> list[dict[str, Any]]:
    """Per client (in ``order``), the median of each metric over its successful runs."""
    out: list[dict[str, Any]] = []
    for name in order:
        runs = [s for s in samples if s.client == name and s.ok]
        failed = sum(1 for s in samples if s.client == name and not s.ok)
        if not runs:
            if failed:
                errors = sorted({s.error for s in samples if s.client == name})
                out.append({"client": name, "label": CLIENTS[name].label, "runs": 0, "failed": failed,
                            "error": "; ".join(errors)})  # fmt: skip
            continue
        out.append(
            {
                "client": name,
                "label": runs[0].label,
                "runs": len(runs),
                "failed": failed,
                "records": runs[0].records,
                "records_per_s": statistics.median(s.records_per_s for s in runs),
                "records_per_s_min": min(s.records_per_s for s in runs),
                "records_per_s_max": max(s.records_per_s for s in runs),
                "mb_per_s": statistics.median(s.mb_per_s for s in runs),
                "cpu_s_per_million": statistics.median(s.cpu_s_per_million for s in runs),
                "peak_rss_mb": statistics.median(s.peak_rss_mb for s in runs),
                "startup_s": statistics.median(s.startup_s for s in runs),
            }
        )
    return out


# ============================================================================================ data
def make_values(count: int, size: int, seed: int = 8) -> list[bytes]:
    """``count`` values of exactly ``size`` bytes (lowercase text, a pool of 1024 distinct values)."""
    rng = random.Random(seed)
    pool = [bytes(rng.choices(b"abcdefghijklmnopqrstuvwxyz ", k=size)) for _ in range(min(count, 1024) or 1)]
    return [pool[i % len(pool)] for i in range(count)]


def create_topic(bootstrap: str, partitions: int, prefix: str = "bench-throughput") -> str:
    from kafka_handoff.admin import AdminClient, NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)], timeout=60)
    return name


def delete_topic(bootstrap: str, name: str) -> None:
    from kafka_handoff.admin import AdminClient

    try:
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            admin.delete_topics([name], timeout=30)
    except Exception as exc:  # best effort
        print(f"(could not delete topic {name}: {exc})", file=sys.stderr)


def produce_data(bootstrap: str, topic: str, partitions: int, records: int, value_bytes: int) -> float:
    """Produce ``records`` values round-robin over the partitions; returns the seconds it took."""
    values = make_values(records, value_bytes)
    t0 = time.perf_counter()
    try:
        import confluent_kafka

        have_confluent = True
    except ImportError:  # pragma: no cover - confluent-kafka is in the dev and bench extras
        have_confluent = False
    if have_confluent:
        errors: list[Any] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(err)

        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "batch.size": 16384, "linger.ms": 5, "acks": "all"}
        )
        produce = producer.produce
        for i, value in enumerate(values):
            while True:
                try:
                    produce(topic, value, partition=i % partitions, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.01)
        remaining = producer.flush(300)
        if remaining or errors:
            raise RuntimeError(f"producing the benchmark data failed: {remaining} undelivered, {errors[:1]}")
    else:
        from kafka_handoff.producer import Producer

        with Producer({"bootstrap.servers": bootstrap, "batch.size": 16384, "linger.ms": 5}) as ours:
            for i, value in enumerate(values):
                ours.send(topic, value, partition=i % partitions)
            ours.flush(300)
    return time.perf_counter() - t0


# ============================================================================================ runs
def _vm_hwm_mb(pid: int) -> float | None:
    """The peak resident set size (``VmHWM``) of a running process, in MB, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def _wait_child(proc: subprocess.Popen[str], timeout_s: float) -> tuple[int, float, float, bool]:
    """(exit status, CPU seconds, peak RSS in MB, timed out) of a child.

    CPU comes from ``wait4()``.  Peak RSS is the child's ``VmHWM``, read every 20 ms while it runs (the last
    reading before it exits): ``wait4()``'s ``ru_maxrss`` is no use here, as Linux carries the parent's
    high-water mark into a child across ``fork``+``exec``.
    """
    deadline = time.monotonic() + timeout_s
    peak = 0.0
    while True:
        hwm = _vm_hwm_mb(proc.pid)
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_utime + usage.ru_stime, peak, False
        if hwm is not None:
            peak = max(peak, hwm)
        if time.monotonic() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_utime + usage.ru_stime, peak, True
        time.sleep(0.02)


def _run_process(cmd: list[str], env: dict[str, str], timeout_s: float) -> tuple[str, str, int, float, float]:
    """Run ``cmd``; (stdout, stderr, exit status, CPU s, peak RSS MB).  Output goes through temp files so
    the child never blocks on a full pipe while we wait for it with ``wait4``."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, text=True)
        code, cpu, rss, timed_out = _wait_child(proc, timeout_s)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if timed_out:
        stderr += f"\n(killed after {timeout_s:.0f} s)"
    return stdout, stderr, code, cpu, rss


def _timeout(records: int) -> float:
    return 120.0 + records / 2_000.0


def run_client(
    spec: ClientSpec,
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    *,
    profile: str | None = None,
    client_config: str | None = None,
) -> Sample:
    """Consume the whole topic with one client in a fresh process (``client_config``: extra settings)."""
    load = os.getloadavg()[0]
    env = {**os.environ, **dict(spec.env)}
    if client_config:
        env[CLIENT_CONFIG_ENV] = client_config
        if spec.runner is None:
            return _failed(spec, records, load, "security settings are not supported for the Java runner")
    if spec.runner is None:
        return _run_java(spec, bootstrap, topic, records, env, load)
    cmd = [
        sys.executable,
        "-m",
        "kafka_handoff.bench.peers",
        spec.runner,
        "--bootstrap-servers",
        bootstrap,
        "--topic",
        topic,
        "--partitions",
        str(partitions),
        "--records",
        str(records),
        "--client-name",
        spec.name,
    ]
    if profile:
        cmd += ["--profile", profile]
    return child_sample(spec, cmd, env, records, load)


def child_sample(spec: ClientSpec, cmd: list[str], env: dict[str, str], records: int, load: float) -> Sample:
    """Run one runner process (``cmd``) and make its JSON line into a :class:`Sample` (a failed one when it
    printed none, exited non-zero or fell short of ``records``)."""
    stdout, stderr, code, cpu, rss = _run_process(cmd, env, _timeout(records))
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith("{")), None)
    if line is None:
        return _failed(spec, records, load, f"exit {code}: {stderr.strip()[-500:]}")
    data = json.loads(line)
    if code != 0 or data["records"] < records:
        return _failed(spec, records, load, f"exit {code}, {data['records']}/{records} records")
    return Sample(
        client=spec.name,
        label=spec.label,
        records=int(data["records"]),
        value_bytes=int(data["value_bytes"]),
        consume_s=float(data["consume_s"]),
        cpu_window_s=float(data["cpu_s"]),
        cpu_total_s=cpu,
        peak_rss_mb=float(data.get("peak_rss_mb") or rss),
        startup_s=float(data["startup_s"]),
        load_1m=load,
    )


def sample_line(prefix: str, sample: Sample) -> str:
    """A run's progress line: its figures, or why it failed."""
    if not sample.ok:
        return f"{prefix} FAILED: {sample.error}"
    return (
        f"{prefix} {sample.records_per_s:>11,.0f} rec/s {sample.mb_per_s:>7.1f} MB/s  "
        f"cpu/M {sample.cpu_s_per_million:5.2f} s  rss {sample.peak_rss_mb:6.0f} MB  "
        f"(load {sample.load_1m:.1f})"
    )


def _failed(spec: ClientSpec, records: int, load: float, error: str) -> Sample:
    return Sample(spec.name, spec.label, records, 0, 0.0, 0.0, 0.0, 0.0, 0.0, load, ok=False, error=error)


def _run_java(
    spec: ClientSpec, bootstrap: str, topic: str, records: int, env: dict[str, str], load: float
) -> Sample:
    try:
        cmd = java_command(bootstrap, topic, records, f"bench-java-{uuid.uuid4().hex[:8]}")
        base_cmd = java_command(bootstrap, topic, 1, f"bench-java-{uuid.uuid4().hex[:8]}")
    except Exception as exc:
        return _failed(spec, records, load, f"Java consumer unavailable: {exc}")
    # A one-record run: JVM start, class loading and the group join, to take out of the CPU figure.
    _o, _e, _c, base_cpu, _r = _run_process(base_cmd, env, 120.0)
    stdout, stderr, code, cpu, rss = _run_process(cmd, env, _timeout(records))
    try:
        parsed = parse_java_output(stdout)
    except ValueError:
        return _failed(spec, records, load, f"exit {code}: {stderr.strip()[-500:]}")
    if parsed.records < records:
        return _failed(spec, records, load, f"exit {code}, {parsed.records}/{records} records")
    return Sample(
        client=spec.name,
        label=spec.label,
        records=parsed.records,
        value_bytes=round(parsed.mb * 1024 * 1024),
        consume_s=parsed.fetch_ms / 1000.0,
        cpu_window_s=max(0.0, cpu - base_cpu),
        cpu_total_s=cpu,
        peak_rss_mb=rss,
        startup_s=parsed.rebalance_ms / 1000.0,
        load_1m=load,
    )


def environment() -> dict[str, Any]:
    try:
        import psutil

        mem_gib = psutil.virtual_memory().total / 2**30
    except ImportError:  # pragma: no cover
        mem_gib = 0.0
    from kafka_handoff.devbroker import KAFKA_VERSION

    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_gib, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "broker": f"Apache Kafka {KAFKA_VERSION}",
        "load_avg_start": os.getloadavg(),
        "versions": {name: client_version(name) for name in CLIENTS},
        # The event loop of the asyncio clients (handoff-aio, aiokafka, confluent-aio).
        "asyncio_loop": "uvloop" if os.environ.get("HANDOFF_BENCH_UVLOOP") == "1" else "asyncio",
    }


def run_benchmark(
    bootstrap: str,
    *,
    records: int,
    value_bytes: int,
    partitions: int,
    repeat: int,
    clients: Sequence[str] = DEFAULT_CLIENTS,
    keep_topic: bool = False,
    profile_dir: Path | None = None,
    progress: Callable[[str], None] = lambda msg: None,
    client_config: str | None = None,
    security: str | None = None,
) -> ThroughputReport:
    """Produce once, then consume with every client ``repeat`` times, interleaved.

    ``client_config``: a JSON file of client settings for the consumers (``security`` names them in the
    report)."""
    for name in clients:
        if name not in CLIENTS:
            raise ValueError(f"unknown client {name!r} (allowed: {', '.join(CLIENTS)})")
    report = ThroughputReport(
        config={
            "records": records,
            "value_bytes": value_bytes,
            "partitions": partitions,
            "repeat": repeat,
            "clients": list(clients),
            "bootstrap_servers": bootstrap,
            "security": security or "plaintext",
        },
        environment=environment(),
    )
    topic = create_topic(bootstrap, partitions)
    try:
        progress(f"producing {records:,} records x {value_bytes} B to {topic} ({partitions} partitions)")
        report.config["produce_s"] = produce_data(bootstrap, topic, partitions, records, value_bytes)
        report.config["topic"] = topic
        # One untimed pass warms the broker (page cache is warm already; this warms its JIT).
        progress("warm-up pass (confluent-kafka, not counted)")
        run_client(
            CLIENTS["confluent-tuned"], bootstrap, topic, partitions, records, client_config=client_config
        )
        for round_no in range(1, repeat + 1):
            for name in clients:
                prof = None
                if profile_dir is not None and round_no == 1 and name.startswith("handoff"):
                    prof = str(profile_dir / f"profile-{name}.txt")
                sample = run_client(
                    CLIENTS[name],
                    bootstrap,
                    topic,
                    partitions,
                    records,
                    profile=prof,
                    client_config=client_config,
                )
                report.samples.append(sample)
                progress(sample_line(f"round {round_no}/{repeat} {name:<14}", sample))
    finally:
        report.environment["load_avg_end"] = os.getloadavg()
        if not keep_topic:
            delete_topic(bootstrap, topic)
    return report
