"""SASL state machines without sockets: RFC test vectors and scripted broker responses."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

import pytest
from sasl_responses import VERSIONS, authenticate_response, handshake_response

from kafka_handoff.errors import AuthenticationError, ConfigError
from kafka_handoff.protocol.sasl import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    OAuthBearer,
    OAuthToken,
    Plain,
    SaslAuthenticator,
    SaslMechanism,
    Scram,
    parse_jaas_config,
)

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------------------------------ SCRAM vectors
def test_scram_sha1_rfc5802_vector() -> None:
    scram = Scram("SCRAM-SHA-1", "user", "pencil", nonce="fyko+d2lbbFgONRv9qkxdawL")
    assert scram.initial_response() == b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL"
    final = scram.evaluate(b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096")
    assert final == (b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=")
    assert scram.evaluate(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=") is None


def test_scram_sha256_rfc7677_vector() -> None:
    scram = Scram("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert scram.initial_response() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = scram.evaluate(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert scram.evaluate(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None


def _scram_server_final(
    mech: str, hash_name: str, password: str, client_first: bytes, nonce: str
) -> tuple[bytes, Any]:
    """A tiny SCRAM server: returns server-first and a function checking client-final -> server-final."""
    salt, iterations = b"0123456789abcdef", 4096
    bare = client_first[3:].decode()
    client_nonce = bare.split("r=", 1)[1]
    server_first = f"r={client_nonce}{nonce},s={base64.b64encode(salt).decode()},i={iterations}".encode()
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)

    def finish(client_final: bytes) -> bytes:
        without_proof, proof_part = client_final.decode().rsplit(",p=", 1)
        auth = f"{bare},{server_first.decode()},{without_proof}".encode()
        client_key = hmac.new(salted, b"Client Key", hash_name).digest()
        stored = hashlib.new(hash_name, client_key).digest()
        signature = hmac.new(stored, auth, hash_name).digest()
        expected = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        if base64.b64decode(proof_part) != expected:
            return b"e=invalid-proof"
        server_key = hmac.new(salted, b"Server Key", hash_name).digest()
        return b"v=" + base64.b64encode(hmac.new(server_key, auth, hash_name).digest())

    return server_first, finish


@pytest.mark.parametrize(("mech", "hash_name"), [("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")])
def test_scram_full_exchange_through_the_authenticator(mech: str, hash_name: str) -> None:
    auth = SaslAuthenticator(mech, lambda: Scram(mech, "alice", "s3cret"), VERSIONS, "b1:9093", 1)
    req = auth.start()
    assert req.api_key == SASL_HANDSHAKE and req.values == {"mechanism": mech}
    req2 = auth.on_response(SASL_HANDSHAKE, handshake_response(mechanisms=(mech,)))
    assert req2 is not None and req2.api_key == SASL_AUTHENTICATE
    client_first = req2.values["auth_bytes"]
    server_first, finish = _scram_server_final(mech, hash_name, "s3cret", client_first, "srv")
    req3 = auth.on_response(SASL_AUTHENTICATE, authenticate_response(server_first))
    assert req3 is not None
    server_final = finish(req3.values["auth_bytes"])
    assert server_final.startswith(b"v=")
    assert (
        auth.on_response(SASL_AUTHENTICATE, authenticate_response(server_final, lifetime_ms=60_000)) is None
    )
    assert auth.done and auth.session_lifetime_ms == 60_000


def test_scram_rejects_a_wrong_server_signature() -> None:
    mech = "SCRAM-SHA-256"
    auth = SaslAuthenticator(mech, lambda: Scram(mech, "alice", "s3cret"), VERSIONS, "b1:9093", 1)
    auth.start()
    req = auth.on_response(SASL_HANDSHAKE, handshake_response(mechanisms=(mech,)))
    assert req is not None
    # The server derived its keys from another password: its signature must not be accepted.
    server_first, _finish = _scram_server_final(mech, "sha256", "other", req.values["auth_bytes"], "x")
    req3 = auth.on_response(SASL_AUTHENTICATE, authenticate_response(server_first))
    assert req3 is not None
    fake = b"v=" + base64.b64encode(b"\0" * 32)
    with pytest.raises(AuthenticationError, match=r"b1:9093 \(node 1\).*signature is wrong"):
        auth.on_response(SASL_AUTHENTICATE, authenticate_response(fake))


def test_scram_rejects_a_nonce_that_does_not_extend_ours() -> None:
    scram = Scram("SCRAM-SHA-256", "u", "p", nonce="abc")
    scram.initial_response()
    with pytest.raises(AuthenticationError, match="nonce"):
        scram.evaluate(b"r=zzz123,s=QSXCR+Q6sek8bf92,i=4096")


def test_scram_escapes_user_names() -> None:
    scram = Scram("SCRAM-SHA-256", "a=b,c", "p", nonce="n")
    assert scram.initial_response() == b"n,,n=a=3Db=2Cc,r=n"


# ------------------------------------------------------------------------------------------ PLAIN
def test_plain_exchange_and_wrong_password() -> None:
    auth = SaslAuthenticator("PLAIN", lambda: Plain("bob", "pw"), VERSIONS, "h:1", 3)
    auth.start()
    req = auth.on_response(SASL_HANDSHAKE, handshake_response())
    assert req is not None and req.values["auth_bytes"] == b"\0bob\0pw"
    assert auth.on_response(SASL_AUTHENTICATE, authenticate_response()) is None
    assert auth.done and auth.session_lifetime_ms == 0

    bad = SaslAuthenticator("PLAIN", lambda: Plain("bob", "wrong"), VERSIONS, "h:1", 3)
    bad.start()
    bad.on_response(SASL_HANDSHAKE, handshake_response())
    with pytest.raises(AuthenticationError) as info:
        bad.on_response(
            SASL_AUTHENTICATE,
            authenticate_response(code=58, message="Authentication failed: Invalid username or password"),
        )
    text = str(info.value)
    assert "h:1 (node 3)" in text and "SASL_AUTHENTICATION_FAILED" in text and "Invalid username" in text
    assert "wrong" not in text
    assert info.value.broker == "h:1" and info.value.node_id == 3 and not info.value.retriable


def test_unsupported_mechanism_names_the_enabled_ones() -> None:
    auth = SaslAuthenticator("SCRAM-SHA-512", lambda: Plain("u", "p"), VERSIONS, "h:1", 0)
    auth.start()
    with pytest.raises(
        AuthenticationError, match=r"SCRAM-SHA-512.*UNSUPPORTED_SASL_MECHANISM.*PLAIN, OAUTHBEARER"
    ):
        auth.on_response(SASL_HANDSHAKE, handshake_response(33, ("PLAIN", "OAUTHBEARER")))


def test_a_broker_without_sasl_apis_is_a_clear_error() -> None:
    with pytest.raises(AuthenticationError, match="SaslHandshake"):
        SaslAuthenticator("PLAIN", lambda: Plain("u", "p"), {}, "h:1", 0)


# ------------------------------------------------------------------------------------------ OAUTHBEARER
def test_oauthbearer_initial_response_with_extensions() -> None:
    token = OAuthToken("eyJ.x.y", 10, "me", {"logicalCluster": "lkc-1", "identityPoolId": "pool-2"})
    mech = OAuthBearer(token)
    assert mech.initial_response() == (
        b"n,,\x01auth=Bearer eyJ.x.y\x01logicalCluster=lkc-1\x01identityPoolId=pool-2\x01\x01"
    )
    assert "eyJ" not in repr(mech) and "eyJ" not in repr(token)


def test_oauthbearer_server_error_is_acknowledged_then_reported() -> None:
    mech: SaslMechanism = OAuthBearer(OAuthToken("tok", 10))
    auth = SaslAuthenticator("OAUTHBEARER", lambda: mech, VERSIONS, "h:1", 2)
    auth.start()
    auth.on_response(SASL_HANDSHAKE, handshake_response(mechanisms=("OAUTHBEARER",)))
    ack = auth.on_response(SASL_AUTHENTICATE, authenticate_response(b'{"status":"invalid_token"}'))
    assert ack is not None and ack.values["auth_bytes"] == b"\x01"  # RFC 7628 §3.2.3
    with pytest.raises(AuthenticationError, match="invalid_token"):
        auth.on_response(SASL_AUTHENTICATE, authenticate_response(code=58, message="Authentication failed"))


def test_token_failure_at_handshake_names_the_broker() -> None:
    def no_token() -> SaslMechanism:
        raise AuthenticationError("the OIDC token endpoint refused")

    auth = SaslAuthenticator("OAUTHBEARER", no_token, VERSIONS, "h:7", 4)
    auth.start()
    with pytest.raises(AuthenticationError, match=r"h:7 \(node 4\).*refused"):
        auth.on_response(SASL_HANDSHAKE, handshake_response(mechanisms=("OAUTHBEARER",)))


# ------------------------------------------------------------------------------------------ JAAS
def test_parse_jaas_config() -> None:
    module, options = parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="$ConnectionString" '
        'password="Endpoint=sb://x/;SharedAccessKey=a\\"b";'
    )
    assert module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert options == {"username": "$ConnectionString", "password": 'Endpoint=sb://x/;SharedAccessKey=a"b'}
    module, options = parse_jaas_config(
        "org.apache.kafka.common.security.scram.ScramLoginModule required username=alice password=pw"
    )
    assert options == {"username": "alice", "password": "pw"}


def test_parse_jaas_config_errors_hide_the_text() -> None:
    with pytest.raises(ConfigError, match=r"sasl\.jaas\.config") as info:
        parse_jaas_config('com.example.Foo required password="hunter2";')
    assert "hunter2" not in str(info.value)
    with pytest.raises(ConfigError, match=r"sasl\.jaas\.config") as info:
        parse_jaas_config('password="hunter2"')
    assert "hunter2" not in str(info.value)
