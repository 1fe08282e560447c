"""The options of the ``kafka-handoff`` Spark data source: Spark's Kafka source's names and rules, plus
``groupId`` and ``startingOffsets = "group"``.

Pure (no Spark, no broker): :func:`parse_options` validates everything the driver can check before the first
request, so a misspelt or contradictory option fails when the DataFrame is defined, naming the option and what
it allows.  Offsets travel in Spark's JSON form, ``{"topic": {"0": 23, "1": -1}}`` (``-2`` earliest,
``-1`` latest).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_handoff.config import ADMIN_CONFIG_DEF, CONSUMER_CONFIG_DEF, resolve_aliases
from kafka_handoff.types import TopicPartition

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "SourceOptions",
    "SourceOptionsError",
    "parse_options",
    "partition_json",
]

EARLIEST = -2
LATEST = -1

#: Kafka settings the source sets itself (Spark's Kafka source rejects the same ones).
_OWNED = {
    "enable.auto.commit": "the source never auto-commits; use the groupId option to commit progress",
    "key.deserializer": "keys are returned as binary",
    "value.deserializer": "values are returned as binary",
    "interceptor.classes": "not supported",
}

#: Spark option names that are accepted for compatibility and have no effect here.
_IGNORED = {"fetchoffset.numretries", "fetchoffset.retryintervalms", "kafkaconsumer.cachecapacity"}


class SourceOptionsError(ValueError):
    """An option of the ``kafka-handoff`` source is missing, unknown or has a value it does not allow."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends: ``kind`` is ``earliest``, ``latest``, ``group``, ``offsets`` (``per``:
    the JSON's explicit offsets, ``-2``/``-1`` allowed), ``timestamp`` (``timestamp``: one ms for every
    partition) or ``timestamps`` (``per``: ms per partition)."""

    kind: str
    per: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: int = 0


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options (see :func:`parse_options`)."""

    bootstrap_servers: str
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartition, ...] = ()
    starting: OffsetSpec = OffsetSpec("latest")
    ending: OffsetSpec = OffsetSpec("latest")
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    group_id: str | None = None
    timestamp_strategy: str = "error"
    poll_timeout_ms: int = 120_000
    #: every ``kafka.*`` option without its prefix (security settings included)
    kafka: dict[str, str] = field(default_factory=dict, repr=False)

    def consumer_config(self) -> dict[str, Any]:
        """The executors' consumer: assign mode, no group, read_committed unless ``kafka.isolation.level``
        says otherwise; the data-loss policy decides what an out-of-range position does."""
        conf: dict[str, Any] = {k: v for k, v in self.kafka.items() if k in CONSUMER_CONFIG_DEF}
        conf.pop("group.id", None)
        conf["bootstrap.servers"] = self.bootstrap_servers
        conf.setdefault("isolation.level", "read_committed")
        conf.setdefault("max.poll.records", 100_000)
        conf.setdefault("client.id", "kafka-handoff-spark-reader")
        conf["enable.auto.commit"] = False
        conf["auto.offset.reset"] = "none" if self.fail_on_data_loss else "earliest"
        return conf

    def admin_config(self) -> dict[str, Any]:
        """The driver's admin client (offset lookups, group commits): the ``kafka.*`` settings it knows."""
        conf: dict[str, Any] = {k: v for k, v in self.kafka.items() if k in ADMIN_CONFIG_DEF}
        conf["bootstrap.servers"] = self.bootstrap_servers
        conf.setdefault("client.id", "kafka-handoff-spark-driver")
        return conf

    @property
    def isolation_level(self) -> str:
        return self.kafka.get("isolation.level", "read_committed")

    @property
    def group_reset(self) -> str:
        """Where ``startingOffsets = "group"`` starts a partition the group has no offset for."""
        return self.kafka.get("auto.offset.reset", "earliest")


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise SourceOptionsError(f"option {name}={value!r} is invalid (allowed: true, false)")


