"""Deleting records (Java's ``deleteRecords``): move partitions' log start offsets forward (DeleteRecords to
each leader)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.admin.calls import AdminCall, Steps, drives_steps, run_calls
from kafka_handoff.admin.plumbing import AdminPlumbing, merge_partition_outcomes
from kafka_handoff.errors import Needs, UnknownTopicOrPartitionError, error_for_code
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import TopicPartition

__all__ = ["DeletedRecords", "RecordsAdminMixin", "RecordsToDelete"]


@dataclass(frozen=True, slots=True)
class RecordsToDelete:
    """Java's ``RecordsToDelete.beforeOffset``: delete the records before ``offset`` (-1: all, up to the
    high watermark)."""

    offset: int

    @classmethod
    def before_offset(cls, offset: int) -> RecordsToDelete:
        return cls(offset)


@dataclass(frozen=True, slots=True)
class DeletedRecords:
    """Java's ``DeletedRecords``: the partition's log start offset after the deletion."""

    low_watermark: int


class RecordsAdminMixin(AdminPlumbing):
    """Record deletion: mixed into :class:`~kafka_handoff.admin.AdminClient`."""

    @drives_steps
    def delete_records(
        self,
        records_to_delete: Mapping[TopicPartition, RecordsToDelete | int],
        timeout: float | None = None,
    ) -> Steps[dict[TopicPartition, DeletedRecords]]:
        """Delete the records before each offset (``-1``: every record); each partition's new low
        watermark.  Each partition's error names it; the first is raised with the others as notes."""
        wanted = {
            TopicPartition(*tp): (r if isinstance(r, int) else r.offset)
            for tp, r in records_to_delete.items()
        }
        deadline = self._deadline(timeout)
        cluster = yield from self._cluster_steps(sorted({tp.topic for tp in wanted}), deadline)
        errors: list[BaseException] = []
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in sorted(wanted):
            topic_code = cluster.topic_errors.get(tp.topic)
            if topic_code is not None and topic_code == ErrorCode.topic_authorization_failed:
                errors.append(
                    error_for_code(
                        topic_code,
                        f"cannot delete records of {tp}",
                        needs=Needs("Metadata", topic=("DESCRIBE", tp.topic)),
                    )
                )
                continue
            count = cluster.partition_count(tp.topic)
            if count is None or tp.partition >= count:
                errors.append(
                    UnknownTopicOrPartitionError(f"cannot delete records of {tp}: no such partition")
                )
                continue
            leader = cluster.leader_for(tp)
            if leader is None:
                errors.append(
                    error_for_code(ErrorCode.leader_not_available, f"cannot delete records of {tp}")
                )
                continue
            by_leader.setdefault(leader, []).append(tp)

        def make(leader: int, tps: list[TopicPartition]) -> AdminCall:
            by_topic: dict[str, list[TopicPartition]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp)

            def build(version: int, timeout_ms: int) -> dict[str, Any]:
                return {
                    "topics": [
                        {
                            "name": t,
                            "partitions": [
                                {"partition_index": tp.partition, "offset": wanted[tp]} for tp in ps
                            ],
                        }
                        for t, ps in by_topic.items()
                    ],
                    "timeout": timeout_ms,
                }

            def handle(response: Any, version: int, node: int) -> dict[TopicPartition, Any]:
                out: dict[TopicPartition, Any] = {}
                for t in response.topics:
                    for p in t.partitions:
                        tp = TopicPartition(str(t.name), int(p.partition_index))
                        code = int(p.error_code)
                        if code == ErrorCode.none:
                            out[tp] = DeletedRecords(int(p.low_watermark))
                            continue
                        beyond = f"offset {wanted.get(tp)} is beyond the high watermark"
                        detail = beyond if code == ErrorCode.offset_out_of_range else ""
                        out[tp] = error_for_code(
                            code,
                            f"cannot delete records of {tp}: {detail}".rstrip(": "),
                            needs=Needs("DeleteRecords", topic=("DELETE", tp.topic)),
                        )
                return out

            return AdminCall(
                f"DeleteRecords(broker {leader})", ApiKey.DELETE_RECORDS, leader, build, handle, deadline
            )

        outcomes = yield from run_calls([make(leader, tps) for leader, tps in by_leader.items()], deadline)
        return merge_partition_outcomes(outcomes, errors)
