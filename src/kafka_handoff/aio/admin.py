"""``AsyncAdminClient``: the admin client for asyncio applications.

Each call of :class:`~kafka_handoff.admin.AdminClient` (a few network round trips plus metadata waits)
runs on the client's one worker thread while the event loop awaits its outcome (bridged with
``loop.call_soon_threadsafe``); calls of one client run one after the other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from kafka_handoff.admin import (
    AdminClient,
    ClusterDescription,
    ConfigEntry,
    CreateTopicResult,
    GroupDescription,
    GroupListing,
    NewTopic,
    OffsetSpec,
    TopicDescription,
    TopicListing,
)
from kafka_handoff.aio._bridge import BlockingWorker, LoopBridge
from kafka_handoff.errors import IllegalStateError
from kafka_handoff.types import OffsetAndMetadata, TopicPartition

__all__ = ["AsyncAdminClient"]

T = TypeVar("T")


class AsyncAdminClient:
    """An admin client for asyncio.  Create it inside the event loop that uses it."""

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        self._bridge = LoopBridge("AsyncAdminClient")
        self._a = AdminClient(config, **kwargs)
        self._worker = BlockingWorker(self._bridge, "kafka-handoff-aio-admin")
        self._closed = False

    async def _call(self, fn: Callable[[AdminClient], T]) -> T:
        self._bridge.check()
        if self._closed:
            raise IllegalStateError("this admin client has been closed")
        a = self._a
        return await self._worker.submit(lambda: fn(a))

    async def describe_cluster(self, timeout: float | None = None) -> ClusterDescription:
        return await self._call(lambda a: a.describe_cluster(timeout))

    async def list_topics(
        self, include_internal: bool = False, timeout: float | None = None
    ) -> list[TopicListing]:
        return await self._call(lambda a: a.list_topics(include_internal, timeout))

    async def describe_topics(
        self, names: Iterable[str], timeout: float | None = None
    ) -> dict[str, TopicDescription]:
        names_ = list(names)
        return await self._call(lambda a: a.describe_topics(names_, timeout))

    async def create_topics(
        self,
        new_topics: Iterable[NewTopic],
        *,
        validate_only: bool = False,
        if_not_exists: bool = False,
        wait: bool = True,
        timeout: float | None = None,
    ) -> dict[str, CreateTopicResult]:
        topics = list(new_topics)
        return await self._call(
            lambda a: a.create_topics(
                topics, validate_only=validate_only, if_not_exists=if_not_exists, wait=wait, timeout=timeout
            )
        )

    async def delete_topics(
        self,
        names: Iterable[str],
        *,
        if_exists: bool = False,
        wait: bool = True,
        timeout: float | None = None,
    ) -> None:
        names_ = list(names)
        await self._call(lambda a: a.delete_topics(names_, if_exists=if_exists, wait=wait, timeout=timeout))

    async def create_partitions(
        self,
        new_counts: Mapping[str, int],
        *,
        validate_only: bool = False,
        wait: bool = True,
        timeout: float | None = None,
    ) -> None:
        counts = dict(new_counts)
        await self._call(
            lambda a: a.create_partitions(counts, validate_only=validate_only, wait=wait, timeout=timeout)
        )

    async def describe_configs(
        self, topics: Iterable[str], timeout: float | None = None
    ) -> dict[str, dict[str, ConfigEntry]]:
        names = list(topics)
        return await self._call(lambda a: a.describe_configs(names, timeout))

    async def list_offsets(
        self,
        partitions: Iterable[TopicPartition],
        spec: int = OffsetSpec.LATEST,
        *,
        timeout: float | None = None,
    ) -> dict[TopicPartition, int]:
        parts = list(partitions)
        return await self._call(lambda a: a.list_offsets(parts, spec, timeout=timeout))

    async def list_groups(self, timeout: float | None = None) -> list[GroupListing]:
        return await self._call(lambda a: a.list_groups(timeout))

    async def describe_groups(
        self, group_ids: Iterable[str], timeout: float | None = None
    ) -> dict[str, GroupDescription]:
        ids = list(group_ids)
        return await self._call(lambda a: a.describe_groups(ids, timeout))

    async def list_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None, timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        parts = None if partitions is None else list(partitions)
        return await self._call(lambda a: a.list_group_offsets(group_id, parts, timeout))

    async def delete_groups(self, group_ids: Iterable[str], timeout: float | None = None) -> None:
        ids = list(group_ids)
        await self._call(lambda a: a.delete_groups(ids, timeout))

    async def close(self, timeout: float | None = 30.0) -> None:
        self._bridge.check()
        if self._closed:
            return
        self._closed = True
        a = self._a
        try:
            await asyncio.shield(self._worker.submit(lambda: a.close(timeout)))
        finally:
            self._worker.stop()

    async def __aenter__(self) -> AsyncAdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
