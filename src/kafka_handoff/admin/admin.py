"""The ``AdminClient``: topics, cluster, consumer groups (both protocols) and their offsets.

Same threading model as the consumer (seed 002): the application thread submits
:class:`~kafka_handoff.admin.calls.AdminCall` objects to the network thread, where the
:class:`~kafka_handoff.admin.calls.AdminCallManager` sends and retries them, and waits on their futures.
An operation made of several steps (find the brokers, then ask each one) runs its steps from the
application thread, all under one deadline (``timeout`` seconds; default ``default.api.timeout.ms``).

Per-entity failures (a topic that already exists, a group that does not) raise the broker error for the
first failing entity; its message names the entity, and the others' errors are attached as notes.
"""

from __future__ import annotations

import logging
import queue
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.admin.calls import (
    AdminCall,
    AdminCallManager,
    GroupCoordinator,
    NoRetry,
    Target,
    is_retriable,
    set_exception,
)
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
from kafka_handoff.admin.share import ShareAdminMixin
from kafka_handoff.config import AdminConfig, parse_admin_config
from kafka_handoff.errors import (
    GroupIdNotFoundError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for_code,
)
from kafka_handoff.group.protocol_data import ConsumerProtocolError, decode_assignment, decode_subscription
from kafka_handoff.network.client import NetworkClient
from kafka_handoff.network.thread import BackgroundError, NetworkThread
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.metadata import MetadataManager, parse_metadata
from kafka_handoff.protocol.requests import ANY_NODE, MonotonicClock
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.security import build_security
from kafka_handoff.types import BrokerNode, ClusterMetadata, OffsetAndMetadata, TopicPartition

__all__ = ["AdminClient", "OffsetSpec"]

log = logging.getLogger(__name__)

_GRACE_MS = 1000
"""How long the application thread waits past a deadline for the network thread's own timeout error."""
_READY_BACKOFF_MAX_MS = 250
"""Cap of the backoff between metadata polls while waiting for topics to become usable."""

