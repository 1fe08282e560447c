"""The project's exception hierarchy.

Every exception raised by kafka-handoff derives from :class:`KafkaError`.  ``retriable`` tells whether the
same operation may succeed when tried again (Java's ``RetriableException``).  Errors that a broker returns
as an error code are :class:`BrokerResponseError` instances; :func:`error_for_code` maps a code to one.
"""

from __future__ import annotations

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
    """A key or value (de)serializer failed.  The message names topic, partition and offset."""


class NoOffsetForPartitionError(KafkaError):
    """No committed offset and ``auto.offset.reset=none``."""


class OffsetOutOfRangeError(KafkaError):
    """The fetch position is out of range and ``auto.offset.reset=none``."""


class UnsupportedVersionError(KafkaError):
    """The broker does not support a version of an API that this client needs."""


class GroupProtocolUnsupportedError(UnsupportedVersionError):
    """The cluster does not serve the KIP-848 consumer group protocol."""


class FencedError(KafkaError):
    """This member was fenced by the group coordinator; its partitions are lost."""


class ConnectionError_(KafkaError):  # noqa: N801 - avoid shadowing the builtin
    """A connection to a broker failed or was closed."""

    retriable = True


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


_BY_CODE: dict[int, type[BrokerResponseError]] = {}


def _class_name(code: ErrorCode) -> str:
    return "".join(part.capitalize() for part in code.name.split("_")) + "Error"


def _make(code: ErrorCode) -> type[BrokerResponseError]:
    cls = type(_class_name(code), (BrokerResponseError,), {"code": code, "__doc__": f"Broker error {code.name}."})
    _BY_CODE[int(code)] = cls
    return cls


for _code in ErrorCode:
    if _code is not ErrorCode.none:
        _make(_code)


def error_class(code: int | ErrorCode) -> type[BrokerResponseError]:
    """The exception class for a broker error code (``UnknownServerErrorError`` for unknown codes)."""
    return _BY_CODE.get(int(code), _BY_CODE[int(ErrorCode.unknown_server_error)])


def error_for_code(code: int | ErrorCode, message: str | None = "") -> BrokerResponseError:
    """An exception instance for a broker error code (``code`` must not be 0)."""
    return error_class(code)(message or "")


def raise_for_code(code: int | ErrorCode, message: str | None = "") -> None:
    """Raise the matching :class:`BrokerResponseError` when ``code`` is not 0."""
    if int(code) != 0:
        raise error_for_code(code, message)
