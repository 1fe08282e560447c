"""The pipeline part of ``make demo``: sample events -> pipeline until idle -> the result table.

``handoff demo`` (``cli/demo.py``) starts the broker and creates the topic, then calls
:func:`run_pipeline_demo` with the broker's address.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kafka_handoff.pipeline.config import PipelineConfig, load_config

__all__ = [
    "DEFAULT_EVENTS",
    "avro_encoder",
    "find_example_config",
    "produce_events",
    "run_pipeline_demo",
]

DEFAULT_EVENTS = 100_000
EXAMPLE = Path("examples") / "clickstream.toml"


def find_example_config() -> Path:
    """``examples/clickstream.toml`` in the working directory, else in the source checkout."""
    candidates = [Path.cwd() / EXAMPLE, Path(__file__).resolve().parents[3] / EXAMPLE]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"cannot find {EXAMPLE} (looked in {', '.join(str(p) for p in candidates)})")


def avro_encoder(registry: Any, topic: str) -> Callable[[dict[str, Any]], bytes]:
    """A function writing a clickstream event as a registry-framed Avro value with our
    :class:`~kafka_handoff.schema_registry.avro.AvroSerializer` (the schema
    :data:`~kafka_handoff.sample.CLICKSTREAM_AVRO_SCHEMA` registered in ``registry``, a
    :class:`~kafka_handoff.schema_registry.SchemaRegistryClient`, under ``<topic>-value``)."""
    import json

    from kafka_handoff.sample import CLICKSTREAM_AVRO_SCHEMA
    from kafka_handoff.schema_registry.avro import AvroSerializer
    from kafka_handoff.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(registry, json.dumps(CLICKSTREAM_AVRO_SCHEMA))
    ctx = SerializationContext(topic, MessageField.VALUE)

    def encode(event: dict[str, Any]) -> bytes:
        value = serializer(event, ctx)
        assert value is not None
        return value

    return encode


def produce_events(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    seed: int = 0,
    malformed_share: float = 0.01,
    encode: Callable[[dict[str, Any]], bytes] | None = None,
) -> tuple[int, int]:
    """Write ``count`` clickstream events (``handoff produce-sample``'s generator) with the project's
    producer.  Returns (records sent, malformed among them).  ``encode``: the events as Avro (an
    :func:`avro_encoder`; :func:`kafka_handoff.sample.avro_value`), else JSON.

    Event times (also the record timestamps) are 0-49 ms apart and *end* about now: a broker rejects
    timestamps more than an hour ahead (``log.message.timestamp.after.max.ms``) and deletes segments older
    than its retention, so neither "starting now" nor the generator's fixed 2023 default works for large
    counts."""
    from kafka_handoff.producer import Producer
    from kafka_handoff.sample import avro_value, default_start_ms, iter_events

    start_ms = default_start_ms(count)
    failures: list[BaseException] = []

    def on_delivery(_md: Any, exc: BaseException | None) -> None:
        if exc is not None:
            failures.append(exc)

    producer = Producer(
        # a generous delivery timeout: on a busy machine the broker can fall minutes behind a fast producer
        {
            "bootstrap.servers": bootstrap,
            "compression.type": "lz4",
            "linger.ms": 10,
            "batch.size": 65536,
            "delivery.timeout.ms": 600_000,
        }
    )
    sent = malformed = 0
    try:
        for event in iter_events(count, seed, malformed_share, start_ms=start_ms):
            value = event.value if encode is None else avro_value(event, encode)
            producer.send(topic, value, key=event.key, timestamp=event.timestamp, callback=on_delivery)
            sent += 1
            malformed += event.malformed is not None
        producer.flush(120)
    finally:
        producer.close(30)
    if failures:
        raise RuntimeError(f"{len(failures)} of {sent} sample events failed; first: {failures[0]}")
    return sent, malformed


def run_pipeline_demo(
    bootstrap: str,
    *,
    topic: str = "events",
    count: int = DEFAULT_EVENTS,
    config_path: str | Path | None = None,
    work_dir: str | Path = Path(".handoff") / "pipeline",
    fresh: bool = True,
    until_idle_s: float = 8.0,
    overrides: Sequence[str] = (),
    console: Any = None,
    spark: Any = None,
) -> int:
    """Produce ``count`` events to ``topic``, run the pipeline on ``examples/clickstream.toml`` until it
    is idle, print the result table.  Returns an exit status (0 = the table was printed).

    The output goes to ``work_dir`` (wiped first when ``fresh``: sink marks must not outlive the topic they
    describe).  ``spark``: an existing SparkSession to use (default: the worker starts and stops its own).
    """
    from rich.console import Console

    from kafka_handoff.pipeline import print_summary, run_worker
    from kafka_handoff.pipeline.show import aggregate, read_output, render

    out = console or Console(highlight=False)
    path = Path(config_path) if config_path is not None else find_example_config()
    work = Path(work_dir)
    sink_dir, dead_dir = work / "clickstream", work / "clickstream-dead-letter"
    if fresh:
        for d in (sink_dir, dead_dir):
            shutil.rmtree(d, ignore_errors=True)
    config: PipelineConfig = load_config(
        path,
        [
            f"kafka.bootstrap.servers={bootstrap}",
            f'kafka.topics=["{topic}"]',
            f"sink.path={sink_dir}",
            f"errors.dead_letter_path={dead_dir}",
            *overrides,
        ],
    )
    t0 = time.monotonic()
    sent, malformed = produce_events(bootstrap, topic, count)
    out.print(f"produced {sent:,} clickstream events to {topic!r} ({malformed:,} malformed) "
              f"in {time.monotonic() - t0:.1f}s")  # fmt: skip
    out.print(f"running the pipeline ({path.name}) until it has been idle for {until_idle_s:.0f}s ...")
    summary = run_worker(config, console=out, until_idle_s=until_idle_s, spark=spark)
    print_summary(out, summary)
    if summary.status == "failed":
        out.print(f"[red]the pipeline failed: {summary.error}[/red]")
        return 1
    table = read_output(config)
    if table.num_columns == 0:
        out.print("[red]the pipeline wrote nothing[/red]")
        return 1
    rows = table.num_rows
    merged = aggregate(table, config.show)
    total_views = sum(merged.column("views").to_pylist()) if "views" in merged.column_names else None
    title = f"page views per page per minute ({rows:,} rows written, {merged.num_rows:,} after merging"
    title += f"; {total_views:,} views)" if total_views is not None else ")"
    out.print(render(merged, config.show.limit, title))
    dead = read_output(config, dead_letter=True)
    if dead.num_columns:
        out.print(f"dead-letter table {dead_dir}: {dead.num_rows:,} malformed records "
                  f"(handoff pipeline show {path} --dead-letter)")  # fmt: skip
    return 0
