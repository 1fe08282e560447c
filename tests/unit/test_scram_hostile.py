"""A SCRAM server (or a man in the middle of SASL_PLAINTEXT) cannot downgrade the proof, stall the network
thread, or leave a connection authenticating forever (issue 34 item 4): the iteration count is bounded as in
Java (4096-16384, sasl.scram.min/max.iterations) and every malformed server message is an
AuthenticationError that ends the connection."""

from __future__ import annotations

import base64
import datetime
import select
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hostile_peer import BROKER_APIS, PeerConnection

from kafka_handoff.config import parse_consumer_config
from kafka_handoff.errors import AuthenticationError
from kafka_handoff.network.connection import BrokerConnection, ConnState
from kafka_handoff.protocol.sasl import Scram
from kafka_handoff.security import SecuritySettings, build_security

pytestmark = pytest.mark.unit

SALT = base64.b64encode(b"0123456789abcdef").decode()


def _server_first(iterations: str, nonce: str = "abcSERVER", salt: str = SALT) -> bytes:
    return f"r={nonce},s={salt},i={iterations}".encode()


def _scram(**kwargs: Any) -> Scram:
    scram = Scram("SCRAM-SHA-256", "alice", "s3cret", nonce="abc", **kwargs)
    scram.initial_response()
    return scram


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (_server_first("1"), "fewer than the minimum 4096"),
        (_server_first("4095"), "fewer than the minimum 4096"),
        (_server_first("16385"), "more than the maximum 16384"),
        (_server_first(str(2**32 - 1)), "more than the maximum 16384"),
        (_server_first("9" * 40), "malformed server-first message"),
        (_server_first("-5"), "malformed server-first message"),
        (_server_first("1e4"), "malformed server-first message"),
        (_server_first("4096", salt=""), "empty salt|malformed"),
        (b"r=abcSERVER,s=\xff\xfe,i=4096", "not printable ASCII"),
        (b"\x80" * 64, "not printable ASCII"),
        (_server_first("4096", nonce="abc" + "x" * 10_000), "oversized server message"),
        (b"", "malformed server-first message"),
    ],
    ids=[
        "i=1",
        "i=4095",
        "i=16385",
        "i=2^32-1",
        "i=huge-number",
        "i=negative",
        "i=float",
        "empty-salt",
        "non-utf8-salt",
        "non-utf8",
        "oversized",
        "empty",
    ],
)
def test_bad_server_first_messages_are_authentication_errors(message: bytes, match: str) -> None:
    with pytest.raises(AuthenticationError, match=match):
        _scram().evaluate(message)


def test_bounds_are_configurable_and_the_defaults_accept_javas_range() -> None:
    assert _scram().evaluate(_server_first("4096")) is not None
    assert _scram().evaluate(_server_first("16384")) is not None
    assert _scram(min_iterations=1).evaluate(_server_first("1")) is not None
    with pytest.raises(AuthenticationError, match="more than the maximum 8192"):
        _scram(max_iterations=8192).evaluate(_server_first("8193"))


def test_the_bounds_are_client_configs() -> None:
    cfg = parse_consumer_config(
        {
            "bootstrap.servers": "b:9092",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": "s3cret",
            "sasl.scram.min.iterations": 1,
        }
    )
    assert cfg.get("sasl.scram.max.iterations") == 16384
    security = build_security(cfg)
    assert security is not None
    mechanism = security.new_mechanism()
    assert isinstance(mechanism, Scram)
    nonce = mechanism.initial_response().decode().split("r=")[1]
    assert mechanism.evaluate(_server_first("1", nonce=nonce + "SERVER")) is not None


def test_non_ascii_server_final_is_an_authentication_error() -> None:
    scram = _scram()
    scram.evaluate(_server_first("4096"))
    with pytest.raises(AuthenticationError, match="not printable ASCII"):
        scram.evaluate(b"v=\xc3\x28")


@pytest.fixture
def pair() -> Iterator[tuple[BrokerConnection, PeerConnection]]:
    client_sock, broker_sock = socket.socketpair()
    client_sock.setblocking(False)
    security = SecuritySettings(
        "SASL_PLAINTEXT", None, "SCRAM-SHA-256", lambda: Scram("SCRAM-SHA-256", "u", "p", nonce="abc"), None
    )
    conn = BrokerConnection(1, "b1", 9092, "test", security=security)
    conn.sock = client_sock
    conn.state = ConnState.HANDSHAKE
    yield conn, PeerConnection(broker_sock)
    conn.close()
    broker_sock.close()


def _pump(conn: BrokerConnection) -> None:
    for _ in range(5):
        conn.write()
        assert conn.sock is not None
        if select.select([conn.sock], [], [], 1)[0]:
            conn.read(0, 30_000)
            conn.write()  # the next SASL message
            return


@pytest.mark.parametrize("server_first", [b"r=abcX,s=\xff,i=4096", _server_first(str(2**32 - 1), "abcX")])
def test_the_connection_fails_instead_of_staying_authenticating(pair: Any, server_first: bytes) -> None:
    conn, peer = pair
    conn._send_api_versions(0, 30_000)
    conn.write()
    peer.answer_api_versions()
    _pump(conn)
    assert conn.state is ConnState.AUTHENTICATING
    key, version, cid = peer.request()  # SaslHandshake
    peer.answer(key, version, cid, {"error_code": 0, "mechanisms": ["SCRAM-SHA-256"]})
    _pump(conn)
    key, version, cid = peer.request()  # client-first
    lifetime = datetime.timedelta(0)
    peer.answer(
        key, version, cid, {"error_code": 0, "auth_bytes": server_first, "session_lifetime": lifetime}
    )
    with pytest.raises(AuthenticationError, match=r"SASL SCRAM-SHA-256 authentication with broker b1:9092"):
        _pump(conn)


def test_broker_apis_offer_sasl() -> None:
    assert {a["api_key"] for a in BROKER_APIS} >= {17, 36}


def test_a_mechanism_step_that_raises_anything_is_an_authentication_error() -> None:
    """Issue 34 item 7: a SASL step raising something other than AuthenticationError (a bug, a malformed
    message nobody foresaw) must still end the exchange with an AuthenticationError naming the broker."""
    from types import SimpleNamespace

    from kafka_handoff.protocol.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE, SaslAuthenticator

    class Broken:
        name = "PLAIN"

        def initial_response(self) -> bytes:
            return b"hello"

        def evaluate(self, challenge: bytes) -> bytes | None:
            raise RuntimeError("mechanism bug")

    auth = SaslAuthenticator("PLAIN", Broken, {SASL_HANDSHAKE: 1, SASL_AUTHENTICATE: 2}, "b1:9092", 1)
    auth.start()
    auth.on_response(SASL_HANDSHAKE, SimpleNamespace(error_code=0, mechanisms=["PLAIN"]))
    response = SimpleNamespace(error_code=0, error_message=None, auth_bytes=b"x", session_lifetime=None)
    with pytest.raises(
        AuthenticationError, match=r"b1:9092 \(node 1\).*malformed server message \(RuntimeError\)"
    ):
        auth.on_response(SASL_AUTHENTICATE, response)
