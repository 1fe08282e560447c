"""confluent-kafka's ``admin`` module (``AdminClient``, ``NewTopic``, ...) over kafka-handoff's AdminClient.

Every operation returns ``concurrent.futures.Future`` objects as confluent-kafka's does (a dict of them, one
per topic/group/resource, or a single one); they are completed by a small thread pool that runs the
native client's blocking calls.  A failure is the future's ``KafkaException`` carrying a :class:`KafkaError`
with librdkafka's code (``TOPIC_ALREADY_EXISTS``, ``UNKNOWN_TOPIC_OR_PART``, ...).

Configs (topics, brokers, groups), ACLs, SCRAM credentials, ``delete_records``, ``elect_leaders`` and
``alter_consumer_group_offsets`` map onto the native calls of the same names, one native call per
resource (so each future carries only its own resource's error).  What remains unsupported
(``create_partitions(replica_assignment=...)``, ``set_sasl_credentials``) raises ``NotImplementedError``.
"""

from __future__ import annotations

import enum
import functools
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import Any, ParamSpec, TypeVar

from kafka_handoff import admin as native
from kafka_handoff import errors as native_errors
from kafka_handoff.admin import AdminClient as NativeAdminClient
from kafka_handoff.admin import NewTopic as NativeNewTopic
from kafka_handoff.compat.confluent_kafka.admin._types import (
    CONFIG_SOURCE_DEFAULT_CONFIG,
    CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG,
    CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG,
    CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG,
    CONFIG_SOURCE_GROUP_CONFIG,
    CONFIG_SOURCE_STATIC_BROKER_CONFIG,
    CONFIG_SOURCE_UNKNOWN_CONFIG,
    RESOURCE_ANY,
    RESOURCE_BROKER,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
    RESOURCE_TRANSACTIONAL_ID,
    RESOURCE_UNKNOWN,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ConsumerGroupState,
    ConsumerGroupType,
    DeletedRecords,
    DescribeClusterResult,
    ElectionType,
    IsolationLevel,
    ListConsumerGroupsResult,
    ListOffsetsResultInfo,
    MemberAssignment,
    MemberDescription,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    TopicDescription,
    TopicPartitionInfo,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
)
from kafka_handoff.compat.confluent_kafka.config import compat_callable, translate_config
from kafka_handoff.compat.confluent_kafka.error import KafkaError, KafkaException, from_exception
from kafka_handoff.compat.confluent_kafka.types import (
    OFFSET_INVALID,
    BrokerMetadata,
    ClusterMetadata,
    ConsumerGroupTopicPartitions,
    GroupMember,
    GroupMetadata,
    Node,
    PartitionMetadata,
    TopicCollection,
    TopicMetadata,
    TopicPartition,
)
from kafka_handoff.config import ADMIN_CONFIG_DEF, CONFIG_ALIASES
from kafka_handoff.types import OffsetAndMetadata as NativeOffsetAndMetadata
from kafka_handoff.types import TopicPartition as NativeTopicPartition

__all__ = [
    "CONFIG_SOURCE_DEFAULT_CONFIG",
    "CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG",
    "CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG",
    "CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG",
    "CONFIG_SOURCE_GROUP_CONFIG",
    "CONFIG_SOURCE_STATIC_BROKER_CONFIG",
    "CONFIG_SOURCE_UNKNOWN_CONFIG",
    "OFFSET_INVALID",
    "RESOURCE_ANY",
    "RESOURCE_BROKER",
    "RESOURCE_GROUP",
    "RESOURCE_TOPIC",
    "RESOURCE_TRANSACTIONAL_ID",
    "RESOURCE_UNKNOWN",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "AdminClient",
    "AlterConfigOpType",
    "BrokerMetadata",
    "ClusterMetadata",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "ConsumerGroupState",
    "ConsumerGroupTopicPartitions",
    "ConsumerGroupType",
    "DeletedRecords",
    "DescribeClusterResult",
    "ElectionType",
    "GroupMember",
    "GroupMetadata",
    "IsolationLevel",
    "KafkaError",
    "KafkaException",
    "ListConsumerGroupsResult",
    "ListOffsetsResultInfo",
    "MemberAssignment",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "PartitionMetadata",
    "ResourcePatternType",
    "ResourceType",
    "ScramCredentialInfo",
    "ScramMechanism",
    "TopicCollection",
    "TopicDescription",
    "TopicMetadata",
    "TopicPartition",
    "TopicPartitionInfo",
    "UserScramCredentialAlteration",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "UserScramCredentialsDescription",
    "cluster_metadata",
]

_T = TypeVar("_T")
_E = TypeVar("_E", bound=enum.Enum)
_P = ParamSpec("_P")
_R = TypeVar("_R")
_ADMIN_KEYS = ADMIN_CONFIG_DEF.names | frozenset(CONFIG_ALIASES)
_SOURCES = {
    "TOPIC_CONFIG": ConfigSource.DYNAMIC_TOPIC_CONFIG,
    "DYNAMIC_TOPIC_CONFIG": ConfigSource.DYNAMIC_TOPIC_CONFIG,
    "DYNAMIC_BROKER_CONFIG": ConfigSource.DYNAMIC_BROKER_CONFIG,
    "DYNAMIC_DEFAULT_BROKER_CONFIG": ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    "STATIC_BROKER_CONFIG": ConfigSource.STATIC_BROKER_CONFIG,
    "DEFAULT_CONFIG": ConfigSource.DEFAULT_CONFIG,
    "GROUP_CONFIG": ConfigSource.GROUP_CONFIG,
}


