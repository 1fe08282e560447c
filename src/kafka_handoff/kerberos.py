"""Kerberos for SASL/GSSAPI: the client's login (credentials) and its GSS-API contexts, on the ``gssapi``
package (``pip install 'kafka-handoff[kerberos]'``; MIT Kerberos underneath).

:class:`KerberosLogin` holds what ``sasl.kerberos.*`` / a ``Krb5LoginModule`` ``sasl.jaas.config`` say:

* with a keytab (``sasl.kerberos.keytab``, or ``useKeyTab=true keyTab="..."``): a kinit-free login -- the
  credentials are acquired from the keytab into a private in-memory credential cache (``MEMORY:``) of this
  process, so the user's own ticket cache is neither read nor changed.  A new cache (a new TGT from the
  KDC) is made at an authentication (every new connection and every KIP-368 re-authentication
  authenticates) once :data:`RENEW_WINDOW_FACTOR` of the current TGT's life has passed (not sooner than
  ``sasl.kerberos.min.time.before.relogin`` after the last login, unless it expired), and MIT Kerberos
  itself refreshes from the keytab in between: tickets never run out under a long-lived client.
* without a keytab: the ticket cache (``ticketCache="..."`` of the JAAS line, else ``KRB5CCNAME`` or the
  default cache) that ``kinit`` or a renewal daemon keeps fresh; it is read again at every authentication.

The broker's service principal is ``<sasl.kerberos.service.name>/<host>`` with the host the connection
was made to (as librdkafka does; no DNS look-up by this code), in the realm the Kerberos
configuration (``KRB5_CONFIG``) maps it to.  A missing keytab, an unknown principal, a wrong key version
or an expired ticket becomes an :class:`~kafka_handoff.errors.AuthenticationError` naming the cause; the
connection then fails with the broker named.  Credential acquisition may talk to the KDC and runs on the
network thread (bounded by ``kdc_timeout`` and ``max_retries`` of the Kerberos configuration).
"""

from __future__ import annotations

import os
import random
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kafka_handoff.errors import AuthenticationError, ConfigError

if TYPE_CHECKING:
    from kafka_handoff.protocol.sasl import SaslMechanism

__all__ = [
    "RENEW_WINDOW_FACTOR",
    "GssapiContext",
    "KerberosLogin",
    "gssapi_mechanism_factory",
    "kerberos_options",
]

RENEW_WINDOW_FACTOR = 0.8
"""Log in from the keytab again at an authentication once this fraction of the TGT's life has passed
(``sasl.kerberos.ticket.renew.window.factor``, Java's default; plus up to
``sasl.kerberos.ticket.renew.jitter`` of it, at random)."""

KRB5_LOGIN_MODULE = "com.sun.security.auth.module.Krb5LoginModule"


def _gssapi() -> Any:
    try:
        import gssapi
    except ImportError as exc:
        raise ConfigError(
            "Invalid value 'GSSAPI' for configuration 'sasl.mechanism': the 'gssapi' package is not "
            "installed (allowed: pip install 'kafka-handoff[kerberos]', which needs MIT Kerberos; or "
            "another sasl.mechanism)"
        ) from exc
    return gssapi


def _gss_message(exc: BaseException) -> str:
    gen = getattr(exc, "gen_message", None)
    if callable(gen):
        try:
            return " ".join(str(gen()).split())
        except Exception:  # pragma: no cover - defensive: the message of a message
            pass
    return f"{exc.__class__.__name__}: {exc}"


def _truthy(value: str | None) -> bool:
    return str(value).strip().lower() == "true"


