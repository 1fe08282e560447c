"""The sink contract: data and per-partition high-water marks, committed atomically and conditionally.

A *mark* is the offset of the next record of a partition that the sink has not seen (Kafka's committed
offset semantics): every record below it is in the sink, none at or above it.  Each commit carries, for
every input partition of its batch, a :class:`MarkUpdate` -- the mark the writer read (``expected``; None
when the sink has none yet) and the new one -- and succeeds only if every stored mark still equals its
``expected`` value at the moment of the commit.  Otherwise it raises
:class:`~kafka_handoff.pipeline.errors.MarkConflictError` and nothing of the batch becomes visible, so a
member that no longer owns a partition (or a zombie that missed its fencing) cannot add output for it.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_handoff.types import TopicPartition

__all__ = ["CommitInfo", "MarkUpdate", "Sink", "mark_key"]


def mark_key(app_id: str, tp: TopicPartition) -> str:
    """The name of ``tp``'s mark: ``<app_id>-<topic>-<partition>`` (a Delta app-transaction id)."""
    return f"{app_id}-{tp.topic}-{tp.partition}"


@dataclass(frozen=True, slots=True)
class MarkUpdate:
    expected: int | None
    """The mark the writer read (None: the sink has no mark for the partition)."""
    new: int
    """The mark to store: the offset after the batch's last record of the partition."""


@dataclass(frozen=True, slots=True)
class CommitInfo:
    version: int
    """Delta table version, or manifest sequence number."""
    rows: int
    files: int


class Sink(abc.ABC):
    """An output table whose commits carry per-partition marks (see the module docstring)."""

    kind: str = "sink"

    def __init__(self, path: str, app_id: str) -> None:
        self.path = path
        self.app_id = app_id

    @abc.abstractmethod
    def read_marks(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The stored mark of each partition (None: none yet), from the latest committed state."""

    @abc.abstractmethod
    def commit(self, data: Any, updates: Mapping[TopicPartition, MarkUpdate]) -> CommitInfo:
        """Append ``data`` (a ``pyarrow.Table``, a Spark DataFrame where the sink supports it, or None)
        and store the new marks, atomically; conditional on every ``expected`` mark (see the module doc)."""

    @abc.abstractmethod
    def read_table(self, columns: Sequence[str] | None = None) -> Any:
        """Everything committed so far (only ``columns`` if given), as a ``pyarrow.Table`` (empty, without
        columns, when nothing is)."""

    def exists(self) -> bool:
        """True once a first commit has been made."""
        return True

    def describe(self) -> str:
        return f"{self.kind} table at {self.path}"
