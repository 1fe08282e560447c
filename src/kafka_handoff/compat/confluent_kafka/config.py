"""librdkafka configuration names translated to kafka-handoff's (Kafka's Java names).

Every key a confluent-kafka program may pass falls in one of four kinds (:data:`RULES`):

* **translated** -- renamed to our key, the value converted where librdkafka spells it differently
  (``auto.offset.reset=smallest`` -> ``earliest``, ``queue.buffering.max.kbytes`` -> ``buffer.memory``);
* **compat** -- handled by the compatibility layer itself (callbacks such as ``error_cb``/``stats_cb``/
  ``on_commit``, ``enable.partition.eof``, ``enable.auto.offset.store``, ``statistics.interval.ms``, ...);
* **no-op** -- accepted and ignored because kafka-handoff already behaves that way or the key only tunes
  librdkafka's internals (``socket.nagle.disable``, ``api.version.request``, ``queued.min.messages``, ...);
  the reason is recorded in :attr:`TranslatedConfig.ignored`;
* **refused** -- a :class:`KafkaException` (``_INVALID_ARG``) whose message names the key and the reason.

Keys that kafka-handoff's client already knows under the same name (``bootstrap.servers``, ``group.id``,
``session.timeout.ms``, ``security.protocol``, ...) pass through unchanged; any other key is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from kafka_handoff.compat.confluent_kafka.error import KafkaError, KafkaException
from kafka_handoff.config import (
    ADMIN_CONFIG_DEF,
    CONFIG_ALIASES,
    CONSUMER_CONFIG_DEF,
    PRODUCER_CONFIG_DEF,
)

__all__ = ["RULES", "Client", "Rule", "TranslatedConfig", "rules_table", "translate_config"]

Client = Literal["consumer", "producer", "admin"]
Kind = Literal["translated", "compat", "no-op", "refused"]

_ALL: Final = frozenset({"consumer", "producer", "admin"})
_CONSUMER: Final = frozenset({"consumer"})
_PRODUCER: Final = frozenset({"producer"})

_NATIVE_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "consumer": CONSUMER_CONFIG_DEF.names | frozenset(CONFIG_ALIASES),
    "producer": PRODUCER_CONFIG_DEF.names | frozenset(CONFIG_ALIASES),
    "admin": ADMIN_CONFIG_DEF.names | frozenset(CONFIG_ALIASES),
}


def _refuse(key: str, reason: str) -> KafkaException:
    return KafkaException(
        KafkaError(KafkaError._INVALID_ARG, f'Configuration property "{key}" is not supported: {reason}')
    )


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise _refuse(key, f"invalid value {value!r} (allowed: true, false)")


def _offset_reset(key: str, value: Any) -> str:
    text = str(value).strip().lower()
    mapped = {
        "smallest": "earliest",
        "earliest": "earliest",
        "beginning": "earliest",
        "largest": "latest",
        "latest": "latest",
        "end": "latest",
        "error": "none",
        "none": "none",
    }.get(text)
    if mapped is None:
        raise _refuse(
            key,
            f"invalid value {value!r} (allowed: smallest, earliest, beginning, largest, latest, end, error)",
        )
    return mapped


def _socket_buffer(key: str, value: Any) -> int:
    number = int(value)
    return -1 if number == 0 else number  # librdkafka's 0 is the OS default, Java's -1


def _kbytes(key: str, value: Any) -> int:
    return int(value) * 1024


def _refresh_interval(key: str, value: Any) -> int:
    number = int(value)
    return 2**31 - 1 if number < 0 else number  # librdkafka's -1 disables periodic refresh


def _acks(key: str, value: Any) -> Any:
    return value


def _codec(key: str, value: Any) -> str:
    text = str(value).strip().lower()
    if text not in ("none", "gzip", "snappy", "lz4", "zstd"):
        raise _refuse(key, f"invalid value {value!r} (allowed: none, gzip, snappy, lz4, zstd)")
    return text


@dataclass(frozen=True, slots=True)
class Rule:
    """How one librdkafka key is handled (see the module docstring for the kinds)."""

    kind: Kind
    target: str | None = None
    """The native key (``translated``) or the compat setting name (``compat``; default: the key itself)."""
    convert: Callable[[str, Any], Any] | None = None
    reason: str = ""
    clients: frozenset[str] = _ALL
    allowed_when: Callable[[str, Any], bool] | None = None
    """For ``no-op``: the values that keep the meaning; others are refused with ``reason``."""


def _t(target: str, convert: Callable[[str, Any], Any] | None = None, clients: frozenset[str] = _ALL) -> Rule:
    return Rule("translated", target, convert, clients=clients)


def _c(reason: str, clients: frozenset[str] = _ALL, target: str | None = None) -> Rule:
    return Rule("compat", target, reason=reason, clients=clients)


def _n(
    reason: str, clients: frozenset[str] = _ALL, allowed_when: Callable[[str, Any], bool] | None = None
) -> Rule:
    return Rule("no-op", reason=reason, clients=clients, allowed_when=allowed_when)


def _r(reason: str, clients: frozenset[str] = _ALL) -> Rule:
    return Rule("refused", reason=reason, clients=clients)


_TUNING = "tunes librdkafka's internal queues/threads; kafka-handoff's fetcher and sender size themselves"
_VERSIONS = "kafka-handoff always negotiates protocol versions with ApiVersions (brokers 2.1+)"

RULES: Final[Mapping[str, Rule]] = {
    # --- common ---------------------------------------------------------------------------------------------
    "metadata.broker.list": _t("bootstrap.servers"),
    "socket.timeout.ms": _t("request.timeout.ms"),
    "socket.send.buffer.bytes": _t("send.buffer.bytes", _socket_buffer),
    "socket.receive.buffer.bytes": _t("receive.buffer.bytes", _socket_buffer),
    "topic.metadata.refresh.interval.ms": _t("metadata.max.age.ms", _refresh_interval),
    "error_cb": _c("called as error_cb(KafkaError) from poll()/flush() for client-level errors"),
    "throttle_cb": _c("accepted; kafka-handoff honours broker throttling itself and does not report it"),
    "stats_cb": _c("called with librdkafka-style statistics JSON every statistics.interval.ms, from poll()"),
    "statistics.interval.ms": _c("interval of stats_cb (0 disables, the default)"),
    "logger": _c("a logging.Logger that receives kafka-handoff's log records while the client is open"),
    "log_level": _c("syslog level (0-7) applied to the logger= handler"),
    "debug": _n("librdkafka debug contexts; kafka-handoff logs at DEBUG through Python logging (logger=)"),
    "log.queue": _n("log records are emitted by Python logging on the thread that logs them"),
    "log.thread.name": _n("Python logging records carry the thread name"),
    "log.connection.close": _n("connection closes are logged at DEBUG"),
    "socket.keepalive.enable": _n(
        "dead connections are detected by request.timeout.ms; idle ones close after connections.max.idle.ms"
    ),
    "socket.nagle.disable": _n("kafka-handoff always sets TCP_NODELAY"),
    "socket.max.fails": _n("failed connections are retried with reconnect.backoff.ms backoff"),
    "api.version.request": _n(_VERSIONS),
    "api.version.request.timeout.ms": _n(_VERSIONS),
    "api.version.fallback.ms": _n(_VERSIONS),
    "broker.version.fallback": _n(_VERSIONS),
    "enable.sparse.connections": _n("connections are opened only to brokers a request needs"),
    "topic.metadata.refresh.fast.interval.ms": _n("metadata refreshes on errors use retry.backoff.ms"),
    "topic.metadata.refresh.sparse": _n("metadata requests name only the topics in use"),
    "topic.metadata.propagation.max.ms": _n(_TUNING),
    "enable.random.seed": _n("Python's random module is seeded by the interpreter"),
    "builtin.features": _n("a read-only librdkafka property"),
    "client.software.name": _n("kafka-handoff reports its own name in ApiVersions"),
    "client.software.version": _n("kafka-handoff reports its own version in ApiVersions"),
    "internal.termination.signal": _n(_TUNING),
    "broker.address.ttl": _n("addresses are resolved on every connection attempt"),
    "broker.address.family": _n(
        "kafka-handoff tries every address getaddrinfo returns (only 'any' keeps that meaning)",
        allowed_when=lambda key, value: str(value).strip().lower() == "any",
    ),
    "resolve_cb": _r("custom resolvers are not supported; use client.dns.lookup or /etc/hosts"),
    "connect_cb": _r("custom socket connectors are not supported"),
    "closesocket_cb": _r("custom socket connectors are not supported"),
    "open_cb": _r("not applicable: kafka-handoff opens no files"),
    "socket_cb": _r("custom socket factories are not supported"),
    "opaque": _r(
        "librdkafka's C opaque pointer has no meaning in Python; close over your object in callbacks"
    ),
    "plugin.library.paths": _r("librdkafka plugins (C libraries) cannot be loaded into kafka-handoff"),
    "interceptors": _r("librdkafka interceptors are C plugins; use interceptor.classes (Python classes)"),
    "ssl.engine.location": _r("OpenSSL engines are not supported by Python's ssl module"),
    "ssl.engine.id": _r("OpenSSL engines are not supported by Python's ssl module"),
    "ssl.providers": _r("OpenSSL providers are not configurable through Python's ssl module"),
    "ssl_engine_callback_data": _r("OpenSSL engines are not supported by Python's ssl module"),
    "ssl.certificate.verify_cb": _r("custom certificate verification callbacks are not supported"),
    "ssl.keystore.password": _r(
        "PKCS#12 keystores are not supported; use ssl.certificate.location/ssl.key.location"
    ),
    "ssl.crl.location": _r("certificate revocation lists are not supported"),
    "ssl.cipher.suites": _r("cipher selection is not configurable yet"),
    "ssl.curves.list": _r("curve selection is not configurable yet"),
    "ssl.sigalgs.list": _r("signature algorithm selection is not configurable yet"),
    "enable.ssl.certificate.verification": _t("enable.ssl.certificate.verification"),
    "ssl.ca.certificate.stores": _n(
        "Windows certificate stores; Python's default trust store is used unless ssl.ca.location is set"
    ),
    "sasl.kerberos.service.name": _r("GSSAPI is not supported by this client build"),
    "sasl.kerberos.principal": _r("GSSAPI is not supported by this client build"),
    "sasl.kerberos.kinit.cmd": _r("GSSAPI is not supported by this client build"),
    "sasl.kerberos.keytab": _r("GSSAPI is not supported by this client build"),
    "sasl.kerberos.min.time.before.relogin": _r("GSSAPI is not supported by this client build"),
    "sasl.oauthbearer.token.endpoint.url": _t("sasl.oauthbearer.token.endpoint.url"),
    "enable.sasl.oauthbearer.unsecure.jwt": _r("unsecured JWTs are not supported; provide oauth_cb"),
    # --- consumer -------------------------------------------------------------------------------------------
    "auto.offset.reset": _t("auto.offset.reset", _offset_reset, _CONSUMER),
    "fetch.wait.max.ms": _t("fetch.max.wait.ms", clients=_CONSUMER),
    "fetch.message.max.bytes": _t("max.partition.fetch.bytes", clients=_CONSUMER),
    "auto.commit.enable": _t("enable.auto.commit", clients=_CONSUMER),
    "enable.partition.eof": _c(
        "a _PARTITION_EOF event when a partition's position reaches its end", _CONSUMER
    ),
    "enable.auto.offset.store": _c("when false, only store_offsets() advances what is committed", _CONSUMER),
    "on_commit": _c("called as on_commit(err, [TopicPartition]) from poll() after each commit", _CONSUMER),
    "offset_commit_cb": _c("alias of on_commit", _CONSUMER, target="on_commit"),
    "queued.min.messages": _n(_TUNING, _CONSUMER),
    "queued.max.messages.kbytes": _n(_TUNING + " (the prefetch is bounded by fetch.max.bytes)", _CONSUMER),
    "fetch.error.backoff.ms": _n("fetch errors back off by retry.backoff.ms", _CONSUMER),
    "fetch.queue.backoff.ms": _n(_TUNING, _CONSUMER),
    "coordinator.query.interval.ms": _n("the coordinator is looked up again whenever it is lost", _CONSUMER),
    "consume.callback.max.messages": _n(_TUNING, _CONSUMER),
    "offset.store.method": _n(
        "offsets are always stored in the broker (only 'broker' is allowed)",
        _CONSUMER,
        allowed_when=lambda key, value: str(value).strip().lower() == "broker",
    ),
    "rebalance_cb": _r("pass on_assign=, on_revoke= and on_lost= to subscribe()", _CONSUMER),
    "group.protocol.type": _n("always 'consumer'", _CONSUMER),
    # --- producer (the producer helper owns these rows) ----------------------------------------------------
    "queue.buffering.max.ms": _t("linger.ms", clients=_PRODUCER),
    "compression.codec": _t("compression.type", _codec, _PRODUCER),
    "compression.type": _t("compression.type", _codec, _PRODUCER),
    "queue.buffering.max.kbytes": _t("buffer.memory", _kbytes, _PRODUCER),
    "message.timeout.ms": _t("delivery.timeout.ms", clients=_PRODUCER),
    "request.required.acks": _t("acks", _acks, _PRODUCER),
    "message.send.max.retries": _t("retries", clients=_PRODUCER),
    "max.in.flight": _t("max.in.flight.requests.per.connection", clients=_PRODUCER),
    "message.max.bytes": _t("max.request.size", clients=_PRODUCER),
    "queue.buffering.max.messages": _c(
        "produce() raises BufferError when this many messages are queued", _PRODUCER
    ),
    "on_delivery": _c("on_delivery(err, msg), served from poll()/flush()", _PRODUCER),
    "dr_cb": _c("alias of on_delivery", _PRODUCER, target="on_delivery"),
    "dr_msg_cb": _c("alias of on_delivery", _PRODUCER, target="on_delivery"),
    "delivery.report.only.error": _c("only failed deliveries reach on_delivery", _PRODUCER),
    "partitioner": _c(
        "librdkafka's partitioners (consistent_random default, murmur2_random, ...)", _PRODUCER
    ),
    "compression.level": _c("the level for the chosen codec", _PRODUCER),
    "batch.num.messages": _n("batches are bounded by batch.size (bytes)", _PRODUCER),
    "sticky.partitioning.linger.ms": _n("keyless records stick to a partition per batch", _PRODUCER),
    "enable.gapless.guarantee": _n(
        "idempotence already stops on a gap (only false keeps the meaning)",
        _PRODUCER,
        allowed_when=lambda key, value: not _bool(key, value),
    ),
    "partitioner_cb": _r("custom partitioner callbacks: use the native Producer's partitioner", _PRODUCER),
    "msg_order_cmp": _r("not applicable: librdkafka's C callback", _PRODUCER),
    "queuing.strategy": _n("always fifo", _PRODUCER, allowed_when=lambda key, value: str(value) == "fifo"),
}


@dataclass(slots=True)
class TranslatedConfig:
    """The result of :func:`translate_config`."""

    native: dict[str, Any] = field(default_factory=dict)
    """Our keys for the native client's constructor."""
    compat: dict[str, Any] = field(default_factory=dict)
    """Settings the compatibility layer handles (callbacks, enable.partition.eof, ...), by librdkafka name."""
    ignored: dict[str, str] = field(default_factory=dict)
    """No-op keys given, with the reason each is safe to ignore."""


