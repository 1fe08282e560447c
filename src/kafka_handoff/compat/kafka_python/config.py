"""kafka-python's underscore configuration names, translated to kafka-handoff's dotted Kafka names.

Every key kafka-python's ``KafkaConsumer``, ``KafkaProducer`` and ``KafkaAdminClient`` accept is in exactly
one of four groups (docs/migrating.md has the table):

* **translated** -- a native key (``session_timeout_ms`` -> ``session.timeout.ms``, ``ssl_cafile`` ->
  ``ssl.truststore.location``, ``sasl_plain_username`` -> ``sasl.username``, ...), values converted where
  kafka-python spells them differently (``auto_offset_reset='smallest'``, assignor classes,
  ``IsolationLevel``, a list of bootstrap servers);
* **compat** -- handled by the compat client itself (serializers, ``consumer_timeout_ms``, the
  ``partitioner`` callable, ``default_offset_commit_callback``);
* **no-op** -- accepted and ignored because the native client already does what they ask for, or they tune
  something it does not have (``api_version``: kafka-handoff negotiates versions with ApiVersions);
* **refused** -- raises :class:`~kafka_handoff.compat.kafka_python.errors.KafkaConfigurationError` naming
  the key and the reason, unless the value is kafka-python's default (e.g. ``ssl_context``, proxies).

A key kafka-python does not know raises ``KafkaConfigurationError("Unrecognized configs: ...")`` naming it,
as kafka-python does.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from kafka_handoff.compat.kafka_python.errors import KafkaConfigurationError
from kafka_handoff.compat.kafka_python.structs import IsolationLevel

__all__ = [
    "ADMIN_KEYS",
    "COMPAT",
    "CONSUMER_KEYS",
    "NOOP",
    "PRODUCER_KEYS",
    "REFUSED",
    "Translated",
    "translate",
]

COMPAT: Final = "compat"
NOOP: Final = "no-op"
REFUSED: Final = "refused"

Converter = Callable[[Any], Any]


class Translated:
    """A translated key: its native name and how to convert the value (``None`` from the converter: do
    not set the native key)."""

    __slots__ = ("convert", "name")

    def __init__(self, name: str, convert: Converter | None = None) -> None:
        self.name = name
        self.convert = convert

    def __repr__(self) -> str:
        return f"Translated({self.name!r})"


Rule = tuple[Translated | str, str]
"""(target, note): a :class:`Translated`, or COMPAT/NOOP/REFUSED; the note explains it (docs, errors)."""


def _servers(value: Any) -> str:
    if isinstance(value, str):
        return value
    return ",".join(str(v) for v in value)


def _offset_reset(value: Any) -> str:
    text = str(value).strip().lower()
    return {"smallest": "earliest", "largest": "latest"}.get(text, text)


def _isolation(value: Any) -> str:
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("read_committed", "read_uncommitted"):
            return text
        if text.upper() in IsolationLevel.__members__:
            return IsolationLevel[text.upper()].name.lower()
    try:
        return IsolationLevel(int(value)).name.lower()
    except (TypeError, ValueError):
        raise KafkaConfigurationError(
            f"Invalid value {value!r} for configuration 'isolation_level' (allowed: 'read_uncommitted', "
            "'read_committed', or an IsolationLevel)"
        ) from None


_ASSIGNOR_NAMES: Final = {
    "rangepartitionassignor": "range",
    "roundrobinpartitionassignor": "roundrobin",
    "stickypartitionassignor": "sticky",
    "cooperativestickypartitionassignor": "cooperative-sticky",
}


def assignor_name(item: Any) -> str:
    """kafka-python assignors are classes with a ``name`` (``'range'``, ``'roundrobin'``, ``'sticky'``,
    ``'cooperative-sticky'``); strings pass through."""
    if isinstance(item, str):
        return item
    name = getattr(item, "name", None)
    if isinstance(name, str) and name:
        return name
    cls_name = getattr(item, "__name__", type(item).__name__).lower()
    if cls_name in _ASSIGNOR_NAMES:
        return _ASSIGNOR_NAMES[cls_name]
    raise KafkaConfigurationError(
        f"Invalid value {item!r} in configuration 'partition_assignment_strategy' (allowed: 'range', "
        "'roundrobin', 'sticky', 'cooperative-sticky' or an assignor class with that name)"
    )


def _strategies(value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, (str, type)) else list(value)
    return tuple(assignor_name(i) for i in items)


def _dns(value: Any) -> str:
    return "use_all_dns_ips" if value in ("default", None) else str(value)


def _compression(value: Any) -> str:
    return "none" if value is None else str(value)


def _hostname_check(value: Any) -> str | None:
    return None if value else ""


def _optional(value: Any) -> Any:
    return value


def _oauth_provider(provider: Any) -> Callable[[], tuple[str, float, str, dict[str, str]]]:
    """kafka-python's ``AbstractTokenProvider`` (``token()``, optional ``extensions()``) as the native
    ``oauth_cb``: the token's expiry is read from a JWT's ``exp`` claim, else taken as five minutes (the
    native refresher renews it at 80 %, so an opaque token is fetched again every four minutes)."""
    if not callable(getattr(provider, "token", None)):
        raise KafkaConfigurationError(
            f"Invalid value {provider!r} for configuration 'sasl_oauth_token_provider' (allowed: an object "
            "with a token() method, as kafka-python's AbstractTokenProvider)"
        )

    def oauth_cb() -> tuple[str, float, str, dict[str, str]]:
        token = str(provider.token())
        ext_fn = getattr(provider, "extensions", None)
        extensions = dict(ext_fn() or {}) if callable(ext_fn) else {}
        return token, _jwt_expiry(token), "", extensions

    return oauth_cb


def _jwt_expiry(token: str) -> float:
    parts = token.split(".")
    if len(parts) == 3:
        try:
            payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
            exp = payload.get("exp") if isinstance(payload, dict) else None
            if isinstance(exp, (int, float)):
                return float(exp)
        except (ValueError, TypeError):
            pass
    return time.time() + 300.0


def _t(name: str, convert: Converter | None = None) -> Translated:
    return Translated(name, convert)


# Keys of all three clients (kafka-python's shared connection settings).
_COMMON: Final[dict[str, Rule]] = {
    "bootstrap_servers": (_t("bootstrap.servers", _servers), "a list or a comma-separated string"),
    "client_id": (_t("client.id"), ""),
    "request_timeout_ms": (_t("request.timeout.ms"), ""),
    "retry_backoff_ms": (_t("retry.backoff.ms"), ""),
    "reconnect_backoff_ms": (_t("reconnect.backoff.ms"), ""),
    "reconnect_backoff_max_ms": (_t("reconnect.backoff.max.ms"), ""),
    "metadata_max_age_ms": (_t("metadata.max.age.ms"), ""),
    "client_dns_lookup": (_t("client.dns.lookup", _dns), "'default' means use_all_dns_ips"),
    "receive_buffer_bytes": (_t("receive.buffer.bytes", _optional), "None: the native default"),
    "send_buffer_bytes": (_t("send.buffer.bytes", _optional), "None: the native default"),
    "connections_max_idle_ms": (_t("connections.max.idle.ms"), ""),
    "socket_connection_setup_timeout_ms": (_t("socket.connection.setup.timeout.ms"), ""),
    "socket_connection_setup_timeout_max_ms": (_t("socket.connection.setup.timeout.max.ms"), ""),
    "security_protocol": (_t("security.protocol"), ""),
    "ssl_cafile": (_t("ssl.truststore.location"), "PEM file of the CA certificates"),
    "ssl_certfile": (_t("ssl.certificate.location"), "PEM file of the client certificate (mutual TLS)"),
    "ssl_keyfile": (_t("ssl.key.location"), "PEM file of the client key (mutual TLS)"),
    "ssl_password": (_t("ssl.key.password"), "password of the client key"),
    "ssl_check_hostname": (
        _t("ssl.endpoint.identification.algorithm", _hostname_check),
        "False: ssl.endpoint.identification.algorithm='' (no host name check)",
    ),
    "sasl_mechanism": (_t("sasl.mechanism"), ""),
    "sasl_plain_username": (_t("sasl.username"), "PLAIN and SCRAM user"),
    "sasl_plain_password": (_t("sasl.password"), "PLAIN and SCRAM password (never logged)"),
    "sasl_oauth_token_provider": (
        _t("oauth_cb", _oauth_provider),
        "token() (and extensions()) of the provider feed the native OAUTHBEARER refresher",
    ),
    "metrics_num_samples": (_t("metrics.num.samples"), ""),
    "metrics_sample_window_ms": (_t("metrics.sample.window.ms"), ""),
    "api_version": (NOOP, "kafka-handoff negotiates every API version with ApiVersions"),
    "api_version_auto_timeout_ms": (NOOP, "no version probe: ApiVersions is part of each connection"),
    "bootstrap_timeout_ms": (NOOP, "bounded by the calls' own timeouts (default.api.timeout.ms)"),
    "selector": (NOOP, "the network thread uses the standard selectors module"),
    "receive_message_max_bytes": (NOOP, "responses are bounded by fetch.max.bytes"),
    "metrics_enabled": (NOOP, "metrics are always recorded"),
    "metric_group_prefix": (NOOP, "metric groups use Java's names"),
    "max_in_flight_requests_per_connection": (NOOP, "the consumer and admin client pipeline on their own"),
    "sasl_kerberos_service_name": (REFUSED, "GSSAPI (Kerberos) is not supported"),
    "sasl_kerberos_domain_name": (REFUSED, "GSSAPI (Kerberos) is not supported"),
    "sasl_kerberos_name": (REFUSED, "GSSAPI (Kerberos) is not supported"),
    "ssl_context": (REFUSED, "pass ssl_cafile/ssl_certfile/ssl_keyfile/ssl_password instead"),
    "ssl_crlfile": (REFUSED, "certificate revocation lists are not supported"),
    "ssl_ciphers": (REFUSED, "the cipher list is Python's default for TLS 1.2+"),
    "socket_options": (REFUSED, "socket options cannot be set (TCP_NODELAY is always on)"),
    "metric_reporters": (REFUSED, "use kafka_handoff.metrics exporters (Prometheus, OpenTelemetry)"),
    "proxy_url": (REFUSED, "connections through a proxy are not supported"),
    "socks5_proxy": (REFUSED, "connections through a proxy are not supported"),
    "kafka_client": (REFUSED, "the network client cannot be replaced"),
    "net": (REFUSED, "the network layer cannot be replaced"),
}

# kafka-python's defaults of refused keys: giving one of these is accepted (it asks for nothing new).
_REFUSED_DEFAULTS: Final[dict[str, tuple[Any, ...]]] = {
    "sasl_kerberos_service_name": (None, "kafka"),
    "socket_options": (None, [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]),
    "metric_reporters": (None, [], ()),
}

CONSUMER_KEYS: Final[dict[str, Rule]] = {
    **_COMMON,
    "group_id": (_t("group.id"), ""),
    "group_instance_id": (_t("group.instance.id"), ""),
    "client_rack": (_t("client.rack"), ""),
    "fetch_max_wait_ms": (_t("fetch.max.wait.ms"), ""),
    "fetch_min_bytes": (_t("fetch.min.bytes"), ""),
    "fetch_max_bytes": (_t("fetch.max.bytes"), ""),
    "max_partition_fetch_bytes": (_t("max.partition.fetch.bytes"), ""),
    "default_api_timeout_ms": (_t("default.api.timeout.ms"), ""),
    "auto_offset_reset": (_t("auto.offset.reset", _offset_reset), "smallest/largest mean earliest/latest"),
    "enable_auto_commit": (_t("enable.auto.commit"), "ignored without a group_id (as kafka-python)"),
    "auto_commit_interval_ms": (_t("auto.commit.interval.ms"), ""),
    "check_crcs": (_t("check.crcs"), ""),
    "isolation_level": (_t("isolation.level", _isolation), "a string or an IsolationLevel"),
    "allow_auto_create_topics": (_t("allow.auto.create.topics"), ""),
    "partition_assignment_strategy": (
        _t("partition.assignment.strategy", _strategies),
        "assignor classes/objects are read by their name",
    ),
    "max_poll_records": (_t("max.poll.records"), ""),
    "max_poll_interval_ms": (_t("max.poll.interval.ms"), ""),
    "session_timeout_ms": (_t("session.timeout.ms"), ""),
    "heartbeat_interval_ms": (_t("heartbeat.interval.ms"), ""),
    "exclude_internal_topics": (_t("exclude.internal.topics"), ""),
    "key_deserializer": (COMPAT, "applied by the compat consumer (a callable or a Deserializer)"),
    "value_deserializer": (COMPAT, "applied by the compat consumer (a callable or a Deserializer)"),
    "consumer_timeout_ms": (COMPAT, "iteration stops after this long without a record"),
    "default_offset_commit_callback": (COMPAT, "callback(offsets, response) of commit_async()"),
    "enable_incremental_fetch_sessions": (NOOP, "KIP-227 fetch sessions are always used"),
    "legacy_iterator": (NOOP, "there is one iterator"),
}

PRODUCER_KEYS: Final[dict[str, Rule]] = {
    **_COMMON,
    "acks": (_t("acks", str), "0, 1, 'all' or -1"),
    "enable_idempotence": (_t("enable.idempotence"), ""),
    "transactional_id": (_t("transactional.id"), ""),
    "transaction_timeout_ms": (_t("transaction.timeout.ms"), ""),
    "delivery_timeout_ms": (_t("delivery.timeout.ms"), ""),
    "compression_type": (_t("compression.type", _compression), "None means 'none'"),
    "retries": (_t("retries"), ""),
    "batch_size": (_t("batch.size"), ""),
    "linger_ms": (_t("linger.ms"), ""),
    "buffer_memory": (_t("buffer.memory"), ""),
    "max_block_ms": (_t("max.block.ms"), ""),
    "max_request_size": (_t("max.request.size"), ""),
    "max_in_flight_requests_per_connection": (_t("max.in.flight.requests.per.connection"), ""),
    "key_serializer": (COMPAT, "applied by the compat producer (a callable or a Serializer)"),
    "value_serializer": (COMPAT, "applied by the compat producer (a callable or a Serializer)"),
    "partitioner": (COMPAT, "partitioner(key_bytes, all_partitions, available_partitions) -> partition"),
    "default_api_timeout_ms": (NOOP, "the producer's waits are bounded by max_block_ms"),
    "allow_auto_create_topics": (NOOP, "the broker's auto.create.topics.enable decides"),
}

ADMIN_KEYS: Final[dict[str, Rule]] = {
    **_COMMON,
    "default_api_timeout_ms": (_t("default.api.timeout.ms"), ""),
}

_DEFAULT_BOOTSTRAP: Final = "localhost:9092"


def translate(
    client: str, configs: Mapping[str, Any], table: Mapping[str, Rule]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``configs`` (kafka-python names) as ``(native properties, compat settings)``.

    Raises ``KafkaConfigurationError`` for unknown keys (all of them named) and refused ones."""
    unknown = sorted(k for k in configs if k not in table)
    if unknown:
        raise KafkaConfigurationError(
            f"Unrecognized configs: {unknown} (kafka-python {client} configuration; see docs/migrating.md "
            "for the keys the kafka-python compat layer accepts)"
        )
    native: dict[str, Any] = {"bootstrap.servers": _DEFAULT_BOOTSTRAP}
    compat: dict[str, Any] = {}
    for key, value in configs.items():
        target, note = table[key]
        if isinstance(target, Translated):
            converted = target.convert(value) if target.convert is not None else value
            if converted is not None:
                native[target.name] = converted
        elif target == COMPAT:
            compat[key] = value
        elif target == REFUSED:
            if value is None or any(value == d for d in _REFUSED_DEFAULTS.get(key, ())):
                continue
            raise KafkaConfigurationError(f"Configuration {key!r} is not supported by kafka-handoff: {note}")
        # NOOP: accepted, nothing to do
    return native, compat
