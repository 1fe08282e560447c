"""Share group administration (KIP-932) and group configs, mixed into :class:`AdminClient`.

* :meth:`list_share_groups` -- ListGroups (v5+, ``TypesFilter=["share"]``) to every broker;
* :meth:`describe_share_groups` -- ShareGroupDescribe to each group's coordinator;
* :meth:`list_share_group_offsets` -- DescribeShareGroupOffsets: each partition's share-partition start
  offset (records below it are all acknowledged) and lag;
* :meth:`alter_share_group_offsets` -- AlterShareGroupOffsets: move start offsets (the group must be empty);
* :meth:`delete_share_group_offsets` -- DeleteShareGroupOffsets (the group must be empty);
* :meth:`delete_share_groups` -- DeleteGroups (the group must be empty);
* :meth:`alter_group_configs` -- IncrementalAlterConfigs on the GROUP resource, e.g.
  ``share.auto.offset.reset``, ``share.record.lock.duration.ms``, ``share.delivery.count.limit``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafka_handoff.admin.calls import AdminCall, GroupCoordinator, NoRetry
from kafka_handoff.admin.plumbing import AdminPlumbing, group_describe_call, merge_group_listings
from kafka_handoff.admin.results import GroupListing
from kafka_handoff.errors import GroupIdNotFoundError, error_for_code
from kafka_handoff.protocol.requests import ANY_NODE
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import TopicPartition

__all__ = [
    "ShareAdminMixin",
    "ShareGroupDescription",
    "ShareMemberDescription",
    "SharePartitionOffset",
]

GROUP_RESOURCE = 32
"""ConfigResource.Type.GROUP."""
_SET, _DELETE = 0, 1


@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    member_epoch: int
    subscribed_topics: tuple[str, ...]
    assignment: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    group_id: str
    state: str
    """``Empty``, ``Stable`` or ``Dead``."""
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareMemberDescription, ...]
    coordinator: int | None = None


@dataclass(frozen=True, slots=True)
class SharePartitionOffset:
    start_offset: int
    """The share-partition start offset: every record below it is acknowledged (or archived); -1 when the
    group has not initialized the partition."""
    leader_epoch: int | None
    lag: int | None
    """Records at or past the start offset not acknowledged yet (``None`` when the broker did not say)."""


class ShareAdminMixin(AdminPlumbing):
    """Share group methods of :class:`~kafka_handoff.admin.AdminClient` (uses its call plumbing)."""

    if TYPE_CHECKING:

        def delete_groups(self, group_ids: Iterable[str], timeout: float | None = None) -> None: ...

    def list_share_groups(self, timeout: float | None = None) -> list[GroupListing]:
        """Every share group the brokers coordinate, sorted by group id."""
        deadline = self._deadline(timeout)
        cluster = self._cluster([], deadline)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"states_filter": [], "types_filter": ["share"]}

        def handle(response: Any, version: int, node: int) -> list[GroupListing]:
            code = int(response.error_code)
            if code != ErrorCode.none:
                error = error_for_code(code, f"listing the share groups of broker {node}")
                raise error if error.retriable else NoRetry(error)
            return [
                GroupListing(str(g.group_id), str(g.protocol_type), str(g.group_state), str(g.group_type))
                for g in response.groups
                if str(g.group_type) == "share"
            ]

        calls = [
            AdminCall(
                f"ListGroups(share, broker {b})",
                ApiKey.LIST_GROUPS,
                b,
                build,
                handle,
                deadline,
                min_version=5,
            )
            for b in sorted(cluster.brokers)
        ]
        return merge_group_listings(self._run(calls, deadline))

    def describe_share_groups(
        self, group_ids: Iterable[str], timeout: float | None = None
    ) -> dict[str, ShareGroupDescription]:
        """Members and assignments of share groups.  A group that does not exist (or is not a share group)
        raises :class:`~kafka_handoff.errors.GroupIdNotFoundError`."""
        groups = sorted(set(group_ids))
        deadline = self._deadline(timeout)

        def make(group_id: str) -> AdminCall:
            def describe(g: Any, node: int) -> ShareGroupDescription:
                members = tuple(
                    ShareMemberDescription(
                        member_id=str(m.member_id),
                        client_id=str(m.client_id),
                        client_host=str(m.client_host),
                        rack_id=m.rack_id,
                        member_epoch=int(m.member_epoch),
                        subscribed_topics=tuple(str(t) for t in m.subscribed_topic_names),
                        assignment=frozenset(
                            TopicPartition(str(t.topic_name), int(p))
                            for t in m.assignment.topic_partitions
                            for p in t.partitions
                        ),
                    )
                    for m in g.members
                )
                return ShareGroupDescription(
                    group_id=group_id,
                    state=str(g.group_state),
                    group_epoch=int(g.group_epoch),
                    assignment_epoch=int(g.assignment_epoch),
                    assignor=str(g.assignor_name),
                    members=members,
                    coordinator=node,
                )

            def not_found() -> ShareGroupDescription:
                raise NoRetry(GroupIdNotFoundError(f"share group {group_id!r} does not exist"))

            return group_describe_call(
                "ShareGroupDescribe",
                ApiKey.SHARE_GROUP_DESCRIBE,
                group_id,
                deadline,
                what="share group",
                describe=describe,
                not_found=not_found,
            )

        outcomes = self._run([make(g) for g in groups], deadline)
        self._raise_first([o for o in outcomes if isinstance(o, BaseException)])
        return dict(zip(groups, outcomes, strict=True))

    def list_share_group_offsets(
        self, group_id: str, topics: Iterable[str] | None = None, timeout: float | None = None
    ) -> dict[TopicPartition, SharePartitionOffset]:
        """The share group's start offset and lag per partition (of ``topics``, or all it consumed)."""
        deadline = self._deadline(timeout)
        wanted: list[dict[str, Any]] | None = None
        if topics is not None:
            cluster = self._cluster(sorted(set(topics)), deadline)
            wanted = [
                {"topic_name": t, "partitions": [p.partition for p in cluster.partitions.get(t, ())]}
                for t in sorted(set(topics))
            ]

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"groups": [{"group_id": group_id, "topics": wanted}]}

        def handle(response: Any, version: int, node: int) -> dict[TopicPartition, SharePartitionOffset]:
            (g,) = [x for x in response.groups if x.group_id == group_id] or list(response.groups)
            code = int(g.error_code)
            if code != ErrorCode.none:
                error = error_for_code(code, f"cannot describe the offsets of share group {group_id!r}")
                if code == ErrorCode.group_id_not_found:
                    error = GroupIdNotFoundError(f"share group {group_id!r} does not exist")
                raise error if error.retriable else NoRetry(error)
            out: dict[TopicPartition, SharePartitionOffset] = {}
            for t in g.topics:
                for p in t.partitions:
                    pcode = int(p.error_code)
                    tp = TopicPartition(str(t.topic_name), int(p.partition_index))
                    if pcode != ErrorCode.none:
                        error = error_for_code(
                            pcode, f"cannot describe the share offset of {tp} in {group_id!r}"
                        )
                        raise error if error.retriable else NoRetry(error)
                    epoch = int(p.leader_epoch)
                    lag = int(getattr(p, "lag", -1))
                    out[tp] = SharePartitionOffset(
                        int(p.start_offset), epoch if epoch >= 0 else None, lag if lag >= 0 else None
                    )
            return dict(sorted(out.items()))

        result: dict[TopicPartition, SharePartitionOffset] = self._run_one(
            AdminCall(
                f"DescribeShareGroupOffsets(group {group_id!r})",
                ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
                GroupCoordinator(group_id),
                build,
                handle,
                deadline,
            )
        )
        return result

    def alter_share_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int], timeout: float | None = None
    ) -> None:
        """Set the share-partition start offsets of an empty share group (records below are skipped);
        e.g. ``list_offsets`` results to move it to the earliest or latest offset."""
        if not offsets:
            return
        deadline = self._deadline(timeout)
        by_topic: dict[str, list[dict[str, int]]] = {}
        for tp, offset in sorted(offsets.items()):
            if offset < 0:
                raise ValueError(f"offset for {tp}: {offset} is negative (allowed: 0 or more)")
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "start_offset": offset}
            )

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            topics = [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]
            return {"group_id": group_id, "topics": topics}

        def handle(response: Any, version: int, node: int) -> None:
            code = int(response.error_code)
            if code != ErrorCode.none:
                error = error_for_code(
                    code,
                    f"cannot alter the offsets of share group {group_id!r}: {response.error_message or ''}",
                )
                raise error if error.retriable else NoRetry(error)
            for t in response.responses:
                for p in t.partitions:
                    if int(p.error_code) != ErrorCode.none:
                        tp = TopicPartition(str(t.topic_name), int(p.partition_index))
                        raise NoRetry(
                            error_for_code(
                                int(p.error_code),
                                f"cannot alter the offset of {tp} in share group {group_id!r}: "
                                f"{p.error_message or ''}",
                            )
                        )

        self._run_one(
            AdminCall(
                f"AlterShareGroupOffsets(group {group_id!r})",
                ApiKey.ALTER_SHARE_GROUP_OFFSETS,
                GroupCoordinator(group_id),
                build,
                handle,
                deadline,
            )
        )

    def delete_share_group_offsets(
        self, group_id: str, topics: Iterable[str], timeout: float | None = None
    ) -> None:
        """Forget the share group's state of ``topics`` (the group must have no members)."""
        names = sorted(set(topics))
        deadline = self._deadline(timeout)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"group_id": group_id, "topics": [{"topic_name": t} for t in names]}

        def handle(response: Any, version: int, node: int) -> None:
            code = int(response.error_code)
            if code != ErrorCode.none:
                error = error_for_code(
                    code,
                    f"cannot delete the offsets of share group {group_id!r}: {response.error_message or ''}",
                )
                raise error if error.retriable else NoRetry(error)
            errors = [
                error_for_code(
                    int(t.error_code), f"cannot delete the offsets of {t.topic_name} in {group_id!r}"
                )
                for t in response.responses
                if int(t.error_code) != ErrorCode.none
            ]
            if errors:
                raise NoRetry(errors[0])

        self._run_one(
            AdminCall(
                f"DeleteShareGroupOffsets(group {group_id!r})",
                ApiKey.DELETE_SHARE_GROUP_OFFSETS,
                GroupCoordinator(group_id),
                build,
                handle,
                deadline,
            )
        )

    def delete_share_groups(self, group_ids: Iterable[str], timeout: float | None = None) -> None:
        """Delete share groups (they must have no members)."""
        self.delete_groups(group_ids, timeout)

    def alter_group_configs(
        self, group_id: str, configs: Mapping[str, str | int | None], timeout: float | None = None
    ) -> None:
        """Set (or, with ``None``, delete) dynamic group configs, e.g. ``share.auto.offset.reset=earliest``,
        ``share.record.lock.duration.ms``, ``share.delivery.count.limit`` (IncrementalAlterConfigs)."""
        if not configs:
            return
        deadline = self._deadline(timeout)
        entries = [
            {
                "name": k,
                "config_operation": _DELETE if v is None else _SET,
                "value": None if v is None else str(v),
            }
            for k, v in sorted(configs.items())
        ]

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            resource = {"resource_type": GROUP_RESOURCE, "resource_name": group_id, "configs": entries}
            return {"resources": [resource], "validate_only": False}

        def handle(response: Any, version: int, node: int) -> None:
            for r in response.responses:
                code = int(r.error_code)
                if code != ErrorCode.none:
                    error = error_for_code(
                        code,
                        f"cannot alter the configs of group {group_id!r}: {r.error_message or ''}".strip(),
                    )
                    raise error if error.retriable else NoRetry(error)

        self._run_one(
            AdminCall(
                f"IncrementalAlterConfigs(group {group_id!r})",
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                ANY_NODE,
                build,
                handle,
                deadline,
            )
        )
