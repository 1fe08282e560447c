"""What the :class:`~kafka_handoff.admin.AdminClient`'s per-concern mixins (``topics.py``, ``configs.py``,
``offsets.py``, ``groups.py``, ``share.py``) use of its call plumbing in ``admin.py``: declared once here
for the type checker (:class:`AdminPlumbing`, the mixins' base), and their shared check of entity names."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kafka_handoff.protocol.requests import ANY_NODE

if TYPE_CHECKING:
    from kafka_handoff.admin.calls import AdminCall, AdminCallManager, Steps, Target
    from kafka_handoff.config import AdminConfig
    from kafka_handoff.protocol.requests import MonotonicClock
    from kafka_handoff.types import ClusterMetadata

__all__ = ["AdminPlumbing", "unique_names"]


class AdminPlumbing:
    """Base of the admin mixins: the plumbing :class:`~kafka_handoff.admin.AdminClient` provides (nothing
    at run time; the client defines all of it)."""

    if TYPE_CHECKING:
        _clock: MonotonicClock
        _config: AdminConfig
        _calls: AdminCallManager

        def _deadline(self, timeout: float | None) -> int: ...
        def _cluster_steps(
            self, topics: Sequence[str] | None, deadline_ms: int
        ) -> Steps[ClusterMetadata]: ...
        def _cluster(self, topics: Sequence[str] | None, deadline_ms: int) -> ClusterMetadata: ...
        def _run(self, calls: Sequence[AdminCall], deadline_ms: int) -> list[Any]: ...
        def _run_one(self, call: AdminCall) -> Any: ...
        def _metadata_call(
            self,
            topics: Sequence[str] | None,
            deadline_ms: int,
            *,
            target: Target = ANY_NODE,
            check: Callable[[ClusterMetadata], None] | None = None,
            name: str = "Metadata",
            backoff_max_ms: int | None = None,
        ) -> AdminCall: ...
        @staticmethod
        def _raise_first(errors: Sequence[BaseException]) -> None: ...


def unique_names(names: Iterable[str], what: str) -> list[str]:
    """``names`` as a list (a single string is one name); each must be a non-empty string, given once."""
    if isinstance(names, str):
        names = [names]
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{what} names must be non-empty strings, got {name!r}")
        if name in out:
            raise ValueError(f"{what} {name!r} is given more than once")
        out.append(name)
    return out
