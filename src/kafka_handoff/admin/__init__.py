"""The admin client: topics, cluster description, consumer groups of both protocols, group offsets."""

from kafka_handoff.admin.admin import AdminClient, OffsetSpec
from kafka_handoff.admin.results import (
    ClusterDescription,
    ConfigEntry,
    CreateTopicResult,
    GroupDescription,
    GroupListing,
    MemberDescription,
    NewTopic,
    TopicDescription,
    TopicListing,
)
from kafka_handoff.admin.share import ShareGroupDescription, ShareMemberDescription, SharePartitionOffset

__all__ = [
    "AdminClient",
    "ClusterDescription",
    "ConfigEntry",
    "CreateTopicResult",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "NewTopic",
    "OffsetSpec",
    "ShareGroupDescription",
    "ShareMemberDescription",
    "SharePartitionOffset",
    "TopicDescription",
    "TopicListing",
]
