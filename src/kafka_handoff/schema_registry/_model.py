"""The Schema Registry's objects: schemas, references, registrations, server config, and its error.

Field and method names follow confluent-kafka's ``confluent_kafka.schema_registry`` so that code written
for it reads the same here; the JSON field names are the Confluent REST API's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kafka_handoff.errors import KafkaError

__all__ = [
    "ConfigCompatibilityLevel",
    "RegisteredSchema",
    "Schema",
    "SchemaReference",
    "SchemaRegistryError",
    "SchemaVersion",
    "ServerConfig",
]


class SchemaRegistryError(KafkaError):
    """An error answered by the Schema Registry, or the failure to reach it.

    ``http_status_code`` is the HTTP status (-1 when no answer came: connection refused, timeout, TLS);
    ``error_code`` the registry's own code (e.g. 40401 subject not found, 40403 schema not found, 409
    incompatible schema, 42201 invalid schema; -1 when unknown); ``error_message`` its message."""

    UNKNOWN = -1

    def __init__(self, http_status_code: int, error_code: int, error_message: str) -> None:
        super().__init__(error_message)
        self.http_status_code = http_status_code
        self.error_code = error_code
        self.error_message = error_message

    def __str__(self) -> str:
        return f"{self.error_message} (HTTP status code {self.http_status_code}, SR code {self.error_code})"

    def __repr__(self) -> str:
        return (
            f"SchemaRegistryError(http_status_code={self.http_status_code}, error_code={self.error_code}, "
            f"error_message={self.error_message!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (SchemaRegistryError, (self.http_status_code, self.error_code, self.error_message))


class ConfigCompatibilityLevel(StrEnum):
    """The compatibility levels a subject or the registry can be set to."""

    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"
    NONE = "NONE"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SchemaReference:
    """A reference from one schema to another registered one: ``name`` is how the referring schema names
    it (an Avro full name, a ``.proto`` import path, a JSON Schema ``$ref`` URL), ``subject``/``version``
    where it is registered."""

    name: str
    subject: str
    version: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SchemaReference:
        return cls(str(data.get("name", "")), str(data.get("subject", "")), int(data.get("version", 0)))


@dataclass(frozen=True)
class Schema:
    """A schema as registered: its text, its type (``AVRO``, ``PROTOBUF`` or ``JSON``) and its references.

    Hashable (it keys the client's caches); ``metadata`` and ``rule_set`` are carried as the registry's JSON
    objects, compared but not hashed."""

    schema_str: str
    schema_type: str = "AVRO"
    references: Sequence[SchemaReference] = ()
    metadata: Mapping[str, Any] | None = field(default=None, hash=False)
    rule_set: Mapping[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.references, tuple):
            object.__setattr__(self, "references", tuple(self.references or ()))
        if self.schema_type is None:
            object.__setattr__(self, "schema_type", "AVRO")

    def to_dict(self) -> dict[str, Any]:
        """The registry's request body for this schema (``schemaType`` is left out for Avro, as the API's
        default, so registries that predate the field accept it)."""
        body: dict[str, Any] = {"schema": self.schema_str}
        if self.schema_type and self.schema_type.upper() != "AVRO":
            body["schemaType"] = self.schema_type.upper()
        if self.references:
            body["references"] = [ref.to_dict() for ref in self.references]
        if self.metadata is not None:
            body["metadata"] = dict(self.metadata)
        if self.rule_set is not None:
            body["ruleSet"] = dict(self.rule_set)
        return body

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schema:
        return cls(
            schema_str=str(data.get("schema", "")),
            schema_type=str(data.get("schemaType") or "AVRO").upper(),
            references=tuple(SchemaReference.from_dict(r) for r in data.get("references") or ()),
            metadata=data.get("metadata"),
            rule_set=data.get("ruleSet"),
        )


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema registered under a subject: its global id, the subject and the version there."""

    schema_id: int
    schema: Schema
    subject: str | None = None
    version: int | None = None
    guid: str | None = None

    def to_dict(self) -> dict[str, Any]:
        body = self.schema.to_dict()
        body["id"] = self.schema_id
        if self.subject is not None:
            body["subject"] = self.subject
        if self.version is not None:
            body["version"] = self.version
        if self.guid is not None:
            body["guid"] = self.guid
        return body

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], schema: Schema | None = None) -> RegisteredSchema:
        version = data.get("version")
        return cls(
            schema_id=int(data.get("id", -1)),
            schema=schema if schema is not None else Schema.from_dict(data),
            subject=data.get("subject"),
            version=int(version) if version is not None else None,
            guid=data.get("guid"),
        )


@dataclass(frozen=True)
class SchemaVersion:
    """A (subject, version) pair, as ``get_schema_versions`` lists them."""

    subject: str
    version: int

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SchemaVersion:
        return cls(str(data.get("subject", "")), int(data.get("version", 0)))


@dataclass(frozen=True)
class ServerConfig:
    """A subject's (or the registry's) config.  ``compatibility`` is what ``PUT /config`` takes;
    ``compatibility_level`` what ``GET /config`` answers (the same value under the API's two names)."""

    compatibility: str | None = None
    compatibility_level: str | None = None
    compatibility_group: str | None = None
    normalize: bool | None = None
    default_metadata: Mapping[str, Any] | None = field(default=None, hash=False)
    override_metadata: Mapping[str, Any] | None = field(default=None, hash=False)
    default_rule_set: Mapping[str, Any] | None = field(default=None, hash=False)
    override_rule_set: Mapping[str, Any] | None = field(default=None, hash=False)

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        level = self.compatibility or self.compatibility_level
        if level is not None:
            body["compatibility"] = str(level).upper()
        for key, value in (
            ("compatibilityGroup", self.compatibility_group),
            ("normalize", self.normalize),
            ("defaultMetadata", self.default_metadata),
            ("overrideMetadata", self.override_metadata),
            ("defaultRuleSet", self.default_rule_set),
            ("overrideRuleSet", self.override_rule_set),
        ):
            if value is not None:
                body[key] = value
        return body

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ServerConfig:
        data = data or {}
        level = data.get("compatibilityLevel") or data.get("compatibility")
        return cls(
            compatibility=level,
            compatibility_level=level,
            compatibility_group=data.get("compatibilityGroup"),
            normalize=data.get("normalize"),
            default_metadata=data.get("defaultMetadata"),
            override_metadata=data.get("overrideMetadata"),
            default_rule_set=data.get("defaultRuleSet"),
            override_rule_set=data.get("overrideRuleSet"),
        )
