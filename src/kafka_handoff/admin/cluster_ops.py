"""Cluster operations with Java's names: leader elections (``electLeaders``), partition reassignments
(``alterPartitionReassignments`` / ``listPartitionReassignments``), log dirs (``describeLogDirs``), producers
(``describeProducers``), transactions (``listTransactions`` / ``describeTransactions``) and client quotas
(``describeClientQuotas`` / ``alterClientQuotas``)."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.admin.calls import AdminCall, NoRetry, Steps, drives_steps, run_calls, run_one
from kafka_handoff.admin.plumbing import AdminPlumbing, merge_partition_outcomes
from kafka_handoff.errors import UnknownTopicOrPartitionError, error_for_code
from kafka_handoff.protocol.requests import ANY_NODE
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import TopicPartition

__all__ = [
    "AbortTransactionSpec",
    "ClientQuotaAlteration",
    "ClientQuotaEntity",
    "ClusterOpsAdminMixin",
    "ElectionType",
    "FeatureMetadata",
    "LogDirDescription",
    "PartitionReassignment",
    "ProducerState",
    "ReplicaInfo",
    "TransactionDescription",
    "TransactionListing",
    "VersionRange",
]


class ElectionType(enum.IntEnum):
    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    path: str
    replica_infos: Mapping[TopicPartition, ReplicaInfo]
    total_bytes: int | None
    usable_bytes: int | None
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_transaction_start_offset: int | None


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None
    topic_partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class VersionRange:
    """Java's ``FinalizedVersionRange`` / ``SupportedVersionRange``."""

    min_version: int
    max_version: int


@dataclass(frozen=True, slots=True)
class FeatureMetadata:
    """Java's ``FeatureMetadata``: the cluster's finalized feature levels and a broker's supported ranges."""

    finalized_features: Mapping[str, VersionRange]
    finalized_features_epoch: int | None
    supported_features: Mapping[str, VersionRange]


@dataclass(frozen=True, slots=True)
class AbortTransactionSpec:
    """Java's ``AbortTransactionSpec``: the hanging transaction of a producer on a partition (from
    :meth:`~kafka_handoff.admin.AdminClient.describe_producers`)."""

    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class ClientQuotaEntity:
    """Java's ``ClientQuotaEntity``: ``{"user": "alice", "client-id": None}`` (``None``: the default)."""

    entries: Mapping[str, str | None]

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.entries.items(), key=lambda kv: kv[0])))


@dataclass(frozen=True, slots=True)
class ClientQuotaAlteration:
    """Java's ``ClientQuotaAlteration``: set quotas (``None`` removes one) of an entity."""

    entity: ClientQuotaEntity
    ops: Mapping[str, float | None] = field(default_factory=dict)


def _group_by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in sorted(tps):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


def _raise_top(response: Any, what: str) -> None:
    code = int(getattr(response, "error_code", 0))
    if code != ErrorCode.none:
        message = getattr(response, "error_message", None) or ""
        error = error_for_code(code, f"{what}: {message}".rstrip(": "))
        raise error if error.retriable else NoRetry(error)


