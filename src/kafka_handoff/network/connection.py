"""One non-blocking connection to one broker: connect, ApiVersions handshake, framed requests in order.

The connection is driven by :class:`~kafka_handoff.network.client.NetworkClient` from the network thread
only; it is not thread-safe and never blocks.
"""

from __future__ import annotations

import collections
import enum
import errno
import logging
import mmap
import random
import socket
import ssl
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from kafka_handoff.errors import (
    AuthenticationError,
    ConnectionError_,
    KafkaError,
    KafkaTimeoutError,
    SslError,
    error_for_code,
)
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.requests import UnsentRequest
from kafka_handoff.protocol.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE, SaslAuthenticator
from kafka_handoff.protocol.versions import ApiKey, negotiate

if TYPE_CHECKING:
    from kafka_handoff.security import SecuritySettings

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "PRE_AUTH_MAX_FRAME_BYTES",
    "RESPONSE_OVERHEAD_BYTES",
    "BrokerConnection",
    "ConnState",
    "FrameReader",
    "FrameSizeError",
    "InFlight",
]

_SCRATCH_BYTES = 256 * 1024
_SIZE = struct.Struct(">i")

PRE_AUTH_MAX_FRAME_BYTES = 1024 * 1024
"""The largest response frame accepted before a connection was ever ready (ApiVersions and the first SASL
exchange: a few KiB in practice).  A PLAINTEXT client at a TLS port reads a TLS alert as a ~352 MB frame
(KAFKA-4090); this limit turns that into an error at once."""
RESPONSE_OVERHEAD_BYTES = 64 * 1024 * 1024
"""What a response may carry beyond ``fetch.max.bytes`` (a first record batch larger than the fetch limit,
KIP-74; headers of many partitions); also the limit of the responses of clients that do not fetch."""
DEFAULT_MAX_RESPONSE_BYTES = 512 * 1024 * 1024
"""The frame limit of a connection not given one (the broker's ``socket.request.max.bytes``, 100 MiB, is
the request side's analogue)."""
_LAZY_FRAME_BYTES = 8 * 1024 * 1024
"""Frames above this size are received into an anonymous mapping, whose pages cost memory only once bytes
arrive: a peer that announces a large frame and sends little of it costs what it sent."""