def _flatten(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``default.topic.config`` (a legacy dict of topic-level keys) merged into the top level."""
    out: dict[str, Any] = {}
    for key, value in conf.items():
        if key == "default.topic.config":
            if not isinstance(value, Mapping):
                raise _refuse(key, "expected a dict of topic configuration")
            for k, v in value.items():
                out.setdefault(k, v)
        else:
            out[key] = value
    return out


def translate_config(conf: Mapping[str, Any] | None, client: Client, **kwargs: Any) -> TranslatedConfig:
    """Split a confluent-kafka configuration dict into native keys, compat settings and ignored keys.

    ``kwargs`` are merged like confluent-kafka's keyword configuration (e.g. ``logger=``).  Raises
    :class:`KafkaException` (``_INVALID_ARG``) naming the key for a refused or unknown key.
    """
    merged: dict[str, Any] = dict(conf or {})
    merged.update(kwargs)
    result = TranslatedConfig()
    native_keys = _NATIVE_KEYS[client]
    for key, value in _flatten(merged).items():
        if not isinstance(key, str):
            raise _refuse(str(key), "configuration keys must be strings")
        rule = RULES.get(key)
        if rule is not None and client not in rule.clients:
            if key in native_keys:
                rule = None
            else:
                result.ignored[key] = f"a {'/'.join(sorted(rule.clients))} property; ignored by the {client}"
                continue
        if rule is None:
            if key in native_keys:
                result.native[key] = value
                continue
            if any(key in keys for keys in _NATIVE_KEYS.values()):
                result.ignored[key] = (
                    f"not a {client} property; ignored (librdkafka warns and ignores it too)"
                )
                continue
            raise _refuse(
                key, f"unknown property for a {client} (see docs/migrating.md for the supported keys)"
            )
        if rule.kind == "translated":
            target = rule.target or key
            converted = rule.convert(key, value) if rule.convert is not None else value
            if target in result.native and key != target and result.native[target] != converted:
                raise _refuse(key, f"conflicts with '{target}', which is also set")
            result.native[target] = converted
        elif rule.kind == "compat":
            result.compat[rule.target or key] = value
        elif rule.kind == "no-op":
            if rule.allowed_when is not None and not rule.allowed_when(key, value):
                raise _refuse(key, f"value {value!r} cannot be honoured: {rule.reason}")
            result.ignored[key] = rule.reason
        else:
            raise _refuse(key, rule.reason)
    return result


def compat_bool(conf: TranslatedConfig, key: str, default: bool) -> bool:
    """A boolean compat setting (``"true"``/``"false"`` strings accepted, as librdkafka does)."""
    if key not in conf.compat:
        return default
    return _bool(key, conf.compat[key])


def compat_int(conf: TranslatedConfig, key: str, default: int) -> int:
    """An integer compat setting."""
    if key not in conf.compat:
        return default
    value = conf.compat[key]
    try:
        return int(value)
    except (TypeError, ValueError):
        raise _refuse(key, f"invalid value {value!r} (expected an integer)") from None


def compat_callable(conf: TranslatedConfig, key: str) -> Callable[..., Any] | None:
    """A callback compat setting (``None`` when unset); refuses a non-callable naming the key."""
    value = conf.compat.get(key)
    if value is None:
        return None
    if not callable(value):
        raise _refuse(key, f"expected a callable, got {type(value).__name__}")
    return value  # type: ignore[no-any-return]


def rules_table() -> list[tuple[str, str, str, str]]:
    """``(librdkafka key, kind, our key or handling, clients)`` rows, for the documentation."""
    rows: list[tuple[str, str, str, str]] = []
    for key, rule in sorted(RULES.items()):
        how = rule.target or key if rule.kind == "translated" else rule.reason
        rows.append((key, rule.kind, how, ",".join(sorted(rule.clients))))
    return rows
