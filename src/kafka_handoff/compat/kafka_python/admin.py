"""kafka-python's ``KafkaAdminClient`` (its common calls) on kafka-handoff's native
:class:`~kafka_handoff.AdminClient`.

Results come in kafka-python 2.x's shapes where programs read them (lists of names, ``describe_topics``
dicts, ``(group_id, protocol_type)`` tuples, ``{TopicPartition: OffsetAndMetadata}``); calls that return
a raw protocol response in kafka-python return the native result instead (documented per method).  Calls
the native admin client does not have raise :class:`NotImplementedError` naming what is missing.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from kafka_handoff.admin import AdminClient, ConfigEntry, CreateTopicResult
from kafka_handoff.admin import NewTopic as NativeNewTopic
from kafka_handoff.compat.kafka_python.config import ADMIN_KEYS, translate
from kafka_handoff.compat.kafka_python.errors import InvalidRequestError, KafkaError, NoError
from kafka_handoff.compat.kafka_python.structs import OffsetAndMetadata, TopicPartition

__all__ = [
    "ConfigResource",
    "ConfigResourceType",
    "DescribeConfigsResult",
    "GroupInformation",
    "KafkaAdminClient",
    "MemberAssignment",
    "MemberInformation",
    "MemberMetadata",
    "NewPartitions",
    "NewTopic",
]


class NewTopic:
    """A topic to create (kafka-python's ``NewTopic``): ``-1`` counts take the broker's defaults."""

    def __init__(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        replica_assignments: Mapping[int, Sequence[int]] | None = None,
        topic_configs: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.replica_assignments = dict(replica_assignments or {})
        self.topic_configs = dict(topic_configs or {})

    def to_native(self) -> NativeNewTopic:
        if self.replica_assignments and (self.num_partitions != -1 or self.replication_factor != -1):
            # kafka-python sends both and the broker refuses the request; say so before sending.
            raise InvalidRequestError(
                f"cannot create topic {self.name!r}: a manual partition assignment (replica_assignments) was "
                "specified, but num_partitions and replication_factor were not left at -1"
            )
        return NativeNewTopic(
            self.name,
            self.num_partitions if not self.replica_assignments else -1,
            self.replication_factor if not self.replica_assignments else -1,
            {str(k): str(v) for k, v in self.topic_configs.items()},
            {int(p): list(b) for p, b in self.replica_assignments.items()} or None,
        )

    def __repr__(self) -> str:
        return (
            f"NewTopic(name={self.name!r}, num_partitions={self.num_partitions}, "
            f"replication_factor={self.replication_factor})"
        )


class NewPartitions:
    """Grow a topic to ``total_count`` partitions (``new_assignments`` is not supported)."""

    def __init__(self, total_count: int, new_assignments: Sequence[Sequence[int]] | None = None) -> None:
        self.total_count = total_count
        self.new_assignments = new_assignments


class ConfigResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16


class ConfigResource:
    """A resource whose configuration to describe (only ``TOPIC`` resources are supported)."""

    def __init__(
        self,
        resource_type: ConfigResourceType | str | int,
        name: str,
        configs: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(resource_type, str):
            resource_type = ConfigResourceType[resource_type.upper()]
        self.resource_type = ConfigResourceType(resource_type)
        self.name = name
        self.configs = configs


class DescribeConfigsResult(NamedTuple):
    resource_type: ConfigResourceType
    resource_name: str
    configs: dict[str, ConfigEntry]


class MemberMetadata(NamedTuple):
    version: int
    subscription: list[str]
    user_data: bytes | None


class MemberAssignment(NamedTuple):
    version: int
    assignment: list[tuple[str, list[int]]]
    user_data: bytes | None

    def partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, parts in self.assignment for p in parts]


class MemberInformation(NamedTuple):
    member_id: str
    client_id: str
    client_host: str
    member_metadata: MemberMetadata
    member_assignment: MemberAssignment


class GroupInformation(NamedTuple):
    error_code: int
    group: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberInformation]
    authorized_operations: Any


_UNSUPPORTED: dict[str, str] = {
    "alter_configs": "altering configurations",
    "incremental_alter_configs": "altering configurations",
    "create_acls": "ACLs",
    "describe_acls": "ACLs",
    "delete_acls": "ACLs",
    "alter_partition_reassignments": "partition reassignments",
    "list_partition_reassignments": "partition reassignments",
    "delete_records": "deleting records",
    "describe_log_dirs": "log directories",
    "alter_replica_log_dirs": "log directories",
    "perform_leader_election": "leader elections",
    "elect_leaders": "leader elections",
    "alter_consumer_group_offsets": "altering group offsets",
    "alter_group_offsets": "altering group offsets",
    "reset_group_offsets": "altering group offsets",
    "delete_consumer_group_offsets": "deleting group offsets",
    "delete_group_offsets": "deleting group offsets",
    "remove_group_members": "removing group members",
    "describe_features": "feature flags",
    "update_features": "feature flags",
    "describe_metadata_quorum": "the metadata quorum",
    "describe_user_scram_credentials": "SCRAM credentials",
    "alter_user_scram_credentials": "SCRAM credentials",
    "list_partition_offsets": "admin offset lookups (use KafkaConsumer.beginning_offsets/end_offsets)",
}


def _topic_from_options(name: str, options: Any) -> NewTopic:
    if not isinstance(options, Mapping):
        raise TypeError(
            f"create_topics(): the options of topic {name!r} must be a dict (num_partitions, "
            f"replication_factor, assignments, configs), got {options!r}"
        )
    unknown = set(options) - {"num_partitions", "replication_factor", "assignments", "configs"}
    if unknown:
        raise TypeError(f"create_topics(): unknown options {sorted(unknown)} for topic {name!r}")
    return NewTopic(
        name,
        int(options.get("num_partitions", -1)),
        int(options.get("replication_factor", -1)),
        options.get("assignments"),
        options.get("configs"),
    )


def _seconds(timeout_ms: int | None) -> float | None:
    return None if timeout_ms is None else timeout_ms / 1000.0


class KafkaAdminClient:
    """kafka-python's admin client: topics, partitions, consumer groups, topic configs and the cluster
    description, on the native admin client (``KafkaAdminClient(bootstrap_servers=...)``)."""

    def __init__(self, **configs: Any) -> None:
        native, _compat = translate("admin", configs, ADMIN_KEYS)
        self.config: dict[str, Any] = dict(configs)
        self._native = AdminClient(native)
        self._closed = False

    @property
    def native(self) -> AdminClient:
        """The native admin client underneath."""
        return self._native

    def __getattr__(self, name: str) -> Any:
        what = _UNSUPPORTED.get(name)
        if what is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

        def unsupported(*args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError(
                f"KafkaAdminClient.{name}(): kafka-handoff's admin client does not support {what}"
            )

        return unsupported

    # ------------------------------------------------------------------------------------------ topics
    def create_topics(
        self,
        new_topics: Iterable[NewTopic | NativeNewTopic | str] | Mapping[str, Mapping[str, Any]],
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> dict[str, CreateTopicResult]:
        """Create topics: ``NewTopic`` objects, names (the broker's defaults) or, as kafka-python 3, a dict
        ``{name: {'num_partitions', 'replication_factor', 'assignments', 'configs'}}`` (all optional).
        Returns the native ``{name: CreateTopicResult}`` (kafka-python returns the raw CreateTopics
        response); raises ``TopicAlreadyExistsError`` and the like, as kafka-python does."""
        topics: list[NativeNewTopic] = []
        if isinstance(new_topics, Mapping):
            new_topics = [_topic_from_options(name, opts) for name, opts in new_topics.items()]
        for t in new_topics:
            if isinstance(t, NativeNewTopic):
                topics.append(t)
            elif isinstance(t, str):
                topics.append(NativeNewTopic(t))
            elif isinstance(t, NewTopic):
                topics.append(t.to_native())
            else:
                raise TypeError(f"create_topics() takes NewTopic objects or topic names, got {t!r}")
        return self._native.create_topics(topics, validate_only=validate_only, timeout=_seconds(timeout_ms))

    def delete_topics(self, topics: Iterable[str], timeout_ms: int | None = None) -> None:
        """Delete topics (raises ``UnknownTopicOrPartitionError`` for one that does not exist)."""
        names = [topics] if isinstance(topics, str) else list(topics)
        self._native.delete_topics(names, timeout=_seconds(timeout_ms))

    def list_topics(self) -> list[str]:
        """The names of the cluster's topics (internal ones included, as kafka-python)."""
        return [t.name for t in self._native.list_topics(include_internal=True)]

    def describe_topics(self, topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Per topic: ``{'error_code', 'topic', 'is_internal', 'partitions': [{'error_code', 'partition',
        'leader', 'leader_epoch', 'replicas', 'isr', 'offline_replicas'}]}`` (all topics by default)."""
        names = self.list_topics() if topics is None else list(topics)
        described = self._native.describe_topics(names)
        out: list[dict[str, Any]] = []
        for name in names:
            d = described[name]
            out.append(
                {
                    "error_code": 0,
                    "topic": d.name,
                    "is_internal": d.internal,
                    "partitions": [
                        {
                            "error_code": p.error_code,
                            "partition": p.partition,
                            "leader": p.leader,
                            "leader_epoch": p.leader_epoch,
                            "replicas": list(p.replicas),
                            "isr": list(p.isr),
                            "offline_replicas": list(p.offline_replicas),
                        }
                        for p in d.partitions
                    ],
                }
            )
        return out

    def create_partitions(
        self,
        topic_partitions: Mapping[str, NewPartitions | int],
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> None:
        """Grow topics: ``{topic: NewPartitions(total_count)}``."""
        counts: dict[str, int] = {}
        for topic, spec in topic_partitions.items():
            if isinstance(spec, NewPartitions):
                if spec.new_assignments:
                    raise NotImplementedError(
                        "create_partitions(): NewPartitions.new_assignments is not supported by "
                        "kafka-handoff's admin client (the controller places the new partitions)"
                    )
                counts[topic] = int(spec.total_count)
            else:
                counts[topic] = int(spec)
        self._native.create_partitions(counts, validate_only=validate_only, timeout=_seconds(timeout_ms))

    # ------------------------------------------------------------------------------------------ cluster
    def describe_cluster(self) -> dict[str, Any]:
        """``{'cluster_id', 'controller_id', 'brokers': [{'node_id', 'host', 'port', 'rack'}], ...}``."""
        d = self._native.describe_cluster()
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "cluster_id": d.cluster_id,
            "controller_id": d.controller_id,
            "brokers": [
                {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack} for b in d.brokers
            ],
        }

    def describe_configs(
        self, config_resources: Iterable[ConfigResource], include_synonyms: bool = False
    ) -> list[DescribeConfigsResult]:
        """The configuration of TOPIC resources, one :class:`DescribeConfigsResult` per resource (only the
        keys the resource names, when it names some)."""
        resources = list(config_resources)
        other = [r for r in resources if r.resource_type is not ConfigResourceType.TOPIC]
        if other:
            raise NotImplementedError(
                f"describe_configs(): kafka-handoff's admin client describes TOPIC resources only, not "
                f"{other[0].resource_type.name}"
            )
        described = self._native.describe_configs([r.name for r in resources])
        out: list[DescribeConfigsResult] = []
        for r in resources:
            entries = described[r.name]
            if r.configs:
                entries = {k: v for k, v in entries.items() if k in r.configs}
            out.append(DescribeConfigsResult(r.resource_type, r.name, dict(entries)))
        return out

    # ------------------------------------------------------------------------------------------ groups
    def list_consumer_groups(
        self, broker_ids: Iterable[int] | None = None, states_filter: Iterable[str] | None = None
    ) -> list[tuple[str, str]]:
        """``[(group_id, protocol_type), ...]`` of every group (``states_filter``: only groups in those
        states, e.g. ``['Stable']``)."""
        if broker_ids is not None:
            raise NotImplementedError(
                "list_consumer_groups(broker_ids=...): kafka-handoff's admin client always asks every broker"
            )
        states = None if states_filter is None else {s.lower() for s in states_filter}
        return [
            (g.group_id, g.protocol_type)
            for g in self._native.list_groups()
            if states is None or (g.state or "").lower() in states
        ]

    def describe_consumer_groups(
        self,
        group_ids: Iterable[str],
        group_coordinator_id: int | None = None,
        include_authorized_operations: bool = False,
    ) -> list[GroupInformation]:
        """One :class:`GroupInformation` per group (members with their subscription and assignment)."""
        if include_authorized_operations:
            raise NotImplementedError("describe_consumer_groups(include_authorized_operations=True)")
        ids = [group_ids] if isinstance(group_ids, str) else list(group_ids)
        described = self._native.describe_groups(ids)
        out: list[GroupInformation] = []
        for gid in ids:
            d = described[gid]
            members = []
            for m in d.members:
                by_topic: dict[str, list[int]] = {}
                for tp in m.assignment:
                    by_topic.setdefault(tp.topic, []).append(tp.partition)
                members.append(
                    MemberInformation(
                        m.member_id,
                        m.client_id,
                        m.host,
                        MemberMetadata(0, list(m.subscribed_topics) or sorted(by_topic), None),
                        MemberAssignment(0, sorted((t, sorted(p)) for t, p in by_topic.items()), None),
                    )
                )
            out.append(GroupInformation(0, d.group_id, d.state, d.protocol_type, d.assignor, members, None))
        return out

    def list_consumer_group_offsets(
        self,
        group_id: str,
        group_coordinator_id: int | None = None,
        partitions: Iterable[TopicPartition] | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets; asked ``partitions`` without one get offset ``-1``."""
        result = self._native.list_group_offsets(group_id, partitions)
        return {
            tp: (om if om is not None else OffsetAndMetadata(-1, "", None))
            for tp, om in sorted(result.items())
        }

    def delete_consumer_groups(
        self, group_ids: Iterable[str], group_coordinator_id: int | None = None
    ) -> list[tuple[str, type[BaseException]]]:
        """``[(group_id, NoError or the error class), ...]``: each group deleted on its own."""
        out: list[tuple[str, type[BaseException]]] = []
        for gid in [group_ids] if isinstance(group_ids, str) else list(group_ids):
            try:
                self._native.delete_groups([gid])
                out.append((gid, NoError))
            except KafkaError as exc:
                out.append((gid, type(exc)))
        return out

    # kafka-python 3 names of the group calls, with kafka-python 3's result shapes (dicts)
    def list_groups(
        self,
        broker_ids: Iterable[int] | None = None,
        states_filter: Iterable[str] | None = None,
        types_filter: Iterable[str] | None = None,
    ) -> list[dict[str, Any]]:
        """kafka-python 3: ``[{'group_id', 'protocol_type', 'group_state', 'group_type'}, ...]``."""
        if broker_ids is not None:
            raise NotImplementedError(
                "list_groups(broker_ids=...): kafka-handoff's admin client asks every broker"
            )
        states = None if states_filter is None else {s.lower() for s in states_filter}
        types = None if types_filter is None else {t.lower() for t in types_filter}
        return [
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type,
                "group_state": g.state,
                "group_type": g.type,
            }
            for g in self._native.list_groups()
            if (states is None or (g.state or "").lower() in states)
            and (types is None or (g.type or "").lower() in types)
        ]

    def describe_groups(
        self,
        group_ids: Iterable[str],
        group_coordinator_id: int | None = None,
        include_authorized_operations: bool = False,
    ) -> dict[str, dict[str, Any]]:
        """kafka-python 3: ``{group_id: {'group_id', 'group_state', 'protocol_type', 'protocol_data',
        'members': [{'member_id', 'group_instance_id', 'client_id', 'client_host', 'member_metadata':
        {'topics'}, 'member_assignment': {'assigned_partitions': [{'topic', 'partitions'}]}}],
        'authorized_operations', 'error'}}``."""
        out: dict[str, dict[str, Any]] = {}
        for info in self.describe_consumer_groups(
            group_ids, group_coordinator_id, include_authorized_operations
        ):
            out[info.group] = {
                "group_id": info.group,
                "group_state": info.state,
                "protocol_type": info.protocol_type,
                "protocol_data": info.protocol,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": None,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": {"topics": list(m.member_metadata.subscription)},
                        "member_assignment": {
                            "assigned_partitions": [
                                {"topic": t, "partitions": list(p)} for t, p in m.member_assignment.assignment
                            ]
                        },
                    }
                    for m in info.members
                ],
                "authorized_operations": None,
                "error": None,
            }
        return out

    def list_group_offsets(
        self, group_specs: str | Iterable[str] | Mapping[str, Iterable[TopicPartition] | None]
    ) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
        """kafka-python 3: ``{group_id: {TopicPartition: OffsetAndMetadata}}`` for a group id, a list of
        them, or ``{group_id: [TopicPartition, ...] or None}``."""
        if isinstance(group_specs, str):
            specs: dict[str, Iterable[TopicPartition] | None] = {group_specs: None}
        elif isinstance(group_specs, Mapping):
            specs = dict(group_specs)
        else:
            specs = {g: None for g in group_specs}
        return {
            g: {
                tp: om
                for tp, om in sorted(self._native.list_group_offsets(g, parts).items())
                if om is not None
            }
            for g, parts in specs.items()
        }

    def delete_groups(
        self, group_ids: Iterable[str], group_coordinator_id: int | None = None
    ) -> dict[str, str]:
        """kafka-python 3: ``{group_id: 'OK' or the error's class name}``."""
        return {
            g: "OK" if err is NoError else err.__name__
            for g, err in self.delete_consumer_groups(group_ids, group_coordinator_id)
        }

    # ------------------------------------------------------------------------------------------ close
    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._native.close()

    def __enter__(self) -> KafkaAdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
