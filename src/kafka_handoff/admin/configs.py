"""Configuration administration: describe topic configs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.admin.calls import (
    AdminCall,
    Steps,
    drives_steps,
    run_one,
)
from kafka_handoff.admin.plumbing import AdminPlumbing, unique_names
from kafka_handoff.admin.results import (
    ConfigEntry,
)
from kafka_handoff.errors import (
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


class ConfigAdminMixin(AdminPlumbing):
    """Configuration administration: mixed into :class:`~kafka_handoff.admin.AdminClient` (uses its call
    plumbing)."""

    @drives_steps
    def describe_configs(
        self, topics: Iterable[str], timeout: float | None = None
    ) -> Steps[dict[str, dict[str, ConfigEntry]]]:
        """Every configuration entry of each topic (its own settings and the defaults it inherits)."""
        names = unique_names(topics, "topic")
        deadline = self._deadline(timeout)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "resources": [
                    {"resource_type": _TOPIC_RESOURCE, "resource_name": n, "configuration_keys": None}
                    for n in names
                ],
                "include_synonyms": False,
                "include_documentation": False,
            }

        def handle(response: Any, version: int, node: int) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for r in response.results:
                code = int(r.error_code)
                if code != ErrorCode.none:
                    detail = (
                        "it does not exist"
                        if code == ErrorCode.unknown_topic_or_partition
                        else (r.error_message or "")
                    )
                    out[r.resource_name] = error_for_code(
                        code, f"cannot describe the configs of topic {r.resource_name!r}: {detail}".strip()
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

        outcome: dict[str, Any] = yield from run_one(
            AdminCall("DescribeConfigs", ApiKey.DESCRIBE_CONFIGS, ANY_NODE, build, handle, deadline)
        )
        self._raise_first([v for v in outcome.values() if isinstance(v, BaseException)])
        return {n: outcome[n] for n in names}
