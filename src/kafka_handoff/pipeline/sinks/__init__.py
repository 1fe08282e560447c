"""Sinks with per-partition marks committed atomically with the data (see :mod:`.base`)."""

from __future__ import annotations

from typing import Any

from kafka_handoff.errors import ConfigError
from kafka_handoff.pipeline.config import PipelineConfig, SinkConfig
from kafka_handoff.pipeline.sinks.base import CommitInfo, MarkUpdate, Sink, mark_key
from kafka_handoff.pipeline.sinks.delta import DeltaSink
from kafka_handoff.pipeline.sinks.kafka import KafkaSink
from kafka_handoff.pipeline.sinks.parquet import ParquetSink

__all__ = [
    "CommitInfo",
    "DeltaSink",
    "KafkaSink",
    "MarkUpdate",
    "ParquetSink",
    "Sink",
    "make_sink",
    "mark_key",
]


def make_sink(config: SinkConfig, path: str | None = None, *, pipeline: PipelineConfig | None = None) -> Sink:
    """The sink ``config`` describes (``path`` overrides its path: the dead-letter table).  A Kafka sink
    needs the ``pipeline`` config (the group and the [kafka] connection settings)."""
    target = path or config.path
    if config.format == "kafka":
        if pipeline is None:
            raise ConfigError("sink.format = 'kafka' needs the pipeline's [kafka] settings")
        from kafka_handoff.security import connection_settings

        client: dict[str, Any] = {
            "bootstrap.servers": pipeline.bootstrap_servers,
            **connection_settings(pipeline.consumer),
        }
        return KafkaSink(target, config.app_id, group_id=pipeline.group_id, client_config=client,
                         producer_config=config.producer)  # fmt: skip
    if config.format == "delta":
        return DeltaSink(
            target,
            config.app_id,
            partition_by=config.partition_by if path is None else (),
            storage_options=config.storage_options,
        )
    if config.format == "parquet":
        return ParquetSink(target, config.app_id, files_per_batch=config.files_per_batch)
    raise ConfigError(f"sink.format: {config.format!r} is not allowed (allowed: delta, parquet, kafka)")
