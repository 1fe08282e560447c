"""SASL authentication as a sans-I/O state machine: SaslHandshake v1 + SaslAuthenticate (API keys 17, 36).

A :class:`SaslAuthenticator` is driven by the connection: :meth:`~SaslAuthenticator.start` returns the
first request (SaslHandshake naming the mechanism), and each response fed to
:meth:`~SaslAuthenticator.on_response` returns the next request, or ``None`` once the exchange is over
(then :attr:`~SaslAuthenticator.done` is true and :attr:`~SaslAuthenticator.session_lifetime_ms` holds the
broker's KIP-368 session lifetime, 0 for none).  Failures raise
:class:`~kafka_handoff.errors.AuthenticationError` naming the broker and the cause.

Mechanisms (:class:`Plain`, :class:`Scram`, :class:`OAuthBearer`, :class:`Gssapi`) are small objects with
``initial_response()`` and ``evaluate(challenge) -> bytes | None``; they never see a socket or a clock.
Nothing here puts a secret into a message, a repr or an exception.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from kafka_handoff.errors import AuthenticationError, ConfigError
from kafka_handoff.protocol.versions import ApiKey

__all__ = [
    "MECHANISMS",
    "GssContext",
    "Gssapi",
    "OAuthBearer",
    "OAuthToken",
    "Plain",
    "SaslAuthenticator",
    "SaslMechanism",
    "SaslRequest",
    "Scram",
    "parse_jaas_config",
]

SASL_HANDSHAKE = ApiKey.SASL_HANDSHAKE
SASL_AUTHENTICATE = ApiKey.SASL_AUTHENTICATE

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")

_UNSUPPORTED_SASL_MECHANISM = ErrorCode.unsupported_sasl_mechanism
_ILLEGAL_SASL_STATE = ErrorCode.illegal_sasl_state
_SASL_AUTHENTICATION_FAILED = ErrorCode.sasl_authentication_failed


class SaslMechanism(Protocol):
    name: str

    def initial_response(self) -> bytes:
        """The client's first message."""
        ...

    def evaluate(self, challenge: bytes) -> bytes | None:
        """The answer to a server message, or ``None`` when the exchange is complete."""
        ...


@dataclass(frozen=True, slots=True)
class SaslRequest:
    """A request the connection must send: ``api_key`` and the field values for ``wire.build_request``."""

    api_key: int
    values: Mapping[str, Any]

    def __repr__(self) -> str:  # the values may hold credentials
        return f"SaslRequest(api_key={self.api_key})"


# --------------------------------------------------------------------------------------------------- PLAIN
class Plain:
    """RFC 4616: ``authzid NUL authcid NUL password`` in one message."""

    name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._username = username
        self._password = password

    def initial_response(self) -> bytes:
        return b"\0" + self._username.encode() + b"\0" + self._password.encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        return None

    def __repr__(self) -> str:
        return "Plain(username=..., password=[hidden])"


# --------------------------------------------------------------------------------------------------- SCRAM
def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _normalize(password: str) -> bytes:
    # SASLprep (RFC 4013) reduced to its mapping and NFKC normalisation; passwords are rarely exotic.
    mapped = "".join(" " if unicodedata.category(ch) == "Zs" else ch for ch in password)
    mapped = "".join(ch for ch in mapped if ch not in "\u00ad\u200b\u2060\ufeff\u034f\u180b\u180c\u180d")
    return unicodedata.normalize("NFKC", mapped).encode()


SCRAM_MIN_ITERATIONS = 4096
"""Java's lower bound of a SCRAM iteration count (``ScramMechanism.minIterations``): a server -- or a man in
the middle of SASL_PLAINTEXT -- asking for fewer gets a proof that is cheap to brute-force offline."""
SCRAM_MAX_ITERATIONS = 16384
"""Java's upper bound (``ScramMechanism.maxIterations``): more would run PBKDF2 on the network thread for as
long as the server likes."""
_SCRAM_MAX_MESSAGE = 4096
"""The largest SCRAM server message accepted (they are ~100-200 bytes)."""


