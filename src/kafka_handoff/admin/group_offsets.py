"""Changing a consumer group's committed offsets: alter (Java's ``alterConsumerGroupOffsets``), delete
(``deleteConsumerGroupOffsets``) and the reset plans of Kafka's ``kafka-consumer-groups --reset-offsets``
(to earliest, latest, an offset, a time, a duration ago, shifted by N), as a dry run or executed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.admin.calls import AdminCall, GroupCoordinator, NoRetry, Steps, drives_steps, run_one
from kafka_handoff.admin.offsets import OffsetSpec
from kafka_handoff.admin.plumbing import AdminPlumbing
from kafka_handoff.errors import IllegalStateError, Needs, UnknownTopicOrPartitionError, error_for_code
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import OffsetAndMetadata, TopicPartition

__all__ = ["GroupOffsetsAdminMixin", "OffsetReset", "ResetSpec"]


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """Where :meth:`~kafka_handoff.admin.AdminClient.reset_consumer_group_offsets` moves each partition,
    as ``kafka-consumer-groups --reset-offsets`` does.  Build one with the class methods."""

    kind: str
    """``earliest``, ``latest``, ``offset``, ``timestamp``, ``duration`` or ``shift``."""
    value: int = 0
    """The offset, the timestamp (ms), the duration (ms back from now) or the shift."""

    @classmethod
    def to_earliest(cls) -> ResetSpec:
        return cls("earliest")

    @classmethod
    def to_latest(cls) -> ResetSpec:
        return cls("latest")

    @classmethod
    def to_offset(cls, offset: int) -> ResetSpec:
        return cls("offset", offset)

    @classmethod
    def to_timestamp(cls, timestamp_ms: int) -> ResetSpec:
        return cls("timestamp", timestamp_ms)

    @classmethod
    def by_duration(cls, duration_ms: int) -> ResetSpec:
        return cls("duration", duration_ms)

    @classmethod
    def shift_by(cls, shift: int) -> ResetSpec:
        return cls("shift", shift)


@dataclass(frozen=True, slots=True)
class OffsetReset:
    """One partition of a reset plan: the committed offset before (``None``: none) and the new one."""

    partition: TopicPartition
    current: int | None
    new: int


class GroupOffsetsAdminMixin(AdminPlumbing):
    """Altering and deleting group offsets: mixed into :class:`~kafka_handoff.admin.AdminClient`."""

    @drives_steps
    def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        timeout: float | None = None,
    ) -> Steps[None]:
        """Commit ``offsets`` for the group (OffsetCommit as an admin: no generation, no member).  The group
        must have no active members (the broker refuses with ``UNKNOWN_MEMBER_ID`` otherwise).  Each
        partition's error names it; the first is raised with the others attached as notes."""
        wanted = {TopicPartition(*tp): _offset(o) for tp, o in offsets.items()}
        deadline = self._deadline(timeout)
        by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = {}
        for tp, o in sorted(wanted.items()):
            if o.offset < 0:
                raise ValueError(f"offset of {tp} must not be negative, got {o.offset}")
            by_topic.setdefault(tp.topic, []).append((tp.partition, o))

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "group_id": group_id,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": p,
                                "committed_offset": o.offset,
                                "committed_leader_epoch": -1 if o.leader_epoch is None else o.leader_epoch,
                                "committed_metadata": o.metadata,
                            }
                            for p, o in parts
                        ],
                    }
                    for topic, parts in by_topic.items()
                ],
            }

        def handle(response: Any, version: int, node: int) -> list[BaseException]:
            errors: list[BaseException] = []
            for t in response.topics:
                for p in t.partitions:
                    code = int(p.error_code)
                    if code == ErrorCode.none:
                        continue
                    tp = TopicPartition(str(t.name), int(p.partition_index))
                    detail = {
                        int(ErrorCode.unknown_member_id): "the group has active members; stop them first",
                        int(ErrorCode.unknown_topic_or_partition): "no such topic or partition",
                    }.get(code, "")
                    error = error_for_code(
                        code,
                        f"cannot commit the offset of {tp} for group {group_id!r}: {detail}".rstrip(": "),
                        needs=Needs("OffsetCommit", topic=("READ", tp.topic), group=("READ", group_id)),
                    )
                    if error.retriable:
                        raise error
                    errors.append(error)
            return errors

        errors: list[BaseException] = yield from run_one(
            AdminCall(
                f"OffsetCommit(group {group_id!r})",
                ApiKey.OFFSET_COMMIT,
                GroupCoordinator(group_id),
                build,
                handle,
                deadline,
                max_version=9,
            )
        )
        self._raise_first(errors)

    @drives_steps
    def delete_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> Steps[None]:
        """Delete the group's committed offsets of ``partitions`` (OffsetDelete).  The broker refuses
        partitions of topics the group is subscribed to (``GROUP_SUBSCRIBED_TO_TOPIC``)."""
        wanted = sorted({TopicPartition(*tp) for tp in partitions})
        deadline = self._deadline(timeout)
        by_topic: dict[str, list[int]] = {}
        for tp in wanted:
            by_topic.setdefault(tp.topic, []).append(tp.partition)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "group_id": group_id,
                "topics": [
                    {"name": t, "partitions": [{"partition_index": p} for p in ps]}
                    for t, ps in by_topic.items()
                ],
            }

        def handle(response: Any, version: int, node: int) -> list[BaseException]:
            code = int(response.error_code)
            if code != ErrorCode.none:
                detail = "it does not exist" if code == ErrorCode.group_id_not_found else ""
                error = error_for_code(
                    code,
                    f"cannot delete offsets of group {group_id!r}: {detail}".rstrip(": "),
                    needs=Needs("OffsetDelete", group=("DELETE", group_id)),
                )
                raise error if error.retriable else NoRetry(error)
            errors: list[BaseException] = []
            for t in response.topics:
                for p in t.partitions:
                    pcode = int(p.error_code)
                    if pcode == ErrorCode.none:
                        continue
                    tp = TopicPartition(str(t.name), int(p.partition_index))
                    detail = {
                        int(
                            ErrorCode.group_subscribed_to_topic
                        ): "the group's members are subscribed to the topic"
                    }.get(pcode, "")
                    errors.append(
                        error_for_code(
                            pcode,
                            f"cannot delete the offset of {tp} for group {group_id!r}: {detail}".rstrip(": "),
                            needs=Needs("OffsetDelete", topic=("READ", tp.topic), group=("DELETE", group_id)),
                        )
                    )
            return errors

        errors: list[BaseException] = yield from run_one(
            AdminCall(
                f"OffsetDelete(group {group_id!r})",
                ApiKey.OFFSET_DELETE,
                GroupCoordinator(group_id),
                build,
                handle,
                deadline,
            )
        )
        self._raise_first(errors)

    @drives_steps
    def reset_consumer_group_offsets(
        self,
        group_id: str,
        spec: ResetSpec,
        *,
        topics: Iterable[str | TopicPartition] | None = None,
        dry_run: bool = True,
        now_ms: int | None = None,
        timeout: float | None = None,
    ) -> Steps[list[OffsetReset]]:
        """The reset plan of ``kafka-consumer-groups --reset-offsets``, executed unless ``dry_run``.

        ``topics``: topic names (every partition) or topic-partitions; ``None``: every partition the group
        has an offset for.  New offsets are clamped to each partition's [earliest, latest] as Kafka's tool
        does; ``to_timestamp``/``by_duration`` take the first offset at or after the time (the log end when
        there is none).  Executing needs a group without active members (``IllegalStateError`` otherwise)."""
        from kafka_handoff.admin.groups import GroupAdminMixin
        from kafka_handoff.admin.offsets import OffsetAdminMixin
        from kafka_handoff.errors import GroupIdNotFoundError

        deadline = self._deadline(timeout)
        left = self._left(deadline)
        committed: dict[
            TopicPartition, OffsetAndMetadata | None
        ] = yield from GroupAdminMixin.list_group_offsets.steps(  # type: ignore[attr-defined]
            self, group_id, None, left
        )
        partitions: set[TopicPartition] = set()
        if topics is None:
            partitions = set(committed)
        else:
            names = [t for t in topics if isinstance(t, str)]
            partitions = {TopicPartition(*t) for t in topics if not isinstance(t, str)}
            if names:
                cluster = yield from self._cluster_steps(names, deadline)
                for name in names:
                    count = cluster.partition_count(name)
                    if count is None:
                        raise UnknownTopicOrPartitionError(
                            f"cannot reset offsets of topic {name!r}: no such topic"
                        )
                    partitions.update(TopicPartition(name, p) for p in range(count))
        wanted = sorted(partitions)
        if not wanted:
            return []
        list_offsets = OffsetAdminMixin.list_offsets.steps  # type: ignore[attr-defined]
        earliest: dict[TopicPartition, int] = yield from list_offsets(
            self, wanted, OffsetSpec.EARLIEST, timeout=self._left(deadline)
        )
        latest: dict[TopicPartition, int] = yield from list_offsets(
            self, wanted, OffsetSpec.LATEST, timeout=self._left(deadline)
        )
        by_time: dict[TopicPartition, int] = {}
        if spec.kind in ("timestamp", "duration"):
            at = (
                spec.value
                if spec.kind == "timestamp"
                else (now_ms if now_ms is not None else _now_ms()) - spec.value
            )
            by_time = yield from list_offsets(self, wanted, at, timeout=self._left(deadline))
        plan: list[OffsetReset] = []
        for tp in wanted:
            current_meta = committed.get(tp)
            current = None if current_meta is None else current_meta.offset
            lo, hi = earliest[tp], latest[tp]
            if spec.kind == "earliest":
                target = lo
            elif spec.kind == "latest":
                target = hi
            elif spec.kind == "offset":
                target = spec.value
            elif spec.kind in ("timestamp", "duration"):
                found = by_time.get(tp, -1)
                target = hi if found < 0 else found
            elif spec.kind == "shift":
                target = (lo if current is None else current) + spec.value
            else:
                raise ValueError(f"unknown reset kind {spec.kind!r}")
            plan.append(OffsetReset(tp, current, min(max(target, lo), hi)))
        if not dry_run:
            try:
                described = yield from GroupAdminMixin.describe_groups.steps(  # type: ignore[attr-defined]
                    self, [group_id], self._left(deadline)
                )
                members = len(described[group_id].members)
            except GroupIdNotFoundError:
                members = 0
            if members:
                raise IllegalStateError(
                    f"cannot reset the offsets of group {group_id!r}: it has {members} active member(s); "
                    "stop its consumers first"
                )
            yield from GroupOffsetsAdminMixin.alter_consumer_group_offsets.steps(  # type: ignore[attr-defined]
                self, group_id, {r.partition: OffsetAndMetadata(r.new) for r in plan}, self._left(deadline)
            )
        return plan

    def _left(self, deadline_ms: int) -> float:
        return max(0.0, (deadline_ms - self._clock.now_ms()) / 1000.0)


def _offset(value: OffsetAndMetadata | int) -> OffsetAndMetadata:
    return OffsetAndMetadata(value) if isinstance(value, int) else OffsetAndMetadata(*value)


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
