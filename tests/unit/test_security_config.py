"""Security configuration: Java's and librdkafka's names, validation, secrets kept out of every text,
OAUTHBEARER token sources (oauth_cb, OIDC client credentials against a local HTTP endpoint) and refresh."""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from kafka_handoff.config import (
    Password,
    parse_admin_config,
    parse_consumer_config,
    parse_producer_config,
)
from kafka_handoff.errors import AuthenticationError, ConfigError
from kafka_handoff.protocol.sasl import OAuthBearer, OAuthToken, Plain, Scram
from kafka_handoff.security import TokenProvider, build_security, callback_fetcher, oidc_fetcher

pytestmark = pytest.mark.threads  # real clients with their network threads (no broker)

BOOT = {"bootstrap.servers": "localhost:9092"}
SECRETS = ("hunter2-pw", "jaas-secret-9", "client-secret-5", "key-pass-3", "cb-config-secret")


def _no_secret_in(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"secret {secret!r} leaked into: {text[:300]}"


# --------------------------------------------------------------------------------------------- names
def test_librdkafka_names_are_accepted_for_every_client() -> None:
    props = {
        **BOOT,
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "hunter2-pw",
        "ssl.ca.location": "/etc/ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
    }
    for parse in (parse_consumer_config, parse_producer_config, parse_admin_config):
        cfg = parse(props)
        assert cfg.get("sasl.mechanism") == "SCRAM-SHA-512"
        assert cfg.get("ssl.truststore.location") == "/etc/ca.pem"
        assert cfg.get("ssl.endpoint.identification.algorithm") == ""
        assert cfg.get("sasl.password") == Password("hunter2-pw")
        assert cfg.get("sasl.password").value == "hunter2-pw"


def test_java_jaas_config_gives_the_credentials() -> None:
    cfg = parse_consumer_config(
        {
            **BOOT,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="bob" password="jaas-secret-9";',
        }
    )
    security = build_security(cfg)
    assert security is not None and security.ssl_context is None
    mech = security.new_mechanism()
    assert isinstance(mech, Plain) and mech.initial_response() == b"\0bob\0jaas-secret-9"


def test_scram_mechanism_and_tls_context() -> None:
    cfg = parse_producer_config(
        {
            **BOOT,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "u",
            "sasl.password": "p",
        }
    )
    security = build_security(cfg)
    assert security is not None and security.ssl_context is not None
    assert security.ssl_context.check_hostname  # https by default, as in Java
    import ssl

    assert security.ssl_context.minimum_version is ssl.TLSVersion.TLSv1_2
    assert isinstance(security.new_mechanism(), Scram)


def test_alias_and_key_with_different_values_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"'sasl\.mechanisms' is an alias of 'sasl\.mechanism'"):
        parse_consumer_config(
            {
                **BOOT,
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.mechanisms": "SCRAM-SHA-256",
            }
        )


