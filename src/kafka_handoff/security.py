"""Security settings of a client: TLS context, SASL mechanism and OAUTHBEARER tokens.

:func:`validate_security_values` holds the cross-key rules (run while parsing a config);
:func:`build_security` turns a parsed config into a :class:`SecuritySettings` the network layer uses:

* ``ssl_context`` -- an :class:`ssl.SSLContext` (TLS 1.2 minimum, the CA bundle of
  ``ssl.truststore.location``/``ssl.ca.location`` or the system's, the client certificate and key for
  mutual TLS, host name verification unless ``ssl.endpoint.identification.algorithm`` is empty);
* ``new_mechanism()`` -- a fresh :mod:`~kafka_handoff.protocol.sasl` mechanism for one exchange;
* ``token_provider`` -- for OAUTHBEARER, a :class:`TokenProvider` whose small daemon thread gets tokens
  (from ``oauth_cb`` or the OIDC client-credentials flow over ``urllib``) and refreshes them at 80% of their
  lifetime, with an exponential backoff on failures, so that no HTTP call ever runs on the network thread.

Secrets stay inside :class:`~kafka_handoff.config.Password` objects until the moment they are used; no repr,
log line or error message here contains one.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import inspect
import ipaddress
import json
import logging
import os
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from kafka_handoff.errors import AuthenticationError, ConfigError
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.sasl import (
    MECHANISMS,
    OAuthBearer,
    OAuthToken,
    Plain,
    SaslMechanism,
    Scram,
    jaas_mechanisms,
    parse_jaas_config,
    validate_extensions,
)

__all__ = [
    "SecuritySettings",
    "TokenProvider",
    "build_security",
    "connection_settings",
    "validate_security_values",
]

log = logging.getLogger(__name__)

_SSL_PROTOCOLS = ("SSL", "SASL_SSL")
_SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
_SUPPORTED = ", ".join(MECHANISMS)
REFRESH_WINDOW_FACTOR = 0.8
"""Refresh a token when this fraction of its lifetime has passed (Java's sasl.login.refresh.window.factor)."""


def _secret(value: Any) -> str | None:
    if value is None:
        return None
    return str(value.value) if hasattr(value, "value") else str(value)


def _is_ssl_key(name: str) -> bool:
    return name.startswith("ssl.") or name == "enable.ssl.certificate.verification"


def _is_sasl_key(name: str) -> bool:
    return name.startswith("sasl.") or name == "oauth_cb"


def connection_settings(props: Mapping[str, Any]) -> dict[str, Any]:
    """The security settings among ``props`` (``security.protocol``, ``ssl.*``, ``sasl.*``, ``oauth_cb``,
    librdkafka's aliases): what every client of one application shares, e.g. a pipeline's consumer and its
    dead-letter producer."""
    return {
        key: value
        for key, value in props.items()
        if key == "security.protocol" or _is_ssl_key(key) or _is_sasl_key(key) or key in _ALIAS_KEYS
    }


_ALIAS_KEYS = frozenset({"oauth.cb", "sasl.mechanisms"})


def parse_extensions(text: str | None, key: str = "sasl.oauthbearer.extensions") -> dict[str, str]:
    """``"logicalCluster=lkc-1,identityPoolId=pool-2"`` -> a dict (validated as RFC 7628 wants)."""
    out: dict[str, str] = {}
    if not text:
        return out
    for item in text.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(
                f"Invalid value {text!r} for configuration '{key}': entry {item!r} is not key=value "
                "(allowed: comma-separated key=value pairs)"
            )
        out[name.strip()] = value.strip()
    validate_extensions(out, key)
    return out


def sasl_credentials(values: Mapping[str, Any]) -> tuple[str, str]:
    """User name and password for PLAIN/SCRAM: from ``sasl.jaas.config``, else ``sasl.username`` and
    ``sasl.password``."""
    mechanism = values["sasl.mechanism"]
    jaas = _secret(values.get("sasl.jaas.config"))
    if jaas is not None:
        module, options = parse_jaas_config(jaas)
        if mechanism not in jaas_mechanisms(module):
            raise ConfigError(
                f"Invalid value [hidden] for configuration 'sasl.jaas.config': login module {module} "
                f"does not serve sasl.mechanism={mechanism}"
            )
        username, password = options.get("username"), options.get("password")
        if not username:
            raise ConfigError(
                "Invalid value [hidden] for configuration 'sasl.jaas.config': no username=\"...\" option "
                f"(sasl.mechanism={mechanism} needs a user name and password)"
            )
        return username, password or ""
    username = values.get("sasl.username")
    if not username:
        raise ConfigError(
            f"Missing configuration 'sasl.username': sasl.mechanism={mechanism} needs a user name and "
            "password (allowed: set sasl.username and sasl.password, or sasl.jaas.config)"
        )
    password = _secret(values.get("sasl.password"))
    if password is None:
        raise ConfigError(
            f"Missing configuration 'sasl.password': sasl.mechanism={mechanism} needs a password "
            "(allowed: set sasl.password, or sasl.jaas.config)"
        )
    return str(username), password


def validate_security_values(values: Mapping[str, Any], explicit: frozenset[str]) -> None:
    """Cross-key rules; raises :class:`ConfigError` naming the key and what is allowed."""
    protocol = values["security.protocol"]
    if protocol not in _SSL_PROTOCOLS:
        given = sorted(k for k in explicit if _is_ssl_key(k) and values.get(k) is not None)
        if given:
            raise ConfigError(
                f"TLS configuration {', '.join(given)} given but security.protocol={protocol} "
                "(allowed: security.protocol=SSL or SASL_SSL, or remove the ssl.* keys)"
            )
    if protocol not in _SASL_PROTOCOLS:
        given = sorted(k for k in explicit if _is_sasl_key(k) and values.get(k) is not None)
        if given:
            raise ConfigError(
                f"SASL configuration {', '.join(given)} given but security.protocol={protocol} "
                "(allowed: security.protocol=SASL_PLAINTEXT or SASL_SSL, or remove the sasl.* keys)"
            )
        return_sasl = True
    else:
        return_sasl = False
    if protocol in _SSL_PROTOCOLS:
        cert_sources = [
            k
            for k in ("ssl.keystore.location", "ssl.certificate.location", "ssl.keystore.certificate.chain")
            if values[k] is not None
        ]
        if len(cert_sources) > 1:
            raise ConfigError(
                f"Configurations {', '.join(repr(k) for k in cert_sources)} are all set "
                "(allowed: one of them)"
            )
        if (
            values["ssl.truststore.location"] is not None
            and values["ssl.truststore.certificates"] is not None
        ):
            raise ConfigError(
                "Configurations 'ssl.truststore.location' and 'ssl.truststore.certificates' are both set "
                "(allowed: one of them)"
            )
        if (values["ssl.keystore.key"] is None) != (values["ssl.keystore.certificate.chain"] is None):
            raise ConfigError(
                "Configuration 'ssl.keystore.key' and 'ssl.keystore.certificate.chain' go together "
                "(allowed: both, or neither)"
            )
        for prefix in ("ssl.keystore", "ssl.truststore"):
            if values[f"{prefix}.type"] == "JKS":
                from kafka_handoff.keystore import jks_error

                raise jks_error(prefix, values[f"{prefix}.location"] or "client.jks")
        if (
            values["ssl.keystore.password"] is not None
            and "ssl.keystore.type" in explicit
            and (values["ssl.keystore.type"] == "PEM")
        ):
            raise ConfigError(
                "Configuration 'ssl.keystore.password' is set with ssl.keystore.type=PEM (allowed: "
                "ssl.key.password for an encrypted PEM key; ssl.keystore.password with PKCS12)"
            )
        if values["ssl.key.location"] is not None and values["ssl.certificate.location"] is None:
            raise ConfigError(
                "Configuration 'ssl.key.location' is set without 'ssl.certificate.location' "
                "(allowed: both, for mutual TLS)"
            )
    if return_sasl:
        return
    mechanism = values["sasl.mechanism"]
    if mechanism not in MECHANISMS:
        raise ConfigError(
            f"Invalid value {mechanism!r} for configuration 'sasl.mechanism': "
            f"{'GSSAPI (Kerberos, the Java default)' if mechanism == 'GSSAPI' else mechanism} "
            "is not supported "
            f"(allowed: {_SUPPORTED})"
        )
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        sasl_credentials(values)
        return
    if mechanism == "GSSAPI":
        from kafka_handoff.kerberos import kerberos_options

        kerberos_options(values, _secret(values.get("sasl.jaas.config")))
        return
    # OAUTHBEARER
    parse_extensions(values["sasl.oauthbearer.extensions"])
    if values["sasl.oauthbearer.method"] == "oidc":
        for key in (
            "sasl.oauthbearer.token.endpoint.url",
            "sasl.oauthbearer.client.id",
            "sasl.oauthbearer.client.secret",
        ):
            if values[key] is None:
                raise ConfigError(
                    f"Missing configuration '{key}': sasl.oauthbearer.method=oidc needs it "
                    "(allowed: set sasl.oauthbearer.token.endpoint.url, sasl.oauthbearer.client.id and "
                    "sasl.oauthbearer.client.secret)"
                )
        check_token_endpoint_url(
            values["sasl.oauthbearer.token.endpoint.url"],
            bool(values["sasl.oauthbearer.token.endpoint.allow.http"]),
        )
    elif values["oauth_cb"] is None:
        raise ConfigError(
            "Missing configuration 'oauth_cb': sasl.mechanism=OAUTHBEARER needs a token source "
            "(allowed: oauth_cb=<callable>, or sasl.oauthbearer.method=oidc with the token endpoint, "
            "client id and client secret)"
        )


# ------------------------------------------------------------------------------------------------ TLS
def _check_file(key: str, path: str) -> None:
    if not os.path.isfile(path):
        raise ConfigError(
            f"Invalid value {path!r} for configuration '{key}': no such file (allowed: a PEM file)"
        )


def _store_type(values: Mapping[str, Any], explicit: frozenset[str], prefix: str, path: str) -> str:
    """The format of the store at ``path``: ``{prefix}.type`` when given, else told from the file's first
    bytes (a Java ``client.properties`` often leaves the type out, and librdkafka's
    ``ssl.keystore.location`` is PKCS#12)."""
    from kafka_handoff import keystore

    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        head = b""
    found = keystore.detect_store_type(head)
    declared = str(values.get(f"{prefix}.type") or "PEM").upper()
    kind = declared if f"{prefix}.type" in explicit else found
    if kind == "JKS":
        raise keystore.jks_error(prefix, path)
    if kind == "PEM" and found != "PEM":
        raise ConfigError(
            f"Invalid value {path!r} for configuration '{prefix}.location': not a PEM file, it looks like "
            f"{'a PKCS#12' if found == 'PKCS12' else 'a JKS'} store (allowed: set {prefix}.type="
            f"{'PKCS12' if found == 'PKCS12' else 'PKCS12 after converting it'})"
        )
    return kind


def build_ssl_context(values: Mapping[str, Any], explicit: frozenset[str] = frozenset()) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    verify = bool(values["enable.ssl.certificate.verification"])
    ctx.check_hostname = verify and values["ssl.endpoint.identification.algorithm"] == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    ca = values["ssl.truststore.location"]
    if ca is not None:
        key = "ssl.truststore.location"
        _check_file(key, ca)
        try:
            if _store_type(values, explicit, "ssl.truststore", ca) == "PKCS12":
                from kafka_handoff.keystore import pkcs12_trusted_certificates

                pem = pkcs12_trusted_certificates(ca, _secret(values.get("ssl.truststore.password")))
                ctx.load_verify_locations(cadata=pem)
            else:
                ctx.load_verify_locations(cafile=ca)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"Invalid value {ca!r} for configuration '{key}' (ssl.ca.location): cannot load CA "
                f"certificates: {exc.__class__.__name__} (allowed: a PEM file of certificates)"
            ) from None
    elif values["ssl.truststore.certificates"] is not None:
        try:
            ctx.load_verify_locations(cadata=_secret(values["ssl.truststore.certificates"]))
        except (ssl.SSLError, ValueError):
            raise ConfigError(
                "Invalid value [hidden] for configuration 'ssl.truststore.certificates' (ssl.ca.pem): "
                "cannot load CA certificates (allowed: PEM certificates)"
            ) from None
    elif verify:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if values["ssl.keystore.certificate.chain"] is not None:
        _load_inline_cert_chain(ctx, values)
    store = values["ssl.keystore.location"]
    if store is not None:
        _check_file("ssl.keystore.location", store)
    if store is not None and _store_type(values, explicit, "ssl.keystore", store) == "PKCS12":
        _load_pkcs12_keystore(ctx, store, values)
        return ctx
    cert_key = "ssl.keystore.location" if values["ssl.keystore.location"] else "ssl.certificate.location"
    cert = values[cert_key]
    if cert is not None:
        _check_file(cert_key, cert)
        keyfile = values["ssl.key.location"]
        if keyfile is not None:
            _check_file("ssl.key.location", keyfile)
        password = _secret(values["ssl.key.password"])
        try:
            ctx.load_cert_chain(cert, keyfile, password=password if password is not None else _no_password)
        except (ssl.SSLError, OSError, TypeError) as exc:
            reason = (
                "wrong ssl.key.password or unreadable key"
                if "password" in str(exc).lower() or isinstance(exc, TypeError)
                else exc.__class__.__name__
            )
            raise ConfigError(
                f"Invalid value {cert!r} for configuration '{cert_key}': cannot load the client certificate "
                f"and key ({reason}; allowed: PEM certificate chain and private key, ssl.key.password for an "
                "encrypted key)"
            ) from None
    return ctx


