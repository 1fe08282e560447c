"""The pipeline's TOML configuration: parsing, defaults, validation.

Layout (every section but ``[kafka]``, ``[transform]`` and ``[sink]`` is optional)::

    [kafka]                     # consumer config, Kafka's dotted names (quoted, or as nested tables)
    topics = ["events"]
    "bootstrap.servers" = "${HANDOFF_BOOTSTRAP:-127.0.0.1:9092}"
    "group.id" = "clickstream"
    "group.protocol" = "consumer"          # KIP-848 (default here); "classic" selectable

    [batch]
    adaptive = true             # size batches from the consumer lag and a latency target (sizing.py)
    max_records = 500000        # cap of a micro-batch (with adaptive = false: every batch's size)
    min_records = 1000          # adaptive batches never target fewer records
    max_bytes = 134217728       # adaptive cap in bytes of the batch's Arrow table (128 MiB)
    target_latency_ms = 1000    # caught up: size batches so Spark processes one within this
    max_interval_ms = 2000      # a batch closes at most this long after its first record
    overlap = true              # build the next batch (Arrow table) while Spark runs the current one
    poll_timeout_ms = 100

    [spark]
    master = "local[2]"         # or spark://host:7077; or remote = "sc://host:15002" (Spark Connect)
    app_name = "handoff-pipeline"
    handover = "auto"           # batches reach Spark as Parquet files (local master) or by createDataFrame
    read_on = "auto"            # driver | executors: who reads Kafka and writes the sink's files
                                # (auto: driver on a local master or Spark Connect, executors on a cluster)
    spool_dir = "/dev/shm/kafka-handoff-1000"   # where those files go, private: 0700 (default: /dev/shm)
    [spark.conf]
    "spark.driver.memory" = "2g"

    [transform]
    function = "clickstream:transform"      # module:function, DataFrame -> DataFrame
    path = ["."]                            # added to sys.path, relative to this file
    native_json = true                      # parse_json on the batch's input: pyarrow, not from_json

    [sink]
    format = "delta"            # delta (deltalake) | parquet (Spark, atomic manifests) | kafka (a topic)
    path = ".handoff/pipeline/clickstream"
    app_id = "clickstream"      # prefix of the per-partition marks; default: group.id

    [errors]
    malformed = "dead-letter-table"   # dead-letter-table | dead-letter-topic | skip | fail
    dead_letter_path = ".handoff/pipeline/clickstream-dlq"
    dead_letter_topic = "events-dlq"

    [show]
    group_by = ["page", "minute"]
    sum = ["views"]
    sort_by = ["minute", "page"]
    limit = 40

String values may use ``${VAR}`` and ``${VAR:-default}`` (environment).  Relative ``transform.path``
entries are relative to the config file; sink paths are relative to the working directory.  Every
problem raises :class:`~kafka_handoff.errors.ConfigError` naming the key and what is allowed.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka_handoff.config import (
    CONFIG_ALIASES,
    CONSUMER_CONFIG_DEF,
    PRODUCER_CONFIG_DEF,
    ConfigType,
    Password,
    parse_consumer_config,
)
from kafka_handoff.errors import ConfigError

__all__ = [
    "MALFORMED_POLICIES",
    "SINK_FORMATS",
    "BatchConfig",
    "ErrorsConfig",
    "PipelineConfig",
    "SecretsHidden",
    "ShowConfig",
    "SinkConfig",
    "SparkConfig",
    "TransformConfig",
    "apply_overrides",
    "load_config",
    "parse_config",
]

SINK_FORMATS = ("delta", "parquet", "kafka")
#: ``spark.read_on``: where Kafka is read and the sink's files are written.
READ_ON_MODES = ("auto", "driver", "executors")

#: ``spark.handover``: how batches reach Spark (:mod:`kafka_handoff.pipeline.handover`).
HANDOVER_MODES = ("auto", "files", "arrow")
MALFORMED_POLICIES = ("dead-letter-table", "dead-letter-topic", "skip", "fail")
BATCH_KEYS = (
    "adaptive",
    "max_records",
    "min_records",
    "max_bytes",
    "target_latency_ms",
    "max_interval_ms",
    "overlap",
    "poll_timeout_ms",
)
SECTIONS = ("pipeline", "kafka", "batch", "spark", "transform", "sink", "errors", "show")

#: Consumer settings the pipeline uses unless the config sets them.
CONSUMER_DEFAULTS: Mapping[str, Any] = {
    "group.protocol": "consumer",
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "max.poll.records": 10000,
}

#: Words that make a setting's value secret in ``[spark.conf]``, ``[sink.storage_options]`` and the like
#: (besides the clients' password-type keys): ``fs.s3a.secret.key``, ``AWS_SECRET_ACCESS_KEY``,
#: ``azure_storage_account_key``, ``google_service_account_key``, ``sas_token``...
_SECRET_WORDS = ("password", "secret", "token", "credential", "private", "access_key", "access.key",
                 "account_key", "account.key", "jaas", "passwd")  # fmt: skip


def is_secret_setting(name: str) -> bool:
    """True for a setting whose value must not be shown: a password-type client key (``sasl.password``,
    ``ssl.key.password``, ``ssl.keystore.password``, ``sasl.oauthbearer.client.secret``, ``sasl.jaas.config``,
    inline keys...) or librdkafka's alias of one, or a name with a secret-sounding word (not a URL)."""
    canonical = CONFIG_ALIASES.get(name, name)
    for definition in (CONSUMER_CONFIG_DEF, PRODUCER_CONFIG_DEF):
        if canonical in definition:
            return definition[canonical].type is ConfigType.PASSWORD
    lowered = name.lower()
    if lowered.endswith(("url", "uri", "endpoint", "location", "method")):
        return False
    return any(word in lowered for word in _SECRET_WORDS)


