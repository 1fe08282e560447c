"""A tiny OAuth 2 token endpoint and JWKS server for the secured dev broker (tests and demos only).

Run as a script (``python -I _oidc_server.py CONFIG_JSON``); it imports only the standard library and
``cryptography`` so that it starts fast, and runs until SIGTERM/SIGINT.  CONFIG_JSON (written by
:mod:`kafka_handoff.devbroker.security`) names the port, the issuer, the audience, the RS256 signing key
(a PEM file), its key id, and the registered clients (``client_id -> {"secret", "subject"}``).

* ``POST /token``: the client-credentials grant (RFC 6749 section 4.4).  The client authenticates with
  HTTP Basic or with ``client_id``/``client_secret`` form fields; the answer is a signed JWT (``sub`` =
  the client's subject, which the broker takes as the principal name) with ``expires_in``.  A wrong
  secret or an unknown client gets 401 ``invalid_client``; another grant type 400
  ``unsupported_grant_type``.
* ``GET /jwks``: the public key as a JSON Web Key Set (the broker reads the same set from a file).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote_plus

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def sign_rs256(key: rsa.RSAPrivateKey, kid: str, claims: dict[str, Any]) -> str:
    """A compact JWS (RS256) of ``claims``."""
    header = {"alg": "RS256", "typ": "JWT", "kid": kid}
    signing_input = (
        b64url(json.dumps(header, separators=(",", ":")).encode())
        + "."
        + b64url(json.dumps(claims, separators=(",", ":")).encode())
    )
    signature = key.sign(signing_input.encode("ascii"), padding.PKCS1v15(), hashes.SHA256())
    return signing_input + "." + b64url(signature)


def jwks(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    numbers = key.public_key().public_numbers()

    def uint(value: int) -> str:
        return b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))

    jwk = {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid, "n": uint(numbers.n), "e": uint(numbers.e)}
    return {"keys": [jwk]}


def issue_claims(
    subject: str, issuer: str, audience: str, lifetime_s: int, scope: str | None = None
) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": issuer,
        "sub": subject,
        "aud": audience,
        "iat": now,
        "nbf": now,
        "exp": now + lifetime_s,
        "jti": uuid.uuid4().hex,
    }
    if scope:
        claims["scope"] = scope
    return claims


class _Handler(BaseHTTPRequestHandler):
    server_version = "kafka-handoff-dev-oidc"
    config: dict[str, Any] = {}
    key: rsa.RSAPrivateKey

    def log_message(self, format: str, *args: Any) -> None:
        sys.stdout.write(f"{self.log_date_time_string()} {format % args}\n")
        sys.stdout.flush()

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.split("?")[0] in ("/jwks", "/.well-known/jwks.json"):
            self._reply(200, jwks(self.key, self.config["kid"]))
        else:
            self._reply(404, {"error": "not_found"})

    def do_POST(self) -> None:
        if self.path.split("?")[0] != "/token":
            self._reply(404, {"error": "not_found"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode("utf-8", "replace")).items()}
        client_id, secret = form.get("client_id"), form.get("client_secret")
        auth = self.headers.get("Authorization", "")
        if auth.lower().startswith("basic "):
            try:
                raw = base64.b64decode(auth[6:].strip()).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                raw = ""
            user, _, password = raw.partition(":")
            client_id, secret = unquote_plus(user), unquote_plus(password)
        if form.get("grant_type") != "client_credentials":
            self._reply(400, {"error": "unsupported_grant_type"})
            return
        client = self.config["clients"].get(client_id or "")
        if client is None or not hmac.compare_digest(str(client["secret"]), secret or ""):
            self._reply(401, {"error": "invalid_client", "error_description": "client authentication failed"})
            return
        lifetime = int(self.config.get("token_lifetime_s", 3600))
        claims = issue_claims(
            client["subject"], self.config["issuer"], self.config["audience"], lifetime, form.get("scope")
        )
        token = sign_rs256(self.key, self.config["kid"], claims)
        self._reply(200, {"access_token": token, "token_type": "Bearer", "expires_in": lifetime})


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: _oidc_server.py CONFIG_JSON", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        config = json.load(f)
    with open(config["key_file"], "rb") as kf:
        key = serialization.load_pem_private_key(kf.read(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    handler = type("Handler", (_Handler,), {"config": config, "key": key})
    server = ThreadingHTTPServer(("127.0.0.1", int(config["port"])), handler)
    server.daemon_threads = True

    def on_signal(signum: int, frame: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    print(f"serving on 127.0.0.1:{config['port']}", flush=True)
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
