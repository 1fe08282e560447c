"""kafka-python's ``kafka.errors`` names, on kafka-handoff's exceptions.

Names that kafka-handoff has under the same meaning are the native classes themselves (so an error the native
client raises is caught by the kafka-python name); kafka-python-only names are subclasses of
:class:`KafkaError`.
"""

from __future__ import annotations

from kafka_handoff.errors import (
    AuthenticationError,
    BrokerResponseError,
    CommitFailedError,
    ConcurrentTransactionsError,
    ConfigError,
    ConnectionError_,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    CorruptRecordError,
    FencedInstanceIdError,
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    IllegalStateError,
    InconsistentGroupProtocolError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    InvalidTopicExceptionError,
    InvalidTxnStateError,
    KafkaError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    MessageTooLargeError,
    NetworkExceptionError,
    NodeNotReadyError,
    NoOffsetForPartitionError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetMetadataTooLargeError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    RebalanceInProgressError,
    RecordListTooLargeError,
    RequestTimedOutError,
    SerializationError,
    SslError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnknownMemberIdError,
    UnknownServerErrorError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    WakeupError,
)

__all__ = [
    "AuthenticationFailedError",
    "AuthenticationMethodNotSupported",
    "BrokerResponseError",
    "CommitFailedError",
    "ConcurrentTransactionsError",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "CorruptRecordError",
    "CorruptRecordException",
    "FencedInstanceIdError",
    "GroupAuthorizationFailedError",
    "GroupCoordinatorNotAvailableError",
    "GroupIdNotFoundError",
    "GroupLoadInProgressError",
    "IllegalArgumentError",
    "IllegalGenerationError",
    "IllegalStateError",
    "IncompatibleBrokerVersion",
    "InconsistentGroupProtocolError",
    "InvalidPartitionsError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidSessionTimeoutError",
    "InvalidTopicError",
    "InvalidTxnStateError",
    "KafkaConfigurationError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "KafkaUnavailableError",
    "LeaderNotAvailableError",
    "MessageSizeTooLargeError",
    "NetworkExceptionError",
    "NoBrokersAvailable",
    "NoError",
    "NoOffsetForPartitionError",
    "NodeNotReadyError",
    "NotCoordinatorError",
    "NotCoordinatorForGroupError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderForPartitionError",
    "NotLeaderOrFollowerError",
    "OffsetMetadataTooLargeError",
    "OffsetOutOfRangeError",
    "ProducerFencedError",
    "RebalanceInProgressError",
    "RecordListTooLargeError",
    "RequestTimedOutError",
    "SerializationError",
    "TopicAlreadyExistsError",
    "TopicAuthorizationFailedError",
    "TransactionalIdAuthorizationFailedError",
    "UnknownError",
    "UnknownMemberIdError",
    "UnknownTopicOrPartitionError",
    "UnrecognizedBrokerVersion",
    "UnsupportedCodecError",
    "UnsupportedVersionError",
    "WakeupError",
]

# ----------------------------------------------------------------- kafka-python names for native classes
KafkaConfigurationError = ConfigError
"""Bad configuration: an unknown key (named in the message) or a value the key does not allow."""
KafkaConnectionError = ConnectionError_
AuthenticationFailedError = AuthenticationError
CorruptRecordException = CorruptRecordError
InvalidTopicError = InvalidTopicExceptionError
MessageSizeTooLargeError = MessageTooLargeError
NotLeaderForPartitionError = NotLeaderOrFollowerError
NotCoordinatorForGroupError = NotCoordinatorError
GroupCoordinatorNotAvailableError = CoordinatorNotAvailableError
GroupLoadInProgressError = CoordinatorLoadInProgressError
UnknownError = UnknownServerErrorError
_ = SslError  # re-exported under its native name only


# ----------------------------------------------------------------- kafka-python-only names
class NoBrokersAvailable(KafkaError):
    """No broker of ``bootstrap_servers`` could be reached (kafka-python raises it from the constructor;
    kafka-handoff's clients connect lazily, so it comes from the first call that needs a broker)."""

    retriable = True


class IllegalArgumentError(KafkaError, ValueError):
    """An argument the call does not accept."""


class IncompatibleBrokerVersion(KafkaError):
    """The broker is too old for the call."""


class UnrecognizedBrokerVersion(KafkaError):
    """kafka-python could not identify the broker version (never raised: kafka-handoff negotiates with
    ApiVersions)."""


class KafkaUnavailableError(KafkaError):
    """No broker answered."""


class AuthenticationMethodNotSupported(KafkaError):
    """The SASL mechanism is not supported."""


class UnsupportedCodecError(KafkaError):
    """A compression codec is not available."""


class NoError(BrokerResponseError):
    """kafka-python's "no error" result type (``delete_consumer_groups`` reports it per deleted group)."""