def _load_inline_cert_chain(ctx: ssl.SSLContext, values: Mapping[str, Any]) -> None:
    """``ssl`` loads certificates and keys from paths only: the inline PEM is handed over through an
    in-memory file (:func:`~kafka_handoff.keystore.memory_file`), never a temporary file on disk that a
    crash would leave behind."""
    from kafka_handoff.keystore import memory_file

    chain = _secret(values["ssl.keystore.certificate.chain"]) or ""
    key = _secret(values["ssl.keystore.key"]) or ""
    password = _secret(values["ssl.key.password"])
    pem = (key.strip() + "\n" + chain.strip() + "\n").encode("ascii", errors="replace")
    try:
        with memory_file(pem) as path:
            ctx.load_cert_chain(path, password=password if password is not None else _no_password)
    except (ssl.SSLError, OSError, TypeError):
        raise ConfigError(
            "Invalid value [hidden] for configuration 'ssl.keystore.key' / 'ssl.keystore.certificate.chain' "
            "(ssl.key.pem / ssl.certificate.pem): cannot load the client key and certificate (allowed: PEM "
            "private key and certificate chain, ssl.key.password for an encrypted key)"
        ) from None


def _load_pkcs12_keystore(ctx: ssl.SSLContext, path: str, values: Mapping[str, Any]) -> None:
    """The client key and certificate chain of a PKCS#12 key store, handed to ``ssl`` from memory.
    ``ssl.keystore.password`` opens the store (``ssl.key.password`` when it is not set: ``keytool`` gives a
    PKCS#12 key entry the store's password)."""
    from kafka_handoff.keystore import memory_file, pkcs12_key_and_chain

    password = _secret(values.get("ssl.keystore.password"))
    if password is None:
        password = _secret(values["ssl.key.password"])
    key_pem, chain_pem, one_time = pkcs12_key_and_chain(path, password)
    try:
        with memory_file(key_pem + chain_pem) as pem:
            ctx.load_cert_chain(pem, password=one_time)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"Invalid value {path!r} for configuration 'ssl.keystore.location': cannot use the key and "
            f"certificate of the PKCS#12 key store ({exc.__class__.__name__}; allowed: a key store with the "
            "client's key entry)"
        ) from None