class SecretsHidden(dict[str, Any]):
    """Settings as a plain dict whose ``repr``/``str`` show ``[hidden]`` for secret values
    (:func:`is_secret_setting`): a config object or a mapping of it can be logged or printed."""

    def __repr__(self) -> str:
        def show(key: Any, value: Any) -> str:
            return Password.HIDDEN if value is not None and is_secret_setting(str(key)) else repr(value)

        return "{" + ", ".join(f"{key!r}: {show(key, value)}" for key, value in self.items()) + "}"

    __str__ = __repr__


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True)
class BatchConfig:
    max_records: int = 500_000
    max_interval_ms: int = 2_000
    poll_timeout_ms: int = 100
    adaptive: bool = True
    min_records: int = 1_000
    max_bytes: int = 128 * 1024 * 1024
    target_latency_ms: int = 1_000
    overlap: bool = True


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[2]"
    remote: str | None = None
    app_name: str = "handoff-pipeline"
    conf: Mapping[str, str] = field(default_factory=dict)
    handover: str = "auto"
    """How batches reach Spark: ``auto`` | ``files`` | ``arrow`` (:mod:`kafka_handoff.pipeline.handover`)."""
    spool_dir: str | None = None
    """Where ``files`` puts the batches' Parquet files, a directory private to the worker's user (mode
    0700; default: ``/dev/shm/kafka-handoff-<uid>``, else the temporary directory)."""

    read_on: str = "auto"
    """Who reads the batches from Kafka and writes the sink's data files: ``driver`` (the worker's
    process: one read, ``createDataFrame``/handover) | ``executors`` (Spark tasks read offset ranges the
    worker decides, :mod:`kafka_handoff.pipeline.ranges`; executors write the files) | ``auto``."""

    @property
    def local(self) -> bool:
        """A local master in this process's machine (not a cluster, not Spark Connect)."""
        return self.remote is None and self.master.startswith("local")

    @property
    def on_executors(self) -> bool:
        """``read_on`` resolved: ``auto`` is ``executors`` for a cluster master (spark://, yarn, k8s),
        ``driver`` for a local master and for Spark Connect."""
        if self.read_on == "auto":
            return self.remote is None and not self.local
        return self.read_on == "executors"