class FrameSizeError(wire.ProtocolError):
    """A response frame's size is negative or above the connection's limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"invalid response frame size {size} (the limit is {limit} bytes)")
        self.size = size
        self.limit = limit

    @property
    def looks_like_tls(self) -> bool:
        """True when the four size bytes are the start of a TLS record: content type 20-23 (change cipher
        spec, alert, handshake, application data), then major version 3 and minor version 0-4."""
        raw = _SIZE.pack(self.size)
        return 20 <= raw[0] <= 23 and raw[1] == 3 and raw[2] <= 4


class Receiver(Protocol):
    """What :class:`FrameReader` reads from (a non-blocking ``socket.socket``)."""

    def recv_into(self, buffer: memoryview, nbytes: int, /) -> int: ...


class FrameReader:
    """Reads size-prefixed response frames from a non-blocking socket with few copies and system calls.

    Small frames are received into one reusable scratch buffer (several per ``recv``) and copied out once.
    A frame larger than half the scratch buffer gets a buffer of its own as soon as its size is known, and
    the rest of it is received straight into that buffer (``recv_into``): the kernel's copy is the only one,
    and each ``recv`` asks for everything still missing, so a multi-megabyte fetch response takes a few
    calls instead of one per chunk.  That matters beyond the copies: every socket call releases the GIL,
    and on a busy application thread getting it back costs up to the interpreter's switch interval.
    """

    def __init__(
        self,
        max_frame_bytes: int = 512 * 1024 * 1024,
        scratch_bytes: int = _SCRATCH_BYTES,
        *,
        drain: bool = False,
    ) -> None:
        # drain: keep receiving until the socket would block.  A TLS socket needs it: it hands out one TLS
        # record per call and may hold decrypted bytes that select() cannot see (SSLSocket.pending()).
        self._drain = drain
        self.max_frame_bytes = max_frame_bytes
        """The largest frame accepted (checked when a frame's size arrives; may change between reads)."""
        self._scratch = bytearray(scratch_bytes)
        self._view = memoryview(self._scratch)
        self._start = 0  # unparsed bytes are scratch[_start:_end]
        self._end = 0
        self._frame: bytearray | mmap.mmap | None = None  # a large frame being received
        self._frame_view: memoryview | None = None
        self._filled = 0
        # The end of the stream (EOFError) or a socket error met after complete frames were read in the same
        # call: those frames are returned first (the broker's last response, e.g. a SASL error, often comes
        # together with its close), and this is raised from the next call.
        self._error: BaseException | None = None

    def pending_bytes(self) -> int:
        """Bytes received that are not part of a returned frame yet."""
        return self._end - self._start + self._filled

    def read(self, sock: Receiver, max_frames: int = 0) -> list[bytes | memoryview]:
        """Receive what the socket has now; returns the complete frames (without their size prefix) in
        order.  Raises :class:`EOFError` when the peer closed the connection and ``OSError`` on socket
        errors -- once the frames that arrived before are returned: a call that reads frames and then meets
        the end of the stream returns the frames and raises from the next call.  A frame size that is
        negative or above the limit raises :class:`FrameSizeError`.

        ``max_frames`` (when above 0): stop receiving once that many frames are complete (the responses
        of every request in flight) -- a peer that streams frames nobody asked for cannot keep one call
        (and the network thread) busy; the frames already received are returned, the surplus is refused
        by the caller."""
        if self._error is not None:
            raise self._error
        frames: list[bytes | memoryview] = []
        while True:
            try:
                if self._frame is not None:
                    assert self._frame_view is not None
                    want = len(self._frame) - self._filled
                    n = sock.recv_into(self._frame_view[self._filled :], want)
                else:
                    if self._start:
                        self._compact()
                    want = len(self._scratch) - self._end
                    n = sock.recv_into(self._view[self._end :], want)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return frames
            except OSError as exc:  # ssl.SSLError included
                if frames:
                    self._error = exc
                    return frames
                raise
            if n == 0:
                eof = EOFError("connection closed by the peer")
                if frames:
                    self._error = eof
                    return frames
                raise eof
            if self._frame is not None:
                self._filled += n
                if self._filled == len(self._frame):
                    frames.append(memoryview(self._frame).toreadonly())
                    self._frame = self._frame_view = None
                    self._filled = 0
                    if not self._drain:
                        return frames  # select() says whether more is there; saves a recv that would block
            else:
                self._end += n
                self._parse(frames)
            if 0 < max_frames <= len(frames):
                return frames  # every response asked for is in
            if n < want and not self._drain:
                return frames  # drained for now

    def _compact(self) -> None:
        rest = self._end - self._start
        if rest:
            self._scratch[:rest] = self._view[self._start : self._end]
        self._start, self._end = 0, rest

    def _parse(self, frames: list[bytes | memoryview]) -> None:
        view = self._view
        pos, end = self._start, self._end
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(self._scratch, pos)
            if size < 0 or size > self.max_frame_bytes:
                raise FrameSizeError(size, self.max_frame_bytes)
            if end - pos - 4 >= size:
                frames.append(bytes(view[pos + 4 : pos + 4 + size]))
                pos += 4 + size
                continue
            if size > len(self._scratch) // 2:
                # Large: its own buffer from now on; what arrived so far is copied over once.
                have = end - pos - 4
                self._frame = bytearray(size) if size <= _LAZY_FRAME_BYTES else mmap.mmap(-1, size)
                self._frame_view = memoryview(self._frame)
                self._frame_view[:have] = view[pos + 4 : end]
                self._filled = have
                pos = end
            break
        if pos == end:
            self._start = self._end = 0
        else:
            self._start = pos


class ConnState(enum.Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    TLS_HANDSHAKE = "tls_handshake"  # TLS handshake driven by the selector
    HANDSHAKE = "handshake"  # ApiVersions in flight
    AUTHENTICATING = "authenticating"  # SASL exchange (first time or KIP-368 re-authentication)
    READY = "ready"


@dataclass(slots=True)
class InFlight:
    correlation_id: int
    api_key: int
    version: int
    request: UnsentRequest | None  # None for the internal ApiVersions handshake
    deadline_ms: int
    sent_ms: int


class BrokerConnection:
    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        client_id: str,
        *,
        software_name: str = "kafka-handoff",
        software_version: str = "0.1.0",
        receive_buffer_bytes: int = 65536,
        send_buffer_bytes: int = 131072,
        security: SecuritySettings | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.client_id = client_id
        self.state = ConnState.DISCONNECTED
        self.sock: socket.socket | None = None
        self.versions: dict[int, int] = {}
        self.finalized_features: dict[str, int] = {}
        """Cluster-wide finalized feature levels from ApiVersions v3+ (e.g. ``transaction.version``)."""
        self.in_flight: collections.deque[InFlight] = collections.deque()
        self._out = bytearray()
        self._reader = FrameReader()
        self._correlation = 0
        self._software = (software_name, software_version)
        self._rcvbuf = receive_buffer_bytes
        self._sndbuf = send_buffer_bytes
        self._api_versions_version = 3
        self.connect_deadline_ms = 0
        self.last_activity_ms = 0
        self.security = security
        self._tls_want_write = False
        self._ssl_retry_len = 0  # a TLS write that would block must be retried with the same length
        self._auth: SaslAuthenticator | None = None
        self._waiting_token = False
        self.reauth_at_ms: int | None = None
        self.authenticated_once = False
        self.max_response_bytes = max_response_bytes
        """The largest response frame once the connection was ready (before: PRE_AUTH_MAX_FRAME_BYTES)."""
        self.read_error: KafkaError | None = None
        """Set by :meth:`read` when handling a received frame failed: the responses before it were returned;
        the caller must close the connection (which fails the requests still in flight)."""

    @property
    def broker(self) -> str:
        """``host:port (node N)`` for messages."""
        node = f" (node {self.node_id})" if self.node_id >= 0 else " (bootstrap)"
        return f"{self.host}:{self.port}{node}"

    # ------------------------------------------------------------------ lifecycle
    def connect(self, now_ms: int, timeout_ms: int, infos: list[Any] | None = None) -> None:
        """Start connecting (non-blocking) to ``infos[0]`` (``socket.getaddrinfo``'s answer, resolved off the
        network thread by the caller); without ``infos`` the host is resolved here, which blocks unless it
        is an IP address."""
        if infos is None:
            infos = socket.getaddrinfo(self.host, self.port, 0, socket.SOCK_STREAM)
        if not infos:
            raise ConnectionError_(f"cannot connect to {self.host}:{self.port}: the name resolved to nothing")
        family, _type, proto, _canon, addr = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM, proto)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._rcvbuf > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, max(self._rcvbuf, 1 << 20))
        if self._sndbuf > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._sndbuf)
        if self.security is not None and self.security.ssl_context is not None:
            # Wrapped before connecting; the handshake runs later, step by step, from the selector.
            # server_hostname gives SNI and the name the certificate is checked against.
            sock = self.security.ssl_context.wrap_socket(
                sock, server_hostname=self.host, do_handshake_on_connect=False
            )
            self._reader = FrameReader(drain=True)
        err = sock.connect_ex(addr)
        if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            sock.close()
            raise ConnectionError_(
                f"cannot connect to {self.host}:{self.port}: {errno.errorcode.get(err, err)}"
            )
        self.sock = sock
        self.state = ConnState.CONNECTING
        self.connect_deadline_ms = now_ms + timeout_ms
        self.last_activity_ms = now_ms

    def finish_connect(self, now_ms: int, request_timeout_ms: int) -> None:
        """Called when the socket becomes writable while CONNECTING."""
        assert self.sock is not None
        err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise ConnectionError_(
                f"cannot connect to {self.host}:{self.port}: {errno.errorcode.get(err, err)}"
            )
        if isinstance(self.sock, ssl.SSLSocket):
            self.state = ConnState.TLS_HANDSHAKE
            self.tls_handshake(now_ms, request_timeout_ms)
            return
        self.state = ConnState.HANDSHAKE
        self._send_api_versions(now_ms, request_timeout_ms)

    def tls_handshake(self, now_ms: int, request_timeout_ms: int) -> None:
        """One non-blocking step of the TLS handshake (called whenever the socket is ready)."""
        sock = self.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._tls_want_write = False
            return
        except ssl.SSLWantWriteError:
            self._tls_want_write = True
            return
        except ssl.SSLCertVerificationError as exc:
            raise SslError(
                f"TLS handshake with broker {self.broker} failed: certificate verify failed: "
                f"{exc.verify_message or exc.reason}",
                broker=f"{self.host}:{self.port}",
                node_id=self.node_id,
            ) from None
        except ssl.SSLError as exc:
            raise SslError(
                f"TLS handshake with broker {self.broker} failed: {exc.reason or exc} "
                "(is the listener a TLS listener, and do the TLS versions match?)",
                broker=f"{self.host}:{self.port}",
                node_id=self.node_id,
            ) from None
        except OSError as exc:
            raise SslError(
                f"TLS handshake with broker {self.broker} failed: {exc.strerror or exc} "
                "(the broker closed the connection: is the listener a TLS listener?)",
                broker=f"{self.host}:{self.port}",
                node_id=self.node_id,
            ) from None
        self._tls_want_write = False
        log.debug("TLS with %s: %s %s", self.broker, sock.version(), sock.cipher())
        self.state = ConnState.HANDSHAKE
        self.last_activity_ms = now_ms
        self._send_api_versions(now_ms, request_timeout_ms)

    # ------------------------------------------------------------------ SASL
    def _start_auth(self, now_ms: int, request_timeout_ms: int) -> None:
        security = self.security
        assert security is not None and security.sasl_mechanism is not None
        self.state = ConnState.AUTHENTICATING
        try:
            ready = security.token_ready()
        except AuthenticationError as exc:
            raise AuthenticationError(
                f"SASL {security.sasl_mechanism} authentication with broker {self.broker} failed: {exc}",
                broker=f"{self.host}:{self.port}",
                node_id=self.node_id,
            ) from None
        if not ready:
            self._waiting_token = True
            return
        self._waiting_token = False
        self._auth = SaslAuthenticator(
            security.sasl_mechanism,
            lambda: security.new_mechanism(self.host),  # GSSAPI names the broker's host in its principal
            self.versions,
            f"{self.host}:{self.port}",
            self.node_id,
        )
        self._send_sasl(self._auth.start(), now_ms, request_timeout_ms)

    def _send_sasl(self, request: Any, now_ms: int, request_timeout_ms: int) -> None:
        assert self._auth is not None
        version = (
            self._auth.handshake_version
            if request.api_key == SASL_HANDSHAKE
            else self._auth.authenticate_version
        )
        payload = wire.build_request(request.api_key, version, request.values)
        self._enqueue(payload, request.api_key, version, None, now_ms, request_timeout_ms)

    def _on_sasl(self, api_key: int, response: Any, now_ms: int, request_timeout_ms: int) -> None:
        assert self._auth is not None
        following = self._auth.on_response(api_key, response)
        if following is not None:
            self._send_sasl(following, now_ms, request_timeout_ms)
            return
        lifetime = self._auth.session_lifetime_ms
        self._auth = None
        self.reauth_at_ms = None
        if lifetime > 0:
            # KIP-368: re-authenticate at 85-95% of the session lifetime, as Java's client does.
            self.reauth_at_ms = now_ms + int(lifetime * random.uniform(0.85, 0.95))
        log.debug(
            "%s with %s (%s); session lifetime %d ms",
            "re-authenticated" if self.authenticated_once else "authenticated",
            self.broker,
            self.security.sasl_mechanism if self.security else "",
            lifetime,
        )
        self.authenticated_once = True
        self.state = ConnState.READY

    def poll_auth(self, now_ms: int, request_timeout_ms: int) -> None:
        """Advance what waits on time or on other threads: a token that arrived, a due re-authentication
        (started once no request is in flight; no new request is sent meanwhile)."""
        if self.state is ConnState.AUTHENTICATING and self._auth is None:
            if self._waiting_token or not self.in_flight:
                self._start_auth(now_ms, request_timeout_ms)
        elif self.state is ConnState.READY and self.reauth_at_ms is not None and self.reauth_at_ms <= now_ms:
            self.reauth_at_ms = None
            self.state = ConnState.AUTHENTICATING
            if not self.in_flight:
                self._start_auth(now_ms, request_timeout_ms)

    def _send_api_versions(self, now_ms: int, request_timeout_ms: int) -> None:
        v = self._api_versions_version
        values: dict[str, Any] = {}
        if v >= 3:
            values = {"client_software_name": self._software[0], "client_software_version": self._software[1]}
        payload = wire.build_request(ApiKey.API_VERSIONS, v, values)
        self._enqueue(payload, ApiKey.API_VERSIONS, v, None, now_ms, request_timeout_ms)

    def close(self) -> list[InFlight]:
        """Close the socket; returns the requests that were in flight (they failed)."""
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self.state = ConnState.DISCONNECTED
        failed = list(self.in_flight)
        self.in_flight.clear()
        self._out.clear()
        self._reader = FrameReader()
        self.versions = {}
        self._auth = None
        self._waiting_token = False
        self.reauth_at_ms = None
        return [f for f in failed if f.request is not None]

    # ------------------------------------------------------------------ sending
    @property
    def ready(self) -> bool:
        return self.state is ConnState.READY

    def in_flight_count(self) -> int:
        return len(self.in_flight)

    def send(self, request: UnsentRequest, version: int, now_ms: int, timeout_ms: int) -> None:
        if request.encode is not None:
            payload: Any = request.encode(version)
        else:
            payload = wire.build_request(
                request.api_key, version, request.body(version), ignorable=request.ignorable
            )
        self._enqueue(payload, request.api_key, version, request, now_ms, timeout_ms)

    def _enqueue(
        self,
        payload: Any,
        api_key: int,
        version: int,
        request: UnsentRequest | None,
        now_ms: int,
        timeout_ms: int,
    ) -> None:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        cid = self._correlation
        self._out += wire.encode_request(payload, cid, self.client_id)
        if request is None or request.expect_response:
            self.in_flight.append(InFlight(cid, api_key, version, request, now_ms + timeout_ms, now_ms))

    def wants_write(self) -> bool:
        if self.state is ConnState.TLS_HANDSHAKE:
            return self._tls_want_write
        return self.state is ConnState.CONNECTING or bool(self._out)

    def write(self) -> None:
        assert self.sock is not None
        if not self._out or self.state in (ConnState.CONNECTING, ConnState.TLS_HANDSHAKE):
            return
        try:
            if isinstance(self.sock, ssl.SSLSocket):
                # OpenSSL wants a write that would block retried with the same length.
                length = self._ssl_retry_len or min(len(self._out), 1 << 18)
                try:
                    n = self.sock.send(memoryview(self._out)[:length])
                except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    self._ssl_retry_len = length
                    return
                self._ssl_retry_len = 0
            else:
                n = self.sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            tls = self._tls_alert(exc)
            if tls is not None:
                raise tls from None
            raise ConnectionError_(
                f"connection to {self.host}:{self.port} failed while sending: {exc}"
            ) from exc
        del self._out[:n]

    def _tls_alert(self, exc: OSError) -> SslError | None:
        """The :class:`SslError` for a TLS error met on a read or write right after the handshake, before
        the connection was ever usable (``None`` otherwise).  With TLS 1.3 the client's handshake is done
        before the broker has checked the client's certificate: a broker that requires one and got none (or
        an untrusted one) answers with an alert that arrives on the first read instead.  A plain close
        (``SSLEOFError``) stays a retriable connection failure."""
        if (
            not isinstance(exc, ssl.SSLError)
            or isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError))
            or self.state not in (ConnState.HANDSHAKE, ConnState.AUTHENTICATING)
            or self.authenticated_once
        ):
            return None
        hint = ""
        if "CERTIFICATE" in str(exc.reason or exc).upper():
            hint = (
                " (the broker refused this client's certificate or its absence: does the listener require "
                "mutual TLS -- ssl.certificate.location and ssl.key.location?)"
            )
        return SslError(
            f"TLS with broker {self.broker} failed right after the handshake: {exc.reason or exc}{hint}",
            broker=f"{self.host}:{self.port}",
            node_id=self.node_id,
        )

    # ------------------------------------------------------------------ receiving
    def frame_limit(self) -> int:
        """The largest response frame accepted now: small until the connection was ready once."""
        if self.authenticated_once or self.state is ConnState.READY:
            return self.max_response_bytes
        return min(PRE_AUTH_MAX_FRAME_BYTES, self.max_response_bytes)

    def _frame_size_error(self, exc: FrameSizeError) -> KafkaError:
        where = f"{self.host}:{self.port}"
        if exc.looks_like_tls and not isinstance(self.sock, ssl.SSLSocket):
            return SslError(
                f"broker {self.broker} answered with what looks like a TLS record (bytes "
                f"{_SIZE.pack(exc.size).hex(' ')}), not a Kafka response: is this a TLS port? Use "
                "security.protocol=SSL (or SASL_SSL) for a TLS listener",
                broker=where,
                node_id=self.node_id,
            )
        return wire.ProtocolError(f"{exc} from {self.broker}")

    def read(self, now_ms: int, request_timeout_ms: int) -> list[tuple[InFlight, Any]]:
        """Read what is available; returns (in-flight entry, decoded response) pairs for user requests.

        When handling a frame fails (a malformed response, a SASL step that raises), the pairs decoded
        before it are still returned and :attr:`read_error` is set; that frame's request and the ones after
        it stay in :attr:`in_flight`, so closing the connection fails them."""
        assert self.sock is not None
        self.read_error = None
        self._reader.max_frame_bytes = self.frame_limit()
        try:
            frames = self._reader.read(self.sock, max(1, len(self.in_flight)))
        except FrameSizeError as exc:
            raise self._frame_size_error(exc) from None
        except EOFError:
            raise ConnectionError_(
                f"connection to {self.host}:{self.port} was closed by the broker"
            ) from None
        except OSError as exc:
            tls = self._tls_alert(exc)
            if tls is not None:
                raise tls from None
            raise ConnectionError_(f"connection to {self.host}:{self.port} failed: {exc}") from exc
        if frames:
            self.last_activity_ms = now_ms
        out: list[tuple[InFlight, Any]] = []
        for frame in frames:
            if not self.in_flight:
                self.read_error = wire.ProtocolError(f"unexpected response from {self.host}:{self.port}")
                break
            entry = self.in_flight[0]
            try:
                cid = wire.response_correlation_id(frame)
                if cid != entry.correlation_id:
                    raise wire.ProtocolError(
                        f"correlation id mismatch from {self.host}:{self.port}: got {cid}, "
                        f"expected {entry.correlation_id}"
                    )
                response = wire.decode_response(entry.api_key, entry.version, frame)
                self.in_flight.popleft()
                if entry.request is None:
                    if entry.api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
                        self._on_sasl(entry.api_key, response, now_ms, request_timeout_ms)
                    else:
                        self._on_api_versions(response, now_ms, request_timeout_ms)
                else:
                    out.append((entry, response))
            except KafkaError as exc:
                self.read_error = exc
                break
            except Exception as exc:  # a bug or a malformed message a handler did not expect
                log.error("handling a response from %s failed", self.broker, exc_info=True)
                failure = ConnectionError_(
                    f"handling a response from {self.broker} failed: {type(exc).__name__}: {exc}"
                )
                failure.__cause__ = exc
                self.read_error = failure
                break
        if not out and self.read_error is not None:
            error, self.read_error = self.read_error, None
            raise error
        return out

    def _on_api_versions(self, response: Any, now_ms: int, request_timeout_ms: int) -> None:
        code = int(response.error_code)
        if code == ErrorCode.unsupported_version and self._api_versions_version > 0:  # retry with v0
            broker_max = max(
                (int(k.max_version) for k in response.api_keys if int(k.api_key) == ApiKey.API_VERSIONS),
                default=0,
            )
            self._api_versions_version = min(broker_max, self._api_versions_version - 1)
            self._send_api_versions(now_ms, request_timeout_ms)
            return
        if code != ErrorCode.none:
            raise error_for_code(code, f"ApiVersions from {self.host}:{self.port}")
        broker = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
        self.versions = negotiate(broker)
        self.finalized_features = {
            str(f.name): int(f.max_version_level) for f in getattr(response, "finalized_features", None) or ()
        }
        if self.security is not None and self.security.sasl_mechanism is not None:
            self._start_auth(now_ms, request_timeout_ms)
            return
        self.state = ConnState.READY

    def expired(self, now_ms: int) -> list[InFlight]:
        """In-flight requests past their deadline (the caller closes the connection then)."""
        return [f for f in self.in_flight if f.deadline_ms <= now_ms]

    def next_deadline(self) -> int | None:
        deadlines = [f.deadline_ms for f in self.in_flight]
        if self.state in (ConnState.CONNECTING, ConnState.TLS_HANDSHAKE):
            deadlines.append(self.connect_deadline_ms)
        if self.reauth_at_ms is not None:
            deadlines.append(self.reauth_at_ms)
        return min(deadlines) if deadlines else None


def timeout_error(entry: InFlight, host: str, port: int) -> KafkaError:
    name = wire.API_NAMES.get(entry.api_key, str(entry.api_key))
    return KafkaTimeoutError(f"{name} request to {host}:{port} timed out")
