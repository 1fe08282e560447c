"""A hostile or broken OIDC token endpoint cannot take the client secret elsewhere, stall token refresh
without a word, or make the client read without bound (issue 34 item 6).  The endpoints are scripted TCP
peers speaking just enough HTTP."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from kafka_handoff.config import parse_consumer_config
from kafka_handoff.errors import AuthenticationError, ConfigError
from kafka_handoff.security import TokenProvider, build_security, oidc_fetcher

pytestmark = pytest.mark.unit

TOKEN = "e30.eyJzdWIiOiJzdmMtMSJ9.sig"  # {"sub": "svc-1"}


class HttpPeer:
    """Accepts connections and runs ``script(sock, request_bytes)`` for each; records the requests."""

    def __init__(self, script: Callable[[socket.socket, bytes], None]) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}/token"
        self.requests: list[bytes] = []
        self._script = script
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(30)
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ),
                0,
            )
            while len(rest) < length:
                rest += sock.recv(65536)
            self.requests.append(head + b"\r\n\r\n" + rest)
            self._script(sock, head)
        except OSError:
            pass
        finally:
            sock.close()

    def close(self) -> None:
        self._stop.set()
        self._server.close()


@pytest.fixture
def peers() -> Iterator[list[HttpPeer]]:
    made: list[HttpPeer] = []
    yield made
    for peer in made:
        peer.close()


def _peer(peers: list[HttpPeer], script: Callable[[socket.socket, bytes], None]) -> HttpPeer:
    peer = HttpPeer(script)
    peers.append(peer)
    return peer


def _ok(sock: socket.socket, head: bytes) -> None:
    body = json.dumps({"access_token": TOKEN, "expires_in": 300}).encode()
    sock.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    sock.sendall(body)


def test_http_endpoints_are_refused_unless_explicitly_allowed() -> None:
    with pytest.raises(ConfigError, match=r"token\.endpoint\.url.*clear.*allow\.http"):
        oidc_fetcher("http://idp.example/token", "c", "secret", None, {})
    base = {
        "bootstrap.servers": "b:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": "http://idp.example/token",
        "sasl.oauthbearer.client.id": "c",
        "sasl.oauthbearer.client.secret": "secret",
    }
    with pytest.raises(ConfigError, match=r"sasl\.oauthbearer\.token\.endpoint\.allow\.http"):
        build_security(parse_consumer_config(base))
    allowed = {**base, "sasl.oauthbearer.token.endpoint.allow.http": True}
    assert build_security(parse_consumer_config(allowed)) is not None
    with pytest.raises(ConfigError, match="not an https URL"):
        oidc_fetcher("ftp://idp.example/token", "c", "secret", None, {})
    for loopback in ("http://127.0.0.1:8080/token", "http://localhost/token", "http://[::1]:80/token"):
        oidc_fetcher(loopback, "c", "secret", None, {})  # the secret does not leave the machine


def test_a_redirect_is_not_followed_and_the_credentials_stay_home(peers: list[HttpPeer]) -> None:
    elsewhere = _peer(peers, _ok)

    def redirect(sock: socket.socket, head: bytes) -> None:
        sock.sendall(
            b"HTTP/1.1 302 Found\r\nLocation: " + elsewhere.url.encode() + b"\r\nContent-Length: 0\r\n\r\n"
        )

    endpoint = _peer(peers, redirect)
    fetch = oidc_fetcher(endpoint.url, "c", "client-secret-1", None, {}, allow_http=True)
    with pytest.raises(AuthenticationError, match=r"redirect \(HTTP 302\).*not followed") as info:
        fetch()
    assert "client-secret-1" not in str(info.value)
    assert len(endpoint.requests) == 1 and b"Authorization: Basic" in endpoint.requests[0]
    assert elsewhere.requests == []  # nothing, with or without credentials, went to the other host


def test_an_oversized_response_is_refused(peers: list[HttpPeer]) -> None:
    def huge(sock: socket.socket, head: bytes) -> None:
        body = json.dumps({"access_token": TOKEN, "expires_in": 300, "pad": "x" * (2 << 20)}).encode()
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
        try:
            sock.sendall(body)
        except OSError:
            pass

    endpoint = _peer(peers, huge)
    fetch = oidc_fetcher(endpoint.url, "c", "s", None, {}, allow_http=True)
    with pytest.raises(AuthenticationError, match="larger than 262144 bytes"):
        fetch()


def _slow_drip(stop: threading.Event) -> Callable[[socket.socket, bytes], None]:
    def drip(sock: socket.socket, head: bytes) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\n")
        while not stop.wait(0.05):  # one header byte at a time, forever: no per-operation timeout fires
            sock.sendall(b"X")

    return drip


def test_a_slow_drip_endpoint_fails_at_the_overall_deadline(peers: list[HttpPeer]) -> None:
    stop = threading.Event()
    endpoint = _peer(peers, _slow_drip(stop))
    fetch = oidc_fetcher(endpoint.url, "c", "s", None, {}, allow_http=True, timeout_s=1.0, deadline_s=1.0)
    try:
        with pytest.raises(AuthenticationError, match=r"did not answer within 1 s"):
            fetch()
    finally:
        stop.set()


def test_the_application_sees_the_slow_drip_as_an_error(peers: list[HttpPeer]) -> None:
    stop = threading.Event()
    endpoint = _peer(peers, _slow_drip(stop))
    fetch = oidc_fetcher(endpoint.url, "c", "s", None, {}, allow_http=True, timeout_s=0.5, deadline_s=0.5)
    provider = TokenProvider(
        fetch, retry_backoff_ms=60_000, retry_backoff_max_ms=60_000, source="the endpoint"
    )
    failed = threading.Event()
    provider.listeners.append(failed.set)
    try:
        assert provider.get() is None  # the first fetch is under way
        assert failed.wait(30)
        with pytest.raises(AuthenticationError, match="did not answer within"):
            provider.get()
    finally:
        provider.close()
        stop.set()


def test_a_well_behaved_endpoint_still_works(peers: list[HttpPeer]) -> None:
    endpoint = _peer(peers, _ok)
    token = oidc_fetcher(endpoint.url, "c", "s", "kafka", {}, allow_http=True)()
    assert token.value == TOKEN and token.principal == "svc-1"
