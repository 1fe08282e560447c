"""Client configuration: Kafka's own dotted names with the Java client's (Kafka 4.x) defaults.

Each client has a declarative :class:`ConfigDef` (:data:`CONSUMER_CONFIG_DEF`, :data:`PRODUCER_CONFIG_DEF`,
:data:`ADMIN_CONFIG_DEF`): one :class:`ConfigKey` per dotted name with its type, default, validator,
importance and documentation.  ``parse_consumer_config`` / ``parse_producer_config`` /
``parse_admin_config`` turn a plain mapping into a frozen, typed config object::

    cfg = parse_consumer_config({"bootstrap.servers": "localhost:9092", "max.poll.records": "100"})
    cfg.max_poll_records            # 100 (attribute access by python name)
    cfg.get("max.poll.records")     # 100 (access by Kafka's dotted name)
    "max.poll.records" in cfg.explicit

Values are coerced the way Java's ``ConfigDef`` does: ints may be given as strings (``"500"``), booleans as
``"true"``/``"false"``, lists as comma-separated strings or Python sequences; enum-like strings are
case-insensitive and normalised.  An unknown key, a missing required key, a badly typed or out-of-range
value, and a forbidden combination raise :class:`~kafka_handoff.errors.ConfigError`, whose message names the
key, the value and what is allowed.

Cross-key rules follow the Java clients' post-processing (``ConsumerConfig.postProcessParsedConfig``,
``ProducerConfig.postProcessAndValidateIdempotenceConfigs``, ``KafkaProducer.configureDeliveryTimeout``,
``CommonClientConfigs.postProcessReconnectBackoffConfigs``).  Where Java generates a ``client.id`` (empty
consumer/admin ``client.id``, producer without an explicit ``client.id``) the parsed config holds the
generated id (``consumer-<group>-<n>``, ``producer-<n>``, ``adminclient-<n>``); the declared default stays
``""``.
"""

from __future__ import annotations

import difflib
import enum
import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Final, Protocol

from kafka_handoff.errors import ConfigError

__all__ = [
    "ADMIN_CONFIG_DEF",
    "CONSUMER_CONFIG_DEF",
    "NO_DEFAULT",
    "PARTITIONERS",
    "PRODUCER_CONFIG_DEF",
    "AdminConfig",
    "ClientConfig",
    "ConfigDef",
    "ConfigKey",
    "ConfigType",
    "ConsumerConfig",
    "Importance",
    "OneOf",
    "Password",
    "ProducerConfig",
    "Range",
    "Validator",
    "parse_admin_config",
    "parse_bootstrap_address",
    "parse_bootstrap_servers",
    "parse_consumer_config",
    "parse_iso8601_duration_ms",
    "parse_producer_config",
    "python_name",
]

INT32_MAX: Final = 2**31 - 1
INT32_MIN: Final = -(2**31)
INT64_MAX: Final = 2**63 - 1
INT64_MIN: Final = -(2**63)


# ---------------------------------------------------------------------------------------------------------
# Declarative machinery
# ---------------------------------------------------------------------------------------------------------


class ConfigType(enum.Enum):
    BOOLEAN = "boolean"
    INT = "int"
    """32-bit signed integer."""
    LONG = "long"
    """64-bit signed integer."""
    STRING = "string"
    LIST = "list"
    """Comma-separated string or a Python sequence; parsed to a tuple."""
    CALLABLE = "callable"
    """A Python callable (Java's CLASS type: serializers, deserializers) or ``None``."""
    PASSWORD = "password"
    """A secret string, held in a :class:`Password` whose repr and str are ``[hidden]``."""
    DOUBLE = "double"
    """A finite floating-point number (or its string)."""


