"""ACLs (Java's ``createAcls``, ``describeAcls``, ``deleteAcls``) and SCRAM credentials
(``describeUserScramCredentials``, ``alterUserScramCredentials``), with Java's value types."""

from __future__ import annotations

import enum
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.admin.calls import AdminCall, NoRetry, Steps, drives_steps, run_one
from kafka_handoff.admin.plumbing import AdminPlumbing
from kafka_handoff.errors import error_for_code
from kafka_handoff.protocol.requests import ANY_NODE
from kafka_handoff.protocol.versions import ApiKey

__all__ = [
    "AccessControlEntry",
    "AclAdminMixin",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
    "ScramCredentialInfo",
    "ScramMechanism",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "UserScramCredentialsDescription",
]


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """Java's ``ResourcePattern``: ``TOPIC 'orders'`` (LITERAL), ``TOPIC 'orders-'`` (PREFIXED), the cluster
    (``CLUSTER 'kafka-cluster'``); ``'*'`` is every resource of the type."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return f"{self.resource_type.name} {self.name!r} ({self.pattern_type.name})"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Java's ``AccessControlEntry``: ``User:alice`` from host ``*`` may (ALLOW) or may not (DENY) do an
    operation."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    """Java's ``AclBinding``: an entry on a resource pattern."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        e = self.entry
        return (
            f"{e.permission_type.name} {e.principal} {e.operation.name} on {self.pattern} from host {e.host}"
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Java's ``AclBindingFilter``: ``None``/``ANY`` matches everything; ``pattern_type=MATCH`` matches the
    literal, wildcard and prefixed patterns that apply to ``name``."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def body(self) -> dict[str, Any]:
        return {
            "resource_type_filter": int(self.resource_type),
            "resource_name_filter": self.name,
            "pattern_type_filter": int(self.pattern_type),
            "principal_filter": self.principal,
            "host_filter": self.host,
            "operation": int(self.operation),
            "permission_type": int(self.permission_type),
        }


class ScramMechanism(enum.IntEnum):
    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        return self.name.replace("_", "-")


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    mechanism: ScramMechanism
    iterations: int


@dataclass(frozen=True, slots=True)
class UserScramCredentialsDescription:
    name: str
    credential_infos: tuple[ScramCredentialInfo, ...]


@dataclass(frozen=True, slots=True)
class UserScramCredentialUpsertion:
    """Set ``user``'s password for a mechanism (the salted password is computed here; the password never
    leaves the client)."""

    user: str
    info: ScramCredentialInfo
    password: str
    salt: bytes | None = None

    def __repr__(self) -> str:  # never the password
        return f"UserScramCredentialUpsertion(user={self.user!r}, info={self.info!r})"

    def body(self) -> dict[str, Any]:
        salt = self.salt if self.salt is not None else os.urandom(32)
        digest = "sha256" if self.info.mechanism == ScramMechanism.SCRAM_SHA_256 else "sha512"
        salted = hashlib.pbkdf2_hmac(digest, self.password.encode("utf-8"), salt, self.info.iterations)
        return {
            "name": self.user,
            "mechanism": int(self.info.mechanism),
            "iterations": self.info.iterations,
            "salt": salt,
            "salted_password": salted,
        }


@dataclass(frozen=True, slots=True)
class UserScramCredentialDeletion:
    user: str
    mechanism: ScramMechanism


def _binding(
    resource_type: int, name: str, pattern_type: int, principal: str, host: str, op: int, perm: int
) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType(resource_type), name, PatternType(pattern_type)),
        AccessControlEntry(principal, host, AclOperation(op), AclPermissionType(perm)),
    )


