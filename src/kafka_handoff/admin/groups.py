"""Consumer group administration (both protocols): list, describe, group offsets, delete."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.admin.calls import (
    AdminCall,
    GroupCoordinator,
    NoRetry,
    Steps,
    drives_steps,
    run_calls,
    run_one,
)
from kafka_handoff.admin.plumbing import (
    AdminPlumbing,
    group_describe_call,
    merge_group_listings,
    unique_names,
)
from kafka_handoff.admin.results import (
    GroupDescription,
    GroupListing,
    MemberDescription,
)
from kafka_handoff.errors import (
    GroupIdNotFoundError,
    Needs,
    UnsupportedVersionError,
    error_for_code,
)
from kafka_handoff.group.protocol_data import ConsumerProtocolError, decode_assignment, decode_subscription
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import BrokerNode, OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)


class GroupAdminMixin(AdminPlumbing):
    """Consumer group administration (both protocols): mixed into :class:`~kafka_handoff.admin.AdminClient`
    (uses its call plumbing)."""

    @drives_steps
    def list_groups(
        self,
        timeout: float | None = None,
        *,
        types: Iterable[str] | None = None,
        states: Iterable[str] | None = None,
    ) -> Steps[list[GroupListing]]:
        """Every group the brokers coordinate (ListGroups to each broker), sorted by group id; with
        ``types`` (``classic``, ``consumer``, ``share``, ``streams``) or ``states`` (``Stable``, ``Empty``,
        ...; case-insensitive) only those (Java's ``ListGroupsOptions.withTypes`` / ``inGroupStates``)."""
        type_filter = sorted({t.lower() for t in types}) if types else []
        state_filter = sorted({s.lower() for s in states}) if states else []
        deadline = self._deadline(timeout)
        cluster = yield from self._cluster_steps([], deadline)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            # Brokers without the filters (ListGroups < v4/v5) get none; filtered below as well.
            return {
                "states_filter": state_filter if version >= 4 else [],
                "types_filter": type_filter if version >= 5 else [],
            }

        def handle(response: Any, version: int, node: int) -> list[GroupListing]:
            code = int(response.error_code)
            if code != ErrorCode.none:
                error = error_for_code(code, f"listing the groups of broker {node}")
                raise error if error.retriable else NoRetry(error)
            return [
                GroupListing(
                    str(g.group_id),
                    str(g.protocol_type),
                    getattr(g, "group_state", None),
                    getattr(g, "group_type", None),
                )
                for g in response.groups
            ]

        calls = [
            AdminCall(f"ListGroups(broker {b})", ApiKey.LIST_GROUPS, b, build, handle, deadline)
            for b in sorted(cluster.brokers)
        ]
        listings = merge_group_listings((yield from run_calls(calls, deadline)))
        return [
            g
            for g in listings
            if (not type_filter or (g.type or "").lower() in type_filter)
            and (not state_filter or (g.state or "").lower() in state_filter)
        ]

    @drives_steps
    def describe_groups(
        self, group_ids: Iterable[str], timeout: float | None = None
    ) -> Steps[dict[str, GroupDescription]]:
        """Members and assignments of consumer groups of either protocol.

        Each group is asked with ConsumerGroupDescribe first (KIP-848 groups: member epochs, current and
        target assignments); groups it does not know (classic groups) are described with DescribeGroups,
        whose member assignments are decoded from the consumer protocol.  A group that does not exist raises
        :class:`~kafka_handoff.errors.GroupIdNotFoundError`."""
        groups = unique_names(group_ids, "group")
        deadline = self._deadline(timeout)
        outcomes = yield from run_calls(
            [self._consumer_group_describe_call(g, deadline) for g in groups], deadline
        )
        classic = [
            g
            for g, o in zip(groups, outcomes, strict=True)
            if o is None or isinstance(o, (UnsupportedVersionError, GroupIdNotFoundError))
        ]
        described: dict[str, Any] = dict(zip(groups, outcomes, strict=True))
        if classic:
            classic_outcomes = yield from run_calls(
                [self._describe_groups_call(g, deadline) for g in classic], deadline
            )
            described.update(zip(classic, classic_outcomes, strict=True))
        self._raise_first([o for o in described.values() if isinstance(o, BaseException)])
        # Resolve topic ids the broker did not name (consumer protocol) through the metadata.
        missing_ids = {
            tid
            for d in described.values()
            for raw in d.raw_members
            for tid, name, _ in raw
            if not name and tid is not None
        }
        names_by_id: dict[uuid.UUID, str] = {}
        if missing_ids:
            names_by_id = (yield from self._cluster_steps(None, deadline)).topic_names_by_id()
        return {g: described[g].resolve(names_by_id) for g in groups}

    def _consumer_group_describe_call(self, group_id: str, deadline: int) -> AdminCall:
        def describe(g: Any, node: int) -> _PendingDescription | None:
            members: list[tuple[Any, ...]] = []
            raw_members: list[list[tuple[uuid.UUID | None, str, tuple[int, ...]]]] = []
            for m in g.members:
                current = [_raw_tp(t) for t in m.assignment.topic_partitions]
                target = [_raw_tp(t) for t in m.target_assignment.topic_partitions]
                raw_members.append(current + target)
                members.append((m, current, target))
            return _PendingDescription(
                group_id=group_id,
                kind="consumer",
                state=str(g.group_state),
                protocol_type="consumer",
                assignor=str(g.assignor_name),
                coordinator=self._calls.coordinators.get(group_id),
                group_epoch=int(g.group_epoch),
                assignment_epoch=int(g.assignment_epoch),
                members=members,
                raw_members=raw_members,
            )

        # GROUP_ID_NOT_FOUND: not a consumer-protocol group (or none at all): try DescribeGroups.
        return group_describe_call(
            "ConsumerGroupDescribe",
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            group_id,
            deadline,
            what="group",
            describe=describe,
            not_found=lambda: None,
        )

    def _describe_groups_call(self, group_id: str, deadline: int) -> AdminCall:
        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"groups": [group_id], "include_authorized_operations": False}

        def handle(response: Any, version: int, node: int) -> _PendingDescription:
            (g,) = [x for x in response.groups if x.group_id == group_id] or list(response.groups)
            code = int(g.error_code)
            if code != ErrorCode.none:
                message = getattr(g, "error_message", None) or ""
                error = error_for_code(
                    code,
                    f"cannot describe group {group_id!r}: {message}".strip(),
                    needs=Needs("DescribeGroups", group=("DESCRIBE", group_id)),
                )
                if code == ErrorCode.group_id_not_found:
                    error = GroupIdNotFoundError(f"group {group_id!r} does not exist")
                raise error if error.retriable else NoRetry(error)
            if str(g.group_state) == "Dead":
                raise NoRetry(GroupIdNotFoundError(f"group {group_id!r} does not exist"))
            members = tuple(_classic_member(m, str(g.protocol_type)) for m in g.members)
            return _PendingDescription(
                group_id=group_id,
                kind="classic",
                state=str(g.group_state),
                protocol_type=str(g.protocol_type),
                assignor=str(g.protocol_data),
                coordinator=self._calls.coordinators.get(group_id),
                classic_members=members,
            )

        return AdminCall(
            f"DescribeGroups(group {group_id!r})",
            ApiKey.DESCRIBE_GROUPS,
            GroupCoordinator(group_id),
            build,
            handle,
            deadline,
        )

    @drives_steps
    def list_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        timeout: float | None = None,
    ) -> Steps[dict[TopicPartition, OffsetAndMetadata | None]]:
        """The group's committed offsets (OffsetFetch to its coordinator).  Without ``partitions``: every
        partition with a committed offset; with them: each one, ``None`` where nothing is committed."""
        deadline = self._deadline(timeout)
        wanted = None if partitions is None else sorted({TopicPartition(*tp) for tp in partitions})
        topics: list[dict[str, Any]] | None = None
        if wanted is not None:
            grouped: dict[str, list[int]] = {}
            for tp in wanted:
                grouped.setdefault(tp.topic, []).append(tp.partition)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in grouped.items()]

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            if version >= 8:
                group = {"group_id": group_id, "member_id": None, "member_epoch": -1, "topics": topics}
                return {"groups": [group], "require_stable": False}
            return {"group_id": group_id, "topics": topics, "require_stable": False}

        def handle(response: Any, version: int, node: int) -> dict[TopicPartition, OffsetAndMetadata | None]:
            if version >= 8:
                (group,) = [g for g in response.groups if g.group_id == group_id] or list(response.groups)
                code, entries = int(group.error_code), group.topics
            else:
                code, entries = int(getattr(response, "error_code", 0)), response.topics
            if code != ErrorCode.none:
                error = error_for_code(
                    code,
                    f"cannot fetch the offsets of group {group_id!r}",
                    needs=Needs("OffsetFetch", group=("DESCRIBE", group_id)),
                )
                raise error if error.retriable else NoRetry(error)
            out: dict[TopicPartition, OffsetAndMetadata | None] = {}
            for t in entries:
                for p in t.partitions:
                    tp = TopicPartition(str(t.name), int(p.partition_index))
                    pcode = int(p.error_code)
                    if pcode == ErrorCode.unknown_topic_or_partition:
                        out[tp] = None
                        continue
                    if pcode != ErrorCode.none:
                        error = error_for_code(
                            pcode,
                            f"cannot fetch the offset of {tp} for group {group_id!r}",
                            needs=Needs(
                                "OffsetFetch", topic=("DESCRIBE", tp.topic), group=("DESCRIBE", group_id)
                            ),
                        )
                        raise error if error.retriable else NoRetry(error)
                    offset = int(p.committed_offset)
                    if offset < 0:
                        out[tp] = None
                        continue
                    epoch = int(getattr(p, "committed_leader_epoch", -1))
                    out[tp] = OffsetAndMetadata(offset, p.metadata or "", epoch if epoch >= 0 else None)
            return out

        result: dict[TopicPartition, OffsetAndMetadata | None] = yield from run_one(
            AdminCall(
                f"OffsetFetch(group {group_id!r})",
                ApiKey.OFFSET_FETCH,
                GroupCoordinator(group_id),
                build,
                handle,
                deadline,
            )
        )
        if wanted is None:
            return {tp: o for tp, o in sorted(result.items()) if o is not None}
        return {tp: result.get(tp) for tp in wanted}

    @drives_steps
    def delete_groups(self, group_ids: Iterable[str], timeout: float | None = None) -> Steps[None]:
        """Delete groups (they must be empty: no active members)."""
        groups = unique_names(group_ids, "group")
        deadline = self._deadline(timeout)

        def make(group_id: str) -> AdminCall:
            def build(version: int, timeout_ms: int) -> dict[str, Any]:
                return {"groups_names": [group_id]}

            def handle(response: Any, version: int, node: int) -> None:
                (r,) = [x for x in response.results if x.group_id == group_id] or list(response.results)
                code = int(r.error_code)
                if code == ErrorCode.none:
                    return
                details: dict[int, str] = {
                    ErrorCode.non_empty_group: "it still has active members",
                    ErrorCode.group_id_not_found: "it does not exist",
                }
                error = error_for_code(
                    code,
                    f"cannot delete group {group_id!r}: {details.get(code, '')}".strip(),
                    needs=Needs("DeleteGroups", group=("DELETE", group_id)),
                )
                raise error if error.retriable else NoRetry(error)

            return AdminCall(
                f"DeleteGroups(group {group_id!r})",
                ApiKey.DELETE_GROUPS,
                GroupCoordinator(group_id),
                build,
                handle,
                deadline,
            )

        self._raise_first(
            [
                o
                for o in (yield from run_calls([make(g) for g in groups], deadline))
                if isinstance(o, BaseException)
            ]
        )