class Password:
    """A secret configuration value (Java's ``Password``): ``str()``/``repr()`` show ``[hidden]``;
    :attr:`value` is the secret itself."""

    __slots__ = ("_value",)
    HIDDEN: ClassVar[str] = "[hidden]"

    def __init__(self, value: str) -> None:
        self._value = value

    @property
    def value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return self.HIDDEN

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Password) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class Importance(enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class _NoDefault:
    _instance: ClassVar[_NoDefault | None] = None

    def __new__(cls) -> _NoDefault:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Final = _NoDefault()
"""Marks a required key (Java's ``ConfigDef.NO_DEFAULT_VALUE``)."""


def python_name(name: str) -> str:
    """The attribute name of a dotted Kafka key: ``max.poll.records`` -> ``max_poll_records``."""
    return name.replace(".", "_").replace("-", "_")


def _invalid(key: str, value: Any, reason: str, allowed: str | None = None) -> ConfigError:
    if isinstance(value, tuple) and all(isinstance(item, str) for item in value):
        value = ",".join(value)  # a parsed list: show it the way it is usually written
    message = f"Invalid value {value!r} for configuration '{key}': {reason}"
    if allowed:
        message += f" (allowed: {allowed})"
    return ConfigError(message)


class Validator(Protocol):
    """Checks (and may normalise) an already type-coerced value; raises ConfigError if it is not allowed."""

    def validate(self, key: str, value: Any) -> Any: ...

    def describe(self) -> str:
        """The allowed values, for error messages and documentation."""
        ...


@dataclass(frozen=True, slots=True)
class Range:
    """An inclusive numeric range; either bound may be open."""

    min: int | None = None
    max: int | None = None

    def validate(self, key: str, value: Any) -> Any:
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise _invalid(key, value, "out of range", self.describe())
        return value

    def describe(self) -> str:
        if self.min is not None and self.max is not None:
            return f"[{self.min},...,{self.max}]"
        if self.min is not None:
            return f"[{self.min},...]"
        if self.max is not None:
            return f"[...,{self.max}]"
        return "any integer"


@dataclass(frozen=True, slots=True)
class OneOf:
    """One of a fixed set of strings, matched case-insensitively and normalised to the listed spelling."""

    options: tuple[str, ...]

    def validate(self, key: str, value: Any) -> Any:
        for option in self.options:
            if value.lower() == option.lower():
                return option
        raise _invalid(key, value, "not a supported value", self.describe())

    def describe(self) -> str:
        return ", ".join(self.options)


@dataclass(frozen=True, slots=True)
class _NonEmptyString:
    """``None`` (unset) or a non-blank string."""

    def validate(self, key: str, value: Any) -> Any:
        if value is not None and not value:
            raise _invalid(key, value, "must not be empty", self.describe())
        return value

    def describe(self) -> str:
        return "a non-empty string, or unset (None)"


@dataclass(frozen=True, slots=True)
class _Check:
    """A validator from a function (returning the normalised value) and a description."""

    func: Callable[[str, Any], Any]
    description: str

    def validate(self, key: str, value: Any) -> Any:
        return self.func(key, value)

    def describe(self) -> str:
        return self.description


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    type: ConfigType
    default: Any
    validator: Validator | None
    importance: Importance
    doc: str
    internal: bool = False

    @property
    def python_name(self) -> str:
        return python_name(self.name)

    @property
    def required(self) -> bool:
        return self.default is NO_DEFAULT

    @property
    def nullable(self) -> bool:
        return self.default is None

    def parse(self, value: Any) -> Any:
        """Coerce a user value to this key's type, then validate (and normalise) it."""
        if value is None:
            if self.nullable or self.type is ConfigType.CALLABLE:
                return None
            raise _invalid(
                self.name, value, f"must not be None (expected {_article(self.type.value)})", self._allowed()
            )
        coerced = _coerce(self.name, self.type, value, self._allowed())
        if self.validator is not None:
            coerced = self.validator.validate(self.name, coerced)
        return coerced

    def _allowed(self) -> str:
        return self.validator.describe() if self.validator is not None else _article(self.type.value)


def _article(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


_INT_RE = re.compile(r"[+-]?\d+")


def _coerce(key: str, ctype: ConfigType, value: Any, allowed: str) -> Any:
    if ctype is ConfigType.BOOLEAN:
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            text = value.strip().lower()
            if text in ("true", "false"):
                return text == "true"
        raise _invalid(key, value, "expected a boolean", "true, false")
    if ctype in (ConfigType.INT, ConfigType.LONG):
        lo, hi = (INT32_MIN, INT32_MAX) if ctype is ConfigType.INT else (INT64_MIN, INT64_MAX)
        number: int
        if isinstance(value, bool):
            raise _invalid(key, value, f"expected {_article(ctype.value)}, not a boolean", allowed)
        if isinstance(value, int):
            number = value
        elif isinstance(value, str) and _INT_RE.fullmatch(value.strip()):
            number = int(value.strip())
        else:
            raise _invalid(
                key, value, f"expected {_article(ctype.value)} (a whole number or its string)", allowed
            )
        if not lo <= number <= hi:
            raise _invalid(key, value, f"out of range for {_article(ctype.value)} ({lo}..{hi})", allowed)
        return number
    if ctype is ConfigType.DOUBLE:
        real: float | None = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            real = float(value)
        elif isinstance(value, str):
            try:
                real = float(value.strip())
            except ValueError:
                real = None
        if real is None or real != real or real in (float("inf"), float("-inf")):
            raise _invalid(key, value, "expected a number", allowed)
        return real
    if ctype is ConfigType.STRING:
        if isinstance(value, str):
            return value.strip()
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        raise _invalid(key, value, "expected a string", allowed)
    if ctype is ConfigType.LIST:
        items: list[Any]
        if isinstance(value, str):
            text = value.strip()
            items = [] if not text else [part.strip() for part in text.split(",")]
        elif isinstance(value, (list, tuple)):
            items = [item.strip() if isinstance(item, str) else item for item in value]
        else:
            raise _invalid(key, value, "expected a list or a comma-separated string", allowed)
        return tuple(items)
    if ctype is ConfigType.PASSWORD:
        if isinstance(value, Password):
            return value
        if isinstance(value, str):
            return Password(value.strip())
        raise _invalid(key, Password.HIDDEN, "expected a string", allowed)
    if ctype is ConfigType.CALLABLE:
        if callable(value):
            return value
        raise _invalid(key, value, "expected a callable (or None)", allowed)
    raise AssertionError(ctype)  # pragma: no cover


class ConfigDef:
    """The definition of one client's configuration keys (Java's ``ConfigDef``)."""

    def __init__(self, client: str) -> None:
        self.client = client
        self._keys: dict[str, ConfigKey] = {}

    def define(
        self,
        name: str,
        type: ConfigType,
        default: Any = NO_DEFAULT,
        validator: Validator | None = None,
        importance: Importance = Importance.MEDIUM,
        doc: str = "",
        *,
        internal: bool = False,
    ) -> ConfigDef:
        if name in self._keys:
            raise ValueError(f"configuration '{name}' is defined twice")
        key = ConfigKey(name, type, default, validator, importance, doc, internal)
        if default is not NO_DEFAULT and default is not None:
            # Defaults are written in their parsed form; make sure they pass their own validator.
            key.parse(default)
        self._keys[name] = key
        return self

    @property
    def keys(self) -> Mapping[str, ConfigKey]:
        return self._keys

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._keys)

    def __contains__(self, name: object) -> bool:
        return name in self._keys

    def __getitem__(self, name: str) -> ConfigKey:
        return self._keys[name]

    def defaults(self) -> dict[str, Any]:
        """The declared default of every key that has one."""
        return {name: key.default for name, key in self._keys.items() if key.default is not NO_DEFAULT}

    def unknown_key_error(self, names: list[str]) -> ConfigError:
        parts = []
        for name in names:
            close = difflib.get_close_matches(name, list(self._keys), n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            parts.append(f"Unknown {self.client} configuration '{name}'{hint}")
        return ConfigError("; ".join(parts))

    def parse(self, props: Mapping[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
        """Parse and validate ``props``; return every key's value and the keys given explicitly."""
        if not isinstance(props, Mapping):
            raise ConfigError(f"{self.client} configuration must be a mapping of dotted names, got {props!r}")
        bad = [key for key in props if not isinstance(key, str)]
        if bad:
            raise ConfigError(f"{self.client} configuration keys must be strings, got {bad[0]!r}")
        unknown = sorted(key for key in props if key not in self._keys)
        if unknown:
            raise self.unknown_key_error(unknown)
        values: dict[str, Any] = {}
        for name, key in self._keys.items():
            if name in props:
                values[name] = key.parse(props[name])
            elif key.required:
                raise ConfigError(f"Missing required configuration '{name}' which has no default value")
            else:
                values[name] = key.default
        return values, frozenset(props)


# ---------------------------------------------------------------------------------------------------------
# Special-purpose validators
# ---------------------------------------------------------------------------------------------------------

_ADDRESS_RE = re.compile(
    r"(?:[A-Za-z_][A-Za-z0-9_]*://)?(?:\[(?P<v6>[0-9A-Za-z:.%]+)\]|(?P<host>[0-9A-Za-z._-]+)):(?P<port>\d+)"
)


def parse_bootstrap_address(entry: str) -> tuple[str, int]:
    """``"host:port"``, ``"[::1]:9092"`` or ``"PLAINTEXT://host:port"`` -> ``(host, port)``.

    Raises ValueError if the entry is not of that form or the port is outside 1..65535."""
    match = _ADDRESS_RE.fullmatch(entry.strip())
    if match is None:
        raise ValueError(f"{entry!r} is not of the form host:port")
    port = int(match.group("port"))
    if not 1 <= port <= 65535:
        raise ValueError(f"{entry!r} has port {port} outside 1..65535")
    host = match.group("v6") or match.group("host")
    return host, port


def _validate_bootstrap(key: str, value: Any) -> Any:
    if not value:
        raise _invalid(key, value, "at least one broker address is required", _BOOTSTRAP_ALLOWED)
    seen: set[str] = set()
    for entry in value:
        if not isinstance(entry, str):
            raise _invalid(key, value, f"entry {entry!r} is not a string", _BOOTSTRAP_ALLOWED)
        try:
            parse_bootstrap_address(entry)
        except ValueError as exc:
            raise _invalid(key, value, f"entry {exc}", _BOOTSTRAP_ALLOWED) from None
        if entry in seen:
            raise _invalid(key, value, f"duplicate entry {entry!r}", _BOOTSTRAP_ALLOWED)
        seen.add(entry)
    return value


_BOOTSTRAP_ALLOWED = "comma-separated host:port pairs, e.g. 'localhost:9092,[::1]:9093'"
_BOOTSTRAP = _Check(_validate_bootstrap, _BOOTSTRAP_ALLOWED)


def parse_bootstrap_servers(
    value: str | Iterable[str], key: str = "bootstrap.servers"
) -> list[tuple[str, int]]:
    """``"host:port,host:port"`` (or a sequence of such entries) -> ``[(host, port), ...]``: the one parser of
    broker address lists (the clients' config, the dev broker's probe).

    Raises :class:`ConfigError` (a ``ValueError``) naming ``key`` and the value when the list is empty, has a
    duplicate or an entry that is not ``host:port``."""
    entries = value.split(",") if isinstance(value, str) else list(value)
    items = tuple(entry.strip() if isinstance(entry, str) else entry for entry in entries)
    items = tuple(entry for entry in items if entry != "")
    _validate_bootstrap(key, items)
    return [parse_bootstrap_address(entry) for entry in items]


_DURATION_RE = re.compile(
    r"(?P<sign>[-+]?)P(?:(?P<d>[-+]?\d+)D)?"
    r"(?P<t>T(?:(?P<h>[-+]?\d+)H)?(?:(?P<m>[-+]?\d+)M)?(?:(?P<s>[-+]?\d+)(?:[.,](?P<f>\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def _parse_iso8601_duration_nanos(text: str) -> int:
    match = _DURATION_RE.fullmatch(text.strip())
    if match is None or (match["d"] is None and match["t"] is None):
        raise ValueError(f"{text!r} is not an ISO-8601 duration such as P1D or PT1H30M")
    if match["t"] is not None and match["h"] is None and match["m"] is None and match["s"] is None:
        raise ValueError(
            f"{text!r} is not an ISO-8601 duration: 'T' must be followed by hours/minutes/seconds"
        )
    nanos = int(match["d"] or 0) * 86_400 * 10**9
    nanos += int(match["h"] or 0) * 3_600 * 10**9
    nanos += int(match["m"] or 0) * 60 * 10**9
    nanos += int(match["s"] or 0) * 10**9
    if match["f"]:
        fraction = int(match["f"].ljust(9, "0"))
        nanos += -fraction if match["s"].startswith("-") else fraction
    return -nanos if match["sign"] == "-" else nanos


def parse_iso8601_duration_ms(text: str) -> int:
    """Parse an ISO-8601 duration the way ``java.time.Duration.parse`` does (days, hours, minutes, seconds
    with up to 9 fraction digits, optional signs: ``P1D``, ``PT1H30M``, ``PT0.5S``) to whole milliseconds,
    truncated toward zero.  Raises ValueError if the text is not such a duration."""
    nanos = _parse_iso8601_duration_nanos(text)
    return nanos // 10**6 if nanos >= 0 else -((-nanos) // 10**6)


_OFFSET_RESET_ALLOWED = "earliest, latest, none, by_duration:<ISO-8601 duration, e.g. by_duration:P1D>"


def _validate_offset_reset(key: str, value: Any) -> Any:
    lowered = value.lower()
    if lowered in ("earliest", "latest", "none"):
        return lowered
    if lowered.startswith("by_duration:"):
        duration = value[len("by_duration:") :].strip()
        try:
            nanos = _parse_iso8601_duration_nanos(duration)
        except ValueError as exc:
            raise _invalid(key, value, str(exc), _OFFSET_RESET_ALLOWED) from None
        if nanos < 0:
            raise _invalid(key, value, "negative duration is not supported", _OFFSET_RESET_ALLOWED)
        return "by_duration:" + duration.upper()
    raise _invalid(key, value, "not a supported offset reset strategy", _OFFSET_RESET_ALLOWED)


_OFFSET_RESET = _Check(_validate_offset_reset, _OFFSET_RESET_ALLOWED)

_INSTANCE_ID_RE = re.compile(r"[a-zA-Z0-9._-]+")


def _validate_instance_id(key: str, value: Any) -> Any:
    if value is None:
        return None
    allowed = "unset (None) or 1-249 characters of [a-zA-Z0-9._-], not '.' or '..'"
    if not value or value in (".", "..") or len(value) > 249 or not _INSTANCE_ID_RE.fullmatch(value):
        raise _invalid(key, value, "not a legal group instance id", allowed)
    return value


def _validate_group_id(key: str, value: Any) -> Any:
    if value is not None and not value:
        raise _invalid(key, value, "an empty group id is not allowed", "a non-empty string, or unset (None)")
    return value


# Java class names (as a Java user would write them) for the built-in assignors -> our protocol names.
_JAVA_ASSIGNOR_NAMES: Final = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}
_STRATEGY_ALLOWED = (
    "a non-empty list without duplicates of assignor names (range, roundrobin, sticky, cooperative-sticky,"
    " 'module:Class') or assignor objects/classes"
)


def _validate_strategies(key: str, value: Any) -> Any:
    if not value:
        raise _invalid(key, value, "at least one assignor is required", _STRATEGY_ALLOWED)
    normalised: list[Any] = []
    for item in value:
        if item is None or (isinstance(item, str) and not item):
            raise _invalid(key, value, "contains an empty entry", _STRATEGY_ALLOWED)
        if isinstance(item, str):
            item = _JAVA_ASSIGNOR_NAMES.get(item, item)
        if item in normalised:
            raise _invalid(key, value, f"duplicate entry {item!r}", _STRATEGY_ALLOWED)
        normalised.append(item)
    return tuple(normalised)


_STRATEGIES = _Check(_validate_strategies, _STRATEGY_ALLOWED)


def _validate_unsupported_list(key: str, value: Any) -> Any:
    if value:
        raise _invalid(key, value, f"{key} is not supported by this client", "an empty list")
    return value


_EMPTY_LIST_ONLY = _Check(_validate_unsupported_list, "an empty list (not supported)")

_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


_SECURITY_PROTOCOL = OneOf(_SECURITY_PROTOCOLS)
_STORE_TYPES = ("PEM", "PKCS12", "JKS")
_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")


def _validate_endpoint_algorithm(key: str, value: Any) -> Any:
    lowered = value.lower()
    if lowered in ("", "none"):
        return ""
    if lowered == "https":
        return "https"
    raise _invalid(key, value, "not a supported algorithm", "https, or empty/none to disable")


_ENDPOINT_ALGORITHM = _Check(_validate_endpoint_algorithm, "https, or empty/none to disable")

# librdkafka's (and newer Java) names for keys defined under another name: alias -> canonical name.
CONFIG_ALIASES: Final = {
    "sasl.mechanisms": "sasl.mechanism",
    "ssl.ca.location": "ssl.truststore.location",
    "ssl.ca.pem": "ssl.truststore.certificates",
    "ssl.certificate.pem": "ssl.keystore.certificate.chain",
    "ssl.key.pem": "ssl.keystore.key",
    "sasl.oauthbearer.client.credentials.client.id": "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.credentials.client.secret": "sasl.oauthbearer.client.secret",
    "oauth.cb": "oauth_cb",
}


def resolve_aliases(props: Mapping[str, Any]) -> dict[str, Any]:
    """Rename librdkafka's aliases to the canonical keys; an alias and its key with different values is an
    error."""
    out: dict[str, Any] = {}
    for key, value in props.items():
        canonical = CONFIG_ALIASES.get(key, key) if isinstance(key, str) else key
        if canonical in out and out[canonical] != value:
            raise ConfigError(
                f"Configuration '{key}' is an alias of '{canonical}', which is also set to a different value "
                f"(allowed: set only one of them)"
            )
        out[canonical] = value
    return out


_ACKS_ALLOWED = "all, -1, 0, 1"


def _validate_acks(key: str, value: Any) -> Any:
    text = value.strip().lower()
    if text in ("all", "-1"):
        return -1
    if text in ("0", "1"):
        return int(text)
    raise _invalid(key, value, "not a supported acks value", _ACKS_ALLOWED)


_ACKS = _Check(_validate_acks, _ACKS_ALLOWED)


def _validate_gzip_level(key: str, value: Any) -> Any:
    if value != -1 and not 1 <= value <= 9:
        raise _invalid(key, value, "not a gzip compression level", "[1,...,9] or -1")
    return value


_GZIP_LEVEL = _Check(_validate_gzip_level, "[1,...,9] or -1")


def _validate_transactional_id(key: str, value: Any) -> Any:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"Invalid value {value!r} for configuration '{key}': a non-empty string or None")
    return value


_TRANSACTIONAL_ID = _Check(_validate_transactional_id, "a non-empty string, or unset (None)")

PARTITIONERS: Final = (
    "murmur2_random",
    "murmur2",
    "consistent_random",
    "consistent",
    "fnv1a_random",
    "fnv1a",
    "random",
)
"""The producer's ``partitioner`` values (the same as ``producer.partitioner.PARTITIONERS``)."""
_AT_LEAST_0 = Range(min=0)
_AT_LEAST_1 = Range(min=1)
_SOCKET_BUFFER = Range(min=-1)  # -1: use the OS default
_NON_EMPTY = _NonEmptyString()

# Key tables: (name, type, default, validator, importance, doc).  One row per key; defaults are Java's.
_Row = tuple[str, ConfigType, Any, Validator | None, Importance, str]
_I, _L, _S, _B = ConfigType.INT, ConfigType.LONG, ConfigType.STRING, ConfigType.BOOLEAN
_DBL = ConfigType.DOUBLE


def _fraction_between(lo: float, hi: float) -> _Check:
    def check(key: str, value: Any) -> Any:
        if not lo <= value <= hi:
            raise _invalid(key, value, "out of range", f"[{lo},...,{hi}]")
        return value

    return _Check(check, f"[{lo},...,{hi}]")


_LIST, _FN, _P = ConfigType.LIST, ConfigType.CALLABLE, ConfigType.PASSWORD
_HI, _MED, _LOW = Importance.HIGH, Importance.MEDIUM, Importance.LOW


# fmt: off
def _common_rows(
    *, receive_buffer_bytes: int, connections_max_idle_ms: int, enable_metrics_push: bool
) -> list[_Row]:
    """Keys every client has (Java's CommonClientConfigs); the three arguments differ per client."""
    return [
        ("bootstrap.servers", _LIST, NO_DEFAULT, _BOOTSTRAP, _HI,
         "Brokers for the first connection (host:port,...); the rest of the cluster is discovered."),
        ("client.id", _S, "", None, _MED, "Logical name sent with every request; generated when empty."),
        ("client.dns.lookup", _S, "use_all_dns_ips",
         OneOf(("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only")), _MED,
         "How broker host names are resolved into addresses."),
        ("metadata.max.age.ms", _L, 300_000, _AT_LEAST_0, _LOW, "Refresh metadata at least this often."),
        ("send.buffer.bytes", _I, 131_072, _SOCKET_BUFFER, _MED, "SO_SNDBUF; -1 uses the OS default."),
        ("receive.buffer.bytes", _I, receive_buffer_bytes, _SOCKET_BUFFER, _MED, "SO_RCVBUF; -1: OS default"),
        ("reconnect.backoff.ms", _L, 50, _AT_LEAST_0, _LOW, "Initial wait before reconnecting to a broker."),
        ("reconnect.backoff.max.ms", _L, 1_000, _AT_LEAST_0, _LOW, "Cap of the reconnect backoff."),
        ("retry.backoff.ms", _L, 100, _AT_LEAST_0, _LOW, "Initial wait before retrying a failed request."),
        ("retry.backoff.max.ms", _L, 1_000, _AT_LEAST_0, _LOW, "Cap of the exponential retry backoff."),
        ("request.timeout.ms", _I, 30_000, _AT_LEAST_0, _MED, "How long to wait for a response."),
        ("socket.connection.setup.timeout.ms", _L, 10_000, _AT_LEAST_0, _MED,
         "Initial time allowed for a connection to be established."),
        ("socket.connection.setup.timeout.max.ms", _L, 30_000, _AT_LEAST_0, _MED,
         "Cap of the exponentially growing connection setup timeout."),
        ("connections.max.idle.ms", _L, connections_max_idle_ms, None, _MED,
         "Close connections idle for longer than this."),
        ("enable.metrics.push", _B, enable_metrics_push, None, _LOW,
         "KIP-714 client metrics push: accepted and ignored (not implemented)."),
        ("security.protocol", _S, "PLAINTEXT", _SECURITY_PROTOCOL, _MED,
         "Protocol used to talk to brokers: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."),
        ("ssl.truststore.location", _S, None, _NON_EMPTY, _HI,
         "File of the CA certificates that sign the brokers' certificates, PEM or PKCS#12 (librdkafka: "
         "ssl.ca.location); unset: the system's CAs."),
        ("ssl.truststore.type", _S, "PEM", OneOf(_STORE_TYPES), _MED,
         "Trust store format: PEM or PKCS12 (unset: told from the file); JKS names the keytool conversion."),
        ("ssl.truststore.password", _P, None, None, _HI, "Password of a PKCS12 trust store."),
        ("ssl.truststore.certificates", _P, None, None, _HI,
         "CA certificates in PEM, inline (librdkafka: ssl.ca.pem)."),
        ("ssl.keystore.certificate.chain", _P, None, None, _HI,
         "Client certificate chain in PEM, inline (librdkafka: ssl.certificate.pem)."),
        ("ssl.keystore.key", _P, None, None, _HI, "Client private key in PEM, inline (ssl.key.pem)."),
        ("ssl.keystore.location", _S, None, _NON_EMPTY, _HI,
         "File with the client's private key and certificate chain, PEM or PKCS#12 (mutual TLS)."),
        ("ssl.keystore.type", _S, "PEM", OneOf(_STORE_TYPES), _MED,
         "Key store format: PEM or PKCS12 (unset: told from the file); JKS names the keytool conversion."),
        ("ssl.keystore.password", _P, None, None, _HI, "Password of a PKCS12 key store (and its key)."),
        ("ssl.certificate.location", _S, None, _NON_EMPTY, _HI,
         "PEM file of the client certificate chain (librdkafka's name; mutual TLS)."),
        ("ssl.key.location", _S, None, _NON_EMPTY, _HI,
         "PEM file of the client's private key (librdkafka's name; mutual TLS)."),
        ("ssl.key.password", _P, None, None, _HI,
         "Password of an encrypted PEM private key (PKCS12: used when ssl.keystore.password is not set)."),
        ("ssl.endpoint.identification.algorithm", _S, "https", _ENDPOINT_ALGORITHM, _LOW,
         "https: verify the broker's host name against its certificate; empty (or none) disables it."),
        ("enable.ssl.certificate.verification", _B, True, None, _LOW,
         "Verify the broker's certificate chain (librdkafka's name); false is for tests only."),
        ("sasl.mechanism", _S, "GSSAPI", OneOf(_SASL_MECHANISMS), _MED,
         "SASL mechanism (librdkafka: sasl.mechanisms): PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, "
         "GSSAPI (Kerberos)."),
        ("sasl.jaas.config", _P, None, None, _MED,
         "Java's JAAS line, e.g. org.apache.kafka.common.security.plain.PlainLoginModule required "
         "username=\"u\" password=\"p\"; (PLAIN and SCRAM; Krb5LoginModule for GSSAPI)."),
        ("sasl.username", _S, None, _NON_EMPTY, _HI, "SASL user name for PLAIN and SCRAM (librdkafka)."),
        ("sasl.password", _P, None, None, _HI, "SASL password for PLAIN and SCRAM (librdkafka's name)."),
        ("sasl.scram.min.iterations", _I, 4096, _AT_LEAST_1, _LOW,
         "Fewest SCRAM iterations a broker may ask for (Java's bound; fewer is refused as a downgrade)."),
        ("sasl.scram.max.iterations", _I, 16384, _AT_LEAST_1, _LOW,
         "Most SCRAM iterations a broker may ask for (Java's bound; PBKDF2 runs on the network thread)."),
        ("sasl.oauthbearer.method", _S, "default", OneOf(("default", "oidc")), _LOW,
         "OAUTHBEARER token source: default (the oauth_cb callback) or oidc (client credentials)."),
        ("sasl.oauthbearer.token.endpoint.url", _S, None, _NON_EMPTY, _MED,
         "OIDC token endpoint (https URL) for sasl.oauthbearer.method=oidc; redirects are not followed."),
        ("sasl.oauthbearer.token.endpoint.allow.http", _B, False, None, _LOW,
         "Accept an http:// token endpoint that is not a loopback address (the client secret then goes "
         "out in clear): for tests only."),
        ("sasl.oauthbearer.client.id", _S, None, _NON_EMPTY, _MED, "OIDC client id."),
        ("sasl.oauthbearer.client.secret", _P, None, None, _MED, "OIDC client secret."),
        ("sasl.oauthbearer.scope", _S, None, _NON_EMPTY, _LOW, "Scope asked of the OIDC token endpoint."),
        ("sasl.oauthbearer.extensions", _S, None, _NON_EMPTY, _LOW,
         "SASL extensions sent with the token, key=value,... (e.g. logicalCluster=...,identityPoolId=...)."),
        ("sasl.oauthbearer.config", _P, None, None, _LOW, "String passed to oauth_cb (librdkafka's name)."),
        ("sasl.kerberos.service.name", _S, "kafka", _NON_EMPTY, _MED,
         "GSSAPI: the primary of the brokers' Kerberos principal (<name>/<broker host>@REALM)."),
        ("sasl.kerberos.principal", _S, None, _NON_EMPTY, _LOW,
         "GSSAPI: the client's Kerberos principal (librdkafka's name; Java: principal= in the JAAS line)."),
        ("sasl.kerberos.keytab", _S, None, _NON_EMPTY, _LOW,
         "GSSAPI: keytab for a kinit-free login (librdkafka's name; Java: keyTab= of sasl.jaas.config); "
         "unset: the ticket cache."),
        ("sasl.kerberos.ticket.renew.window.factor", _DBL, 0.8, _fraction_between(0.5, 1.0), _LOW,
         "GSSAPI with a keytab: log in again once this fraction of the ticket's life has passed."),
        ("sasl.kerberos.ticket.renew.jitter", _DBL, 0.05, _fraction_between(0.0, 0.25), _LOW,
         "GSSAPI: random fraction of the ticket's life added to the renew window."),
        ("sasl.kerberos.min.time.before.relogin", _L, 60_000, _AT_LEAST_0, _LOW,
         "GSSAPI with a keytab: least time between two logins while the ticket is still valid."),
        ("sasl.kerberos.kinit.cmd", _S, "/usr/bin/kinit", None, _LOW,
         "Accepted for Java/librdkafka compatibility; unused (a keytab login needs no kinit)."),
        ("oauth_cb", _FN, None, None, _MED,
         "OAUTHBEARER token callback: oauth_cb(config_str) -> (token, expiry_epoch_seconds[, principal"
         "[, extensions]]), as in confluent-kafka; runs on the token refresher thread."),
        ("sasl.login.retry.backoff.ms", _L, 100, _AT_LEAST_0, _LOW,
         "Initial wait before retrying a failed token fetch."),
        ("sasl.login.retry.backoff.max.ms", _L, 10_000, _AT_LEAST_0, _LOW,
         "Cap of the token fetch retry backoff."),
        ("sasl.login.connect.timeout.ms", _I, 10_000, _AT_LEAST_1, _LOW,
         "Timeout of each network operation of a request to the OIDC token endpoint."),
        ("sasl.login.read.timeout.ms", _I, 10_000, _AT_LEAST_1, _LOW,
         "With sasl.login.connect.timeout.ms: the deadline of a whole OIDC token request (connect, send, "
         "read the answer)."),
        ("metrics.sample.window.ms", _L, 30_000, _AT_LEAST_0, _LOW, "Length of one metrics sample window."),
        ("metrics.num.samples", _I, 2, _AT_LEAST_1, _LOW, "Sample windows kept by a windowed metric."),
        ("metrics.recording.level", _S, "INFO", OneOf(("INFO", "DEBUG", "TRACE")), _LOW,
         "Highest recording level of sensors that record."),
    ]


_CONSUMER_ROWS: list[_Row] = [
    ("group.id", _S, None, _Check(_validate_group_id, "a non-empty string, or unset (None)"), _HI,
     "Consumer group of this consumer; unset for a consumer without a group."),
    ("group.instance.id", _S, None, _Check(_validate_instance_id, "unset (None) or 1-249 of [a-zA-Z0-9._-]"),
     _MED, "Static membership id (unique within the group)."),
    ("group.protocol", _S, "classic", OneOf(("classic", "consumer")), _HI,
     "Rebalance protocol: classic, or consumer (KIP-848, server-side assignment)."),
    ("group.remote.assignor", _S, None, _NON_EMPTY, _MED,
     "Server-side assignor (e.g. uniform, range) for group.protocol=consumer; unset: the broker's default."),
    ("session.timeout.ms", _I, 45_000, _AT_LEAST_1, _HI, "Classic protocol session timeout."),
    ("heartbeat.interval.ms", _I, 3_000, _AT_LEAST_1, _HI, "Classic protocol heartbeat interval."),
    ("partition.assignment.strategy", _LIST, ("range", "cooperative-sticky"), _STRATEGIES, _MED,
     "Client-side assignors offered in JoinGroup (classic protocol), in order of preference."),
    ("max.poll.interval.ms", _I, 300_000, _AT_LEAST_1, _MED,
     "Longest allowed gap between poll() calls before the member leaves; also the rebalance timeout."),
    ("max.poll.records", _I, 500, _AT_LEAST_1, _MED, "Maximum records returned by one poll()."),
    ("revoke.completion", _S, "next-poll", OneOf(("next-poll", "same-poll")), _LOW,
     "KIP-983: next-poll completes a revoke at the start of the poll() after the one that requested it "
     "(delay_revoke() can postpone it); same-poll completes it in the requesting poll(), as before KIP-983."),
    ("enable.auto.commit", _B, True, None, _MED, "Commit consumed positions periodically in the background."),
    ("auto.commit.interval.ms", _I, 5_000, _AT_LEAST_0, _LOW, "Auto-commit period."),
    ("auto.offset.reset", _S, "latest", _OFFSET_RESET, _MED,
     "Where to start without a committed offset, or when the position is out of range."),
    ("isolation.level", _S, "read_uncommitted", OneOf(("read_uncommitted", "read_committed")), _MED,
     "read_committed returns only committed transactional records (up to the last stable offset)."),
    ("fetch.min.bytes", _I, 1, _AT_LEAST_0, _HI, "Minimum bytes a fetch response should carry."),
    ("fetch.max.bytes", _I, 52_428_800, _AT_LEAST_0, _MED, "Maximum bytes of one fetch response."),
    ("fetch.max.wait.ms", _I, 500, _AT_LEAST_0, _LOW, "How long the broker may wait for fetch.min.bytes."),
    ("max.partition.fetch.bytes", _I, 1_048_576, _AT_LEAST_0, _HI, "Maximum bytes per partition per fetch."),
    ("check.crcs", _B, True, None, _LOW, "Verify the CRC32C of fetched record batches."),
    ("max.decompressed.batch.bytes", _I, 67_108_864, _AT_LEAST_1, _MED,
     "Most bytes one compressed record batch may decompress to (default 64 MiB); a batch beyond it is "
     "refused as a decompression bomb with a CorruptRecordError naming topic, partition and offset."),
    ("exclude.internal.topics", _B, True, None, _MED, "Subscription patterns never match internal topics."),
    ("allow.auto.create.topics", _B, True, None, _MED, "Let subscribing auto-create missing topics."),
    ("default.api.timeout.ms", _I, 60_000, _AT_LEAST_0, _MED, "Timeout of blocking calls not given one."),
    ("client.rack", _S, "", None, _LOW, "Rack of this consumer (rack-aware assignment, follower fetching)."),
    ("key.deserializer", _FN, None, None, _HI, "Callable turning key bytes into a key."),
    ("value.deserializer", _FN, None, None, _HI, "Callable turning value bytes into a value."),
    ("interceptor.classes", _LIST, (), _EMPTY_LIST_ONLY, _LOW, "Not supported: must be empty."),
]
_CONSUMER_INTERNAL_ROWS: list[_Row] = [
    ("internal.leave.group.on.close", _B, True, None, _LOW, "Send a leave-group request on close."),
]

_PRODUCER_ROWS: list[_Row] = [
    ("acks", _S, -1, _ACKS, _LOW, "Acknowledgements required: all (-1), 1 (leader only) or 0 (none)."),
    ("enable.idempotence", _B, True, None, _LOW,
     "Exactly one copy of each record per partition (needs acks=all, retries>0, max.in.flight<=5)."),
    ("linger.ms", _L, 5, _AT_LEAST_0, _MED, "How long to wait for more records before sending a batch."),
    ("batch.size", _I, 16_384, _AT_LEAST_0, _MED, "Target batch size in bytes per partition."),
    ("buffer.memory", _L, 33_554_432, _AT_LEAST_0, _HI, "Total bytes of records waiting to be sent."),
    ("max.block.ms", _L, 60_000, _AT_LEAST_0, _MED,
     "How long send() and partitions_for() may block for metadata or buffer space."),
    ("delivery.timeout.ms", _I, 120_000, _AT_LEAST_0, _MED,
     "Bound on the time to report a send's outcome; at least linger.ms + request.timeout.ms."),
    ("retries", _I, INT32_MAX, Range(0, INT32_MAX), _HI, "Retries of a failed produce request."),
    ("max.in.flight.requests.per.connection", _I, 5, _AT_LEAST_1, _LOW,
     "Unacknowledged requests per connection (at most 5 with idempotence)."),
    ("compression.type", _S, "none", OneOf(("none", "gzip", "snappy", "lz4", "zstd")), _HI,
     "Compression codec of produced batches."),
    ("compression.gzip.level", _I, -1, _GZIP_LEVEL, _MED, "gzip level (-1: the codec's default)."),
    ("compression.lz4.level", _I, 9, Range(1, 17), _MED, "lz4 level."),
    ("compression.zstd.level", _I, 3, Range(-131_072, 22), _MED, "zstd level."),
    ("partitioner", _S, "murmur2_random", OneOf(PARTITIONERS), _MED,
     "How keyed records find their partition (librdkafka's names): murmur2_random (Java's default: murmur2 "
     "of the key, sticky partitioning without a key), murmur2, consistent_random (librdkafka's default: "
     "CRC32 of the key), consistent, fnv1a_random, fnv1a, random."),
    ("partitioner.ignore.keys", _B, False, None, _MED,
     "Ignore record keys when choosing a partition (sticky partitioning for every record)."),
    ("partitioner.adaptive.partitioning.enable", _B, True, None, _LOW, "Send more to faster brokers."),
    ("partitioner.availability.timeout.ms", _L, 0, _AT_LEAST_0, _LOW,
     "Treat a partition as unavailable after this long without progress (0: never)."),
    ("max.request.size", _I, 1_048_576, _AT_LEAST_0, _MED, "Maximum size of one produce request."),
    ("metadata.max.idle.ms", _L, 300_000, Range(min=5_000), _LOW,
     "Forget the metadata of a topic not produced to for this long."),
    ("transactional.id", _S, None, _TRANSACTIONAL_ID, _LOW,
     "Enables transactions (init_transactions(), begin/commit/abort_transaction()); needs idempotence."),
    ("transaction.timeout.ms", _I, 60_000, _AT_LEAST_1, _LOW,
     "How long the transaction coordinator lets a transaction stay open before it aborts it."),
    ("key.serializer", _FN, None, None, _HI, "Callable turning a key into bytes."),
    ("value.serializer", _FN, None, None, _HI, "Callable turning a value into bytes."),
    ("interceptor.classes", _LIST, (), _EMPTY_LIST_ONLY, _LOW, "Not supported: must be empty."),
]

_ADMIN_ROWS: list[_Row] = [
    ("default.api.timeout.ms", _I, 60_000, _AT_LEAST_0, _MED, "Timeout of admin calls not given one."),
    ("retries", _I, INT32_MAX, Range(0, INT32_MAX), _LOW, "Retries of a failed request."),
]
# fmt: on


def _make_def(client: str, rows: Sequence[_Row], internal_rows: Sequence[_Row] = ()) -> ConfigDef:
    cdef = ConfigDef(client)
    for row in rows:
        cdef.define(*row)
    for row in internal_rows:
        cdef.define(*row, internal=True)
    return cdef


CONSUMER_CONFIG_DEF: Final = _make_def(
    "consumer",
    _common_rows(receive_buffer_bytes=65_536, connections_max_idle_ms=540_000, enable_metrics_push=True)
    + _CONSUMER_ROWS,
    _CONSUMER_INTERNAL_ROWS,
)
PRODUCER_CONFIG_DEF: Final = _make_def(
    "producer",
    _common_rows(receive_buffer_bytes=32_768, connections_max_idle_ms=540_000, enable_metrics_push=True)
    + _PRODUCER_ROWS,
)
ADMIN_CONFIG_DEF: Final = _make_def(
    "admin",
    _common_rows(receive_buffer_bytes=65_536, connections_max_idle_ms=300_000, enable_metrics_push=False)
    + _ADMIN_ROWS,
)

_CONSUMER_PROTOCOL_UNSUPPORTED: Final = (
    "partition.assignment.strategy",
    "heartbeat.interval.ms",
    "session.timeout.ms",
)
_CLASSIC_PROTOCOL_UNSUPPORTED: Final = ("group.remote.assignor",)

# Java: ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION_FOR_IDEMPOTENCE
MAX_IN_FLIGHT_FOR_IDEMPOTENCE: Final = 5


# ---------------------------------------------------------------------------------------------------------
# Typed config objects
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ClientConfig:
    """Base of the parsed configs: attribute access by python name, ``get()`` by dotted name."""

    CONFIG_DEF: ClassVar[ConfigDef]

    explicit: frozenset[str]
    """The dotted names the user gave (Java's ``originals().keySet()``)."""

    def get(self, name: str) -> Any:
        """The value of a dotted key, e.g. ``cfg.get("max.poll.records")``."""
        if name not in self.CONFIG_DEF:
            raise self.CONFIG_DEF.unknown_key_error([name])
        return getattr(self, python_name(name))

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    def is_explicit(self, name: str) -> bool:
        return name in self.explicit

    def as_dict(self) -> dict[str, Any]:
        """Every key's effective value, by dotted name."""
        return {name: getattr(self, python_name(name)) for name in self.CONFIG_DEF.keys}

    def bootstrap_addresses(self) -> tuple[tuple[str, int], ...]:
        """``bootstrap.servers`` parsed into ``(host, port)`` pairs."""
        servers: tuple[str, ...] = self.get("bootstrap.servers")
        return tuple(parse_bootstrap_address(entry) for entry in servers)

    @classmethod
    def _build(cls, values: Mapping[str, Any], explicit: frozenset[str]) -> Any:
        kwargs = {python_name(name): value for name, value in values.items()}
        return cls(explicit=explicit, **kwargs)


@dataclass(frozen=True, kw_only=True)
class _CommonFields(ClientConfig):
    bootstrap_servers: tuple[str, ...]
    client_id: str
    client_dns_lookup: str
    metadata_max_age_ms: int
    send_buffer_bytes: int
    receive_buffer_bytes: int
    reconnect_backoff_ms: int
    reconnect_backoff_max_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    request_timeout_ms: int
    socket_connection_setup_timeout_ms: int
    socket_connection_setup_timeout_max_ms: int
    connections_max_idle_ms: int
    enable_metrics_push: bool
    security_protocol: str
    ssl_truststore_location: str | None
    ssl_truststore_type: str
    ssl_truststore_password: Password | None
    ssl_truststore_certificates: Password | None
    ssl_keystore_certificate_chain: Password | None
    ssl_keystore_key: Password | None
    ssl_keystore_location: str | None
    ssl_keystore_type: str
    ssl_keystore_password: Password | None
    ssl_certificate_location: str | None
    ssl_key_location: str | None
    ssl_key_password: Password | None
    ssl_endpoint_identification_algorithm: str
    enable_ssl_certificate_verification: bool
    sasl_mechanism: str
    sasl_jaas_config: Password | None
    sasl_username: str | None
    sasl_password: Password | None
    sasl_scram_min_iterations: int
    sasl_scram_max_iterations: int
    sasl_oauthbearer_method: str
    sasl_oauthbearer_token_endpoint_url: str | None
    sasl_oauthbearer_token_endpoint_allow_http: bool
    sasl_oauthbearer_client_id: str | None
    sasl_oauthbearer_client_secret: Password | None
    sasl_oauthbearer_scope: str | None
    sasl_oauthbearer_extensions: str | None
    sasl_oauthbearer_config: Password | None
    sasl_kerberos_service_name: str
    sasl_kerberos_principal: str | None
    sasl_kerberos_keytab: str | None
    sasl_kerberos_ticket_renew_window_factor: float
    sasl_kerberos_ticket_renew_jitter: float
    sasl_kerberos_min_time_before_relogin: int
    sasl_kerberos_kinit_cmd: str
    oauth_cb: Callable[..., Any] | None
    sasl_login_retry_backoff_ms: int
    sasl_login_retry_backoff_max_ms: int
    sasl_login_connect_timeout_ms: int
    sasl_login_read_timeout_ms: int
    metrics_sample_window_ms: int
    metrics_num_samples: int
    metrics_recording_level: str


@dataclass(frozen=True, kw_only=True)
class ConsumerConfig(_CommonFields):
    CONFIG_DEF: ClassVar[ConfigDef] = CONSUMER_CONFIG_DEF

    group_id: str | None
    group_instance_id: str | None
    group_protocol: str
    group_remote_assignor: str | None
    session_timeout_ms: int
    heartbeat_interval_ms: int
    partition_assignment_strategy: tuple[Any, ...]
    """Assignor names (``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``, ``module:Class``),
    assignor objects or classes; resolved by the classic protocol implementation."""
    max_poll_interval_ms: int
    max_poll_records: int
    revoke_completion: str
    """``next-poll`` (KIP-983, default) or ``same-poll`` (the pre-KIP-983 behaviour)."""
    enable_auto_commit: bool
    """Effective value: false without a ``group.id`` unless explicitly set (then it is an error)."""
    auto_commit_interval_ms: int
    auto_offset_reset: str
    """``earliest``, ``latest``, ``none`` or ``by_duration:<ISO-8601>``."""
    isolation_level: str
    fetch_min_bytes: int
    fetch_max_bytes: int
    fetch_max_wait_ms: int
    max_partition_fetch_bytes: int
    check_crcs: bool
    max_decompressed_batch_bytes: int
    exclude_internal_topics: bool
    allow_auto_create_topics: bool
    default_api_timeout_ms: int
    client_rack: str
    key_deserializer: Callable[..., Any] | None
    value_deserializer: Callable[..., Any] | None
    interceptor_classes: tuple[Any, ...]
    internal_leave_group_on_close: bool

    @property
    def uses_consumer_protocol(self) -> bool:
        """True for ``group.protocol=consumer`` (KIP-848)."""
        return self.group_protocol == "consumer"

    @property
    def auto_offset_reset_duration_ms(self) -> int | None:
        """For ``by_duration:<d>``: the duration in milliseconds; otherwise None."""
        if not self.auto_offset_reset.startswith("by_duration:"):
            return None
        return parse_iso8601_duration_ms(self.auto_offset_reset[len("by_duration:") :])


@dataclass(frozen=True, kw_only=True)
class ProducerConfig(_CommonFields):
    CONFIG_DEF: ClassVar[ConfigDef] = PRODUCER_CONFIG_DEF

    acks: int
    """-1 (``all``), 0 or 1."""
    enable_idempotence: bool
    """Effective value: disabled when not explicitly enabled and acks/retries conflict (as Java does)."""
    linger_ms: int
    batch_size: int
    buffer_memory: int
    max_block_ms: int
    delivery_timeout_ms: int
    retries: int
    max_in_flight_requests_per_connection: int
    compression_type: str
    compression_gzip_level: int
    compression_lz4_level: int
    compression_zstd_level: int
    partitioner: str
    """One of :data:`kafka_handoff.producer.partitioner.PARTITIONERS`."""
    partitioner_ignore_keys: bool
    partitioner_adaptive_partitioning_enable: bool
    partitioner_availability_timeout_ms: int
    max_request_size: int
    metadata_max_idle_ms: int
    transactional_id: str | None
    transaction_timeout_ms: int
    key_serializer: Callable[..., Any] | None
    value_serializer: Callable[..., Any] | None
    interceptor_classes: tuple[Any, ...]

    @property
    def compression_level(self) -> int | None:
        """The configured level of the chosen codec (None for none/snappy)."""
        return {
            "gzip": self.compression_gzip_level,
            "lz4": self.compression_lz4_level,
            "zstd": self.compression_zstd_level,
        }.get(self.compression_type)


@dataclass(frozen=True, kw_only=True)
class AdminConfig(_CommonFields):
    CONFIG_DEF: ClassVar[ConfigDef] = ADMIN_CONFIG_DEF

    default_api_timeout_ms: int
    retries: int


# ---------------------------------------------------------------------------------------------------------
# Parsing with the cross-key rules
# ---------------------------------------------------------------------------------------------------------

_consumer_seq = itertools.count(1)
_producer_seq = itertools.count(1)
_admin_seq = itertools.count(1)


def _validate_security(values: dict[str, Any], explicit: frozenset[str]) -> None:
    """Cross-key rules of the security settings (the details live in :mod:`kafka_handoff.security`)."""
    from kafka_handoff.security import validate_security_values

    validate_security_values(values, explicit)


def _reconnect_backoff(values: dict[str, Any], explicit: frozenset[str]) -> None:
    # Java: reconnect.backoff.ms set without reconnect.backoff.max.ms disables the exponential backoff.
    if "reconnect.backoff.ms" in explicit and "reconnect.backoff.max.ms" not in explicit:
        values["reconnect.backoff.max.ms"] = values["reconnect.backoff.ms"]


def parse_client_values(
    config_def: ConfigDef, props: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], frozenset[str]]:
    """What every client's parser does first: librdkafka's aliases resolved, every key parsed and validated
    against ``config_def``, the reconnect back-off and the security settings checked.  Returns the resolved
    properties, every key's value and the keys given explicitly."""
    props = resolve_aliases(props) if isinstance(props, Mapping) else props
    values, explicit = config_def.parse(props)
    _reconnect_backoff(values, explicit)
    _validate_security(values, explicit)
    return props, values, explicit


def _is_set(props: Mapping[str, Any], name: str) -> bool:
    """Java counts a key as set when its original value is non-null and not blank."""
    if name not in props or props[name] is None:
        return False
    value = props[name]
    return not (isinstance(value, str) and not value.strip())


def parse_consumer_config(props: Mapping[str, Any]) -> ConsumerConfig:
    """Parse consumer configuration (Kafka's dotted names, Java 4.x defaults and rules)."""
    props, values, explicit = parse_client_values(CONSUMER_CONFIG_DEF, props)

    protocol = values["group.protocol"]
    unsupported = _CONSUMER_PROTOCOL_UNSUPPORTED if protocol == "consumer" else _CLASSIC_PROTOCOL_UNSUPPORTED
    offending = [name for name in unsupported if _is_set(props, name)]
    if offending:
        raise ConfigError(f"{', '.join(offending)} cannot be set when group.protocol={protocol}")

    if values["group.id"] is None:
        if "enable.auto.commit" not in explicit:
            values["enable.auto.commit"] = False
        elif values["enable.auto.commit"]:
            raise ConfigError(
                "Invalid value True for configuration 'enable.auto.commit': enable.auto.commit cannot be "
                "set to true when group.id is not set (allowed: false, or set group.id)"
            )

    if protocol == "classic" and values["heartbeat.interval.ms"] >= values["session.timeout.ms"]:
        raise ConfigError(
            f"Invalid value {values['heartbeat.interval.ms']!r} for configuration 'heartbeat.interval.ms': "
            f"must be lower than session.timeout.ms ({values['session.timeout.ms']})"
        )

    if not values["client.id"]:
        instance = values["group.instance.id"]
        suffix = instance if instance is not None else str(next(_consumer_seq))
        group = values["group.id"] if values["group.id"] is not None else "null"
        values["client.id"] = f"consumer-{group}-{suffix}"
    config: ConsumerConfig = ConsumerConfig._build(values, explicit)
    return config


def parse_producer_config(props: Mapping[str, Any]) -> ProducerConfig:
    """Parse producer configuration (Kafka's dotted names, Java 4.x defaults and rules)."""
    _props, values, explicit = parse_client_values(PRODUCER_CONFIG_DEF, props)

    if values["transactional.id"] is not None and not values["enable.idempotence"]:
        raise ConfigError(
            "Cannot set a transactional.id without also enabling idempotence "
            "(allowed: enable.idempotence=true, or no transactional.id)"
        )
    if values["enable.idempotence"]:
        user_idempotence = "enable.idempotence" in explicit
        conflicts = []
        if values["retries"] == 0:
            conflicts.append("Invalid value 0 for configuration 'retries': must be greater than 0")
        if values["acks"] != -1:
            conflicts.append(f"Invalid value {values['acks']} for configuration 'acks': must be all (-1)")
        if conflicts and (user_idempotence or values["transactional.id"] is not None):
            raise ConfigError(
                "; ".join(conflicts) + " when enable.idempotence=true (allowed: acks=all and retries > 0, "
                "or enable.idempotence=false)"
            )
        if conflicts:
            # Java: idempotence not explicitly enabled and conflicting settings -> idempotence disabled.
            values["enable.idempotence"] = False
        elif values["max.in.flight.requests.per.connection"] > MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
            raise ConfigError(
                f"Invalid value {values['max.in.flight.requests.per.connection']!r} for configuration "
                f"'max.in.flight.requests.per.connection': must be at most {MAX_IN_FLIGHT_FOR_IDEMPOTENCE} "
                "with enable.idempotence=true (allowed: [1,...,5], or disable idempotence)"
            )

    minimum = values["linger.ms"] + values["request.timeout.ms"]
    if values["delivery.timeout.ms"] < minimum:
        if "delivery.timeout.ms" in explicit:
            raise ConfigError(
                f"Invalid value {values['delivery.timeout.ms']!r} for configuration 'delivery.timeout.ms': "
                f"must be at least linger.ms + request.timeout.ms ({minimum})"
            )
        # Java (KafkaProducer.configureDeliveryTimeout): raise the default to the minimum.
        values["delivery.timeout.ms"] = min(minimum, INT32_MAX)

    if "client.id" not in explicit:
        values["client.id"] = f"producer-{next(_producer_seq)}"
    config: ProducerConfig = ProducerConfig._build(values, explicit)
    return config


def parse_admin_config(props: Mapping[str, Any]) -> AdminConfig:
    """Parse admin client configuration (Kafka's dotted names, Java 4.x defaults)."""
    _props, values, explicit = parse_client_values(ADMIN_CONFIG_DEF, props)
    if not values["client.id"]:
        values["client.id"] = f"adminclient-{next(_admin_seq)}"
    config: AdminConfig = AdminConfig._build(values, explicit)
    return config


def _check_fields() -> None:
    """Keep the typed dataclasses and the ConfigDefs in step (checked at import time)."""
    for cls in (ConsumerConfig, ProducerConfig, AdminConfig):
        declared = {f.name for f in fields(cls)} - {"explicit"}
        defined = {python_name(name) for name in cls.CONFIG_DEF.keys}
        if declared != defined:
            raise AssertionError(f"{cls.__name__} fields differ from its ConfigDef: {declared ^ defined}")


_check_fields()
