"""``handoff bench pipeline``: the kafka-handoff pipeline worker beside Spark's built-in Kafka source.

One topic holds N clickstream events (``handoff produce-sample``'s generator, produced once).  Both
engines then read the whole topic in one shared local SparkSession, apply the same transform
(``examples/clickstream.py``: parse JSON, count page views per page per minute; malformed records to a
dead-letter output) and write the result:

* **kafka-handoff**: one pipeline worker (``examples/clickstream.toml``, a new consumer group, Delta sink
  in a temporary directory by default) until the topic is drained;
* **spark-kafka**: Structured Streaming, ``readStream.format("kafka")`` (``spark-sql-kafka-0-10`` resolved
  from Maven Central through Ivy, cached under ``~/.cache/kafka-handoff/ivy``), ``startingOffsets``
  earliest, ``maxOffsetsPerTrigger`` = the pipeline's ``batch.max_records``, the transform applied in
  ``foreachBatch``, Parquet output, a checkpoint, ``trigger(availableNow=True)``.

Figures, per engine, with the clock started once the SparkSession exists (its start-up is excluded):

* ``records/s``: records read / (time of the last output commit - start);
* ``latency p50/p99``: over records, the time from the start to the output commit that made the record
  visible (a backlog catch-up latency, since every record was produced before the start; it mostly
  reflects throughput and batch size, not steady-state latency).
"""

from __future__ import annotations

import json
import os
import re
import shutil
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


def _run_handoff(
    spark: Any, config_path: Path, bootstrap: str, topic: str, work: Path, sink: str, records: int
) -> EngineResult:
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
            "sink.path": str(work / "handoff-out"),
            "errors.malformed": "dead-letter-table",
            "errors.dead_letter_path": str(work / "handoff-dead-letter"),
        },
    )
    commits: list[tuple[float, int]] = []
    start = time.monotonic()

    def on_batch(report: BatchReport) -> None:
        if report.status == "committed":
            commits.append(((time.monotonic() - start) * 1000.0, report.records))

    worker = Worker(config, until_idle_s=5.0, max_records=records, spark=spark, on_batch=on_batch)
    summary = worker.run()
    wall = commits[-1][0] / 1000.0 if commits else time.monotonic() - start
    p50, p99 = _percentiles(commits)
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
        },
        error=summary.error,
    )


def _run_spark(
    spark: Any, transform_fn: Callable[[Any], Any], bootstrap: str, topic: str, work: Path, max_records: int
) -> EngineResult:
    from kafka_handoff.pipeline.transform import normalize_result

    commits: list[tuple[float, int]] = []
    counts = {"malformed": 0, "output_rows": 0}
    lock = threading.Lock()
    out, dead = str(work / "spark-out"), str(work / "spark-dead-letter")

    def each_batch(df: Any, batch_id: int) -> None:
        df = df.select("topic", "partition", "offset", "timestamp", "key", "value").persist()
        try:
            n = df.count()
            result = normalize_result(transform_fn(df), "clickstream:transform")
            result.output.write.mode("append").parquet(out)
            rejected = result.rejected.count() if result.rejected is not None else 0
            if rejected:
                result.rejected.write.mode("append").parquet(dead)
            with lock:
                commits.append(((time.monotonic() - start) * 1000.0, n))
                counts["malformed"] += rejected
        finally:
            df.unpersist()

    start = time.monotonic()
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_records)
        .option("failOnDataLoss", "true")
        .load()
        .writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", str(work / "spark-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    total = sum(n for _, n in commits)
    wall = commits[-1][0] / 1000.0 if commits else time.monotonic() - start
    p50, p99 = _percentiles(commits)
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
    )


