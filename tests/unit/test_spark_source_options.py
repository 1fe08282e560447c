"""The ``kafka-handoff`` Spark source's pure parts: option parsing and validation (Spark's names and rules),
splitting ranges into tasks (``minPartitions``/``maxRecordsPerPartition``) and sharing
``maxOffsetsPerTrigger`` between partitions."""

from __future__ import annotations

import pytest

from kafka_handoff.errors import ConfigError
from kafka_handoff.spark.options import SourceOptionsError, parse_options, partition_json
from kafka_handoff.spark.plan import OffsetRange, limit_offsets, split_ranges
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit

BS = {"kafka.bootstrap.servers": "h:9092"}


def test_defaults_follow_sparks_source() -> None:
    batch = parse_options({**BS, "subscribe": "a, b"}, streaming=False)
    assert batch.subscribe == ("a", "b")
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    assert batch.fail_on_data_loss and not batch.include_headers
    stream = parse_options({**BS, "subscribe": "a"}, streaming=True)
    assert stream.starting.kind == "latest"
    conf = batch.consumer_config()
    assert conf["isolation.level"] == "read_committed" and conf["auto.offset.reset"] == "none"
    assert "group.id" not in conf and conf["enable.auto.commit"] is False


def test_kafka_keys_reach_the_clients_and_stay_out_of_the_repr() -> None:
    o = parse_options(
        {**BS, "assign": '{"t": [1, 0]}', "kafka.security.protocol": "SASL_SSL",
         "kafka.sasl.jaas.config": "secret-jaas", "kafka.isolation.level": "read_uncommitted",
         "failOnDataLoss": "false", "includeHeaders": "TRUE"},
        streaming=False,
    )  # fmt: skip
    assert o.assign == (TopicPartition("t", 0), TopicPartition("t", 1))
    assert o.consumer_config()["security.protocol"] == "SASL_SSL"
    assert o.admin_config()["sasl.jaas.config"] == "secret-jaas"
    assert "isolation.level" not in o.admin_config()
    assert o.consumer_config()["isolation.level"] == "read_uncommitted"
    assert o.consumer_config()["auto.offset.reset"] == "earliest"
    assert o.include_headers
    assert "secret-jaas" not in repr(o)
    aliased = parse_options({**BS, "subscribe": "t", "kafka.ssl.ca.location": "/ca.pem"}, streaming=False)
    assert aliased.consumer_config()["ssl.truststore.location"] == "/ca.pem"


def test_offsets_json_and_timestamps() -> None:
    o = parse_options(
        {
            **BS,
            "subscribe": "t",
            "startingOffsets": '{"t": {"0": 5, "1": -2}}',
            "endingOffsets": '{"t": {"0": -1}}',
        },
        streaming=False,
    )
    assert o.starting.per == {TopicPartition("t", 0): 5, TopicPartition("t", 1): -2}
    assert o.ending.per == {TopicPartition("t", 0): -1}
    ts = parse_options({**BS, "subscribe": "t", "startingTimestamp": "1000", "startingOffsets": "earliest"},
                       streaming=False)  # fmt: skip
    assert (ts.starting.kind, ts.starting.timestamp) == ("timestamp", 1000)
    by = parse_options(
        {**BS, "subscribe": "t", "startingOffsetsByTimestamp": '{"t": {"2": 7}}'}, streaming=True
    )
    assert by.starting.per == {TopicPartition("t", 2): 7}
    assert partition_json({TopicPartition("t", 1): 3, TopicPartition("t", 0): 2}) == {"t": {"0": 2, "1": 3}}


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "t"}, False, "kafka.bootstrap.servers is required"),
        ({**BS}, False, "exactly one of the options subscribe, subscribePattern, assign"),
        ({**BS, "subscribe": "t", "assign": "{}"}, False, r"\(got subscribe, assign\)"),
        ({**BS, "subscribe": "t", "startingOffsets": "latest"}, False, "cannot be latest"),
        ({**BS, "subscribe": "t", "startingOffsets": '{"t": {"0": -1}}'}, False, "cannot be latest"),
        ({**BS, "subscribe": "t", "endingOffsets": "earliest"}, False, "cannot be earliest"),
        ({**BS, "subscribe": "t", "endingOffsets": "latest"}, True, "for batch queries only"),
        ({**BS, "subscribe": "t", "startingOffsets": "newest"}, False, "allowed: earliest, latest, group"),
        ({**BS, "subscribe": "t", "startingOffsets": "group"}, False, "needs the groupId option"),
        ({**BS, "subscribe": "t", "failOnDataLoss": "yes"}, False, r"failOnDataLoss='yes' is invalid"),
        ({**BS, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, True, "a positive integer"),
        ({**BS, "subscribe": "t", "maxOffsetsPerTrigger": "10"}, False, "streaming queries only"),
        ({**BS, "subscribe": "t", "startingOfsets": "earliest"}, False, "unknown option"),
        ({**BS, "subscribe": "t", "kafka.enable.auto.commit": "true"}, False, "groupId option"),
        ({**BS, "subscribePattern": "(["}, False, "not a valid regex"),
        ({**BS, "assign": "[1]"}, False, "assign must be a JSON object"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(SourceOptionsError, match=message):
        parse_options(options, streaming=streaming)


def test_unknown_kafka_key_is_a_config_error_with_a_hint() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'security\.protocol'"):
        parse_options({**BS, "subscribe": "t", "kafka.security.protocl": "SSL"}, streaming=False)


def test_split_ranges() -> None:
    a, b = OffsetRange("t", 0, 0, 90), OffsetRange("t", 1, 10, 40)
    assert split_ranges([a, b, OffsetRange("t", 2, 5, 5)]) == [a, b]  # empty ranges dropped
    parts = split_ranges([a, b], min_partitions=4)
    assert len(parts) == 4  # 3 for the 90 records, 1 for the 30
    assert [(p.partition, p.start, p.end) for p in parts] == [
        (0, 0, 30),
        (0, 30, 60),
        (0, 60, 90),
        (1, 10, 40),
    ]
    parts = split_ranges([a, b], max_records=25)
    assert all(p.size <= 25 for p in parts) and sum(p.size for p in parts) == 120
    assert split_ranges([OffsetRange("t", 0, 0, 2)], min_partitions=8) == [
        OffsetRange("t", 0, 0, 1), OffsetRange("t", 0, 1, 2),
    ]  # fmt: skip


def test_limit_offsets_shares_the_limit_by_backlog() -> None:
    t0, t1, t2 = (TopicPartition("t", p) for p in range(3))
    start = {t0: 0, t1: 100, t2: 50}
    latest = {t0: 300, t1: 200, t2: 50}
    end = limit_offsets(start, latest, 40)
    assert sum(end[tp] - start[tp] for tp in start) == 40
    assert end == {t0: 30, t1: 110, t2: 50}
    assert limit_offsets(start, latest, 10_000) == latest
    tiny = limit_offsets({t0: 0, t1: 0}, {t0: 1, t1: 1}, 1)
    assert sum(tiny.values()) == 1  # never more than the limit
    new = limit_offsets({t0: 0}, {t0: 5, t1: 9}, 100)
    assert new == {t0: 5, t1: 9}  # a partition without a start has no backlog
