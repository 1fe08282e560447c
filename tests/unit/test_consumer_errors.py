"""Errors never vanish (issue 14 item 7): every error the application must know reaches it once, in order
-- background errors, rebalance-callback errors, and those of unsubscribe()/close() (raised by those calls
after they completed, as Java does)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import Future

import pytest
from semantics_harness import ConfiguredHarness
from test_consumer_dispatch import REVOKE, T0, T1

from kafka_handoff.consumer.consumer import Consumer
from kafka_handoff.errors import KafkaError
from kafka_handoff.group.membership import CallbackNeeded
from kafka_handoff.network.thread import BackgroundError
from kafka_handoff.types import OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.threads  # real clients with their network threads (no broker)


@pytest.fixture
def h() -> Iterator[ConfiguredHarness]:
    harness = ConfiguredHarness()
    try:
        yield harness
    finally:
        harness.shutdown()


@pytest.fixture
def ha() -> Iterator[ConfiguredHarness]:
    harness = ConfiguredHarness({"enable.auto.commit": True})
    try:
        yield harness
    finally:
        harness.shutdown()


def post(h: ConfiguredHarness, *errors: BaseException) -> None:
    """The network thread posts ``errors`` (as it does for membership and offset errors)."""

    def run(now: int) -> None:
        for error in errors:
            h.consumer._background.put(BackgroundError(error))

    h.consumer._thread.call_sync(run, 5.0)


def test_every_background_error_of_a_batch_is_raised_once_in_order(h: ConfiguredHarness) -> None:
    h.own(T0)
    first, second = KafkaError("first"), KafkaError("second")
    post(h, first, second)
    with pytest.raises(KafkaError) as info:
        h.consumer.poll(0)
    assert info.value is first
    with pytest.raises(KafkaError) as info:
        h.consumer.poll(0)
    assert info.value is second
    h.consumer.poll(0)  # nothing left


def test_a_repeated_background_error_is_queued_once_until_the_application_saw_it(
    h: ConfiguredHarness,
) -> None:
    h.own(T0)
    post(h, KafkaError("topic authorization failed"), KafkaError("topic authorization failed"))
    with pytest.raises(KafkaError, match="authorization"):
        h.consumer.poll(0)
    h.consumer.poll(0)  # the repetition was not queued
    post(h, KafkaError("topic authorization failed"))  # seen already: a new occurrence is raised again
    with pytest.raises(KafkaError, match="authorization"):
        h.consumer.poll(0)


def test_errors_pending_for_a_blocking_call_are_raised_once_each(h: ConfiguredHarness) -> None:
    h.own(T0)
    first, second = KafkaError("first"), KafkaError("second")
    post(h, first, second)
    with pytest.raises(KafkaError) as info:
        h.consumer.group_metadata()
    assert info.value is first
    with pytest.raises(KafkaError) as info:
        h.consumer.poll(0)
    assert info.value is second
    assert h.consumer.group_metadata().member_id == "member-1"


def test_an_unrelated_background_error_during_the_pre_revoke_auto_commit_reaches_the_application(
    ha: ConfiguredHarness,
) -> None:
    ha.own(T0, T1)
    unrelated = KafkaError("unrelated: e.g. a topic authorization failure")
    commits = ha.consumer._commits
    assert commits is not None
    sent: list[dict[TopicPartition, OffsetAndMetadata]] = []

    def commit(
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        future: Future[None],
        deadline_ms: int,
        *,
        retry: bool = True,
        now_ms: int = 0,
        only_owned: bool = False,
    ) -> None:
        # Network thread: while the commit is under way, an unrelated error is posted; the commit succeeds
        # a little later (its response arrives after the error).
        sent.append(dict(offsets))
        ha.consumer._background.put(BackgroundError(unrelated))
        threading.Timer(0.3, future.set_result, (None,)).start()

    commits.commit = commit  # type: ignore[method-assign]
    ha.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    ha.consumer.poll(0)  # requested
    with pytest.raises(KafkaError) as info:
        ha.consumer.poll(0)  # completes: auto-commit, callback, completion -- then the error is raised
    assert info.value is unrelated
    assert sent == [{T0: OffsetAndMetadata(0)}]
    assert ha.calls() == [("revoked", frozenset({T0}))]
    assert ha.completed() == [(1, None)]
    ha.consumer.poll(0)  # raised once only


def test_a_callback_error_is_not_dropped_when_a_background_error_comes_first(h: ConfiguredHarness) -> None:
    h.own(T0, T1)
    background = KafkaError("background")
    callback = RuntimeError("revoke callback failed")
    h.listener.raise_on["revoked"] = callback
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    h.consumer.poll(0)  # requested
    post(h, background)
    raised: list[BaseException] = []
    for _ in range(3):
        try:
            h.consumer.poll(0)
        except BaseException as exc:
            raised.append(exc)
    assert raised == [background, callback]  # each once, in the order they happened
    assert h.completed() == [(1, callback)]


def test_unsubscribe_raises_a_callback_error_after_it_completed(h: ConfiguredHarness) -> None:
    h.own(T0)
    boom = RuntimeError("revoke callback failed while leaving")
    h.listener.raise_on["revoked"] = boom
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    h.consumer.poll(0)
    with pytest.raises(RuntimeError) as info:
        h.consumer.unsubscribe()
    assert info.value is boom
    assert h.fake.leaves == 1  # the unsubscribe completed before raising
    assert h.consumer.subscription() == frozenset()
    assert h.consumer.assignment() == frozenset()
    assert h.completed() == [(1, boom)]
    h.own(T0)  # subscribed again (the fake membership assigns at once): usable, the error is not raised again
    h.consumer.poll(0)


def test_a_pending_background_error_does_not_abort_unsubscribe(h: ConfiguredHarness) -> None:
    h.own(T0)
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    h.consumer.poll(0)
    pending = KafkaError("pending")
    post(h, pending)
    h.consumer.unsubscribe()  # leaves completely (revoke completed, leave sent, assignment dropped)
    assert h.calls() == [("revoked", frozenset({T0}))]
    assert h.fake.leaves == 1
    assert h.consumer.assignment() == frozenset()
    with pytest.raises(KafkaError) as info:  # ... and the error is still delivered, by the next call
        h.consumer.group_metadata()
    assert info.value is pending


def test_close_raises_a_callback_error_after_it_completed(h: ConfiguredHarness) -> None:
    h.own(T0)
    boom = RuntimeError("revoke callback failed while closing")
    h.listener.raise_on["revoked"] = boom
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    h.consumer.poll(0)
    with pytest.raises(RuntimeError) as info:
        h.consumer.close(0.5)
    assert info.value is boom
    assert h.fake.leaves == 1
    assert not h.consumer._thread.alive  # closed completely before raising
    h.consumer.close(0.5)  # closing again is a no-op


def test_close_in_a_with_block_does_not_replace_the_block_s_exception(h: ConfiguredHarness) -> None:
    h.own(T0)
    h.listener.raise_on["revoked"] = RuntimeError("callback")
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    h.consumer.poll(0)
    consumer: Consumer = h.consumer
    with pytest.raises(ValueError, match="the application's own"), consumer:
        raise ValueError("the application's own")
    assert not consumer._thread.alive