def run_benchmark(
    bootstrap: str,
    *,
    events: int,
    partitions: int = 4,
    sink: str = "delta",
    progress: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """Produce ``events`` once, run both engines on the topic; a JSON-ready dict of the results."""
    from pyspark.sql import SparkSession

    from kafka_handoff.bench.throughput import create_topic
    from kafka_handoff.pipeline import load_config
    from kafka_handoff.pipeline.demo import find_example_config, produce_events
    from kafka_handoff.pipeline.transform import load_transform

    config_path = find_example_config()
    base = load_config(config_path, {"kafka.bootstrap.servers": bootstrap})
    load_start = os.getloadavg()
    topic = create_topic(bootstrap, partitions, prefix="bench-pipeline")
    progress(f"producing {events:,} clickstream events to {topic} ({partitions} partitions) ...")
    sent, malformed = produce_events(bootstrap, topic, events)
    conf = spark_kafka_jars(progress)
    progress("starting the SparkSession (resolving the Kafka source through Ivy) ...")
    builder = SparkSession.builder.master(base.spark.master or "local[2]").appName("handoff-bench-pipeline")
    quiet = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    settings = {**base.spark.conf, **conf, **quiet, "spark.sql.shuffle.partitions": "4"}
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="handoff-bench-pipeline-"))
    results: list[EngineResult] = []
    try:
        # warm the JVM/Python workers with a tiny job so neither engine pays first-job costs alone
        spark.sql("SELECT id % 7 AS k, count(*) FROM range(1000) GROUP BY k").collect()
        progress("kafka-handoff pipeline worker ...")
        results.append(_run_handoff(spark, config_path, bootstrap, topic, work, sink, sent))
        progress(f"  {results[-1].records:,} records, {results[-1].records_per_s:,.0f}/s")
        progress("Spark Structured Streaming, built-in Kafka source ...")
        transform_fn = load_transform(base.transform)
        results.append(_run_spark(spark, transform_fn, bootstrap, topic, work, base.batch.max_records))
        progress(f"  {results[-1].records:,} records, {results[-1].records_per_s:,.0f}/s")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {
        "events": sent,
        "malformed_produced": malformed,
        "topic": topic,
        "partitions": partitions,
        "spark_master": base.spark.master or "local[2]",
        "spark_packages": conf.get("spark.jars.packages"),
        "batch_max_records": base.batch.max_records,
        "cpus": os.cpu_count(),
        "load_avg_start": load_start,
        "load_avg_end": os.getloadavg(),
        "results": [asdict(r) for r in results],
    }


def results_table(data: dict[str, Any], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in ("engine", "records", "commits", "wall s", "records/s", "latency p50", "latency p99"):
        table.add_column(col, justify="left" if col == "engine" else "right")

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v / 1000:.2f} s"

    for r in data["results"]:
        table.add_row(
            r["engine"],
            f"{r['records']:,}",
            str(r["output_commits"]),
            f"{r['wall_s']:.2f}",
            f"{r['records_per_s']:,.0f}",
            ms(r["latency_p50_ms"]),
            ms(r["latency_p99_ms"]),
        )
    return table


def to_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1)


def cli(args: Any) -> int:
    """``handoff bench pipeline`` (the argparse entry; ``args`` from :mod:`kafka_handoff.cli.bench`)."""
    from rich.console import Console

    from kafka_handoff.cli.bench import _broker, _progress

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with _broker(args.bootstrap_servers) as bootstrap:
        data = run_benchmark(
            bootstrap, events=args.events, partitions=args.partitions, sink=args.sink, progress=_progress
        )
    json_path = out / "pipeline.json"
    json_path.write_text(to_json(data) + "\n", encoding="utf-8")
    title = (
        f"{data['events']:,} clickstream events, {data['partitions']} partitions, "
        f"Spark {data['spark_master']}, "
        f"batches of {data['batch_max_records']:,}; {data['cpus']} CPUs, load "
        f"{data['load_avg_start'][0]:.1f}-{data['load_avg_end'][0]:.1f}"
    )
    Console(width=160).print(results_table(data, title))
    print(f"wrote {json_path}", flush=True)
    ok = len(data["results"]) == 2 and all(r["records"] == data["events"] for r in data["results"])
    return 0 if ok else 1