def _seconds(timeout: float | None) -> float | None:
    if timeout is None or timeout < 0:
        return None
    return float(timeout)


def _not_implemented(what: str) -> NotImplementedError:
    return NotImplementedError(
        f"AdminClient.{what} is not supported yet by kafka-handoff's admin client (see docs/migrating.md)"
    )


def _failure(exc: BaseException) -> KafkaException:
    return KafkaException(from_exception(exc))


def native_admin(props: Mapping[str, Any]) -> NativeAdminClient:
    """A native admin client from another client's native properties (only the keys an admin has)."""
    return NativeAdminClient({k: v for k, v in props.items() if k in _ADMIN_KEYS})


def cluster_metadata(admin: NativeAdminClient, topic: str | None, timeout: float | None) -> ClusterMetadata:
    """confluent's :class:`ClusterMetadata` (``list_topics()``): brokers, controller, topics (only ``topic``
    when given; a topic that does not exist carries ``UNKNOWN_TOPIC_OR_PART``)."""
    try:
        cluster = admin.describe_cluster(timeout=timeout)
        names = (
            [topic]
            if topic is not None
            else [t.name for t in admin.list_topics(include_internal=True, timeout=timeout)]
        )
        descriptions: dict[str, Any] = {}
        missing: list[str] = []
        if names:
            try:
                descriptions = admin.describe_topics(names, timeout=timeout)
            except native_errors.UnknownTopicOrPartitionError:
                for name in names:  # one at a time: which ones are missing
                    try:
                        descriptions.update(admin.describe_topics([name], timeout=timeout))
                    except native_errors.UnknownTopicOrPartitionError:
                        missing.append(name)
    except native_errors.KafkaError as exc:
        raise _failure(exc) from exc
    out = ClusterMetadata()
    out.cluster_id = cluster.cluster_id
    out.controller_id = cluster.controller_id
    for node in cluster.brokers:
        out.brokers[node.node_id] = BrokerMetadata(node.node_id, node.host, node.port)
    if out.brokers:
        first = min(out.brokers)
        out.orig_broker_id = first
        broker = out.brokers[first]
        out.orig_broker_name = f"{broker.host}:{broker.port}/{first}"
    for name, description in descriptions.items():
        metadata = TopicMetadata(name)
        for p in description.partitions:
            metadata.partitions[p.partition] = PartitionMetadata(
                p.partition, p.leader, p.replicas, p.isr, KafkaError(p.error_code) if p.error_code else None
            )
        out.topics[name] = metadata
    for name in missing:
        out.topics[name] = TopicMetadata(name, error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    return out


_CONFIG_TYPES = {
    ResourceType.TOPIC: native.ConfigResourceType.TOPIC,
    ResourceType.BROKER: native.ConfigResourceType.BROKER,
    ResourceType.GROUP: native.ConfigResourceType.GROUP,
}


def _config_resource(resource: ConfigResource) -> native.ConfigResource:
    if not isinstance(resource, ConfigResource):
        raise TypeError(f"Expected a list of ConfigResource objects, got {resource!r}")
    kind = _CONFIG_TYPES.get(resource.restype)
    if kind is None:
        raise ValueError(
            f"{resource!r}: configs exist for TOPIC, BROKER and GROUP resources, not {resource.restype.name}"
        )
    return native.ConfigResource(kind, resource.name)


def _native_binding(b: AclBinding) -> native.AclBinding:
    return native.AclBinding(
        native.ResourcePattern(
            native.ResourceType(b.restype_int), b.name or "", native.PatternType(b.resource_pattern_type_int)
        ),
        native.AccessControlEntry(
            b.principal or "",
            b.host or "",
            native.AclOperation(b.operation_int),
            native.AclPermissionType(b.permission_type_int),
        ),
    )


def _native_filter(f: AclBindingFilter) -> native.AclBindingFilter:
    return native.AclBindingFilter(
        native.ResourceType(f.restype_int),
        f.name,
        native.PatternType(f.resource_pattern_type_int),
        f.principal,
        f.host,
        native.AclOperation(f.operation_int),
        native.AclPermissionType(f.permission_type_int),
    )


def _member(kind: type[_E], value: int) -> _E:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN: a value confluent-kafka has no name for


def _binding(b: native.AclBinding) -> AclBinding:
    """A binding the broker returned (a value confluent-kafka has no name for becomes UNKNOWN)."""
    return AclBinding._unchecked(
        _member(ResourceType, int(b.pattern.resource_type)),
        b.pattern.name,
        _member(ResourcePatternType, int(b.pattern.pattern_type)),
        b.entry.principal,
        b.entry.host,
        _member(AclOperation, int(b.entry.operation)),
        _member(AclPermissionType, int(b.entry.permission_type)),
    )


def _scram_description(d: native.UserScramCredentialsDescription) -> UserScramCredentialsDescription:
    return UserScramCredentialsDescription(
        d.name,
        [
            ScramCredentialInfo(_member(ScramMechanism, int(c.mechanism)), c.iterations)
            for c in d.credential_infos
        ],
    )


def _scram_alteration(
    a: UserScramCredentialAlteration,
) -> native.UserScramCredentialUpsertion | native.UserScramCredentialDeletion:
    if isinstance(a, UserScramCredentialUpsertion):
        info = a.scram_credential_info
        if not isinstance(info, ScramCredentialInfo) or info.mechanism == ScramMechanism.UNKNOWN:
            raise ValueError(f"{a!r}: scram_credential_info needs a SCRAM_SHA_256 or SCRAM_SHA_512 mechanism")
        password: Any = a.password
        if isinstance(password, bytes):
            try:
                password = password.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"the password of user {a.user!r} must be UTF-8") from None
        if not isinstance(password, str):
            raise TypeError(f"the password of user {a.user!r} must be bytes")
        return native.UserScramCredentialUpsertion(
            a.user,
            native.ScramCredentialInfo(native.ScramMechanism(info.mechanism.value), int(info.iterations)),
            password,
            a.salt,
        )
    if isinstance(a, UserScramCredentialDeletion):
        if a.mechanism == ScramMechanism.UNKNOWN:
            raise ValueError(f"deleting the SCRAM credential of user {a.user!r} needs a mechanism")
        return native.UserScramCredentialDeletion(a.user, native.ScramMechanism(a.mechanism.value))
    raise TypeError(
        f"Expected UserScramCredentialUpsertion or UserScramCredentialDeletion objects, got {a!r}"
    )


