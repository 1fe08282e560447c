"""Rebalance listeners for the asyncio consumer: callbacks that may be ``async def``, and their view.

The synchronous consumer runs a rebalance callback inside ``poll()`` on the application thread.  The asyncio
consumer runs the same rebalance machinery on its worker thread (see ``kafka_handoff.aio._bridge``) and
sends each callback to the event loop, where a coroutine callback is awaited before the rebalance step
completes (the revoke is reported to the group only after ``on_partitions_revoked`` returned).  Callbacks
therefore always run on the loop's thread, ``def`` and ``async def`` alike.

The callback receives an :class:`AsyncRebalanceConsumer`: the restricted view of KIP-1306 whose blocking
methods (``commit_sync``, ``committed``, ``position``, offset and metadata lookups, ``group_metadata``,
``client_instance_id``) are coroutines to ``await``, and whose other methods (``seek``, ``pause``,
``assignment``, ...) are plain calls.  A ``def`` callback can use the plain methods only.  As the
synchronous view, it expires when the callback returns.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kafka_handoff.consumer.listener import RebalanceConsumer, _accepts_consumer, check_listener
from kafka_handoff.errors import IllegalStateError
from kafka_handoff.group.membership import CallbackKind
from kafka_handoff.types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    PartitionInfo,
    TopicPartition,
)

if TYPE_CHECKING:
    import asyncio

    from kafka_handoff.aio._bridge import BlockingWorker, LoopBridge
    from kafka_handoff.aio._bridge import BlockingWorker as _Worker
    from kafka_handoff.aio._bridge import LoopBridge as _Bridge

__all__ = ["AsyncRebalanceConsumer", "AsyncRebalanceListener", "AsyncRebalanceListenerBase"]

_Kind = CallbackKind  # (a private alias keeps the internal type out of the API reference)

_NAMES: dict[CallbackKind, str] = {
    CallbackKind.ASSIGN: "on_partitions_assigned",
    CallbackKind.REVOKE: "on_partitions_revoked",
    CallbackKind.LOST: "on_partitions_lost",
}


class AsyncRebalanceConsumer:
    """The restricted consumer view an asyncio rebalance callback receives (valid while it runs)."""

    __slots__ = ("_bridge", "_kind", "_view", "_worker")

    def __init__(self, view: RebalanceConsumer, kind: _Kind, bridge: _Bridge, worker: _Worker) -> None:
        self._view: RebalanceConsumer | None = view
        self._kind = kind
        self._bridge = bridge
        self._worker = worker

    def _expire(self) -> None:
        self._view = None

    def _target(self) -> RebalanceConsumer:
        view = self._view
        if view is None:
            raise IllegalStateError(
                f"this AsyncRebalanceConsumer has expired: it is valid only while the rebalance callback it "
                f"was passed to ({_NAMES[self._kind]}) runs; do not keep a reference to it"
            )
        self._bridge.check()
        return view

    def __repr__(self) -> str:
        state = "valid" if self._view is not None else "expired"
        return f"<AsyncRebalanceConsumer for {_NAMES[self._kind]} ({state})>"

    async def _blocking(self, fn: Any) -> Any:
        target = self._target()
        return await self._worker.submit(lambda: fn(target))

    # -------------------------------------------------------------- awaitable (blocking) methods
    async def commit_sync(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        timeout: float | None = None,
    ) -> None:
        await self._blocking(lambda c: c.commit_sync(offsets, timeout=timeout))

    commit = commit_sync

    def commit_async(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None
    ) -> asyncio.Future[None]:
        """Start a commit; the returned future (of this loop) completes with its outcome."""
        return self._bridge.wrap(self._target().commit_async(offsets))

    async def committed(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        parts = list(partitions)
        result: dict[TopicPartition, OffsetAndMetadata | None] = await self._blocking(
            lambda c: c.committed(parts, timeout=timeout)
        )
        return result

    async def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        result: int = await self._blocking(lambda c: c.position(partition, timeout=timeout))
        return result

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        parts = list(partitions)
        result: dict[TopicPartition, int] = await self._blocking(
            lambda c: c.beginning_offsets(parts, timeout=timeout)
        )
        return result

    async def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        parts = list(partitions)
        result: dict[TopicPartition, int] = await self._blocking(
            lambda c: c.end_offsets(parts, timeout=timeout)
        )
        return result

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        ts = dict(timestamps)
        result: dict[TopicPartition, OffsetAndTimestamp | None] = await self._blocking(
            lambda c: c.offsets_for_times(ts, timeout=timeout)
        )
        return result

    async def partitions_for(self, topic: str, timeout: float | None = None) -> list[PartitionInfo]:
        result: list[PartitionInfo] = await self._blocking(lambda c: c.partitions_for(topic, timeout=timeout))
        return result

    async def list_topics(self, timeout: float | None = None) -> dict[str, list[PartitionInfo]]:
        result: dict[str, list[PartitionInfo]] = await self._blocking(
            lambda c: c.list_topics(timeout=timeout)
        )
        return result

    async def group_metadata(self) -> ConsumerGroupMetadata:
        result: ConsumerGroupMetadata = await self._blocking(lambda c: c.group_metadata())
        return result

    async def client_instance_id(self, timeout: float = 30.0) -> uuid.UUID | None:
        result: uuid.UUID | None = await self._blocking(lambda c: c.client_instance_id(timeout))
        return result

    # -------------------------------------------------------------- plain methods
    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        self._target().seek(partition, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._target().seek_to_beginning(partitions)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._target().seek_to_end(partitions)

    def assignment(self) -> frozenset[TopicPartition]:
        return self._target().assignment()

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._target().pause(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._target().resume(partitions)

    def paused(self) -> frozenset[TopicPartition]:
        return self._target().paused()

    def current_lag(self, partition: TopicPartition) -> int | None:
        return self._target().current_lag(partition)

    def metrics(self) -> dict[str, float]:
        return self._target().metrics()


@runtime_checkable
class AsyncRebalanceListener(Protocol):
    """What ``AsyncConsumer.set_rebalance_listener`` takes: any of the three methods, each ``def`` or
    ``async def``, taking ``(partitions)`` or ``(partitions, consumer)``."""

    async def on_partitions_assigned(
        self, partitions: Collection[TopicPartition], consumer: AsyncRebalanceConsumer
    ) -> None: ...

    async def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: AsyncRebalanceConsumer
    ) -> None: ...

    async def on_partitions_lost(
        self, partitions: Collection[TopicPartition], consumer: AsyncRebalanceConsumer
    ) -> None: ...


class AsyncRebalanceListenerBase:
    """A convenience base: every callback does nothing, except ``on_partitions_lost``, which (as Java's
    default) runs ``on_partitions_revoked``."""

    async def on_partitions_assigned(
        self, partitions: Collection[TopicPartition], consumer: AsyncRebalanceConsumer
    ) -> None:
        return None

    async def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: AsyncRebalanceConsumer
    ) -> None:
        return None

    async def on_partitions_lost(
        self, partitions: Collection[TopicPartition], consumer: AsyncRebalanceConsumer
    ) -> None:
        await self.on_partitions_revoked(partitions, consumer)


async def dispatch(
    listener: object, kind: CallbackKind, partitions: frozenset[TopicPartition], view: AsyncRebalanceConsumer
) -> None:
    """Run the listener's method for ``kind`` on the loop, awaiting it if it is a coroutine function (or
    returns an awaitable).  A listener without ``on_partitions_lost`` gets ``on_partitions_revoked``."""
    method = getattr(listener, _NAMES[kind], None)
    if method is None and kind is CallbackKind.LOST:
        method = getattr(listener, _NAMES[CallbackKind.REVOKE], None)
    if method is None:
        return
    result = method(partitions, view) if _accepts_consumer(method) else method(partitions)
    if inspect.isawaitable(result):
        await result


class LoopListener:
    """The listener the asyncio consumer installs on its synchronous core: each callback (called on the
    worker thread inside the rebalance machinery) runs the user's callback on the event loop and waits."""

    def __init__(self, user: object, bridge: LoopBridge, worker: BlockingWorker) -> None:
        check_listener(user)
        self.user = user
        self._bridge = bridge
        self._worker = worker

    def _run(
        self, kind: CallbackKind, partitions: Collection[TopicPartition], view: RebalanceConsumer
    ) -> None:
        if not self._worker.on_worker:
            raise IllegalStateError(
                f"{_NAMES[kind]} was reached outside the asyncio consumer's rebalance phase (internal error)"
            )
        aview = AsyncRebalanceConsumer(view, kind, self._bridge, self._worker)
        parts = frozenset(partitions)
        try:
            self._worker.run_on_loop(lambda: dispatch(self.user, kind, parts, aview))
        finally:
            aview._expire()

    def on_partitions_assigned(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        self._run(CallbackKind.ASSIGN, partitions, consumer)

    def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        self._run(CallbackKind.REVOKE, partitions, consumer)

    def on_partitions_lost(self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer) -> None:
        self._run(CallbackKind.LOST, partitions, consumer)
