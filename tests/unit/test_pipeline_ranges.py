"""Executors mode: offset ranges split across tasks, the readers' consumer settings, ``spark.read_on``."""

from __future__ import annotations

import itertools

import pytest

from kafka_handoff.errors import ConfigError
from kafka_handoff.pipeline.config import parse_config
from kafka_handoff.pipeline.ranges import OffsetRange, executor_consumer_config, split_ranges

pytestmark = pytest.mark.unit


def covers_exactly(pieces: list[OffsetRange], ranges: list[OffsetRange]) -> bool:
    for r in ranges:
        mine = sorted((p for p in pieces if (p.topic, p.partition) == (r.topic, r.partition)),
                      key=lambda p: p.start)  # fmt: skip
        if not mine or mine[0].start != r.start or mine[-1].end != r.end:
            return False
        if any(a.end != b.start for a, b in itertools.pairwise(mine)):
            return False
    return True


def test_a_large_range_is_split_into_contiguous_pieces_for_the_tasks() -> None:
    ranges = [OffsetRange("t", 0, 100, 400_100)]
    pieces = split_ranges(ranges, tasks=4, min_size=10_000)
    assert len(pieces) == 4
    assert covers_exactly(pieces, ranges)
    assert max(p.size for p in pieces) - min(p.size for p in pieces) <= 1


def test_small_ranges_stay_whole_and_empty_ones_vanish() -> None:
    ranges = [OffsetRange("t", 0, 0, 50), OffsetRange("t", 1, 7, 7), OffsetRange("u", 3, 10, 900)]
    pieces = split_ranges(ranges, tasks=8, min_size=10_000)
    assert pieces == [OffsetRange("t", 0, 0, 50), OffsetRange("u", 3, 10, 900)]


def test_uneven_partitions_get_pieces_by_size() -> None:
    ranges = [OffsetRange("t", 0, 0, 300_000), OffsetRange("t", 1, 0, 100_000)]
    pieces = split_ranges(ranges, tasks=4, min_size=1)
    assert covers_exactly(pieces, ranges)
    assert [p.partition for p in pieces].count(0) == 3
    assert [p.partition for p in pieces].count(1) == 1


def test_readers_get_the_connection_and_security_but_no_group() -> None:
    conf = executor_consumer_config(
        {"bootstrap.servers": "h:1", "group.id": "g", "group.protocol": "consumer",
         "security.protocol": "SSL", "sasl.password": "x", "isolation.level": "read_committed",
         "enable.auto.commit": True},
        "reader",
    )  # fmt: skip
    assert "group.id" not in conf and "group.protocol" not in conf
    assert conf["security.protocol"] == "SSL" and conf["sasl.password"] == "x"
    assert conf["isolation.level"] == "read_committed"
    assert conf["enable.auto.commit"] is False
    assert conf["auto.offset.reset"] == "none"  # a range whose start is gone fails, never skips


def raw(**spark: str) -> dict[str, object]:
    return {
        "kafka": {"topics": ["ev"], "bootstrap.servers": "h:9092", "group.id": "g"},
        "transform": {"function": "mod:fn"},
        "sink": {"path": "out"},
        "spark": dict(spark),
    }


def test_read_on_defaults_by_master() -> None:
    assert not parse_config(raw()).spark.on_executors
    assert parse_config(raw(master="spark://h:7077")).spark.on_executors
    assert not parse_config(raw(remote="sc://h:15002")).spark.on_executors
    assert not parse_config(raw(master="spark://h:7077", read_on="driver")).spark.on_executors
    assert parse_config(raw(read_on="executors")).spark.on_executors


def test_read_on_rejects_unknown_values_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"spark\.read_on.*allowed: auto, driver, executors"):
        parse_config(raw(read_on="everywhere"))
