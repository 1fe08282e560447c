"""confluent-kafka's ``KafkaError`` / ``KafkaException`` with librdkafka's error codes.

librdkafka's *internal* codes are negative (``_PARTITION_EOF`` = -191, ``_TIMED_OUT`` = -185, ...); broker
error codes are Kafka's protocol codes under librdkafka's names (``UNKNOWN_TOPIC_OR_PART`` = 3, ...).
:func:`from_exception` maps a kafka-handoff exception to a :class:`KafkaError`.
"""

from __future__ import annotations

import builtins
from typing import Any, ClassVar

from kio.schema.errors import ErrorCode

from kafka_handoff import errors as _native

__all__ = [
    "ConsumeError",
    "KafkaError",
    "KafkaException",
    "KeyDeserializationError",
    "KeySerializationError",
    "ProduceError",
    "ValueDeserializationError",
    "ValueSerializationError",
    "from_exception",
]

# librdkafka's internal (client-side) error codes: rd_kafka_resp_err_t below -100.
_INTERNAL_CODES: dict[str, int] = {
    "_BAD_MSG": -199,
    "_BAD_COMPRESSION": -198,
    "_DESTROY": -197,
    "_FAIL": -196,
    "_TRANSPORT": -195,
    "_CRIT_SYS_RESOURCE": -194,
    "_RESOLVE": -193,
    "_MSG_TIMED_OUT": -192,
    "_PARTITION_EOF": -191,
    "_UNKNOWN_PARTITION": -190,
    "_FS": -189,
    "_UNKNOWN_TOPIC": -188,
    "_ALL_BROKERS_DOWN": -187,
    "_INVALID_ARG": -186,
    "_TIMED_OUT": -185,
    "_QUEUE_FULL": -184,
    "_ISR_INSUFF": -183,
    "_NODE_UPDATE": -182,
    "_SSL": -181,
    "_WAIT_COORD": -180,
    "_UNKNOWN_GROUP": -179,
    "_IN_PROGRESS": -178,
    "_PREV_IN_PROGRESS": -177,
    "_EXISTING_SUBSCRIPTION": -176,
    "_ASSIGN_PARTITIONS": -175,
    "_REVOKE_PARTITIONS": -174,
    "_CONFLICT": -173,
    "_STATE": -172,
    "_UNKNOWN_PROTOCOL": -171,
    "_NOT_IMPLEMENTED": -170,
    "_AUTHENTICATION": -169,
    "_NO_OFFSET": -168,
    "_OUTDATED": -167,
    "_TIMED_OUT_QUEUE": -166,
    "_UNSUPPORTED_FEATURE": -165,
    "_WAIT_CACHE": -164,
    "_INTR": -163,
    "_KEY_SERIALIZATION": -162,
    "_VALUE_SERIALIZATION": -161,
    "_KEY_DESERIALIZATION": -160,
    "_VALUE_DESERIALIZATION": -159,
    "_PARTIAL": -158,
    "_READ_ONLY": -157,
    "_NOENT": -156,
    "_UNDERFLOW": -155,
    "_INVALID_TYPE": -154,
    "_RETRY": -153,
    "_PURGE_QUEUE": -152,
    "_PURGE_INFLIGHT": -151,
    "_FATAL": -150,
    "_INCONSISTENT": -149,
    "_GAPLESS_GUARANTEE": -148,
    "_MAX_POLL_EXCEEDED": -147,
    "_UNKNOWN_BROKER": -146,
    "_NOT_CONFIGURED": -145,
    "_FENCED": -144,
    "_APPLICATION": -143,
    "_ASSIGNMENT_LOST": -142,
    "_NOOP": -141,
    "_AUTO_OFFSET_RESET": -140,
    "_LOG_TRUNCATION": -139,
}

