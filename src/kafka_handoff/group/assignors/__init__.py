"""Client-side partition assignors of the classic group protocol, and how a consumer picks them.

``partition.assignment.strategy`` lists assignors by name (``range``, ``roundrobin``, ``sticky``,
``cooperative-sticky``), by Java class name (``org.apache.kafka.clients.consumer.RangeAssignor``, ...), as a
``module:Class`` string, as a class, or as an instance; :func:`get_assignor` turns one entry into an
assignor, :func:`get_assignors` the whole setting.  :func:`select_protocol` picks the rebalance protocol:
the highest one that every configured assignor supports (Java's ``ConsumerCoordinator`` rule), so the
default ``[range, cooperative-sticky]`` gives EAGER until ``range`` is removed.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence

from kafka_handoff.errors import ConfigError
from kafka_handoff.group.assignors.base import (
    MemberAssignment,
    MemberSubscription,
    PartitionAssignor,
    RebalanceProtocol,
)
from kafka_handoff.group.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka_handoff.group.assignors.range import RangeAssignor
from kafka_handoff.group.assignors.roundrobin import RoundRobinAssignor
from kafka_handoff.group.assignors.sticky import StickyAssignor

__all__ = [
    "BUILTIN_ASSIGNORS",
    "CONFIG_KEY",
    "DEFAULT_ASSIGNMENT_STRATEGY",
    "CooperativeStickyAssignor",
    "MemberAssignment",
    "MemberSubscription",
    "PartitionAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "get_assignor",
    "get_assignors",
    "is_builtin",
    "is_builtin_cooperative",
    "select_protocol",
]

CONFIG_KEY = "partition.assignment.strategy"

#: Java's default: ``[RangeAssignor, CooperativeStickyAssignor]``
DEFAULT_ASSIGNMENT_STRATEGY: tuple[str, ...] = ("range", "cooperative-sticky")

_AssignorClass = (
    type[RangeAssignor] | type[RoundRobinAssignor] | type[StickyAssignor] | type[CooperativeStickyAssignor]
)

BUILTIN_ASSIGNORS: dict[str, _AssignorClass] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}

_JAVA_CLASS_NAMES: dict[str, str] = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}

_ALLOWED = (
    "one of "
    + ", ".join(repr(n) for n in BUILTIN_ASSIGNORS)
    + ", their Java class names (e.g. 'org.apache.kafka.clients.consumer.RangeAssignor'),"
    " a 'module:Class' string, an assignor class or an assignor instance"
)


def _bad(value: object, why: str) -> ConfigError:
    return ConfigError(f"Invalid value {value!r} for configuration {CONFIG_KEY}: {why}; allowed: {_ALLOWED}")


def _check(candidate: object, original: object) -> PartitionAssignor:
    if not isinstance(candidate, PartitionAssignor):
        raise _bad(
            original,
            "not a partition assignor (needs name, supported_protocols, "
            "subscription_user_data, assign, on_assignment)",
        )
    name = candidate.name
    if not isinstance(name, str) or not name:
        raise _bad(original, "the assignor's name must be a non-empty string")
    try:
        protocols = tuple(RebalanceProtocol(p) for p in candidate.supported_protocols)
    except (TypeError, ValueError):
        raise _bad(original, "supported_protocols must hold RebalanceProtocol values") from None
    if not protocols:
        raise _bad(original, f"assignor {name!r} supports no rebalance protocol")
    return candidate


def _instantiate(cls: type, original: object) -> PartitionAssignor:
    try:
        instance = cls()
    except Exception as exc:
        why = f"cannot create an instance of {cls.__qualname__} without arguments: {exc}"
        raise _bad(original, why) from exc
    return _check(instance, original)


def get_assignor(name_or_obj: object) -> PartitionAssignor:
    """One ``partition.assignment.strategy`` entry as an assignor instance (see the module docstring)."""
    if isinstance(name_or_obj, str):
        text = name_or_obj.strip()
        key = _JAVA_CLASS_NAMES.get(text, text)
        builtin = BUILTIN_ASSIGNORS.get(key)
        if builtin is not None:
            return builtin()
        if ":" not in text:
            raise _bad(name_or_obj, "unknown assignor")
        module_name, _, attr = text.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise _bad(name_or_obj, f"cannot import module {module_name!r}: {exc}") from exc
        target: object = module
        for part in attr.split("."):
            try:
                target = getattr(target, part)
            except AttributeError:
                raise _bad(name_or_obj, f"module {module_name!r} has no attribute {attr!r}") from None
        return _instantiate(target, name_or_obj) if isinstance(target, type) else _check(target, name_or_obj)
    if isinstance(name_or_obj, type):
        return _instantiate(name_or_obj, name_or_obj)
    return _check(name_or_obj, name_or_obj)


def get_assignors(strategy: str | Iterable[object] | None = None) -> list[PartitionAssignor]:
    """The whole ``partition.assignment.strategy`` setting (a list, or a comma-separated string) as assignors.

    ``None`` means the default, ``[range, cooperative-sticky]``.  An empty list, or two assignors with the
    same name, is a ``ConfigError`` (as in Java).
    """
    if strategy is None:
        entries: list[object] = list(DEFAULT_ASSIGNMENT_STRATEGY)
    elif isinstance(strategy, str):
        entries = [part for part in (p.strip() for p in strategy.split(",")) if part]
    else:
        entries = list(strategy)
    if not entries:
        raise ConfigError(
            f"Invalid value {strategy!r} for configuration {CONFIG_KEY}: "
            f"at least one assignor is required; allowed: {_ALLOWED}"
        )
    assignors = [get_assignor(entry) for entry in entries]
    seen: set[str] = set()
    for assignor in assignors:
        if assignor.name in seen:
            raise ConfigError(
                f"Invalid value {strategy!r} for configuration {CONFIG_KEY}: "
                f"the assignor name {assignor.name!r} is used in more than one assignor"
            )
        seen.add(assignor.name)
    return assignors


def select_protocol(assignors: Sequence[PartitionAssignor]) -> RebalanceProtocol:
    """The highest rebalance protocol that every assignor supports; ``ConfigError`` when there is none."""
    if not assignors:
        raise ConfigError(f"Invalid value [] for configuration {CONFIG_KEY}: at least one assignor is needed")
    common = set(RebalanceProtocol)
    for assignor in assignors:
        common &= {RebalanceProtocol(p) for p in assignor.supported_protocols}
    if not common:
        names = [a.name for a in assignors]
        raise ConfigError(
            f"Invalid value {names} for configuration {CONFIG_KEY}: the specified assignors have no commonly "
            "supported rebalance protocol (each assignor's supported_protocols: "
            + ", ".join(
                f"{a.name}={[RebalanceProtocol(p).name for p in a.supported_protocols]}" for a in assignors
            )
            + ")"
        )
    return max(common)


def is_builtin(assignor: PartitionAssignor) -> bool:
    """True for an instance of one of our own assignor classes (not a subclass): no user code runs in it."""
    return type(assignor) in BUILTIN_ASSIGNORS.values()


def is_builtin_cooperative(assignor: PartitionAssignor) -> bool:
    """True for our own ``cooperative-sticky``, whose output the leader need not validate (as in Java)."""
    return isinstance(assignor, CooperativeStickyAssignor)
