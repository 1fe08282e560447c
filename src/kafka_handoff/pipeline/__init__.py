"""The PySpark pipeline: Kafka -> Spark -> table, exactly-once across rebalances, crashes and restarts.

Built on the public consumer API (group membership, rebalance listener, KIP-983 delayed revocation) plus
columnar polling (:mod:`kafka_handoff.consumer.batch`).  Start with :func:`run_worker` or
``handoff pipeline run CONFIG.toml``; ``docs/pipeline.md`` explains the design.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kafka_handoff.errors import ConfigError, KafkaError
from kafka_handoff.pipeline.config import PipelineConfig, load_config, parse_config
from kafka_handoff.pipeline.errors import (
    BatchError,
    MalformedRecordError,
    MarkConflictError,
    PipelineError,
    SinkError,
    TransformError,
)
from kafka_handoff.pipeline.stats import WorkerSummary
from kafka_handoff.pipeline.transform import TransformResult, parse_avro, parse_json

__all__ = [
    "BatchError",
    "MalformedRecordError",
    "MarkConflictError",
    "PipelineConfig",
    "PipelineError",
    "SinkError",
    "TransformError",
    "TransformResult",
    "WorkerSummary",
    "load_config",
    "parse_avro",
    "parse_config",
    "parse_json",
    "print_summary",
    "run_worker",
]


def print_summary(console: Any, summary: WorkerSummary) -> None:
    from rich.table import Table

    from kafka_handoff.pipeline.stats import summary_rows

    table = Table(title=f"pipeline worker {summary.member} (group {summary.group})", title_justify="left",
                  show_header=False)  # fmt: skip
    table.add_column("what", style="bold")
    table.add_column("value")
    for name, value in summary_rows(summary):
        table.add_row(name, value)
    console.print(table)


def run_worker(
    config: PipelineConfig,
    *,
    console: Any = None,
    until_idle_s: float | None = None,
    max_records: int | None = None,
    member: str | None = None,
    spark: Any = None,
    summary_console: Any = None,
    summary_json: str | Path | None = None,
    metrics_port: int | None = None,
) -> WorkerSummary:
    """Run one worker until it stops; print the summary to ``summary_console`` (if given).

    A failed batch (transform error, sink error, malformed records under ``fail``) is printed with its
    partitions and offsets and gives a summary with ``status == "failed"``; a :class:`ConfigError` (bad
    config, transform not importable) propagates.  ``metrics_port``: serve the consumer's and the worker's
    metrics for Prometheus at ``http://127.0.0.1:PORT/metrics`` while the worker runs.
    """
    from kafka_handoff.pipeline.worker import Worker

    collector: Any = None
    server: Any = None
    if metrics_port is not None:
        from kafka_handoff.metrics.prometheus import KafkaCollector, start_http_server

        collector = KafkaCollector()
        server = start_http_server(metrics_port, collector)

    worker = Worker(
        config,
        console=console,
        max_records=max_records,
        until_idle_s=until_idle_s,
        member=member,
        spark=spark,
        metrics=collector,
    )
    try:
        summary = worker.run()
    except ConfigError:
        raise
    except (KafkaError, KeyboardInterrupt) as exc:
        summary = getattr(exc, "summary", None) or worker.stats.summary(
            worker.member, config.group_id, "failed", str(exc)
        )
        if summary_console is not None:
            summary_console.print(f"[red]pipeline failed: {exc}[/red]", highlight=False)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    if summary_console is not None:
        print_summary(summary_console, summary)
    if summary_json is not None:
        Path(summary_json).write_text(json.dumps(json.loads(summary.to_json()), indent=2) + "\n")
    return summary
