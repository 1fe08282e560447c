"""A slow DNS lookup does not stall the network thread (issue 34, low finding): a broker whose name takes
long to resolve waits for its lookup on a resolver thread while the connections to other brokers carry on;
a name that does not resolve fails that broker's requests."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest
from hostile_peer import PeerConnection, ScriptedPeer, now_ms, poll_until

from kafka_handoff.errors import ConnectionError_
from kafka_handoff.network.client import NetworkClient
from kafka_handoff.protocol.requests import UnsentRequest
from kafka_handoff.types import BrokerNode

pytestmark = pytest.mark.threads

LIST_GROUPS = 16
SLOW = "slow-to-resolve.invalid"
MISSING = "does-not-resolve.invalid"


def _broker(peer: PeerConnection) -> None:
    peer.answer_api_versions()
    while True:
        key, version, cid = peer.request()
        peer.answer(key, version, cid, {"error_code": 0, "groups": [], "throttle_time": 0})


def test_a_slow_lookup_does_not_hold_up_other_brokers(monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.getaddrinfo
    release = threading.Event()
    looking_up = threading.Event()

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == SLOW:
            looking_up.set()
            release.wait(20)  # a resolver that takes its time
            return real("127.0.0.1", port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    with ScriptedPeer(_broker) as peer:
        client = NetworkClient([("127.0.0.1", peer.port)], client_id="t")
        client.update_brokers([BrokerNode(1, SLOW, peer.port), BrokerNode(2, "127.0.0.1", peer.port)])
        try:
            slow: list[Any] = []
            fast: list[Any] = []
            client.send(
                UnsentRequest(
                    api_key=LIST_GROUPS, node=1, values={}, on_response=lambda r, v, t: slow.append(r)
                ),
                now_ms(),
            )
            client.send(
                UnsentRequest(
                    api_key=LIST_GROUPS, node=2, values={}, on_response=lambda r, v, t: fast.append(r)
                ),
                now_ms(),
            )
            poll_until(client, lambda: fast)
            assert looking_up.is_set() and not release.is_set()  # answered while the lookup still ran
            assert not slow
            release.set()
            poll_until(client, lambda: slow)
        finally:
            release.set()
            client.close()


def test_a_name_that_does_not_resolve_fails_that_brokers_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == MISSING:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    client = NetworkClient([(MISSING, 9092)], client_id="t", request_timeout_ms=60_000)
    try:
        failed: list[BaseException] = []
        client.send(
            UnsentRequest(
                api_key=LIST_GROUPS, node=-1000, values={}, on_failure=lambda e, t: failed.append(e)
            ),
            now_ms(),
        )
        poll_until(client, lambda: failed)
        assert isinstance(failed[0], ConnectionError_)
        assert f"cannot resolve {MISSING}:9092" in str(failed[0])
    finally:
        client.close()