@dataclass(frozen=True)
class TransformConfig:
    function: str
    path: tuple[str, ...] = ()
    native_json: bool = True
    """``parse_json`` on the worker's input DataFrame parses with pyarrow (same result, no Spark job)."""

    @property
    def module(self) -> str:
        return self.function.split(":", 1)[0]

    @property
    def attribute(self) -> str:
        return self.function.split(":", 1)[1]


@dataclass(frozen=True)
class SinkConfig:
    format: str
    path: str
    app_id: str
    files_per_batch: int = 1
    partition_by: tuple[str, ...] = ()
    storage_options: Mapping[str, str] = field(default_factory=dict)
    producer: Mapping[str, Any] = field(default_factory=dict)
    """format = "kafka": settings of the sink's transactional producer (on top of the [kafka] connection)."""


@dataclass(frozen=True)
class ErrorsConfig:
    malformed: str = "skip"
    dead_letter_path: str | None = None
    dead_letter_topic: str | None = None
    producer: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ShowConfig:
    group_by: tuple[str, ...] = ()
    sum: tuple[str, ...] = ()
    sort_by: tuple[str, ...] = ()
    limit: int = 40


@dataclass(frozen=True)
class PipelineConfig:
    name: str
    topics: tuple[str, ...]
    consumer: Mapping[str, Any]
    batch: BatchConfig
    spark: SparkConfig
    transform: TransformConfig
    sink: SinkConfig
    errors: ErrorsConfig
    show: ShowConfig
    source: Path | None = None

    @property
    def group_id(self) -> str:
        return str(self.consumer["group.id"])

    @property
    def bootstrap_servers(self) -> str:
        return str(self.consumer["bootstrap.servers"])


# ---------------------------------------------------------------------------------------------- helpers
def _expand(value: Any, key: str) -> Any:
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            got = os.environ.get(name)
            if got is None or (got == "" and default is not None):
                if default is None:
                    raise ConfigError(
                        f"{key}: environment variable {name} is not set (write ${{{name}:-default}} "
                        "to give a default)"
                    )
                return default
            return got

        return _VAR.sub(sub, value)
    if isinstance(value, list):
        return [_expand(v, key) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, f"{key}.{k}") for k, v in value.items()}
    return value


def _sink_producer(k: Mapping[str, Any], sink_format: str) -> dict[str, Any]:
    raw = k.get("producer", {})
    if not isinstance(raw, dict):
        raise ConfigError(f"sink.producer: expected a table of producer settings, got {raw!r}")
    if raw and sink_format != "kafka":
        raise ConfigError("sink.producer: only for sink.format = 'kafka'")
    return raw


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"bootstrap": {"servers": x}}`` and ``{"bootstrap.servers": x}`` both become dotted keys."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, f"{name}."))
        else:
            out[name] = v
    return out


