"""``handoff bench source``: reader against reader -- ``spark.read.format("kafka-handoff")`` (kafka-handoff's
Spark data source, :mod:`kafka_handoff.spark`) beside ``spark.read.format("kafka")`` (Spark's own Kafka
source, ``spark-sql-kafka-0-10`` from Maven Central, cached under ``~/.cache/kafka-handoff/ivy``).

Both read the same topic (``--events`` clickstream events over ``--partitions`` partitions, produced once)
in the same SparkSession (``--master``: ``local[2]`` by default, or ``spark://host:port``) and run the same
two queries: ``count()`` and an aggregation per partition (records, value bytes, a CRC32 sum of the values
and the offset range).  The aggregation's rows must be equal for both readers -- the run fails otherwise --
so the numbers compare readers that returned the same records.  Each query runs once untimed (JVM and Python
worker warm-up), then ``--repeat`` times; the report gives the best and the median wall time and records/s.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["cli", "run_benchmark"]

READERS = ("kafka-handoff", "kafka")


def _load(spark: Any, fmt: str, bootstrap: str, topic: str) -> Any:
    return (
        spark.read.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )


def _aggregate(df: Any) -> list[tuple[int, int, int, int, int, int]]:
    from pyspark.sql import functions as F

    rows = (
        df.groupBy("partition")
        .agg(
            F.count("*").alias("n"),
            F.sum(F.length("value")).alias("bytes"),
            F.sum(F.crc32("value")).alias("crc"),
            F.min("offset").alias("lo"),
            F.max("offset").alias("hi"),
        )
        .collect()
    )
    return sorted((r["partition"], r["n"], r["bytes"] or 0, r["crc"] or 0, r["lo"], r["hi"]) for r in rows)


def run_benchmark(
    bootstrap: str,
    *,
    events: int,
    partitions: int = 4,
    master: str = "local[2]",
    repeat: int = 3,
    progress: Any = lambda _m: None,
) -> dict[str, Any]:
    """Produce ``events`` once, read them with both sources; a JSON-ready dict of the results."""
    from pyspark.sql import SparkSession

    from kafka_handoff.bench.pipeline import spark_kafka_jars
    from kafka_handoff.bench.throughput import create_topic
    from kafka_handoff.pipeline.config import SparkConfig
    from kafka_handoff.pipeline.demo import produce_events
    from kafka_handoff.pipeline.spark import default_conf
    from kafka_handoff.spark import register

    load_start = os.getloadavg()
    topic = create_topic(bootstrap, partitions, prefix="bench-source")
    progress(f"producing {events:,} clickstream events to {topic} ({partitions} partitions) ...")
    sent, _malformed = produce_events(bootstrap, topic, events)
    conf = spark_kafka_jars(progress)
    progress(f"starting the SparkSession ({master}) ...")
    # Spark's Python workers run the data source: this interpreter (its packages), as the pipeline does.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName("handoff-bench-source")
    settings = {**default_conf(SparkConfig(master=master)), **conf}
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    results: list[dict[str, Any]] = []
    digests: dict[str, Any] = {}
    try:
        for reader in READERS:
            for query in ("count", "aggregate"):
                df = _load(spark, reader, bootstrap, topic)
                run = (lambda d=df: d.count()) if query == "count" else (lambda d=df: _aggregate(d))
                progress(f"{reader}: {query} (warm-up, then {repeat} timed) ...")
                out: Any = run()
                times = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    out = run()
                    times.append(time.perf_counter() - t0)
                if query == "count":
                    records = int(out)
                else:
                    digests[reader] = out
                    records = sum(row[1] for row in out)
                best, median = min(times), statistics.median(times)
                results.append({
                    "reader": reader, "query": query, "records": records,
                    "best_s": round(best, 3), "median_s": round(median, 3),
                    "records_per_s_best": round(records / best, 1),
                    "records_per_s_median": round(records / median, 1),
                })  # fmt: skip
                progress(f"  {records:,} records, best {best:.2f} s ({records / best:,.0f}/s)")
    finally:
        spark.stop()
    return {
        "events": sent,
        "topic": topic,
        "partitions": partitions,
        "spark_master": master,
        "spark_packages": conf.get("spark.jars.packages"),
        "repeat": repeat,
        "same_records": len(set(json.dumps(d) for d in digests.values())) == 1
        and len(digests) == len(READERS),
        "digest": digests.get("kafka-handoff"),
        "cpus": os.cpu_count(),
        "load_avg_start": load_start,
        "load_avg_end": os.getloadavg(),
        "results": results,
    }


def cli(args: Any) -> int:
    """``handoff bench source`` (the argparse entry; ``args`` from :mod:`kafka_handoff.cli.bench`)."""
    from rich.console import Console
    from rich.table import Table

    from kafka_handoff.bench.runs import broker as _broker
    from kafka_handoff.bench.runs import progress as _progress

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with _broker(args.bootstrap_servers) as bootstrap:
        data = run_benchmark(
            bootstrap,
            events=args.events,
            partitions=args.partitions,
            master=args.master,
            repeat=args.repeat,
            progress=_progress,
        )
    json_path = out / "source.json"
    json_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    table = Table(
        title=f"{data['events']:,} events, {data['partitions']} partitions, Spark {data['spark_master']}; "
        f"{data['cpus']} CPUs, load {data['load_avg_start'][0]:.1f}-{data['load_avg_end'][0]:.1f}"
    )
    for col in ("reader", "query", "records", "best s", "median s", "records/s (best)", "records/s (median)"):
        table.add_column(col, justify="left" if col in ("reader", "query") else "right")
    for r in data["results"]:
        table.add_row(r["reader"], r["query"], f"{r['records']:,}", f"{r['best_s']:.2f}",
                      f"{r['median_s']:.2f}", f"{r['records_per_s_best']:,.0f}",
                      f"{r['records_per_s_median']:,.0f}")  # fmt: skip
    Console(width=160).print(table)
    print(f"same records from both readers: {data['same_records']}; wrote {json_path}", flush=True)
    ok = data["same_records"] and all(r["records"] == data["events"] for r in data["results"])
    return 0 if ok else 1
