"""Transforms and ground truth for the pipeline's tests and benchmarks.

* :func:`records` -- one output row per well-formed clickstream event (``event_id`` and where it came
  from): duplicates and gaps in the output are visible row by row, which is what the exactly-once tests
  need.
* :func:`failing` -- raises inside the transform (error reporting tests).
* :func:`failing_in_spark` -- fails only when Spark computes the result (a lazy error).
* :func:`page_views` -- the ground truth of ``examples/clickstream.py`` from the generated events.
* helpers: :func:`produce` (events with the project's producer), :func:`pipeline_config`,
  :func:`output_event_ids` / :func:`valid_event_ids` / :func:`exactly_once_report`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kafka_handoff.pipeline.transform import TransformResult, parse_json

__all__ = [
    "CLICK_SCHEMA",
    "CONFLICT_HOOK",
    "REQUIRED",
    "exactly_once_report",
    "failing",
    "failing_in_spark",
    "output_event_ids",
    "page_views",
    "pipeline_config",
    "produce",
    "records",
    "records_with_conflict",
    "slow",
    "start_worker_process",
    "valid_event_ids",
    "write_config_toml",
]

CLICK_SCHEMA = "event_id STRING, user STRING, session STRING, page STRING, action STRING, timestamp LONG"
REQUIRED = ("event_id", "user", "session", "page", "action", "timestamp")


def records(df: Any) -> TransformResult:
    """Well-formed events as rows ``(event_id, page, action, src_topic, src_partition, src_offset)``."""
    events, rejected = parse_json(df, CLICK_SCHEMA, required=REQUIRED)
    out = events.selectExpr(
        "event_id",
        "page",
        "action",
        "topic AS src_topic",
        "partition AS src_partition",
        "offset AS src_offset",
    )
    return TransformResult(out, rejected)


def failing(df: Any) -> Any:
    raise ValueError("the transform failed on purpose")


def failing_in_spark(df: Any) -> Any:
    """A plan that only fails when executed (ANSI mode: casting a JSON text to INT raises)."""
    from pyspark.sql import functions as F

    return df.select(F.col("value").cast("string").cast("int").alias("n"))


def page_views(events: Iterable[Any]) -> Counter[tuple[str, int]]:
    """``(page, minute start in ms) -> views`` for ``produce-sample`` events (``SampleEvent``)."""
    counts: Counter[tuple[str, int]] = Counter()
    for e in events:
        if e.event is not None and e.event.get("action") == "view":
            ts = int(e.event["timestamp"])
            counts[(e.event["page"], ts - ts % 60_000)] += 1
    return counts


# ---------------------------------------------------------------------------------------------- test helpers
CONFLICT_HOOK: list[Any] = []
"""Callables :func:`records_with_conflict` runs (and removes) before building its result: a test puts a
function here that commits to the sink as another member would, between the batch's cut and its commit."""


def records_with_conflict(df: Any) -> TransformResult:
    while CONFLICT_HOOK:
        CONFLICT_HOOK.pop(0)()
    return records(df)


def slow(df: Any) -> Any:
    """A transform whose result takes minutes to compute (cancellation tests)."""
    from pyspark.sql import functions as F

    big = df.sparkSession.range(0, 10**12)
    return big.select(F.sum(F.sqrt("id")).alias("s"))


def produce(bootstrap: str, topic: str, events: Iterable[Any], *, linger_ms: int = 5) -> int:
    """Write ``produce-sample`` events (key = user, record timestamp = event time) with the project's
    producer; returns how many.  Raises if any failed."""
    from kafka_handoff.producer import Producer

    failures: list[BaseException] = []

    def done(_md: Any, exc: BaseException | None) -> None:
        if exc is not None:
            failures.append(exc)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "compression.type": "lz4"})
    n = 0
    try:
        for e in events:
            producer.send(topic, e.value, key=e.key, timestamp=e.timestamp, callback=done)
            n += 1
        producer.flush(120)
    finally:
        producer.close(30)
    if failures:
        raise RuntimeError(f"{len(failures)} of {n} records failed; first: {failures[0]}")
    return n