# librdkafka's names for broker codes where they differ from Kafka's protocol names.
_LIBRDKAFKA_NAMES: dict[ErrorCode, tuple[str, ...]] = {
    ErrorCode.unknown_server_error: ("UNKNOWN",),
    ErrorCode.none: ("NO_ERROR",),
    ErrorCode.corrupt_message: ("INVALID_MSG",),
    ErrorCode.unknown_topic_or_partition: ("UNKNOWN_TOPIC_OR_PART",),
    ErrorCode.invalid_fetch_size: ("INVALID_MSG_SIZE",),
    ErrorCode.not_leader_or_follower: ("NOT_LEADER_FOR_PARTITION", "NOT_LEADER_OR_FOLLOWER"),
    ErrorCode.message_too_large: ("MSG_SIZE_TOO_LARGE",),
    ErrorCode.stale_controller_epoch: ("STALE_CTRL_EPOCH",),
    ErrorCode.coordinator_load_in_progress: ("COORDINATOR_LOAD_IN_PROGRESS", "GROUP_LOAD_IN_PROGRESS"),
    ErrorCode.coordinator_not_available: ("COORDINATOR_NOT_AVAILABLE", "GROUP_COORDINATOR_NOT_AVAILABLE"),
    ErrorCode.not_coordinator: ("NOT_COORDINATOR", "NOT_COORDINATOR_FOR_GROUP"),
    ErrorCode.invalid_topic_exception: ("TOPIC_EXCEPTION",),
    ErrorCode.out_of_order_sequence_number: ("OUT_OF_ORDER_SEQUENCE_NUMBER",),
    ErrorCode.kafka_storage_error: ("KAFKA_STORAGE_ERROR",),
    ErrorCode.sasl_authentication_failed: ("SASL_AUTHENTICATION_FAILED",),
}


def _broker_names() -> dict[str, int]:
    names: dict[str, int] = {}
    for code in ErrorCode:
        for name in _LIBRDKAFKA_NAMES.get(code, (code.name.upper(),)):
            names[name] = int(code)
    return names


_BROKER_CODES = _broker_names()
_ALL_CODES: dict[str, int] = {**_INTERNAL_CODES, **_BROKER_CODES}
_NAME_OF: dict[int, str] = {}
for _name, _value in _ALL_CODES.items():
    _NAME_OF.setdefault(_value, _name)

_RETRIABLE_INTERNAL = frozenset(
    {
        _INTERNAL_CODES["_TRANSPORT"],
        _INTERNAL_CODES["_TIMED_OUT"],
        _INTERNAL_CODES["_MSG_TIMED_OUT"],
        _INTERNAL_CODES["_ALL_BROKERS_DOWN"],
        _INTERNAL_CODES["_QUEUE_FULL"],
        _INTERNAL_CODES["_WAIT_COORD"],
        _INTERNAL_CODES["_RETRY"],
    }
)


