"""What the :class:`~kafka_handoff.admin.AdminClient`'s per-concern mixins (``topics.py``, ``configs.py``,
``offsets.py``, ``groups.py``, ``share.py``) use of its call plumbing in ``admin.py``: declared once here
for the type checker (:class:`AdminPlumbing`, the mixins' base); their shared check of entity names; the
describe call that ConsumerGroupDescribe and ShareGroupDescribe share; the merge of per-leader answers."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from kafka_handoff.admin.calls import AdminCall, GroupCoordinator, NoRetry, raise_first
from kafka_handoff.errors import Needs, error_for_code
from kafka_handoff.protocol.requests import ANY_NODE

if TYPE_CHECKING:
    from kafka_handoff.admin.calls import AdminCallManager, Steps, Target
    from kafka_handoff.admin.results import GroupListing
    from kafka_handoff.clock import MonotonicClock
    from kafka_handoff.config import AdminConfig
    from kafka_handoff.types import ClusterMetadata, TopicPartition

__all__ = [
    "AdminPlumbing",
    "group_describe_call",
    "merge_group_listings",
    "merge_partition_outcomes",
    "unique_names",
]

T = TypeVar("T")


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


def group_describe_call(
    name: str,
    api_key: int,
    group_id: str,
    deadline: int,
    *,
    what: str,
    describe: Callable[[Any, int], T],
    not_found: Callable[[], T],
) -> AdminCall:
    """A ConsumerGroupDescribe / ShareGroupDescribe call for one group, sent to its coordinator: the
    group's entry goes to ``describe(group, node)``; ``GROUP_ID_NOT_FOUND`` to ``not_found()``; another
    error is retried when retriable, else raised (``cannot describe <what> '<id>': <message>``)."""

    def build(version: int, timeout_ms: int) -> dict[str, Any]:
        return {"group_ids": [group_id], "include_authorized_operations": False}

    def handle(response: Any, version: int, node: int) -> T:
        (g,) = [x for x in response.groups if x.group_id == group_id] or list(response.groups)
        code = int(g.error_code)
        if code == ErrorCode.group_id_not_found:
            return not_found()
        if code != ErrorCode.none:
            error = error_for_code(
                code,
                f"cannot describe {what} {group_id!r}: {g.error_message or ''}".strip(),
                needs=Needs(name.split("(")[0], group=("DESCRIBE", group_id)),
            )
            raise error if error.retriable else NoRetry(error)
        return describe(g, node)

    return AdminCall(
        f"{name}(group {group_id!r})", api_key, GroupCoordinator(group_id), build, handle, deadline
    )


def merge_group_listings(outcomes: Iterable[Any]) -> list[GroupListing]:
    """The ListGroups answers of every broker as one list, each group once, by id; a failed broker's error is
    raised (the first, the others attached)."""
    listings: dict[str, GroupListing] = {}
    errors: list[BaseException] = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            errors.append(outcome)
            continue
        for g in outcome:
            listings[g.group_id] = g
    raise_first(errors)
    return [listings[g] for g in sorted(listings)]


def merge_partition_outcomes(
    outcomes: Iterable[BaseException | dict[TopicPartition, Any]], errors: list[BaseException]
) -> dict[TopicPartition, Any]:
    """The per-leader answers (each a failed call's error, or each partition's value or error) as one map
    sorted by partition; the errors join ``errors`` (the caller's earlier ones first) and the first of them is
    raised, the others attached."""
    result: dict[TopicPartition, Any] = {}
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            errors.append(outcome)
            continue
        for tp, value in outcome.items():
            if isinstance(value, BaseException):
                errors.append(value)
            else:
                result[tp] = value
    raise_first(errors)
    return dict(sorted(result.items()))
