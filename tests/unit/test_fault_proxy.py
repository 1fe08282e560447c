"""The fault proxy (devbroker/proxy.py) against a tiny local request/response server (no broker)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from kafka_handoff.devbroker import proxy as proxy_module
from kafka_handoff.devbroker.proxy import BlackHole, FaultProxy, Latency, ResetMidResponse, Route

pytestmark = pytest.mark.unit

RESPONSE = bytes(range(256)) * 4  # 1 KiB answer to every request line


class Server:
    """Answers each received line with ``RESPONSE``; counts the lines it saw."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.requests = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            buf = b""
            while True:
                try:
                    data = conn.recv(4096)
                except OSError:
                    return
                if not data:
                    return
                buf += data
                while b"\n" in buf:
                    _, buf = buf.split(b"\n", 1)
                    self.requests += 1
                    with contextlib.suppress(OSError):
                        conn.sendall(RESPONSE)


@pytest.fixture
def route() -> Iterator[Route]:
    server = Server()
    proxy = FaultProxy()
    try:
        yield proxy.add_route(1, ("127.0.0.1", server.port))
    finally:
        proxy.close()
        server.sock.close()


def connect(route: Route) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", route.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def request(s: socket.socket) -> bytes:
    s.sendall(b"req\n")
    return request_answer(s)


def request_answer(s: socket.socket) -> bytes:
    got = b""
    while len(got) < len(RESPONSE):
        data = s.recv(65536)
        if not data:
            break
        got += data
    return got


def test_forwards_requests_and_responses(route: Route) -> None:
    with connect(route) as s:
        assert request(s) == RESPONSE
        assert request(s) == RESPONSE
    assert route.accepted == 1


class FakeTime:
    """Stands in for the proxy module's ``time``: its clock moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_latency_delays_both_directions_and_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    server = Server()
    clock = FakeTime()
    monkeypatch.setattr(proxy_module, "time", clock)
    try:
        with FaultProxy() as proxy:
            route = proxy.add_route(1, ("127.0.0.1", server.port))
            with connect(route) as s:
                assert request(s) == RESPONSE  # no fault: forwarded although the clock stands still
                route.fault = Latency(150)
                s.sendall(b"req\n")
                s.settimeout(0.5)
                with pytest.raises(TimeoutError):  # held on the way to the server ...
                    s.recv(65536)
                assert server.requests == 1  # (the first request)
                clock.now += 0.1
                with pytest.raises(TimeoutError):  # ... for the whole 150 ms
                    s.recv(65536)
                assert server.requests == 1
                clock.now += 0.1
                deadline = time.monotonic() + 30
                while server.requests < 2:  # delivered once they passed
                    assert time.monotonic() < deadline, "the delayed request never reached the server"
                    time.sleep(0.01)
                with pytest.raises(TimeoutError):  # the answer is held on the way back
                    s.recv(65536)
                clock.now += 0.1
                with pytest.raises(TimeoutError):  # for 150 ms as well
                    s.recv(65536)
                clock.now += 0.1
                s.settimeout(30)
                assert request_answer(s) == RESPONSE
                route.proxy.heal()
                assert route.fault is None
                assert request(s) == RESPONSE  # the same connection keeps working after the switch
    finally:
        server.sock.close()


def test_reset_mid_response_cuts_the_answer_and_resets_the_connection(route: Route) -> None:
    with connect(route) as s:
        assert request(s) == RESPONSE
        route.proxy.set_fault(ResetMidResponse(after_bytes=100))
        s.sendall(b"req\n")
        got = b""
        with pytest.raises(ConnectionResetError):
            while True:
                data = s.recv(65536)
                if not data:
                    raise AssertionError(f"orderly EOF after {len(got)} bytes instead of a reset")
                got += data
        assert got == RESPONSE[:100]
    assert route.resets == 1
    route.proxy.heal()
    with connect(route) as s:
        assert request(s) == RESPONSE


def test_black_hole_accepts_and_never_answers_until_healed(route: Route) -> None:
    server_requests = 0
    with connect(route) as old:
        assert request(old) == RESPONSE
        route.proxy.set_fault(BlackHole(), [1])
        with connect(route) as new:  # accepted ...
            for s in (old, new):
                s.sendall(b"req\n")
                s.settimeout(0.5)
                with pytest.raises(TimeoutError):  # ... and never answered
                    s.recv(65536)
        route.proxy.heal([1])
        # The connection that lost bytes stays silent (its framing is broken); a new one works.
        old.sendall(b"req\n")
        with pytest.raises(TimeoutError):
            old.recv(65536)
    server_requests = route.accepted
    with connect(route) as s:
        s.settimeout(10)
        assert request(s) == RESPONSE
    assert route.accepted == server_requests + 1


def test_refuses_when_the_upstream_is_down() -> None:
    with FaultProxy() as proxy:
        dead = socket.socket()
        dead.bind(("127.0.0.1", 0))
        port = dead.getsockname()[1]
        dead.close()  # nothing listens there
        route = proxy.add_route(7, ("127.0.0.1", port))
        with connect(route) as s:
            s.settimeout(10)
            assert s.recv(10) == b""  # closed at once, like a refused broker
        with pytest.raises(ValueError, match="node 7"):
            proxy.add_route(7)