class KafkaError:
    """An error (or event such as ``_PARTITION_EOF``) as confluent-kafka reports it.

    Comparable with an int code (``err == KafkaError._PARTITION_EOF``) and with another ``KafkaError``.
    """

    # Class attributes for every code are set after the class body (mypy sees them through __getattr__).
    _PARTITION_EOF: ClassVar[int] = -191
    _TIMED_OUT: ClassVar[int] = -185
    _MSG_TIMED_OUT: ClassVar[int] = -192
    _ALL_BROKERS_DOWN: ClassVar[int] = -187
    _TRANSPORT: ClassVar[int] = -195
    _QUEUE_FULL: ClassVar[int] = -184
    _UNKNOWN_PARTITION: ClassVar[int] = -190
    _UNKNOWN_TOPIC: ClassVar[int] = -188
    _INVALID_ARG: ClassVar[int] = -186
    _NO_OFFSET: ClassVar[int] = -168
    _UNKNOWN_GROUP: ClassVar[int] = -179
    _WAIT_COORD: ClassVar[int] = -180
    _STATE: ClassVar[int] = -172
    _CONFLICT: ClassVar[int] = -173
    _FATAL: ClassVar[int] = -150
    _FAIL: ClassVar[int] = -196
    _KEY_SERIALIZATION: ClassVar[int] = -162
    _VALUE_SERIALIZATION: ClassVar[int] = -161
    _KEY_DESERIALIZATION: ClassVar[int] = -160
    _VALUE_DESERIALIZATION: ClassVar[int] = -159
    _ASSIGNMENT_LOST: ClassVar[int] = -142
    _MAX_POLL_EXCEEDED: ClassVar[int] = -147
    _AUTO_OFFSET_RESET: ClassVar[int] = -140
    _LOG_TRUNCATION: ClassVar[int] = -139
    _BAD_MSG: ClassVar[int] = -199
    _DESTROY: ClassVar[int] = -197
    _NOT_IMPLEMENTED: ClassVar[int] = -170
    _PURGE_QUEUE: ClassVar[int] = -152
    _PURGE_INFLIGHT: ClassVar[int] = -151
    _FENCED: ClassVar[int] = -144
    _APPLICATION: ClassVar[int] = -143
    _AUTHENTICATION: ClassVar[int] = -169
    _SSL: ClassVar[int] = -181
    _RESOLVE: ClassVar[int] = -193
    _INTR: ClassVar[int] = -163
    NO_ERROR: ClassVar[int] = 0
    UNKNOWN: ClassVar[int] = -1
    OFFSET_OUT_OF_RANGE: ClassVar[int] = 1
    INVALID_MSG: ClassVar[int] = 2
    UNKNOWN_TOPIC_OR_PART: ClassVar[int] = 3
    LEADER_NOT_AVAILABLE: ClassVar[int] = 5
    NOT_LEADER_FOR_PARTITION: ClassVar[int] = 6
    REQUEST_TIMED_OUT: ClassVar[int] = 7
    MSG_SIZE_TOO_LARGE: ClassVar[int] = 10
    NETWORK_EXCEPTION: ClassVar[int] = 13
    COORDINATOR_NOT_AVAILABLE: ClassVar[int] = 15
    NOT_COORDINATOR: ClassVar[int] = 16
    TOPIC_EXCEPTION: ClassVar[int] = 17
    ILLEGAL_GENERATION: ClassVar[int] = 22
    UNKNOWN_MEMBER_ID: ClassVar[int] = 25
    REBALANCE_IN_PROGRESS: ClassVar[int] = 27
    TOPIC_AUTHORIZATION_FAILED: ClassVar[int] = 29
    GROUP_AUTHORIZATION_FAILED: ClassVar[int] = 30
    CLUSTER_AUTHORIZATION_FAILED: ClassVar[int] = 31
    TOPIC_ALREADY_EXISTS: ClassVar[int] = 36
    INVALID_PARTITIONS: ClassVar[int] = 37
    INVALID_REPLICATION_FACTOR: ClassVar[int] = 38
    INVALID_CONFIG: ClassVar[int] = 40
    POLICY_VIOLATION: ClassVar[int] = 44
    GROUP_ID_NOT_FOUND: ClassVar[int] = 69
    NON_EMPTY_GROUP: ClassVar[int] = 68
    UNSUPPORTED_VERSION: ClassVar[int] = 35

    __slots__ = ("_code", "_fatal", "_reason", "_retriable", "_txn_requires_abort")

    def __init__(
        self,
        error: int,
        reason: str | None = None,
        fatal: bool = False,
        retriable: bool | None = None,
        txn_requires_abort: bool = False,
    ) -> None:
        self._code = int(error)
        self._reason = reason if reason is not None else _default_reason(self._code)
        self._fatal = bool(fatal)
        if retriable is None:
            retriable = _is_retriable(self._code)
        self._retriable = bool(retriable)
        self._txn_requires_abort = bool(txn_requires_abort)

    def code(self) -> int:
        return self._code

    def name(self) -> str:
        return _NAME_OF.get(self._code, f"ERR_{self._code}")

    def fatal(self) -> bool:
        return self._fatal

    def retriable(self) -> bool:
        return self._retriable

    def txn_requires_abort(self) -> bool:
        return self._txn_requires_abort

    def __str__(self) -> str:
        return self._reason

    def __repr__(self) -> str:
        return f'KafkaError{{code={self.name()},val={self._code},str="{self._reason}"}}'

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KafkaError):
            return self._code == other._code
        if isinstance(other, int):
            return self._code == other
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __lt__(self, other: object) -> bool:
        if isinstance(other, KafkaError):
            return self._code < other._code
        if isinstance(other, int):
            return self._code < other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._code)

    def __bool__(self) -> bool:
        # An error object is truthy even for NO_ERROR (as in confluent-kafka, where it is never built for 0).
        return True

    def str(self) -> builtins.str:
        """The human-readable reason."""
        return self._reason


for _name, _value in _ALL_CODES.items():
    setattr(KafkaError, _name, _value)


def code_of(name: str) -> int:
    """librdkafka's numeric code for a name (``"_PARTITION_EOF"`` -> -191); KeyError if unknown."""
    return _ALL_CODES[name]


def _default_reason(code: int) -> str:
    name = _NAME_OF.get(code)
    if name is None:
        return f"Err-{code}?"
    if name.startswith("_"):
        return f"Local: {name[1:].replace('_', ' ').lower()}"
    return f"Broker: {name.replace('_', ' ').capitalize()}"


def _is_retriable(code: int) -> bool:
    if code < -1:
        return code in _RETRIABLE_INTERNAL
    try:
        return bool(ErrorCode(code).retriable)
    except ValueError:
        return False


