"""mypy input for tests/unit/test_view_typing.py: every RebalanceConsumer operation, used as documented,
must type-check under ``mypy --strict``; the real ``Consumer`` must be usable where a ``RebalanceConsumer``
is expected (its signatures match the view's), and both listener styles must be accepted."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from concurrent.futures import Future

from kafka_handoff.consumer.consumer import Consumer
from kafka_handoff.consumer.listener import (
    AnyRebalanceListener,
    ConsumerRebalanceListener,
    RebalanceConsumer,
    RebalanceListener,
    RebalanceListenerBase,
    RebalanceListenerHolder,
)
from kafka_handoff.group.membership import CallbackKind
from kafka_handoff.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition


class Committing(RebalanceListenerBase):
    def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        consumer.commit_sync()
        consumer.commit_sync({tp: OffsetAndMetadata(1) for tp in partitions}, timeout=5.0)
        fut: Future[None] = consumer.commit_async({tp: 1 for tp in partitions}, callback=lambda o, e: None)
        fut.cancel()
        committed: dict[TopicPartition, OffsetAndMetadata | None] = consumer.committed(
            partitions, timeout=1.0
        )
        assert committed is not None

    def on_partitions_assigned(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        for tp in partitions:
            position: int = consumer.position(tp, timeout=1.0)
            consumer.seek(tp, position)
            consumer.seek(tp, OffsetAndMetadata(position))
            lag: int | None = consumer.current_lag(tp)
            assert lag is None or lag >= 0
        consumer.seek_to_beginning(partitions)
        consumer.seek_to_end()
        owned: frozenset[TopicPartition] = consumer.assignment()
        consumer.pause(owned)
        consumer.resume(consumer.paused())
        begin: dict[TopicPartition, int] = consumer.beginning_offsets(partitions)
        end: dict[TopicPartition, int] = consumer.end_offsets(partitions, timeout=2.0)
        assert begin.keys() == end.keys()
        consumer.offsets_for_times({tp: 0 for tp in partitions})
        consumer.partitions_for("topic")
        consumer.list_topics(timeout=1.0)
        meta: ConsumerGroupMetadata = consumer.group_metadata()
        metrics: dict[str, float] = consumer.metrics()
        assert meta.group_id or metrics
        instance: uuid.UUID | None = consumer.client_instance_id(timeout=1.0)
        assert instance is None or instance.version == 4


class Legacy(ConsumerRebalanceListener):
    def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer | None = None
    ) -> None:
        if consumer is not None:
            consumer.commit_sync()


def wire(consumer: Consumer, holder: RebalanceListenerHolder) -> RebalanceConsumer:
    structural: RebalanceListener = Committing()
    for listener in (structural, Legacy(), None):
        holder.set_rebalance_listener(listener)
    either: AnyRebalanceListener = Legacy()
    holder.set_from_subscribe(either)
    assert CallbackKind.REVOKE
    view: RebalanceConsumer = consumer  # the real Consumer satisfies the view's protocol
    return view
