"""A configurable variant of test_consumer_dispatch's harness (a real Consumer, a fake membership) for the
issue-14 consumer-semantics tests."""

from __future__ import annotations

from typing import Any

from test_collector import batch
from test_consumer_dispatch import Harness

from kafka_handoff.consumer.consumer import Consumer
from kafka_handoff.consumer.fetcher import CompletedFetch
from kafka_handoff.types import TopicPartition


class ConfiguredHarness(Harness):
    """``Harness`` with extra consumer configuration, and optionally without a rebalance listener."""

    def __init__(self, config: dict[str, Any] | None = None, *, listener: bool = True) -> None:
        super().__init__()
        self.consumer.close(0.5)  # the base harness's consumer (auto-commit off) is replaced
        base = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "enable.auto.commit": False}
        self.consumer = Consumer({**base, **(config or {})})
        self.fake.wake = self.consumer._thread.wakeup
        self.consumer.membership = self.fake
        if listener:
            self.consumer.set_rebalance_listener(self.listener)

    def fetched(self, tp: TopicPartition, first: int, count: int) -> None:
        """Records ``first``..``first+count-1`` of ``tp`` arrive in the fetch buffer."""
        epoch = self.consumer._subs.state(tp).position_epoch
        self.consumer._buffer.add([CompletedFetch(tp, first, epoch, batch(first, count))])

    def shutdown(self) -> None:
        self.fake.left = True
        try:
            self.consumer.close(0.5)
        except Exception:  # a test's callback error, raised by close(); the test checks it itself
            pass