class KafkaException(Exception):
    """confluent-kafka's exception: ``args[0]`` is a :class:`KafkaError` (or a message string)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if not args and "kafka_error" in kwargs:
            args = (kwargs.pop("kafka_error"),)
        if args and isinstance(args[0], int) and not isinstance(args[0], bool):
            args = (KafkaError(args[0], *args[1:], **kwargs),)
        super().__init__(*args)

    @property
    def kafka_error(self) -> KafkaError | None:
        first = self.args[0] if self.args else None
        return first if isinstance(first, KafkaError) else None


class ConsumeError(KafkaException):
    """Raised by ``DeserializingConsumer.poll()`` for a message carrying an error."""

    def __init__(
        self, kafka_error: KafkaError, exception: BaseException | None = None, kafka_message: Any = None
    ):
        super().__init__(kafka_error)
        self.exception = exception
        self.kafka_message = kafka_message
        self.code = kafka_error.code()
        self.name = kafka_error.name()


class KeyDeserializationError(ConsumeError):
    def __init__(self, exception: BaseException | None = None, kafka_message: Any = None) -> None:
        super().__init__(
            KafkaError(KafkaError._KEY_DESERIALIZATION, str(exception) if exception else None),
            exception,
            kafka_message,
        )


class ValueDeserializationError(ConsumeError):
    def __init__(self, exception: BaseException | None = None, kafka_message: Any = None) -> None:
        super().__init__(
            KafkaError(KafkaError._VALUE_DESERIALIZATION, str(exception) if exception else None),
            exception,
            kafka_message,
        )


class ProduceError(KafkaException):
    """Raised by ``SerializingProducer.produce()``."""

    def __init__(self, kafka_error: KafkaError, exception: BaseException | None = None) -> None:
        super().__init__(kafka_error)
        self.exception = exception
        self.code = kafka_error.code()
        self.name = kafka_error.name()


class KeySerializationError(ProduceError):
    def __init__(self, exception: BaseException | None = None) -> None:
        super().__init__(
            KafkaError(KafkaError._KEY_SERIALIZATION, str(exception) if exception else None), exception
        )


class ValueSerializationError(ProduceError):
    def __init__(self, exception: BaseException | None = None) -> None:
        super().__init__(
            KafkaError(KafkaError._VALUE_SERIALIZATION, str(exception) if exception else None), exception
        )


def from_exception(exc: BaseException, *, fatal: bool = False) -> KafkaError:
    """The :class:`KafkaError` for a kafka-handoff (or Python) exception: broker errors keep their code;
    timeouts become ``_TIMED_OUT``, connection failures ``_TRANSPORT``, bad config or arguments
    ``_INVALID_ARG``, a closed client or wrong state ``_STATE``, a fenced producer or member ``_FENCED``."""
    if isinstance(exc, KafkaException) and exc.kafka_error is not None:
        return exc.kafka_error
    reason = str(exc) or type(exc).__name__
    code: int
    if isinstance(exc, _native.BrokerResponseError):
        code = int(exc.code)
        return KafkaError(code, reason, fatal=fatal, retriable=exc.retriable)
    if isinstance(exc, _native.DeliveryFailedError):
        cause = exc.__cause__
        if cause is not None and cause is not exc:
            inner = from_exception(cause, fatal=fatal)
            return KafkaError(inner.code(), reason, fatal=fatal, retriable=inner.retriable())
        code = KafkaError._MSG_TIMED_OUT
    elif isinstance(exc, _native.KafkaTimeoutError | TimeoutError):
        code = KafkaError._TIMED_OUT
    elif isinstance(exc, _native.SslError):
        code = KafkaError._SSL
    elif isinstance(exc, _native.AuthenticationError):
        code = KafkaError._AUTHENTICATION
    elif isinstance(exc, _native.ConnectionError_ | _native.NodeNotReadyError | ConnectionError | OSError):
        code = KafkaError._TRANSPORT
    elif isinstance(exc, _native.FencedError):
        code = KafkaError._FENCED
    elif isinstance(exc, _native.ConfigError | ValueError | TypeError):
        code = KafkaError._INVALID_ARG
    elif isinstance(exc, _native.IllegalStateError):
        code = KafkaError._STATE
    elif isinstance(exc, _native.SerializationError):
        code = KafkaError._VALUE_SERIALIZATION
    elif isinstance(exc, _native.WakeupError | _native.InterruptError):
        code = KafkaError._INTR
    elif isinstance(exc, _native.CorruptRecordError):
        code = KafkaError._BAD_MSG
    elif isinstance(exc, _native.CommitFailedError):
        code = KafkaError.REBALANCE_IN_PROGRESS
    elif isinstance(exc, _native.NoOffsetForPartitionError):
        code = KafkaError._AUTO_OFFSET_RESET
    else:
        code = KafkaError._FAIL
    return KafkaError(code, reason, fatal=fatal)


def raise_from(exc: BaseException) -> KafkaException:
    """A :class:`KafkaException` wrapping :func:`from_exception` (``raise raise_from(e) from e``)."""
    return KafkaException(from_exception(exc))
