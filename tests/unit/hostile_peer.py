"""A scripted TCP peer that answers with crafted frames: it stands in for a malicious (or misaddressed)
broker, not for Kafka (the hostile-broker tests of issue 34)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafka_handoff.protocol import wire

if TYPE_CHECKING:
    from kafka_handoff.network.client import NetworkClient

API_VERSIONS = 18
BROKER_APIS = [
    {"api_key": 18, "min_version": 0, "max_version": 3},  # ApiVersions
    {"api_key": 17, "min_version": 0, "max_version": 1},  # SaslHandshake
    {"api_key": 36, "min_version": 0, "max_version": 2},  # SaslAuthenticate
    {"api_key": 16, "min_version": 0, "max_version": 4},  # ListGroups
]


class PeerConnection:
    """The peer's side of one accepted connection: read requests, write crafted bytes."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        sock.settimeout(30)

    def request(self) -> tuple[int, int, int]:
        """(api_key, version, correlation id) of the next request."""
        size = struct.unpack(">i", self.exact(4))[0]
        body = self.exact(size)
        api_key, version, cid = struct.unpack(">hhi", body[:8])
        return api_key, version, cid

    def response_frame(self, api_key: int, version: int, cid: int, values: dict[str, Any]) -> bytes:
        frame = wire.encode_response(wire.build_response(api_key, version, values), cid)
        return struct.pack(">i", len(frame)) + frame

    def answer(self, api_key: int, version: int, cid: int, values: dict[str, Any]) -> None:
        self.sock.sendall(self.response_frame(api_key, version, cid, values))

    def answer_api_versions(self) -> None:
        key, version, cid = self.request()
        assert key == API_VERSIONS
        self.answer(key, version, cid, {"error_code": 0, "throttle_time": 0, "api_keys": BROKER_APIS})

    def exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise EOFError("the client closed the connection")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


class ScriptedPeer:
    """Listens on 127.0.0.1; runs ``script(connection)`` on a thread for each accepted connection (until
    :meth:`close`).  Errors in a script are kept in ``errors`` for the test to check."""

    def __init__(self, script: Callable[[PeerConnection], None]) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._script = script
        self._closed = threading.Event()
        self.errors: list[BaseException] = []
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, name="scripted-peer", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            conn = PeerConnection(sock)
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: PeerConnection) -> None:
        try:
            self._script(conn)
        except (EOFError, OSError):
            pass
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            conn.close()

    def close(self) -> None:
        self._closed.set()
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close alone does not, on Linux)
        except OSError:
            pass
        self._server.close()
        self._thread.join(5)

    def __enter__(self) -> ScriptedPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def now_ms() -> int:
    return int(time.monotonic() * 1000)


def poll_until(client: NetworkClient, done: Callable[[], Any]) -> None:
    """Poll ``client`` (100 ms at a time) until ``done()`` holds; fail after 30 s."""
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, "the client did not finish"
        client.poll(100, now_ms(), now_ms)
