"""kafka-python's ACL value types (``kafka.admin.acl_resource``): ``ResourceType``, ``ACLOperation``,
``ACLPermissionType``, ``ACLResourcePatternType``, ``ResourcePatternFilter``, ``ResourcePattern``,
``ACLFilter`` and ``ACL``, with kafka-python's validation (``IllegalArgumentError``) and their
conversions to and from the native :mod:`kafka_handoff.admin` ACL types."""

from __future__ import annotations

import enum
from typing import Any, TypeVar

from kafka_handoff import admin as native
from kafka_handoff.compat.kafka_python.errors import IllegalArgumentError

__all__ = [
    "ACL",
    "ACLFilter",
    "ACLOperation",
    "ACLPermissionType",
    "ACLResourcePatternType",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
]

_E = TypeVar("_E", bound=enum.IntEnum)


# kafka-python's enums have the protocol's values, as the native ones: the same classes under its names.
ResourceType = native.ResourceType
ACLOperation = native.AclOperation
ACLPermissionType = native.AclPermissionType
ACLResourcePatternType = native.PatternType


class ResourcePatternFilter:
    """A resource pattern to match ACLs against (a name of ``None`` matches every name)."""

    def __init__(
        self, resource_type: ResourceType, resource_name: str | None, pattern_type: ACLResourcePatternType
    ) -> None:
        self.resource_type = resource_type
        self.resource_name = resource_name
        self.pattern_type = pattern_type
        self._validate_filter()

    def _validate_filter(self) -> None:
        if not isinstance(self.resource_type, ResourceType):
            raise IllegalArgumentError("resource_type must be a ResourceType object")
        if not isinstance(self.pattern_type, ACLResourcePatternType):
            raise IllegalArgumentError("pattern_type must be an ACLResourcePatternType object")

    def __repr__(self) -> str:
        return (
            f"<ResourcePattern type={self.resource_type.name}, name={self.resource_name}, "
            f"pattern={self.pattern_type.name}>"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ResourcePatternFilter):
            return NotImplemented
        return (self.resource_type, self.resource_name, self.pattern_type) == (
            other.resource_type,
            other.resource_name,
            other.pattern_type,
        )

    def __hash__(self) -> int:
        return hash((self.resource_type, self.resource_name, self.pattern_type))


class ResourcePattern(ResourcePatternFilter):
    """The resource a concrete ACL applies to."""

    def __init__(
        self,
        resource_type: ResourceType,
        resource_name: str,
        pattern_type: ACLResourcePatternType = ACLResourcePatternType.LITERAL,
    ) -> None:
        super().__init__(resource_type, resource_name, pattern_type)
        if self.resource_type == ResourceType.ANY:
            raise IllegalArgumentError("resource_type cannot be ANY")
        if self.pattern_type in (ACLResourcePatternType.ANY, ACLResourcePatternType.MATCH):
            raise IllegalArgumentError(
                f"pattern_type cannot be {self.pattern_type.name} on a concrete ResourcePattern"
            )


class ACLFilter:
    """A filter for describing and deleting ACLs (``None`` principal/host and ``ANY`` values match
    everything)."""

    def __init__(
        self,
        principal: str | None,
        host: str | None,
        operation: ACLOperation,
        permission_type: ACLPermissionType,
        resource_pattern: ResourcePatternFilter,
    ) -> None:
        self.principal = principal
        self.host = host
        self.operation = operation
        self.permission_type = permission_type
        self.resource_pattern = resource_pattern
        if not isinstance(self.operation, ACLOperation):
            raise IllegalArgumentError("operation must be an ACLOperation object")
        if not isinstance(self.permission_type, ACLPermissionType):
            raise IllegalArgumentError("permission_type must be an ACLPermissionType object")
        if not isinstance(self.resource_pattern, ResourcePatternFilter):
            raise IllegalArgumentError("resource_pattern must be a ResourcePatternFilter object")

    def __repr__(self) -> str:
        return (
            f"<ACL principal={self.principal}, resource={self.resource_pattern}, "
            f"operation={self.operation.name}, type={self.permission_type.name}, host={self.host}>"
        )

    def _key(self) -> tuple[Any, ...]:
        return (self.principal, self.host, self.operation, self.permission_type, self.resource_pattern)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ACLFilter):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def to_native_filter(self) -> native.AclBindingFilter:
        p = self.resource_pattern
        return native.AclBindingFilter(
            native.ResourceType(int(p.resource_type)),
            p.resource_name,
            native.PatternType(int(p.pattern_type)),
            self.principal,
            self.host,
            native.AclOperation(int(self.operation)),
            native.AclPermissionType(int(self.permission_type)),
        )


class ACL(ACLFilter):
    """A concrete ACL: who (principal, host) may or may not (permission) do what (operation) on which
    resource (a :class:`ResourcePattern`)."""

    def __init__(
        self,
        principal: str,
        host: str,
        operation: ACLOperation,
        permission_type: ACLPermissionType,
        resource_pattern: ResourcePattern,
    ) -> None:
        super().__init__(principal, host, operation, permission_type, resource_pattern)
        if self.operation == ACLOperation.ANY:
            raise IllegalArgumentError("operation cannot be ANY")
        if self.permission_type == ACLPermissionType.ANY:
            raise IllegalArgumentError("permission_type cannot be ANY")
        if not isinstance(self.resource_pattern, ResourcePattern):
            raise IllegalArgumentError("resource_pattern must be a ResourcePattern object")

    def to_native(self) -> native.AclBinding:
        p = self.resource_pattern
        return native.AclBinding(
            native.ResourcePattern(
                native.ResourceType(int(p.resource_type)),
                p.resource_name or "",
                native.PatternType(int(p.pattern_type)),
            ),
            native.AccessControlEntry(
                self.principal or "",
                self.host or "",
                native.AclOperation(int(self.operation)),
                native.AclPermissionType(int(self.permission_type)),
            ),
        )

    @classmethod
    def from_native(cls, b: native.AclBinding) -> ACL:
        """A binding the broker returned (values kafka-python has no name for become ``UNKNOWN``)."""
        out = cls.__new__(cls)
        out.principal = b.entry.principal
        out.host = b.entry.host
        out.operation = _member(ACLOperation, int(b.entry.operation))
        out.permission_type = _member(ACLPermissionType, int(b.entry.permission_type))
        pattern = ResourcePattern.__new__(ResourcePattern)
        pattern.resource_type = _member(ResourceType, int(b.pattern.resource_type))
        pattern.resource_name = b.pattern.name
        pattern.pattern_type = _member(ACLResourcePatternType, int(b.pattern.pattern_type))
        out.resource_pattern = pattern
        return out


def _member(kind: type[_E], value: int) -> _E:
    try:
        return kind(value)
    except ValueError:
        return kind(0)