def _raw_tp(t: Any) -> tuple[uuid.UUID | None, str, tuple[int, ...]]:
    tid = t.topic_id
    return (
        tid if tid is not None and tid.int != 0 else None,
        str(t.topic_name or ""),
        tuple(int(p) for p in t.partitions),
    )


def _tps(
    raw: Iterable[tuple[uuid.UUID | None, str, tuple[int, ...]]], names_by_id: Mapping[uuid.UUID, str]
) -> tuple[TopicPartition, ...]:
    out: list[TopicPartition] = []
    for tid, name, parts in raw:
        topic = name or (names_by_id.get(tid) if tid is not None else None) or str(tid)
        out.extend(TopicPartition(topic, p) for p in parts)
    return tuple(sorted(out))


def _classic_member(m: Any, protocol_type: str) -> MemberDescription:
    assignment: tuple[TopicPartition, ...] = ()
    topics: tuple[str, ...] = ()
    if protocol_type == "consumer":
        try:
            assignment = tuple(sorted(decode_assignment(bytes(m.member_assignment)).partitions))
        except ConsumerProtocolError:
            log.warning("member %s of a group has an undecodable assignment", m.member_id)
        if m.member_metadata:
            try:
                topics = tuple(decode_subscription(bytes(m.member_metadata)).topics)
            except ConsumerProtocolError:
                log.debug("member %s has undecodable subscription metadata", m.member_id)
    return MemberDescription(
        member_id=str(m.member_id),
        client_id=str(m.client_id),
        host=str(m.client_host),
        group_instance_id=getattr(m, "group_instance_id", None),
        assignment=assignment,
        subscribed_topics=topics,
    )


