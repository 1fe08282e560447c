"""kafka-python's API on kafka-handoff: change ``from kafka import ...`` to
``from kafka_handoff.compat.kafka_python import ...`` (see docs/migrating.md).

``KafkaConsumer`` (iteration, ``consumer_timeout_ms``, ``poll()`` -> dict, seeks, commits, rebalance
listeners), ``KafkaProducer`` (``send(...).get()``, callbacks, serializers), ``KafkaAdminClient`` (its
common calls) and kafka-python's value types, serializers and error names (``errors``).
"""

from kafka_handoff.compat.kafka_python import errors
from kafka_handoff.compat.kafka_python.admin import (
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    NewPartitions,
    NewTopic,
)
from kafka_handoff.compat.kafka_python.assignors import (
    CooperativeStickyPartitionAssignor,
    RangePartitionAssignor,
    RoundRobinPartitionAssignor,
    StickyPartitionAssignor,
)
from kafka_handoff.compat.kafka_python.consumer import ConsumerRebalanceListener, KafkaConsumer
from kafka_handoff.compat.kafka_python.future import Future
from kafka_handoff.compat.kafka_python.producer import FutureRecordMetadata, KafkaProducer
from kafka_handoff.compat.kafka_python.serializer import (
    DefaultSerializer,
    Deserializer,
    JsonSerializer,
    Serializer,
)
from kafka_handoff.compat.kafka_python.structs import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    IsolationLevel,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)

__version__ = "2.2.0"
"""The kafka-python API level this layer follows (2.x names; 3.x additions where noted)."""

__all__ = [
    "ConfigResource",
    "ConfigResourceType",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "CooperativeStickyPartitionAssignor",
    "DefaultSerializer",
    "Deserializer",
    "Future",
    "FutureRecordMetadata",
    "IsolationLevel",
    "JsonSerializer",
    "KafkaAdminClient",
    "KafkaConsumer",
    "KafkaProducer",
    "NewPartitions",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "RangePartitionAssignor",
    "RecordMetadata",
    "RoundRobinPartitionAssignor",
    "Serializer",
    "StickyPartitionAssignor",
    "TopicPartition",
    "__version__",
    "errors",
]