def kerberos_options(values: Mapping[str, Any], jaas: str | None) -> dict[str, str | None]:
    """``service``, ``principal``, ``keytab`` and ``ccache`` from ``sasl.kerberos.*`` and, when given, a
    ``Krb5LoginModule`` ``sasl.jaas.config`` (whose ``principal``/``keyTab`` win, as in Java).  Raises
    :class:`ConfigError` naming the key."""
    from kafka_handoff.protocol.sasl import parse_jaas_config

    service = str(values.get("sasl.kerberos.service.name") or "kafka")
    principal = values.get("sasl.kerberos.principal")
    keytab = values.get("sasl.kerberos.keytab")
    ccache: str | None = None
    if jaas is not None:
        module, options = parse_jaas_config(jaas)
        if module != KRB5_LOGIN_MODULE:
            raise ConfigError(
                f"Invalid value [hidden] for configuration 'sasl.jaas.config': login module {module} "
                f"does not serve sasl.mechanism=GSSAPI (allowed: {KRB5_LOGIN_MODULE})"
            )
        if options.get("principal"):
            principal = options["principal"]
        if options.get("serviceName") and service == "kafka":
            # Kafka's JAAS option; sasl.kerberos.service.name wins when set to something else.
            service = options["serviceName"]
        if _truthy(options.get("useKeyTab")):
            if not options.get("keyTab"):
                raise ConfigError(
                    "Invalid value [hidden] for configuration 'sasl.jaas.config': useKeyTab=true needs "
                    'keyTab="<file>"'
                )
            keytab = options["keyTab"]
        elif options.get("keyTab"):
            raise ConfigError(
                "Invalid value [hidden] for configuration 'sasl.jaas.config': keyTab is given without "
                'useKeyTab=true (allowed: useKeyTab=true keyTab="<file>", or useTicketCache=true)'
            )
        else:
            keytab = None
        if options.get("ticketCache"):
            ccache = options["ticketCache"]
    if not service or "/" in service or "@" in service:
        raise ConfigError(
            f"Invalid value {service!r} for configuration 'sasl.kerberos.service.name' (allowed: the "
            "primary of the brokers' Kerberos principal, e.g. kafka)"
        )
    return {
        "service": service,
        "principal": str(principal) if principal else None,
        "keytab": str(keytab) if keytab else None,
        "ccache": ccache,
    }


class GssapiContext:
    """A :class:`~kafka_handoff.protocol.sasl.GssContext` on ``gssapi.SecurityContext`` (initiator,
    mutual authentication, integrity)."""

    def __init__(self, service: str, host: str, credentials: Any) -> None:
        gssapi = _gssapi()
        flags = (
            gssapi.RequirementFlag.mutual_authentication
            | gssapi.RequirementFlag.integrity
            | gssapi.RequirementFlag.out_of_sequence_detection
        )
        try:
            target = gssapi.Name(f"{service}@{host}", gssapi.NameType.hostbased_service)
            self._ctx = gssapi.SecurityContext(name=target, creds=credentials, usage="initiate", flags=flags)
        except gssapi.exceptions.GSSError as exc:
            raise AuthenticationError(f"GSSAPI: service {service}@{host}: {_gss_message(exc)}") from None
        self._target = f"{service}/{host}"

    @property
    def complete(self) -> bool:
        return bool(self._ctx.complete)

    def step(self, token: bytes | None) -> bytes | None:
        gssapi = _gssapi()
        try:
            out = self._ctx.step(token)
        except gssapi.exceptions.GSSError as exc:
            raise AuthenticationError(
                f"GSSAPI: cannot get or use a ticket for {self._target}: {_gss_message(exc)}"
            ) from None
        return bytes(out) if out is not None else None

    def unwrap(self, message: bytes) -> bytes:
        gssapi = _gssapi()
        try:
            return bytes(self._ctx.unwrap(message).message)
        except gssapi.exceptions.GSSError as exc:
            raise AuthenticationError(
                f"GSSAPI: cannot unwrap the broker's security-layer offer: {_gss_message(exc)}"
            ) from None

    def wrap(self, message: bytes) -> bytes:
        gssapi = _gssapi()
        try:
            return bytes(self._ctx.wrap(message, False).message)
        except gssapi.exceptions.GSSError as exc:
            raise AuthenticationError(
                f"GSSAPI: cannot wrap the security-layer answer: {_gss_message(exc)}"
            ) from None