def _parse_attrs(message: bytes) -> dict[str, str]:
    if len(message) > _SCRAM_MAX_MESSAGE:
        raise AuthenticationError(f"oversized server message ({len(message)} bytes)")
    try:
        text = message.decode("ascii")
    except UnicodeDecodeError:
        raise AuthenticationError("malformed server message (not printable ASCII)") from None
    if not text.isprintable():
        raise AuthenticationError("malformed server message (not printable ASCII)")
    out: dict[str, str] = {}
    for part in text.split(","):
        if len(part) >= 2 and part[1] == "=":
            out[part[0]] = part[2:]
    return out


class Scram:
    """RFC 5802 / RFC 7677 SCRAM client (no channel binding: GS2 header ``n,,``); verifies the server's
    signature in its final message."""

    _ALGORITHMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512", "SCRAM-SHA-1": "sha1"}

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        *,
        nonce: str | None = None,
        min_iterations: int = SCRAM_MIN_ITERATIONS,
        max_iterations: int = SCRAM_MAX_ITERATIONS,
    ) -> None:
        if mechanism not in self._ALGORITHMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self._min_iterations = min_iterations
        self._max_iterations = max_iterations
        self.name = mechanism
        self._hash = self._ALGORITHMS[mechanism]
        self._username = username
        self._password = password
        self._nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._client_first_bare = f"n={_saslname(username)},r={self._nonce}"
        self._server_signature: bytes | None = None
        self._step = 0

    def __repr__(self) -> str:
        return f"Scram({self.name}, username=..., password=[hidden])"

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def initial_response(self) -> bytes:
        self._step = 1
        return ("n,," + self._client_first_bare).encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if self._step == 1:
            self._step = 2
            return self._client_final(challenge)
        if self._step == 2:
            self._step = 3
            self._verify_server_final(challenge)
            return None
        raise AuthenticationError(f"{self.name}: unexpected message from the server after the exchange")

    def _client_final(self, server_first: bytes) -> bytes:
        attrs = _parse_attrs(server_first)
        if "e" in attrs:
            raise AuthenticationError(f"{self.name}: the server refused: {attrs['e']}")
        try:
            nonce, salt_b64, iterations_text = attrs["r"], attrs["s"], attrs["i"]
            if not iterations_text.isdigit() or len(iterations_text) > 10:
                raise ValueError("iteration count")
            iterations = int(iterations_text)
            salt = base64.b64decode(salt_b64, validate=True)
        except (KeyError, ValueError) as exc:
            raise AuthenticationError(f"{self.name}: malformed server-first message") from exc
        if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
            raise AuthenticationError(f"{self.name}: the server's nonce does not extend the client's")
        if not salt:
            raise AuthenticationError(f"{self.name}: the server sent an empty salt")
        if iterations < self._min_iterations:
            raise AuthenticationError(
                f"{self.name}: the server asked for {iterations} iterations, fewer than the minimum "
                f"{self._min_iterations} (sasl.scram.min.iterations)"
            )
        if iterations > self._max_iterations:
            raise AuthenticationError(
                f"{self.name}: the server asked for {iterations} iterations, more than the maximum "
                f"{self._max_iterations} (sasl.scram.max.iterations)"
            )
        salted = hashlib.pbkdf2_hmac(self._hash, _normalize(self._password), salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        final_without_proof = f"c=biws,r={nonce}"
        auth_message = (
            f"{self._client_first_bare},{server_first.decode('ascii')},{final_without_proof}".encode()
        )
        client_signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        server_key = self._hmac(salted, b"Server Key")
        self._server_signature = self._hmac(server_key, auth_message)
        return f"{final_without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, server_final: bytes) -> None:
        attrs = _parse_attrs(server_final)
        if "e" in attrs:
            raise AuthenticationError(f"{self.name}: the server refused: {attrs['e']}")
        try:
            signature = base64.b64decode(attrs["v"], validate=True)
        except (KeyError, ValueError) as exc:
            raise AuthenticationError(f"{self.name}: malformed server-final message") from exc
        assert self._server_signature is not None
        if not hmac.compare_digest(signature, self._server_signature):
            raise AuthenticationError(
                f"{self.name}: the server's signature is wrong (the server does not know the credentials)"
            )


# ----------------------------------------------------------------------------------------------- OAUTHBEARER
@dataclass(frozen=True, slots=True)
class OAuthToken:
    """A bearer token, when it expires (epoch milliseconds), and the SASL extensions to send with it."""

    value: str = field(repr=False)
    expires_at_ms: int
    principal: str = ""
    extensions: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"OAuthToken(value=[hidden], expires_at_ms={self.expires_at_ms}, principal={self.principal!r})"


_EXTENSION_KEY = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")


def validate_extensions(extensions: Mapping[str, str], key: str = "sasl.oauthbearer.extensions") -> None:
    """RFC 7628 §3.1: keys are letters (``auth`` is reserved), values printable ASCII."""
    for name, value in extensions.items():
        if not _EXTENSION_KEY.fullmatch(name) or name == "auth":
            raise ConfigError(
                f"Invalid SASL extension name {name!r} in '{key}' (allowed: letters only, not 'auth')"
            )
        if not _EXTENSION_VALUE.fullmatch(value):
            raise ConfigError(
                f"Invalid value for SASL extension {name!r} in '{key}' (allowed: printable ASCII)"
            )


class OAuthBearer:
    """RFC 7628 client: ``n,,^Aauth=Bearer <token>^A[key=value^A]...^A``.  A server error (a JSON challenge)
    is answered with ``^A`` as the RFC requires; the broker then fails the exchange with its message."""

    name = "OAUTHBEARER"

    def __init__(self, token: OAuthToken) -> None:
        self._token = token
        self.server_error: str | None = None

    def __repr__(self) -> str:
        return "OAuthBearer(token=[hidden])"

    def initial_response(self) -> bytes:
        parts = [f"auth=Bearer {self._token.value}"]
        parts += [f"{k}={v}" for k, v in self._token.extensions.items()]
        return ("n,," + "\x01" + "\x01".join(parts) + "\x01\x01").encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if challenge:
            self.server_error = challenge.decode(errors="replace")
            return b"\x01"
        return None


# ---------------------------------------------------------------------------------------------- GSSAPI
class GssContext(Protocol):
    """The initiator side of a GSS-API security context (``kafka_handoff.kerberos`` adapts the ``gssapi``
    package; the unit tests use a fake).  Errors are raised as :class:`AuthenticationError`."""

    @property
    def complete(self) -> bool:
        """True once the context is established."""
        ...

    def step(self, token: bytes | None) -> bytes | None:
        """``gss_init_sec_context``: the next token for the acceptor (``None``/empty: nothing to send)."""
        ...

    def unwrap(self, message: bytes) -> bytes:
        """``gss_unwrap``: the payload of a wrapped message from the acceptor."""
        ...

    def wrap(self, message: bytes) -> bytes:
        """``gss_wrap`` with integrity only (no confidentiality)."""
        ...


_LAYER_NONE = 0x01  # RFC 4752 §3.3: bit 0 of the security-layer byte is "no security layer"


class Gssapi:
    """RFC 4752 GSSAPI (Kerberos V5) client as Kafka uses it: the context tokens until the context is
    established (mutual authentication: the broker's AP-REP completes it, then an empty answer), then the
    security-layer negotiation -- the broker's wrapped 4-byte offer (layers bit mask, maximum message
    size) is answered with a wrapped ``[no security layer, 0, 0, 0]`` and no authorization id (Kafka
    authenticates only; the traffic after it is never wrapped).  The broker's last, empty, response ends
    the exchange."""

    name = "GSSAPI"

    def __init__(self, context: GssContext) -> None:
        self._ctx = context
        self._state = "context"

    def __repr__(self) -> str:
        return f"Gssapi(state={self._state})"

    def initial_response(self) -> bytes:
        token = self._ctx.step(None)
        if self._ctx.complete:
            self._state = "layer"
        return token or b""

    def evaluate(self, challenge: bytes) -> bytes | None:
        if self._state == "context":
            token = self._ctx.step(challenge)
            if self._ctx.complete:
                self._state = "layer"
            return token or b""
        if self._state == "layer":
            if not challenge:
                return b""  # the broker had nothing to say after our last context token: ask for the offer
            return self._security_layer(challenge)
        if self._state == "sent-layer":
            if challenge:
                raise AuthenticationError("GSSAPI: unexpected message from the broker after the exchange")
            self._state = "done"
            return None
        raise AuthenticationError("GSSAPI: unexpected message from the broker after the exchange")

    def _security_layer(self, challenge: bytes) -> bytes:
        offer = self._ctx.unwrap(challenge)
        if len(offer) != 4:
            raise AuthenticationError(
                f"GSSAPI: the broker's security-layer offer has {len(offer)} bytes (expected 4)"
            )
        if not offer[0] & _LAYER_NONE:
            raise AuthenticationError(
                f"GSSAPI: the broker requires a security layer (offer bit mask 0x{offer[0]:02x}); Kafka "
                "uses GSSAPI for authentication only (sasl.qop=auth)"
            )
        self._state = "sent-layer"
        return self._ctx.wrap(bytes((_LAYER_NONE, 0, 0, 0)))


# ------------------------------------------------------------------------------------------------- the flow
class SaslAuthenticator:
    """One SASL exchange with one broker (also used again for KIP-368 re-authentication).

    ``versions`` are the negotiated API versions of the connection; ``broker`` names it in errors
    (``host:port (node N)``).  ``mechanism`` is built lazily by ``factory`` when the handshake succeeded
    (an OAUTHBEARER token is read only then)."""

    def __init__(
        self,
        mechanism_name: str,
        factory: Callable[[], SaslMechanism],
        versions: Mapping[int, int],
        broker: str,
        node_id: int | None = None,
    ) -> None:
        self.mechanism_name = mechanism_name
        self._factory = factory
        self._broker = broker
        self._node_id = node_id
        self._mechanism: SaslMechanism | None = None
        self.handshake_version = 1
        self.authenticate_version = versions.get(SASL_AUTHENTICATE, -1)
        if versions.get(SASL_HANDSHAKE, -1) < 1 or self.authenticate_version < 0:
            raise self._error(
                "the broker does not offer SaslHandshake v1 and SaslAuthenticate; is its listener "
                "configured for SASL?"
            )
        self.done = False
        self.session_lifetime_ms = 0
        self._state = "init"

    def _error(self, cause: str) -> AuthenticationError:
        node = f" (node {self._node_id})" if self._node_id is not None and self._node_id >= 0 else ""
        return AuthenticationError(
            f"SASL {self.mechanism_name} authentication with broker {self._broker}{node} failed: {cause}",
            broker=self._broker,
            node_id=self._node_id,
        )

    def start(self) -> SaslRequest:
        self._state = "handshake"
        return SaslRequest(SASL_HANDSHAKE, {"mechanism": self.mechanism_name})

    def on_response(self, api_key: int, response: Any) -> SaslRequest | None:
        """Feed a SaslHandshake/SaslAuthenticate response; returns the next request or ``None`` (done)."""
        code = int(response.error_code)
        if api_key == SASL_HANDSHAKE:
            if self._state != "handshake":
                raise self._error("unexpected SaslHandshake response")
            if code == _UNSUPPORTED_SASL_MECHANISM:
                enabled = ", ".join(str(m) for m in response.mechanisms) or "none"
                raise self._error(
                    f"the broker does not enable mechanism {self.mechanism_name} (UNSUPPORTED_SASL_MECHANISM;"
                    f" enabled: {enabled})"
                )
            if code != ErrorCode.none:
                raise self._error(f"SaslHandshake returned error code {code}")
            try:
                self._mechanism = self._factory()
                first = self._mechanism.initial_response()  # GSSAPI: the service ticket, from the KDC
            except AuthenticationError as exc:
                raise self._error(str(exc)) from exc
            self._state = "authenticate"
            return self._authenticate(first)
        if api_key != SASL_AUTHENTICATE or self._state != "authenticate":
            raise self._error(f"unexpected response (api key {api_key})")
        assert self._mechanism is not None
        if code != ErrorCode.none:
            message = str(response.error_message or "") or "no message"
            server_error = getattr(self._mechanism, "server_error", None)
            if server_error:
                message += f"; server said: {server_error}"
            name = "SASL_AUTHENTICATION_FAILED" if code == _SASL_AUTHENTICATION_FAILED else f"error {code}"
            raise self._error(f"{name}: {message}")
        lifetime = getattr(response, "session_lifetime", None)
        if lifetime is not None:
            self.session_lifetime_ms = (
                int(lifetime.total_seconds() * 1000) if hasattr(lifetime, "total_seconds") else int(lifetime)
            )
        try:
            answer = self._mechanism.evaluate(bytes(response.auth_bytes))
        except AuthenticationError as exc:
            raise self._error(str(exc)) from exc
        except Exception as exc:  # a malformed server message the mechanism did not foresee
            raise self._error(f"malformed server message ({type(exc).__name__})") from exc
        if answer is None:
            self.done = True
            self._state = "done"
            return None
        return self._authenticate(answer)

    def _authenticate(self, data: bytes) -> SaslRequest:
        return SaslRequest(SASL_AUTHENTICATE, {"auth_bytes": data})


# ------------------------------------------------------------------------------------ sasl.jaas.config
_JAAS_RE = re.compile(
    r"\s*(?P<module>[A-Za-z0-9_.$]+)\s+(?P<flag>required|requisite|sufficient|optional)(?P<opts>.*?);?\s*$",
    re.DOTALL,
)
_JAAS_OPT_RE = re.compile(r'\s*([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')

_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule": ("OAUTHBEARER",),
    "com.sun.security.auth.module.Krb5LoginModule": ("GSSAPI",),
}


