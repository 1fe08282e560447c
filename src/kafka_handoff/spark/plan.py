"""Driver side of the ``kafka-handoff`` data source: which partitions, which offsets, which tasks.

* :class:`OffsetRange` is one Spark task: ``[start, end)`` of one Kafka partition.
* :func:`split_ranges` is ``minPartitions``/``maxRecordsPerPartition``: large ranges split into consecutive
  pieces (as Spark's own source does, proportionally to their size).
* :func:`limit_offsets` is ``maxOffsetsPerTrigger``: at most N records per micro-batch, shared between the
  partitions in proportion to their backlog (largest remainders, so the total is exactly N when that much is
  there, and every partition with a backlog moves).
* :class:`Offsets` asks the cluster (our admin client): the partitions of the subscription, their earliest
  and latest (last stable, under read_committed) offsets, offsets by timestamp, a group's committed offsets,
  and commits a micro-batch's end offsets to the ``groupId`` group.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka_handoff.spark.options import EARLIEST, LATEST, OffsetSpec, SourceOptions, SourceOptionsError
from kafka_handoff.types import TopicPartition

__all__ = ["DataLossError", "OffsetRange", "Offsets", "limit_offsets", "split_ranges"]

log = logging.getLogger("kafka_handoff.spark")

try:  # Spark's own partition class when pyspark is there (Spark requires it); a plain base otherwise
    from pyspark.sql.datasource import InputPartition as _Base
except ImportError:  # pragma: no cover - the planning logic is usable (and tested) without pyspark

    class _Base:  # type: ignore[no-redef]
        pass


class DataLossError(RuntimeError):
    """Records the query was to read are gone (deleted by retention or ``delete_records``) and
    ``failOnDataLoss`` is true."""


@dataclass(frozen=True)
class OffsetRange(_Base):
    """One Spark task: the records of ``topic``/``partition`` with offsets in ``[start, end)``."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def split_ranges(
    ranges: Iterable[OffsetRange], min_partitions: int | None = None, max_records: int | None = None
) -> list[OffsetRange]:
    """Split ``ranges`` so there are at least ``min_partitions`` tasks (each range split in proportion to its
    share of the records) and no task has more than ``max_records`` records.  Empty ranges are dropped."""
    todo = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in todo)
    out: list[OffsetRange] = []
    for r in todo:
        pieces = 1
        if min_partitions is not None and min_partitions > len(todo):
            pieces = max(1, round(r.size * min_partitions / total))
        if max_records is not None:
            pieces = max(pieces, -(-r.size // max_records))
        pieces = min(pieces, r.size)
        for i in range(pieces):
            lo = r.start + r.size * i // pieces
            hi = r.start + r.size * (i + 1) // pieces
            out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out


def limit_offsets(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_records: int
) -> dict[TopicPartition, int]:
    """End offsets at most ``max_records`` past ``start`` in total, shared in proportion to each partition's
    backlog (``latest - start``).  Partitions missing from ``start`` start at ``latest`` (nothing to read)."""
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(backlog.values())
    if total <= max_records:
        return {tp: start.get(tp, latest[tp]) + n for tp, n in backlog.items()}
    share = {tp: n * max_records // total for tp, n in backlog.items()}
    left = max_records - sum(share.values())
    by_remainder = sorted(backlog, key=lambda tp: (-(backlog[tp] * max_records % total), tp))
    for tp in by_remainder[:left]:
        share[tp] += 1
    return {tp: start.get(tp, latest[tp]) + share[tp] for tp in latest}


class Offsets:
    """The driver's view of the cluster for one query (an admin client, opened on first use)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._admin: Any = None

    @property
    def admin(self) -> Any:
        if self._admin is None:
            from kafka_handoff.admin import AdminClient

            self._admin = AdminClient(self.options.admin_config())
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            admin.close()

    # --------------------------------------------------------------------------------- what to read
    def partitions(self) -> list[TopicPartition]:
        """The partitions the query reads now (a subscription follows new topics and partitions)."""
        o = self.options
        if o.assign:
            return list(o.assign)
        if o.subscribe:
            existing = {t.name for t in self.admin.list_topics()}
            topics = [t for t in o.subscribe if t in existing]
        else:
            assert o.subscribe_pattern is not None
            pattern = re.compile(o.subscribe_pattern)
            topics = [t.name for t in self.admin.list_topics() if pattern.fullmatch(t.name)]
        if not topics:
            return []
        described = self.admin.describe_topics(topics)
        return sorted(tp for d in described.values() for tp in d.topic_partitions())

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        from kafka_handoff.admin import OffsetSpec as Spec

        tps = list(tps)
        return dict(self.admin.list_offsets(tps, Spec.EARLIEST)) if tps else {}

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log end offsets (the last stable offsets under read_committed)."""
        from kafka_handoff.admin import OffsetSpec as Spec

        tps = list(tps)
        if not tps:
            return {}
        return dict(self.admin.list_offsets(tps, Spec.LATEST, isolation_level=self.options.isolation_level))

    def group_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        assert self.options.group_id is not None
        tps = list(tps)
        got = self.admin.list_group_offsets(self.options.group_id, tps) if tps else {}
        return {tp: (None if got.get(tp) is None else int(got[tp].offset)) for tp in tps}

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` (the next offset to read, as consumers commit) to the ``groupId`` group: a
        simple commit, no member, as ``kafka-consumer-groups --reset-offsets`` does."""
        if self.options.group_id is None or not offsets:
            return
        self.admin.alter_consumer_group_offsets(self.options.group_id, dict(offsets))

    # ---------------------------------------------------------------------------------- resolution
    def resolve(
        self, spec: OffsetSpec, tps: list[TopicPartition], *, which: str = "starting"
    ) -> dict[TopicPartition, int]:
        """Concrete offsets of ``tps`` for a starting/ending ``spec``."""
        if not tps:
            return {}
        unknown = sorted(set(spec.per) - set(tps))
        if unknown:
            raise SourceOptionsError(
                f"{which} offsets name partition(s) the query does not read: {', '.join(map(str, unknown))}"
            )
        default = EARLIEST if which == "starting" else LATEST
        wanted: dict[TopicPartition, int] = {}  # explicit offsets, or EARLIEST/LATEST to look up
        if spec.kind == "earliest":
            wanted = dict.fromkeys(tps, EARLIEST)
        elif spec.kind == "latest":
            wanted = dict.fromkeys(tps, LATEST)
        elif spec.kind == "offsets":
            wanted = {tp: spec.per.get(tp, default) for tp in tps}
        elif spec.kind == "group":
            committed = self.group_offsets(tps)
            fallback = self.options.group_reset
            missing = [tp for tp, off in committed.items() if off is None]
            if missing and fallback == "none":
                raise SourceOptionsError(
                    f"group {self.options.group_id!r} has no committed offset for "
                    f"{', '.join(map(str, missing))} and kafka.auto.offset.reset=none"
                )
            fill = LATEST if fallback == "latest" else EARLIEST
            wanted = {tp: (fill if off is None else off) for tp, off in committed.items()}
        else:  # timestamp(s)
            return self._by_timestamp(spec, tps, which)
        out = dict(wanted)
        low = [tp for tp, off in wanted.items() if off == EARLIEST]
        high = [tp for tp, off in wanted.items() if off == LATEST]
        out.update(self.earliest(low))
        out.update(self.latest(high))
        return out

    def _by_timestamp(
        self, spec: OffsetSpec, tps: list[TopicPartition], which: str
    ) -> dict[TopicPartition, int]:
        stamps = dict.fromkeys(tps, spec.timestamp) if spec.kind == "timestamp" else dict(spec.per)
        out: dict[TopicPartition, int] = {}
        rest = [tp for tp in tps if tp not in stamps]
        out.update(self.earliest(rest) if which == "starting" else self.latest(rest))
        by_ts: dict[int, list[TopicPartition]] = {}
        for tp, ts in stamps.items():
            by_ts.setdefault(ts, []).append(tp)
        none: list[TopicPartition] = []
        for ts, group in by_ts.items():
            found = self.admin.list_offsets(group, ts, isolation_level=self.options.isolation_level)
            for tp in group:
                if found.get(tp, -1) < 0:
                    none.append(tp)
                else:
                    out[tp] = int(found[tp])
        if none:
            if which == "starting" and self.options.timestamp_strategy == "error":
                raise SourceOptionsError(
                    f"no record at or after the starting timestamp in {', '.join(map(str, sorted(none)))} "
                    "(startingOffsetsByTimestampStrategy=latest starts those at the latest offset instead)"
                )
            out.update(self.latest(none))
        return out

    def check_loss(
        self, start: dict[TopicPartition, int], earliest: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """``start`` with every offset below the partition's earliest moved up to it (records deleted by
        retention): an error under ``failOnDataLoss=true``, a warning otherwise."""
        lost = {tp: (off, earliest[tp]) for tp, off in start.items() if tp in earliest and off < earliest[tp]}
        if not lost:
            return start
        detail = ", ".join(f"{tp} offsets {a}..{b - 1}" for tp, (a, b) in sorted(lost.items()))
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"records to read were deleted before they were read ({detail}); set the option "
                "failOnDataLoss=false to skip them and go on"
            )
        log.warning("kafka-handoff: records deleted before they were read, skipped (%s)", detail)
        return {**start, **{tp: b for tp, (_a, b) in lost.items()}}
