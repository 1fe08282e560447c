"""The client's configuration: confluent-kafka's ``SchemaRegistryClient`` keys, validated, with the secrets
kept out of every repr, log line and error message."""

from __future__ import annotations

import base64
import logging
import os
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_handoff.errors import ConfigError

log = logging.getLogger("kafka_handoff.schema_registry")

SECRET_KEYS = frozenset(
    {
        "basic.auth.user.info",
        "bearer.auth.token",
        "bearer.auth.client.secret",
        "ssl.key.password",
        "sasl.password",
    }
)
"""Keys whose values never appear in a repr, a log line or an error."""

BASIC_SOURCES = ("USER_INFO", "URL", "SASL_INHERIT")
BEARER_SOURCES = ("STATIC_TOKEN", "OAUTHBEARER", "CUSTOM")

KNOWN_KEYS = frozenset(
    {
        "url",
        "basic.auth.credentials.source",
        "basic.auth.user.info",
        "sasl.username",
        "sasl.password",
        "bearer.auth.credentials.source",
        "bearer.auth.token",
        "bearer.auth.client.id",
        "bearer.auth.client.secret",
        "bearer.auth.scope",
        "bearer.auth.issuer.endpoint.url",
        "bearer.auth.logical.cluster",
        "bearer.auth.identity.pool.id",
        "bearer.auth.custom.provider.function",
        "bearer.auth.custom.provider.config",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "timeout",
        "cache.capacity",
        "cache.latest.ttl.sec",
        "max.retries",
        "retries.wait.ms",
        "retries.max.wait.ms",
    }
)

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_CACHE_CAPACITY = 1000
DEFAULT_MAX_RETRIES = 3
DEFAULT_RETRIES_WAIT_MS = 1000
DEFAULT_RETRIES_MAX_WAIT_MS = 20000