class _PendingDescription:
    """A described group whose topic ids may still need names (consumer protocol)."""

    def __init__(
        self,
        *,
        group_id: str,
        kind: str,
        state: str,
        protocol_type: str,
        assignor: str,
        coordinator: BrokerNode | None,
        group_epoch: int | None = None,
        assignment_epoch: int | None = None,
        members: Sequence[tuple[Any, ...]] = (),
        raw_members: Sequence[Sequence[tuple[uuid.UUID | None, str, tuple[int, ...]]]] = (),
        classic_members: tuple[MemberDescription, ...] = (),
    ) -> None:
        self.group_id = group_id
        self.kind = kind
        self.state = state
        self.protocol_type = protocol_type
        self.assignor = assignor
        self.coordinator = coordinator
        self.group_epoch = group_epoch
        self.assignment_epoch = assignment_epoch
        self.members = members
        self.raw_members = raw_members
        self.classic_members = classic_members

    def resolve(self, names_by_id: Mapping[uuid.UUID, str]) -> GroupDescription:
        if self.kind == "classic":
            members = self.classic_members
        else:
            members = tuple(
                MemberDescription(
                    member_id=str(m.member_id),
                    client_id=str(m.client_id),
                    host=str(m.client_host),
                    group_instance_id=m.instance_id,
                    assignment=_tps(current, names_by_id),
                    target_assignment=_tps(target, names_by_id),
                    member_epoch=int(m.member_epoch),
                    subscribed_topics=tuple(str(t) for t in m.subscribed_topic_names),
                    subscribed_regex=m.subscribed_topic_regex or None,
                    rack_id=m.rack_id,
                )
                for m, current, target in self.members
            )
        return GroupDescription(
            group_id=self.group_id,
            type=self.kind,
            state=self.state,
            protocol_type=self.protocol_type,
            assignor=self.assignor,
            members=tuple(sorted(members, key=lambda m: (m.client_id, m.member_id))),
            coordinator=self.coordinator,
            group_epoch=self.group_epoch,
            assignment_epoch=self.assignment_epoch,
        )
