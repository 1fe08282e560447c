"""``handoff bench pipeline``: the kafka-handoff pipeline worker beside Spark's built-in Kafka source.

Both engines run in one shared local SparkSession, apply the same transform (``examples/clickstream.py``:
parse JSON, count page views per page per minute; malformed records to a dead-letter output) and write the
result:

* **kafka-handoff**: one pipeline worker (``examples/clickstream.toml``: adaptive batches and overlap at
  their defaults, a new consumer group, Delta sink in a temporary directory by default);
* **spark-kafka**: Structured Streaming, ``readStream.format("kafka")`` (``spark-sql-kafka-0-10`` resolved
  from Maven Central through Ivy, cached under ``~/.cache/kafka-handoff/ivy``), ``startingOffsets``
  earliest, ``maxOffsetsPerTrigger`` = the pipeline's ``batch.max_records`` unless ``--spark-max-offsets``
  lists values to try (one run each), the transform applied in ``foreachBatch``, Parquet output, a
  checkpoint.

``--mode backlog`` (default): one topic holds N clickstream events (``handoff produce-sample``'s
generator, produced once); each engine drains it (Spark: ``trigger(availableNow=True)``).  Figures, with
the clock started once the SparkSession exists (its start-up is excluded):

* ``records/s``: records read / (time of the last output commit - start);
* ``latency p50/p99``: over records, the time from the start to the output commit that made the record
  visible (a backlog catch-up latency: it mostly reflects throughput and batch size).

``--mode live``: per engine, a fresh topic; the engine is started and, once it is up, a rate-limited
producer writes ``--rate`` events/s for ``--duration`` s with record timestamps = the time of the send.
Latency p50/p99 = over records, output commit time - record timestamp (produce -> output commit).
Spark's query runs with the default trigger (the next micro-batch as soon as the last one ends).

Both modes write ``pipeline.json`` and ``pipeline-<mode>.png`` (records committed over time, and the batch
sizes each engine chose) to ``--out``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["EngineResult", "run_benchmark", "spark_kafka_jars"]

IVY_DIR = Path.home() / ".cache" / "kafka-handoff" / "ivy"
MAVEN = "https://repo1.maven.org/maven2/org/apache/spark"


@dataclass
class EngineResult:
    engine: str
    records: int
    output_commits: int
    wall_s: float
    records_per_s: float
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    detail: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    batches: list[dict[str, Any]] = field(default_factory=list)
    """Per output commit: ``t_s`` (since the start), ``records``, and for kafka-handoff ``target``,
    ``reason``, ``total_s``."""


class LiveProducer:
    """Writes clickstream events at a fixed rate from a thread, each record's timestamp = its send time."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        rate: float,
        duration_s: float,
        on_done: Callable[[int], None] | None = None,
    ) -> None:
        self.bootstrap, self.topic, self.rate, self.duration_s = bootstrap, topic, rate, duration_s
        self.on_done = on_done
        self.sent = 0
        self.failures: list[BaseException] = []
        self.done = threading.Event()
        self.started_at: float | None = None
        self.elapsed_s = 0.0
        self.max_behind_s = 0.0
        self._thread: threading.Thread | None = None

    def start_when(self, ready: Callable[[], bool], timeout: float = 180.0) -> None:
        """Start producing (in a thread) once ``ready()`` is true (or after ``timeout`` s)."""
        self._thread = threading.Thread(target=self._run, args=(ready, timeout), daemon=True,
                                        name="bench-live-producer")  # fmt: skip
        self._thread.start()

    def join(self, timeout: float = 180.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, ready: Callable[[], bool], timeout: float) -> None:
        from kafka_handoff.producer import Producer
        from kafka_handoff.sample import iter_events

        try:
            deadline = time.monotonic() + timeout
            while not ready() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.0)  # let the engine settle into its poll loop
            total = int(self.rate * self.duration_s)

            def on_delivery(_md: Any, exc: BaseException | None) -> None:
                if exc is not None:
                    self.failures.append(exc)

            producer = Producer({"bootstrap.servers": self.bootstrap, "compression.type": "lz4",
                                 "linger.ms": 5, "batch.size": 65536,
                                 "delivery.timeout.ms": 600_000})  # fmt: skip
            began = self.started_at = time.monotonic()
            try:
                events = iter_events(total, 1, 0.01, start_ms=int(time.time() * 1000))
                for i, event in enumerate(events):
                    ahead = began + i / self.rate - time.monotonic()
                    if ahead > 0.002:
                        time.sleep(ahead)
                    elif ahead < 0:
                        self.max_behind_s = max(self.max_behind_s, -ahead)
                    producer.send(self.topic, event.value, key=event.key,
                                  timestamp=time.time_ns() // 1_000_000, callback=on_delivery)  # fmt: skip
                    self.sent += 1
                producer.flush(120)
            finally:
                producer.close(30)
            self.elapsed_s = time.monotonic() - began
        except BaseException as exc:  # reported in the results, never silent
            self.failures.append(exc)
        finally:
            self.done.set()
            if self.on_done is not None:
                self.on_done(self.sent)


def _percentiles(commits: list[tuple[float, int]]) -> tuple[float | None, float | None]:
    """p50/p99 over records of (commit time - start); ``commits``: (ms since start, records) per commit."""
    commits = [(t, n) for t, n in commits if n > 0]
    if not commits:
        return None, None
    times = np.array([t for t, _ in commits], dtype=float)
    weights = np.array([n for _, n in commits], dtype=float)
    order = np.argsort(times)
    times, cum = times[order], np.cumsum(weights[order])
    total = cum[-1]

    def pct(p: float) -> float:
        return round(float(times[int(np.searchsorted(cum, total * p / 100.0))]), 1)

    return pct(50), pct(99)


def _versions(artifact: str) -> list[str]:
    with urllib.request.urlopen(f"{MAVEN}/{artifact}/maven-metadata.xml", timeout=30) as resp:
        text = resp.read().decode()
    return re.findall(r"<version>([0-9]+\.[0-9]+\.[0-9]+)</version>", text)


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def _best(available: list[str], wanted: str) -> str | None:
    """The newest released version <= ``wanted`` with the same major version."""
    ok = [v for v in available if v.split(".")[0] == wanted.split(".")[0] and _vkey(v) <= _vkey(wanted)]
    return max(ok, key=_vkey) if ok else None


def spark_kafka_jars(progress: Callable[[str], None] = lambda _m: None) -> dict[str, str]:
    """Spark conf that puts ``spark-sql-kafka-0-10`` on the classpath, resolved from Maven Central.

    Uses the installed pyspark's version when Maven Central has it, else the newest release of the same
    major version before it; ``spark-token-provider-kafka-0-10`` likewise (fetched separately when its
    newest release lags behind).  Ivy's cache lives in ``~/.cache/kafka-handoff/ivy``.
    """
    import pyspark

    from kafka_handoff.errors import ConfigError

    wanted = pyspark.__version__.split("+")[0]
    cached = IVY_DIR / f"resolved-{wanted}.json"
    if cached.is_file():  # resolved before: no Maven metadata look-up (Ivy then works from its cache)
        conf: dict[str, str] = json.loads(cached.read_text(encoding="utf-8"))
        if all(Path(j).is_file() for j in conf.get("spark.jars", "").split(",") if j):
            progress(f"Spark {wanted}: using {conf['spark.jars.packages']} (resolved before)")
            return conf
    jars = [p.name for p in (Path(pyspark.__file__).parent / "jars").glob("scala-library-*.jar")]
    scala = ".".join(jars[0].removeprefix("scala-library-").split(".")[:2]) if jars else "2.13"
    sql_art = f"spark-sql-kafka-0-10_{scala}"
    tok_art = f"spark-token-provider-kafka-0-10_{scala}"
    sql_v = _best(_versions(sql_art), wanted)
    tok_v = _best(_versions(tok_art), sql_v or wanted)
    if sql_v is None or tok_v is None:
        raise ConfigError(f"Maven Central has no {sql_art} / {tok_art} release for Spark {wanted}")
    IVY_DIR.mkdir(parents=True, exist_ok=True)
    conf = {"spark.jars.packages": f"org.apache.spark:{sql_art}:{sql_v}", "spark.jars.ivy": str(IVY_DIR)}
    if tok_v != sql_v:
        jar = IVY_DIR / "extra" / f"{tok_art}-{tok_v}.jar"
        if not jar.is_file():
            jar.parent.mkdir(parents=True, exist_ok=True)
            tmp = jar.with_suffix(".part")
            urllib.request.urlretrieve(f"{MAVEN}/{tok_art}/{tok_v}/{tok_art}-{tok_v}.jar", tmp)
            tmp.rename(jar)
        conf["spark.jars.excludes"] = f"org.apache.spark:{tok_art}"
        conf["spark.jars"] = str(jar)
    cached.write_text(json.dumps(conf), encoding="utf-8")
    progress(f"Spark {wanted}: using {sql_art}:{sql_v} and {tok_art}:{tok_v} from Maven Central")
    return conf


def _warm_transform(spark: Any, transform_fn: Callable[[Any], Any], count: int, handover: Any) -> None:
    """Run the transform on ``count`` generated events (the run's size up to 200,000), by the Spark path
    and by the worker's native JSON parse and handover, twice, so that neither engine alone pays the JVM's
    first use (code generation, JIT compilation of the Arrow conversion, the JSON parser, the Parquet
    reader and the aggregation loops)."""
    from kafka_handoff.consumer.batch import ColumnChunk
    from kafka_handoff.pipeline.arrow import chunks_to_table
    from kafka_handoff.pipeline.transform import native_input, normalize_result
    from kafka_handoff.sample import generate_events

    events = generate_events(max(count, 1000), seed=1)
    n = len(events)
    keys: list[bytes | None] = [e.key for e in events]
    values: list[bytes | None] = [e.value for e in events]
    chunk = ColumnChunk("warm-up", 0, list(range(n)), [e.timestamp for e in events], keys, values, [()] * n)
    table = chunks_to_table([chunk])
    for run, native in enumerate((False, True, False, True)):
        df = spark.createDataFrame(table)
        with native_input(spark, df, table, enabled=native):
            result = normalize_result(transform_fn(df), "warm-up")
        result.output.toArrow()
        if result.rejected is not None:
            result.rejected.toArrow()
        if native:  # the worker's way too (handover files: its Parquet reads)
            spool = handover.batch(f"warm-up-{run}")
            try:
                df = spool.frame(table)
                with native_input(spark, df, table, to_frame=spool.frame):
                    result = normalize_result(transform_fn(df), "warm-up")
                result.output.toArrow()
            finally:
                spool.close()


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (0.0 if it is gone; Linux /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _descendants(pids: list[int]) -> list[int]:
    """Every live descendant of ``pids`` (Linux /proc: children files)."""
    out: list[int] = []
    todo = list(pids)
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


class CpuMeter:
    """CPU seconds of the driver (this process, all threads, plus the driver JVM Spark launched from it)
    and of a standalone cluster's executors (descendants of its worker JVMs: executor JVMs and their Python
    workers), between :meth:`start` and :meth:`stop`."""

    def __init__(self, spark: Any, cluster_workers: list[int] | None = None) -> None:
        import resource

        self._resource = resource
        proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
        self.jvm_pid: int | None = getattr(proc, "pid", None)
        self.workers = list(cluster_workers or [])
        self._t0: tuple[float, float, dict[int, float]] = (0.0, 0.0, {})

    def _py(self) -> float:
        ru = self._resource.getrusage(self._resource.RUSAGE_SELF)
        return float(ru.ru_utime + ru.ru_stime)

    def _executors(self) -> dict[int, float]:
        return {pid: _proc_cpu_s(pid) for pid in _descendants(self.workers)}

    def start(self) -> None:
        jvm = _proc_cpu_s(self.jvm_pid) if self.jvm_pid else 0.0
        self._t0 = (self._py(), jvm, self._executors())

    def stop(self) -> dict[str, float | None]:
        py0, jvm0, ex0 = self._t0
        py = self._py() - py0
        jvm = (_proc_cpu_s(self.jvm_pid) - jvm0) if self.jvm_pid else 0.0
        executors = None
        if self.workers:
            executors = sum(cpu - ex0.get(pid, 0.0) for pid, cpu in self._executors().items())
        return {"driver_python_cpu_s": round(py, 2), "driver_jvm_cpu_s": round(jvm, 2),
                "driver_cpu_s": round(py + jvm, 2),
                "executors_cpu_s": None if executors is None else round(executors, 2)}  # fmt: skip


def _run_handoff(
    spark: Any,
    config_path: Path,
    bootstrap: str,
    topic: str,
    work: Path,
    sink: str,
    records: int,
    *,
    live: LiveProducer | None = None,
    overrides: dict[str, Any] | None = None,
) -> EngineResult:
    from kafka_handoff._build import build_info
    from kafka_handoff.pipeline import load_config
    from kafka_handoff.pipeline.stats import BatchReport
    from kafka_handoff.pipeline.worker import Worker

    group = f"bench-pipeline-{os.getpid()}-{int(time.time())}"
    config = load_config(
        config_path,
        {
            "kafka.topics": [topic],
            "kafka.bootstrap.servers": bootstrap,
            "kafka.group.id": group,
            "sink.format": sink,
            "sink.path": str(work / f"handoff-out-{group}"),
            "errors.malformed": "dead-letter-table",
            "errors.dead_letter_path": str(work / f"handoff-dead-letter-{group}"),
            **(overrides or {}),
        },
    )
    commits: list[tuple[float, int]] = []
    batches: list[dict[str, Any]] = []
    start = time.monotonic()

    def on_batch(report: BatchReport) -> None:
        if report.status == "committed":
            t = (time.monotonic() - start) * 1000.0
            commits.append((t, report.records))
            batches.append({"t_s": round(t / 1000, 3), "records": report.records, "target": report.target,
                            "reason": report.cut_reason, "total_s": round(report.total_s, 3),
                            "build_s": round(report.build_s, 3), "spark_s": round(report.spark_s, 3),
                            "sink_s": round(report.sink_s, 3), "transform_s": round(report.transform_s, 3),
                            "native_records": report.native_records})  # fmt: skip

    worker = Worker(
        config,
        until_idle_s=5.0 if live is None else 30.0,
        max_records=records if live is None else None,
        spark=spark,
        on_batch=on_batch,
    )
    if live is not None:

        def produced(sent: int) -> None:
            worker.max_records = sent  # stop once everything produced is committed

        live.on_done = produced
        live.start_when(lambda: worker.stats.assigned > 0)
    summary = worker.run()
    if live is not None:
        live.join()
    wall = commits[-1][0] / 1000.0 if commits else time.monotonic() - start
    p50, p99 = _percentiles(commits)
    if live is not None:  # produce -> sink commit, from the worker's own histogram (timestamps = send time)
        p50, p99 = summary.latency_p50_ms, summary.latency_p99_ms
    return EngineResult(
        engine="kafka-handoff",
        records=summary.records_committed,
        output_commits=len(commits),
        wall_s=round(wall, 3),
        records_per_s=round(summary.records_committed / wall, 1) if wall > 0 else 0.0,
        latency_p50_ms=p50,
        latency_p99_ms=p99,
        detail={
            "sink": sink,
            "group": group,
            "status": summary.status,
            "malformed": summary.malformed,
            "output_rows": summary.output_rows,
            "summary_records_per_s": summary.records_per_s,
            "batch_max_records": config.batch.max_records,
            "adaptive": config.batch.adaptive,
            "overlap": config.batch.overlap,
            "handover": worker._handover.describe() if worker._handover is not None else None,
            "on_executors": config.spark.on_executors,
            "native_json": config.transform.native_json,
            "json_scanner": build_info()["json_scanner"],
        },
        error=summary.error,
        batches=batches,
    )


def _run_spark(
    spark: Any,
    transform_fn: Callable[[Any], Any],
    bootstrap: str,
    topic: str,
    work: Path,
    max_records: int,
    *,
    live: LiveProducer | None = None,
) -> EngineResult:
    from pyspark.sql import functions as F

    from kafka_handoff.pipeline.stats import LatencyHistogram
    from kafka_handoff.pipeline.transform import normalize_result

    commits: list[tuple[float, int]] = []
    batches: list[dict[str, Any]] = []
    counts = {"malformed": 0, "output_rows": 0, "records": 0}
    lock = threading.Lock()
    run = f"{int(time.time() * 1000)}-{max_records}"
    out, dead = str(work / f"spark-out-{run}"), str(work / f"spark-dead-letter-{run}")
    latency = LatencyHistogram()

    def each_batch(df: Any, batch_id: int) -> None:
        t0 = time.monotonic()
        df = df.select("topic", "partition", "offset", "timestamp", "key", "value").persist()
        try:
            # One job counts the batch and (live) buckets its timestamps to 10 ms, as today's count did.
            buckets = (
                df.groupBy(F.floor(F.unix_millis("timestamp") / 10).alias("b")).count().collect()
                if live is not None
                else None
            )
            n = sum(int(r["count"]) for r in buckets) if buckets is not None else df.count()
            result = normalize_result(transform_fn(df), "clickstream:transform")
            result.output.write.mode("append").parquet(out)
            rejected = result.rejected.count() if result.rejected is not None else 0
            if rejected:
                result.rejected.write.mode("append").parquet(dead)
            now_ms = time.time() * 1000.0
            if buckets:
                ts = np.array([int(r["b"]) * 10 + 5 for r in buckets], dtype=np.float64)
                latency.add(np.repeat(now_ms - ts, [int(r["count"]) for r in buckets]))
            with lock:
                t = (time.monotonic() - start) * 1000.0
                commits.append((t, n))
                batches.append({"t_s": round(t / 1000, 3), "records": n,
                                "total_s": round(time.monotonic() - t0, 3)})  # fmt: skip
                counts["malformed"] += rejected
                counts["records"] += n
        finally:
            df.unpersist()

    start = time.monotonic()
    writer = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_records)
        .option("failOnDataLoss", "true")
        .load()
        .writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", str(work / f"spark-checkpoint-{run}"))
    )
    if live is None:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
    else:
        query = writer.start()
        live.start_when(lambda: query.lastProgress is not None)
        deadline = None
        while query.isActive:
            time.sleep(0.2)
            if live.done.is_set():
                deadline = deadline or time.monotonic() + 120
                with lock:
                    caught_up = counts["records"] >= live.sent
                if caught_up or time.monotonic() > deadline:
                    break
        query.stop()
        live.join()
    total = sum(n for _, n in commits)
    wall = commits[-1][0] / 1000.0 if commits else time.monotonic() - start
    p50, p99 = _percentiles(commits)
    if live is not None:
        p50, p99 = latency.percentile(50), latency.percentile(99)
    return EngineResult(
        engine="spark-kafka",
        records=total,
        output_commits=len(commits),
        wall_s=round(wall, 3),
        records_per_s=round(total / wall, 1) if wall > 0 else 0.0,
        latency_p50_ms=p50,
        latency_p99_ms=p99,
        detail={
            "sink": "parquet (foreachBatch)",
            "malformed": counts["malformed"],
            "max_offsets_per_trigger": max_records,
        },
        batches=batches,
    )