def _positive_int(name: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise SourceOptionsError(f"option {name}={value!r} is invalid (allowed: a positive integer)")
    return n


def _json(name: str, value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as exc:
        raise SourceOptionsError(f"option {name} is not valid JSON ({exc}): {value!r}") from None


def _per_partition(name: str, value: str) -> dict[TopicPartition, int]:
    """``{"topic": {"0": 23, "1": -1}}`` -> {TopicPartition: 23, ...}."""
    data = _json(name, value)
    out: dict[TopicPartition, int] = {}
    if not isinstance(data, dict):
        raise SourceOptionsError(f'option {name} must be a JSON object like {{"topic": {{"0": 23}}}}')
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise SourceOptionsError(f"option {name}: the value of topic {topic!r} must be an object")
        for p, off in parts.items():
            try:
                tp = TopicPartition(str(topic), int(p))
            except ValueError:
                raise SourceOptionsError(
                    f"option {name}: partition {p!r} of {topic!r} is not a number"
                ) from None
            if not isinstance(off, int) or isinstance(off, bool):
                raise SourceOptionsError(f"option {name}: the value of {tp} must be an integer, got {off!r}")
            out[tp] = off
    return out


def partition_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Offsets in Spark's JSON shape (what stream offsets are made of)."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def _offset_spec(opts: Mapping[str, str], which: str, streaming: bool) -> OffsetSpec:
    """Spark's precedence: ``<which>Timestamp``, then ``<which>OffsetsByTimestamp``, then
    ``<which>Offsets``."""
    ts_name, by_ts_name, name = f"{which}timestamp", f"{which}offsetsbytimestamp", f"{which}offsets"
    shown = {"starting": "startingOffsets", "ending": "endingOffsets"}[which]
    if ts_name in opts:
        try:
            return OffsetSpec("timestamp", timestamp=int(opts[ts_name]))
        except ValueError:
            raise SourceOptionsError(
                f"option {which}Timestamp={opts[ts_name]!r} is invalid (allowed: milliseconds since the "
                "epoch)"
            ) from None
    if by_ts_name in opts:
        return OffsetSpec("timestamps", per=_per_partition(f"{which}OffsetsByTimestamp", opts[by_ts_name]))
    default = "latest" if (streaming or which == "ending") else "earliest"
    value = opts.get(name, default).strip()
    low = value.lower()
    allowed = ["earliest", "latest", "a JSON object of offsets per partition"]
    if which == "starting":
        allowed.insert(2, "group")
    if low in ("earliest", "latest") or (low == "group" and which == "starting"):
        spec = OffsetSpec(low)
    elif value.startswith("{"):
        spec = OffsetSpec("offsets", per=_per_partition(shown, value))
    else:
        raise SourceOptionsError(f"option {shown}={value!r} is invalid (allowed: {', '.join(allowed)})")
    if not streaming and which == "starting" and (spec.kind == "latest" or LATEST in spec.per.values()):
        raise SourceOptionsError("startingOffsets for a batch query cannot be latest (-1)")
    if which == "ending" and (spec.kind == "earliest" or EARLIEST in spec.per.values()):
        raise SourceOptionsError("endingOffsets cannot be earliest (-2)")
    return spec


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate the options given to ``spark.read`` (``streaming=False``) or ``spark.readStream``."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if k.lower() != "path"}
    # librdkafka's names (ssl.ca.location, sasl.mechanisms, ...) are accepted as by our clients
    kafka = resolve_aliases({k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")})
    # The kafka.* keys keep their case-insensitive dotted names (all of Kafka's are lower case).
    for key in kafka:
        if key in _OWNED:
            raise SourceOptionsError(f"option kafka.{key} is not supported: {_OWNED[key]}")
        if key not in CONSUMER_CONFIG_DEF and key not in ADMIN_CONFIG_DEF:
            raise CONSUMER_CONFIG_DEF.unknown_key_error([key])
    bootstrap = kafka.pop("bootstrap.servers", "").strip()
    if not bootstrap:
        raise SourceOptionsError("option kafka.bootstrap.servers is required (host:port[,host:port...])")

    strategies = [s for s in ("subscribe", "subscribepattern", "assign") if s in opts]
    if len(strategies) != 1:
        raise SourceOptionsError(
            "exactly one of the options subscribe, subscribePattern, assign is required"
            + (f" (got {', '.join(strategies)})" if strategies else "")
        )
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[TopicPartition, ...] = ()
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise SourceOptionsError("option subscribe must name at least one topic (comma-separated)")
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SourceOptionsError(
                f"option subscribePattern={pattern!r} is not a valid regex: {exc}"
            ) from None
    else:
        data = _json("assign", opts["assign"])
        if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
            raise SourceOptionsError('option assign must be a JSON object like {"topicA": [0, 1]}')
        assign = tuple(sorted(TopicPartition(str(t), int(p)) for t, ps in data.items() for p in ps))
        if not assign:
            raise SourceOptionsError("option assign names no partition")

    if streaming and any(k in opts for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")):
        raise SourceOptionsError("endingOffsets (and endingTimestamp) are for batch queries only")
    starting = _offset_spec(opts, "starting", streaming)
    ending = OffsetSpec("latest") if streaming else _offset_spec(opts, "ending", streaming)

    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise SourceOptionsError(
            f"option startingOffsetsByTimestampStrategy={strategy!r} is invalid (allowed: error, latest)"
        )
    group_id = opts.get("groupid")
    if group_id is not None and not group_id.strip():
        raise SourceOptionsError("option groupId must not be empty")
    if starting.kind == "group" and group_id is None:
        raise SourceOptionsError('startingOffsets = "group" needs the groupId option')
    reset = kafka.get("auto.offset.reset", "earliest")
    if reset not in ("earliest", "latest", "none"):
        raise SourceOptionsError(
            f"option kafka.auto.offset.reset={reset!r} is invalid (allowed: earliest, latest, none)"
        )

    known = {
        "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets", "startingtimestamp",
        "endingtimestamp", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
        "startingoffsetsbytimestampstrategy", "maxoffsetspertrigger", "minpartitions",
        "maxrecordsperpartition", "failondataloss", "includeheaders", "groupid",
        "kafkaconsumer.polltimeoutms",
    } | _IGNORED  # fmt: skip
    unknown = sorted(k for k in opts if not k.startswith("kafka.") and k not in known)
    if unknown:
        raise SourceOptionsError(
            f"unknown option(s) {', '.join(unknown)} for the kafka-handoff source (Kafka settings take the "
            "prefix kafka., e.g. kafka.security.protocol)"
        )
    if not streaming and "maxoffsetspertrigger" in opts:
        raise SourceOptionsError("maxOffsetsPerTrigger is for streaming queries only")

    def opt_int(name: str) -> int | None:
        return _positive_int(name, opts[name.lower()]) if name.lower() in opts else None

    return SourceOptions(
        bootstrap_servers=bootstrap,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=opt_int("maxOffsetsPerTrigger"),
        min_partitions=opt_int("minPartitions"),
        max_records_per_partition=opt_int("maxRecordsPerPartition"),
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        include_headers=_bool("includeHeaders", opts.get("includeheaders", "false")),
        group_id=group_id,
        timestamp_strategy=strategy,
        poll_timeout_ms=opt_int("kafkaConsumer.pollTimeoutMs") or 120_000,
        kafka=kafka,
    )
