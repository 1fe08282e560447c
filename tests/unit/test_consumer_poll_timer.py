"""The Consumer facade and the poll timer (max.poll.interval.ms), no broker.

A real :class:`Consumer` (bootstrap on port 1: connections fail harmlessly) with a fake membership that
records what the facade tells it: a blocking call such as ``commit_sync`` is bracketed by
``on_app_call(True/False)`` (the timer stands still meanwhile), and a long ``poll(timeout)`` keeps resetting
the timer while it waits for records, as Java's consumer sends a PollEvent per iteration.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from kafka_handoff.consumer.consumer import Consumer
from kafka_handoff.errors import KafkaTimeoutError
from kafka_handoff.group.membership import GroupEvent, Subscription
from kafka_handoff.protocol.requests import PollResult
from kafka_handoff.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.threads  # real clients with their network threads (no broker)

T0 = TopicPartition("t", 0)


class FakeMembership:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: list[str] = []
        self.owned = frozenset({T0})
        self.left = True

    def _note(self, what: str) -> None:
        with self._lock:
            self.calls.append(what)

    def journal(self) -> list[str]:
        with self._lock:
            return list(self.calls)

    def poll(self, now_ms: int) -> PollResult:
        return PollResult.idle()

    def drain_events(self) -> list[GroupEvent]:
        return []

    def on_app_poll(self, now_ms: int) -> None:
        self._note("app_poll")

    def on_app_call(self, inside: bool, now_ms: int) -> None:
        self._note("enter" if inside else "exit")

    def on_callback_completed(self, seq: int, error: BaseException | None, now_ms: int) -> None:
        pass

    def leave(self, now_ms: int) -> None:
        pass

    def group_metadata(self) -> ConsumerGroupMetadata:
        return ConsumerGroupMetadata("g", 1, "member-1", None)

    def on_coordinator(self, node_id: int | None, now_ms: int, epoch: int | None = None) -> None:
        pass

    def on_metadata(self, metadata: Any, now_ms: int) -> None:
        pass

    # --- the rest of the Membership interface (not exercised by these tests)
    def subscribe(self, subscription: Subscription, now_ms: int) -> None:
        pass

    def unsubscribe(self, now_ms: int) -> None:
        pass

    def enforce_rebalance(self, reason: str, now_ms: int) -> None:
        pass

    @property
    def state_name(self) -> str:
        return "FAKE"

    def owns(self, partitions: Iterable[TopicPartition]) -> bool:
        return all(tp in self.owned for tp in partitions)

    def generation_if_stable(self) -> ConsumerGroupMetadata | None:
        return self.group_metadata()

    def on_commit_error(self, error_code: int, sent: ConsumerGroupMetadata, now_ms: int) -> None:
        pass


@pytest.fixture
def consumer_and_fake() -> Iterator[tuple[Consumer, FakeMembership]]:
    consumer = Consumer(
        {
            "bootstrap.servers": "127.0.0.1:1",
            "group.id": "g",
            "enable.auto.commit": False,
            "max.poll.interval.ms": 2000,
        }
    )
    fake = FakeMembership()
    consumer.membership = fake

    def own(now: int) -> None:
        subs = consumer._subs
        subs.subscribe(Subscription(topics=frozenset({"t"})))
        subs.set_group_assignment(frozenset({T0}), ())
        subs.seek(T0, 0)

    consumer._thread.call_sync(own, 5.0)
    try:
        yield consumer, fake
    finally:
        consumer.close(0.5)


def _sync(consumer: Consumer) -> None:
    consumer._thread.call_sync(lambda now: None, 5.0)


def test_commit_sync_is_bracketed_so_the_poll_timer_stands_still(
    consumer_and_fake: tuple[Consumer, FakeMembership],
) -> None:
    consumer, fake = consumer_and_fake
    with pytest.raises(KafkaTimeoutError):  # no broker: the commit cannot complete
        consumer.commit_sync({T0: OffsetAndMetadata(5)}, timeout=0.3)
    _sync(consumer)
    assert fake.journal() == ["enter", "exit"]


def test_committed_is_bracketed_too(consumer_and_fake: tuple[Consumer, FakeMembership]) -> None:
    consumer, fake = consumer_and_fake
    with pytest.raises(KafkaTimeoutError):
        consumer.committed([T0], timeout=0.3)
    _sync(consumer)
    assert fake.journal() == ["enter", "exit"]


def test_a_long_poll_keeps_resetting_the_poll_timer(
    consumer_and_fake: tuple[Consumer, FakeMembership],
) -> None:
    consumer, fake = consumer_and_fake
    consumer.poll(1.6)  # max.poll.interval.ms=2000: refreshed every 0.5 s while waiting
    _sync(consumer)
    assert fake.journal().count("app_poll") >= 3


def test_position_waiting_for_an_unknown_position_is_bracketed(
    consumer_and_fake: tuple[Consumer, FakeMembership],
) -> None:
    consumer, fake = consumer_and_fake
    t1 = TopicPartition("t", 1)

    def own_more(now: int) -> None:
        consumer._subs.set_group_assignment(frozenset({T0, t1}), ())

    consumer._thread.call_sync(own_more, 5.0)
    assert consumer.position(T0) == 0  # known at once: no bracket
    _sync(consumer)
    assert fake.journal() == []
    with pytest.raises(KafkaTimeoutError):  # no broker: the committed offset of t-1 cannot be fetched
        consumer.position(t1, timeout=0.3)
    _sync(consumer)
    assert fake.journal() == ["enter", "exit"]