# --------------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("props", "fragments"),
    [
        (
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "DIGEST-MD5"},
            ["'sasl.mechanism'", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"],
        ),
        (
            {"security.protocol": "SASL_SSL", "sasl.kerberos.service.name": "kafka@host"},  # default: GSSAPI
            ["'sasl.kerberos.service.name'", "kafka@host"],
        ),
        (
            {"ssl.ca.location": "/x.pem"},
            ["ssl.truststore.location", "security.protocol=PLAINTEXT", "SSL or SASL_SSL"],
        ),
        (
            {"security.protocol": "SSL", "sasl.username": "u"},
            ["sasl.username", "security.protocol=SSL", "SASL_PLAINTEXT or SASL_SSL"],
        ),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.password": "hunter2-pw"},
            ["'sasl.username'", "PLAIN", "sasl.jaas.config"],
        ),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u"},
            ["'sasl.password'"],
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                'username="u" password="jaas-secret-9";',
            },
            ["'sasl.jaas.config'", "PlainLoginModule", "SCRAM-SHA-256"],
        ),
        (
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"},
            ["'oauth_cb'", "sasl.oauthbearer.method=oidc"],
        ),
        (
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.client.id": "c",
                "sasl.oauthbearer.client.secret": "client-secret-5",
            },
            ["'sasl.oauthbearer.token.endpoint.url'"],
        ),
        (
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "OAUTHBEARER",
                "oauth_cb": lambda cfg: ("t", 0),
                "sasl.oauthbearer.extensions": "logicalCluster",
            },
            ["'sasl.oauthbearer.extensions'", "key=value"],
        ),
        (
            {"security.protocol": "SSL", "ssl.truststore.type": "JKS"},
            ["'ssl.truststore.type'", "PEM"],
        ),
        (
            {"security.protocol": "SSL", "ssl.key.location": "/k.pem"},
            ["'ssl.key.location'", "ssl.certificate.location"],
        ),
    ],
)
def test_security_validation_names_key_and_allowed(props: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_consumer_config({**BOOT, **props})
    text = str(info.value)
    for fragment in fragments:
        assert fragment in text
    _no_secret_in(text)


def test_unset_security_keys_are_not_settings() -> None:
    cfg = parse_consumer_config({**BOOT, "ssl.ca.location": None, "sasl.password": None, "oauth_cb": None})
    assert cfg.security_protocol == "PLAINTEXT" and build_security(cfg) is None


def test_missing_files_name_the_key(tmp_path: Any) -> None:
    cfg = parse_consumer_config(
        {**BOOT, "security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "nope.pem")}
    )
    with pytest.raises(ConfigError, match=r"'ssl\.truststore\.location'.*no such file"):
        build_security(cfg)


# --------------------------------------------------------------------------------------------- secrets
def test_secrets_never_appear_in_reprs_dumps_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    props = {
        **BOOT,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "hunter2-pw",
        "ssl.key.password": "key-pass-3",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="jaas-secret-9";',
    }
    cfg = parse_consumer_config(props)
    security = build_security(cfg)
    mech = security.new_mechanism() if security else None
    texts = [repr(cfg), str(cfg), repr(cfg.as_dict()), str(cfg.as_dict()), repr(security), repr(mech)]
    oauth = parse_consumer_config(
        {
            **BOOT,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
            "sasl.oauthbearer.client.id": "cid",
            "sasl.oauthbearer.client.secret": "client-secret-5",
            "sasl.oauthbearer.config": "cb-config-secret",
        }
    )
    texts += [repr(oauth), repr(oauth.as_dict()), repr(build_security(oauth))]
    texts += [r.getMessage() for r in caplog.records]
    for text in texts:
        _no_secret_in(text)
    assert "[hidden]" in repr(cfg)


def test_bad_password_type_does_not_echo_it() -> None:
    with pytest.raises(ConfigError) as info:
        parse_consumer_config(
            {
                **BOOT,
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.password": ["hunter2-pw"],
            }
        )
    assert "'sasl.password'" in str(info.value)
    _no_secret_in(str(info.value))


# --------------------------------------------------------------------------------------------- tokens
def test_oauth_cb_in_confluent_kafka_shape_with_extensions() -> None:
    seen: list[Any] = []

    def oauth_cb(config_str: str) -> tuple[str, float]:
        seen.append(config_str)
        return "tok-1", time.time() + 600

    fetch = callback_fetcher(oauth_cb, "principal=x", {"logicalCluster": "lkc-1"})
    token = fetch()
    assert seen == ["principal=x"]
    assert token.value == "tok-1" and token.extensions == {"logicalCluster": "lkc-1"}
    assert token.expires_at_ms > time.time() * 1000 + 500_000

    four = callback_fetcher(lambda cfg: ("t", 1e9, "me", {"identityPoolId": "p"}), None, {})()
    assert four.principal == "me" and four.extensions == {"identityPoolId": "p"}
    with pytest.raises(AuthenticationError, match="oauth_cb must return"):
        callback_fetcher(lambda cfg: "just-a-token", None, {})()


def test_token_provider_refreshes_at_80_percent_and_backs_off() -> None:
    now = [1000.0]
    results: list[Any] = [
        OAuthToken("a", (1000 + 100) * 1000),
        RuntimeError("idp down"),
        RuntimeError("idp down"),
        OAuthToken("b", (1200 + 100) * 1000),
    ]

    def fetch() -> OAuthToken:
        item = results.pop(0)
        if isinstance(item, Exception):
            raise item
        assert isinstance(item, OAuthToken)
        return item

    provider = TokenProvider(fetch, retry_backoff_ms=100, retry_backoff_max_ms=10_000, clock=lambda: now[0])
    assert provider.refresh_once() == pytest.approx(80.0)  # 80% of a 100 s lifetime
    waits = [provider.refresh_once(), provider.refresh_once()]
    assert 0 < waits[0] <= waits[1] <= 10.0  # exponential backoff, capped
    now[0] = 1050.0
    provider._thread = threading.current_thread()  # no background thread in this test
    token = provider.get()
    assert token is not None and token.value == "a"  # the old token stays valid while refreshes fail
    now[0] = 1101.0  # expired, last attempt failed: the failure is raised
    with pytest.raises(AuthenticationError, match="idp down"):
        provider.get()
    provider.refresh_once()
    token = provider.get()
    assert token is not None and token.value == "b"


class _IdP(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        form = urllib.parse.parse_qs(self.rfile.read(length).decode())
        auth = self.headers.get("Authorization", "")
        _IdP.requests.append({"form": form, "auth": auth})
        user, _, secret = base64.b64decode(auth.removeprefix("Basic ")).decode().partition(":")
        if (user, secret) != ("my-client", "client-secret-5"):
            body = json.dumps({"error": "invalid_client", "error_description": "bad credentials"}).encode()
            self.send_response(401)
        else:
            claims = base64.urlsafe_b64encode(json.dumps({"sub": "svc-1", "exp": 2_000_000_000}).encode())
            token = "e30." + claims.decode().rstrip("=") + ".sig"
            body = json.dumps({"access_token": token, "token_type": "Bearer", "expires_in": 300}).encode()
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def idp() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _IdP)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _IdP.requests.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/token"
    finally:
        server.shutdown()
        server.server_close()


def test_oidc_client_credentials(idp: str) -> None:
    fetch = oidc_fetcher(
        idp, "my-client", "client-secret-5", "kafka", {"logicalCluster": "lkc-1"}, allow_http=True
    )
    before = time.time()
    token = fetch()
    assert token.principal == "svc-1" and token.extensions == {"logicalCluster": "lkc-1"}
    assert before * 1000 + 290_000 <= token.expires_at_ms <= time.time() * 1000 + 300_000
    (req,) = _IdP.requests
    assert req["form"] == {"grant_type": ["client_credentials"], "scope": ["kafka"]}
    first = OAuthBearer(token).initial_response()
    assert first.startswith(b"n,,\x01auth=Bearer e30.") and b"\x01logicalCluster=lkc-1\x01\x01" in first


def test_oidc_endpoint_refusing_is_an_authentication_error(idp: str) -> None:
    fetch = oidc_fetcher(idp, "my-client", "wrong-secret", None, {}, allow_http=True)
    with pytest.raises(AuthenticationError) as info:
        fetch()
    text = str(info.value)
    assert idp in text and "HTTP 401" in text and "invalid_client" in text and "'my-client'" in text
    assert "wrong-secret" not in text


def test_oidc_through_build_security(idp: str) -> None:
    cfg = parse_consumer_config(
        {
            **BOOT,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": idp,
            "sasl.oauthbearer.token.endpoint.allow.http": True,
            "sasl.oauthbearer.client.id": "my-client",
            "sasl.oauthbearer.client.secret": "client-secret-5",
            "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,identityPoolId=pool-2",
        }
    )
    security = build_security(cfg)
    assert security is not None and security.token_provider is not None
    woken = threading.Event()
    security.token_provider.listeners.append(woken.set)
    try:
        deadline = time.monotonic() + 10
        while not security.token_ready():  # fetched on the refresher thread, never on the caller's
            assert time.monotonic() < deadline
            woken.wait(0.1)
        mech = security.new_mechanism()
        assert re.search(rb"identityPoolId=pool-2", mech.initial_response())
    finally:
        security.close()


def test_tls_verification_switches() -> None:
    import ssl

    base = {**BOOT, "security.protocol": "SSL"}
    default = build_security(parse_consumer_config(base))
    assert default is not None and default.ssl_context is not None
    assert default.ssl_context.check_hostname and default.ssl_context.verify_mode == ssl.CERT_REQUIRED
    no_host = build_security(parse_consumer_config({**base, "ssl.endpoint.identification.algorithm": ""}))
    assert no_host is not None and no_host.ssl_context is not None
    assert not no_host.ssl_context.check_hostname and no_host.ssl_context.verify_mode == ssl.CERT_REQUIRED
    off = build_security(parse_consumer_config({**base, "enable.ssl.certificate.verification": "false"}))
    assert off is not None and off.ssl_context is not None
    assert not off.ssl_context.check_hostname and off.ssl_context.verify_mode == ssl.CERT_NONE
