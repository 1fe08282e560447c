"""FrameReader: size-prefixed frames out of a non-blocking socket, however the bytes arrive."""

from __future__ import annotations

import itertools
import socket
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_handoff.network.connection import FrameReader
from kafka_handoff.protocol.wire import ProtocolError

pytestmark = pytest.mark.unit


class ScriptedSocket:
    """Hands out the scripted chunks one ``recv_into`` at a time (never more than asked), then blocks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)
        self.calls = 0

    def feed(self, chunks: list[bytes]) -> None:
        self.chunks.extend(chunks)

    def recv_into(self, buffer: memoryview, nbytes: int = 0, /) -> int:
        self.calls += 1
        if not self.chunks:
            raise BlockingIOError
        chunk = self.chunks[0]
        n = min(len(chunk), nbytes or len(buffer))
        buffer[:n] = chunk[:n]
        if n < len(chunk):
            self.chunks[0] = chunk[n:]
        else:
            self.chunks.pop(0)
        return n


def framed(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 1, 7, 100, 3000, 9000, 40_000]), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=200_000), max_size=12),
    scratch=st.sampled_from([64, 1024, 16 * 1024]),
)
def test_frames_come_out_whole_and_in_order_for_any_chunking(
    sizes: list[int], cuts: list[int], scratch: int
) -> None:
    payloads = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    sock = ScriptedSocket([])
    reader = FrameReader(scratch_bytes=scratch)
    got: list[bytes] = []
    for chunk in split(framed(payloads), cuts):
        sock.feed([chunk])
        for _ in range(len(payloads) + 3):  # select() would report readable until drained
            got.extend(bytes(f) for f in reader.read(sock))
            if not sock.chunks:
                break
    assert got == payloads
    assert reader.pending_bytes() == 0


def test_a_large_frame_is_received_into_its_own_buffer_with_few_calls() -> None:
    payload = bytes(range(256)) * 8192  # 2 MiB
    data = framed([payload])
    sock = ScriptedSocket([data[:1000], data[1000:]])  # header in the first chunk, the rest at once
    reader = FrameReader(scratch_bytes=64 * 1024)
    frames = reader.read(sock)
    assert frames == [] and reader.pending_bytes() == 1000 - 4
    assert sock.calls == 1  # a short read means "drained for now": no second call that would block
    frames = reader.read(sock)
    assert [bytes(f) for f in frames] == [payload]
    assert sock.calls == 2  # the whole rest in one call, straight into the frame's buffer
    assert isinstance(frames[0], memoryview)  # not copied out of a scratch buffer


def test_frames_are_read_only() -> None:
    reader = FrameReader(scratch_bytes=64)
    sock = ScriptedSocket([framed([b"x" * 10, b"y" * 100])])
    frames = reader.read(sock) + reader.read(sock)
    assert [bytes(f) for f in frames] == [b"x" * 10, b"y" * 100]
    for f in frames:
        assert isinstance(f, bytes) or memoryview(f).readonly


def test_negative_or_oversized_frame_size_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="invalid response frame size -5"):
        FrameReader().read(ScriptedSocket([struct.pack(">i", -5)]))
    with pytest.raises(ProtocolError, match="invalid response frame size 2000"):
        FrameReader(max_frame_bytes=1000).read(ScriptedSocket([struct.pack(">i", 2000)]))


def test_peer_close_is_eof_and_a_real_socket_works() -> None:
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        reader = FrameReader(scratch_bytes=1024)
        big = b"z" * 300_000
        b.sendall(framed([b"hello", big])[:200_000])
        frames: list[bytes] = []
        frames += [bytes(f) for f in reader.read(a)]
        b.sendall(framed([b"hello", big])[200_000:])
        for _ in range(100):
            frames += [bytes(f) for f in reader.read(a)]
            if len(frames) == 2:
                break
        assert frames == [b"hello", big]
        b.close()
        with pytest.raises(EOFError):
            reader.read(a)
    finally:
        a.close()


@pytest.mark.parametrize("drain", [True, False])
def test_frames_before_the_close_come_out_and_the_eof_on_the_next_read(drain: bool) -> None:
    """A broker's last response often arrives together with its close (a SASL error): a read that gets
    both returns the response, and the next read raises the end of the stream."""
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        reader = FrameReader(scratch_bytes=16, drain=drain)  # small: a non-draining read loops too
        b.sendall(framed([b"last answer", b"x" * 3]))
        b.close()
        frames = [bytes(f) for f in reader.read(a)]
        if not drain:  # one recv per call at most while the scratch buffer is full
            for _ in range(10):
                if len(frames) == 2:
                    break
                frames += [bytes(f) for f in reader.read(a)]
        assert frames == [b"last answer", b"xxx"]
        with pytest.raises(EOFError):
            reader.read(a)
        with pytest.raises(EOFError):
            reader.read(a)
    finally:
        a.close()


def test_a_socket_error_after_frames_is_raised_from_the_next_read() -> None:
    class FailingAfter(ScriptedSocket):
        def recv_into(self, buffer: memoryview, nbytes: int = 0, /) -> int:
            if not self.chunks:
                raise ConnectionResetError("reset by peer")
            return super().recv_into(buffer, nbytes)

    reader = FrameReader(drain=True)
    assert [bytes(f) for f in reader.read(FailingAfter([framed([b"answer"])]))] == [b"answer"]
    with pytest.raises(ConnectionResetError):
        reader.read(FailingAfter([]))
