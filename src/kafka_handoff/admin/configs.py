"""Configuration administration: describe configs (topics, brokers, groups), alter them incrementally
(Java's ``incrementalAlterConfigs``) or wholesale (``alterConfigs``)."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.admin.calls import (
    AdminCall,
    Steps,
    drives_steps,
    run_calls,
)
from kafka_handoff.admin.plumbing import AdminPlumbing, unique_names
from kafka_handoff.admin.results import (
    ConfigEntry,
)
from kafka_handoff.errors import (
    Needs,
    error_for_code,
)
from kafka_handoff.protocol.requests import ANY_NODE
from kafka_handoff.protocol.versions import ApiKey

_CONFIG_SOURCES = {
    0: "UNKNOWN",
    1: "TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}
_TOPIC_RESOURCE = 2


class ConfigResourceType(enum.IntEnum):
    """Java's ``ConfigResource.Type`` (the wire ids)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """Java's ``ConfigResource``: a topic, a broker (its id as the name; ``""``: the cluster-wide default),
    a broker logger, a client-metrics subscription or a group."""

    type: ConfigResourceType
    name: str

    def __str__(self) -> str:
        if self.type == ConfigResourceType.BROKER and not self.name:
            return "the cluster-wide broker default"
        return f"{self.type.name.lower().replace('_', ' ')} {self.name!r}"


class AlterConfigOpType(enum.IntEnum):
    """Java's ``AlterConfigOp.OpType``."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """Java's ``AlterConfigOp``: set (or append to / subtract from a list) a config, or delete it (back to
    its default)."""

    name: str
    value: str | None = None
    op_type: AlterConfigOpType = AlterConfigOpType.SET


def _resource(r: str | ConfigResource) -> ConfigResource:
    return ConfigResource(ConfigResourceType.TOPIC, r) if isinstance(r, str) else r


def _check_values(r: ConfigResource, values: Iterable[tuple[str, object]]) -> None:
    """Config values go on the wire as strings (``None`` only to delete): anything else is a ``TypeError``
    naming the resource and the key, raised on the caller's thread before a request is made."""
    for name, value in values:
        if value is not None and not isinstance(value, str):
            raise TypeError(
                f"{r}: the value of config {name!r} must be a string (or None), not "
                f"{type(value).__name__} {value!r}: write it as Kafka's tools would, e.g. str(value)"
            )


def _config_needs(api: str, operation: str, r: ConfigResource) -> Needs:
    """What reading/changing ``r``'s configs needs: the operation on the topic or group, or on the cluster
    (broker and broker-logger configs)."""
    if r.type is ConfigResourceType.TOPIC:
        return Needs(api, topic=(operation, r.name))
    if r.type is ConfigResourceType.GROUP:
        return Needs(api, group=(operation, r.name))
    return Needs(api, cluster=operation)


def _target(r: ConfigResource) -> int:
    """Broker resources with an id go to that broker; everything else to any broker."""
    if r.type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER) and r.name:
        try:
            return int(r.name)
        except ValueError:
            raise ValueError(f"{r}: a broker resource's name is its node id") from None
    return ANY_NODE


