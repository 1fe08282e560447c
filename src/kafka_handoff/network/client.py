"""The network client: every socket of one Kafka client, multiplexed with ``selectors``.

Owned by the network thread; not thread-safe except for :meth:`NetworkClient.wakeup`.  Request managers
hand it :class:`~kafka_handoff.protocol.requests.UnsentRequest` objects; it picks the destination
connection (a broker id, the least loaded broker, or the group coordinator), negotiates API versions with
each broker, frames the request for the negotiated version, and calls the request's completion handler on
the network thread when the response arrives, the connection fails or the request times out.
"""

from __future__ import annotations

import collections
import concurrent.futures
import ipaddress
import logging
import random
import selectors
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka_handoff.errors import (
    AuthenticationError,
    ConnectionError_,
    CoordinatorNotAvailableError,
    KafkaError,
    UnsupportedVersionError,
)
from kafka_handoff.network.connection import (
    DEFAULT_MAX_RESPONSE_BYTES,
    BrokerConnection,
    ConnState,
    InFlight,
    timeout_error,
)
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.requests import ANY_NODE, COORDINATOR, UnsentRequest
from kafka_handoff.protocol.versions import pick_version
from kafka_handoff.types import BrokerNode

if TYPE_CHECKING:
    from kafka_handoff.security import SecuritySettings

__all__ = ["NetworkClient"]

log = logging.getLogger(__name__)

_BOOTSTRAP_BASE = -1000
_COORDINATOR_BASE = 1 << 30
_UNREACHABLE_WARN_MS = 10_000  # a warning about unreachable brokers at most this often
_STALLED_AFTER_MS = 1_000
"""A ready connection whose oldest request has waited longer than this is "stalled" for
:meth:`NetworkClient.least_loaded_node`: a request any broker can answer goes to another broker first.  Below
the fetcher's overdue check (``fetch.max.wait.ms`` + at least 1 s), so the metadata refresh that check asks
for already avoids a hung leader; a slow but healthy broker costs at most one more connection."""


@dataclass(slots=True)
class _Backoff:
    attempts: int = 0
    next_ms: int = 0


