"""Argument parsing of the operator commands: durations, date-times, topic-partition lists, config entities,
ACL flags (pure logic; the commands themselves are tested against the broker)."""

from __future__ import annotations

import argparse
import datetime as dt

import pytest

from kafka_handoff.admin import (
    AclOperation,
    AclPermissionType,
    ConfigResource,
    ConfigResourceType,
    ResourceType,
)
from kafka_handoff.cli import acls, configs
from kafka_handoff.cli.groups import parse_datetime_ms, parse_duration_ms, parse_topic_partitions
from kafka_handoff.cli.main import build_parser
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit


def test_durations_kafka_iso_and_short_forms() -> None:
    assert parse_duration_ms("PT10M") == 600_000
    assert parse_duration_ms("P1DT2H") == 26 * 3_600_000
    assert parse_duration_ms("10m") == 600_000
    assert parse_duration_ms("90s") == 90_000
    assert parse_duration_ms("1d") == 86_400_000
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration_ms("ten minutes")


def test_datetimes_with_and_without_zone() -> None:
    assert parse_datetime_ms("2026-12-01T10:00:00Z") == 1_796_119_200_000
    assert parse_datetime_ms("2026-12-01T11:00:00.000+01:00") == 1_796_119_200_000
    local = dt.datetime(2026, 12, 1, 10, 0).astimezone()
    assert parse_datetime_ms("2026-12-01T10:00:00") == int(local.timestamp() * 1000)
    with pytest.raises(ValueError, match="--to-datetime"):
        parse_datetime_ms("yesterday")


def test_topic_partition_lists() -> None:
    assert parse_topic_partitions(["a", "b:0,2"]) == (["a"], [TopicPartition("b", 0), TopicPartition("b", 2)])
    with pytest.raises(ValueError, match="integers"):
        parse_topic_partitions(["b:x"])


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_config_entities_kafka_and_short_flags() -> None:
    assert configs.resource_of(_args("configs", "describe", "--topic", "t")) == ConfigResource(
        ConfigResourceType.TOPIC, "t"
    )
    by_kafka_flags = _args("configs", "describe", "--entity-type", "brokers", "--entity-name", "1")
    assert configs.resource_of(by_kafka_flags) == ConfigResource(ConfigResourceType.BROKER, "1")
    defaults = _args("configs", "describe", "--entity-type", "brokers")
    assert configs.resource_of(defaults) == ConfigResource(ConfigResourceType.BROKER, "")
    with pytest.raises(ValueError, match="name one entity"):
        configs.resource_of(_args("configs", "describe", "--topic", "t", "--group", "g"))


def test_acl_filters_from_flags() -> None:
    args = _args(
        "acls", "list", "--topic", "t", "--deny-principal", "User:a", "--operation", "DescribeConfigs"
    )
    (flt,) = acls._filters(args)
    assert (flt.resource_type, flt.name, flt.principal) == (ResourceType.TOPIC, "t", "User:a")
    assert (flt.operation, flt.permission_type) == (AclOperation.DESCRIBE_CONFIGS, AclPermissionType.DENY)
    everything = acls._filters(_args("acls", "list"))
    assert [(f.resource_type, f.name, f.operation) for f in everything] == [
        (ResourceType.ANY, None, AclOperation.ANY)
    ]
