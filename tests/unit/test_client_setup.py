"""The set-up the client facades share (kafka_handoff.client_setup)."""

from __future__ import annotations

import collections
import queue
import threading
from concurrent.futures import Future
from typing import Any

import pytest

from kafka_handoff.client_setup import client_properties, drain_background, wait_result
from kafka_handoff.errors import KafkaError, KafkaTimeoutError, WakeupError
from kafka_handoff.network.thread import BackgroundError

pytestmark = pytest.mark.unit


def test_keyword_arguments_override_the_config_under_their_dotted_names() -> None:
    props = client_properties({"linger.ms": 5, "acks": "1"}, {"linger_ms": 10, "client_id": "me"})
    assert props == {"linger.ms": 10, "acks": "1", "client.id": "me"}


def test_drain_queues_each_error_once_returns_the_first_fatal_and_queues_callback_errors() -> None:
    background: queue.SimpleQueue[Any] = queue.SimpleQueue()
    errors: collections.deque[BaseException] = collections.deque()
    first_fatal, second_fatal = KafkaError("fenced"), KafkaError("other fatal")
    seen: list[object] = []

    def on_event(event: object) -> None:
        seen.append(event)
        if event == "bad callback":
            raise ValueError("callback failed")

    background.put(BackgroundError(KafkaError("coordinator unavailable")))
    background.put(BackgroundError(KafkaError("coordinator unavailable")))  # the same again: dropped
    background.put("work")
    background.put(BackgroundError(first_fatal, fatal=True))
    background.put("bad callback")
    background.put(BackgroundError(second_fatal, fatal=True))

    assert drain_background(background, errors, on_event) is first_fatal
    assert seen == ["work", "bad callback"]
    assert [str(e) for e in errors] == ["coordinator unavailable", "fenced", "callback failed", "other fatal"]
    assert background.empty()
    assert drain_background(background, errors, on_event) is None


def test_wait_result_returns_the_result_and_runs_the_check_first() -> None:
    future: Future[int] = Future()
    future.set_result(7)
    calls: list[str] = []
    got = wait_result(
        future, 1000, "x", before_each=lambda: calls.append("check"), wakeup=None, cancel_on_timeout=True
    )
    assert got == 7
    assert calls == ["check"]


def test_wait_result_honours_a_pending_wakeup_only_when_given_the_event() -> None:
    wakeup = threading.Event()
    wakeup.set()
    future: Future[int] = Future()
    future.set_result(1)
    assert wait_result(future, 1000, "x", before_each=lambda: None, wakeup=None, cancel_on_timeout=True) == 1
    with pytest.raises(WakeupError, match="commit was interrupted"):
        wait_result(future, 1000, "commit", before_each=lambda: None, wakeup=wakeup, cancel_on_timeout=True)
    assert not wakeup.is_set()


@pytest.mark.parametrize("cancel", [True, False])
def test_wait_result_times_out_and_cancels_only_when_asked(cancel: bool) -> None:
    future: Future[int] = Future()
    with pytest.raises(KafkaTimeoutError, match="lookup did not complete within 0 ms"):
        wait_result(future, 0, "lookup", before_each=lambda: None, wakeup=None, cancel_on_timeout=cancel)
    assert future.cancelled() is cancel


def test_wait_result_surfaces_what_the_check_raises() -> None:
    future: Future[int] = Future()

    def check() -> None:
        raise KafkaError("background failure")

    with pytest.raises(KafkaError, match="background failure"):
        wait_result(future, 1000, "x", before_each=check, wakeup=None, cancel_on_timeout=True)
