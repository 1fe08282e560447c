"""The share consumer's configuration: Java's ``ShareConsumer`` keys and defaults (KIP-932, KIP-1206).

The consumer-group keys a share consumer does not use are rejected with a message that names the share
group config to use instead (Java's ``ShareConsumerConfig`` rejects them too).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from kafka_handoff.config import (
    ConfigDef,
    ConfigType,
    Importance,
    OneOf,
    Range,
    _common_rows,
    _CommonFields,
    _make_def,
    _Row,
    parse_client_values,
    python_name,
    resolve_aliases,
)
from kafka_handoff.errors import ConfigError

__all__ = ["SHARE_CONSUMER_CONFIG_DEF", "ShareConsumerConfig", "parse_share_consumer_config"]

_I, _S, _B, _FN = ConfigType.INT, ConfigType.STRING, ConfigType.BOOLEAN, ConfigType.CALLABLE
_HI, _MED, _LOW = Importance.HIGH, Importance.MEDIUM, Importance.LOW

ACKNOWLEDGEMENT_MODES: Final = ("implicit", "explicit")
ACQUIRE_MODES: Final = ("batch_optimized", "record_limit")

# fmt: off
_SHARE_ROWS: list[_Row] = [
    ("group.id", _S, None, None, _HI, "The share group this consumer joins (required)."),
    ("share.acknowledgement.mode", _S, "implicit", OneOf(ACKNOWLEDGEMENT_MODES), _MED,
     "implicit: the records of a poll() are accepted by the next poll(), commit_sync/commit_async or "
     "close(); explicit: the application acknowledges every record with acknowledge()."),
    ("share.acquire.mode", _S, "batch_optimized", OneOf(ACQUIRE_MODES), _MED,
     "KIP-1206: batch_optimized lets the broker acquire whole record batches (a poll() may return more than "
     "max.poll.records); record_limit acquires at most max.poll.records per fetch."),
    ("max.poll.records", _I, 500, Range(min=1), _MED,
     "Records a fetch asks for (ShareFetch MaxRecords and BatchSize) and poll() hands out."),
    ("max.poll.interval.ms", _I, 300_000, Range(min=1), _MED,
     "Longest allowed gap between poll() calls; past it the member leaves the group (the next poll() "
     "rejoins)."),
    ("fetch.min.bytes", _I, 1, Range(min=0), _HI, "Minimum bytes a share fetch response should carry."),
    ("fetch.max.bytes", _I, 52_428_800, Range(min=0), _MED, "Maximum bytes of one share fetch response."),
    ("fetch.max.wait.ms", _I, 500, Range(min=0), _LOW, "How long the broker may wait for fetch.min.bytes."),
    ("max.partition.fetch.bytes", _I, 1_048_576, Range(min=0), _HI, "Maximum bytes per partition per fetch."),
    ("check.crcs", _B, True, None, _LOW, "Verify the CRC32C of fetched record batches."),
    ("max.decompressed.batch.bytes", _I, 67_108_864, Range(min=1), _MED,
     "Most bytes one compressed record batch may decompress to (default 64 MiB); a batch beyond it is "
     "refused as a decompression bomb with a CorruptRecordError naming topic, partition and offset."),
    ("default.api.timeout.ms", _I, 60_000, Range(min=0), _MED, "Timeout of blocking calls not given one."),
    ("client.rack", _S, "", None, _LOW, "Rack of this consumer (sent when joining)."),
    ("key.deserializer", _FN, None, None, _HI, "Callable turning key bytes into a key."),
    ("value.deserializer", _FN, None, None, _HI, "Callable turning value bytes into a value."),
]
# fmt: on

SHARE_CONSUMER_CONFIG_DEF: Final[ConfigDef] = _make_def(
    "share consumer",
    _common_rows(receive_buffer_bytes=65_536, connections_max_idle_ms=540_000, enable_metrics_push=True)
    + _SHARE_ROWS,
)

# Consumer-group keys that have no meaning for a share consumer, with what to use instead.
_NOT_FOR_SHARE: Final[Mapping[str, str]] = {
    "auto.offset.reset": "set the group config share.auto.offset.reset (AdminClient.set_share_group_config)",
    "enable.auto.commit": "acknowledgements replace commits (share.acknowledgement.mode)",
    "auto.commit.interval.ms": "acknowledgements replace commits (share.acknowledgement.mode)",
    "group.instance.id": "share groups have no static membership",
    "group.protocol": "a share consumer always uses the share group protocol",
    "group.remote.assignor": "the share group assignor is a broker config (group.share.assignors)",
    "isolation.level": "set the group config share.isolation.level",
    "partition.assignment.strategy": "share groups are assigned by the broker",
    "session.timeout.ms": "the broker config group.share.session.timeout.ms applies",
    "heartbeat.interval.ms": "the broker config group.share.heartbeat.interval.ms applies",
    "interceptor.classes": "not supported",
}

_share_seq = itertools.count(1)


@dataclass(frozen=True, kw_only=True)
class ShareConsumerConfig(_CommonFields):
    CONFIG_DEF: ClassVar[ConfigDef] = SHARE_CONSUMER_CONFIG_DEF

    group_id: str
    share_acknowledgement_mode: str
    share_acquire_mode: str
    max_poll_records: int
    max_poll_interval_ms: int
    fetch_min_bytes: int
    fetch_max_bytes: int
    fetch_max_wait_ms: int
    max_partition_fetch_bytes: int
    check_crcs: bool
    max_decompressed_batch_bytes: int
    default_api_timeout_ms: int
    client_rack: str
    key_deserializer: Callable[..., Any] | None
    value_deserializer: Callable[..., Any] | None

    @property
    def explicit_acknowledgement(self) -> bool:
        return self.share_acknowledgement_mode == "explicit"


def parse_share_consumer_config(props: Mapping[str, Any]) -> ShareConsumerConfig:
    """Parse share consumer configuration (Kafka's dotted names, Java 4.2+ defaults and rules)."""
    if not isinstance(props, Mapping):
        raise ConfigError(f"share consumer configuration must be a mapping of dotted names, got {props!r}")
    props = resolve_aliases(props)
    rejected = [name for name in props if name in _NOT_FOR_SHARE]
    if rejected:
        raise ConfigError(
            "; ".join(
                f"Configuration '{name}' is not supported by the share consumer ({_NOT_FOR_SHARE[name]})"
                for name in sorted(rejected)
            )
        )
    _props, values, explicit = parse_client_values(SHARE_CONSUMER_CONFIG_DEF, props)
    group = values["group.id"]
    if not isinstance(group, str) or not group.strip():
        raise ConfigError(
            f"Invalid value {group!r} for configuration 'group.id': a share consumer needs a non-empty "
            "group.id (the share group to join)"
        )
    if not values["client.id"]:
        values["client.id"] = f"share-consumer-{group}-{next(_share_seq)}"
    config: ShareConsumerConfig = ShareConsumerConfig._build(values, explicit)
    return config


def _check_fields() -> None:
    from dataclasses import fields

    declared = {f.name for f in fields(ShareConsumerConfig)} - {"explicit"}
    defined = {python_name(name) for name in SHARE_CONSUMER_CONFIG_DEF.keys}
    if declared != defined:
        raise AssertionError(f"ShareConsumerConfig fields differ from its ConfigDef: {declared ^ defined}")


_check_fields()
