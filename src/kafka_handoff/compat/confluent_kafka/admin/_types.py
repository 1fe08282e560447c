"""confluent-kafka's admin value types (``NewTopic``, ``ConfigResource``, group descriptions, ...)."""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from kafka_handoff.compat.confluent_kafka.error import KafkaError
from kafka_handoff.compat.confluent_kafka.types import Node, TopicPartition

__all__ = [
    "CONFIG_SOURCE_DEFAULT_CONFIG",
    "CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG",
    "CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG",
    "CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG",
    "CONFIG_SOURCE_GROUP_CONFIG",
    "CONFIG_SOURCE_STATIC_BROKER_CONFIG",
    "CONFIG_SOURCE_UNKNOWN_CONFIG",
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
    "AlterConfigOpType",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "ConsumerGroupState",
    "ConsumerGroupType",
    "DeletedRecords",
    "DescribeClusterResult",
    "ElectionType",
    "IsolationLevel",
    "ListConsumerGroupsResult",
    "ListOffsetsResultInfo",
    "MemberAssignment",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "ResourcePatternType",
    "ResourceType",
    "ScramCredentialInfo",
    "ScramMechanism",
    "TopicDescription",
    "TopicPartitionInfo",
    "UserScramCredentialAlteration",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "UserScramCredentialsDescription",
]

# librdkafka's rd_kafka_ResourceType_t and rd_kafka_ConfigSource_t values.
RESOURCE_UNKNOWN = 0
RESOURCE_ANY = 1
RESOURCE_TOPIC = 2
RESOURCE_GROUP = 3
RESOURCE_BROKER = 4
RESOURCE_TRANSACTIONAL_ID = 5

CONFIG_SOURCE_UNKNOWN_CONFIG = 0
CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG = 1
CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG = 2
CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = 3
CONFIG_SOURCE_STATIC_BROKER_CONFIG = 4
CONFIG_SOURCE_DEFAULT_CONFIG = 5
CONFIG_SOURCE_GROUP_CONFIG = 8


class ResourceType(enum.Enum):
    UNKNOWN = RESOURCE_UNKNOWN
    ANY = RESOURCE_ANY
    TOPIC = RESOURCE_TOPIC
    GROUP = RESOURCE_GROUP
    BROKER = RESOURCE_BROKER
    TRANSACTIONAL_ID = RESOURCE_TRANSACTIONAL_ID

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, ResourceType):
            return NotImplemented
        return bool(self.value < other.value)


class ConfigSource(enum.Enum):
    UNKNOWN_CONFIG = CONFIG_SOURCE_UNKNOWN_CONFIG
    DYNAMIC_TOPIC_CONFIG = CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG
    DYNAMIC_BROKER_CONFIG = CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG
    DYNAMIC_DEFAULT_BROKER_CONFIG = CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG
    STATIC_BROKER_CONFIG = CONFIG_SOURCE_STATIC_BROKER_CONFIG
    DEFAULT_CONFIG = CONFIG_SOURCE_DEFAULT_CONFIG
    GROUP_CONFIG = CONFIG_SOURCE_GROUP_CONFIG