def parse_jaas_config(text: str, key: str = "sasl.jaas.config") -> tuple[str, dict[str, str]]:
    """Parse Java's ``sasl.jaas.config`` (``<LoginModule> required k="v" ...;``) into the module name and
    its options.  Errors name the key but never echo the text (it holds the password)."""
    match = _JAAS_RE.fullmatch(text)
    if match is None:
        raise ConfigError(
            f"Invalid value [hidden] for configuration '{key}': expected '<LoginModule class> required "
            'key="value" ...;' + "'"
        )
    module = match["module"]
    if module not in _LOGIN_MODULES:
        raise ConfigError(
            f"Invalid value [hidden] for configuration '{key}': login module {module} is not supported "
            f"(allowed: {', '.join(_LOGIN_MODULES)})"
        )
    options: dict[str, str] = {}
    rest = match["opts"]
    pos = 0
    while pos < len(rest):
        if not rest[pos:].strip():
            break
        opt = _JAAS_OPT_RE.match(rest, pos)
        if opt is None:
            raise ConfigError(
                f"Invalid value [hidden] for configuration '{key}': cannot parse the options of {module}"
            )
        value = opt[2] if opt[2] is not None else opt[3]
        options[opt[1]] = re.sub(r"\\(.)", r"\1", value)
        pos = opt.end()
    return module, options


def jaas_mechanisms(module: str) -> tuple[str, ...]:
    """The SASL mechanisms a JAAS login module serves."""
    return _LOGIN_MODULES.get(module, ())
