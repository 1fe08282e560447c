"""The background network thread: start, wake-up, close with pending requests, error propagation.

No broker is involved: requests go to a loopback port nobody listens on (connection refused) or to a
listening socket that never answers, so the thread's own behaviour is what is tested.
"""

from __future__ import annotations

import socket
import threading
from concurrent.futures import Future
from typing import Any

import pytest

from kafka_handoff.errors import ConnectionError_, KafkaError, KafkaTimeoutError
from kafka_handoff.network import thread as thread_module
from kafka_handoff.network.client import NetworkClient
from kafka_handoff.network.thread import BackgroundError, NetworkThread
from kafka_handoff.protocol.requests import MonotonicClock, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey

pytestmark = pytest.mark.threads  # real clients with their network threads (no broker)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _OneShot:
    """A manager that sends one request when armed."""

    def __init__(self) -> None:
        self.pending: list[UnsentRequest] = []

    def poll(self, now_ms: int) -> PollResult:
        out, self.pending = self.pending, []
        return PollResult(out, 5000)


class _Exploding:
    def __init__(self) -> None:
        self.armed = threading.Event()

    def poll(self, now_ms: int) -> PollResult:
        if self.armed.is_set():
            self.armed.clear()
            raise RuntimeError("manager bug")
        return PollResult.idle()


def _thread(port: int, managers: list[Any], request_timeout_ms: int = 30000) -> NetworkThread:
    client = NetworkClient(
        [("127.0.0.1", port)], client_id="t", request_timeout_ms=request_timeout_ms, connect_timeout_ms=2000
    )
    t = NetworkThread(client, managers, MonotonicClock())
    t.start()
    return t


def test_events_run_on_the_network_thread_and_complete_futures() -> None:
    t = _thread(_free_port(), [])
    try:
        names = t.call_sync(lambda now: threading.current_thread().name, timeout_s=5)
        assert names.startswith("kafka-handoff-network")
        assert t.call_sync(lambda now: now > 0, timeout_s=5) is True
    finally:
        t.close(1000)
    assert not t.alive


class _Sleepy:
    """A manager that asks to be polled again only in 10 minutes."""

    def poll(self, now_ms: int) -> PollResult:
        return PollResult([], 600_000)


def test_wakeup_interrupts_a_long_select(monkeypatch: pytest.MonkeyPatch) -> None:
    # With the cap lifted, the thread's select() would block for 10 minutes: an event submitted meanwhile
    # completes within the 30 s awaited only because submitting it wakes the select.
    monkeypatch.setattr(thread_module, "MAX_POLL_WAIT_MS", 600_000)
    t = _thread(_free_port(), [_Sleepy()])
    try:
        t.call_sync(lambda now: None, timeout_s=30)  # the first event: the thread is in its loop
        assert t.call_sync(lambda now: "ran", timeout_s=30) == "ran"  # submitted while it selects
    finally:
        t.close(1000)


def test_event_exception_reaches_the_caller() -> None:
    t = _thread(_free_port(), [])
    try:

        def boom(now: int) -> None:
            raise ValueError("bad input")

        with pytest.raises(ValueError, match="bad input"):
            t.call_sync(boom, timeout_s=5)
        assert t.alive  # the thread survives
    finally:
        t.close(1000)


def test_manager_error_is_delivered_on_the_background_queue() -> None:
    exploding = _Exploding()
    t = _thread(_free_port(), [exploding])
    try:
        exploding.armed.set()
        t.wakeup()
        event = t.background_events.get(timeout=5)
        assert isinstance(event, BackgroundError)
        assert isinstance(event.error, RuntimeError) and "manager bug" in str(event.error)
        assert t.alive
    finally:
        t.close(1000)


def test_connection_refused_fails_the_request() -> None:
    manager = _OneShot()
    t = _thread(_free_port(), [manager])
    failure: Future[BaseException] = Future()
    try:

        def arm(now: int) -> None:
            manager.pending.append(
                UnsentRequest(
                    api_key=ApiKey.METADATA,
                    node=-1,
                    values={"topics": None},
                    on_response=lambda r, v, n: failure.set_exception(AssertionError("unexpected response")),
                    on_failure=lambda e, n: failure.set_result(e),
                )
            )

        t.call_sync(arm, timeout_s=5)
        error = failure.result(10)
        assert isinstance(error, ConnectionError_)
    finally:
        t.close(1000)


def test_request_timeout_and_close_with_pending_requests_is_bounded() -> None:
    # A server that accepts connections but never answers (not even ApiVersions).
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    port = server.getsockname()[1]
    manager = _OneShot()
    t = _thread(port, [manager], request_timeout_ms=300)
    failures: list[BaseException] = []
    done = threading.Event()
    try:

        def failed(e: BaseException, now: int) -> None:
            failures.append(e)
            done.set()

        def arm(now: int) -> None:
            manager.pending.append(
                UnsentRequest(
                    api_key=ApiKey.METADATA,
                    node=-1,
                    values={"topics": None},
                    timeout_ms=300,
                    on_failure=failed,
                )
            )

        t.call_sync(arm, timeout_s=5)
        assert done.wait(10), "request never failed"
        assert isinstance(failures[0], (KafkaTimeoutError, ConnectionError_))

        # An event that never completes fails at its deadline (the reaper).
        fut = t.call(lambda now, f: None, deadline_ms=t.clock.now_ms() + 200, name="never")
        with pytest.raises(KafkaTimeoutError, match="never"):
            fut.result(5)

        # Close while another event is pending: it is failed, and close returns within its bound.
        pending = t.call(lambda now, f: None, deadline_ms=t.clock.now_ms() + 600_000, name="pending")
        t.close(500)
        with pytest.raises(KafkaError, match="closed"):
            pending.result(30)  # failed by the close, not left to its 10-minute deadline
        t._thread.join(30)
        assert not t.alive
    finally:
        server.close()
        t.close(0)


def test_submit_after_stop_fails_immediately() -> None:
    t = _thread(_free_port(), [])
    t.close(500)
    fut = t.call(lambda now, f: f.set_result(1))
    with pytest.raises(KafkaError):
        fut.result(1)