_CONFIG_SOURCES = {
    0: "UNKNOWN",
    1: "TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}
_TOPIC_RESOURCE = 2


class OffsetSpec:
    """Which offset :meth:`AdminClient.list_offsets` asks for (or give a timestamp in ms)."""

    LATEST = -1
    EARLIEST = -2
    MAX_TIMESTAMP = -3


class _NotReady(KafkaError):
    """A topic is not usable yet on a broker (internal: makes the readiness call retry)."""

    retriable = True


class AdminClient(ShareAdminMixin):
    """A small Kafka admin client.  Thread-safe: calls from several threads are fine."""

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        props = dict(config or {})
        for key, value in kwargs.items():
            props[key.replace("_", ".")] = value
        self._config: AdminConfig = parse_admin_config(props)
        cfg = self._config
        self._closed = False
        self._clock = MonotonicClock()
        self.client_id: str = cfg.client_id
        self._default_timeout_ms = int(cfg.default_api_timeout_ms)
        self._background: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._fatal: BaseException | None = None

        self._metadata = MetadataManager(
            max_age_ms=int(cfg.metadata_max_age_ms),
            retry_backoff_ms=int(cfg.retry_backoff_ms),
            retry_backoff_max_ms=int(cfg.retry_backoff_max_ms),
            allow_auto_topic_creation=False,
        )
        client = NetworkClient(
            list(cfg.bootstrap_addresses()),
            client_id=self.client_id,
            request_timeout_ms=int(cfg.request_timeout_ms),
            connect_timeout_ms=int(cfg.socket_connection_setup_timeout_ms),
            reconnect_backoff_ms=int(cfg.reconnect_backoff_ms),
            reconnect_backoff_max_ms=int(cfg.reconnect_backoff_max_ms),
            receive_buffer_bytes=int(cfg.receive_buffer_bytes),
            send_buffer_bytes=int(cfg.send_buffer_bytes),
            security=build_security(cfg),
        )
        self._client = client
        self._metadata.listeners.append(lambda cluster, now: client.update_brokers(cluster.brokers.values()))
        self._calls = AdminCallManager(
            retry_backoff_ms=int(cfg.retry_backoff_ms),
            retry_backoff_max_ms=int(cfg.retry_backoff_max_ms),
            request_timeout_ms=int(cfg.request_timeout_ms),
            max_retries=int(cfg.retries),
            on_unknown_node=self._metadata.request_update,
        )
        self._thread = NetworkThread(
            client,
            [self._metadata, self._calls],
            self._clock,
            name=f"kafka-handoff-network-{self.client_id}",
            background_events=self._background,
            on_close=self._on_close_nt,
        )
        self._thread.start()

    # ==================================================================================== lifecycle
    def close(self, timeout: float | None = 30.0) -> None:
        """Stop the network thread; calls still running fail with
        :class:`~kafka_handoff.errors.KafkaError`.  Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._thread.close(self._timeout_ms(timeout))

    def _on_close_nt(self, now: int) -> bool:
        self._calls.fail_all(KafkaError("the admin client was closed"))
        return True

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ==================================================================================== plumbing
    def _timeout_ms(self, timeout: float | None) -> int:
        if timeout is None:
            return self._default_timeout_ms
        return max(0, int(timeout * 1000))

    def _deadline(self, timeout: float | None) -> int:
        if self._closed:
            raise IllegalStateError("this admin client has been closed")
        return self._clock.now_ms() + self._timeout_ms(timeout)

    def _run(self, calls: Sequence[AdminCall], deadline_ms: int) -> list[Any]:
        """Send ``calls`` together; return each one's result or exception, in order."""
        if not calls:
            return []

        def submit(now: int, fut: Future[Any]) -> None:
            for call in calls:
                self._calls.submit(call, now)
            fut.set_result(None)

        event = self._thread.call(submit, name="admin calls")

        def on_submitted(f: Future[Any]) -> None:
            error = f.exception()  # the network thread has stopped: nobody will run the calls
            if error is not None:
                for call in calls:
                    set_exception(call.future, error)

        event.add_done_callback(on_submitted)
        outcomes: list[Any] = []
        for call in calls:
            outcomes.append(self._wait(call.future, deadline_ms + _GRACE_MS, call.name))
        return outcomes

    def _run_one(self, call: AdminCall) -> Any:
        (outcome,) = self._run([call], call.deadline_ms)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _wait(self, future: Future[Any], deadline_ms: int, what: str) -> Any:
        """The future's result or exception; surfaces network-thread errors; cancels at the deadline."""
        while True:
            self._raise_background_errors()
            remaining_ms = deadline_ms - self._clock.now_ms()
            # Not future.result(timeout): its TimeoutError is the builtin one, which KafkaTimeoutError
            # (a call's own outcome) is too.
            done, _ = wait_futures([future], timeout=max(0.0, min(remaining_ms, 100) / 1000.0))
            if done:
                if future.cancelled():
                    return KafkaTimeoutError(f"{what} was cancelled")
                error = future.exception()
                return error if error is not None else future.result()
            if remaining_ms <= 0:
                future.cancel()
                return KafkaTimeoutError(f"{what} did not complete in time")

    def _raise_background_errors(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        while True:
            try:
                event = self._background.get_nowait()
            except queue.Empty:
                return
            if isinstance(event, BackgroundError):
                if event.fatal:
                    self._fatal = event.error
                raise event.error

    @staticmethod
    def _raise_first(errors: Sequence[BaseException]) -> None:
        if not errors:
            return
        first = errors[0]
        for other in errors[1:]:
            first.add_note(f"also: {other}")
        raise first

    # ==================================================================================== metadata
    def _metadata_call(
        self,
        topics: Sequence[str] | None,
        deadline_ms: int,
        *,
        target: Target = ANY_NODE,
        check: Callable[[ClusterMetadata], None] | None = None,
        name: str = "Metadata",
        backoff_max_ms: int | None = None,
    ) -> AdminCall:
        names = None if topics is None else list(topics)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "topics": None if names is None else [{"name": n, "topic_id": None} for n in names],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            }

        def handle(response: Any, version: int, node: int) -> ClusterMetadata:
            cluster = parse_metadata(response)
            if cluster.brokers:
                self._client.update_brokers(cluster.brokers.values())
            if check is not None:
                check(cluster)
            return cluster

        return AdminCall(
            name,
            ApiKey.METADATA,
            target,
            build,
            handle,
            deadline_ms,
            min_version=1,
            backoff_max_ms=backoff_max_ms,
        )

    def _cluster(self, topics: Sequence[str] | None, deadline_ms: int) -> ClusterMetadata:
        def check(cluster: ClusterMetadata) -> None:
            for topic, code in cluster.topic_errors.items():
                if code != ErrorCode.unknown_topic_or_partition and error_for_code(code).retriable:
                    raise error_for_code(code, f"topic {topic!r}")  # e.g. LEADER_NOT_AVAILABLE: retry

        result: ClusterMetadata = self._run_one(self._metadata_call(topics, deadline_ms, check=check))
        return result

    def describe_cluster(self, timeout: float | None = None) -> ClusterDescription:
        """Cluster id, the controller id and the live brokers (DescribeCluster; Metadata on old brokers)."""
        deadline = self._deadline(timeout)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"include_cluster_authorized_operations": False, "endpoint_type": 1}

        def handle(response: Any, version: int, node: int) -> ClusterDescription:
            code = int(response.error_code)
            if code != ErrorCode.none:
                raise error_for_code(code, response.error_message)
            brokers = tuple(
                sorted(
                    (
                        BrokerNode(int(b.broker_id), str(b.host), int(b.port), b.rack)
                        for b in response.brokers
                    ),
                    key=lambda b: b.node_id,
                )
            )
            return ClusterDescription(str(response.cluster_id), int(response.controller_id), brokers)

        call = AdminCall("DescribeCluster", ApiKey.DESCRIBE_CLUSTER, ANY_NODE, build, handle, deadline)
        try:
            result: ClusterDescription = self._run_one(call)
            return result
        except UnsupportedVersionError:
            cluster = self._cluster([], deadline)
            brokers = tuple(sorted(cluster.brokers.values(), key=lambda b: b.node_id))
            return ClusterDescription(cluster.cluster_id, cluster.controller_id, brokers)

    # ==================================================================================== topics
    def list_topics(self, include_internal: bool = False, timeout: float | None = None) -> list[TopicListing]:
        """Every topic, sorted by name (internal ones such as ``__consumer_offsets`` only if asked)."""
        cluster = self._cluster(None, self._deadline(timeout))
        names = set(cluster.partitions) | set(cluster.topic_errors)
        return [
            TopicListing(n, cluster.topic_ids.get(n), n in cluster.internal_topics)
            for n in sorted(names)
            if include_internal or n not in cluster.internal_topics
        ]

    def describe_topics(
        self, names: Iterable[str], timeout: float | None = None
    ) -> dict[str, TopicDescription]:
        """Partitions (leader, replicas, ISR) and ids of ``names``; raises for a topic that does not exist."""
        topics = _unique(names, "topic")
        cluster = self._cluster(topics, self._deadline(timeout))
        return self._descriptions(cluster, topics)

    @staticmethod
    def _descriptions(cluster: ClusterMetadata, topics: Sequence[str]) -> dict[str, TopicDescription]:
        out: dict[str, TopicDescription] = {}
        errors: list[BaseException] = []
        for name in topics:
            code = cluster.topic_errors.get(name)
            if code is not None:
                detail = (
                    "it does not exist"
                    if code == ErrorCode.unknown_topic_or_partition
                    else "the broker returned an error"
                )
                errors.append(error_for_code(code, f"cannot describe topic {name!r}: {detail}"))
                continue
            parts = cluster.partitions.get(name)
            if parts is None:
                errors.append(
                    UnknownTopicOrPartitionError(f"cannot describe topic {name!r}: it does not exist")
                )
                continue
            out[name] = TopicDescription(
                name, cluster.topic_ids.get(name), name in cluster.internal_topics, parts
            )
        AdminClient._raise_first(errors)
        return out

    def create_topics(
        self,
        new_topics: Iterable[NewTopic],
        *,
        validate_only: bool = False,
        if_not_exists: bool = False,
        wait: bool = True,
        timeout: float | None = None,
    ) -> dict[str, CreateTopicResult]:
        """Create topics.  With ``wait`` (the default) return only once every broker's metadata shows every
        partition with a leader, so a created topic is usable at once.  A topic that exists already raises
        :class:`~kafka_handoff.errors.TopicAlreadyExistsError` unless ``if_not_exists``."""
        topics = list(new_topics)
        _unique((t.name for t in topics), "topic")
        deadline = self._deadline(timeout)
        outcomes = self._run([self._create_topic_call(t, validate_only, deadline) for t in topics], deadline)
        results: dict[str, CreateTopicResult] = {}
        errors: list[BaseException] = []
        existing: list[str] = []
        for topic, outcome in zip(topics, outcomes, strict=True):
            if isinstance(outcome, TopicAlreadyExistsError) and if_not_exists:
                existing.append(topic.name)
            elif isinstance(outcome, BaseException):
                errors.append(outcome)
            else:
                results[topic.name] = outcome
        self._raise_first(errors)
        if validate_only:
            return results
        # Partitions each topic must show: what the broker reports it created (v5+), else what was asked;
        # a topic that existed already only has to be there.
        expected = {name: max(1, r.num_partitions) for name, r in results.items()}
        expected.update(dict.fromkeys(existing, 1))
        if wait:
            described = self._wait_for_topics(expected, deadline)
        elif existing:
            described = self.describe_topics(existing, timeout=max(0, deadline - self._clock.now_ms()) / 1000)
        else:
            described = {}
        for name in existing:
            d = described[name]
            results[name] = CreateTopicResult(
                name, d.topic_id, len(d.partitions), d.replication_factor, {}, created=False
            )
        return {t.name: results[t.name] for t in topics}

    def _create_topic_call(self, topic: NewTopic, validate_only: bool, deadline: int) -> AdminCall:
        name = topic.name
        timed_out = [False]
        if topic.replica_assignments:
            partitions, replication = -1, -1
            assignments = [
                {"partition_index": p, "broker_ids": list(brokers)}
                for p, brokers in sorted(topic.replica_assignments.items())
            ]
        else:
            partitions, replication, assignments = topic.num_partitions, topic.replication_factor, []

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": partitions,
                        "replication_factor": replication,
                        "assignments": assignments,
                        "configs": [{"name": k, "value": v} for k, v in topic.configs.items()],
                    }
                ],
                "timeout": timeout_ms,
                "validate_only": validate_only,
            }

        def handle(response: Any, version: int, node: int) -> CreateTopicResult:
            (entry,) = [t for t in response.topics if t.name == name] or list(response.topics)
            code = int(entry.error_code)
            if code == ErrorCode.topic_already_exists and timed_out[0]:
                code = 0  # our earlier attempt timed out on the broker but did create the topic
            if code != ErrorCode.none:
                error = error_for_code(
                    code, f"cannot create topic {name!r}: {entry.error_message or ''}".strip()
                )
                if isinstance(error, RequestTimedOutError):
                    timed_out[0] = True
                raise error if error.retriable else NoRetry(error)
            configs = {c.name: c.value for c in (getattr(entry, "configs", None) or ())}
            tid = getattr(entry, "topic_id", None)
            return CreateTopicResult(
                name=name,
                topic_id=tid if tid is not None and tid.int != 0 else None,
                num_partitions=int(getattr(entry, "num_partitions", len(assignments) or partitions)),
                replication_factor=int(getattr(entry, "replication_factor", replication)),
                configs=configs,
            )

        return AdminCall(
            f"CreateTopics(topic {name!r})", ApiKey.CREATE_TOPICS, ANY_NODE, build, handle, deadline
        )

    def _wait_for_topics(self, expected: Mapping[str, int], deadline: int) -> dict[str, TopicDescription]:
        """Wait until every broker's metadata shows each topic with at least ``expected[topic]`` partitions,
        each with a leader.  Returns the descriptions as the first broker saw them."""
        names = sorted(expected)

        def check(cluster: ClusterMetadata) -> None:
            for name in names:
                parts = cluster.partitions.get(name)
                if parts is None:
                    raise _NotReady(f"topic {name!r} is not in the metadata yet")
                if len(parts) < expected[name]:
                    raise _NotReady(f"topic {name!r} has {len(parts)} of {expected[name]} partitions")
                leaderless = [p.partition for p in parts if p.leader < 0]
                if leaderless:
                    raise _NotReady(f"partitions {leaderless} of topic {name!r} have no leader yet")

        first = self._cluster([], deadline)
        brokers = sorted(first.brokers) or [ANY_NODE]
        calls = [
            self._metadata_call(
                names,
                deadline,
                target=b,
                check=check,
                name=f"wait for topics {names} on broker {b}",
                backoff_max_ms=_READY_BACKOFF_MAX_MS,
            )
            for b in brokers
        ]
        outcomes = self._run(calls, deadline)
        self._raise_first([o for o in outcomes if isinstance(o, BaseException)])
        return self._descriptions(outcomes[0], names)

    def _wait_for_deletion(self, names: Sequence[str], deadline: int) -> None:
        def check(cluster: ClusterMetadata) -> None:
            present = [n for n in names if n in cluster.partitions]
            if present:
                raise _NotReady(f"topics {present} are still in the metadata")

        first = self._cluster([], deadline)
        calls = [
            self._metadata_call(
                names,
                deadline,
                target=b,
                check=check,
                name=f"wait for deletion of {list(names)} on broker {b}",
                backoff_max_ms=_READY_BACKOFF_MAX_MS,
            )
            for b in sorted(first.brokers) or [ANY_NODE]
        ]
        self._raise_first([o for o in self._run(calls, deadline) if isinstance(o, BaseException)])

    def delete_topics(
        self,
        names: Iterable[str],
        *,
        if_exists: bool = False,
        wait: bool = True,
        timeout: float | None = None,
    ) -> None:
        """Delete topics.  A topic that does not exist raises
        :class:`~kafka_handoff.errors.UnknownTopicOrPartitionError` unless ``if_exists``.  With ``wait``
        (the default) return once no broker's metadata lists them any more."""
        topics = _unique(names, "topic")
        deadline = self._deadline(timeout)
        outcomes = self._run([self._delete_topic_call(n, deadline) for n in topics], deadline)
        errors = [
            o
            for o in outcomes
            if isinstance(o, BaseException)
            and not (if_exists and isinstance(o, UnknownTopicOrPartitionError))
        ]
        self._raise_first(errors)
        if wait:
            self._wait_for_deletion(topics, deadline)

    def _delete_topic_call(self, name: str, deadline: int) -> AdminCall:
        timed_out = [False]

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            if version >= 6:
                return {"topics": [{"name": name, "topic_id": None}], "timeout": timeout_ms}
            return {"topic_names": [name], "timeout": timeout_ms}

        def handle(response: Any, version: int, node: int) -> None:
            (entry,) = [r for r in response.responses if r.name == name] or list(response.responses)
            code = int(entry.error_code)
            if code == ErrorCode.none or (code == ErrorCode.unknown_topic_or_partition and timed_out[0]):
                return
            message = getattr(entry, "error_message", None) or ""
            if code == ErrorCode.unknown_topic_or_partition:
                raise NoRetry(
                    UnknownTopicOrPartitionError(f"cannot delete topic {name!r}: it does not exist")
                )
            error = error_for_code(code, f"cannot delete topic {name!r}: {message}".strip())
            if isinstance(error, RequestTimedOutError):
                timed_out[0] = True
            raise error if error.retriable else NoRetry(error)

        return AdminCall(
            f"DeleteTopics(topic {name!r})", ApiKey.DELETE_TOPICS, ANY_NODE, build, handle, deadline
        )

    def create_partitions(
        self,
        new_counts: Mapping[str, int],
        *,
        validate_only: bool = False,
        wait: bool = True,
        timeout: float | None = None,
    ) -> None:
        """Grow topics to ``new_counts[topic]`` partitions in total (Kafka cannot shrink topics)."""
        deadline = self._deadline(timeout)
        calls = [self._create_partitions_call(n, c, validate_only, deadline) for n, c in new_counts.items()]
        self._raise_first([o for o in self._run(calls, deadline) if isinstance(o, BaseException)])
        if wait and not validate_only and new_counts:
            self._wait_for_topics(dict(new_counts), deadline)

    def _create_partitions_call(self, name: str, count: int, validate_only: bool, deadline: int) -> AdminCall:
        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "topics": [{"name": name, "count": count, "assignments": None}],
                "timeout": timeout_ms,
                "validate_only": validate_only,
            }

        def handle(response: Any, version: int, node: int) -> None:
            (entry,) = [r for r in response.results if r.name == name] or list(response.results)
            code = int(entry.error_code)
            if code == ErrorCode.none:
                return
            error = error_for_code(
                code, f"cannot grow topic {name!r} to {count} partitions: {entry.error_message or ''}".strip()
            )
            if code == ErrorCode.unknown_topic_or_partition:
                raise NoRetry(error)
            raise error if error.retriable else NoRetry(error)

        return AdminCall(
            f"CreatePartitions(topic {name!r})", ApiKey.CREATE_PARTITIONS, ANY_NODE, build, handle, deadline
        )

    def describe_configs(
        self, topics: Iterable[str], timeout: float | None = None
    ) -> dict[str, dict[str, ConfigEntry]]:
        """Every configuration entry of each topic (its own settings and the defaults it inherits)."""
        names = _unique(topics, "topic")
        deadline = self._deadline(timeout)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "resources": [
                    {"resource_type": _TOPIC_RESOURCE, "resource_name": n, "configuration_keys": None}
                    for n in names
                ],
                "include_synonyms": False,
                "include_documentation": False,
            }

        def handle(response: Any, version: int, node: int) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for r in response.results:
                code = int(r.error_code)
                if code != ErrorCode.none:
                    detail = (
                        "it does not exist"
                        if code == ErrorCode.unknown_topic_or_partition
                        else (r.error_message or "")
                    )
                    out[r.resource_name] = error_for_code(
                        code, f"cannot describe the configs of topic {r.resource_name!r}: {detail}".strip()
                    )
                    continue
                out[r.resource_name] = {
                    c.name: ConfigEntry(
                        c.name,
                        c.value,
                        _CONFIG_SOURCES.get(int(c.config_source), str(int(c.config_source))),
                        bool(c.read_only),
                        bool(c.is_sensitive),
                    )
                    for c in r.configs
                }
            return out

        outcome: dict[str, Any] = self._run_one(
            AdminCall("DescribeConfigs", ApiKey.DESCRIBE_CONFIGS, ANY_NODE, build, handle, deadline)
        )
        self._raise_first([v for v in outcome.values() if isinstance(v, BaseException)])
        return {n: outcome[n] for n in names}

    def list_offsets(
        self,
        partitions: Iterable[TopicPartition],
        spec: int = OffsetSpec.LATEST,
        *,
        timeout: float | None = None,
    ) -> dict[TopicPartition, int]:
        """The offset of each partition for ``spec``: ``OffsetSpec.LATEST`` (the log end offset),
        ``OffsetSpec.EARLIEST``, ``OffsetSpec.MAX_TIMESTAMP``, or a timestamp in ms (the first offset
        at or after it; -1 when there is none).  Asked of each partition's leader."""
        wanted = sorted({TopicPartition(*tp) for tp in partitions})
        deadline = self._deadline(timeout)
        result: dict[TopicPartition, int] = {}
        attempts = 0
        retry_backoff = ExponentialBackoff(
            int(self._config.retry_backoff_ms), int(self._config.retry_backoff_max_ms)
        )
        while wanted:
            attempts += 1
            cluster = self._cluster(sorted({tp.topic for tp in wanted}), deadline)
            by_leader: dict[int, list[TopicPartition]] = {}
            retry: list[TopicPartition] = []
            errors: list[BaseException] = []
            for tp in wanted:
                if tp.topic in cluster.topic_errors or tp.topic not in cluster.partitions:
                    errors.append(UnknownTopicOrPartitionError(f"cannot list offsets of {tp}: no such topic"))
                    continue
                if cluster.partition_count(tp.topic) is not None and tp.partition >= len(
                    cluster.partitions[tp.topic]
                ):
                    errors.append(
                        UnknownTopicOrPartitionError(f"cannot list offsets of {tp}: no such partition")
                    )
                    continue
                leader = cluster.leader_for(tp)
                if leader is None:
                    retry.append(tp)
                else:
                    by_leader.setdefault(leader, []).append(tp)
            self._raise_first(errors)
            calls = [
                self._list_offsets_call(leader, tps, spec, deadline) for leader, tps in by_leader.items()
            ]
            for tps, outcome in zip(by_leader.values(), self._run(calls, deadline), strict=True):
                if isinstance(outcome, BaseException):
                    if not is_retriable(outcome):
                        raise outcome
                    retry.extend(tps)  # the leader is unreachable: ask the metadata for the new one
                    continue
                for tp, value in outcome.items():
                    if isinstance(value, BaseException):
                        if getattr(value, "retriable", False):
                            retry.append(tp)
                        else:
                            errors.append(value)
                    else:
                        result[tp] = value
            self._raise_first(errors)
            wanted = sorted(retry)
            if wanted:
                left_ms = deadline - self._clock.now_ms()
                if left_ms <= 0:
                    raise KafkaTimeoutError(f"listing offsets of {[str(tp) for tp in wanted]} timed out")
                time.sleep(min(left_ms, retry_backoff.after_failures(attempts)) / 1000.0)
        return dict(sorted(result.items()))

    def _list_offsets_call(
        self, leader: int, tps: Sequence[TopicPartition], spec: int, deadline: int
    ) -> AdminCall:
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": p, "current_leader_epoch": -1, "timestamp": spec}
                            for p in parts
                        ],
                    }
                    for topic, parts in by_topic.items()
                ],
                "timeout": timeout_ms,
            }

        def handle(response: Any, version: int, node: int) -> dict[TopicPartition, Any]:
            out: dict[TopicPartition, Any] = {}
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(str(t.name), int(p.partition_index))
                    code = int(p.error_code)
                    out[tp] = error_for_code(code, f"listing offsets of {tp}") if code else int(p.offset)
            return out

        return AdminCall(
            f"ListOffsets(broker {leader})",
            ApiKey.LIST_OFFSETS,
            leader,
            build,
            handle,
            deadline,
            min_version=1,
            reroute=True,
        )

    # ==================================================================================== groups
    def list_groups(self, timeout: float | None = None) -> list[GroupListing]:
        """Every group the brokers coordinate (ListGroups to each broker), sorted by group id."""
        deadline = self._deadline(timeout)
        cluster = self._cluster([], deadline)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"states_filter": [], "types_filter": []}

        def handle(response: Any, version: int, node: int) -> list[GroupListing]:
            code = int(response.error_code)
            if code != ErrorCode.none:
                error = error_for_code(code, f"listing the groups of broker {node}")
                raise error if error.retriable else NoRetry(error)
            return [
                GroupListing(
                    str(g.group_id),
                    str(g.protocol_type),
                    getattr(g, "group_state", None),
                    getattr(g, "group_type", None),
                )
                for g in response.groups
            ]

        calls = [
            AdminCall(f"ListGroups(broker {b})", ApiKey.LIST_GROUPS, b, build, handle, deadline)
            for b in sorted(cluster.brokers)
        ]
        listings: dict[str, GroupListing] = {}
        errors: list[BaseException] = []
        for outcome in self._run(calls, deadline):
            if isinstance(outcome, BaseException):
                errors.append(outcome)
                continue
            for g in outcome:
                listings[g.group_id] = g
        self._raise_first(errors)
        return [listings[g] for g in sorted(listings)]

    def describe_groups(
        self, group_ids: Iterable[str], timeout: float | None = None
    ) -> dict[str, GroupDescription]:
        """Members and assignments of consumer groups of either protocol.

        Each group is asked with ConsumerGroupDescribe first (KIP-848 groups: member epochs, current and
        target assignments); groups it does not know (classic groups) are described with DescribeGroups,
        whose member assignments are decoded from the consumer protocol.  A group that does not exist raises
        :class:`~kafka_handoff.errors.GroupIdNotFoundError`."""
        groups = _unique(group_ids, "group")
        deadline = self._deadline(timeout)
        outcomes = self._run([self._consumer_group_describe_call(g, deadline) for g in groups], deadline)
        classic = [
            g
            for g, o in zip(groups, outcomes, strict=True)
            if o is None or isinstance(o, (UnsupportedVersionError, GroupIdNotFoundError))
        ]
        described: dict[str, Any] = dict(zip(groups, outcomes, strict=True))
        if classic:
            classic_outcomes = self._run([self._describe_groups_call(g, deadline) for g in classic], deadline)
            described.update(zip(classic, classic_outcomes, strict=True))
        self._raise_first([o for o in described.values() if isinstance(o, BaseException)])
        # Resolve topic ids the broker did not name (consumer protocol) through the metadata.
        missing_ids = {
            tid
            for d in described.values()
            for raw in d.raw_members
            for tid, name, _ in raw
            if not name and tid is not None
        }
        names_by_id: dict[uuid.UUID, str] = {}
        if missing_ids:
            names_by_id = self._cluster(None, deadline).topic_names_by_id()
        return {g: described[g].resolve(names_by_id) for g in groups}

    def _consumer_group_describe_call(self, group_id: str, deadline: int) -> AdminCall:
        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"group_ids": [group_id], "include_authorized_operations": False}

        def handle(response: Any, version: int, node: int) -> _PendingDescription | None:
            (g,) = [x for x in response.groups if x.group_id == group_id] or list(response.groups)
            code = int(g.error_code)
            if code == ErrorCode.group_id_not_found:
                return None  # not a consumer-protocol group (or none at all): try DescribeGroups
            if code != ErrorCode.none:
                error = error_for_code(
                    code, f"cannot describe group {group_id!r}: {g.error_message or ''}".strip()
                )
                raise error if error.retriable else NoRetry(error)
            members: list[tuple[Any, ...]] = []
            raw_members: list[list[tuple[uuid.UUID | None, str, tuple[int, ...]]]] = []
            for m in g.members:
                current = [_raw_tp(t) for t in m.assignment.topic_partitions]
                target = [_raw_tp(t) for t in m.target_assignment.topic_partitions]
                raw_members.append(current + target)
                members.append((m, current, target))
            return _PendingDescription(
                group_id=group_id,
                kind="consumer",
                state=str(g.group_state),
                protocol_type="consumer",
                assignor=str(g.assignor_name),
                coordinator=self._calls.coordinators.get(group_id),
                group_epoch=int(g.group_epoch),
                assignment_epoch=int(g.assignment_epoch),
                members=members,
                raw_members=raw_members,
            )

        return AdminCall(
            f"ConsumerGroupDescribe(group {group_id!r})",
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            GroupCoordinator(group_id),
            build,
            handle,
            deadline,
        )

    def _describe_groups_call(self, group_id: str, deadline: int) -> AdminCall:
        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"groups": [group_id], "include_authorized_operations": False}

        def handle(response: Any, version: int, node: int) -> _PendingDescription:
            (g,) = [x for x in response.groups if x.group_id == group_id] or list(response.groups)
            code = int(g.error_code)
            if code != ErrorCode.none:
                message = getattr(g, "error_message", None) or ""
                error = error_for_code(code, f"cannot describe group {group_id!r}: {message}".strip())
                if code == ErrorCode.group_id_not_found:
                    error = GroupIdNotFoundError(f"group {group_id!r} does not exist")
                raise error if error.retriable else NoRetry(error)
            if str(g.group_state) == "Dead":
                raise NoRetry(GroupIdNotFoundError(f"group {group_id!r} does not exist"))
            members = tuple(_classic_member(m, str(g.protocol_type)) for m in g.members)
            return _PendingDescription(
                group_id=group_id,
                kind="classic",
                state=str(g.group_state),
                protocol_type=str(g.protocol_type),
                assignor=str(g.protocol_data),
                coordinator=self._calls.coordinators.get(group_id),
                classic_members=members,
            )

        return AdminCall(
            f"DescribeGroups(group {group_id!r})",
            ApiKey.DESCRIBE_GROUPS,
            GroupCoordinator(group_id),
            build,
            handle,
            deadline,
        )

    def list_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        timeout: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (OffsetFetch to its coordinator).  Without ``partitions``: every
        partition with a committed offset; with them: each one, ``None`` where nothing is committed."""
        deadline = self._deadline(timeout)
        wanted = None if partitions is None else sorted({TopicPartition(*tp) for tp in partitions})
        topics: list[dict[str, Any]] | None = None
        if wanted is not None:
            grouped: dict[str, list[int]] = {}
            for tp in wanted:
                grouped.setdefault(tp.topic, []).append(tp.partition)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in grouped.items()]

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            if version >= 8:
                group = {"group_id": group_id, "member_id": None, "member_epoch": -1, "topics": topics}
                return {"groups": [group], "require_stable": False}
            return {"group_id": group_id, "topics": topics, "require_stable": False}

        def handle(response: Any, version: int, node: int) -> dict[TopicPartition, OffsetAndMetadata | None]:
            if version >= 8:
                (group,) = [g for g in response.groups if g.group_id == group_id] or list(response.groups)
                code, entries = int(group.error_code), group.topics
            else:
                code, entries = int(getattr(response, "error_code", 0)), response.topics
            if code != ErrorCode.none:
                error = error_for_code(code, f"cannot fetch the offsets of group {group_id!r}")
                raise error if error.retriable else NoRetry(error)
            out: dict[TopicPartition, OffsetAndMetadata | None] = {}
            for t in entries:
                for p in t.partitions:
                    tp = TopicPartition(str(t.name), int(p.partition_index))
                    pcode = int(p.error_code)
                    if pcode == ErrorCode.unknown_topic_or_partition:
                        out[tp] = None
                        continue
                    if pcode != ErrorCode.none:
                        error = error_for_code(
                            pcode, f"cannot fetch the offset of {tp} for group {group_id!r}"
                        )
                        raise error if error.retriable else NoRetry(error)
                    offset = int(p.committed_offset)
                    if offset < 0:
                        out[tp] = None
                        continue
                    epoch = int(getattr(p, "committed_leader_epoch", -1))
                    out[tp] = OffsetAndMetadata(offset, p.metadata or "", epoch if epoch >= 0 else None)
            return out

        result: dict[TopicPartition, OffsetAndMetadata | None] = self._run_one(
            AdminCall(
                f"OffsetFetch(group {group_id!r})",
                ApiKey.OFFSET_FETCH,
                GroupCoordinator(group_id),
                build,
                handle,
                deadline,
            )
        )
        if wanted is None:
            return {tp: o for tp, o in sorted(result.items()) if o is not None}
        return {tp: result.get(tp) for tp in wanted}

    def delete_groups(self, group_ids: Iterable[str], timeout: float | None = None) -> None:
        """Delete groups (they must be empty: no active members)."""
        groups = _unique(group_ids, "group")
        deadline = self._deadline(timeout)

        def make(group_id: str) -> AdminCall:
            def build(version: int, timeout_ms: int) -> dict[str, Any]:
                return {"groups_names": [group_id]}

            def handle(response: Any, version: int, node: int) -> None:
                (r,) = [x for x in response.results if x.group_id == group_id] or list(response.results)
                code = int(r.error_code)
                if code == ErrorCode.none:
                    return
                details = {
                    68: "it still has active members",
                    ErrorCode.group_id_not_found: "it does not exist",
                }
                error = error_for_code(
                    code, f"cannot delete group {group_id!r}: {details.get(code, '')}".strip()
                )
                raise error if error.retriable else NoRetry(error)

            return AdminCall(
                f"DeleteGroups(group {group_id!r})",
                ApiKey.DELETE_GROUPS,
                GroupCoordinator(group_id),
                build,
                handle,
                deadline,
            )

        self._raise_first(
            [o for o in self._run([make(g) for g in groups], deadline) if isinstance(o, BaseException)]
        )


# ======================================================================================== helpers


def _unique(names: Iterable[str], what: str) -> list[str]:
    if isinstance(names, str):
        names = [names]
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{what} names must be non-empty strings, got {name!r}")
        if name in out:
            raise ValueError(f"{what} {name!r} is given more than once")
        out.append(name)
    return out


def _raw_tp(t: Any) -> tuple[uuid.UUID | None, str, tuple[int, ...]]:
    tid = t.topic_id
    return (
        tid if tid is not None and tid.int != 0 else None,
        str(t.topic_name or ""),
        tuple(int(p) for p in t.partitions),
    )


def _tps(
    raw: Iterable[tuple[uuid.UUID | None, str, tuple[int, ...]]], names_by_id: Mapping[uuid.UUID, str]
) -> tuple[TopicPartition, ...]:
    out: list[TopicPartition] = []
    for tid, name, parts in raw:
        topic = name or (names_by_id.get(tid) if tid is not None else None) or str(tid)
        out.extend(TopicPartition(topic, p) for p in parts)
    return tuple(sorted(out))


def _classic_member(m: Any, protocol_type: str) -> MemberDescription:
    assignment: tuple[TopicPartition, ...] = ()
    topics: tuple[str, ...] = ()
    if protocol_type == "consumer":
        try:
            assignment = tuple(sorted(decode_assignment(bytes(m.member_assignment)).partitions))
        except ConsumerProtocolError:
            log.warning("member %s of a group has an undecodable assignment", m.member_id)
        if m.member_metadata:
            try:
                topics = tuple(decode_subscription(bytes(m.member_metadata)).topics)
            except ConsumerProtocolError:
                log.debug("member %s has undecodable subscription metadata", m.member_id)
    return MemberDescription(
        member_id=str(m.member_id),
        client_id=str(m.client_id),
        host=str(m.client_host),
        group_instance_id=getattr(m, "group_instance_id", None),
        assignment=assignment,
        subscribed_topics=topics,
    )


class _PendingDescription:
    """A described group whose topic ids may still need names (consumer protocol)."""

    def __init__(
        self,
        *,
        group_id: str,
        kind: str,
        state: str,
        protocol_type: str,
        assignor: str,
        coordinator: BrokerNode | None,
        group_epoch: int | None = None,
        assignment_epoch: int | None = None,
        members: Sequence[tuple[Any, ...]] = (),
        raw_members: Sequence[Sequence[tuple[uuid.UUID | None, str, tuple[int, ...]]]] = (),
        classic_members: tuple[MemberDescription, ...] = (),
    ) -> None:
        self.group_id = group_id
        self.kind = kind
        self.state = state
        self.protocol_type = protocol_type
        self.assignor = assignor
        self.coordinator = coordinator
        self.group_epoch = group_epoch
        self.assignment_epoch = assignment_epoch
        self.members = members
        self.raw_members = raw_members
        self.classic_members = classic_members

    def resolve(self, names_by_id: Mapping[uuid.UUID, str]) -> GroupDescription:
        if self.kind == "classic":
            members = self.classic_members
        else:
            members = tuple(
                MemberDescription(
                    member_id=str(m.member_id),
                    client_id=str(m.client_id),
                    host=str(m.client_host),
                    group_instance_id=m.instance_id,
                    assignment=_tps(current, names_by_id),
                    target_assignment=_tps(target, names_by_id),
                    member_epoch=int(m.member_epoch),
                    subscribed_topics=tuple(str(t) for t in m.subscribed_topic_names),
                    subscribed_regex=m.subscribed_topic_regex or None,
                    rack_id=m.rack_id,
                )
                for m, current, target in self.members
            )
        return GroupDescription(
            group_id=self.group_id,
            type=self.kind,
            state=self.state,
            protocol_type=self.protocol_type,
            assignor=self.assignor,
            members=tuple(sorted(members, key=lambda m: (m.client_id, m.member_id))),
            coordinator=self.coordinator,
            group_epoch=self.group_epoch,
            assignment_epoch=self.assignment_epoch,
        )
