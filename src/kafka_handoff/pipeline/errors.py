"""Pipeline errors.  Every error about a batch names its partitions and offsets."""

from __future__ import annotations

from collections.abc import Mapping

from kafka_handoff.errors import KafkaError
from kafka_handoff.types import TopicPartition

__all__ = [
    "BatchError",
    "MalformedRecordError",
    "MarkConflictError",
    "PipelineError",
    "SinkError",
    "TransformError",
]


class PipelineError(KafkaError):
    """The pipeline cannot go on (the message says why)."""


class BatchError(PipelineError):
    """A batch failed; nothing was committed for it (sink or Kafka).  ``ranges``: partition ->
    (first offset, last offset) of the batch's records."""

    def __init__(self, message: str, ranges: Mapping[TopicPartition, tuple[int, int]] | None = None) -> None:
        super().__init__(message)
        self.ranges = dict(ranges or {})


class TransformError(BatchError):
    """The user's transform raised (or returned something that is not a DataFrame)."""


class MalformedRecordError(BatchError):
    """``errors.malformed = "fail"`` and the batch holds malformed records."""


class SinkError(BatchError):
    """The sink write failed for a reason other than a mark conflict."""


class MarkConflictError(PipelineError):
    """A conditional sink commit found marks that moved: another member wrote these partitions since this
    one read their marks (it no longer owns them, or a zombie wrote first).  The batch is discarded and the
    partitions resume from the sink's marks -- not an error of the pipeline."""

    def __init__(self, conflicts: Mapping[TopicPartition, tuple[int | None, int | None]]) -> None:
        described = ", ".join(
            f"{tp.topic}-{tp.partition} (expected {exp}, found {got})" for tp, (exp, got) in conflicts.items()
        )
        super().__init__(f"sink marks moved since they were read: {described}")
        self.conflicts = dict(conflicts)
