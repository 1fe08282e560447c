"""A hostile (or misaddressed) broker cannot make a client allocate without bound, spin on one read, or lose
requests (issue 34 items 5 and 7).  The broker is a scripted peer answering with crafted frames."""

from __future__ import annotations

import select
import socket
import struct
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from hostile_peer import PeerConnection, ScriptedPeer, now_ms, poll_until

from kafka_handoff.errors import ConnectionError_, SslError
from kafka_handoff.network.client import NetworkClient
from kafka_handoff.network.connection import (
    PRE_AUTH_MAX_FRAME_BYTES,
    BrokerConnection,
    ConnState,
    FrameReader,
    FrameSizeError,
)
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.requests import ANY_NODE, UnsentRequest

LIST_GROUPS = 16
TLS_ALERT = bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32])  # a TLS 1.2 fatal alert (decode_error)


class _Socket:
    """Hands out scripted chunks one ``recv_into`` at a time, then would block; counts the calls."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)
        self.calls = 0

    def recv_into(self, buffer: memoryview, nbytes: int = 0, /) -> int:
        self.calls += 1
        if not self.chunks:
            raise BlockingIOError
        chunk = self.chunks.pop(0)
        n = min(len(chunk), nbytes or len(buffer))
        buffer[:n] = chunk[:n]
        if n < len(chunk):
            self.chunks.insert(0, chunk[n:])
        return n


@pytest.fixture
def pair() -> Iterator[tuple[BrokerConnection, PeerConnection]]:
    client_sock, broker_sock = socket.socketpair()
    client_sock.setblocking(False)
    conn = BrokerConnection(1, "b1", 9093, "test", max_response_bytes=64 * 1024 * 1024)
    conn.sock = client_sock
    conn.state = ConnState.HANDSHAKE
    yield conn, PeerConnection(broker_sock)
    conn.close()
    broker_sock.close()


def _read(conn: BrokerConnection) -> list[tuple[Any, Any]]:
    conn.write()
    assert conn.sock is not None
    select.select([conn.sock], [], [], 5)
    return conn.read(0, 30_000)


def _ready(conn: BrokerConnection, peer: PeerConnection) -> None:
    conn._send_api_versions(0, 30_000)
    conn.write()
    peer.answer_api_versions()
    _read(conn)
    assert conn.ready


def _list_groups(done: list[Any], failed: list[BaseException] | None = None) -> UnsentRequest:
    return UnsentRequest(
        api_key=LIST_GROUPS,
        node=ANY_NODE,
        values={},
        on_response=lambda r, v, t: done.append(r),
        on_failure=(lambda e, t: failed.append(e)) if failed is not None else None,
    )


@pytest.mark.unit
def test_plaintext_client_at_a_tls_port_fails_at_once_saying_so_without_allocating(pair: Any) -> None:
    """KAFKA-4090: the TLS alert's first bytes read as a 352 MB frame size."""
    conn, peer = pair
    conn._send_api_versions(0, 30_000)
    conn.write()
    peer.request()
    peer.sock.sendall(TLS_ALERT)
    tracemalloc.start()
    try:
        with pytest.raises(SslError, match=r"is this a TLS port\?") as info:
            for _ in range(20):
                _read(conn)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "security.protocol=SSL" in str(info.value)
    assert "b1:9093" in str(info.value)
    assert peak < 4 * 1024 * 1024  # no buffer of the announced 352 MB (nor any large one)


@pytest.mark.unit
def test_frames_before_authentication_are_small(pair: Any) -> None:
    conn, peer = pair
    conn._send_api_versions(0, 30_000)
    conn.write()
    peer.request()
    peer.sock.sendall(struct.pack(">i", PRE_AUTH_MAX_FRAME_BYTES + 1) + b"x" * 100)
    with pytest.raises(
        wire.ProtocolError, match=f"invalid response frame size {PRE_AUTH_MAX_FRAME_BYTES + 1}"
    ):
        _read(conn)


@pytest.mark.unit
def test_frames_once_ready_are_bounded_by_the_response_limit(pair: Any) -> None:
    conn, peer = pair
    _ready(conn, peer)
    conn.send(_list_groups([]), 4, 0, 30_000)
    conn.write()
    peer.request()
    peer.sock.sendall(struct.pack(">i", 64 * 1024 * 1024 + 1))
    with pytest.raises(wire.ProtocolError, match="limit is 67108864 bytes"):
        _read(conn)