class ClusterOpsAdminMixin(AdminPlumbing):
    """Elections, reassignments, log dirs, producers, transactions, quotas: mixed into the AdminClient."""

    @drives_steps
    def elect_leaders(
        self,
        election_type: ElectionType,
        partitions: Iterable[TopicPartition] | None = None,
        timeout: float | None = None,
    ) -> Steps[dict[TopicPartition, BaseException | None]]:
        """Elect leaders (preferred or unclean) of ``partitions`` (``None``: every partition that needs one);
        each partition's outcome: ``None`` (elected) or its error (``ELECTION_NOT_NEEDED`` when the
        preferred replica leads already), as Java's ``ElectLeadersResult.partitions()``."""
        wanted = None if partitions is None else _group_by_topic(TopicPartition(*tp) for tp in partitions)
        deadline = self._deadline(timeout)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "election_type": int(election_type),
                "topic_partitions": None
                if wanted is None
                else [{"topic": t, "partitions": ps} for t, ps in wanted.items()],
                "timeout": timeout_ms,
            }

        def handle(response: Any, version: int, node: int) -> dict[TopicPartition, BaseException | None]:
            _raise_top(response, "cannot elect leaders")
            out: dict[TopicPartition, BaseException | None] = {}
            for r in response.replica_election_results:
                for p in r.partition_result:
                    tp = TopicPartition(str(r.topic), int(p.partition_id))
                    code = int(p.error_code)
                    out[tp] = (
                        None
                        if code == ErrorCode.none
                        else error_for_code(
                            code, f"leader election of {tp}: {p.error_message or ''}".rstrip(": ")
                        )
                    )
            return out

        result: dict[TopicPartition, BaseException | None] = yield from run_one(
            AdminCall("ElectLeaders", ApiKey.ELECT_LEADERS, ANY_NODE, build, handle, deadline)
        )
        return dict(sorted(result.items()))

    @drives_steps
    def alter_partition_reassignments(
        self, reassignments: Mapping[TopicPartition, Sequence[int] | None], timeout: float | None = None
    ) -> Steps[None]:
        """Move partitions to new replicas (a replica list), or cancel an ongoing move (``None``); each
        partition's error names it, the first is raised with the others as notes."""
        wanted = {TopicPartition(*tp): (None if r is None else list(r)) for tp, r in reassignments.items()}
        deadline = self._deadline(timeout)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "timeout": timeout_ms,
                "allow_replication_factor_change": True,
                "topics": [
                    {
                        "name": t,
                        "partitions": [
                            {"partition_index": p, "replicas": wanted[TopicPartition(t, p)]} for p in ps
                        ],
                    }
                    for t, ps in _group_by_topic(wanted).items()
                ],
            }

        def handle(response: Any, version: int, node: int) -> list[BaseException]:
            _raise_top(response, "cannot reassign partitions")
            errors: list[BaseException] = []
            for t in response.responses:
                for p in t.partitions:
                    code = int(p.error_code)
                    if code != ErrorCode.none:
                        tp = TopicPartition(str(t.name), int(p.partition_index))
                        errors.append(
                            error_for_code(
                                code, f"cannot reassign {tp}: {p.error_message or ''}".rstrip(": ")
                            )
                        )
            return errors

        errors: list[BaseException] = yield from run_one(
            AdminCall(
                "AlterPartitionReassignments",
                ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                ANY_NODE,
                build,
                handle,
                deadline,
            )
        )
        self._raise_first(errors)

    @drives_steps
    def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None, timeout: float | None = None
    ) -> Steps[dict[TopicPartition, PartitionReassignment]]:
        """The ongoing reassignments (of ``partitions``, or all)."""
        wanted = None if partitions is None else _group_by_topic(TopicPartition(*tp) for tp in partitions)
        deadline = self._deadline(timeout)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "timeout": timeout_ms,
                "topics": None
                if wanted is None
                else [{"name": t, "partition_indexes": ps} for t, ps in wanted.items()],
            }

        def handle(response: Any, version: int, node: int) -> dict[TopicPartition, PartitionReassignment]:
            _raise_top(response, "cannot list partition reassignments")
            return {
                TopicPartition(str(t.name), int(p.partition_index)): PartitionReassignment(
                    tuple(int(r) for r in p.replicas),
                    tuple(int(r) for r in p.adding_replicas),
                    tuple(int(r) for r in p.removing_replicas),
                )
                for t in response.topics
                for p in t.partitions
            }

        result: dict[TopicPartition, PartitionReassignment] = yield from run_one(
            AdminCall(
                "ListPartitionReassignments",
                ApiKey.LIST_PARTITION_REASSIGNMENTS,
                ANY_NODE,
                build,
                handle,
                deadline,
            )
        )
        return dict(sorted(result.items()))

    @drives_steps
    def describe_log_dirs(
        self, broker_ids: Iterable[int] | None = None, timeout: float | None = None
    ) -> Steps[dict[int, dict[str, LogDirDescription]]]:
        """Each broker's log dirs with their replicas' sizes (DescribeLogDirs to each broker; default:
        all)."""
        deadline = self._deadline(timeout)
        if broker_ids is None:
            cluster = yield from self._cluster_steps([], deadline)
            ids = sorted(cluster.brokers)
        else:
            ids = sorted(set(broker_ids))

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"topics": None}

        def handle(response: Any, version: int, node: int) -> dict[str, LogDirDescription]:
            _raise_top(response, f"cannot describe the log dirs of broker {node}")
            out: dict[str, LogDirDescription] = {}
            for d in response.results:
                code = int(d.error_code)
                total = int(getattr(d, "total_bytes", -1))
                usable = int(getattr(d, "usable_bytes", -1))
                out[str(d.log_dir)] = LogDirDescription(
                    str(d.log_dir),
                    {
                        TopicPartition(str(t.name), int(p.partition_index)): ReplicaInfo(
                            int(p.partition_size), int(p.offset_lag), bool(p.is_future_key)
                        )
                        for t in d.topics
                        for p in t.partitions
                    },
                    total if total >= 0 else None,
                    usable if usable >= 0 else None,
                    None
                    if code == ErrorCode.none
                    else error_for_code(code, f"log dir {d.log_dir} of broker {node}"),
                )
            return out

        calls = [
            AdminCall(
                f"DescribeLogDirs(broker {b})",
                ApiKey.DESCRIBE_LOG_DIRS,
                b,
                build,
                handle,
                deadline,
                min_version=1,
            )
            for b in ids
        ]
        outcomes = yield from run_calls(calls, deadline)
        self._raise_first([o for o in outcomes if isinstance(o, BaseException)])
        return dict(zip(ids, outcomes, strict=True))

    @drives_steps
    def describe_producers(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> Steps[dict[TopicPartition, list[ProducerState]]]:
        """The active (idempotent or transactional) producers of each partition (DescribeProducers to each
        leader)."""
        wanted = sorted({TopicPartition(*tp) for tp in partitions})
        deadline = self._deadline(timeout)
        cluster = yield from self._cluster_steps(sorted({tp.topic for tp in wanted}), deadline)
        errors: list[BaseException] = []
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in wanted:
            leader = cluster.leader_for(tp)
            if leader is None:
                errors.append(
                    UnknownTopicOrPartitionError(f"cannot describe the producers of {tp}: no leader")
                )
            else:
                by_leader.setdefault(leader, []).append(tp)
        self._raise_first(errors)

        def make(leader: int, tps: list[TopicPartition]) -> AdminCall:
            def build(version: int, timeout_ms: int) -> dict[str, Any]:
                return {
                    "topics": [{"name": t, "partition_indexes": ps} for t, ps in _group_by_topic(tps).items()]
                }

            def handle(response: Any, version: int, node: int) -> dict[TopicPartition, Any]:
                out: dict[TopicPartition, Any] = {}
                for t in response.topics:
                    for p in t.partitions:
                        tp = TopicPartition(str(t.name), int(p.partition_index))
                        code = int(p.error_code)
                        if code != ErrorCode.none:
                            out[tp] = error_for_code(code, f"cannot describe the producers of {tp}")
                            continue
                        out[tp] = [
                            ProducerState(
                                int(s.producer_id),
                                int(s.producer_epoch),
                                int(s.last_sequence),
                                int(s.last_timestamp),
                                int(s.coordinator_epoch),
                                None
                                if int(s.current_txn_start_offset) < 0
                                else int(s.current_txn_start_offset),
                            )
                            for s in p.active_producers
                        ]
                return out

            return AdminCall(
                f"DescribeProducers(broker {leader})",
                ApiKey.DESCRIBE_PRODUCERS,
                leader,
                build,
                handle,
                deadline,
            )

        outcomes = yield from run_calls([make(b, tps) for b, tps in by_leader.items()], deadline)
        return merge_partition_outcomes(outcomes, errors)

    @drives_steps
    def list_transactions(
        self,
        states: Iterable[str] | None = None,
        producer_ids: Iterable[int] | None = None,
        timeout: float | None = None,
    ) -> Steps[list[TransactionListing]]:
        """The transactions every broker coordinates (ListTransactions), filtered by state (``Ongoing``,
        ``CompleteCommit``, ...) and producer id."""
        state_filter = list(states or [])
        pid_filter = list(producer_ids or [])
        deadline = self._deadline(timeout)
        cluster = yield from self._cluster_steps([], deadline)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"state_filters": state_filter, "producer_id_filters": pid_filter, "duration_filter": -1}

        def handle(response: Any, version: int, node: int) -> list[TransactionListing]:
            _raise_top(response, f"cannot list the transactions of broker {node}")
            return [
                TransactionListing(str(t.transactional_id), int(t.producer_id), str(t.transaction_state))
                for t in response.transaction_states
            ]

        calls = [
            AdminCall(f"ListTransactions(broker {b})", ApiKey.LIST_TRANSACTIONS, b, build, handle, deadline)
            for b in sorted(cluster.brokers)
        ]
        outcomes = yield from run_calls(calls, deadline)
        self._raise_first([o for o in outcomes if isinstance(o, BaseException)])
        found = {t.transactional_id: t for o in outcomes for t in o}
        return [found[k] for k in sorted(found)]

    @drives_steps
    def describe_transactions(
        self, transactional_ids: Iterable[str], timeout: float | None = None
    ) -> Steps[dict[str, TransactionDescription]]:
        """State, producer, timeout and partitions of each transaction (DescribeTransactions to its
        coordinator)."""
        from kafka_handoff.group.coordinator import parse_find_coordinator

        ids = list(transactional_ids)
        deadline = self._deadline(timeout)

        def find(txn_id: str) -> AdminCall:
            def build(version: int, timeout_ms: int) -> dict[str, Any]:
                if version >= 4:
                    return {"key_type": 1, "coordinator_keys": [txn_id]}
                return {"key": txn_id, "key_type": 1}

            def handle(response: Any, version: int, node: int) -> int:
                found = parse_find_coordinator(txn_id, response, version, key_type=1)
                if isinstance(found, BaseException):
                    raise found
                return int(found.node_id)

            return AdminCall(
                f"FindCoordinator(transaction {txn_id!r})",
                ApiKey.FIND_COORDINATOR,
                ANY_NODE,
                build,
                handle,
                deadline,
            )

        nodes = yield from run_calls([find(t) for t in ids], deadline)
        self._raise_first([n for n in nodes if isinstance(n, BaseException)])

        def describe(txn_id: str, node_id: int) -> AdminCall:
            def build(version: int, timeout_ms: int) -> dict[str, Any]:
                return {"transactional_ids": [txn_id]}

            def handle(response: Any, version: int, node: int) -> TransactionDescription:
                (s,) = [x for x in response.transaction_states if x.transactional_id == txn_id] or list(
                    response.transaction_states
                )
                code = int(s.error_code)
                if code != ErrorCode.none:
                    error = error_for_code(code, f"cannot describe transaction {txn_id!r}")
                    raise error if error.retriable else NoRetry(error)
                start = _ms(s.transaction_start_time)
                return TransactionDescription(
                    txn_id,
                    node,
                    str(s.transaction_state),
                    int(s.producer_id),
                    int(s.producer_epoch),
                    _ms(s.transaction_timeout),
                    None if start < 0 else start,
                    tuple(
                        sorted(TopicPartition(str(t.topic), int(p)) for t in s.topics for p in t.partitions)
                    ),
                )

            return AdminCall(
                f"DescribeTransactions({txn_id!r})",
                ApiKey.DESCRIBE_TRANSACTIONS,
                node_id,
                build,
                handle,
                deadline,
            )

        outcomes = yield from run_calls([describe(t, n) for t, n in zip(ids, nodes, strict=True)], deadline)
        self._raise_first([o for o in outcomes if isinstance(o, BaseException)])
        return dict(zip(ids, outcomes, strict=True))

    @drives_steps
    def describe_features(self, timeout: float | None = None) -> Steps[FeatureMetadata]:
        """The cluster's finalized features (``metadata.version``, ``group.version``,
        ``transaction.version``, ...) and the supported ranges of a broker (ApiVersions v3+)."""
        deadline = self._deadline(timeout)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"client_software_name": "kafka-handoff", "client_software_version": "admin"}

        def handle(response: Any, version: int, node: int) -> FeatureMetadata:
            _raise_top(response, "cannot describe features")
            epoch = int(getattr(response, "finalized_features_epoch", -1))
            return FeatureMetadata(
                {
                    str(f.name): VersionRange(int(f.min_version_level), int(f.max_version_level))
                    for f in getattr(response, "finalized_features", ())
                },
                epoch if epoch >= 0 else None,
                {
                    str(f.name): VersionRange(int(f.min_version), int(f.max_version))
                    for f in getattr(response, "supported_features", ())
                },
            )

        result: FeatureMetadata = yield from run_one(
            AdminCall("ApiVersions", ApiKey.API_VERSIONS, ANY_NODE, build, handle, deadline, min_version=3)
        )
        return result

    @drives_steps
    def abort_transaction(self, spec: AbortTransactionSpec, timeout: float | None = None) -> Steps[None]:
        """Abort a hanging transaction on one partition: write the ABORT marker for the producer to the
        partition's leader (WriteTxnMarkers, as Java's ``abortTransaction``; needs CLUSTER_ACTION)."""
        tp = TopicPartition(*spec.topic_partition)
        deadline = self._deadline(timeout)
        cluster = yield from self._cluster_steps([tp.topic], deadline)
        leader = cluster.leader_for(tp)
        if leader is None:
            raise UnknownTopicOrPartitionError(f"cannot abort the transaction on {tp}: no leader")

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "markers": [
                    {
                        "producer_id": spec.producer_id,
                        "producer_epoch": spec.producer_epoch,
                        "transaction_result": False,
                        "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}],
                        "coordinator_epoch": spec.coordinator_epoch,
                    }
                ]
            }

        def handle(response: Any, version: int, node: int) -> None:
            for m in response.markers:
                for t in m.topics:
                    for p in t.partitions:
                        code = int(p.error_code)
                        if code != ErrorCode.none:
                            error = error_for_code(
                                code, f"cannot abort the transaction of producer {spec.producer_id} on {tp}"
                            )
                            raise error if error.retriable else NoRetry(error)

        yield from run_one(
            AdminCall(
                f"WriteTxnMarkers({tp})",
                ApiKey.WRITE_TXN_MARKERS,
                leader,
                build,
                handle,
                deadline,
                min_version=1,
            )
        )

    @drives_steps
    def describe_client_quotas(
        self,
        entity_filter: Mapping[str, str | None] | None = None,
        *,
        strict: bool = False,
        timeout: float | None = None,
    ) -> Steps[dict[ClientQuotaEntity, dict[str, float]]]:
        """Quotas of the entities matching the filter (``{"user": "alice"}``: that user; ``{"user": None}``:
        the default user; ``None``: every entity)."""
        components = [
            {"entity_type": k, "match_type": 1 if v is None else 0, "match": v}
            for k, v in (entity_filter or {}).items()
        ]
        if entity_filter is None:
            components = [
                {"entity_type": t, "match_type": 2, "match": None} for t in ("user", "client-id", "ip")
            ]
        deadline = self._deadline(timeout)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"components": components, "strict": strict}

        def handle(response: Any, version: int, node: int) -> dict[ClientQuotaEntity, dict[str, float]]:
            _raise_top(response, "cannot describe client quotas")
            return {
                ClientQuotaEntity({str(e.entity_type): e.entity_name for e in entry.entity}): {
                    str(v.key): float(v.value) for v in entry.values
                }
                for entry in response.entries or ()
            }

        if entity_filter is None:
            merged: dict[ClientQuotaEntity, dict[str, float]] = {}
            for comp in components:

                def build_one(version: int, timeout_ms: int, one: dict[str, Any] = comp) -> dict[str, Any]:
                    return {"components": [one], "strict": False}

                call = AdminCall(
                    "DescribeClientQuotas",
                    ApiKey.DESCRIBE_CLIENT_QUOTAS,
                    ANY_NODE,
                    build_one,
                    handle,
                    deadline,
                )
                merged.update((yield from run_one(call)))
            return merged
        result: dict[ClientQuotaEntity, dict[str, float]] = yield from run_one(
            AdminCall(
                "DescribeClientQuotas", ApiKey.DESCRIBE_CLIENT_QUOTAS, ANY_NODE, build, handle, deadline
            )
        )
        return result

    @drives_steps
    def alter_client_quotas(
        self,
        alterations: Iterable[ClientQuotaAlteration],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> Steps[None]:
        """Set (or, with ``None``, remove) quotas such as ``producer_byte_rate`` of users, client ids, IPs;
        each entity's error names it."""
        items = list(alterations)
        deadline = self._deadline(timeout)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "entries": [
                    {
                        "entity": [{"entity_type": k, "entity_name": v} for k, v in a.entity.entries.items()],
                        "ops": [
                            {"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                            for k, v in a.ops.items()
                        ],
                    }
                    for a in items
                ],
                "validate_only": validate_only,
            }

        def handle(response: Any, version: int, node: int) -> list[BaseException]:
            errors: list[BaseException] = []
            for e in response.entries:
                code = int(e.error_code)
                if code != ErrorCode.none:
                    who = ", ".join(f"{x.entity_type}={x.entity_name or '<default>'}" for x in e.entity)
                    errors.append(
                        error_for_code(code, f"cannot alter the quotas of {who}: {e.error_message or ''}")
                    )
            return errors

        if not items:
            return
        errors: list[BaseException] = yield from run_one(
            AdminCall("AlterClientQuotas", ApiKey.ALTER_CLIENT_QUOTAS, ANY_NODE, build, handle, deadline)
        )
        self._raise_first(errors)


def _ms(value: Any) -> int:
    """kio's times and durations (datetime, timedelta, None, int) as ms (-1 for none)."""
    if value is None:
        return -1
    if hasattr(value, "total_seconds"):
        return int(value.total_seconds() * 1000)
    if hasattr(value, "timestamp"):
        return int(value.timestamp() * 1000)
    return int(value)
