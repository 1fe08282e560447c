"""Names of kafka-python's partition assignor classes, for ``partition_assignment_strategy``.

kafka-handoff runs its own assignors; these classes only carry the ``name`` the compat consumer passes on
(``partition_assignment_strategy=[RoundRobinPartitionAssignor]`` selects the native ``roundrobin``)."""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "CooperativeStickyPartitionAssignor",
    "RangePartitionAssignor",
    "RoundRobinPartitionAssignor",
    "StickyPartitionAssignor",
]


class RangePartitionAssignor:
    name: ClassVar[str] = "range"


class RoundRobinPartitionAssignor:
    name: ClassVar[str] = "roundrobin"


class StickyPartitionAssignor:
    name: ClassVar[str] = "sticky"


class CooperativeStickyPartitionAssignor:
    name: ClassVar[str] = "cooperative-sticky"
