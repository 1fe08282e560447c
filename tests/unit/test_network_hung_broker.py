"""Where a request any broker can answer goes while one broker hangs (issue 31's hung-leader flake).

A hung broker (a SIGSTOPped JVM) keeps its listening socket: the kernel completes new connections, and then
nothing is answered.  The consumer's metadata refresh must not be sent there -- neither on the connection
whose fetch is stuck, nor on a new connection to the same broker after a timeout -- or the consumer learns
the new leader only a request timeout (or two) later.  The hung brokers here are listening sockets that
never accept; time is a fake clock.
"""

from __future__ import annotations

import collections
import socket
from collections.abc import Iterator
from typing import Any, cast

import pytest

from kafka_handoff.network import client as client_module
from kafka_handoff.network.client import NetworkClient
from kafka_handoff.network.connection import BrokerConnection, ConnState, InFlight
from kafka_handoff.protocol.requests import UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import BrokerNode

pytestmark = pytest.mark.unit

REQUEST_TIMEOUT_MS = 1000


@pytest.fixture
def hung_ports() -> Iterator[list[int]]:
    """Three listening sockets that never accept nor answer (the kernel completes the TCP handshake)."""
    socks = []
    for _ in range(3):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        socks.append(s)
    yield [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()


def make_client(ports: list[int]) -> NetworkClient:
    client = NetworkClient(
        [("127.0.0.1", ports[0])],
        client_id="hung-test",
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        connect_timeout_ms=REQUEST_TIMEOUT_MS,
    )
    client.update_brokers([BrokerNode(i + 1, "127.0.0.1", port) for i, port in enumerate(ports)])
    return client


def metadata_request(failures: list[BaseException], node: int) -> UnsentRequest:
    return UnsentRequest(
        api_key=ApiKey.METADATA,
        node=node,
        values={"topics": None, "allow_auto_topic_creation": False},
        on_failure=lambda error, now: failures.append(error),
    )


def drive_until(client: NetworkClient, clock: list[int], done: Any, limit_ms: int = 20_000) -> None:
    """Poll the client, advancing the fake clock 50 ms a round, until ``done()``."""
    start = clock[0]
    while not done():
        assert clock[0] - start < limit_ms, "the client did not get there"
        client.poll(0, clock[0], lambda: clock[0])
        clock[0] += 50


def test_after_a_timeout_the_broker_is_picked_last_even_while_reconnecting(hung_ports: list[int]) -> None:
    client = make_client(hung_ports)
    clock = [1_000_000]
    failures: list[BaseException] = []
    try:
        client.send(metadata_request(failures, 1), clock[0])
        drive_until(client, clock, lambda: failures)  # ApiVersions to broker 1 went unanswered
        assert "timed out" in str(failures[0])
        # The fetcher (with metadata that still names broker 1 the leader) connects to it again.
        client.send(metadata_request(failures, 1), clock[0])
        drive_until(client, clock, lambda: 1 in client._conns)
        assert client._conns[1].state is not ConnState.DISCONNECTED and not client._conns[1].ready
        picks = {client.least_loaded_node(clock[0]) for _ in range(60)}
        assert picks <= {2, 3} and picks, picks
    finally:
        client.close()


def test_without_timeouts_a_connection_being_set_up_is_still_preferred(hung_ports: list[int]) -> None:
    client = make_client(hung_ports)
    clock = [1_000_000]
    failures: list[BaseException] = []
    try:
        client.send(metadata_request(failures, 2), clock[0])
        drive_until(client, clock, lambda: 2 in client._conns)
        assert {client.least_loaded_node(clock[0]) for _ in range(30)} == {2}
    finally:
        client.close()


def test_once_every_broker_timed_out_one_is_still_picked(hung_ports: list[int]) -> None:
    client = make_client(hung_ports)
    clock = [1_000_000]
    failures: list[BaseException] = []
    try:
        for node in (1, 2, 3):
            client.send(metadata_request(failures, node), clock[0])
        drive_until(client, clock, lambda: len(failures) == 3)
        assert client.least_loaded_node(clock[0]) in (1, 2, 3)
    finally:
        client.close()


class ReadyConnection:
    """Stands in for a ready BrokerConnection with requests in flight (only what the node choice reads)."""

    def __init__(self, node_id: int, sent_ms: list[int]) -> None:
        self.node_id = node_id
        self.state = ConnState.READY
        self.ready = True
        self.in_flight = collections.deque(
            InFlight(i, ApiKey.FETCH, 12, None, sent + REQUEST_TIMEOUT_MS, sent)
            for i, sent in enumerate(sent_ms)
        )

    def in_flight_count(self) -> int:
        return len(self.in_flight)


def test_a_ready_connection_with_a_stalled_request_is_passed_over(hung_ports: list[int]) -> None:
    client = make_client(hung_ports)
    now = 1_000_000
    try:
        # The consumer's only connection: the leader's, its fetch unanswered for longer than a long poll.
        stalled_since = now - client_module._STALLED_AFTER_MS - 1
        client._conns[1] = cast(BrokerConnection, ReadyConnection(1, [stalled_since]))
        picks = {client.least_loaded_node(now) for _ in range(60)}
        assert picks <= {2, 3} and picks, picks
        # A fetch waiting less than that is an ordinary long poll: the ready connection is used.
        client._conns[1] = cast(BrokerConnection, ReadyConnection(1, [now - 400]))
        assert {client.least_loaded_node(now) for _ in range(30)} == {1}
        # With no other broker to try (all in reconnect backoff), the stalled connection is still used.
        client._conns[1] = cast(BrokerConnection, ReadyConnection(1, [stalled_since]))
        for node in (2, 3):
            client._backoff[node].next_ms = now + 10_000
        assert client.least_loaded_node(now) == 1
    finally:
        client._conns.clear()
        client.close()
