"""A small in-process TCP proxy between clients and dev brokers, for network fault injection.

One :class:`Route` (a listening port on 127.0.0.1) per broker forwards to that broker; faults are switched
at runtime, per route or for all of them:

* :class:`Latency` -- every chunk of bytes, in either direction, is delivered ``ms`` later (order kept;
  throughput is not throttled);
* :class:`ResetMidResponse` -- the next response from the broker on every connection is cut after
  ``after_bytes`` bytes and the client's connection is reset (RST, ``SO_LINGER`` 0); new connections fare
  the same while the fault is on;
* :class:`BlackHole` -- connections are accepted and nothing is answered: bytes in both directions are
  dropped.  A connection that lost bytes can never carry Kafka frames again, so it stays silent until the
  client closes it (it must time the request out); connections made after :meth:`FaultProxy.heal` work.

Brokers advertise their own addresses in Metadata (and FindCoordinator, and KIP-951 leader hints), so
instead of rewriting responses :func:`start_proxied` starts the cluster with an extra ``EXTERNAL`` listener
per node whose *advertised* port is that node's proxy route: a client bootstrapping from
:attr:`FaultProxy.bootstrap_servers` only ever learns proxy addresses, while replication and the controller
keep using the direct ``PLAINTEXT``/``CONTROLLER`` listeners (``Cluster.bootstrap_servers`` stays direct).

This is dev tooling (tests, ``handoff bench faults``), built on plain threads: two per direction per
connection.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka_handoff.devbroker.cluster import Cluster, _free_ports, start
from kafka_handoff.devbroker.config import NodeSpec

__all__ = [
    "BlackHole",
    "Fault",
    "FaultProxy",
    "Latency",
    "ResetMidResponse",
    "Route",
    "external_listener_overrides",
    "start_proxied",
]

log = logging.getLogger("kafka_handoff.devbroker.proxy")

_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class Latency:
    """Deliver every chunk ``ms`` milliseconds late, both directions."""

    ms: float


@dataclass(frozen=True, slots=True)
class ResetMidResponse:
    """Cut the next broker response after ``after_bytes`` bytes and reset the client connection."""

    after_bytes: int = 7


@dataclass(frozen=True, slots=True)
class BlackHole:
    """Accept, read and drop everything; answer nothing."""


Fault = Latency | ResetMidResponse | BlackHole


class _Pipe:
    """One direction of one connection: a reader thread queues chunks, a writer thread sends them when due."""

    def __init__(self, conn: _Connection, src: socket.socket, dst: socket.socket, to_client: bool) -> None:
        self.conn = conn
        self.src = src
        self.dst = dst
        self.to_client = to_client
        self.queue: deque[tuple[float, bytes]] = deque()
        self.cond = threading.Condition()
        self.eof = False
        self.sent = 0

    def start(self, name: str) -> None:
        threading.Thread(target=self._read, name=f"{name}-r", daemon=True).start()
        threading.Thread(target=self._write, name=f"{name}-w", daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                data = self.src.recv(_CHUNK)
                if not data:
                    break
                fault = self.conn.route.fault
                if isinstance(fault, BlackHole) or self.conn.poisoned:
                    self.conn.poisoned = True  # a lost byte breaks the framing for good
                    continue
                delay = fault.ms / 1000.0 if isinstance(fault, Latency) else 0.0
                with self.cond:
                    self.queue.append((time.monotonic() + delay, data))
                    self.cond.notify()
        except OSError:
            pass
        finally:
            with self.cond:
                self.eof = True
                self.cond.notify()

    def _write(self) -> None:
        try:
            while True:
                with self.cond:
                    while not self.queue and not self.eof:
                        self.cond.wait()
                    if not self.queue:
                        break
                    due, data = self.queue[0]
                    wait = due - time.monotonic()
                    if wait > 0:
                        self.cond.wait(wait)
                        continue
                    self.queue.popleft()
                if self.conn.poisoned:
                    continue
                fault = self.conn.route.fault
                if self.to_client and isinstance(fault, ResetMidResponse):
                    head = data[: fault.after_bytes]
                    with contextlib.suppress(OSError):
                        self.dst.sendall(head)
                    self.conn.route.resets += 1
                    self.conn.reset()
                    return
                self.dst.sendall(data)
                self.sent += len(data)
        except OSError:
            pass
        finally:
            self.conn.half_closed(self)


class _Connection:
    def __init__(self, route: Route, client: socket.socket, upstream: socket.socket, number: int) -> None:
        self.route = route
        self.client = client
        self.upstream = upstream
        self.poisoned = False
        self._lock = threading.Lock()
        self._open_pipes = 2
        self._closed = False
        self.pipes = (_Pipe(self, client, upstream, False), _Pipe(self, upstream, client, True))
        self.name = f"proxy-{route.node_id}-{number}"

    def start(self) -> None:
        self.pipes[0].start(f"{self.name}-up")
        self.pipes[1].start(f"{self.name}-down")

    def half_closed(self, pipe: _Pipe) -> None:
        """A writer finished: pass the EOF on; close both sockets once both directions are done."""
        with contextlib.suppress(OSError):
            pipe.dst.shutdown(socket.SHUT_WR)
        with self._lock:
            self._open_pipes -= 1
            last = self._open_pipes == 0
        if last:
            self.close()

    def reset(self) -> None:
        """Abort the client connection with a TCP RST and drop the upstream one."""
        with contextlib.suppress(OSError):
            self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close(abort=True)

    def close(self, *, abort: bool = False) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for s in (self.client, self.upstream):
            # SHUT_RD wakes a reader blocked on the socket (close alone would not, and the socket would
            # stay open under it); SHUT_WR would send a FIN before the RST of an abort.
            how = socket.SHUT_RD if abort and s is self.client else socket.SHUT_RDWR
            with contextlib.suppress(OSError):
                s.shutdown(how)
            with contextlib.suppress(OSError):
                s.close()
        self.route._forget(self)


class Route:
    """A listening port that forwards to one broker (``upstream``), with its own fault switch."""

    def __init__(self, proxy: FaultProxy, node_id: int, host: str, port: int = 0) -> None:
        self.proxy = proxy
        self.node_id = node_id
        self.upstream: tuple[str, int] | None = None
        #: The fault in force (None: healthy).  Read by the pump threads on every chunk.
        self.fault: Fault | None = None
        #: How many connections :class:`ResetMidResponse` cut so far.
        self.resets = 0
        #: How many connections were accepted so far.
        self.accepted = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(128)
        self.host = host
        self.port = int(self._sock.getsockname()[1])
        self._conns: set[_Connection] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name=f"proxy-{node_id}-accept", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def connections(self) -> int:
        with self._lock:
            return len(self._conns)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            self.accepted += 1
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.upstream is None:
                client.close()  # no broker behind this route yet: refuse
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5.0)
            except OSError:
                client.close()  # the broker is down: the client sees a refused/closed connection
                continue
            upstream.settimeout(None)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Connection(self, client, upstream, self.accepted)
            if isinstance(self.fault, BlackHole):
                conn.poisoned = True
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._conns.add(conn)
            conn.start()

    def _forget(self, conn: _Connection) -> None:
        with self._lock:
            self._conns.discard(conn)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            conn.close()


class FaultProxy:
    """Routes (one per broker) with runtime-switchable faults.  Use :func:`start_proxied` for a cluster."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.routes: dict[int, Route] = {}

    def add_route(self, node_id: int, upstream: tuple[str, int] | None = None, listen_port: int = 0) -> Route:
        """Listen on ``listen_port`` (0: a free one) and forward to ``upstream`` (settable later)."""
        if node_id in self.routes:
            raise ValueError(f"node_id: a route for node {node_id} exists already")
        route = Route(self, node_id, self.host, listen_port)
        route.upstream = upstream
        self.routes[node_id] = route
        return route

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(r.address for r in self.routes.values())

    def set_fault(self, fault: Fault | None, nodes: Iterable[int] | None = None) -> None:
        """Switch ``fault`` on for ``nodes`` (default: every route); None heals them."""
        targets = self.routes.values() if nodes is None else [self.routes[n] for n in nodes]
        for route in targets:
            route.fault = fault
        log.info("proxy fault %s on nodes %s", fault, [r.node_id for r in targets])

    def heal(self, nodes: Iterable[int] | None = None) -> None:
        self.set_fault(None, nodes)

    def close(self) -> None:
        for route in self.routes.values():
            route.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def external_listener_overrides(
    external_ports: Mapping[int, int], advertised: Mapping[int, str]
) -> Callable[[NodeSpec], dict[str, str]]:
    """A ``node_overrides`` function for :func:`kafka_handoff.devbroker.start`: node ``i`` also listens on
    ``EXTERNAL://127.0.0.1:external_ports[i]`` and advertises it as ``advertised[i]`` (``host:port``)."""

    def per_node(spec: NodeSpec) -> dict[str, str]:
        h = spec.host
        return {
            "listeners": (
                f"PLAINTEXT://{h}:{spec.port},CONTROLLER://{h}:{spec.controller_port},"
                f"EXTERNAL://{h}:{external_ports[spec.node_id]}"
            ),
            "advertised.listeners": f"PLAINTEXT://{h}:{spec.port},EXTERNAL://{advertised[spec.node_id]}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
        }

    return per_node


def start_proxied(nodes: int = 3, **start_kwargs: Any) -> tuple[Cluster, FaultProxy]:
    """Start a dev cluster (:func:`kafka_handoff.devbroker.start` with ``start_kwargs``) behind a
    :class:`FaultProxy`: returns ``(cluster, proxy)``.  Clients that bootstrap from
    ``proxy.bootstrap_servers`` reach every broker through the proxy; ``cluster.bootstrap_servers`` is
    direct.  Node restarts keep the listeners (they are in each node's ``server.properties``).  Close the
    proxy after stopping the cluster."""
    proxy = FaultProxy()
    try:
        ids = list(range(1, nodes + 1))
        routes = {i: proxy.add_route(i) for i in ids}
        external = dict(zip(ids, _free_ports(nodes), strict=True))
        overrides = external_listener_overrides(external, {i: routes[i].address for i in ids})
        cluster = start(nodes, node_overrides=overrides, **start_kwargs)
    except BaseException:
        proxy.close()
        raise
    for i in ids:
        routes[i].upstream = ("127.0.0.1", external[i])
    return cluster, proxy
