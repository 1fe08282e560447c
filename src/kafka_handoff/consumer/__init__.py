"""The consumer: application-thread facade, subscription state, fetching and offsets."""

from kafka_handoff.consumer.consumer import Consumer
from kafka_handoff.consumer.records import ConsumerRecords

__all__ = ["Consumer", "ConsumerRecords"]