class ConfigAdminMixin(AdminPlumbing):
    """Configuration administration: mixed into :class:`~kafka_handoff.admin.AdminClient` (uses its call
    plumbing)."""

    @drives_steps
    def describe_configs(
        self, resources: Iterable[str | ConfigResource], timeout: float | None = None
    ) -> Steps[dict[str, dict[str, ConfigEntry]]]:
        """Every configuration entry of each resource (a topic name, or a :class:`ConfigResource`: its own
        settings and the defaults it inherits), keyed by the resource name.  Broker resources are asked of
        that broker."""
        items = [_resource(r) for r in ([resources] if isinstance(resources, str) else resources)]
        unique_names([r.name or "-" for r in items], "resource")
        deadline = self._deadline(timeout)
        by_target: dict[int, list[ConfigResource]] = {}
        for r in items:
            by_target.setdefault(_target(r), []).append(r)

        def make(target: int, group: list[ConfigResource]) -> AdminCall:
            def build(version: int, timeout_ms: int) -> dict[str, Any]:
                return {
                    "resources": [
                        {"resource_type": int(r.type), "resource_name": r.name, "configuration_keys": None}
                        for r in group
                    ],
                    "include_synonyms": False,
                    "include_documentation": False,
                }

            def handle(response: Any, version: int, node: int) -> dict[str, Any]:
                out: dict[str, Any] = {}
                for r in response.results:
                    resource = ConfigResource(ConfigResourceType(int(r.resource_type)), str(r.resource_name))
                    code = int(r.error_code)
                    if code != ErrorCode.none:
                        detail = (
                            "it does not exist"
                            if code == ErrorCode.unknown_topic_or_partition
                            else (r.error_message or "")
                        )
                        out[r.resource_name] = error_for_code(
                            code,
                            f"cannot describe the configs of {resource}: {detail}".strip(),
                            needs=_config_needs("DescribeConfigs", "DESCRIBE_CONFIGS", resource),
                        )
                        continue
                    out[r.resource_name] = {
                        c.name: ConfigEntry(
                            c.name,
                            c.value,
                            _CONFIG_SOURCES.get(int(c.config_source), str(int(c.config_source))),
                            bool(c.read_only),
                            bool(c.is_sensitive),
                        )
                        for c in r.configs
                    }
                return out

            return AdminCall("DescribeConfigs", ApiKey.DESCRIBE_CONFIGS, target, build, handle, deadline)

        outcomes = yield from run_calls([make(t, g) for t, g in by_target.items()], deadline)
        outcome: dict[str, Any] = {}
        for o in outcomes:
            if isinstance(o, BaseException):
                raise o
            outcome.update(o)
        self._raise_first([v for v in outcome.values() if isinstance(v, BaseException)])
        return {r.name: outcome[r.name] for r in items}

    @drives_steps
    def incremental_alter_configs(
        self,
        configs: Mapping[ConfigResource, Iterable[AlterConfigOp]],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> Steps[None]:
        """Change some configs of each resource, leaving the others (IncrementalAlterConfigs): set, delete
        (back to the default), append to or subtract from a list.  Each resource's error names it; the first
        is raised with the others attached as notes."""
        ops = {_resource(r): list(o) for r, o in configs.items()}
        for r, resource_ops in ops.items():
            _check_values(r, ((op.name, op.value) for op in resource_ops))
        deadline = self._deadline(timeout)

        def body(group: list[ConfigResource]) -> dict[str, Any]:
            return {
                "resources": [
                    {
                        "resource_type": int(r.type),
                        "resource_name": r.name,
                        "configs": [
                            {"name": op.name, "config_operation": int(op.op_type), "value": op.value}
                            for op in ops[r]
                        ],
                    }
                    for r in group
                ],
                "validate_only": validate_only,
            }

        yield from self._alter_configs_steps(
            "IncrementalAlterConfigs", ApiKey.INCREMENTAL_ALTER_CONFIGS, list(ops), body, deadline
        )

    @drives_steps
    def alter_configs(
        self,
        configs: Mapping[ConfigResource, Mapping[str, str]],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> Steps[None]:
        """Replace every dynamic config of each resource with ``configs`` (AlterConfigs, Java's deprecated
        ``alterConfigs``: configs not given go back to their defaults).  Prefer
        :meth:`incremental_alter_configs`."""
        values = {_resource(r): dict(c) for r, c in configs.items()}
        for r, resource_values in values.items():
            _check_values(r, resource_values.items())
        deadline = self._deadline(timeout)

        def body(group: list[ConfigResource]) -> dict[str, Any]:
            return {
                "resources": [
                    {
                        "resource_type": int(r.type),
                        "resource_name": r.name,
                        "configs": [{"name": k, "value": v} for k, v in values[r].items()],
                    }
                    for r in group
                ],
                "validate_only": validate_only,
            }

        yield from self._alter_configs_steps(
            "AlterConfigs", ApiKey.ALTER_CONFIGS, list(values), body, deadline
        )

    def _alter_configs_steps(
        self,
        name: str,
        api_key: int,
        resources: list[ConfigResource],
        body: Any,
        deadline: int,
    ) -> Steps[None]:
        by_target: dict[int, list[ConfigResource]] = {}
        for r in resources:
            by_target.setdefault(_target(r), []).append(r)

        def make(group: list[ConfigResource], target: int) -> AdminCall:
            def build(version: int, timeout_ms: int) -> dict[str, Any]:
                result: dict[str, Any] = body(group)
                return result

            def handle(response: Any, version: int, node: int) -> list[BaseException]:
                errors: list[BaseException] = []
                for r in response.responses:
                    code = int(r.error_code)
                    if code == ErrorCode.none:
                        continue
                    resource = ConfigResource(ConfigResourceType(int(r.resource_type)), str(r.resource_name))
                    detail = r.error_message or (
                        "it does not exist" if code == ErrorCode.unknown_topic_or_partition else ""
                    )
                    needs = _config_needs(name, "ALTER_CONFIGS", resource)
                    errors.append(
                        error_for_code(code, f"cannot alter the configs of {resource}: {detail}", needs=needs)
                    )
                return errors

            return AdminCall(name, api_key, target, build, handle, deadline)

        outcomes = yield from run_calls([make(g, t) for t, g in by_target.items()], deadline)
        errors: list[BaseException] = []
        for o in outcomes:
            if isinstance(o, BaseException):
                errors.append(o)
            else:
                errors.extend(o)
        self._raise_first(errors)
