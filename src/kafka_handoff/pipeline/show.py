"""Reading a pipeline's output table back (``handoff pipeline show``), without Spark.

The table is read with pyarrow (Delta through ``deltalake``; Parquet through the manifests), then
``[show]`` is applied: ``group_by`` + ``sum`` merge the partial aggregates that micro-batches append,
``sort_by`` orders, ``limit`` cuts.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kafka_handoff.pipeline.config import PipelineConfig, ShowConfig
from kafka_handoff.pipeline.sinks import make_sink

__all__ = ["aggregate", "read_output", "render", "sink_marks"]


def read_output(config: PipelineConfig, dead_letter: bool = False) -> Any:
    """The committed output (or dead-letter) table as a ``pyarrow.Table``."""
    path = config.errors.dead_letter_path if dead_letter else None
    if dead_letter and not path:
        return pa.table({})
    return make_sink(config.sink, path, pipeline=config).read_table()


def aggregate(table: Any, show: ShowConfig) -> Any:
    """Apply ``group_by``/``sum`` and ``sort_by`` (no ``limit``) to ``table``."""
    if table.num_columns == 0:
        return table
    for name in (*show.group_by, *show.sum, *show.sort_by):
        if name not in table.column_names and not (name in show.sum and show.group_by):
            raise KeyError(f"[show] names column {name!r}, which the output does not have "
                           f"(columns: {', '.join(table.column_names)})")  # fmt: skip
    if show.group_by:
        aggs: list[tuple[Any, str]] = [(name, "sum") for name in show.sum] or [([], "count_all")]
        grouped = table.group_by(list(show.group_by), use_threads=False).aggregate(aggs)
        renames = {f"{name}_sum": name for name in show.sum}
        renames["count_all"] = "rows"
        table = grouped.rename_columns([renames.get(c, c) for c in grouped.column_names])
        table = table.select([*show.group_by, *[c for c in table.column_names if c not in show.group_by]])
    if show.sort_by:
        table = table.sort_by([(name, "ascending") for name in show.sort_by])
    return table


def sink_marks(config: PipelineConfig, partitions: int = 0) -> dict[str, int | None]:
    """The sink's marks for partitions ``0..partitions-1`` of each topic (for display)."""
    from kafka_handoff.types import TopicPartition

    sink = make_sink(config.sink, pipeline=config)
    tps = [TopicPartition(t, p) for t in config.topics for p in range(partitions)]
    return {f"{tp.topic}-{tp.partition}": m for tp, m in sink.read_marks(tps).items()}


def render(table: Any, limit: int, title: str) -> Any:
    """A rich Table with the first ``limit`` rows."""
    from rich.table import Table

    out = Table(title=title, title_justify="left")
    for name in table.column_names:
        numeric = pa.types.is_integer(table.schema.field(name).type) or pa.types.is_floating(
            table.schema.field(name).type
        )
        out.add_column(name, justify="right" if numeric else "left")
    for row in table.slice(0, limit).to_pylist():
        out.add_row(*[_cell(row[name]) for name in table.column_names])
    return out


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, bytes):
        text = value[:60].decode("utf-8", "replace")
        return text + ("..." if len(value) > 60 else "")
    return str(value)