def _no_password() -> str:
    raise TypeError("the private key is encrypted: set ssl.key.password")


# ------------------------------------------------------------------------------------------------ tokens
def _jwt_claims(token: str) -> dict[str, Any]:
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, binascii.Error):
        return {}
    return claims if isinstance(claims, dict) else {}


class TokenProvider:
    """Keeps a current OAUTHBEARER token, fetched and refreshed on a daemon thread of its own.

    ``fetch()`` returns an :class:`OAuthToken` or raises; it runs only on the refresher thread.  The
    refresher starts at the first :meth:`get`, refreshes at :data:`REFRESH_WINDOW_FACTOR` of the token's
    lifetime and retries failures with an exponential backoff.  ``listeners`` are called (from the refresher
    thread) whenever a token or a failure arrives: the network client wakes up then."""

    def __init__(
        self,
        fetch: Callable[[], OAuthToken],
        *,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 10_000,
        source: str = "token source",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._fetch = fetch
        self._backoff = ExponentialBackoff(retry_backoff_ms, max(retry_backoff_ms, retry_backoff_max_ms))
        self.source = source
        self._clock = clock
        self._lock = threading.Lock()
        self._token: OAuthToken | None = None
        self._error: AuthenticationError | None = None
        self._failures = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.listeners: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"TokenProvider({self.source})"

    def get(self) -> OAuthToken | None:
        """The current token; ``None`` while the first fetch is under way.  Raises the last failure as an
        :class:`AuthenticationError` when there is no valid token."""
        self._ensure_started()
        with self._lock:
            token, error = self._token, self._error
        now_ms = int(self._clock() * 1000)
        if token is not None and token.expires_at_ms > now_ms:
            return token
        if error is not None:
            raise error
        return None

    def _ensure_started(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="kafka-handoff-token-refresher", daemon=True
                    )
                    self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def refresh_once(self) -> float:
        """Fetch one token now; returns seconds until the next fetch (used by the thread and by tests)."""
        try:
            token = self._fetch()
        except Exception as exc:
            error = (
                exc
                if isinstance(exc, AuthenticationError)
                else AuthenticationError(
                    f"OAUTHBEARER token from {self.source} failed: {exc.__class__.__name__}: {exc}"
                )
            )
            with self._lock:
                self._error = error
                self._failures += 1
                failures = self._failures
            log.warning("%s", error)
            self._notify()
            return self._backoff.after_failures(failures) / 1000.0
        now = self._clock()
        with self._lock:
            self._token, self._error, self._failures = token, None, 0
        self._notify()
        lifetime = token.expires_at_ms / 1000.0 - now
        log.debug("OAUTHBEARER token from %s valid for %.0f s", self.source, lifetime)
        return max(1.0, lifetime * REFRESH_WINDOW_FACTOR)

    def _notify(self) -> None:
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:
                log.debug("token listener failed", exc_info=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            wait = self.refresh_once()
            if self._stop.wait(wait):
                return


def callback_fetcher(
    oauth_cb: Callable[..., Any], config_str: str | None, extensions: Mapping[str, str]
) -> Callable[[], OAuthToken]:
    """Adapt confluent-kafka's ``oauth_cb(config_str) -> (token, expiry_epoch_s[, principal[, extensions]])``
    (or a callable of no argument, or one returning an :class:`OAuthToken`)."""
    try:
        takes_arg = bool(inspect.signature(oauth_cb).parameters)
    except (TypeError, ValueError):
        takes_arg = True

    def fetch() -> OAuthToken:
        result = oauth_cb(config_str) if takes_arg else oauth_cb()
        if isinstance(result, OAuthToken):
            merged = {**extensions, **result.extensions}
            return OAuthToken(result.value, result.expires_at_ms, result.principal, merged)
        if not isinstance(result, (tuple, list)) or len(result) < 2:
            raise AuthenticationError(
                "oauth_cb must return (token, expiry_epoch_seconds[, principal[, extensions]])"
            )
        token, expiry = str(result[0]), float(result[1])
        principal = str(result[2]) if len(result) > 2 and result[2] is not None else ""
        extra = dict(result[3]) if len(result) > 3 and result[3] else {}
        validate_extensions(extra, "oauth_cb extensions")
        return OAuthToken(token, int(expiry * 1000), principal, {**extensions, **extra})

    return fetch


OIDC_MAX_RESPONSE_BYTES = 256 * 1024
"""The largest token endpoint response read (a token response is a few KiB)."""


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_token_endpoint_url(url: str, allow_http: bool) -> None:
    """:class:`ConfigError` unless ``url`` is https, or http to a loopback address (``localhost``,
    127.0.0.0/8, ``::1``: the secret does not leave the machine), or http anywhere with
    ``sasl.oauthbearer.token.endpoint.allow.http=true``: over a network, http sends the client secret in
    clear."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "https" or (scheme == "http" and (allow_http or _is_loopback(parts.hostname))):
        return
    if scheme == "http":
        raise ConfigError(
            f"Invalid value {url!r} for configuration 'sasl.oauthbearer.token.endpoint.url': http sends the "
            "client secret in clear (allowed: an https:// URL, http:// to a loopback address, or http:// "
            "with sasl.oauthbearer.token.endpoint.allow.http=true, for tests only)"
        )
    raise ConfigError(
        f"Invalid value {url!r} for configuration 'sasl.oauthbearer.token.endpoint.url': "
        "not an https URL (allowed: https://...)"
    )


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Refuses every redirect: following one would send the client's credentials (the Authorization header)
    to wherever the endpoint points, another host or plain http included."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


class _Deadline:
    """Aborts a request still running at its deadline: shuts down the sockets it opened, so a read that a
    slow-dripping peer keeps alive (each byte resets a per-operation timeout) ends at once."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = threading.Event()
        self._sockets: list[Any] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def watch(self, conn: Any) -> Any:
        with self._lock:
            self._sockets.append(conn)
        if self.expired.is_set():
            self._expire()
        return conn

    def _expire(self) -> None:
        self.expired.set()
        with self._lock:
            conns = list(self._sockets)
        for conn in conns:
            sock = getattr(conn, "sock", None)
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def _opener(ssl_context: ssl.SSLContext | None, deadline: _Deadline) -> urllib.request.OpenerDirector:
    """An opener that follows no redirect and registers each connection it opens with ``deadline``."""

    class Http(urllib.request.HTTPHandler):
        def http_open(self, req: Any) -> Any:
            def connection(host: str, **kw: Any) -> Any:
                return deadline.watch(http.client.HTTPConnection(host, **kw))

            return self.do_open(connection, req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req: Any) -> Any:
            def connection(host: str, **kw: Any) -> Any:
                return deadline.watch(http.client.HTTPSConnection(host, **kw))

            return self.do_open(connection, req, context=ssl_context)

    return urllib.request.build_opener(Http(), Https(context=ssl_context), _NoRedirects())


def oidc_fetcher(
    url: str,
    client_id: str,
    client_secret: str,
    scope: str | None,
    extensions: Mapping[str, str],
    *,
    timeout_s: float = 10.0,
    deadline_s: float | None = None,
    allow_http: bool = False,
    max_response_bytes: int = OIDC_MAX_RESPONSE_BYTES,
    ssl_context: ssl.SSLContext | None = None,
    clock: Callable[[], float] = time.time,
) -> Callable[[], OAuthToken]:
    """The OAuth 2 client-credentials grant (RFC 6749 §4.4) against ``url``; the client id and secret go in
    an HTTP Basic header (URL-encoded first, as Java's client does).

    Hardened against a hostile or broken endpoint: ``url`` must be https unless ``allow_http``; no redirect
    is followed (a 3xx is an error: the credentials never leave for another URL); at most
    ``max_response_bytes`` are read; the whole request -- connect, send, headers, body -- must finish within
    ``deadline_s`` (default: twice ``timeout_s``, the per-operation timeout), or it fails with an
    :class:`AuthenticationError` that the refresher reports like any other."""
    check_token_endpoint_url(url, allow_http)
    overall = deadline_s if deadline_s is not None else 2 * timeout_s
    basic = base64.b64encode(
        f"{urllib.parse.quote(client_id, safe='')}:{urllib.parse.quote(client_secret, safe='')}".encode()
    ).decode()
    form = {"grant_type": "client_credentials"}
    if scope:
        form["scope"] = scope
    body = urllib.parse.urlencode(form).encode()

    def fetch() -> OAuthToken:
        request = urllib.request.Request(
            url,
            data=body,
            headers={
                "Authorization": f"Basic {basic}",
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
            method="POST",
        )
        with _Deadline(overall) as deadline:
            try:
                with _opener(ssl_context, deadline).open(
                    request, timeout=min(timeout_s, overall)
                ) as response:
                    raw = response.read(max_response_bytes + 1)
                if deadline.expired.is_set():  # the read ended because the deadline shut the socket
                    raise TimeoutError("deadline")
                if len(raw) > max_response_bytes:
                    raise AuthenticationError(
                        f"OAUTHBEARER: the OIDC token endpoint {url} sent a response larger than "
                        f"{max_response_bytes} bytes"
                    )
                data = json.loads(raw)
            except AuthenticationError:
                raise
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
                if deadline.expired.is_set():
                    raise AuthenticationError(
                        f"OAUTHBEARER: the OIDC token endpoint {url} did not answer within {overall:g} s "
                        "(sasl.login.connect.timeout.ms + sasl.login.read.timeout.ms)"
                    ) from None
                _raise_fetch_error(exc, url, client_id)
        token = data.get("access_token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token:
            raise AuthenticationError(f"OAUTHBEARER: the OIDC token endpoint {url} returned no access_token")
        claims = _jwt_claims(token)
        now = clock()
        if isinstance(data.get("expires_in"), (int, float)):
            expires_at = now + float(data["expires_in"])
        elif isinstance(claims.get("exp"), (int, float)):
            expires_at = float(claims["exp"])
        else:
            expires_at = now + 3600.0
        return OAuthToken(token, int(expires_at * 1000), str(claims.get("sub", "")), dict(extensions))

    return fetch


def _raise_fetch_error(exc: BaseException, url: str, client_id: str) -> NoReturn:
    if isinstance(exc, urllib.error.HTTPError):
        if 300 <= exc.code < 400:
            raise AuthenticationError(
                f"OAUTHBEARER: the OIDC token endpoint {url} answered with a redirect (HTTP {exc.code}), "
                "which is not followed: the client's credentials are sent to the configured URL only "
                "(configure the final URL in sasl.oauthbearer.token.endpoint.url)"
            ) from None
        detail = ""
        try:
            err = json.loads(exc.read(OIDC_MAX_RESPONSE_BYTES))
            if isinstance(err, dict):
                detail = " ".join(str(err[k]) for k in ("error", "error_description") if k in err)[:200]
        except (ValueError, OSError, http.client.HTTPException):
            pass
        raise AuthenticationError(
            f"OAUTHBEARER: the OIDC token endpoint {url} refused client {client_id!r}: HTTP {exc.code}"
            + (f" ({detail})" if detail else "")
        ) from None
    reason = getattr(exc, "reason", exc)
    raise AuthenticationError(
        f"OAUTHBEARER: cannot get a token from the OIDC token endpoint {url}: {reason}"
    ) from None


# ------------------------------------------------------------------------------------------------ warnings
_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_if_insecure(values: Mapping[str, Any]) -> None:
    """One WARNING per process for each weakened setting in use: certificate verification off, host name
    verification off, PLAIN without TLS (the password crosses the network in clear)."""
    protocol = values["security.protocol"]
    found: list[str] = []
    if protocol in _SSL_PROTOCOLS:
        if not values["enable.ssl.certificate.verification"]:
            found.append(
                "enable.ssl.certificate.verification=false: the brokers' certificates are not verified, "
                "so anyone on the network path can pose as the broker and read or change the traffic"
            )
        elif values["ssl.endpoint.identification.algorithm"] != "https":
            found.append(
                "ssl.endpoint.identification.algorithm is empty: the brokers' host names are not checked "
                "against their certificates, so any certificate the CA signed passes for any broker"
            )
    if protocol == "SASL_PLAINTEXT" and values["sasl.mechanism"] == "PLAIN":
        found.append(
            "sasl.mechanism=PLAIN over security.protocol=SASL_PLAINTEXT: the password crosses the network "
            "in clear (allowed for safety: SASL_SSL, or SCRAM)"
        )
    for message in found:
        with _warned_lock:
            if message in _warned:
                continue
            _warned.add(message)
        log.warning("insecure client setting: %s", message)


# ------------------------------------------------------------------------------------------------ settings
class SecuritySettings:
    """What the network layer needs to secure its connections (``None`` settings mean PLAINTEXT)."""

    def __init__(
        self,
        protocol: str,
        ssl_context: ssl.SSLContext | None,
        sasl_mechanism: str | None,
        mechanism_factory: Callable[[], SaslMechanism] | None,
        token_provider: TokenProvider | None,
        host_mechanism_factory: Callable[[str], SaslMechanism] | None = None,
    ) -> None:
        self.protocol = protocol
        self._host_factory = host_mechanism_factory
        self.ssl_context = ssl_context
        self.sasl_mechanism = sasl_mechanism
        self._factory = mechanism_factory
        self.token_provider = token_provider

    def __repr__(self) -> str:
        return f"SecuritySettings(protocol={self.protocol}, sasl_mechanism={self.sasl_mechanism})"

    @property
    def uses_ssl(self) -> bool:
        return self.ssl_context is not None

    @property
    def uses_sasl(self) -> bool:
        return self.sasl_mechanism is not None

    def new_mechanism(self, host: str = "") -> SaslMechanism:
        """A fresh mechanism for one exchange with the broker at ``host`` (raises AuthenticationError when
        no token or ticket can be had)."""
        if self._host_factory is not None:
            return self._host_factory(host)
        assert self._factory is not None
        return self._factory()

    def token_ready(self) -> bool:
        """False while an OAUTHBEARER token is still being fetched (raises the fetch's failure)."""
        return self.token_provider is None or self.token_provider.get() is not None

    def close(self) -> None:
        if self.token_provider is not None:
            self.token_provider.close()


def build_security(config: Any) -> SecuritySettings | None:
    """The security settings of a parsed client config (``None`` for PLAINTEXT)."""
    values: dict[str, Any] = config.as_dict()
    protocol = values["security.protocol"]
    if protocol == "PLAINTEXT":
        return None
    _warn_if_insecure(values)
    ctx = build_ssl_context(values, config.explicit) if protocol in _SSL_PROTOCOLS else None
    if protocol not in _SASL_PROTOCOLS:
        return SecuritySettings(protocol, ctx, None, None, None)
    mechanism = values["sasl.mechanism"]
    provider: TokenProvider | None = None
    factory: Callable[[], SaslMechanism]
    if mechanism == "GSSAPI":
        from kafka_handoff.kerberos import gssapi_mechanism_factory

        return SecuritySettings(protocol, ctx, mechanism, None, None, gssapi_mechanism_factory(values))
    if mechanism == "PLAIN":
        user, password = sasl_credentials(values)

        def factory() -> SaslMechanism:
            return Plain(user, password)

    elif mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        user, password = sasl_credentials(values)

        min_iterations = int(values["sasl.scram.min.iterations"])
        max_iterations = int(values["sasl.scram.max.iterations"])
        if min_iterations > max_iterations:
            raise ConfigError(
                f"sasl.scram.min.iterations ({min_iterations}) is above sasl.scram.max.iterations "
                f"({max_iterations})"
            )

        def factory() -> SaslMechanism:
            return Scram(
                mechanism, user, password, min_iterations=min_iterations, max_iterations=max_iterations
            )

    else:
        extensions = parse_extensions(values["sasl.oauthbearer.extensions"])
        if values["sasl.oauthbearer.method"] == "oidc":
            url = values["sasl.oauthbearer.token.endpoint.url"]
            fetch = oidc_fetcher(
                url,
                values["sasl.oauthbearer.client.id"],
                _secret(values["sasl.oauthbearer.client.secret"]) or "",
                values["sasl.oauthbearer.scope"],
                extensions,
                timeout_s=values["sasl.login.connect.timeout.ms"] / 1000.0,
                deadline_s=(values["sasl.login.connect.timeout.ms"] + values["sasl.login.read.timeout.ms"])
                / 1000.0,
                allow_http=bool(values["sasl.oauthbearer.token.endpoint.allow.http"]),
            )
            source = f"the OIDC token endpoint {url}"
        else:
            fetch = callback_fetcher(
                values["oauth_cb"], _secret(values["sasl.oauthbearer.config"]), extensions
            )
            source = "oauth_cb"
        provider = TokenProvider(
            fetch,
            retry_backoff_ms=values["sasl.login.retry.backoff.ms"],
            retry_backoff_max_ms=values["sasl.login.retry.backoff.max.ms"],
            source=source,
        )
        token_provider = provider

        def factory() -> SaslMechanism:
            token = token_provider.get()
            if token is None:
                raise AuthenticationError(f"no OAUTHBEARER token from {token_provider.source} yet")
            return OAuthBearer(token)

    return SecuritySettings(protocol, ctx, mechanism, factory, provider)
