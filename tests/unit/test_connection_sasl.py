"""BrokerConnection's SASL sequencing over a socket pair with a scripted peer (no broker, no TLS).

Checks the ordering rules the secured-broker tests cannot single out: SASL runs after ApiVersions and before
any other request; a KIP-368 re-authentication waits for the requests in flight, sends nothing new meanwhile,
delivers their responses, and then runs the SASL exchange on the same socket.
"""

from __future__ import annotations

import datetime
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_handoff.errors import AuthenticationError
from kafka_handoff.network.connection import BrokerConnection, ConnState, FrameReader
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.requests import UnsentRequest
from kafka_handoff.protocol.sasl import Plain
from kafka_handoff.security import SecuritySettings

pytestmark = pytest.mark.unit

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE, LIST_GROUPS = 18, 17, 36, 16
BROKER_APIS = [
    {"api_key": API_VERSIONS, "min_version": 0, "max_version": 3},
    {"api_key": SASL_HANDSHAKE, "min_version": 0, "max_version": 1},
    {"api_key": SASL_AUTHENTICATE, "min_version": 0, "max_version": 2},
    {"api_key": LIST_GROUPS, "min_version": 0, "max_version": 4},
]


class Peer:
    """The broker side: reads request frames, answers with scripted responses."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        sock.settimeout(5)

    def request(self) -> tuple[int, int, int]:
        """(api_key, version, correlation id) of the next request."""
        size = struct.unpack(">i", self._exact(4))[0]
        body = self._exact(size)
        api_key, version, cid = struct.unpack(">hhi", body[:8])
        return api_key, version, cid

    def nothing_sent(self) -> bool:
        self.sock.setblocking(False)
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return True
        finally:
            self.sock.settimeout(5)
        return False

    def answer(self, api_key: int, version: int, cid: int, values: dict[str, Any]) -> None:
        frame = wire.encode_response(wire.build_response(api_key, version, values), cid)
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)

    def _exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "client closed"
            data += chunk
        return data

    def sasl_plain(self, conn: BrokerConnection, now: int, lifetime_ms: int, *, fail: bool = False) -> None:
        key, version, cid = self.request()
        assert key == SASL_HANDSHAKE
        self.answer(key, version, cid, {"error_code": 0, "mechanisms": ["PLAIN"]})
        pump(conn, now, rounds=5)  # the client reads the answer and sends SaslAuthenticate
        key, version, cid = self.request()
        assert key == SASL_AUTHENTICATE
        self.answer(
            key,
            version,
            cid,
            {
                "error_code": 58 if fail else 0,
                "error_message": "Invalid username or password" if fail else None,
                "auth_bytes": b"",
                "session_lifetime": datetime.timedelta(milliseconds=lifetime_ms),
            },
        )


@pytest.fixture
def pair() -> Iterator[tuple[BrokerConnection, Peer]]:
    client_sock, broker_sock = socket.socketpair()
    client_sock.setblocking(False)
    security = SecuritySettings("SASL_PLAINTEXT", None, "PLAIN", lambda: Plain("u", "p"), None)
    conn = BrokerConnection(1, "b1", 9092, "test", security=security)
    conn.sock = client_sock
    conn.state = ConnState.HANDSHAKE
    yield conn, Peer(broker_sock)
    conn.close()
    broker_sock.close()


def pump(conn: BrokerConnection, now: int, rounds: int = 50) -> list[tuple[Any, Any]]:
    """Write what is queued and read what arrived, a few times (the selector's job)."""
    import select

    out: list[tuple[Any, Any]] = []
    for _ in range(rounds):
        conn.write()
        assert conn.sock is not None
        readable, _, _ = select.select([conn.sock], [], [], 0.02)
        if readable:
            out += conn.read(now, 30_000)
        conn.poll_auth(now, 30_000)
    return out


def connect(conn: BrokerConnection, peer: Peer, lifetime_ms: int) -> None:
    conn._send_api_versions(0, 30_000)
    conn.write()
    key, version, cid = peer.request()
    assert key == API_VERSIONS
    peer.answer(key, version, cid, {"error_code": 0, "throttle_time": 0, "api_keys": BROKER_APIS})
    pump(conn, 0, rounds=5)
    assert conn.state is ConnState.AUTHENTICATING  # not READY: nothing else may go first
    peer.sasl_plain(conn, 0, lifetime_ms)
    pump(conn, 0, rounds=10)
    assert conn.ready


def test_sasl_runs_after_api_versions_and_before_requests(pair: Any) -> None:
    conn, peer = pair
    connect(conn, peer, lifetime_ms=0)
    assert conn.reauth_at_ms is None  # no session lifetime: no re-authentication


def test_reauthentication_waits_for_in_flight_requests(pair: Any) -> None:
    conn, peer = pair
    connect(conn, peer, lifetime_ms=10_000)
    assert conn.reauth_at_ms is not None and 8_500 <= conn.reauth_at_ms <= 9_500  # 85-95% of the lifetime
    answered: list[Any] = []
    request = UnsentRequest(
        api_key=LIST_GROUPS, node=1, values={}, on_response=lambda r, v, t: answered.append(r)
    )
    conn.send(request, 4, 100, 30_000)
    conn.write()
    key, version, cid = peer.request()
    assert key == LIST_GROUPS
    # The session is due for re-authentication while the request is in flight.
    now = conn.reauth_at_ms
    conn.poll_auth(now, 30_000)
    assert conn.state is ConnState.AUTHENTICATING and not conn.ready  # no new requests meanwhile
    pump(conn, now, rounds=5)
    assert peer.nothing_sent()  # SaslHandshake waits for the in-flight request
    peer.answer(key, version, cid, {"error_code": 0, "groups": [], "throttle_time": 0})
    results = pump(conn, now, rounds=5)
    assert [entry.api_key for entry, _ in results] == [LIST_GROUPS]  # delivered, not dropped
    peer.sasl_plain(conn, now, 10_000)
    pump(conn, now, rounds=10)
    assert conn.ready and conn.reauth_at_ms is not None and conn.reauth_at_ms > now


def test_failed_authentication_raises_naming_the_broker(pair: Any) -> None:
    conn, peer = pair
    conn._send_api_versions(0, 30_000)
    conn.write()
    key, version, cid = peer.request()
    peer.answer(key, version, cid, {"error_code": 0, "throttle_time": 0, "api_keys": BROKER_APIS})
    pump(conn, 0, rounds=5)
    with pytest.raises(AuthenticationError, match=r"b1:9092 \(node 1\).*SASL_AUTHENTICATION_FAILED"):
        peer.sasl_plain(conn, 0, 0, fail=True)
        pump(conn, 0, rounds=10)


def test_an_authentication_error_that_comes_with_the_close_is_not_lost(pair: Any) -> None:
    """Over TLS the connection drains the socket on each read (``FrameReader(drain=True)``): when the
    broker's SASL error and its close arrive together, the error must still come out, not a retriable
    "closed by the broker"."""
    conn, peer = pair
    conn._reader = FrameReader(drain=True)
    conn._send_api_versions(0, 30_000)
    conn.write()
    key, version, cid = peer.request()
    peer.answer(key, version, cid, {"error_code": 0, "throttle_time": 0, "api_keys": BROKER_APIS})
    pump(conn, 0, rounds=5)
    key, version, cid = peer.request()
    assert key == SASL_HANDSHAKE
    peer.answer(key, version, cid, {"error_code": 0, "mechanisms": ["PLAIN"]})
    pump(conn, 0, rounds=5)
    key, version, cid = peer.request()
    assert key == SASL_AUTHENTICATE
    peer.answer(
        key,
        version,
        cid,
        {
            "error_code": 58,
            "error_message": "Invalid username or password",
            "auth_bytes": b"",
            "session_lifetime": datetime.timedelta(0),
        },
    )
    peer.sock.shutdown(socket.SHUT_WR)  # the close right behind the answer: one read sees both
    with pytest.raises(AuthenticationError, match=r"b1:9092 \(node 1\).*SASL_AUTHENTICATION_FAILED"):
        pump(conn, 0, rounds=10)
