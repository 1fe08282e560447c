"""confluent-kafka's value types: ``TopicPartition``, ``Message``, offsets constants, cluster metadata."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from kafka_handoff.compat.confluent_kafka.error import KafkaError

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "BrokerMetadata",
    "ClusterMetadata",
    "ConsumerGroupTopicPartitions",
    "GroupMember",
    "GroupMetadata",
    "Message",
    "Node",
    "PartitionMetadata",
    "RecordMessage",
    "TopicCollection",
    "TopicMetadata",
    "TopicPartition",
]

OFFSET_BEGINNING = -2
"""Start from the first offset of the partition (``auto.offset.reset=earliest`` for one partition)."""
OFFSET_END = -1
"""Start from the end of the partition."""
OFFSET_STORED = -1000
"""Start from the committed offset (the default of ``assign()``)."""
OFFSET_INVALID = -1001
"""No offset: for ``assign()`` the same as ``OFFSET_STORED``; from ``committed()``: nothing committed."""

TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2

Headers = list[tuple[str, bytes | None]]


class TopicPartition:
    """A topic, a partition and (optionally) an offset, metadata, leader epoch and error.

    Mutable like confluent-kafka's; equality, ordering and hashing use ``(topic, partition)`` only.
    """

    __slots__ = ("error", "leader_epoch", "metadata", "offset", "partition", "topic")

    def __init__(
        self,
        topic: str,
        partition: int = -1,
        offset: int = OFFSET_INVALID,
        metadata: str | None = None,
        leader_epoch: int | None = None,
    ) -> None:
        if not isinstance(topic, str):
            raise TypeError("TopicPartition: topic must be a str")
        self.topic = topic
        self.partition = int(partition)
        self.offset = int(offset)
        self.metadata = metadata
        self.leader_epoch = leader_epoch if leader_epoch is None or leader_epoch >= 0 else None
        self.error: KafkaError | None = None

    def __repr__(self) -> str:
        return (
            f"TopicPartition{{topic={self.topic},partition={self.partition},offset={self.offset},"
            f"leader_epoch={self.leader_epoch},error={self.error!r}}}"
        )

    __str__ = __repr__

    def _key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self.topic == other.topic and self.partition == other.partition

    def __lt__(self, other: TopicPartition) -> bool:
        return self._key() < other._key()

    def __le__(self, other: TopicPartition) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: TopicPartition) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: TopicPartition) -> bool:
        return self._key() >= other._key()

    def __hash__(self) -> int:
        return hash((self.topic, self.partition))


class Message:
    """One consumed record, a delivery report, or an event (``error()`` is not ``None``: e.g.
    ``_PARTITION_EOF``).  Positional arguments follow confluent-kafka's order."""

    __slots__ = (
        "_delivery_count",
        "_error",
        "_headers",
        "_key",
        "_latency",
        "_leader_epoch",
        "_offset",
        "_partition",
        "_timestamp",
        "_topic",
        "_value",
    )

    def __init__(
        self,
        topic: Any = None,
        partition: int | None = None,
        offset: int | None = None,
        key: Any = None,
        value: Any = None,
        headers: Any = None,
        error: Any = None,
        timestamp: tuple[int, int] | None = None,
        latency: float | None = None,
        leader_epoch: int | None = None,
        delivery_count: int | None = None,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._headers = headers
        self._error = error
        self._timestamp = timestamp
        self._latency = latency
        self._leader_epoch = leader_epoch
        if delivery_count is not None and not -32768 <= delivery_count <= 32767:
            raise OverflowError("delivery_count must fit in a signed 16-bit integer")
        self._delivery_count = delivery_count

    def error(self) -> Any:
        return self._error

    def topic(self) -> Any:
        return self._topic

    def partition(self) -> int | None:
        p = self._partition
        return None if p is None or p < 0 else p

    def offset(self) -> int | None:
        o = self._offset
        return None if o is None or o < 0 else o

    def key(self) -> Any:
        return self._key

    def value(self) -> Any:
        return self._value

    def headers(self) -> Any:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        """``(timestamp_type, timestamp_ms)``; ``(TIMESTAMP_NOT_AVAILABLE, ...)`` when unknown."""
        ts = self._timestamp
        return (TIMESTAMP_NOT_AVAILABLE, 0) if ts is None else ts

    def latency(self) -> float | None:
        lat = self._latency
        return None if lat is None or lat < 0 else lat

    def leader_epoch(self) -> int | None:
        e = self._leader_epoch
        return None if e is None or e < 0 else e

    def delivery_count(self) -> int | None:
        """How many times a share group delivered the record (``None`` outside share groups)."""
        d = self._delivery_count
        return None if d is None or d <= 0 else d

    def set_topic(self, topic: Any) -> None:
        self._topic = topic

    def set_headers(self, headers: Any) -> None:
        self._headers = headers

    def set_key(self, key: Any) -> None:
        self._key = key

    def set_value(self, value: Any) -> None:
        self._value = value

    def set_error(self, error: Any) -> None:
        self._error = error

    def __len__(self) -> int:
        value = self._value
        return 0 if value is None else len(value)

    def _state(self) -> tuple[Any, ...]:
        return (
            self._topic,
            -1 if self.partition() is None else self._partition,
            OFFSET_INVALID if self.offset() is None else self._offset,
            self._key,
            self._value,
            self._headers,
            self._error,
            self.timestamp(),
            -1.0 if self.latency() is None else self._latency,
            -1 if self.leader_epoch() is None else self._leader_epoch,
            -1 if self.delivery_count() is None else self._delivery_count,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (Message, self._state())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return self._state() == other._state()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self._error is not None:
            return f"Message(error={self._error!r}, topic={self._topic}, partition={self._partition})"
        return f"Message(topic={self._topic}, partition={self._partition}, offset={self._offset})"


class RecordMessage(Message):
    """A :class:`Message` for a consumed record, reading the native record lazily (one allocation per
    message on the consumer's hot path).  A setter copies the record's fields into the message first."""

    __slots__ = ("_r",)

    def __init__(self, record: Any) -> None:
        self._r = record

    def _materialize(self) -> None:
        r = self._r
        if r is None:
            return
        Message.__init__(
            self,
            r.topic,
            r.partition,
            r.offset,
            r.key,
            r.value,
            list(r.headers) if r.headers else None,
            None,
            (r.timestamp_type + 1, r.timestamp) if r.timestamp >= 0 else (TIMESTAMP_NOT_AVAILABLE, -1),
            None,
            r.leader_epoch,
        )
        self._r = None

    def error(self) -> Any:
        return None if self._r is not None else self._error

    def topic(self) -> Any:
        r = self._r
        return r.topic if r is not None else self._topic

    def partition(self) -> int | None:
        r = self._r
        return r.partition if r is not None else Message.partition(self)

    def offset(self) -> int | None:
        r = self._r
        return r.offset if r is not None else Message.offset(self)

    def key(self) -> Any:
        r = self._r
        return r.key if r is not None else self._key

    def value(self) -> Any:
        r = self._r
        return r.value if r is not None else self._value

    def headers(self) -> Any:
        r = self._r
        if r is None:
            return self._headers
        return list(r.headers) if r.headers else None

    def timestamp(self) -> tuple[int, int]:
        r = self._r
        if r is None:
            return Message.timestamp(self)
        return (r.timestamp_type + 1, r.timestamp) if r.timestamp >= 0 else (TIMESTAMP_NOT_AVAILABLE, -1)

    def latency(self) -> float | None:
        return None if self._r is not None else Message.latency(self)

    def leader_epoch(self) -> int | None:
        r = self._r
        if r is None:
            return Message.leader_epoch(self)
        e = r.leader_epoch
        return None if e is None or e < 0 else e

    def delivery_count(self) -> int | None:
        return None if self._r is not None else Message.delivery_count(self)

    def set_topic(self, topic: Any) -> None:
        self._materialize()
        self._topic = topic

    def set_headers(self, headers: Any) -> None:
        self._materialize()
        self._headers = headers

    def set_key(self, key: Any) -> None:
        self._materialize()
        self._key = key

    def set_value(self, value: Any) -> None:
        self._materialize()
        self._value = value

    def set_error(self, error: Any) -> None:
        self._materialize()
        self._error = error

    def __len__(self) -> int:
        r = self._r
        value = r.value if r is not None else self._value
        return 0 if value is None else len(value)

    def _state(self) -> tuple[Any, ...]:
        self._materialize()
        return Message._state(self)

    def __repr__(self) -> str:
        return f"Message(topic={self.topic()}, partition={self.partition()}, offset={self.offset()})"


class Node:
    """A broker (``id``, ``host``, ``port``, ``rack``)."""

    __slots__ = ("host", "id", "id_string", "port", "rack")

    def __init__(self, id: int, host: str, port: int, rack: str | None = None) -> None:
        self.id = id
        self.id_string = str(id)
        self.host = host
        self.port = port
        self.rack = rack

    def __repr__(self) -> str:
        return f"Node(id={self.id}, host={self.host}, port={self.port}, rack={self.rack})"


class TopicCollection:
    """A list of topic names (for ``AdminClient.describe_topics``)."""

    def __init__(self, topic_names: Iterable[str]) -> None:
        self.topic_names = list(topic_names)


class ConsumerGroupTopicPartitions:
    """A group id and (optionally) its partitions, for listing and altering group offsets."""

    def __init__(self, group_id: str, topic_partitions: Sequence[TopicPartition] | None = None) -> None:
        self.group_id = group_id
        self.topic_partitions = list(topic_partitions) if topic_partitions is not None else None

    def __repr__(self) -> str:
        return f"ConsumerGroupTopicPartitions({self.group_id}, {self.topic_partitions})"


class BrokerMetadata:
    def __init__(self, id: int = -1, host: str | None = None, port: int = -1) -> None:
        self.id = id
        self.host = host
        self.port = port

    def __repr__(self) -> str:
        return f"BrokerMetadata({self.id}, {self.host}:{self.port})"

    def __str__(self) -> str:
        return f"{self.host}:{self.port}/{self.id}"


class PartitionMetadata:
    def __init__(
        self,
        id: int = -1,
        leader: int = -1,
        replicas: Sequence[int] = (),
        isrs: Sequence[int] = (),
        error: KafkaError | None = None,
    ) -> None:
        self.id = id
        self.leader = leader
        self.replicas = list(replicas)
        self.isrs = list(isrs)
        self.error = error

    def __repr__(self) -> str:
        return (
            f"PartitionMetadata({self.id})"
            if self.error is None
            else f"PartitionMetadata({self.id}, {self.error})"
        )

    def __str__(self) -> str:
        return str(self.id)


class TopicMetadata:
    def __init__(
        self,
        topic: str | None = None,
        partitions: dict[int, PartitionMetadata] | None = None,
        error: KafkaError | None = None,
    ) -> None:
        self.topic = topic
        self.partitions: dict[int, PartitionMetadata] = partitions if partitions is not None else {}
        self.error = error

    def __repr__(self) -> str:
        if self.error is not None:
            return f"TopicMetadata({self.topic}, {len(self.partitions)} partitions, {self.error})"
        return f"TopicMetadata({self.topic}, {len(self.partitions)} partitions)"

    def __str__(self) -> str:
        return str(self.topic)


class ClusterMetadata:
    """What ``list_topics()`` returns: ``cluster_id``, ``controller_id``, ``brokers``, ``topics``,
    ``orig_broker_id``, ``orig_broker_name``."""

    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.controller_id = -1
        self.brokers: dict[int, BrokerMetadata] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.orig_broker_id = -1
        self.orig_broker_name: str | None = None

    def __repr__(self) -> str:
        return f"ClusterMetadata({self.cluster_id})"

    def __str__(self) -> str:
        return str(self.cluster_id)


class GroupMember:
    def __init__(self) -> None:
        self.id: str | None = None
        self.client_id: str | None = None
        self.client_host: str | None = None
        self.metadata: bytes | None = None
        self.assignment: bytes | None = None


class GroupMetadata:
    def __init__(self) -> None:
        self.broker: BrokerMetadata | None = None
        self.id: str | None = None
        self.error: KafkaError | None = None
        self.state: str | None = None
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.members: list[GroupMember] = []

    def __repr__(self) -> str:
        return f"GroupMetadata({self.id})"

    def __str__(self) -> str:
        return str(self.id)


def cluster_metadata_from(native: Any, topic: str | None = None) -> ClusterMetadata:
    """confluent's :class:`ClusterMetadata` from kafka-handoff's ``ClusterMetadata`` snapshot
    (``topic`` keeps only that topic, as ``list_topics(topic)`` does)."""
    out = ClusterMetadata()
    out.cluster_id = native.cluster_id
    out.controller_id = native.controller_id
    for node_id, node in native.brokers.items():
        out.brokers[node_id] = BrokerMetadata(node_id, node.host, node.port)
    if out.brokers:
        first = min(out.brokers)
        out.orig_broker_id = first
        b = out.brokers[first]
        out.orig_broker_name = f"{b.host}:{b.port}/{first}"
    names = (
        [topic] if topic is not None else list(native.partitions.keys()) + list(native.topic_errors.keys())
    )
    for name in names:
        parts = native.partitions.get(name)
        code = native.topic_errors.get(name, 0)
        tm = TopicMetadata(name, error=KafkaError(code) if code else None)
        if parts is None and not code:
            tm.error = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
        for p in parts or ():
            tm.partitions[p.partition] = PartitionMetadata(
                p.partition,
                p.leader,
                p.replicas,
                p.isr,
                KafkaError(p.error_code) if p.error_code else None,
            )
        out.topics[name] = tm
    return out