class AlterConfigOpType(enum.Enum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConsumerGroupState(enum.Enum):
    UNKNOWN = 0
    UNKOWN = 0  # confluent-kafka's historical misspelling (an alias)
    PREPARING_REBALANCING = 1
    COMPLETING_REBALANCING = 2
    STABLE = 3
    DEAD = 4
    EMPTY = 5

    @classmethod
    def of(cls, state: str | None) -> ConsumerGroupState:
        """From the broker's state name (``Stable``, ``PreparingRebalance``, ``Assigning``, ...)."""
        return {
            "stable": cls.STABLE,
            "empty": cls.EMPTY,
            "dead": cls.DEAD,
            "preparingrebalance": cls.PREPARING_REBALANCING,
            "completingrebalance": cls.COMPLETING_REBALANCING,
            "assigning": cls.PREPARING_REBALANCING,
            "reconciling": cls.COMPLETING_REBALANCING,
        }.get((state or "").lower(), cls.UNKNOWN)

    def broker_names(self) -> frozenset[str]:
        return frozenset(
            {
                "STABLE": {"Stable"},
                "EMPTY": {"Empty"},
                "DEAD": {"Dead"},
                "PREPARING_REBALANCING": {"PreparingRebalance", "Assigning"},
                "COMPLETING_REBALANCING": {"CompletingRebalance", "Reconciling"},
            }.get(self.name, set())
        )


class ConsumerGroupType(enum.Enum):
    UNKNOWN = 0
    CONSUMER = 1
    CLASSIC = 2

    @classmethod
    def of(cls, kind: str | None) -> ConsumerGroupType:
        return {"consumer": cls.CONSUMER, "classic": cls.CLASSIC}.get((kind or "").lower(), cls.UNKNOWN)


class IsolationLevel(enum.Enum):
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class NewTopic:
    """A topic to create: ``NewTopic(topic, num_partitions=-1, replication_factor=-1,
    replica_assignment=None, config=None)``."""

    def __init__(
        self,
        topic: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        replica_assignment: Sequence[Sequence[int]] | None = None,
        config: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(topic, str):
            raise TypeError("NewTopic: topic must be a str")
        self.topic = topic
        self.num_partitions = int(num_partitions)
        self.replication_factor = int(replication_factor)
        self.replica_assignment = [list(r) for r in replica_assignment] if replica_assignment else None
        self.config = {str(k): str(v) for k, v in (config or {}).items()}

    def __repr__(self) -> str:
        return f"NewTopic(topic={self.topic},num_partitions={self.num_partitions})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NewTopic) and other.topic == self.topic

    def __hash__(self) -> int:
        return hash(self.topic)


class NewPartitions:
    """Raise a topic's partition count: ``NewPartitions(topic, new_total_count, replica_assignment=None)``."""

    def __init__(
        self, topic: str, new_total_count: int, replica_assignment: Sequence[Sequence[int]] | None = None
    ) -> None:
        self.topic = topic
        self.new_total_count = int(new_total_count)
        self.replica_assignment = [list(r) for r in replica_assignment] if replica_assignment else None

    def __repr__(self) -> str:
        return f"NewPartitions(topic={self.topic},new_total_count={self.new_total_count})"


class ConfigEntry:
    """One configuration entry of a described resource."""

    def __init__(
        self,
        name: str,
        value: str | None,
        source: ConfigSource = ConfigSource.UNKNOWN_CONFIG,
        is_read_only: bool = False,
        is_default: bool = False,
        is_sensitive: bool = False,
        is_synonym: bool = False,
        synonyms: Mapping[str, ConfigEntry] | None = None,
        incremental_operation: AlterConfigOpType | None = None,
    ) -> None:
        self.name = name
        self.value = value
        self.source = source
        self.is_read_only = bool(is_read_only)
        self.is_default = bool(is_default)
        self.is_sensitive = bool(is_sensitive)
        self.is_synonym = bool(is_synonym)
        self.synonyms = dict(synonyms or {})
        self.incremental_operation = incremental_operation

    def __repr__(self) -> str:
        return f'ConfigEntry({self.name}="{self.value}")'

    def __str__(self) -> str:
        return f'{self.name}="{self.value}"'


@functools.total_ordering
class ConfigResource:
    """A resource whose configuration is described or altered: ``ConfigResource(restype, name,
    set_config=None, described_configs=None, error=None, incremental_configs=None)``."""

    Type = ResourceType

    def __init__(
        self,
        restype: ResourceType | str | int,
        name: str,
        set_config: Mapping[str, str] | None = None,
        described_configs: Mapping[str, ConfigEntry] | None = None,
        error: KafkaError | None = None,
        incremental_configs: Sequence[ConfigEntry] | None = None,
    ) -> None:
        if name is None:
            raise ValueError("Expected resource name to be a string")
        if isinstance(restype, str):
            try:
                restype = ResourceType[restype.upper()]
            except KeyError:
                raise ValueError(f"Unknown resource type {restype!r}: should be a ResourceType") from None
        elif isinstance(restype, int):
            restype = ResourceType(restype)
        self.restype = restype
        self.restype_int = int(restype.value)
        self.name = name
        self.set_config_dict = dict(set_config or {})
        self.incremental_configs = list(incremental_configs or [])
        self.configs = dict(described_configs) if described_configs is not None else None
        self.error = error

    def __repr__(self) -> str:
        if self.error is not None:
            return f"ConfigResource({self.restype},{self.name},{self.error!r})"
        return f"ConfigResource({self.restype},{self.name})"

    def __hash__(self) -> int:
        return hash((self.restype, self.name))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigResource):
            return NotImplemented
        return self.restype == other.restype and self.name == other.name

    def __lt__(self, other: ConfigResource) -> bool:
        return (self.restype.value, self.name) < (other.restype.value, other.name)

    def __len__(self) -> int:
        """The number of configuration entries set (``set_config``)."""
        return len(self.set_config_dict)

    def set_config(self, name: str, value: str, overwrite: bool = True) -> None:
        if not overwrite and name in self.set_config_dict:
            return
        self.set_config_dict[name] = value

    def add_incremental_config(self, config_entry: ConfigEntry) -> None:
        self.incremental_configs.append(config_entry)


class ConsumerGroupListing:
    def __init__(
        self,
        group_id: str,
        is_simple_consumer_group: bool,
        state: ConsumerGroupState | None = None,
        type: ConsumerGroupType | None = None,
    ) -> None:
        self.group_id = group_id
        self.is_simple_consumer_group = is_simple_consumer_group
        self.state = state
        self.type = type

    def __repr__(self) -> str:
        return f"ConsumerGroupListing({self.group_id}, {self.state}, {self.type})"


class ListConsumerGroupsResult:
    def __init__(
        self, valid: list[ConsumerGroupListing] | None = None, errors: list[KafkaError] | None = None
    ) -> None:
        self.valid = valid if valid is not None else []
        self.errors = errors if errors is not None else []


class MemberAssignment:
    def __init__(self, topic_partitions: list[TopicPartition] | None = None) -> None:
        self.topic_partitions = topic_partitions or []


class MemberDescription:
    def __init__(
        self,
        member_id: str,
        client_id: str,
        host: str,
        assignment: MemberAssignment,
        group_instance_id: str | None = None,
        target_assignment: MemberAssignment | None = None,
    ) -> None:
        self.member_id = member_id
        self.client_id = client_id
        self.host = host
        self.assignment = assignment
        self.group_instance_id = group_instance_id
        self.target_assignment = target_assignment


class ConsumerGroupDescription:
    def __init__(
        self,
        group_id: str,
        is_simple_consumer_group: bool,
        members: list[MemberDescription],
        partition_assignor: str,
        state: ConsumerGroupState,
        coordinator: Node | None,
        authorized_operations: list[Any] | None = None,
        type: ConsumerGroupType = ConsumerGroupType.UNKNOWN,
    ) -> None:
        self.group_id = group_id
        self.is_simple_consumer_group = is_simple_consumer_group
        self.members = members
        self.partition_assignor = partition_assignor
        self.state = state
        self.coordinator = coordinator
        self.authorized_operations = authorized_operations
        self.type = type


class TopicPartitionInfo:
    def __init__(self, id: int, leader: Node | None, replicas: list[Node], isr: list[Node]) -> None:
        self.id = id
        self.leader = leader
        self.replicas = replicas
        self.isr = isr


class TopicDescription:
    def __init__(
        self,
        name: str,
        topic_id: Any,
        is_internal: bool,
        partitions: list[TopicPartitionInfo],
        authorized_operations: list[Any] | None = None,
    ) -> None:
        self.name = name
        self.topic_id = topic_id
        self.is_internal = is_internal
        self.partitions = partitions
        self.authorized_operations = authorized_operations


class DescribeClusterResult:
    def __init__(
        self,
        controller: Node | None,
        nodes: list[Node],
        cluster_id: str | None = None,
        authorized_operations: list[Any] | None = None,
    ) -> None:
        self.controller = controller
        self.nodes = nodes
        self.cluster_id = cluster_id
        self.authorized_operations = authorized_operations


class OffsetSpec:
    """Which offset ``list_offsets`` asks for: ``OffsetSpec.earliest()``, ``latest()``,
    ``max_timestamp()``, ``for_timestamp(ms)``."""

    __slots__ = ("_value",)

    def __init__(self, value: int) -> None:
        self._value = value

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return cls(-2)

    @classmethod
    def latest(cls) -> OffsetSpec:
        return cls(-1)

    @classmethod
    def max_timestamp(cls) -> OffsetSpec:
        return cls(-3)

    @classmethod
    def for_timestamp(cls, timestamp: int) -> OffsetSpec:
        return cls(int(timestamp))

    def __repr__(self) -> str:
        return f"OffsetSpec({self._value})"


class ListOffsetsResultInfo:
    def __init__(self, offset: int, timestamp: int, leader_epoch: int | None) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.leader_epoch = leader_epoch


# ---------------------------------------------------------------------------------------------------------
# Types of calls kafka-handoff's admin client does not support yet (ACLs, SCRAM, records, elections): defined
# so that programs importing them load; the AdminClient methods taking them raise NotImplementedError.
# ---------------------------------------------------------------------------------------------------------


class AclOperation(enum.Enum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class AclPermissionType(enum.Enum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class ResourcePatternType(enum.Enum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class ScramMechanism(enum.Enum):
    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2


class ElectionType(enum.Enum):
    PREFERRED = 0
    UNCLEAN = 1


class AclBinding:
    """An ACL: resource, pattern, principal, host, operation and permission."""

    def __init__(
        self,
        restype: ResourceType,
        name: str | None,
        resource_pattern_type: ResourcePatternType,
        principal: str | None,
        host: str | None,
        operation: AclOperation,
        permission_type: AclPermissionType,
    ) -> None:
        self.restype = restype
        self.name = name
        self.resource_pattern_type = resource_pattern_type
        self.principal = principal
        self.host = host
        self.operation = operation
        self.permission_type = permission_type


class AclBindingFilter(AclBinding):
    """An ACL filter (``None`` fields and ``ANY`` values match everything)."""


class ScramCredentialInfo:
    def __init__(self, mechanism: ScramMechanism, iterations: int) -> None:
        self.mechanism = mechanism
        self.iterations = iterations


class UserScramCredentialsDescription:
    def __init__(self, user: str, scram_credential_infos: list[ScramCredentialInfo]) -> None:
        self.user = user
        self.scram_credential_infos = scram_credential_infos


class UserScramCredentialAlteration:
    def __init__(self, user: str) -> None:
        self.user = user


class UserScramCredentialUpsertion(UserScramCredentialAlteration):
    def __init__(
        self,
        user: str,
        scram_credential_info: ScramCredentialInfo,
        password: bytes,
        salt: bytes | None = None,
    ) -> None:
        super().__init__(user)
        self.scram_credential_info = scram_credential_info
        self.password = password
        self.salt = salt


class UserScramCredentialDeletion(UserScramCredentialAlteration):
    def __init__(self, user: str, mechanism: ScramMechanism) -> None:
        super().__init__(user)
        self.mechanism = mechanism


class DeletedRecords:
    def __init__(self, low_watermark: int) -> None:
        self.low_watermark = low_watermark
