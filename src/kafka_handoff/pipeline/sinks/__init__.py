"""Sinks with per-partition marks committed atomically with the data (see :mod:`.base`)."""

from __future__ import annotations

from kafka_handoff.errors import ConfigError
from kafka_handoff.pipeline.config import SinkConfig
from kafka_handoff.pipeline.sinks.base import CommitInfo, MarkUpdate, Sink, mark_key
from kafka_handoff.pipeline.sinks.delta import DeltaSink
from kafka_handoff.pipeline.sinks.parquet import ParquetSink

__all__ = ["CommitInfo", "DeltaSink", "MarkUpdate", "ParquetSink", "Sink", "make_sink", "mark_key"]


def make_sink(config: SinkConfig, path: str | None = None) -> Sink:
    """The sink ``config`` describes (``path`` overrides its path: the dead-letter table)."""
    target = path or config.path
    if config.format == "delta":
        return DeltaSink(
            target,
            config.app_id,
            partition_by=config.partition_by if path is None else (),
            storage_options=config.storage_options,
        )
    if config.format == "parquet":
        return ParquetSink(target, config.app_id, files_per_batch=config.files_per_batch)
    raise ConfigError(f"sink.format: {config.format!r} is not allowed (allowed: delta, parquet)")
