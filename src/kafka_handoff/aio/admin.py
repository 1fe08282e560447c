"""``AsyncAdminClient``: the admin client for asyncio applications.

Every operation of :class:`~kafka_handoff.admin.AdminClient` is written once as a sequence of steps
(``admin.calls``: send these calls, pause for a backoff); here the steps are driven on the event loop: the
calls go to the network thread and their futures are awaited through the bridge
(``loop.call_soon_threadsafe``), a pause is an ``asyncio.sleep``.  No thread waits; calls of several tasks
run concurrently.  Cancelling an awaited call cancels its requests (their outcome is dropped);
``close()`` awaits the end of the network thread.  This client has no helper thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from kafka_handoff.admin import (
    AbortTransactionSpec,
    AclBinding,
    AclBindingFilter,
    AdminClient,
    AlterConfigOp,
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    CreateTopicResult,
    DeletedRecords,
    ElectionType,
    FeatureMetadata,
    GroupDescription,
    GroupListing,
    LogDirDescription,
    NewTopic,
    OffsetReset,
    OffsetSpec,
    PartitionReassignment,
    ProducerState,
    RecordsToDelete,
    ResetSpec,
    TopicDescription,
    TopicListing,
    TransactionDescription,
    TransactionListing,
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
)
from kafka_handoff.admin.admin import _GRACE_MS
from kafka_handoff.admin.calls import AdminCall, Done, Pause, Steps, call_outcome, next_step, steps_of
from kafka_handoff.aio._bridge import LoopBridge
from kafka_handoff.errors import IllegalStateError, KafkaTimeoutError
from kafka_handoff.types import OffsetAndMetadata, TopicPartition

__all__ = ["AsyncAdminClient"]

T = TypeVar("T")

_WAIT_SLICE_MS = 100  # as AdminClient._wait: network-thread errors are looked at this often while waiting


class AsyncAdminClient:
    """An admin client for asyncio.  Create it inside the event loop that uses it."""

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        self._bridge = LoopBridge("AsyncAdminClient")
        self._a = AdminClient(config, **kwargs)
        self._closed = False

    def _check(self) -> AdminClient:
        self._bridge.check()
        if self._closed:
            raise IllegalStateError("this admin client has been closed")
        return self._a

    async def _drive(self, steps: Steps[T]) -> T:
        """Run an admin operation's steps on the loop (the async twin of ``AdminClient._drive``)."""
        value: Any = None
        error: BaseException | None = None
        try:
            while True:
                step = next_step(steps, value, error)
                if isinstance(step, Done):
                    return step.value
                value, error = None, None
                try:
                    if isinstance(step, Pause):
                        await asyncio.sleep(step.seconds)
                    else:
                        value = await self._run(step.calls, step.deadline_ms)
                except Exception as exc:  # a network-thread error: raised where the operation waited
                    error = exc
        finally:
            steps.close()

    async def _run(self, calls: Sequence[AdminCall], deadline_ms: int) -> list[Any]:
        """Send ``calls`` together; each one's result or exception, in order (as ``AdminClient._run``)."""
        self._a._submit_calls(calls)
        try:
            return [await self._wait(call.future, deadline_ms + _GRACE_MS, call.name) for call in calls]
        except asyncio.CancelledError:
            for call in calls:  # nobody awaits them any more: the network thread drops them
                call.future.cancel()
            raise

    async def _wait(self, future: Future[Any], deadline_ms: int, what: str) -> Any:
        """The future's result or exception; surfaces network-thread errors; cancels at the deadline."""
        a = self._a
        target = self._bridge.wrap(future)
        while True:
            a._raise_background_errors()
            remaining_ms = deadline_ms - a._clock.now_ms()
            done, _ = await asyncio.wait({target}, timeout=max(0, min(remaining_ms, _WAIT_SLICE_MS)) / 1000.0)
            if done:
                return call_outcome(target, what)
            if remaining_ms <= 0:
                future.cancel()
                return KafkaTimeoutError(f"{what} did not complete in time")

    async def describe_cluster(self, timeout: float | None = None) -> ClusterDescription:
        a = self._check()
        return await self._drive(steps_of(AdminClient.describe_cluster)(a, timeout))

    async def list_topics(
        self, include_internal: bool = False, timeout: float | None = None
    ) -> list[TopicListing]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.list_topics)(a, include_internal, timeout))

    async def describe_topics(
        self, names: Iterable[str], timeout: float | None = None
    ) -> dict[str, TopicDescription]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.describe_topics)(a, names, timeout))

    async def create_topics(
        self,
        new_topics: Iterable[NewTopic],
        *,
        validate_only: bool = False,
        if_not_exists: bool = False,
        wait: bool = True,
        timeout: float | None = None,
    ) -> dict[str, CreateTopicResult]:
        a = self._check()
        steps = steps_of(AdminClient.create_topics)(
            a,
            new_topics,
            validate_only=validate_only,
            if_not_exists=if_not_exists,
            wait=wait,
            timeout=timeout,
        )
        return await self._drive(steps)

    async def delete_topics(
        self,
        names: Iterable[str],
        *,
        if_exists: bool = False,
        wait: bool = True,
        timeout: float | None = None,
    ) -> None:
        a = self._check()
        steps = steps_of(AdminClient.delete_topics)(a, names, if_exists=if_exists, wait=wait, timeout=timeout)
        await self._drive(steps)

    async def create_partitions(
        self,
        new_counts: Mapping[str, int],
        *,
        validate_only: bool = False,
        wait: bool = True,
        timeout: float | None = None,
    ) -> None:
        a = self._check()
        steps = steps_of(AdminClient.create_partitions)(
            a, new_counts, validate_only=validate_only, wait=wait, timeout=timeout
        )
        await self._drive(steps)

    async def describe_configs(
        self, resources: Iterable[str | ConfigResource], timeout: float | None = None
    ) -> dict[str, dict[str, ConfigEntry]]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.describe_configs)(a, resources, timeout))

    async def incremental_alter_configs(
        self,
        configs: Mapping[ConfigResource, Iterable[AlterConfigOp]],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        a = self._check()
        steps = steps_of(AdminClient.incremental_alter_configs)(
            a, configs, validate_only=validate_only, timeout=timeout
        )
        await self._drive(steps)

    async def alter_configs(
        self,
        configs: Mapping[ConfigResource, Mapping[str, str]],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        a = self._check()
        steps = steps_of(AdminClient.alter_configs)(a, configs, validate_only=validate_only, timeout=timeout)
        await self._drive(steps)

    async def delete_records(
        self, records_to_delete: Mapping[TopicPartition, RecordsToDelete | int], timeout: float | None = None
    ) -> dict[TopicPartition, DeletedRecords]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.delete_records)(a, records_to_delete, timeout))

    async def create_acls(self, acls: Iterable[AclBinding], timeout: float | None = None) -> None:
        a = self._check()
        await self._drive(steps_of(AdminClient.create_acls)(a, acls, timeout))

    async def describe_acls(
        self, acl_filter: AclBindingFilter | None = None, timeout: float | None = None
    ) -> list[AclBinding]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.describe_acls)(a, acl_filter, timeout))

    async def delete_acls(
        self, filters: Iterable[AclBindingFilter], timeout: float | None = None
    ) -> list[AclBinding]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.delete_acls)(a, filters, timeout))

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, timeout: float | None = None
    ) -> dict[str, UserScramCredentialsDescription]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.describe_user_scram_credentials)(a, users, timeout))

    async def alter_user_scram_credentials(
        self,
        alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion],
        timeout: float | None = None,
    ) -> None:
        a = self._check()
        await self._drive(steps_of(AdminClient.alter_user_scram_credentials)(a, alterations, timeout))

    async def list_offsets(
        self,
        partitions: Iterable[TopicPartition],
        spec: int = OffsetSpec.LATEST,
        *,
        timeout: float | None = None,
    ) -> dict[TopicPartition, int]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.list_offsets)(a, partitions, spec, timeout=timeout))

    async def list_groups(
        self,
        timeout: float | None = None,
        *,
        types: Iterable[str] | None = None,
        states: Iterable[str] | None = None,
    ) -> list[GroupListing]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.list_groups)(a, timeout, types=types, states=states))

    async def describe_groups(
        self, group_ids: Iterable[str], timeout: float | None = None
    ) -> dict[str, GroupDescription]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.describe_groups)(a, group_ids, timeout))

    async def list_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None, timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.list_group_offsets)(a, group_id, partitions, timeout))

    async def delete_groups(self, group_ids: Iterable[str], timeout: float | None = None) -> None:
        a = self._check()
        await self._drive(steps_of(AdminClient.delete_groups)(a, group_ids, timeout))

    async def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        timeout: float | None = None,
    ) -> None:
        a = self._check()
        await self._drive(steps_of(AdminClient.alter_consumer_group_offsets)(a, group_id, offsets, timeout))

    async def delete_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> None:
        a = self._check()
        await self._drive(
            steps_of(AdminClient.delete_consumer_group_offsets)(a, group_id, partitions, timeout)
        )

    async def reset_consumer_group_offsets(
        self,
        group_id: str,
        spec: ResetSpec,
        *,
        topics: Iterable[str | TopicPartition] | None = None,
        dry_run: bool = True,
        now_ms: int | None = None,
        timeout: float | None = None,
    ) -> list[OffsetReset]:
        a = self._check()
        steps = steps_of(AdminClient.reset_consumer_group_offsets)(
            a, group_id, spec, topics=topics, dry_run=dry_run, now_ms=now_ms, timeout=timeout
        )
        return await self._drive(steps)

    async def elect_leaders(
        self,
        election_type: ElectionType,
        partitions: Iterable[TopicPartition] | None = None,
        timeout: float | None = None,
    ) -> dict[TopicPartition, BaseException | None]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.elect_leaders)(a, election_type, partitions, timeout))

    async def alter_partition_reassignments(
        self, reassignments: Mapping[TopicPartition, Sequence[int] | None], timeout: float | None = None
    ) -> None:
        a = self._check()
        await self._drive(steps_of(AdminClient.alter_partition_reassignments)(a, reassignments, timeout))

    async def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None, timeout: float | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.list_partition_reassignments)(a, partitions, timeout))

    async def describe_log_dirs(
        self, broker_ids: Iterable[int] | None = None, timeout: float | None = None
    ) -> dict[int, dict[str, LogDirDescription]]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.describe_log_dirs)(a, broker_ids, timeout))

    async def describe_producers(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, list[ProducerState]]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.describe_producers)(a, partitions, timeout))

    async def list_transactions(
        self,
        states: Iterable[str] | None = None,
        producer_ids: Iterable[int] | None = None,
        timeout: float | None = None,
    ) -> list[TransactionListing]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.list_transactions)(a, states, producer_ids, timeout))

    async def describe_transactions(
        self, transactional_ids: Iterable[str], timeout: float | None = None
    ) -> dict[str, TransactionDescription]:
        a = self._check()
        return await self._drive(steps_of(AdminClient.describe_transactions)(a, transactional_ids, timeout))

    async def describe_features(self, timeout: float | None = None) -> FeatureMetadata:
        a = self._check()
        return await self._drive(steps_of(AdminClient.describe_features)(a, timeout))

    async def abort_transaction(self, spec: AbortTransactionSpec, timeout: float | None = None) -> None:
        a = self._check()
        await self._drive(steps_of(AdminClient.abort_transaction)(a, spec, timeout))

    async def describe_client_quotas(
        self,
        entity_filter: Mapping[str, str | None] | None = None,
        *,
        strict: bool = False,
        timeout: float | None = None,
    ) -> dict[ClientQuotaEntity, dict[str, float]]:
        a = self._check()
        steps = steps_of(AdminClient.describe_client_quotas)(a, entity_filter, strict=strict, timeout=timeout)
        return await self._drive(steps)

    async def alter_client_quotas(
        self,
        alterations: Iterable[ClientQuotaAlteration],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> None:
        a = self._check()
        steps = steps_of(AdminClient.alter_client_quotas)(
            a, alterations, validate_only=validate_only, timeout=timeout
        )
        await self._drive(steps)

    async def close(self, timeout: float | None = 30.0) -> None:
        self._bridge.check()
        if self._closed:
            return
        self._closed = True
        a = self._a
        timeout_ms = a._begin_close(timeout)
        if timeout_ms is not None:  # as AdminClient.close(), awaiting the network thread's end
            a._thread.begin_close(timeout_ms)
            await self._bridge.wait_stopped(a._thread, timeout_ms / 1000.0 + 2.0)

    async def __aenter__(self) -> AsyncAdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
