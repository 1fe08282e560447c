"""Topic administration: list, describe, create and delete topics, add partitions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.admin.calls import (
    AdminCall,
    NoRetry,
    Steps,
    drives_steps,
    raise_first,
    run_calls,
)
from kafka_handoff.admin.plumbing import AdminPlumbing, unique_names
from kafka_handoff.admin.results import (
    CreateTopicResult,
    NewTopic,
    TopicDescription,
    TopicListing,
)
from kafka_handoff.errors import (
    KafkaError,
    Needs,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from kafka_handoff.protocol.requests import ANY_NODE
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import ClusterMetadata

_READY_BACKOFF_MAX_MS = 250
"""Cap of the backoff between metadata polls while waiting for topics to become usable."""


class _NotReady(KafkaError):
    """A topic is not usable yet on a broker (internal: makes the readiness call retry)."""

    retriable = True


class TopicAdminMixin(AdminPlumbing):
    """Topic administration: mixed into :class:`~kafka_handoff.admin.AdminClient` (uses its call
    plumbing)."""

    @drives_steps
    def list_topics(
        self, include_internal: bool = False, timeout: float | None = None
    ) -> Steps[list[TopicListing]]:
        """Every topic, sorted by name (internal ones such as ``__consumer_offsets`` only if asked)."""
        cluster = yield from self._cluster_steps(None, self._deadline(timeout))
        names = set(cluster.partitions) | set(cluster.topic_errors)
        return [
            TopicListing(n, cluster.topic_ids.get(n), n in cluster.internal_topics)
            for n in sorted(names)
            if include_internal or n not in cluster.internal_topics
        ]

    @drives_steps
    def describe_topics(
        self, names: Iterable[str], timeout: float | None = None
    ) -> Steps[dict[str, TopicDescription]]:
        """Partitions (leader, replicas, ISR) and ids of ``names``; raises for a topic that does not exist."""
        topics = unique_names(names, "topic")
        cluster = yield from self._cluster_steps(topics, self._deadline(timeout))
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
                needs = Needs("Metadata", topic=("DESCRIBE", name))
                errors.append(error_for_code(code, f"cannot describe topic {name!r}: {detail}", needs=needs))
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
        raise_first(errors)
        return out

    @drives_steps
    def create_topics(
        self,
        new_topics: Iterable[NewTopic],
        *,
        validate_only: bool = False,
        if_not_exists: bool = False,
        wait: bool = True,
        timeout: float | None = None,
    ) -> Steps[dict[str, CreateTopicResult]]:
        """Create topics.  With ``wait`` (the default) return only once every broker's metadata shows every
        partition with a leader, so a created topic is usable at once.  A topic that exists already raises
        :class:`~kafka_handoff.errors.TopicAlreadyExistsError` unless ``if_not_exists``."""
        topics = list(new_topics)
        unique_names((t.name for t in topics), "topic")
        deadline = self._deadline(timeout)
        outcomes = yield from run_calls(
            [self._create_topic_call(t, validate_only, deadline) for t in topics], deadline
        )
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
            described = yield from self._wait_for_topics(expected, deadline)
        elif existing:
            described = self._descriptions((yield from self._cluster_steps(existing, deadline)), existing)
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
                    code,
                    f"cannot create topic {name!r}: {entry.error_message or ''}".strip(),
                    needs=Needs("CreateTopics", topic=("CREATE", name), cluster="CREATE"),
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

    def _wait_for_topics(
        self, expected: Mapping[str, int], deadline: int
    ) -> Steps[dict[str, TopicDescription]]:
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

        first = yield from self._cluster_steps([], deadline)
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
        outcomes = yield from run_calls(calls, deadline)
        self._raise_first([o for o in outcomes if isinstance(o, BaseException)])
        return self._descriptions(outcomes[0], names)

    def _wait_for_deletion(self, names: Sequence[str], deadline: int) -> Steps[None]:
        def check(cluster: ClusterMetadata) -> None:
            present = [n for n in names if n in cluster.partitions]
            if present:
                raise _NotReady(f"topics {present} are still in the metadata")

        first = yield from self._cluster_steps([], deadline)
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
        self._raise_first(
            [o for o in (yield from run_calls(calls, deadline)) if isinstance(o, BaseException)]
        )

    @drives_steps
    def delete_topics(
        self,
        names: Iterable[str],
        *,
        if_exists: bool = False,
        wait: bool = True,
        timeout: float | None = None,
    ) -> Steps[None]:
        """Delete topics.  A topic that does not exist raises
        :class:`~kafka_handoff.errors.UnknownTopicOrPartitionError` unless ``if_exists``.  With ``wait``
        (the default) return once no broker's metadata lists them any more."""
        topics = unique_names(names, "topic")
        deadline = self._deadline(timeout)
        outcomes = yield from run_calls([self._delete_topic_call(n, deadline) for n in topics], deadline)
        errors = [
            o
            for o in outcomes
            if isinstance(o, BaseException)
            and not (if_exists and isinstance(o, UnknownTopicOrPartitionError))
        ]
        self._raise_first(errors)
        if wait:
            yield from self._wait_for_deletion(topics, deadline)

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
            error = error_for_code(
                code,
                f"cannot delete topic {name!r}: {message}".strip(),
                needs=Needs("DeleteTopics", topic=("DELETE", name)),
            )
            if isinstance(error, RequestTimedOutError):
                timed_out[0] = True
            raise error if error.retriable else NoRetry(error)

        return AdminCall(
            f"DeleteTopics(topic {name!r})", ApiKey.DELETE_TOPICS, ANY_NODE, build, handle, deadline
        )

    @drives_steps
    def create_partitions(
        self,
        new_counts: Mapping[str, int],
        *,
        validate_only: bool = False,
        wait: bool = True,
        timeout: float | None = None,
    ) -> Steps[None]:
        """Grow topics to ``new_counts[topic]`` partitions in total (Kafka cannot shrink topics)."""
        deadline = self._deadline(timeout)
        calls = [self._create_partitions_call(n, c, validate_only, deadline) for n, c in new_counts.items()]
        self._raise_first(
            [o for o in (yield from run_calls(calls, deadline)) if isinstance(o, BaseException)]
        )
        if wait and not validate_only and new_counts:
            yield from self._wait_for_topics(dict(new_counts), deadline)

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
                code,
                f"cannot grow topic {name!r} to {count} partitions: {entry.error_message or ''}".strip(),
                needs=Needs("CreatePartitions", topic=("ALTER", name)),
            )
            if code == ErrorCode.unknown_topic_or_partition:
                raise NoRetry(error)
            raise error if error.retriable else NoRetry(error)

        return AdminCall(
            f"CreatePartitions(topic {name!r})", ApiKey.CREATE_PARTITIONS, ANY_NODE, build, handle, deadline
        )
