"""The project's exception hierarchy.

Every exception raised by kafka-handoff derives from :class:`KafkaError`.  ``retriable`` tells whether the
same operation may succeed when tried again (Java's ``RetriableException``).  Errors that a broker returns
as an error code are :class:`BrokerResponseError` instances; :func:`error_for_code` maps a code to one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode


class KafkaError(Exception):
    """Base class of every error raised by kafka-handoff."""

    retriable: bool = False


class ConfigError(KafkaError, ValueError):
    """A configuration key is unknown, or its value is not allowed.  The message names the key."""


class IllegalStateError(KafkaError):
    """The call is not valid in the object's current state (closed consumer, expired view, ...)."""


class KafkaTimeoutError(KafkaError, TimeoutError):
    """A blocking call did not complete within its timeout."""

    retriable = True


class WakeupError(KafkaError):
    """A blocking call was interrupted by ``wakeup()``."""


class InterruptError(KafkaError):
    """The calling thread was interrupted."""


class CommitFailedError(KafkaError):
    """An offset commit cannot be completed: the partitions are no longer owned by this member, or the
    member was fenced from the group."""


class CorruptRecordError(KafkaError):
    """A record batch failed validation (CRC mismatch, truncated or malformed).  The message names the
    topic, partition and offset; the consumer's position does not move past the batch."""

    def __init__(self, message: str, topic: str = "", partition: int = -1, offset: int = -1) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset


class SerializationError(KafkaError):
    """A key or value (de)serializer failed (or a key/value/header could not be converted to bytes).

    The message names the record; the attributes carry it for code: ``topic``, ``partition`` and
    ``offset`` (-1 when unknown: on the producer the partition is chosen after serializing, a record has
    no offset yet), and ``field`` (``"key"``/``"value"``, :class:`~kafka_handoff.serialization.MessageField`,
    or ``None``).  A consumer's position stays at a record that failed to deserialize: skip it with
    ``consumer.seek(TopicPartition(e.topic, e.partition), e.offset + 1)``; a share consumer acknowledges it
    with ``acknowledge_offset(e.topic, e.partition, e.offset, AcknowledgeType.REJECT)``.  ``__cause__`` is
    the (de)serializer's exception."""

    def __init__(
        self,
        message: str,
        topic: str = "",
        partition: int = -1,
        offset: int = -1,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.field = field


class DeliveryFailedError(KafkaError):
    """Records sent without a future or callback (``Producer.send_nowait``/``send_many``) could not be
    delivered.  Raised once, by the producer's next ``flush()``, ``send_nowait()`` or ``send_many()``:
    ``failed`` is how many records failed since the last report, ``cause`` (also ``__cause__``) the first
    error."""

    def __init__(self, message: str, failed: int = 0, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.failed = failed
        self.cause = cause


class RecordPurgedError(KafkaError):
    """``Producer.purge()`` failed the record before it was sent."""


class NoOffsetForPartitionError(KafkaError):
    """No committed offset and ``auto.offset.reset=none``.  Raised by every ``poll()`` until the application
    seeks the ``partitions`` (as Java does)."""

    def __init__(self, message: str, partitions: frozenset[Any] = frozenset()) -> None:
        super().__init__(message)
        self.partitions = partitions


class FencedError(KafkaError):
    """This member was fenced by the group coordinator; its partitions are lost."""


class ConnectionError_(KafkaError):
    """A connection to a broker failed or was closed."""

    retriable = True


class AuthenticationError(KafkaError):
    """A broker refused this client's credentials, or they could not be obtained (wrong password, an
    unsupported SASL mechanism, an OAuth token endpoint that refused the client).  Not retriable: the
    client keeps reconnecting at ``reconnect.backoff.max.ms`` but the call that sees this error fails.
    The message names the broker (``host:port``, node id) and the cause; it never contains a secret."""

    def __init__(self, message: str, *, broker: str = "", node_id: int | None = None) -> None:
        super().__init__(message)
        self.broker = broker
        self.node_id = node_id


class SslError(AuthenticationError):
    """The TLS handshake with a broker failed: an untrusted or expired certificate, a host name that does
    not match the broker's certificate, or no common protocol version (Java's
    ``SslAuthenticationException``).  Not retriable."""


class NodeNotReadyError(KafkaError):
    retriable = True


class BrokerResponseError(KafkaError):
    """An error code returned by a broker."""

    code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str = "") -> None:
        name = self.code.name.upper()
        super().__init__(f"{name}: {message}" if message else name)

    @property
    def retriable(self) -> bool:  # type: ignore[override]
        return bool(self.code.retriable)


class OffsetOutOfRangeError(BrokerResponseError):
    code = ErrorCode.offset_out_of_range


class CorruptMessageError(BrokerResponseError):
    code = ErrorCode.corrupt_message


class UnknownTopicOrPartitionError(BrokerResponseError):
    code = ErrorCode.unknown_topic_or_partition


class LeaderNotAvailableError(BrokerResponseError):
    code = ErrorCode.leader_not_available


class NotLeaderOrFollowerError(BrokerResponseError):
    code = ErrorCode.not_leader_or_follower


class RequestTimedOutError(BrokerResponseError):
    code = ErrorCode.request_timed_out


class NetworkExceptionError(BrokerResponseError):
    code = ErrorCode.network_exception


class CoordinatorLoadInProgressError(BrokerResponseError):
    code = ErrorCode.coordinator_load_in_progress


class CoordinatorNotAvailableError(BrokerResponseError):
    code = ErrorCode.coordinator_not_available


class NotCoordinatorError(BrokerResponseError):
    code = ErrorCode.not_coordinator


class IllegalGenerationError(BrokerResponseError):
    code = ErrorCode.illegal_generation


class InconsistentGroupProtocolError(BrokerResponseError):
    code = ErrorCode.inconsistent_group_protocol


class UnknownMemberIdError(BrokerResponseError):
    code = ErrorCode.unknown_member_id


class InvalidSessionTimeoutError(BrokerResponseError):
    code = ErrorCode.invalid_session_timeout


class RebalanceInProgressError(BrokerResponseError):
    code = ErrorCode.rebalance_in_progress


class AuthorizationError(BrokerResponseError):
    """The broker's authorizer denied the principal an operation on a resource (every
    ``*_AUTHORIZATION_FAILED`` code: topic, group, cluster, transactional id, delegation token); the message
    names the resource and the operation where the client knows them, and so do ``operation`` (``"READ"``,
    ``"WRITE"``, ``"DESCRIBE"``, ...), ``resource_type`` (``"TOPIC"``, ``"GROUP"``, ``"CLUSTER"``,
    ``"TRANSACTIONAL_ID"``) and ``resource_name`` (``None`` where the client does not know them)."""

    operation: str | None = None
    resource_type: str | None = None
    resource_name: str | None = None


class TopicAuthorizationFailedError(AuthorizationError):
    code = ErrorCode.topic_authorization_failed


class GroupAuthorizationFailedError(AuthorizationError):
    code = ErrorCode.group_authorization_failed


class UnsupportedVersionError(BrokerResponseError):
    code = ErrorCode.unsupported_version


class TopicAlreadyExistsError(BrokerResponseError):
    code = ErrorCode.topic_already_exists


class InvalidPartitionsError(BrokerResponseError):
    code = ErrorCode.invalid_partitions


class InvalidReplicationFactorError(BrokerResponseError):
    code = ErrorCode.invalid_replication_factor


class MemberIdRequiredError(BrokerResponseError):
    code = ErrorCode.member_id_required


class FencedInstanceIdError(BrokerResponseError):
    code = ErrorCode.fenced_instance_id


class FencedMemberEpochError(BrokerResponseError):
    code = ErrorCode.fenced_member_epoch


class StaleMemberEpochError(BrokerResponseError):
    code = ErrorCode.stale_member_epoch


class UnreleasedInstanceIdError(BrokerResponseError):
    code = ErrorCode.unreleased_instance_id


class UnknownTopicIdError(BrokerResponseError):
    code = ErrorCode.unknown_topic_id


class FencedLeaderEpochError(BrokerResponseError):
    code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpochError(BrokerResponseError):
    code = ErrorCode.unknown_leader_epoch


class OutOfOrderSequenceNumberError(BrokerResponseError):
    code = ErrorCode.out_of_order_sequence_number


class DuplicateSequenceNumberError(BrokerResponseError):
    code = ErrorCode.duplicate_sequence_number


class InvalidProducerEpochError(BrokerResponseError):
    code = ErrorCode.invalid_producer_epoch


class UnknownProducerIdError(BrokerResponseError):
    code = ErrorCode.unknown_producer_id


class GroupIdNotFoundError(BrokerResponseError):
    code = ErrorCode.group_id_not_found


class GroupMaxSizeReachedError(BrokerResponseError):
    code = ErrorCode.group_max_size_reached


class UnsupportedAssignorError(BrokerResponseError):
    code = ErrorCode.unsupported_assignor


class InvalidRegularExpressionError(BrokerResponseError):
    code = ErrorCode.invalid_regular_expression


class OffsetMetadataTooLargeError(BrokerResponseError):
    code = ErrorCode.offset_metadata_too_large


class InvalidCommitOffsetSizeError(BrokerResponseError):
    code = ErrorCode.invalid_commit_offset_size


class MessageTooLargeError(BrokerResponseError):
    code = ErrorCode.message_too_large


class RecordListTooLargeError(BrokerResponseError):
    code = ErrorCode.record_list_too_large


class NotEnoughReplicasError(BrokerResponseError):
    code = ErrorCode.not_enough_replicas


class NotEnoughReplicasAfterAppendError(BrokerResponseError):
    code = ErrorCode.not_enough_replicas_after_append


class KafkaStorageErrorError(BrokerResponseError):
    code = ErrorCode.kafka_storage_error


class InvalidRequestError(BrokerResponseError):
    code = ErrorCode.invalid_request


class ProducerFencedError(BrokerResponseError):
    code = ErrorCode.producer_fenced


class InvalidTopicExceptionError(BrokerResponseError):
    code = ErrorCode.invalid_topic_exception


class UnknownServerErrorError(BrokerResponseError):
    code = ErrorCode.unknown_server_error


# Transactions (KIP-98, KIP-890).  Java's split: ProducerFencedError, InvalidProducerEpochError (from the
# transaction coordinator), TransactionalIdAuthorizationFailedError, InvalidTxnStateError and the like are
# fatal for a transactional producer (only close() is left); TransactionAbortableError and a failed send or
# offset commit inside a transaction are abortable (abort_transaction(), then go on).


class InvalidTxnStateError(BrokerResponseError):
    code = ErrorCode.invalid_txn_state


class InvalidProducerIdMappingError(BrokerResponseError):
    code = ErrorCode.invalid_producer_id_mapping


class InvalidTransactionTimeoutError(BrokerResponseError):
    code = ErrorCode.invalid_transaction_timeout


class ConcurrentTransactionsError(BrokerResponseError):
    code = ErrorCode.concurrent_transactions


class TransactionCoordinatorFencedError(BrokerResponseError):
    code = ErrorCode.transaction_coordinator_fenced


class TransactionalIdAuthorizationFailedError(AuthorizationError):
    code = ErrorCode.transactional_id_authorization_failed


class TransactionAbortableError(BrokerResponseError):
    """The transaction cannot commit (KIP-890's TRANSACTION_ABORTABLE): abort it and start a new one."""

    code = ErrorCode.transaction_abortable


class TransactionAbortedError(KafkaError):
    """The record was not sent: its transaction was aborted (Java's ``TransactionAbortedException``)."""


class GroupProtocolUnsupportedError(UnsupportedVersionError):
    """The cluster does not serve the KIP-848 consumer group protocol."""


_BY_CODE: dict[int, type[BrokerResponseError]] = {}


def _class_name(code: ErrorCode) -> str:
    return "".join(part.capitalize() for part in code.name.split("_")) + "Error"


def _make(code: ErrorCode) -> type[BrokerResponseError]:
    base = AuthorizationError if code.name.endswith("_authorization_failed") else BrokerResponseError
    cls = type(_class_name(code), (base,), {"code": code, "__doc__": f"Broker error {code.name}."})
    _BY_CODE[int(code)] = cls
    return cls


for _cls in list(globals().values()):
    if (
        isinstance(_cls, type)
        and issubclass(_cls, BrokerResponseError)
        and _cls not in (BrokerResponseError, AuthorizationError)
    ):
        _BY_CODE[int(_cls.code)] = _cls
for _code in ErrorCode:
    if _code is not ErrorCode.none and int(_code) not in _BY_CODE:
        _make(_code)


class LogTruncationError(OffsetOutOfRangeError):
    """The log was truncated below the consumer's position (KIP-320, Java's ``LogTruncationException``).

    Raised from ``poll()`` when a position's validation with the partition's current leader found that the
    records before it diverged (an unclean leader election or a lost leader's unreplicated writes) and
    ``auto.offset.reset`` is ``none``.  ``partition`` and ``fetch_offset`` name the position;
    ``divergent_offset`` is the first offset known to diverge (``None`` when the leader could not tell).
    Seek to resume the partition.
    """

    def __init__(
        self,
        message: str = "",
        *,
        partition: object = None,
        fetch_offset: int = -1,
        divergent_offset: int | None = None,
    ) -> None:
        super().__init__(message)
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.divergent_offset = divergent_offset


def error_class(code: int | ErrorCode) -> type[BrokerResponseError]:
    """The exception class for a broker error code (``UnknownServerErrorError`` for unknown codes)."""
    return _BY_CODE.get(int(code), _BY_CODE[int(ErrorCode.unknown_server_error)])


@dataclass(frozen=True, slots=True)
class Needs:
    """What one request needs from the broker's authorizer: the ACL operation on each kind of resource it
    touches (Kafka's authorization table), e.g. a Fetch needs ``READ`` on the topic, a FindCoordinator for a
    group ``DESCRIBE`` on the group.  Given to :func:`error_for_code`, it turns a bare
    ``TOPIC_AUTHORIZATION_FAILED`` into an error naming the operation, the resource and the request."""

    api: str
    topic: tuple[str, str] | None = None  # (operation, topic name)
    group: tuple[str, str] | None = None  # (operation, group id)
    transactional_id: tuple[str, str] | None = None  # (operation, transactional.id)
    cluster: str | None = None  # the operation on the CLUSTER resource

    def denial(self, code: int | ErrorCode) -> tuple[str, str, str] | None:
        """``(operation, resource type, resource name)`` the authorizer refused for ``code``, if known."""
        code = int(code)
        if code == ErrorCode.topic_authorization_failed and self.topic:
            return (self.topic[0], "TOPIC", self.topic[1])
        if code == ErrorCode.group_authorization_failed and self.group:
            return (self.group[0], "GROUP", self.group[1])
        if code == ErrorCode.transactional_id_authorization_failed and self.transactional_id:
            return (self.transactional_id[0], "TRANSACTIONAL_ID", self.transactional_id[1])
        if code == ErrorCode.cluster_authorization_failed and self.cluster:
            return (self.cluster, "CLUSTER", "kafka-cluster")
        return None


def denied_text(operation: str, resource_type: str, name: str, api: str | None = None) -> str:
    """How an authorization failure reads: the principal, the operation, the resource (and the request)."""
    via = f"{api}; " if api else ""
    return (
        f"the principal is not allowed {operation} on {resource_type} {name!r} "
        f"({via}an ACL denies it, or none allows it)"
    )


def error_for_code(
    code: int | ErrorCode, message: str | None = "", *, needs: Needs | None = None
) -> BrokerResponseError:
    """An exception instance for a broker error code (``code`` must not be 0).  With ``needs``, an
    authorization failure names the operation and resource the request needed (also as attributes)."""
    denial = needs.denial(code) if needs is not None else None
    if denial is None:
        return error_class(code)(message or "")
    operation, resource_type, name = denial
    text = denied_text(operation, resource_type, name, needs.api if needs else None)
    error = error_class(code)(f"{message}: {text}" if message else text)
    if isinstance(error, AuthorizationError):
        error.operation, error.resource_type, error.resource_name = operation, resource_type, name
    return error


def raise_for_code(code: int | ErrorCode, message: str | None = "", *, needs: Needs | None = None) -> None:
    """Raise the matching :class:`BrokerResponseError` when ``code`` is not 0."""
    if int(code) != 0:
        raise error_for_code(code, message, needs=needs)