def redact(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with every secret value replaced (and credentials dropped from the URLs)."""
    out: dict[str, Any] = {}
    for key, value in conf.items():
        if key in SECRET_KEYS:
            out[key] = "[hidden]"
        elif key == "url" and isinstance(value, str):
            out[key] = ",".join(strip_userinfo(u.strip()) for u in value.split(","))
        else:
            out[key] = value
    return out


def strip_userinfo(url: str) -> str:
    """``url`` without the ``user:password@`` part."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port is not None else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _number(conf: Mapping[str, Any], key: str, default: float | None, *, minimum: float = 0) -> float | None:
    if key not in conf or conf[key] is None:
        return default
    value = conf[key]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(
            f"Invalid value {value!r} for configuration '{key}': expected a number >= {minimum:g}"
        )
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(
            f"Invalid value {value!r} for configuration '{key}': expected a number >= {minimum:g}"
        ) from None
    if number < minimum:
        raise ConfigError(
            f"Invalid value {value!r} for configuration '{key}': expected a number >= {minimum:g}"
        )
    return number


def _string(conf: Mapping[str, Any], key: str) -> str | None:
    value = conf.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        shown = "[hidden]" if key in SECRET_KEYS else repr(value)
        raise ConfigError(f"Invalid value {shown} for configuration '{key}': expected a string")
    return value


def _require(conf: Mapping[str, Any], key: str, why: str) -> str:
    value = _string(conf, key)
    if not value:
        raise ConfigError(f"Missing configuration '{key}': {why}")
    return value


class AuthHeaders:
    """The authentication headers of each request (none, Basic, or Bearer from a static token, the OAuth
    client-credentials flow or an application's function)."""

    kind = "none"
    dynamic = False

    def headers(self) -> dict[str, str]:
        return {}

    def close(self) -> None:
        pass


class _StaticHeaders(AuthHeaders):
    def __init__(self, kind: str, headers: dict[str, str]) -> None:
        self.kind = kind
        self._headers = headers

    def headers(self) -> dict[str, str]:
        return dict(self._headers)

    def __repr__(self) -> str:
        return f"AuthHeaders({self.kind})"


def _bearer_extras(logical_cluster: str | None, identity_pool: str | None) -> dict[str, str]:
    extra: dict[str, str] = {}
    if logical_cluster:
        extra["target-sr-cluster"] = logical_cluster
    if identity_pool:
        extra["Confluent-Identity-Pool-Id"] = identity_pool
    return extra


class _OAuthHeaders(AuthHeaders):
    """Bearer tokens from kafka-handoff's OAuth token provider (client-credentials grant, refreshed on its own
    thread before they expire)."""

    kind = "bearer OAUTHBEARER"
    dynamic = True

    def __init__(self, provider: Any, extra: dict[str, str], wait_s: float) -> None:
        self._provider = provider
        self._extra = extra
        self._wait_s = wait_s
        self._event = threading.Event()
        provider.listeners.append(self._event.set)

    def headers(self) -> dict[str, str]:
        from kafka_handoff.errors import AuthenticationError

        deadline = time.monotonic() + self._wait_s
        while True:
            self._event.clear()
            token = self._provider.get()  # raises the last fetch failure when there is no valid token
            if token is not None:
                return {"Authorization": f"Bearer {token.value}", **self._extra}
            left = deadline - time.monotonic()
            if left <= 0:
                raise AuthenticationError(
                    f"no OAuth token from {self._provider.source} within {self._wait_s:g} s"
                )
            self._event.wait(left)

    def close(self) -> None:
        self._provider.close()

    def __repr__(self) -> str:
        return f"AuthHeaders({self.kind}, {self._provider.source})"


class _CustomHeaders(AuthHeaders):
    """``bearer.auth.custom.provider.function(config) -> {"bearer.auth.token": ..., optional
    "bearer.auth.logical.cluster", "bearer.auth.identity.pool.id"}``, called for each request."""

    kind = "bearer CUSTOM"
    dynamic = True

    def __init__(self, function: Callable[[Any], Mapping[str, Any]], config: Any) -> None:
        self._function = function
        self._config = config

    def headers(self) -> dict[str, str]:
        fields = self._function(self._config)
        token = fields.get("bearer.auth.token") if isinstance(fields, Mapping) else None
        if not isinstance(token, str) or not token:
            raise ConfigError(
                "bearer.auth.custom.provider.function returned no 'bearer.auth.token' (it must return a dict "
                "with 'bearer.auth.token' and optionally 'bearer.auth.logical.cluster', "
                "'bearer.auth.identity.pool.id')"
            )
        extra = _bearer_extras(
            fields.get("bearer.auth.logical.cluster"), fields.get("bearer.auth.identity.pool.id")
        )
        return {"Authorization": f"Bearer {token}", **extra}

    def __repr__(self) -> str:
        return f"AuthHeaders({self.kind})"


@dataclass
class RegistryConfig:
    """The parsed configuration (no secret in its repr: the auth and TLS objects print none)."""

    urls: list[str]
    auth: AuthHeaders
    ssl_context: ssl.SSLContext | None
    timeout_s: float
    cache_capacity: int
    cache_latest_ttl_s: float | None
    max_retries: int
    retries_wait_ms: int
    retries_max_wait_ms: int
    redacted: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (
            f"RegistryConfig(urls={self.urls}, auth={self.auth.kind}, tls={self.ssl_context is not None}, "
            f"timeout_s={self.timeout_s:g}, max_retries={self.max_retries})"
        )


def _ssl_context(conf: Mapping[str, Any]) -> ssl.SSLContext:
    ca = conf.get("ssl.ca.location")
    if ca is False:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        log.warning(
            "insecure Schema Registry client setting: ssl.ca.location=False: the registry's certificate "
            "is not verified"
        )
    elif isinstance(ca, str) and ca:
        if not os.path.exists(ca):
            raise ConfigError(
                f"Invalid value {ca!r} for configuration 'ssl.ca.location': no such file or directory"
            )
        ctx = (
            ssl.create_default_context(capath=ca)
            if os.path.isdir(ca)
            else ssl.create_default_context(cafile=ca)
        )
    elif ca is None:
        ctx = ssl.create_default_context()
    else:
        raise ConfigError(
            f"Invalid value {ca!r} for configuration 'ssl.ca.location': expected a PEM file or directory "
            "path, or False to skip verification"
        )
    cert = _string(conf, "ssl.certificate.location")
    key = _string(conf, "ssl.key.location")
    password = _string(conf, "ssl.key.password")
    if cert is None and (key is not None or password is not None):
        raise ConfigError(
            "Missing configuration 'ssl.certificate.location': ssl.key.location and ssl.key.password need it"
        )
    if cert is not None:
        for name, path in (("ssl.certificate.location", cert), ("ssl.key.location", key)):
            if path is not None and not os.path.isfile(path):
                raise ConfigError(f"Invalid value {path!r} for configuration '{name}': no such file")
        try:
            ctx.load_cert_chain(certfile=cert, keyfile=key, password=password)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"Invalid value {cert!r} for configuration 'ssl.certificate.location': cannot load the "
                f"certificate and key ({exc.__class__.__name__})"
            ) from None
    return ctx