def _section(raw: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = raw.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[{name}] must be a table, got {type(value).__name__}")
    return dict(value)


def _unknown(section: str, table: Mapping[str, Any], allowed: Sequence[str]) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{section}.{key}: unknown key (allowed: {', '.join(allowed)})")


def _int(section: str, table: Mapping[str, Any], key: str, default: int, minimum: int = 1) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError(f"{section}.{key}: expected an integer >= {minimum}, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{section}.{key}: expected an integer >= {minimum}, got {value!r}") from None
    if number < minimum:
        raise ConfigError(f"{section}.{key}: expected an integer >= {minimum}, got {number}")
    return number


def _str(section: str, table: Mapping[str, Any], key: str, default: str | None = None) -> str | None:
    value = table.get(key, default)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{section}.{key}: expected a string, got {value!r}")
    return value


def _strings(section: str, table: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{section}.{key}: expected a list of non-empty strings, got {value!r}")
    return tuple(value)


def _bool(section: str, table: Mapping[str, Any], key: str, default: bool) -> bool:
    value = table.get(key, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"{section}.{key}: {value!r} is not allowed (allowed: true, false)")


def _choice(section: str, table: Mapping[str, Any], key: str, allowed: Sequence[str], default: str) -> str:
    value = table.get(key, default)
    if value not in allowed:
        raise ConfigError(f"{section}.{key}: {value!r} is not allowed (allowed: {', '.join(allowed)})")
    return str(value)


# ---------------------------------------------------------------------------------------------- parsing
def parse_config(raw: Mapping[str, Any], source: Path | None = None) -> PipelineConfig:
    """Validate a parsed TOML document and fill in the defaults."""
    raw = _expand(dict(raw), "config")
    for key in raw:
        if key not in SECTIONS:
            raise ConfigError(f"[{key}]: unknown section (allowed: {', '.join(SECTIONS)})")

    kafka = _flatten(_section(raw, "kafka"))
    topics_value = kafka.pop("topics", None)
    if isinstance(topics_value, str):
        topics_value = [topics_value]
    if (
        not isinstance(topics_value, list)
        or not topics_value
        or not all(isinstance(t, str) and t.strip() for t in topics_value)
    ):
        raise ConfigError(f"kafka.topics: expected a non-empty list of topic names, got {topics_value!r}")
    for required in ("bootstrap.servers", "group.id"):
        if not kafka.get(required):
            raise ConfigError(f"kafka.{required}: required (the pipeline joins a consumer group)")
    consumer = {**CONSUMER_DEFAULTS, **kafka}
    if consumer.get("enable.auto.commit") not in (False, "false", "False"):
        raise ConfigError(
            "kafka.enable.auto.commit: must be false (allowed: false): the pipeline commits offsets itself, "
            "after each sink write"
        )
    consumer["enable.auto.commit"] = False
    if consumer.get("group.protocol") == "classic" and "partition.assignment.strategy" not in kafka:
        # Incremental (cooperative) rebalances: delaying a revoke then holds only the partitions of the
        # running batch, not the whole group (as it would with an eager assignor).
        consumer["partition.assignment.strategy"] = "cooperative-sticky"
    try:
        parse_consumer_config(consumer)
    except ConfigError as exc:
        raise ConfigError(f"[kafka] {exc}") from None

    b = _section(raw, "batch")
    _unknown("batch", b, BATCH_KEYS)
    max_records = _int("batch", b, "max_records", BatchConfig.max_records)
    batch = BatchConfig(
        max_records=max_records,
        max_interval_ms=_int("batch", b, "max_interval_ms", BatchConfig.max_interval_ms),
        poll_timeout_ms=_int("batch", b, "poll_timeout_ms", BatchConfig.poll_timeout_ms),
        adaptive=_bool("batch", b, "adaptive", BatchConfig.adaptive),
        min_records=_int("batch", b, "min_records", min(BatchConfig.min_records, max_records)),
        max_bytes=_int("batch", b, "max_bytes", BatchConfig.max_bytes, minimum=1024 * 1024),
        target_latency_ms=_int("batch", b, "target_latency_ms", BatchConfig.target_latency_ms),
        overlap=_bool("batch", b, "overlap", BatchConfig.overlap),
    )
    if batch.min_records > batch.max_records:
        raise ConfigError(
            f"batch.min_records: expected an integer <= batch.max_records ({batch.max_records}), "
            f"got {batch.min_records}"
        )
    if "max.poll.records" not in kafka:
        # One poll should not overshoot a small batch by much.
        consumer["max.poll.records"] = min(int(CONSUMER_DEFAULTS["max.poll.records"]), batch.max_records)

    pipeline = _section(raw, "pipeline")
    _unknown("pipeline", pipeline, ("name",))
    name = _str("pipeline", pipeline, "name", str(consumer["group.id"])) or str(consumer["group.id"])

    s = _section(raw, "spark")
    _unknown("spark", s, ("master", "remote", "app_name", "conf", "handover", "spool_dir", "read_on"))
    conf_raw = s.get("conf", {})
    if not isinstance(conf_raw, dict):
        raise ConfigError(f"spark.conf: expected a table of Spark settings, got {conf_raw!r}")
    conf = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in _flatten(conf_raw).items()}
    remote = _str("spark", s, "remote")
    if "master" in s and remote:
        raise ConfigError("spark.remote: set either spark.master or spark.remote (Spark Connect), not both")
    if remote is not None and not remote.startswith("sc://"):
        raise ConfigError(f"spark.remote: expected a Spark Connect URL sc://host:port, got {remote!r}")
    master = _str("spark", s, "master", SparkConfig.master) or SparkConfig.master
    if not re.match(r"^(local(\[(\d+|\*)(,\d+)?\])?|spark://.+|yarn|k8s://.+)$", master):
        raise ConfigError(
            f"spark.master: {master!r} is not a Spark master URL (allowed: local[N], spark://host:port, "
            "yarn, k8s://...)"
        )
    spark = SparkConfig(
        master=master,
        remote=remote or None,
        app_name=_str("spark", s, "app_name", f"handoff-pipeline-{name}") or name,
        conf=SecretsHidden(conf),
        handover=_choice("spark", s, "handover", HANDOVER_MODES, SparkConfig.handover),
        spool_dir=_str("spark", s, "spool_dir") or None,
        read_on=_choice("spark", s, "read_on", READ_ON_MODES, SparkConfig.read_on),
    )
    if spark.handover == "files" and not spark.local and spark.spool_dir is None:
        raise ConfigError(
            "spark.handover: 'files' with a cluster or Spark Connect needs spark.spool_dir, a path every "
            "executor sees (allowed: auto, files, arrow)"
        )

    t = _section(raw, "transform")
    _unknown("transform", t, ("function", "path", "native_json"))
    function = _str("transform", t, "function")
    if not function or not re.match(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", function):
        raise ConfigError(
            "transform.function: expected 'module:function' (a DataFrame -> DataFrame function), "
            f"got {function!r}"
        )
    base = source.parent if source is not None else Path.cwd()
    paths = tuple(str((base / p).resolve()) for p in _strings("transform", t, "path"))
    native_json = _bool("transform", t, "native_json", TransformConfig.native_json)
    transform = TransformConfig(function=function, path=paths, native_json=native_json)

    k = _section(raw, "sink")
    sink_keys = ("format", "path", "app_id", "files_per_batch", "partition_by", "storage_options", "producer")
    _unknown("sink", k, sink_keys)
    sink_format = _choice("sink", k, "format", SINK_FORMATS, "delta")
    sink_path = _str("sink", k, "path")
    if not sink_path:
        raise ConfigError("sink.path: required (where the output table lives)")
    storage = k.get("storage_options", {})
    if not isinstance(storage, dict):
        raise ConfigError(f"sink.storage_options: expected a table of strings, got {storage!r}")
    if sink_format == "parquet" and "://" in sink_path and not sink_path.startswith("file://"):
        raise ConfigError(
            f"sink.path: {sink_path!r}: the parquet sink publishes manifests with an atomic link and needs a "
            "local or shared POSIX path (allowed: a plain path or file://...)"
        )
    sink = SinkConfig(
        format=sink_format,
        path=sink_path.removeprefix("file://"),
        app_id=_str("sink", k, "app_id", str(consumer["group.id"])) or str(consumer["group.id"]),
        files_per_batch=_int("sink", k, "files_per_batch", 1),
        partition_by=_strings("sink", k, "partition_by"),
        storage_options=SecretsHidden({str(a): str(b) for a, b in storage.items()}),
        producer=SecretsHidden(_flatten(_sink_producer(k, sink_format))),
    )

    e = _section(raw, "errors")
    _unknown("errors", e, ("malformed", "dead_letter_path", "dead_letter_topic", "producer"))
    policy = _choice("errors", e, "malformed", MALFORMED_POLICIES, "skip")
    dl_path = _str("errors", e, "dead_letter_path")
    dl_topic = _str("errors", e, "dead_letter_topic")
    if policy == "dead-letter-table" and not dl_path:
        raise ConfigError("errors.dead_letter_path: required when errors.malformed = 'dead-letter-table'")
    if policy == "dead-letter-topic" and not dl_topic:
        raise ConfigError("errors.dead_letter_topic: required when errors.malformed = 'dead-letter-topic'")
    if sink_format == "kafka" and policy == "dead-letter-table":
        raise ConfigError(
            "errors.malformed: 'dead-letter-table' cannot join the Kafka sink's transactions "
            "(allowed with sink.format = 'kafka': skip, fail, dead-letter-topic)"
        )
    producer_raw = e.get("producer", {})
    if not isinstance(producer_raw, dict):
        raise ConfigError(f"errors.producer: expected a table of producer settings, got {producer_raw!r}")
    errors = ErrorsConfig(
        malformed=policy,
        dead_letter_path=dl_path,
        dead_letter_topic=dl_topic,
        producer=SecretsHidden(_flatten(producer_raw)),
    )

    w = _section(raw, "show")
    _unknown("show", w, ("group_by", "sum", "sort_by", "limit"))
    show = ShowConfig(
        group_by=_strings("show", w, "group_by"),
        sum=_strings("show", w, "sum"),
        sort_by=_strings("show", w, "sort_by"),
        limit=_int("show", w, "limit", 40),
    )
    return PipelineConfig(
        name=name,
        topics=tuple(topics_value),
        consumer=SecretsHidden(consumer),
        batch=batch,
        spark=spark,
        transform=transform,
        sink=sink,
        errors=errors,
        show=show,
        source=source,
    )


def _parse_override_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str] | Mapping[str, Any]) -> dict[str, Any]:
    """Apply ``section.key=value`` overrides (``--set``); the key after the section may contain dots
    (``kafka.bootstrap.servers=host:9092``, ``spark.conf.spark.driver.memory=4g``)."""
    items: list[tuple[str, Any]]
    if isinstance(overrides, Mapping):
        items = list(overrides.items())
    else:
        items = []
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"--set {item!r}: expected section.key=value")
            key, _, text = item.partition("=")
            items.append((key.strip(), _parse_override_value(text.strip())))
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for key, value in items:
        section, _, rest = key.partition(".")
        if not rest:
            raise ConfigError(f"--set {key!r}: expected section.key=value")
        table = out.setdefault(section, {})
        if not isinstance(table, dict):
            raise ConfigError(f"--set {key!r}: [{section}] is not a table")
        if section == "spark" and rest.startswith("conf."):
            conf = table.setdefault("conf", {})
            conf = table["conf"] = _flatten(conf)
            conf[rest[len("conf.") :]] = value
        elif section == "kafka" or (section == "errors" and rest.startswith("producer.")):
            if section == "errors":
                prod = table["producer"] = _flatten(table.get("producer", {}))
                prod[rest[len("producer.") :]] = value
            else:
                flat = _flatten(table)
                flat[rest] = value
                out[section] = flat
        else:
            table[rest] = value
    return out


def load_config(
    path: str | os.PathLike[str],
    overrides: Sequence[str] | Mapping[str, Any] = (),
    *,
    client_settings: Mapping[str, Any] | None = None,
) -> PipelineConfig:
    """Read and validate a pipeline TOML file (``overrides``: ``section.key=value`` strings or a mapping).
    ``client_settings`` (``handoff pipeline run --command-config``) are added to ``[kafka]`` before the
    overrides, so ``--set`` wins over them."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read pipeline config {file}: {exc.strerror or exc}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    if client_settings:
        raw = apply_overrides(raw, {f"kafka.{key}": value for key, value in client_settings.items()})
    if overrides:
        raw = apply_overrides(raw, overrides)
    return parse_config(raw, source=file.resolve())