class NetworkClient:
    def __init__(
        self,
        bootstrap: list[tuple[str, int]],
        *,
        client_id: str,
        request_timeout_ms: int = 30000,
        connect_timeout_ms: int = 10000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        receive_buffer_bytes: int = 65536,
        send_buffer_bytes: int = 131072,
        max_in_flight_per_connection: int = 5,
        security: SecuritySettings | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self._max_response_bytes = max_response_bytes
        self.client_id = client_id
        self.security = security
        self._auth_errors: collections.deque[AuthenticationError] = collections.deque(maxlen=16)
        self._failed_addresses: dict[str, str] = {}  # host:port -> last failure, since the last connection
        self._last_connected_ms: int | None = None
        self._unreachable_since_ms: int | None = None
        self._last_unreachable_warning_ms = -(1 << 62)
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self._reconnect_base = reconnect_backoff_ms
        self._reconnect_max = reconnect_backoff_max_ms
        self._reconnect_backoff = ExponentialBackoff(reconnect_backoff_ms, reconnect_backoff_max_ms)
        self._rcvbuf = receive_buffer_bytes
        self._sndbuf = send_buffer_bytes
        self.max_in_flight = max_in_flight_per_connection
        self._bootstrap: dict[int, tuple[str, int]] = {
            _BOOTSTRAP_BASE - i: hp for i, hp in enumerate(bootstrap)
        }
        self._brokers: dict[int, BrokerNode] = {}
        self.coordinator_id: int | None = None
        self._coordinator_address: tuple[str, int] | None = None
        self._conns: dict[int, BrokerConnection] = {}
        self._pending: dict[int, collections.deque[UnsentRequest]] = collections.defaultdict(
            collections.deque
        )
        self._backoff: dict[int, _Backoff] = collections.defaultdict(_Backoff)
        self._suspect_until: dict[int, int] = {}
        """Brokers (logical ids) that timed out recently -- a request unanswered or a connection not set
        up within its timeout, the mark of a hung broker (a SIGSTOPped JVM, a black-holed host) whose
        kernel still accepts connections -- until when :meth:`least_loaded_node` picks them only when no
        other broker is left.  Cleared by the first response read from the broker."""
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._masks: dict[int, int] = {}
        self._wake_pending = False
        self.disconnect_listeners: list[Callable[[int, bool, int], None]] = []
        """Called as ``listener(node_id, is_coordinator_connection, now_ms)`` when a connection is lost."""
        self._closed = False
        # DNS: getaddrinfo blocks (up to the resolver's timeouts, ~5 s per attempt); names are resolved on a
        # thread of their own so that the network thread keeps serving the other connections meanwhile.
        self._resolver: concurrent.futures.ThreadPoolExecutor | None = None
        self._resolving: dict[int, concurrent.futures.Future[list[Any]]] = {}
        if security is not None and security.token_provider is not None:
            security.token_provider.listeners.append(self.wakeup)

    # ------------------------------------------------------------------ topology
    def update_brokers(self, brokers: Iterable[BrokerNode]) -> None:
        self._brokers = {b.node_id: b for b in brokers}

    def set_coordinator(self, node: BrokerNode | None, now_ms: int) -> None:
        """Route ``COORDINATOR`` requests to ``node`` (``None``: unknown; its connection is dropped)."""
        old = self.coordinator_id
        if node is None:
            self.coordinator_id = None
            self._coordinator_address = None
        else:
            self.coordinator_id = node.node_id
            self._coordinator_address = (node.host, node.port)
        if old is not None and (node is None or node.node_id != old):
            conn_id = _COORDINATOR_BASE + old
            if conn_id in self._conns or self._pending.get(conn_id):
                self._disconnect(conn_id, CoordinatorNotAvailableError("coordinator changed"), now_ms)

    def finalized_feature(self, name: str, api_key: int | None = None) -> tuple[int, int] | None:
        """``(finalized level of the feature, negotiated version of api_key or -1)`` as the transaction
        coordinator's connection (else any ready one) reported them in ApiVersions; ``None`` while no
        connection is ready."""
        conns = [c for c in self._conns.values() if c.ready]
        if self.coordinator_id is not None:
            conns.sort(key=lambda c: c.node_id != self.coordinator_id)
        for conn in conns:
            version = conn.versions.get(api_key, -1) if api_key is not None else -1
            return conn.finalized_features.get(name, 0), version
        return None

    def _address(self, conn_id: int) -> tuple[str, int] | None:
        if conn_id <= _BOOTSTRAP_BASE:
            return self._bootstrap.get(conn_id)
        if conn_id >= _COORDINATOR_BASE:
            if self._coordinator_address is not None and conn_id - _COORDINATOR_BASE == self.coordinator_id:
                return self._coordinator_address
            node = conn_id - _COORDINATOR_BASE
        else:
            node = conn_id
        b = self._brokers.get(node)
        return (b.host, b.port) if b is not None else None

    def _logical_node(self, conn_id: int) -> int:
        return conn_id - _COORDINATOR_BASE if conn_id >= _COORDINATOR_BASE else conn_id

    # ------------------------------------------------------------------ sending
    def wakeup(self) -> None:
        """Interrupt a blocking :meth:`poll` from any thread.  While a wake-up byte is unread no second one
        is written: the network thread clears the flag only after draining the bytes, and looks at every
        request manager and event after that, so a skipped wake-up is never lost."""
        if self._wake_pending:
            return
        self._wake_pending = True
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass

    def in_flight_count(self, node_id: int) -> int:
        conn = self._conns.get(node_id)
        return (conn.in_flight_count() if conn else 0) + len(self._pending.get(node_id, ()))

    def send(self, request: UnsentRequest, now_ms: int) -> None:
        """Queue a request for its destination; it is written as soon as the connection is ready."""
        if self._closed:
            self._fail(request, KafkaError("the client is closed"), now_ms)
            return
        conn_id = self._resolve(request.node, now_ms)
        if conn_id is None:
            err: KafkaError = (
                CoordinatorNotAvailableError("coordinator unknown")
                if request.node == COORDINATOR
                else ConnectionError_(f"no address known for broker {request.node}")
            )
            self._fail(request, err, now_ms)
            return
        request.created_ms = request.created_ms or now_ms
        self._pending[conn_id].append(request)

    def _resolve(self, node: int, now_ms: int) -> int | None:
        if node == COORDINATOR:
            if self.coordinator_id is None:
                return None
            return _COORDINATOR_BASE + self.coordinator_id
        if node == ANY_NODE:
            return self.least_loaded_node(now_ms)
        return node if self._address(node) is not None else None

    def least_loaded_node(self, now_ms: int) -> int | None:
        """The broker for a request any broker can answer (Metadata, FindCoordinator, ...): a ready
        connection with the fewest requests in flight, else one being set up, else one not in reconnect
        backoff, else a ready one whose oldest request waits longer than ``_STALLED_AFTER_MS`` (it may be
        hung: its answer to anything new would wait behind that request).  Brokers that timed out recently
        (:attr:`_suspect_until`) come last: a hung broker accepts a new connection and then answers
        nothing, and a metadata refresh sent there would wait a whole request timeout while another broker
        already knows the new leaders."""
        candidates = list(self._brokers) or list(self._bootstrap)
        if not candidates:
            return None
        random.shuffle(candidates)
        healthy = [n for n in candidates if self._suspect_until.get(self._logical_node(n), 0) <= now_ms]
        if healthy and len(healthy) < len(candidates):
            return self._least_loaded(healthy, now_ms)
        return self._least_loaded(candidates, now_ms)

    def _least_loaded(self, candidates: list[int], now_ms: int) -> int:
        best: int | None = None
        best_load = 1 << 30
        stalled: list[int] = []
        for node in candidates:
            conn = self._conns.get(node)
            if conn is not None and conn.ready:
                if conn.in_flight and now_ms - conn.in_flight[0].sent_ms > _STALLED_AFTER_MS:
                    stalled.append(node)
                    continue
                load = self.in_flight_count(node)
                if load < best_load:
                    best, best_load = node, load
        if best is not None:
            return best
        for node in candidates:
            conn = self._conns.get(node)
            if conn is not None and not conn.ready and conn.state is not ConnState.DISCONNECTED:
                return node
        for node in candidates:
            conn = self._conns.get(node)
            idle = conn is None or conn.state is ConnState.DISCONNECTED
            if idle and self._backoff[node].next_ms <= now_ms:
                return node
        if stalled:
            return min(stalled, key=self.in_flight_count)
        return min(candidates, key=lambda n: self._backoff[n].next_ms)

    # ------------------------------------------------------------------ poll
    def poll(self, timeout_ms: int, now_ms: int, clock: Callable[[], int]) -> None:
        """Connect, write, wait up to ``timeout_ms`` for I/O, read, dispatch responses and timeouts."""
        self._start_connections(now_ms)
        self._poll_auth(now_ms)
        self._flush_pending(now_ms)
        self._update_interest()
        deadline = self._next_deadline()
        if deadline is not None:
            timeout_ms = max(0, min(timeout_ms, deadline - now_ms))
        events = self._selector.select(timeout_ms / 1000.0 if timeout_ms > 0 else 0)
        now_ms = clock()
        for key, mask in events:
            conn_id = key.data
            if conn_id is None:
                self._drain_wakeups()
                continue
            conn = self._conns.get(conn_id)
            if conn is None or conn.sock is None:
                continue
            try:
                if conn.state is ConnState.CONNECTING:
                    if mask & selectors.EVENT_WRITE:
                        conn.finish_connect(now_ms, self.request_timeout_ms)
                        if self.security is None:
                            self._on_connected(conn_id, now_ms)
                    continue
                if conn.state is ConnState.TLS_HANDSHAKE:
                    conn.tls_handshake(now_ms, self.request_timeout_ms)
                    if conn.state is not ConnState.TLS_HANDSHAKE:
                        conn.write()  # ApiVersions
                    continue
                if mask & selectors.EVENT_WRITE:
                    conn.write()
                if mask & selectors.EVENT_READ:
                    was_ready = conn.ready
                    results = conn.read(now_ms, self.request_timeout_ms)
                    if self._suspect_until and (results or conn.ready is not was_ready):
                        self._suspect_until.pop(self._logical_node(conn_id), None)
                    read_error = conn.read_error
                    for entry, response in results:
                        self._complete(entry, response, now_ms)
                    if read_error is not None:
                        raise read_error
                    if conn.ready and not was_ready:
                        if self.security is not None:
                            self._on_connected(conn_id, now_ms)
                        self._flush_pending(now_ms)
                    elif conn.wants_write():
                        conn.write()  # the next SASL message
            except (KafkaError, OSError) as exc:
                self._disconnect(conn_id, exc, now_ms)
            except Exception as exc:  # a bug: this connection's requests fail, the others carry on
                log.error("network error with %s:%s", conn.host, conn.port, exc_info=True)
                error = ConnectionError_(f"connection to {conn.host}:{conn.port} failed: {exc!r}")
                error.__cause__ = exc
                self._disconnect(conn_id, error, now_ms)
        self._expire(now_ms)
        self._poll_auth(now_ms)
        self._flush_pending(now_ms)
        for conn_id, conn in list(self._conns.items()):
            if conn.ready and conn.wants_write():
                try:
                    conn.write()
                except KafkaError as exc:
                    self._disconnect(conn_id, exc, now_ms)

    def _on_connected(self, conn_id: int, now_ms: int) -> None:
        """A connection became usable (after TLS and SASL when configured)."""
        self._backoff[conn_id] = _Backoff()
        self._last_connected_ms = now_ms
        self._unreachable_since_ms = None
        self._failed_addresses.clear()

    def _poll_auth(self, now_ms: int) -> None:
        if self.security is None or self.security.sasl_mechanism is None:
            return
        for conn_id, conn in list(self._conns.items()):
            if conn.state is ConnState.AUTHENTICATING or conn.reauth_at_ms is not None:
                try:
                    conn.poll_auth(now_ms, self.request_timeout_ms)
                    if conn.wants_write():
                        conn.write()
                except (KafkaError, OSError) as exc:
                    self._disconnect(conn_id, exc, now_ms)
                except Exception as exc:  # a SASL step that raised anything else: fail, do not hang
                    log.error("authentication with %s:%s failed", conn.host, conn.port, exc_info=True)
                    error = AuthenticationError(
                        f"authentication with {conn.host}:{conn.port} failed: {exc!r}",
                        broker=f"{conn.host}:{conn.port}",
                        node_id=conn.node_id,
                    )
                    error.__cause__ = exc
                    self._disconnect(conn_id, error, now_ms)

    def take_auth_errors(self) -> list[AuthenticationError]:
        """Authentication and TLS failures since the last call (the network thread reports them to the
        application, whose next call raises them)."""
        out = list(self._auth_errors)
        self._auth_errors.clear()
        return out

    def _note_unreachable(self, conn: BrokerConnection, error: BaseException, now_ms: int) -> None:
        """Warn (rate-limited) when no broker could be reached, naming the addresses tried."""
        self._failed_addresses[f"{conn.host}:{conn.port}"] = str(error)
        if any(c.ready for c in self._conns.values()):
            return
        if self._unreachable_since_ms is None:
            self._unreachable_since_ms = now_ms
        if now_ms - self._last_unreachable_warning_ms < _UNREACHABLE_WARN_MS:
            return
        self._last_unreachable_warning_ms = now_ms
        tried = ", ".join(f"{addr} ({cause})" for addr, cause in sorted(self._failed_addresses.items()))
        log.warning(
            "%s: no broker reachable for %d ms; tried %s",
            self.client_id,
            now_ms - self._unreachable_since_ms,
            tried,
        )

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass
        self._wake_pending = False

    def _start_connections(self, now_ms: int) -> None:
        for conn_id, queue in self._pending.items():
            if not queue:
                continue
            conn = self._conns.get(conn_id)
            if conn is not None and conn.state is not ConnState.DISCONNECTED:
                continue
            backoff = self._backoff[conn_id]
            if backoff.next_ms > now_ms:
                continue
            self._connect(conn_id, now_ms)

    def _resolve_address(self, conn_id: int, host: str, port: int) -> tuple[bool, list[Any] | None]:
        """(ready, getaddrinfo's answer): IP addresses at once; names on the resolver thread -- (False, None)
        while that runs (its end wakes the network thread up), then its answer (a failure is raised)."""
        try:
            ipaddress.ip_address(host)
        except ValueError:
            pass
        else:
            return True, socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)  # numeric: no lookup
        future = self._resolving.get(conn_id)
        if future is None:
            if self._resolver is None:
                self._resolver = concurrent.futures.ThreadPoolExecutor(
                    max_workers=2, thread_name_prefix="kafka-handoff-dns"
                )
            future = self._resolver.submit(socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM)
            self._resolving[conn_id] = future
            future.add_done_callback(lambda _f: self.wakeup())
        if not future.done():
            return False, None
        del self._resolving[conn_id]
        return True, future.result()  # raises the lookup's error (an OSError)

    def _connect(self, conn_id: int, now_ms: int) -> None:
        address = self._address(conn_id)
        if address is None:
            self._fail_pending(conn_id, ConnectionError_(f"no address known for broker {conn_id}"), now_ms)
            return
        infos: list[Any] | None = None
        error: BaseException | None = None
        try:
            ready, infos = self._resolve_address(conn_id, address[0], address[1])
        except OSError as exc:
            ready, error = True, ConnectionError_(f"cannot resolve {address[0]}:{address[1]}: {exc}")
        if not ready:
            return
        conn = BrokerConnection(
            self._logical_node(conn_id),
            address[0],
            address[1],
            self.client_id,
            receive_buffer_bytes=self._rcvbuf,
            send_buffer_bytes=self._sndbuf,
            security=self.security,
            max_response_bytes=self._max_response_bytes,
        )
        try:
            if error is not None:
                raise error
            conn.connect(now_ms, self.connect_timeout_ms, infos)
        except (KafkaError, OSError) as exc:
            self._conns[conn_id] = conn
            self._disconnect(conn_id, exc, now_ms)
            return
        self._conns[conn_id] = conn
        assert conn.sock is not None
        self._selector.register(conn.sock, selectors.EVENT_WRITE, conn_id)
        self._masks[conn_id] = selectors.EVENT_WRITE

    def _flush_pending(self, now_ms: int) -> None:
        for conn_id, queue in self._pending.items():
            if not queue:
                continue
            conn = self._conns.get(conn_id)
            if conn is None or not conn.ready:
                continue
            while queue and conn.in_flight_count() < self.max_in_flight + 1:
                request = queue.popleft()
                try:
                    version = pick_version(
                        conn.versions, request.api_key, request.min_version, request.max_version
                    )
                    timeout = (
                        request.timeout_ms if request.timeout_ms is not None else self.request_timeout_ms
                    )
                    conn.send(request, version, now_ms, timeout)
                except UnsupportedVersionError as exc:
                    self._fail(request, exc, now_ms)
                    continue
                if not request.expect_response and request.on_response is not None:
                    request.on_response(None, version, now_ms)
            try:
                conn.write()
            except KafkaError as exc:
                self._disconnect(conn_id, exc, now_ms)

    def _update_interest(self) -> None:
        for conn_id, conn in self._conns.items():
            if conn.sock is None:
                continue
            mask = selectors.EVENT_READ
            if conn.wants_write():
                mask |= selectors.EVENT_WRITE
            if conn.state is ConnState.CONNECTING:
                mask = selectors.EVENT_WRITE
            elif conn.state is ConnState.TLS_HANDSHAKE:
                mask = selectors.EVENT_WRITE if conn.wants_write() else selectors.EVENT_READ
            if self._masks.get(conn_id) != mask:
                self._selector.modify(conn.sock, mask, conn_id)
                self._masks[conn_id] = mask

    def _next_deadline(self) -> int | None:
        deadlines = [d for c in self._conns.values() if (d := c.next_deadline()) is not None]
        for conn_id, queue in self._pending.items():
            if queue and conn_id not in self._resolving:  # a lookup's end wakes the thread up
                conn = self._conns.get(conn_id)
                if conn is None or conn.state is ConnState.DISCONNECTED:
                    deadlines.append(self._backoff[conn_id].next_ms)
        return min(deadlines) if deadlines else None

    def _expire(self, now_ms: int) -> None:
        for conn_id, conn in list(self._conns.items()):
            if (
                conn.state in (ConnState.CONNECTING, ConnState.TLS_HANDSHAKE)
                and conn.connect_deadline_ms <= now_ms
            ):
                self._suspect_until[self._logical_node(conn_id)] = now_ms + self.request_timeout_ms
                self._disconnect(
                    conn_id, ConnectionError_(f"connecting to {conn.host}:{conn.port} timed out"), now_ms
                )
                continue
            expired = conn.expired(now_ms)
            if expired:
                self._suspect_until[self._logical_node(conn_id)] = now_ms + self.request_timeout_ms
                self._disconnect(conn_id, timeout_error(expired[0], conn.host, conn.port), now_ms)
        # Requests that waited for a connection longer than their timeout fail too.
        for _conn_id, queue in self._pending.items():
            keep: collections.deque[UnsentRequest] = collections.deque()
            while queue:
                request = queue.popleft()
                timeout = request.timeout_ms if request.timeout_ms is not None else self.request_timeout_ms
                if request.created_ms + timeout <= now_ms:
                    self._fail(
                        request, ConnectionError_("no connection to the broker within the timeout"), now_ms
                    )
                else:
                    keep.append(request)
            queue.extend(keep)

    # ------------------------------------------------------------------ completion
    def _complete(self, entry: InFlight, response: object, now_ms: int) -> None:
        """Hand a response to its request's callback.  A callback that raises is logged (as Java's
        ``NetworkClient`` does) and does not keep the other responses of the same read from theirs."""
        request = entry.request
        if request is not None and request.on_response is not None:
            try:
                request.on_response(response, entry.version, now_ms)
            except Exception:
                name = wire.API_NAMES.get(entry.api_key, str(entry.api_key))
                log.error("the response handler of a %s request raised", name, exc_info=True)

    def _fail(self, request: UnsentRequest, error: BaseException, now_ms: int) -> None:
        if request.on_failure is not None:
            request.on_failure(error, now_ms)

    def _fail_pending(self, conn_id: int, error: BaseException, now_ms: int) -> None:
        queue = self._pending.get(conn_id)
        while queue:
            self._fail(queue.popleft(), error, now_ms)

    def _disconnect(self, conn_id: int, error: BaseException, now_ms: int) -> None:
        conn = self._conns.pop(conn_id, None)
        self._masks.pop(conn_id, None)
        failed: list[InFlight] = []
        was_ready = False
        if conn is not None:
            was_ready = conn.ready or conn.authenticated_once
            if conn.sock is not None:
                try:
                    self._selector.unregister(conn.sock)
                except (KeyError, ValueError):
                    pass
            failed = conn.close()
            log.debug("disconnected from %s:%s: %s", conn.host, conn.port, error)
        backoff = self._backoff[conn_id]
        backoff.attempts += 1
        backoff.next_ms = now_ms + self._reconnect_backoff.after_failures(backoff.attempts)
        err = error if isinstance(error, KafkaError) else ConnectionError_(str(error))
        if isinstance(error, AuthenticationError):
            # Fatal to the calls, not to the client (as in Java): the application's next call raises it,
            # reconnects wait reconnect.backoff.max.ms, and the requests fail with a retriable error so
            # that their managers keep their own backoff.
            backoff.next_ms = now_ms + self._reconnect_max
            self._auth_errors.append(error)
            err = ConnectionError_(str(error))
            err.__cause__ = error
        if conn is not None and not was_ready and not isinstance(error, AuthenticationError):
            self._note_unreachable(conn, error, now_ms)
        for entry in failed:
            if entry.request is not None:
                self._fail(entry.request, err, now_ms)
        # Requests waiting for this connection fail too, so their managers can retry elsewhere.
        self._fail_pending(conn_id, err, now_ms)
        for listener in self.disconnect_listeners:
            listener(self._logical_node(conn_id), conn_id >= _COORDINATOR_BASE, now_ms)

    def disconnect(self, node_id: int, now_ms: int) -> None:
        self._disconnect(node_id, ConnectionError_("disconnected on request"), now_ms)

    def has_in_flight(self) -> bool:
        return any(c.in_flight for c in self._conns.values()) or any(self._pending.values())

    def close(self) -> None:
        self._closed = True
        if self._resolver is not None:
            self._resolver.shutdown(wait=False, cancel_futures=True)
        self._resolving.clear()
        if self.security is not None:
            self.security.close()
        for conn_id in list(self._conns):
            conn = self._conns.pop(conn_id)
            if conn.sock is not None:
                try:
                    self._selector.unregister(conn.sock)
                except (KeyError, ValueError):
                    pass
            conn.close()
        try:
            self._selector.close()
        finally:
            self._wake_r.close()
            self._wake_w.close()