def _basic(conf: Mapping[str, Any], url_userinfo: tuple[str, str] | None) -> AuthHeaders | None:
    source = _string(conf, "basic.auth.credentials.source")
    user_info = _string(conf, "basic.auth.user.info")
    if source is None:
        if user_info is not None:
            source = "USER_INFO"
        elif url_userinfo is not None:
            source = "URL"
        else:
            return None
    source = source.upper()
    if source not in BASIC_SOURCES:
        raise ConfigError(
            f"Invalid value {conf['basic.auth.credentials.source']!r} for configuration "
            f"'basic.auth.credentials.source' (allowed: {', '.join(BASIC_SOURCES)})"
        )
    if user_info is not None and url_userinfo is not None:
        raise ConfigError(
            "Invalid configuration 'basic.auth.user.info': credentials are also in 'url' "
            "(allowed: one of the two)"
        )
    if source == "USER_INFO":
        value = _require(
            conf, "basic.auth.user.info", "basic.auth.credentials.source=USER_INFO needs user:password"
        )
        if ":" not in value:
            raise ConfigError(
                "Invalid value [hidden] for configuration 'basic.auth.user.info': expected user:password"
            )
        user, password = value.split(":", 1)
    elif source == "URL":
        if url_userinfo is None:
            raise ConfigError(
                "Invalid configuration 'url': basic.auth.credentials.source=URL needs http(s)://user:password@host"
            )
        user, password = url_userinfo
    else:
        user = _require(conf, "sasl.username", "basic.auth.credentials.source=SASL_INHERIT needs it")
        password = _require(conf, "sasl.password", "basic.auth.credentials.source=SASL_INHERIT needs it")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return _StaticHeaders(f"basic {source}", {"Authorization": f"Basic {token}"})


def _bearer(
    conf: Mapping[str, Any], wait_s: float, max_retries: int, wait_ms: int, max_wait_ms: int
) -> AuthHeaders:
    raw = _string(conf, "bearer.auth.credentials.source") or ""
    source = raw.upper()
    if source not in BEARER_SOURCES:
        raise ConfigError(
            f"Invalid value {raw!r} for configuration 'bearer.auth.credentials.source' "
            f"(allowed: {', '.join(BEARER_SOURCES)})"
        )
    extra = _bearer_extras(
        _string(conf, "bearer.auth.logical.cluster"), _string(conf, "bearer.auth.identity.pool.id")
    )
    if source == "STATIC_TOKEN":
        token = _require(conf, "bearer.auth.token", "bearer.auth.credentials.source=STATIC_TOKEN needs it")
        return _StaticHeaders("bearer STATIC_TOKEN", {"Authorization": f"Bearer {token}", **extra})
    if source == "CUSTOM":
        function = conf.get("bearer.auth.custom.provider.function")
        if not callable(function):
            raise ConfigError(
                "Missing configuration 'bearer.auth.custom.provider.function': bearer.auth.credentials."
                "source=CUSTOM needs a callable(config) -> dict"
            )
        return _CustomHeaders(function, conf.get("bearer.auth.custom.provider.config"))
    from kafka_handoff.security import TokenProvider, oidc_fetcher

    why = "bearer.auth.credentials.source=OAUTHBEARER needs it"
    url = _require(conf, "bearer.auth.issuer.endpoint.url", why)
    client_id = _require(conf, "bearer.auth.client.id", why)
    secret = _require(conf, "bearer.auth.client.secret", why)
    scope = _string(conf, "bearer.auth.scope")
    try:
        fetch = oidc_fetcher(url, client_id, secret, scope, {}, timeout_s=wait_s)
    except ConfigError as exc:
        raise ConfigError(
            str(exc).replace("sasl.oauthbearer.token.endpoint.url", "bearer.auth.issuer.endpoint.url")
        ) from None
    provider = TokenProvider(
        fetch,
        retry_backoff_ms=wait_ms,
        retry_backoff_max_ms=max_wait_ms,
        source=f"the OAuth token endpoint {url}",
    )
    return _OAuthHeaders(provider, extra, wait_s)