def _ordered(*, write: bool) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Calls run in the order the application makes them where it matters, as librdkafka's admin client
    (one queue) does: a call's work starts once the changes of earlier calls (``write=True``: creating,
    deleting, altering) are done, so a read right after a change (``delete_records`` then ``list_offsets``)
    sees it; reads among themselves, and the futures of one call, still run side by side."""

    def wrap(method: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(method)
        def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            self = args[0]
            assert isinstance(self, AdminClient)
            self._call.after = self._earlier_writes()
            try:
                result = method(*args, **kwargs)
            finally:
                self._call.after = ()
            if write:
                self._wrote(result.values() if isinstance(result, dict) else [result])  # type: ignore[list-item]
            return result

        return call

    return wrap


class AdminClient:
    """confluent-kafka's ``AdminClient`` over :class:`kafka_handoff.admin.AdminClient`."""

    def __init__(self, conf: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        if conf is None and not kwargs:
            raise TypeError("expected configuration dict")
        tc = translate_config(conf, "admin", **kwargs)
        self._error_cb = compat_callable(tc, "error_cb")
        try:
            self._native = NativeAdminClient(tc.native)
        except native_errors.ConfigError as exc:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, str(exc))) from exc
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kafka-handoff-compat-admin")
        self._call = threading.local()  # the futures the current call's work waits for
        self._writes: list[Future[Any]] = []  # the not yet done futures of calls that change the cluster
        self._writes_lock = threading.Lock()
        self._idle = threading.Event()
        self._finalizer = weakref.finalize(self, _shutdown, self._native, self._pool)

    # ------------------------------------------------------------------------------------ plumbing
    def _run(self, work: Callable[[], _T]) -> Future[_T]:
        """``work`` on the pool; its native exceptions become the future's ``KafkaException``.  It starts
        once the changes asked for by earlier calls are done (see :func:`_ordered`)."""
        future: Future[_T] = Future()
        after = getattr(self._call, "after", ())

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            if after:
                futures_wait(after)
            try:
                result = work()
            except native_errors.KafkaError as exc:
                future.set_exception(_failure(exc))
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)

        self._pool.submit(run)
        return future

    def _earlier_writes(self) -> list[Future[Any]]:
        with self._writes_lock:
            self._writes = [f for f in self._writes if not f.done()]
            return list(self._writes)

    def _wrote(self, futures: Iterable[Future[Any]]) -> None:
        with self._writes_lock:
            self._writes.extend(futures)

    @staticmethod
    def _timeout(kwargs: Mapping[str, Any]) -> float | None:
        request = kwargs.get("request_timeout")
        return _seconds(float(request)) if request is not None else None

    def close(self) -> None:
        """Stop the client (confluent-kafka's admin client has no close(); garbage collection does this)."""
        self._finalizer()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return True

    def poll(self, timeout: float | None = -1) -> int:
        """No events are queued for the admin client; waits ``timeout`` seconds (as librdkafka does) and
        returns 0."""
        seconds = _seconds(timeout)
        self._idle.wait(seconds if seconds is not None else 0.2)
        return 0

    # -------------------------------------------------------------------------------------- topics
    @_ordered(write=True)
    def create_topics(self, new_topics: list[NewTopic], **kwargs: Any) -> dict[str, Future[None]]:
        """Create topics; ``{topic: future}`` (``result()`` is None once created)."""
        if not isinstance(new_topics, list) or not new_topics:
            raise ValueError("Expected non-empty list of NewTopic objects")
        for topic in new_topics:
            if not isinstance(topic, NewTopic):
                raise TypeError("Expected a list of NewTopic objects")
        validate = bool(kwargs.get("validate_only", False))
        timeout = self._timeout(kwargs)

        def create(topic: NewTopic) -> Callable[[], None]:
            assignment = (
                {i: list(r) for i, r in enumerate(topic.replica_assignment)}
                if topic.replica_assignment
                else None
            )
            native = NativeNewTopic(
                topic.topic,
                -1 if assignment else topic.num_partitions,
                -1 if assignment else topic.replication_factor,
                dict(topic.config),
                assignment,
            )

            def run() -> None:
                self._native.create_topics([native], validate_only=validate, timeout=timeout)

            return run

        return {t.topic: self._run(create(t)) for t in new_topics}

    @_ordered(write=True)
    def delete_topics(self, topics: list[str], **kwargs: Any) -> dict[str, Future[None]]:
        """Delete topics; ``{topic: future}``."""
        if not isinstance(topics, list) or not topics:
            raise ValueError("Expected non-empty list of topic strings")
        timeout = self._timeout(kwargs)

        def delete(name: str) -> Callable[[], None]:
            return lambda: self._native.delete_topics([name], timeout=timeout)

        return {name: self._run(delete(name)) for name in topics}

    @_ordered(write=True)
    def create_partitions(
        self, new_partitions: list[NewPartitions], **kwargs: Any
    ) -> dict[str, Future[None]]:
        """Raise partition counts; ``{topic: future}``."""
        if not isinstance(new_partitions, list) or not new_partitions:
            raise ValueError("Expected non-empty list of NewPartitions objects")
        validate = bool(kwargs.get("validate_only", False))
        timeout = self._timeout(kwargs)
        for p in new_partitions:
            if p.replica_assignment:
                raise _not_implemented("create_partitions(replica_assignment=...)")

        def grow(p: NewPartitions) -> Callable[[], None]:
            return lambda: self._native.create_partitions(
                {p.topic: p.new_total_count}, validate_only=validate, timeout=timeout
            )

        return {p.topic: self._run(grow(p)) for p in new_partitions}

    def list_topics(self, topic: str | None = None, timeout: float | None = -1) -> ClusterMetadata:
        """Brokers and topics (``topic``: only that one), once earlier calls' changes are done."""
        futures_wait(self._earlier_writes())
        return cluster_metadata(self._native, topic, _seconds(timeout))

    @_ordered(write=False)
    def describe_topics(self, topics: TopicCollection, **kwargs: Any) -> dict[str, Future[TopicDescription]]:
        """``{topic: future of TopicDescription}``."""
        if not isinstance(topics, TopicCollection):
            raise TypeError("Expected input to be instance of TopicCollection")
        timeout = self._timeout(kwargs)
        nodes = self._run(lambda: self._nodes(timeout))

        def describe(name: str) -> Callable[[], TopicDescription]:
            def run() -> TopicDescription:
                native = self._native.describe_topics([name], timeout=timeout)[name]
                by_id = nodes.result()
                parts = [
                    TopicPartitionInfo(
                        p.partition,
                        by_id.get(p.leader),
                        [by_id.get(r) or Node(r, "", -1) for r in p.replicas],
                        [by_id.get(r) or Node(r, "", -1) for r in p.isr],
                    )
                    for p in native.partitions
                ]
                return TopicDescription(native.name, native.topic_id, native.internal, parts)

            return run

        return {name: self._run(describe(name)) for name in topics.topic_names}

    def _nodes(self, timeout: float | None) -> dict[int, Node]:
        cluster = self._native.describe_cluster(timeout=timeout)
        return {b.node_id: Node(b.node_id, b.host, b.port, b.rack) for b in cluster.brokers}

    @_ordered(write=False)
    def describe_cluster(self, **kwargs: Any) -> Future[DescribeClusterResult]:
        timeout = self._timeout(kwargs)

        def run() -> DescribeClusterResult:
            cluster = self._native.describe_cluster(timeout=timeout)
            nodes = [Node(b.node_id, b.host, b.port, b.rack) for b in cluster.brokers]
            controller = next((n for n in nodes if n.id == cluster.controller_id), None)
            ops: list[Any] | None = [] if kwargs.get("include_authorized_operations") else None
            return DescribeClusterResult(controller, nodes, cluster.cluster_id, ops)

        return self._run(run)

    @_ordered(write=False)
    def list_offsets(
        self, topic_partition_offsets: Mapping[TopicPartition, OffsetSpec], **kwargs: Any
    ) -> dict[TopicPartition, Future[ListOffsetsResultInfo]]:
        """``{partition: future of ListOffsetsResultInfo}`` for each partition's ``OffsetSpec``."""
        timeout = self._timeout(kwargs)
        level = kwargs.get("isolation_level")
        if level is not None and not isinstance(level, IsolationLevel):
            raise TypeError("isolation_level must be an IsolationLevel")
        isolation = "read_committed" if level == IsolationLevel.READ_COMMITTED else "read_uncommitted"

        def one(tp: TopicPartition, spec: OffsetSpec) -> Callable[[], ListOffsetsResultInfo]:
            def run() -> ListOffsetsResultInfo:
                native_tp = NativeTopicPartition(tp.topic, tp.partition)
                offsets = self._native.list_offsets(
                    [native_tp], spec._value, timeout=timeout, isolation_level=isolation
                )
                return ListOffsetsResultInfo(offsets[native_tp], -1, None)

            return run

        return {tp: self._run(one(tp, spec)) for tp, spec in topic_partition_offsets.items()}

    # ------------------------------------------------------------------------------------- configs
    @_ordered(write=False)
    def describe_configs(
        self, resources: list[ConfigResource], **kwargs: Any
    ) -> dict[ConfigResource, Future[dict[str, ConfigEntry]]]:
        """``{resource: future of {name: ConfigEntry}}`` (topic, broker and group resources; a broker's
        name is its id)."""
        if not isinstance(resources, list) or not resources:
            raise ValueError("Expected non-empty list of ConfigResource objects")
        natives = {r: _config_resource(r) for r in resources}
        timeout = self._timeout(kwargs)

        def describe(resource: ConfigResource) -> Callable[[], dict[str, ConfigEntry]]:
            def run() -> dict[str, ConfigEntry]:
                target = natives[resource]
                entries = self._native.describe_configs([target], timeout=timeout)[target.name]
                return {
                    name: ConfigEntry(
                        name,
                        None if e.sensitive else e.value,
                        _SOURCES.get(e.source, ConfigSource.UNKNOWN_CONFIG),
                        is_read_only=e.read_only,
                        is_default=e.is_default,
                        is_sensitive=e.sensitive,
                    )
                    for name, e in entries.items()
                }

            return run

        return {r: self._run(describe(r)) for r in resources}

    @_ordered(write=True)
    def alter_configs(
        self, resources: list[ConfigResource], **kwargs: Any
    ) -> dict[ConfigResource, Future[None]]:
        """Replace each resource's dynamic configs with its ``set_config`` values (the deprecated
        AlterConfigs: configs not given go back to their defaults); ``{resource: future}``."""
        if not isinstance(resources, list) or not resources:
            raise ValueError("Expected non-empty list of ConfigResource objects")
        natives = {r: _config_resource(r) for r in resources}
        validate = bool(kwargs.get("validate_only", False))
        timeout = self._timeout(kwargs)

        def alter(resource: ConfigResource) -> Callable[[], None]:
            values = {str(k): str(v) for k, v in resource.set_config_dict.items()}  # as librdkafka takes them
            return lambda: self._native.alter_configs(
                {natives[resource]: values}, validate_only=validate, timeout=timeout
            )

        return {r: self._run(alter(r)) for r in resources}

    @_ordered(write=True)
    def incremental_alter_configs(
        self, resources: list[ConfigResource], **kwargs: Any
    ) -> dict[ConfigResource, Future[None]]:
        """Set, delete, append to or subtract from some configs of each resource (its
        ``incremental_configs``: ``ConfigEntry`` objects with an ``incremental_operation``), leaving the
        others; ``{resource: future}``."""
        if not isinstance(resources, list) or not resources:
            raise ValueError("Expected non-empty list of ConfigResource objects")
        natives = {r: _config_resource(r) for r in resources}
        ops: dict[ConfigResource, list[native.AlterConfigOp]] = {}
        for r in resources:
            if not r.incremental_configs:
                raise ValueError(f"{r!r} has no incremental_configs to apply")
            ops[r] = []
            for entry in r.incremental_configs:
                if not isinstance(entry, ConfigEntry) or not isinstance(
                    entry.incremental_operation, AlterConfigOpType
                ):
                    raise TypeError(
                        f"incremental_configs of {r!r} must be ConfigEntry objects with an "
                        f"incremental_operation (AlterConfigOpType), got {entry!r}"
                    )
                op = native.AlterConfigOpType(entry.incremental_operation.value)
                if op != native.AlterConfigOpType.DELETE and entry.value is None:
                    raise ValueError(f"{entry.name}: a {op.name} operation needs a value")
                value = None if entry.value is None else str(entry.value)
                ops[r].append(native.AlterConfigOp(str(entry.name), value, op))
        validate = bool(kwargs.get("validate_only", False))
        timeout = self._timeout(kwargs)

        def alter(resource: ConfigResource) -> Callable[[], None]:
            return lambda: self._native.incremental_alter_configs(
                {natives[resource]: ops[resource]}, validate_only=validate, timeout=timeout
            )

        return {r: self._run(alter(r)) for r in resources}

    # -------------------------------------------------------------------------------------- groups
    @_ordered(write=False)
    def list_consumer_groups(self, **kwargs: Any) -> Future[ListConsumerGroupsResult]:
        """A future of :class:`ListConsumerGroupsResult` (``states=``/``types=`` filter by sets)."""
        states = kwargs.get("states")
        types = kwargs.get("types")
        for given, kind, name in (
            (states, ConsumerGroupState, "states"),
            (types, ConsumerGroupType, "types"),
        ):
            if given is None:
                continue
            if not isinstance(given, set):
                raise TypeError(f"'{name}' must be a set")
            if not all(isinstance(x, kind) for x in given):
                raise TypeError(f"All elements of {name} must be of type {kind.__name__}")
        timeout = self._timeout(kwargs)

        def run() -> ListConsumerGroupsResult:
            valid: list[ConsumerGroupListing] = []
            for g in self._native.list_groups(timeout=timeout):
                if g.type == "share" or g.protocol_type not in ("consumer", ""):
                    continue
                state = ConsumerGroupState.of(g.state)
                kind = ConsumerGroupType.of(g.type or "classic")
                if states and state not in states:
                    continue
                if types and kind not in types:
                    continue
                valid.append(ConsumerGroupListing(g.group_id, g.protocol_type == "", state, kind))
            return ListConsumerGroupsResult(valid, [])

        return self._run(run)

    def list_groups(self, group: str | None = None, timeout: float | None = -1) -> list[GroupMetadata]:
        """The deprecated group listing (``GroupMetadata`` with members), once earlier calls' changes are
        done."""
        futures_wait(self._earlier_writes())
        seconds = _seconds(timeout)
        try:
            # librdkafka's listing is DescribeGroups of what ListGroups names: classic and consumer groups
            ids = (
                [group]
                if group is not None
                else [g.group_id for g in self._native.list_groups(timeout=seconds) if g.type != "share"]
            )
            try:
                described = self._native.describe_groups(ids, timeout=seconds) if ids else {}
            except native_errors.GroupIdNotFoundError:
                if group is not None:
                    raise
                described = {}  # one was deleted since the listing: describe the others one by one
                for group_id in ids:
                    try:
                        described.update(self._native.describe_groups([group_id], timeout=seconds))
                    except native_errors.GroupIdNotFoundError:
                        continue
        except native_errors.KafkaError as exc:
            raise _failure(exc) from exc
        out: list[GroupMetadata] = []
        for group_id, d in described.items():
            g = GroupMetadata()
            g.id = group_id
            g.state = d.state
            g.protocol_type = d.protocol_type
            g.protocol = d.assignor
            if d.coordinator is not None:
                g.broker = BrokerMetadata(d.coordinator.node_id, d.coordinator.host, d.coordinator.port)
            for m in d.members:
                member = GroupMember()
                member.id = m.member_id
                member.client_id = m.client_id
                member.client_host = m.host
                g.members.append(member)
            out.append(g)
        return out

    @_ordered(write=False)
    def describe_consumer_groups(
        self, group_ids: list[str], **kwargs: Any
    ) -> dict[str, Future[ConsumerGroupDescription]]:
        """``{group: future of ConsumerGroupDescription}``."""
        if not isinstance(group_ids, list):
            raise TypeError("Expected input to be list of group ids to be described")
        if not group_ids:
            raise ValueError("Expected at least one group to be described")
        timeout = self._timeout(kwargs)
        ops: list[Any] | None = [] if kwargs.get("include_authorized_operations") else None

        def describe(group_id: str) -> Callable[[], ConsumerGroupDescription]:
            def run() -> ConsumerGroupDescription:
                d = self._native.describe_groups([group_id], timeout=timeout)[group_id]
                members = [
                    MemberDescription(
                        m.member_id,
                        m.client_id,
                        m.host,
                        MemberAssignment([TopicPartition(tp.topic, tp.partition) for tp in m.assignment]),
                        m.group_instance_id,
                        None
                        if m.target_assignment is None
                        else MemberAssignment(
                            [TopicPartition(tp.topic, tp.partition) for tp in m.target_assignment]
                        ),
                    )
                    for m in d.members
                ]
                coordinator = (
                    None
                    if d.coordinator is None
                    else Node(
                        d.coordinator.node_id, d.coordinator.host, d.coordinator.port, d.coordinator.rack
                    )
                )
                return ConsumerGroupDescription(
                    group_id,
                    d.protocol_type == "" and d.state not in ("Dead",),
                    members,
                    d.assignor,
                    ConsumerGroupState.of(d.state),
                    coordinator,
                    ops,
                    ConsumerGroupType.of(d.type),
                )

            return run

        return {g: self._run(describe(g)) for g in group_ids}

    @_ordered(write=True)
    def delete_consumer_groups(self, group_ids: list[str], **kwargs: Any) -> dict[str, Future[None]]:
        if not isinstance(group_ids, list):
            raise TypeError("Expected input to be list of group ids to be deleted")
        if not group_ids:
            raise ValueError("Expected at least one group to be deleted")
        timeout = self._timeout(kwargs)

        def delete(group_id: str) -> Callable[[], None]:
            return lambda: self._native.delete_groups([group_id], timeout=timeout)

        return {g: self._run(delete(g)) for g in group_ids}

    @_ordered(write=False)
    def list_consumer_group_offsets(
        self, list_consumer_group_offsets_request: Sequence[ConsumerGroupTopicPartitions], **kwargs: Any
    ) -> dict[str, Future[ConsumerGroupTopicPartitions]]:
        """``{group: future of ConsumerGroupTopicPartitions}`` with each partition's committed offset
        (``OFFSET_INVALID`` when none)."""
        requests = list(list_consumer_group_offsets_request)
        if len(requests) != 1:
            raise ValueError("Currently we support listing offsets for a single consumer group only")
        timeout = self._timeout(kwargs)

        def one(request: ConsumerGroupTopicPartitions) -> Callable[[], ConsumerGroupTopicPartitions]:
            def run() -> ConsumerGroupTopicPartitions:
                wanted = (
                    None
                    if request.topic_partitions is None
                    else [NativeTopicPartition(tp.topic, tp.partition) for tp in request.topic_partitions]
                )
                offsets = self._native.list_group_offsets(request.group_id, wanted, timeout=timeout)
                out: list[TopicPartition] = []
                for tp, om in sorted(offsets.items()):
                    if om is None:
                        out.append(TopicPartition(tp.topic, tp.partition, OFFSET_INVALID))
                    else:
                        out.append(TopicPartition(tp.topic, tp.partition, om.offset, om.metadata or None))
                return ConsumerGroupTopicPartitions(request.group_id, out)

            return run

        return {r.group_id: self._run(one(r)) for r in requests}

    @_ordered(write=True)
    def alter_consumer_group_offsets(
        self, alter_consumer_group_offsets_request: Sequence[ConsumerGroupTopicPartitions], **kwargs: Any
    ) -> dict[str, Future[ConsumerGroupTopicPartitions]]:
        """Commit offsets for a group that has no active members: ``{group: future of
        ConsumerGroupTopicPartitions}`` echoing the partitions and offsets committed."""
        requests = list(alter_consumer_group_offsets_request)
        if len(requests) != 1:
            raise ValueError("Currently we support altering consumer group offsets for a single group only")
        for request in requests:
            if not isinstance(request, ConsumerGroupTopicPartitions):
                raise TypeError("Expected a list of ConsumerGroupTopicPartitions objects")
            if not request.topic_partitions:
                raise ValueError("topic_partitions of the request must not be empty")
            for tp in request.topic_partitions:
                if tp.offset < 0:
                    raise ValueError(f"offset of {tp.topic} [{tp.partition}] must be >= 0, got {tp.offset}")
        timeout = self._timeout(kwargs)

        def one(request: ConsumerGroupTopicPartitions) -> Callable[[], ConsumerGroupTopicPartitions]:
            parts = list(request.topic_partitions or [])

            def run() -> ConsumerGroupTopicPartitions:
                offsets = {
                    NativeTopicPartition(tp.topic, tp.partition): NativeOffsetAndMetadata(
                        tp.offset, tp.metadata or "", tp.leader_epoch
                    )
                    for tp in parts
                }
                self._native.alter_consumer_group_offsets(request.group_id, offsets, timeout=timeout)
                return ConsumerGroupTopicPartitions(
                    request.group_id,
                    [TopicPartition(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in parts],
                )

            return run

        return {r.group_id: self._run(one(r)) for r in requests}

    # ---------------------------------------------------------------------------------------- ACLs
    @_ordered(write=True)
    def create_acls(self, acls: list[AclBinding], **kwargs: Any) -> dict[AclBinding, Future[None]]:
        """Create ACL bindings; ``{binding: future}``."""
        if not isinstance(acls, list) or not acls:
            raise ValueError("Expected non-empty list of AclBinding objects")
        for b in acls:
            if not isinstance(b, AclBinding) or isinstance(b, AclBindingFilter):
                raise TypeError("Expected a list of AclBinding objects")
        if len(set(acls)) != len(acls):
            raise ValueError("duplicate ACL bindings not allowed")
        timeout = self._timeout(kwargs)

        def create(b: AclBinding) -> Callable[[], None]:
            return lambda: self._native.create_acls([_native_binding(b)], timeout=timeout)

        return {b: self._run(create(b)) for b in acls}

    @_ordered(write=False)
    def describe_acls(self, acl_binding_filter: AclBindingFilter, **kwargs: Any) -> Future[list[AclBinding]]:
        """A future of the ACL bindings matching the filter."""
        if not isinstance(acl_binding_filter, AclBindingFilter):
            raise TypeError("Expected an AclBindingFilter object")
        flt = _native_filter(acl_binding_filter)
        timeout = self._timeout(kwargs)
        return self._run(lambda: [_binding(b) for b in self._native.describe_acls(flt, timeout=timeout)])

    @_ordered(write=True)
    def delete_acls(
        self, acl_binding_filters: list[AclBindingFilter], **kwargs: Any
    ) -> dict[AclBindingFilter, Future[list[AclBinding]]]:
        """Delete the ACL bindings matching each filter; ``{filter: future of the deleted bindings}``."""
        if not isinstance(acl_binding_filters, list) or not acl_binding_filters:
            raise ValueError("Expected non-empty list of AclBindingFilter objects")
        for f in acl_binding_filters:
            if not isinstance(f, AclBindingFilter):
                raise TypeError("Expected a list of AclBindingFilter objects")
        if len(set(acl_binding_filters)) != len(acl_binding_filters):
            raise ValueError("duplicate ACL binding filters not allowed")
        timeout = self._timeout(kwargs)

        def delete(f: AclBindingFilter) -> Callable[[], list[AclBinding]]:
            flt = _native_filter(f)
            return lambda: [_binding(b) for b in self._native.delete_acls([flt], timeout=timeout)]

        return {f: self._run(delete(f)) for f in acl_binding_filters}

    # ---------------------------------------------------------------------------------------- SCRAM
    @_ordered(write=False)
    def describe_user_scram_credentials(
        self, users: list[str] | None = None, **kwargs: Any
    ) -> (
        Future[dict[str, UserScramCredentialsDescription]]
        | dict[str, Future[UserScramCredentialsDescription]]
    ):
        """``users=None``: a future of ``{user: UserScramCredentialsDescription}`` for every user with
        credentials; a list of users: ``{user: future}`` (``RESOURCE_NOT_FOUND`` for a user without any)."""
        timeout = self._timeout(kwargs)
        if users is None:
            return self._run(
                lambda: {
                    name: _scram_description(d)
                    for name, d in self._native.describe_user_scram_credentials(None, timeout=timeout).items()
                }
            )
        if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
            raise TypeError("Expected users to be a list of str")
        if not users:
            raise ValueError("Expected at least one user")

        def describe(user: str) -> Callable[[], UserScramCredentialsDescription]:
            return lambda: _scram_description(
                self._native.describe_user_scram_credentials([user], timeout=timeout)[user]
            )

        return {u: self._run(describe(u)) for u in users}

    @_ordered(write=True)
    def alter_user_scram_credentials(
        self, alterations: list[UserScramCredentialAlteration], **kwargs: Any
    ) -> dict[str, Future[None]]:
        """Upsert or delete users' SCRAM credentials; ``{user: future}``."""
        if not isinstance(alterations, list) or not alterations:
            raise ValueError("Expected non-empty list of UserScramCredentialAlteration objects")
        by_user: dict[str, list[Any]] = {}
        for a in alterations:
            by_user.setdefault(a.user, []).append(_scram_alteration(a))
        timeout = self._timeout(kwargs)

        def alter(user: str) -> Callable[[], None]:
            return lambda: self._native.alter_user_scram_credentials(by_user[user], timeout=timeout)

        return {u: self._run(alter(u)) for u in by_user}

    # ------------------------------------------------------------------------------ records, leaders
    @_ordered(write=True)
    def delete_records(
        self, topic_partition_offsets: list[TopicPartition], **kwargs: Any
    ) -> dict[TopicPartition, Future[DeletedRecords]]:
        """Delete each partition's records before its ``offset`` (``OFFSET_END``, -1: all of them);
        ``{partition: future of DeletedRecords}`` (the new low watermark)."""
        if not isinstance(topic_partition_offsets, list) or not topic_partition_offsets:
            raise ValueError("Expected non-empty list of TopicPartition objects")
        keys = {(tp.topic, tp.partition) for tp in topic_partition_offsets}
        if len(keys) != len(topic_partition_offsets):
            raise ValueError("Duplicate partitions in topic_partition_offsets")
        for tp in topic_partition_offsets:
            if tp.offset < 0 and tp.offset != -1:
                raise ValueError(f"offset of {tp.topic} [{tp.partition}] must be >= 0 or OFFSET_END (-1)")
        timeout = self._timeout(kwargs)

        def delete(tp: TopicPartition) -> Callable[[], DeletedRecords]:
            def run() -> DeletedRecords:
                ntp = NativeTopicPartition(tp.topic, tp.partition)
                done = self._native.delete_records({ntp: tp.offset}, timeout=timeout)
                return DeletedRecords(done[ntp].low_watermark)

            return run

        return {tp: self._run(delete(tp)) for tp in topic_partition_offsets}

    @_ordered(write=True)
    def elect_leaders(
        self, election_type: ElectionType, partitions: list[TopicPartition] | None = None, **kwargs: Any
    ) -> Future[dict[TopicPartition, KafkaError | None]]:
        """Elect preferred or unclean leaders of ``partitions`` (``None``: every partition that needs one);
        a future of ``{partition: None (elected) or its KafkaError}`` (``ELECTION_NOT_NEEDED`` when the
        preferred replica leads already)."""
        if not isinstance(election_type, ElectionType):
            raise TypeError("Expected election_type to be an ElectionType")
        if partitions is not None and (
            not isinstance(partitions, list) or not all(isinstance(tp, TopicPartition) for tp in partitions)
        ):
            raise TypeError("Expected partitions to be a list of TopicPartition objects or None")
        wanted = (
            None
            if partitions is None
            else [NativeTopicPartition(tp.topic, tp.partition) for tp in partitions]
        )
        kind = native.ElectionType(election_type.value)
        timeout = self._timeout(kwargs)

        def run() -> dict[TopicPartition, KafkaError | None]:
            outcome = self._native.elect_leaders(kind, wanted, timeout=timeout)
            return {
                TopicPartition(tp.topic, tp.partition): None if err is None else from_exception(err)
                for tp, err in outcome.items()
            }

        return self._run(run)

    def set_sasl_credentials(self, username: str, password: str) -> None:
        raise _not_implemented("set_sasl_credentials()")


def _shutdown(native: NativeAdminClient, pool: ThreadPoolExecutor) -> None:
    pool.shutdown(wait=False, cancel_futures=True)
    try:
        native.close(5)
    except Exception:  # a finalizer must not raise
        pass