@pytest.mark.unit
def test_an_announced_large_frame_costs_what_arrived_not_what_was_announced(pair: Any) -> None:
    conn, peer = pair
    _ready(conn, peer)
    conn.send(_list_groups([]), 4, 0, 30_000)
    conn.write()
    peer.request()
    tracemalloc.start()
    try:
        peer.sock.sendall(struct.pack(">i", 48 * 1024 * 1024))
        for _ in range(30):  # 300 kB of the announced 48 MiB, then nothing more
            peer.sock.sendall(b"\0" * 10_000)
            assert _read(conn) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert conn._reader.pending_bytes() == 300_000
    assert peak < 8 * 1024 * 1024


@pytest.mark.unit
def test_one_read_stops_once_the_responses_asked_for_are_in() -> None:
    payload = struct.pack(">i", 7) + b"resp"
    frame = struct.pack(">i", len(payload)) + payload
    sock = _Socket([frame] + [frame] * 10_000)  # one asked for, ten thousand more streaming in
    reader = FrameReader(scratch_bytes=64, drain=True)
    frames = reader.read(sock, max_frames=1)
    assert len(frames) == 1
    assert sock.calls <= 2


@pytest.mark.unit
def test_unsolicited_frames_do_not_lose_the_response_before_them(pair: Any) -> None:
    conn, peer = pair
    _ready(conn, peer)
    done: list[Any] = []
    conn.send(_list_groups(done), 4, 0, 30_000)
    conn.write()
    key, version, cid = peer.request()
    good = peer.response_frame(key, version, cid, {"error_code": 0, "groups": [], "throttle_time": 0})
    peer.sock.sendall(good + good)  # the second answers nothing
    results = _read(conn)
    assert [entry.correlation_id for entry, _ in results] == [cid]
    assert isinstance(conn.read_error, wire.ProtocolError)


def _answer_two_at_once(second: str) -> Any:
    def script(peer: PeerConnection) -> None:
        peer.answer_api_versions()
        (k1, v1, c1), (k2, v2, c2) = peer.request(), peer.request()
        first = peer.response_frame(k1, v1, c1, {"error_code": 0, "groups": [], "throttle_time": 0})
        if second == "good":
            other = peer.response_frame(k2, v2, c2, {"error_code": 0, "groups": [], "throttle_time": 0})
        else:  # a frame with the right correlation id and a body that does not decode
            body = struct.pack(">i", c2) + b"\xff" * 3
            other = struct.pack(">i", len(body)) + body
        peer.sock.sendall(first + other)
        peer.exact(1)  # hold the connection open until the client closes it

    return script


@pytest.mark.threads
def test_a_response_callback_that_raises_does_not_drop_the_other_responses() -> None:
    with ScriptedPeer(_answer_two_at_once("good")) as peer:
        client = NetworkClient([("127.0.0.1", peer.port)], client_id="t")
        try:
            answered: list[Any] = []

            def explode(response: Any, version: int, now: int) -> None:
                raise RuntimeError("application bug in a response handler")

            client.send(
                UnsentRequest(api_key=LIST_GROUPS, node=ANY_NODE, values={}, on_response=explode), now_ms()
            )
            client.send(_list_groups(answered), now_ms())
            poll_until(client, lambda: answered)
            assert len(answered) == 1
        finally:
            client.close()
        assert not peer.errors


@pytest.mark.threads
def test_a_malformed_response_fails_its_request_and_keeps_the_one_before() -> None:
    with ScriptedPeer(_answer_two_at_once("malformed")) as peer:
        client = NetworkClient([("127.0.0.1", peer.port)], client_id="t")
        try:
            answered: list[Any] = []
            failed: list[BaseException] = []
            client.send(_list_groups(answered), now_ms())
            client.send(_list_groups([], failed), now_ms())
            poll_until(client, lambda: answered and failed)
            assert len(answered) == 1
            assert isinstance(failed[0], ConnectionError_ | wire.ProtocolError)
            assert not client.has_in_flight()
        finally:
            client.close()


@pytest.mark.unit
def test_frame_size_error_recognises_tls_records() -> None:
    for head in (b"\x15\x03\x03\x00", b"\x16\x03\x01\x02", b"\x17\x03\x03\x40"):
        assert FrameSizeError(struct.unpack(">i", head)[0], 1024).looks_like_tls
    assert not FrameSizeError(600 * 1024 * 1024, 1024).looks_like_tls
    assert not FrameSizeError(-5, 1024).looks_like_tls