class KerberosLogin:
    """The client's Kerberos credentials (see the module docstring); thread-safe."""

    def __init__(
        self,
        service: str,
        principal: str | None = None,
        keytab: str | None = None,
        ccache: str | None = None,
        *,
        renew_window_factor: float = RENEW_WINDOW_FACTOR,
        renew_jitter: float = 0.05,
        min_relogin_ms: int = 60_000,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.service = service
        self.principal = principal
        self.keytab = keytab
        self.ccache = ccache
        self._factor = renew_window_factor
        self._jitter = renew_jitter
        self._min_relogin_s = min_relogin_ms / 1000.0
        self._clock = clock
        self._rng = rng
        self._lock = threading.Lock()
        self._creds: Any = None
        self._full_lifetime = 0
        self._login_at = 0.0
        self._renew_at = renew_window_factor
        self.logins = 0
        """How many times credentials were acquired from the keytab (a new private cache each)."""

    def __repr__(self) -> str:
        source = f"keytab {self.keytab}" if self.keytab else f"ticket cache {self.ccache or 'default'}"
        return f"KerberosLogin(service={self.service}, principal={self.principal!r}, {source})"

    def _who(self) -> str:
        return f"principal {self.principal}" if self.principal else "the default principal"

    def credentials(self) -> Any:
        """Current credentials for one authentication (acquiring new ones when needed)."""
        gssapi = _gssapi()
        with self._lock:
            try:
                if self.keytab is None:
                    return self._from_ccache(gssapi)
                return self._from_keytab(gssapi)
            except gssapi.exceptions.GSSError as exc:
                self._creds = None
                source = (
                    f"keytab {self.keytab}" if self.keytab else f"ticket cache {self.ccache or 'default'}"
                )
                message = _gss_message(exc)
                hint = ""
                if self.keytab and ("integrity check" in message or "Preauthentication failed" in message):
                    hint = " (the keytab's key is not the principal's current key: export the keytab again)"
                raise AuthenticationError(
                    f"GSSAPI: no Kerberos credentials for {self._who()} from {source}: {message}{hint}"
                ) from None

    def _name(self, gssapi: Any) -> Any:
        if not self.principal:
            return None
        return gssapi.Name(self.principal, gssapi.NameType.kerberos_principal)

    def _from_ccache(self, gssapi: Any) -> Any:
        store = {b"ccache": self.ccache.encode()} if self.ccache else None
        creds = gssapi.Credentials(name=self._name(gssapi), usage="initiate", store=store)
        lifetime = creds.lifetime
        if lifetime is not None and lifetime <= 0:
            raise AuthenticationError(
                f"GSSAPI: the Kerberos ticket of {self._who()} in ticket cache {self.ccache or 'default'} "
                "has expired (renew it with kinit, or use a keytab: sasl.kerberos.keytab)"
            )
        return creds

    def _from_keytab(self, gssapi: Any) -> Any:
        assert self.keytab is not None
        if not os.path.isfile(self.keytab):
            raise AuthenticationError(
                f"GSSAPI: keytab file {self.keytab} not found (sasl.kerberos.keytab, or keyTab in "
                "sasl.jaas.config)"
            )
        creds = self._creds
        if creds is not None:
            try:
                left = creds.lifetime
            except gssapi.exceptions.GSSError:
                left = 0
            if left is None:  # no expiry
                return creds
            if left > 0:
                passed = 1.0 - left / self._full_lifetime if self._full_lifetime > 0 else 1.0
                recent = self._clock() - self._login_at < self._min_relogin_s
                if passed < self._renew_at or recent:
                    return creds
        store = {
            b"client_keytab": self.keytab.encode(),
            b"ccache": f"MEMORY:kafka-handoff-{secrets.token_hex(8)}".encode(),
        }
        creds = gssapi.Credentials(name=self._name(gssapi), usage="initiate", store=store)
        left = creds.lifetime
        self._full_lifetime = int(left or 0)
        self._creds = creds
        self._login_at = self._clock()
        self._renew_at = self._factor + self._jitter * self._rng()
        self.logins += 1
        return creds

    def new_context(self, host: str) -> GssapiContext:
        """A GSS-API context for the broker at ``host``, with current credentials."""
        return GssapiContext(self.service, host, self.credentials())


def gssapi_mechanism_factory(values: Mapping[str, Any]) -> Callable[[str], SaslMechanism]:
    """``host -> Gssapi mechanism`` for a parsed client config (``values``: its ``as_dict()``); one
    :class:`KerberosLogin` serves every connection of the client."""
    from kafka_handoff.protocol.sasl import Gssapi

    _gssapi()  # a missing package is a configuration error, raised when the client is made
    jaas = values.get("sasl.jaas.config")
    secret = None if jaas is None else str(jaas.value) if hasattr(jaas, "value") else str(jaas)
    options = kerberos_options(values, secret)
    service = options["service"]
    assert service is not None
    login = KerberosLogin(
        service,
        options["principal"],
        options["keytab"],
        options["ccache"],
        renew_window_factor=float(
            values.get("sasl.kerberos.ticket.renew.window.factor", RENEW_WINDOW_FACTOR)
        ),
        renew_jitter=float(values.get("sasl.kerberos.ticket.renew.jitter", 0.05)),
        min_relogin_ms=int(values.get("sasl.kerberos.min.time.before.relogin", 60_000)),
    )

    def factory(host: str) -> SaslMechanism:
        return Gssapi(login.new_context(host))

    return factory