def run_benchmark(
    bootstrap: str,
    *,
    events: int,
    partitions: int = 4,
    sink: str = "delta",
    mode: str = "backlog",
    rate: float = 20_000,
    duration_s: float = 60.0,
    spark_max_offsets: list[int] | None = None,
    engines: tuple[str, ...] = ("kafka-handoff", "spark-kafka"),
    progress: Callable[[str], None] = lambda _m: None,
    master: str | None = None,
    read_on: tuple[str, ...] = ("auto",),
    cluster_workers: list[int] | None = None,
) -> dict[str, Any]:
    """Run both engines (backlog: on ``events`` produced once; live: at ``rate`` for ``duration_s`` each);
    a JSON-ready dict of the results."""
    from pyspark.sql import SparkSession

    from kafka_handoff.bench.throughput import create_topic
    from kafka_handoff.pipeline import load_config
    from kafka_handoff.pipeline.demo import find_example_config, produce_events
    from kafka_handoff.pipeline.transform import load_transform

    config_path = find_example_config()
    overrides: dict[str, Any] = {"kafka.bootstrap.servers": bootstrap}
    if master:
        overrides["spark.master"] = master
    base = load_config(config_path, overrides)
    load_start = os.getloadavg()
    sent = malformed = 0
    topic = ""
    if mode == "backlog":
        topic = create_topic(bootstrap, partitions, prefix="bench-pipeline")
        progress(f"producing {events:,} clickstream events to {topic} ({partitions} partitions) ...")
        sent, malformed = produce_events(bootstrap, topic, events)
    conf = spark_kafka_jars(progress)
    progress("starting the SparkSession (resolving the Kafka source through Ivy) ...")
    # Executors run this interpreter (pyspark sends the driver's PYSPARK_PYTHON with each task; its default,
    # "python3" on the PATH, may lack this environment's packages), as the worker's build_session does.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(base.spark.master or "local[2]").appName("handoff-bench-pipeline")
    from kafka_handoff.pipeline.spark import default_conf

    # The pipeline's own Spark defaults for both engines (shuffle partitions, Arrow batch size, ...).
    settings = {**default_conf(base.spark), **base.spark.conf, **conf}
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="handoff-bench-pipeline-"))
    results: list[EngineResult] = []
    limits = spark_max_offsets or [base.batch.max_records]
    transform_fn = load_transform(base.transform)
    lives: list[dict[str, Any]] = []

    def live_producer(engine: str) -> tuple[str, LiveProducer]:
        t = create_topic(bootstrap, partitions, prefix=f"bench-live-{engine}")
        producer = LiveProducer(bootstrap, t, rate, duration_s)
        progress(f"  {engine}: {rate:,.0f} events/s for {duration_s:.0f} s to {t} once it is up ...")
        return t, producer

    def note_live(engine: str, producer: LiveProducer) -> None:
        elapsed = producer.elapsed_s
        lives.append({"engine": engine, "sent": producer.sent, "elapsed_s": round(elapsed, 2),
                      "achieved_rate": round(producer.sent / elapsed, 1) if elapsed else 0.0,
                      "max_behind_s": round(producer.max_behind_s, 3),
                      "failures": [str(f) for f in producer.failures[:3]]})  # fmt: skip

    try:
        # warm the JVM/Python workers with a tiny job so neither engine pays first-job costs alone
        spark.sql("SELECT id % 7 AS k, count(*) FROM range(1000) GROUP BY k").collect()
        from kafka_handoff.pipeline.handover import Handover

        handover = Handover(spark, mode=base.spark.handover, local=base.spark.local,
                            spool_dir=base.spark.spool_dir, owner="bench-warm-up")  # fmt: skip
        warm = min(200_000, events if mode == "backlog" else int(rate * duration_s))
        _warm_transform(spark, transform_fn, warm, handover)
        handover.close()
        for where in read_on if "kafka-handoff" in engines else ():
            progress(f"kafka-handoff pipeline worker (spark.read_on = {where}) ...")
            extra = {"spark.master": base.spark.master, "spark.read_on": where}
            meter = CpuMeter(spark, cluster_workers)
            meter.start()
            if mode == "backlog":
                result = _run_handoff(spark, config_path, bootstrap, topic, work, sink, sent, overrides=extra)
            else:
                t, producer = live_producer("kafka-handoff")
                result = _run_handoff(
                    spark, config_path, bootstrap, t, work, sink, 0, live=producer, overrides=extra
                )
                note_live("kafka-handoff", producer)
            cpu = meter.stop()
            result.detail.update(cpu)
            result.detail["read_on"] = where
            if result.records:
                per_m = 1e6 / result.records
                result.detail["driver_cpu_s_per_million"] = round(float(cpu["driver_cpu_s"] or 0) * per_m, 2)
                if cpu["executors_cpu_s"] is not None:
                    result.detail["executors_cpu_s_per_million"] = round(cpu["executors_cpu_s"] * per_m, 2)
            results.append(result)
            progress(f"  {result.records:,} records, {result.records_per_s:,.0f}/s; CPU {cpu}")
        if "spark-kafka" in engines:
            for limit in limits:
                progress(f"Spark Structured Streaming's Kafka source, maxOffsetsPerTrigger {limit:,} ...")
                if mode == "backlog":
                    results.append(_run_spark(spark, transform_fn, bootstrap, topic, work, limit))
                else:
                    t, producer = live_producer("spark-kafka")
                    results.append(_run_spark(spark, transform_fn, bootstrap, t, work, limit, live=producer))
                    note_live("spark-kafka", producer)
                progress(f"  {results[-1].records:,} records, {results[-1].records_per_s:,.0f}/s")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {
        "mode": mode,
        "events": sent,
        "malformed_produced": malformed,
        "topic": topic,
        "partitions": partitions,
        "rate": rate if mode == "live" else None,
        "duration_s": duration_s if mode == "live" else None,
        "live_producers": lives,
        "spark_master": base.spark.master or "local[2]",
        "spark_packages": conf.get("spark.jars.packages"),
        "spark_settings": {k: v for k, v in settings.items() if not k.startswith("spark.jars")},
        "batch_max_records": base.batch.max_records,
        "cpus": os.cpu_count(),
        "load_avg_start": load_start,
        "load_avg_end": os.getloadavg(),
        "results": [asdict(r) for r in results],
    }


