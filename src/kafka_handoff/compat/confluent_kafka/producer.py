"""confluent-kafka's ``Producer`` and ``SerializingProducer`` over :class:`kafka_handoff.Producer`.

Placeholder: the producer side of issue 27 fills this module in (branch i27-producer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_handoff.compat.confluent_kafka.error import KafkaError, KafkaException

__all__ = ["Producer", "SerializingProducer"]


class Producer:
    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED, "Producer is not implemented yet"))


class SerializingProducer(Producer):
    pass
