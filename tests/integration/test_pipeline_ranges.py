"""``read_range`` (executors mode's reader) reads exactly ``[start, end)`` of a real log -- across transaction
markers and aborted records under read_committed -- and fails, naming the range, when the start is gone."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest

from kafka_handoff.consumer import Consumer
from kafka_handoff.pipeline.ranges import OffsetRange, RangeReadError, executor_consumer_config, read_range
from kafka_handoff.producer import Producer
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.integration


def read(bootstrap: str, r: OffsetRange, **conf: Any) -> pa.Table:
    config = executor_consumer_config({"bootstrap.servers": bootstrap, **conf}, "range-test")
    batches = list(read_range(config, r, stall_timeout_s=60))
    return pa.Table.from_batches(batches) if batches else pa.table({"offset": pa.array([], pa.int64())})


def test_a_range_over_committed_and_aborted_transactions_ends_exactly_at_its_end(
    broker: Any, topic_factory: Any
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(1)
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{uuid.uuid4().hex[:8]}"}) as p:
        p.init_transactions(60)
        for i, commit in enumerate([True, False, True, False]):  # markers after each; aborted records
            p.begin_transaction()
            for j in range(5):
                p.send(topic, f"{i}-{j}".encode()).result(60)
            if commit:
                p.commit_transaction(60)
            else:
                p.abort_transaction(60)
    tp = TopicPartition(topic, 0)
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed"}) as c:
        end = c.end_offsets([tp], timeout=30)[tp]  # the last stable offset: after the last marker
    assert end == 24  # 4 x (5 records + 1 marker)
    committed = read(bootstrap, OffsetRange(topic, 0, 0, end), **{"isolation.level": "read_committed"})
    assert committed.column("value").to_pylist() == [f"{i}-{j}".encode() for i in (0, 2) for j in range(5)]
    # A piece that starts mid-transaction and ends on the aborted one: its committed records only.
    piece = read(bootstrap, OffsetRange(topic, 0, 3, 15), **{"isolation.level": "read_committed"})
    assert piece.column("offset").to_pylist() == [3, 4, 12, 13, 14]
    # read_uncommitted sees the aborted records too, never past the end.
    raw = read(bootstrap, OffsetRange(topic, 0, 2, 9))
    assert raw.column("offset").to_pylist() == [2, 3, 4, 6, 7, 8]


def test_a_range_whose_start_was_deleted_fails_naming_the_range(broker: Any, topic_factory: Any) -> None:
    from kafka_handoff.admin import AdminClient

    bootstrap = broker.bootstrap_servers
    topic = topic_factory(1)
    with Producer({"bootstrap.servers": bootstrap}) as p:
        for i in range(10):
            p.send(topic, str(i).encode()).result(60)
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.delete_records({TopicPartition(topic, 0): 6}, timeout=30)
    with pytest.raises(RangeReadError, match=rf"{topic}-0 offsets \[2, 8\)"):
        read(bootstrap, OffsetRange(topic, 0, 2, 8))