def parse_config(conf: Mapping[str, Any]) -> RegistryConfig:
    """Validate ``conf`` (confluent-kafka's keys); a :class:`ConfigError` names the offending key."""
    if not isinstance(conf, Mapping):
        raise ConfigError(f"SchemaRegistryClient takes a dict of configuration, not {type(conf).__name__}")
    unknown = sorted(k for k in conf if k not in KNOWN_KEYS)
    if unknown:
        raise ConfigError(
            f"Unknown configuration '{unknown[0]}' for the Schema Registry client "
            f"(allowed: {', '.join(sorted(KNOWN_KEYS))})"
        )
    raw_url = conf.get("url")
    if not isinstance(raw_url, str) or not raw_url.strip():
        raise ConfigError("Missing configuration 'url': the Schema Registry's URL (or comma-separated URLs)")
    urls: list[str] = []
    userinfo: tuple[str, str] | None = None
    for item in raw_url.split(","):
        item = item.strip().rstrip("/")
        parts = urllib.parse.urlsplit(item)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"Invalid value {strip_userinfo(item)!r} for configuration 'url': expected http://host:port "
                "or https://host:port (comma-separated for several)"
            )
        try:
            parts.port  # noqa: B018 -- raises on a bad port
        except ValueError:
            raise ConfigError(
                f"Invalid value {strip_userinfo(item)!r} for configuration 'url': bad port"
            ) from None
        if parts.username is not None and userinfo is None:
            userinfo = (urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or ""))
        urls.append(strip_userinfo(item))
    timeout = _number(conf, "timeout", DEFAULT_TIMEOUT_S, minimum=0.001)
    capacity = _number(conf, "cache.capacity", DEFAULT_CACHE_CAPACITY, minimum=1)
    ttl = _number(conf, "cache.latest.ttl.sec", None)
    max_retries = _number(conf, "max.retries", DEFAULT_MAX_RETRIES)
    wait_ms = _number(conf, "retries.wait.ms", DEFAULT_RETRIES_WAIT_MS)
    max_wait_ms = _number(conf, "retries.max.wait.ms", DEFAULT_RETRIES_MAX_WAIT_MS)
    assert timeout is not None and capacity is not None and max_retries is not None
    assert wait_ms is not None and max_wait_ms is not None
    basic = _basic(conf, userinfo)
    bearer_set = conf.get("bearer.auth.credentials.source") is not None
    if basic is not None and bearer_set:
        raise ConfigError(
            "Invalid configuration 'bearer.auth.credentials.source': basic auth is configured too "
            "(allowed: basic.auth.* or bearer.auth.*, not both)"
        )
    auth: AuthHeaders
    if bearer_set:
        auth = _bearer(conf, float(timeout), int(max_retries), int(wait_ms), int(max_wait_ms))
    else:
        auth = basic if basic is not None else AuthHeaders()
    uses_tls = any(u.startswith("https:") for u in urls)
    tls_keys = [k for k in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location") if k in conf]
    ctx = _ssl_context(conf) if uses_tls or tls_keys else None
    if basic is not None and not uses_tls:
        hosts = [urllib.parse.urlsplit(u).hostname or "" for u in urls]
        if not all(h in ("localhost", "127.0.0.1", "::1") for h in hosts):
            log.warning(
                "insecure Schema Registry client setting: basic auth over http: the password crosses the "
                "network in clear (allowed for safety: https://)"
            )
    return RegistryConfig(
        urls=urls,
        auth=auth,
        ssl_context=ctx,
        timeout_s=float(timeout),
        cache_capacity=int(capacity),
        cache_latest_ttl_s=ttl,
        max_retries=int(max_retries),
        retries_wait_ms=int(wait_ms),
        retries_max_wait_ms=max(int(wait_ms), int(max_wait_ms)),
        redacted=redact(conf),
    )
