"""confluent-kafka's ``admin`` module (``AdminClient``, ``NewTopic``, ...) over kafka-handoff's AdminClient.

Placeholder: the producer side of issue 27 fills this module in (branch i27-producer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_handoff.compat.confluent_kafka.error import KafkaError, KafkaException
from kafka_handoff.compat.confluent_kafka.types import (
    BrokerMetadata,
    ClusterMetadata,
    GroupMember,
    GroupMetadata,
    PartitionMetadata,
    TopicMetadata,
)

__all__ = [
    "AdminClient",
    "BrokerMetadata",
    "ClusterMetadata",
    "GroupMember",
    "GroupMetadata",
    "PartitionMetadata",
    "TopicMetadata",
]


class AdminClient:
    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED, "AdminClient is not implemented yet"))