def plot_pipeline(data: dict[str, Any], path: Path) -> None:
    """Records committed over time and the batch size of each commit, per engine run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for r in data["results"]:
        label = r["engine"]
        if "read_on" in r.get("detail", {}):
            label += f" ({r['detail']['read_on']})"
        if r["engine"] == "spark-kafka":
            label += f" (maxOffsetsPerTrigger {r['detail']['max_offsets_per_trigger']:,})"
        ts = [0.0] + [b["t_s"] for b in r["batches"]]
        cum = np.cumsum([0] + [b["records"] for b in r["batches"]])
        top.step(ts, cum, where="post", label=label)
        bottom.plot(ts[1:], [b["records"] for b in r["batches"]], marker="o", ms=3, label=label)
        if r["engine"] == "kafka-handoff":
            bottom.plot(ts[1:], [b["target"] for b in r["batches"]], ls=":", color="grey",
                        label="kafka-handoff target (sizer)")  # fmt: skip
    top.set_ylabel("records committed")
    mode = data["mode"]
    what = (f"{data['events']:,} events backlog" if mode == "backlog"
            else f"live {data['rate']:,.0f} events/s for {data['duration_s']:.0f} s")  # fmt: skip
    top.set_title(f"handoff bench pipeline --mode {mode}: {what}, {data['partitions']} partitions; load "
                  f"{data['load_avg_start'][0]:.1f}-{data['load_avg_end'][0]:.1f}")  # fmt: skip
    top.legend(fontsize=8)
    bottom.set_ylabel("records per batch")
    bottom.set_xlabel("seconds since the engine started")
    bottom.set_yscale("log")
    bottom.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def results_table(data: dict[str, Any], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    cols = ("engine", "records", "commits", "wall s", "records/s", "latency p50", "latency p99",
            "driver CPU s/M", "executors CPU s/M")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="left" if col == "engine" else "right")

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v / 1000:.2f} s"

    for r in data["results"]:
        name = r["engine"]
        if name == "spark-kafka":
            name += f" (maxOffsetsPerTrigger {r['detail']['max_offsets_per_trigger']:,})"
        elif "read_on" in r["detail"]:
            name += f" (read_on {r['detail']['read_on']})"
        per_m = r["detail"].get("driver_cpu_s_per_million")
        ex_m = r["detail"].get("executors_cpu_s_per_million")
        table.add_row(
            name,
            f"{r['records']:,}",
            str(r["output_commits"]),
            f"{r['wall_s']:.2f}",
            f"{r['records_per_s']:,.0f}",
            ms(r["latency_p50_ms"]),
            ms(r["latency_p99_ms"]),
            "-" if per_m is None else f"{per_m:,.1f}",
            "-" if ex_m is None else f"{ex_m:,.1f}",
        )
    return table


def to_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1)


def cli(args: Any) -> int:
    """``handoff bench pipeline`` (the argparse entry; ``args`` from :mod:`kafka_handoff.cli.bench`)."""
    from rich.console import Console

    from kafka_handoff.bench.runs import broker as _broker
    from kafka_handoff.bench.runs import progress as _progress

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    limits = [int(x) for x in (args.spark_max_offsets or "").split(",") if x.strip()] or None
    engines = tuple(e.strip() for e in args.engines.split(",") if e.strip())
    read_on = tuple(x.strip() for x in (args.read_on or "auto").split(",") if x.strip())
    with contextlib.ExitStack() as stack:
        bootstrap = stack.enter_context(_broker(args.bootstrap_servers))
        master, workers = args.master, None
        if args.spark_dir is not None:
            from kafka_handoff.devbroker.spark import SparkStandalone

            attached = SparkStandalone.attach(args.spark_dir)
            if attached is None:
                print(f"error: no Spark cluster runs from {args.spark_dir}", flush=True)
                return 2
            master = attached.url
            workers = [p.pid for p in attached.procs if p.name.startswith("worker") and p.pid is not None]
        elif master == "standalone":
            from kafka_handoff.devbroker.spark import SparkStandalone

            _progress("starting a Spark standalone cluster (master + 2 workers) ...")
            cluster = stack.enter_context(SparkStandalone(workers=2).start())
            master = cluster.url
            workers = [p.pid for p in cluster.procs if p.name.startswith("worker") and p.pid is not None]
        data = run_benchmark(
            bootstrap,
            events=args.events,
            partitions=args.partitions,
            sink=args.sink,
            mode=args.mode,
            rate=args.rate,
            duration_s=args.duration,
            spark_max_offsets=limits,
            engines=engines,
            progress=_progress,
            master=master,
            read_on=read_on,
            cluster_workers=workers,
        )
    json_path = out / "pipeline.json"
    json_path.write_text(to_json(data) + "\n", encoding="utf-8")
    if data["mode"] == "backlog":
        what = f"{data['events']:,} clickstream events"
    else:
        what = f"live: {data['rate']:,.0f} events/s for {data['duration_s']:.0f} s"
    title = (
        f"{what}, {data['partitions']} partitions, Spark {data['spark_master']}, "
        f"batch.max_records {data['batch_max_records']:,}; {data['cpus']} CPUs, load "
        f"{data['load_avg_start'][0]:.1f}-{data['load_avg_end'][0]:.1f}"
    )
    Console(width=160).print(results_table(data, title))
    try:
        png = out / f"pipeline-{data['mode']}.png"
        plot_pipeline(data, png)
        print(f"wrote {json_path} and {png}", flush=True)
    except ImportError:
        print(f"wrote {json_path} (no plot: matplotlib is not installed)", flush=True)
    if data["mode"] == "backlog":
        ok = bool(data["results"]) and all(r["records"] == data["events"] for r in data["results"])
    else:
        sent = {p["engine"]: p["sent"] for p in data["live_producers"]}
        ok = bool(data["results"]) and all(
            r["records"] == sent.get(r["engine"], -1) and not r["error"] for r in data["results"]
        )
    return 0 if ok else 1