class AclAdminMixin(AdminPlumbing):
    """ACLs and SCRAM credentials: mixed into :class:`~kafka_handoff.admin.AdminClient`."""

    @drives_steps
    def create_acls(self, acls: Iterable[AclBinding], timeout: float | None = None) -> Steps[None]:
        """Add ACL bindings (CreateAcls); each binding's error names it, the first is raised with the
        others attached as notes."""
        bindings = list(acls)
        deadline = self._deadline(timeout)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "creations": [
                    {
                        "resource_type": int(b.pattern.resource_type),
                        "resource_name": b.pattern.name,
                        "resource_pattern_type": int(b.pattern.pattern_type),
                        "principal": b.entry.principal,
                        "host": b.entry.host,
                        "operation": int(b.entry.operation),
                        "permission_type": int(b.entry.permission_type),
                    }
                    for b in bindings
                ]
            }

        def handle(response: Any, version: int, node: int) -> list[BaseException]:
            errors: list[BaseException] = []
            for b, r in zip(bindings, response.results, strict=False):
                code = int(r.error_code)
                if code != ErrorCode.none:
                    errors.append(
                        error_for_code(code, f"cannot create ACL {b}: {r.error_message or ''}".strip())
                    )
            return errors

        if not bindings:
            return
        errors: list[BaseException] = yield from run_one(
            AdminCall("CreateAcls", ApiKey.CREATE_ACLS, ANY_NODE, build, handle, deadline, min_version=1)
        )
        self._raise_first(errors)

    @drives_steps
    def describe_acls(
        self, acl_filter: AclBindingFilter | None = None, timeout: float | None = None
    ) -> Steps[list[AclBinding]]:
        """The ACL bindings matching the filter (DescribeAcls; default: every binding)."""
        flt = acl_filter or AclBindingFilter()
        deadline = self._deadline(timeout)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return flt.body()

        def handle(response: Any, version: int, node: int) -> list[AclBinding]:
            code = int(response.error_code)
            if code != ErrorCode.none:
                error = error_for_code(code, f"cannot describe ACLs: {response.error_message or ''}".strip())
                raise error if error.retriable else NoRetry(error)
            return [
                _binding(
                    int(r.resource_type),
                    str(r.resource_name),
                    int(r.pattern_type),
                    str(a.principal),
                    str(a.host),
                    int(a.operation),
                    int(a.permission_type),
                )
                for r in response.resources
                for a in r.acls
            ]

        result: list[AclBinding] = yield from run_one(
            AdminCall("DescribeAcls", ApiKey.DESCRIBE_ACLS, ANY_NODE, build, handle, deadline, min_version=1)
        )
        return sorted(result, key=str)

    @drives_steps
    def delete_acls(
        self, filters: Iterable[AclBindingFilter], timeout: float | None = None
    ) -> Steps[list[AclBinding]]:
        """Delete every ACL binding matching any of the filters (DeleteAcls); the deleted bindings."""
        flts = list(filters)
        deadline = self._deadline(timeout)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"filters": [f.body() for f in flts]}

        def handle(response: Any, version: int, node: int) -> tuple[list[AclBinding], list[BaseException]]:
            deleted: list[AclBinding] = []
            errors: list[BaseException] = []
            for f, r in zip(flts, response.filter_results, strict=False):
                code = int(r.error_code)
                if code != ErrorCode.none:
                    errors.append(
                        error_for_code(code, f"cannot delete ACLs matching {f}: {r.error_message or ''}")
                    )
                    continue
                for m in r.matching_acls:
                    b = _binding(
                        int(m.resource_type),
                        str(m.resource_name),
                        int(m.pattern_type),
                        str(m.principal),
                        str(m.host),
                        int(m.operation),
                        int(m.permission_type),
                    )
                    mcode = int(m.error_code)
                    if mcode != ErrorCode.none:
                        errors.append(
                            error_for_code(mcode, f"cannot delete ACL {b}: {m.error_message or ''}")
                        )
                    else:
                        deleted.append(b)
            return deleted, errors

        if not flts:
            return []
        deleted, errors = yield from run_one(
            AdminCall("DeleteAcls", ApiKey.DELETE_ACLS, ANY_NODE, build, handle, deadline, min_version=1)
        )
        self._raise_first(errors)
        return sorted(deleted, key=str)

    @drives_steps
    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, timeout: float | None = None
    ) -> Steps[dict[str, UserScramCredentialsDescription]]:
        """The SCRAM mechanisms and iterations each user has credentials for (every user by default); a user
        without any raises ``RESOURCE_NOT_FOUND`` naming them."""
        names = None if users is None else list(users)
        deadline = self._deadline(timeout)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"users": None if names is None else [{"name": n} for n in names]}

        def handle(response: Any, version: int, node: int) -> Any:
            code = int(response.error_code)
            if code != ErrorCode.none:
                error = error_for_code(
                    code, f"cannot describe SCRAM credentials: {response.error_message or ''}"
                )
                raise error if error.retriable else NoRetry(error)
            out: dict[str, Any] = {}
            for r in response.results:
                rcode = int(r.error_code)
                if rcode != ErrorCode.none:
                    out[str(r.user)] = error_for_code(
                        rcode, f"user {r.user!r}: {r.error_message or 'no SCRAM credentials'}"
                    )
                    continue
                out[str(r.user)] = UserScramCredentialsDescription(
                    str(r.user),
                    tuple(
                        ScramCredentialInfo(ScramMechanism(int(c.mechanism)), int(c.iterations))
                        for c in r.credential_infos
                    ),
                )
            return out

        outcome: dict[str, Any] = yield from run_one(
            AdminCall(
                "DescribeUserScramCredentials",
                ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                ANY_NODE,
                build,
                handle,
                deadline,
            )
        )
        self._raise_first([v for v in outcome.values() if isinstance(v, BaseException)])
        return dict(sorted(outcome.items()))

    @drives_steps
    def alter_user_scram_credentials(
        self,
        alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion],
        timeout: float | None = None,
    ) -> Steps[None]:
        """Set or delete users' SCRAM credentials (AlterUserScramCredentials); each user's error names
        them."""
        items = list(alterations)
        deadline = self._deadline(timeout)
        upsertions = [a.body() for a in items if isinstance(a, UserScramCredentialUpsertion)]
        deletions = [
            {"name": a.user, "mechanism": int(a.mechanism)}
            for a in items
            if isinstance(a, UserScramCredentialDeletion)
        ]

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"deletions": deletions, "upsertions": upsertions}

        def handle(response: Any, version: int, node: int) -> list[BaseException]:
            return [
                error_for_code(
                    int(r.error_code),
                    f"cannot alter the SCRAM credentials of user {r.user!r}: {r.error_message or ''}",
                )
                for r in response.results
                if int(r.error_code) != ErrorCode.none
            ]

        if not items:
            return
        errors: list[BaseException] = yield from run_one(
            AdminCall(
                "AlterUserScramCredentials",
                ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                ANY_NODE,
                build,
                handle,
                deadline,
            )
        )
        self._raise_first(errors)
