"""KIP-932 share groups: :class:`ShareConsumer` and its parts."""

from kafka_handoff.share.consumer import AcknowledgementCommitCallback, ShareConsumer
from kafka_handoff.share.fetcher import AcknowledgeType
from kafka_handoff.share.records import ShareConsumerRecord, ShareRecords

__all__ = [
    "AcknowledgeType",
    "AcknowledgementCommitCallback",
    "ShareConsumer",
    "ShareConsumerRecord",
    "ShareRecords",
]