def pipeline_config(
    bootstrap: str,
    topic: str,
    group: str,
    sink_path: str,
    *,
    function: str = "kafka_handoff.pipeline.testing:records",
    sink_format: str = "delta",
    protocol: str = "consumer",
    malformed: str = "skip",
    dead_letter_path: str | None = None,
    dead_letter_topic: str | None = None,
    max_records: int = 2000,
    max_interval_ms: int = 500,
    spark: dict[str, Any] | None = None,
    kafka: dict[str, Any] | None = None,
) -> Any:
    """A :class:`~kafka_handoff.pipeline.config.PipelineConfig` for tests (small batches)."""
    from kafka_handoff.pipeline.config import parse_config

    errors: dict[str, Any] = {"malformed": malformed}
    if dead_letter_path is not None:
        errors["dead_letter_path"] = dead_letter_path
    if dead_letter_topic is not None:
        errors["dead_letter_topic"] = dead_letter_topic
    raw: dict[str, Any] = {
        "kafka": {
            "topics": [topic],
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": protocol,
            **(kafka or {}),
        },
        "batch": {"max_records": max_records, "max_interval_ms": max_interval_ms},
        "transform": {"function": function},
        "sink": {"format": sink_format, "path": sink_path},
        "errors": errors,
    }
    if spark:
        raw["spark"] = spark
    return parse_config(raw)


def output_event_ids(table: Any) -> Counter[str]:
    """``event_id -> how many times it is in the output`` (1 everywhere = exactly once)."""
    return Counter(table.column("event_id").to_pylist()) if table.num_columns else Counter()


def valid_event_ids(events: Iterable[Any]) -> Counter[str]:
    return Counter(e.event["event_id"] for e in events if e.event is not None)


def exactly_once_report(expected: Counter[str], got: Counter[str]) -> str:
    """'' when ``got == expected``; otherwise what is missing and what is duplicated (for assertions)."""
    missing = expected - got
    extra = got - expected
    if not missing and not extra:
        return ""
    dup = {k: v for k, v in got.items() if v > 1}
    return (
        f"{sum(missing.values())} missing (e.g. {sorted(missing)[:3]}), {sum(extra.values())} extra; "
        f"{len(dup)} event ids more than once (e.g. {sorted(dup.items())[:3]})"
    )


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def write_config_toml(path: str | os.PathLike[str], sections: Mapping[str, Mapping[str, Any]]) -> Path:
    """Write ``{section: {key: value}}`` (keys quoted, so dotted Kafka names stay flat) as a TOML file."""
    lines: list[str] = []
    for section, values in sections.items():
        lines.append(f"[{section}]")
        lines.extend(f'"{k}" = {_toml_value(v)}' for k, v in values.items())
        lines.append("")
    out = Path(path)
    out.write_text("\n".join(lines), encoding="utf-8")
    return out


def start_worker_process(
    config_path: str | os.PathLike[str],
    *,
    member: str,
    until_idle_s: float | None = None,
    summary_json: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    log_path: str | os.PathLike[str] | None = None,
) -> subprocess.Popen[bytes]:
    """``handoff pipeline run CONFIG`` as a child process (its own Spark driver); output to ``log_path``."""
    cmd = [
        sys.executable,
        "-m",
        "kafka_handoff.cli.main",
        "pipeline",
        "run",
        str(config_path),
        "--member",
        member,
    ]
    if until_idle_s is not None:
        cmd += ["--until-idle", str(until_idle_s)]
    if summary_json is not None:
        cmd += ["--summary-json", str(summary_json)]
    out = open(log_path, "ab") if log_path is not None else subprocess.DEVNULL  # noqa: SIM115
    try:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    finally:
        if log_path is not None:
            out.close()  # type: ignore[union-attr]
