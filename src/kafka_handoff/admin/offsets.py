"""Offset queries: list the offsets of partitions (ListOffsets to each leader)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from kafka_handoff.admin.calls import (
    AdminCall,
    Pause,
    Steps,
    drives_steps,
    is_retriable,
    run_calls,
)
from kafka_handoff.admin.plumbing import AdminPlumbing
from kafka_handoff.errors import (
    KafkaTimeoutError,
    Needs,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import TopicPartition


class OffsetSpec:
    """Which offset :meth:`~kafka_handoff.admin.AdminClient.list_offsets` asks for (or give a timestamp
    in ms)."""

    LATEST = -1
    EARLIEST = -2
    MAX_TIMESTAMP = -3


class OffsetAdminMixin(AdminPlumbing):
    """Offset queries: mixed into :class:`~kafka_handoff.admin.AdminClient` (uses its call
    plumbing)."""

    @drives_steps
    def list_offsets(
        self,
        partitions: Iterable[TopicPartition],
        spec: int = OffsetSpec.LATEST,
        *,
        timeout: float | None = None,
        isolation_level: str = "read_uncommitted",
    ) -> Steps[dict[TopicPartition, int]]:
        """The offset of each partition for ``spec``: ``OffsetSpec.LATEST`` (the log end offset; with
        ``isolation_level="read_committed"`` the last stable offset), ``OffsetSpec.EARLIEST``,
        ``OffsetSpec.MAX_TIMESTAMP``, or a timestamp in ms (the first offset at or after it; -1 when there is
        none).  Asked of each partition's leader."""
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError(
                f"invalid isolation_level {isolation_level!r} (allowed: read_uncommitted, read_committed)"
            )
        level = 1 if isolation_level == "read_committed" else 0
        wanted = sorted({TopicPartition(*tp) for tp in partitions})
        deadline = self._deadline(timeout)
        result: dict[TopicPartition, int] = {}
        attempts = 0
        retry_backoff = ExponentialBackoff(
            int(self._config.retry_backoff_ms), int(self._config.retry_backoff_max_ms)
        )
        while wanted:
            attempts += 1
            cluster = yield from self._cluster_steps(sorted({tp.topic for tp in wanted}), deadline)
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
                self._list_offsets_call(leader, tps, spec, deadline, level)
                for leader, tps in by_leader.items()
            ]
            outcomes = yield from run_calls(calls, deadline)
            for tps, outcome in zip(by_leader.values(), outcomes, strict=True):
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
                yield Pause(min(left_ms, retry_backoff.after_failures(attempts)) / 1000.0)
        return dict(sorted(result.items()))

    def _list_offsets_call(
        self, leader: int, tps: Sequence[TopicPartition], spec: int, deadline: int, isolation_level: int = 0
    ) -> AdminCall:
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "replica_id": -1,
                "isolation_level": isolation_level,
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
                    needs = Needs("ListOffsets", topic=("DESCRIBE", tp.topic))
                    out[tp] = (
                        error_for_code(code, f"listing offsets of {tp}", needs=needs)
                        if code
                        else int(p.offset)
                    )
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
