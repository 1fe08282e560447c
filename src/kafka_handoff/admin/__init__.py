"""The admin client: topics, cluster description, consumer groups of both protocols, group offsets (list,
alter, delete, reset), configs, records, ACLs and SCRAM credentials."""

from kafka_handoff.admin.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
)
from kafka_handoff.admin.admin import AdminClient, OffsetSpec
from kafka_handoff.admin.configs import AlterConfigOp, AlterConfigOpType, ConfigResource, ConfigResourceType
from kafka_handoff.admin.group_offsets import OffsetReset, ResetSpec
from kafka_handoff.admin.records import DeletedRecords, RecordsToDelete
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
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "AdminClient",
    "AlterConfigOp",
    "AlterConfigOpType",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "CreateTopicResult",
    "DeletedRecords",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "NewTopic",
    "OffsetReset",
    "OffsetSpec",
    "PatternType",
    "RecordsToDelete",
    "ResetSpec",
    "ResourcePattern",
    "ResourceType",
    "ScramCredentialInfo",
    "ScramMechanism",
    "ShareGroupDescription",
    "ShareMemberDescription",
    "SharePartitionOffset",
    "TopicDescription",
    "TopicListing",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "UserScramCredentialsDescription",
]
