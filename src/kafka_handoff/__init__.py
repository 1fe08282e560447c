"""kafka-handoff: a Python Kafka client whose consumer hands partitions between group members
without stalls and without duplicates.

Everything an application names is importable from here::

    from kafka_handoff import Consumer, Producer, AdminClient, TopicPartition, OffsetAndMetadata
    from kafka_handoff import AsyncConsumer, AsyncProducer, AsyncAdminClient   # asyncio

The submodule paths (``kafka_handoff.consumer``, ``kafka_handoff.producer``, ``kafka_handoff.admin``,
``kafka_handoff.errors``, ``kafka_handoff.types``) keep working.
"""

from kafka_handoff._build import BuildInfo, build_info
from kafka_handoff._version import __version__
from kafka_handoff.admin import (
    AdminClient,
    ClusterDescription,
    ConfigEntry,
    CreateTopicResult,
    GroupDescription,
    GroupListing,
    MemberDescription,
    NewTopic,
    OffsetSpec,
    TopicDescription,
    TopicListing,
)
from kafka_handoff.aio import (
    AsyncAdminClient,
    AsyncConsumer,
    AsyncProducer,
    AsyncRebalanceConsumer,
    AsyncRebalanceListenerBase,
    WrongEventLoopError,
)
from kafka_handoff.consumer import Consumer, ConsumerRecords
from kafka_handoff.consumer.listener import (
    CommitCallback,
    ConsumerRebalanceListener,
    RebalanceConsumer,
    RebalanceListener,
    RebalanceListenerBase,
)
from kafka_handoff.errors import (
    BrokerResponseError,
    CommitFailedError,
    ConfigError,
    CorruptRecordError,
    DeliveryFailedError,
    FencedError,
    GroupAuthorizationFailedError,
    IllegalStateError,
    InterruptError,
    KafkaError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    SerializationError,
    TopicAuthorizationFailedError,
    WakeupError,
)
from kafka_handoff.producer import Producer
from kafka_handoff.share import AcknowledgeType, ShareConsumer, ShareConsumerRecord, ShareRecords
from kafka_handoff.types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    PartitionInfo,
    RecordMetadata,
    TopicPartition,
)

__all__ = [
    "AcknowledgeType",
    "AdminClient",
    "AsyncAdminClient",
    "AsyncConsumer",
    "AsyncProducer",
    "AsyncRebalanceConsumer",
    "AsyncRebalanceListenerBase",
    "BrokerResponseError",
    "BuildInfo",
    "ClusterDescription",
    "CommitCallback",
    "CommitFailedError",
    "ConfigEntry",
    "ConfigError",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerRecords",
    "CorruptRecordError",
    "CreateTopicResult",
    "DeliveryFailedError",
    "FencedError",
    "GroupAuthorizationFailedError",
    "GroupDescription",
    "GroupListing",
    "IllegalStateError",
    "InterruptError",
    "KafkaError",
    "KafkaTimeoutError",
    "MemberDescription",
    "NewTopic",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "OffsetSpec",
    "PartitionInfo",
    "Producer",
    "RebalanceConsumer",
    "RebalanceListener",
    "RebalanceListenerBase",
    "RecordMetadata",
    "SerializationError",
    "ShareConsumer",
    "ShareConsumerRecord",
    "ShareRecords",
    "TopicAuthorizationFailedError",
    "TopicDescription",
    "TopicListing",
    "TopicPartition",
    "WakeupError",
    "WrongEventLoopError",
    "__version__",
    "build_info",
]
