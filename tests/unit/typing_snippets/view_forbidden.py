"""mypy input for tests/unit/test_view_typing.py -- NOT valid on purpose: every ``view.<name>`` call below
must be a type error, because a RebalanceConsumer has no such operation (KIP-1306).  Each offending line
carries a ``# forbidden: <name>`` marker that the test matches against mypy's report."""

from __future__ import annotations

from collections.abc import Collection

from kafka_handoff.consumer.listener import RebalanceConsumer, RebalanceListenerBase
from kafka_handoff.types import TopicPartition


def misuse(view: RebalanceConsumer, tp: TopicPartition) -> None:
    view.poll(1.0)  # forbidden: poll
    view.close()  # forbidden: close
    view.subscribe(["topic"])  # forbidden: subscribe
    view.unsubscribe()  # forbidden: unsubscribe
    view.assign([tp])  # forbidden: assign
    view.wakeup()  # forbidden: wakeup
    view.enforce_rebalance()  # forbidden: enforce_rebalance


class PollingListener(RebalanceListenerBase):
    def on_partitions_assigned(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        consumer.poll(0.0)  # forbidden: poll
