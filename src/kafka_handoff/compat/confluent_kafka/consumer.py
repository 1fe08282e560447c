"""confluent-kafka's ``Consumer`` over :class:`kafka_handoff.Consumer` (branch i27-confluent)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_handoff.compat.confluent_kafka.error import KafkaError, KafkaException

__all__ = ["Consumer"]


class Consumer:
    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED, "Consumer is not implemented yet"))
