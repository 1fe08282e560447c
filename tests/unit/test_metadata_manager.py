"""MetadataManager and parse_metadata, driven with a fake clock and scripted Metadata responses."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any

import pytest

from kafka_handoff.errors import ConnectionError_
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.metadata import MetadataManager, parse_metadata
from kafka_handoff.protocol.requests import ANY_NODE, FakeClock, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import CLIENT_VERSIONS, ApiKey
from kafka_handoff.types import BrokerNode, ClusterMetadata, TopicPartition

pytestmark = pytest.mark.unit

METADATA = ApiKey.METADATA
BACKOFF = 100
BACKOFF_MAX = 1000
MAX_AGE = 60_000
TID = uuid.UUID("11111111-2222-3333-4444-555555555555")


def topic(
    name: str,
    leaders: Mapping[int, int] | None = None,
    *,
    error: int = 0,
    topic_id: uuid.UUID | None = None,
    internal: bool = False,
    epoch: int = 5,
) -> dict[str, Any]:
    return {
        "error_code": error,
        "name": name,
        "topic_id": topic_id,
        "is_internal": internal,
        "partitions": [
            {
                "error_code": 0,
                "partition_index": p,
                "leader_id": leader,
                "leader_epoch": epoch,
                "replica_nodes": [1, 2],
                "isr_nodes": [1],
                "offline_replicas": [],
            }
            for p, leader in (leaders or {}).items()
        ],
    }


def response(topics: Iterable[dict[str, Any]] = (), *, version: int = 12) -> Any:
    return wire.build_response(
        METADATA,
        version,
        {
            "throttle_time": 0,
            "brokers": [
                {"node_id": 1, "host": "h1", "port": 9092, "rack": "r1"},
                {"node_id": 2, "host": "h2", "port": 9093, "rack": None},
            ],
            "cluster_id": "cluster-x",
            "controller_id": 2,
            "topics": list(topics),
        },
    )


def manager(topics: frozenset[str] | None = frozenset({"a"}), **kw: Any) -> MetadataManager:
    return MetadataManager(
        max_age_ms=MAX_AGE,
        retry_backoff_ms=BACKOFF,
        retry_backoff_max_ms=BACKOFF_MAX,
        topics=lambda: topics,
        **kw,
    )


def only_request(result: PollResult) -> UnsentRequest:
    assert len(result.unsent) == 1, result
    req = result.unsent[0]
    assert req.api_key == METADATA
    assert req.node == ANY_NODE
    return req


def requested_topics(req: UnsentRequest, version: int = 12) -> list[str] | None:
    topics = req.body(version)["topics"]
    return None if topics is None else [t["name"] for t in topics]


def refresh(mm: MetadataManager, clock: FakeClock, topics: Iterable[dict[str, Any]] = ()) -> UnsentRequest:
    req = only_request(mm.poll(clock.now_ms()))
    assert req.on_response is not None
    req.on_response(response(topics), 12, clock.now_ms())
    return req


# ---------------------------------------------------------------------------------------------- requests


def test_first_poll_asks_for_the_named_topics() -> None:
    clock = FakeClock()
    mm = MetadataManager(topics=lambda: frozenset({"b", "a"}), allow_auto_topic_creation=False)
    req = only_request(mm.poll(clock.now_ms()))
    assert requested_topics(req) == ["a", "b"]
    body = req.body(12)
    assert body["allow_auto_topic_creation"] is False
    assert req.min_version >= 1  # v0 means "all topics" for an empty list


def test_body_builds_for_every_negotiable_version() -> None:
    mm = manager(frozenset({"a"}))
    req = only_request(mm.poll(0))
    lo, hi = CLIENT_VERSIONS[METADATA]
    for version in range(max(lo, req.min_version), hi + 1):
        entity = wire.build_request(METADATA, version, req.body(version))
        assert [t.name for t in entity.topics] == ["a"]


def test_all_topics_when_topics_callback_returns_none() -> None:
    mm = manager(None)
    req = only_request(mm.poll(0))
    assert requested_topics(req) is None
    assert wire.build_request(METADATA, 12, req.body(12)).topics is None


def test_no_topics_is_an_empty_list_not_all_topics() -> None:
    mm = manager(frozenset())
    req = only_request(mm.poll(0))
    assert requested_topics(req) == []


def test_one_request_in_flight_at_a_time() -> None:
    clock = FakeClock()
    mm = manager()
    only_request(mm.poll(clock.now_ms()))
    mm.request_update()
    assert mm.poll(clock.advance(10)).unsent == []


# ---------------------------------------------------------------------------------------------- schedule


def test_refresh_by_max_age() -> None:
    clock = FakeClock()
    mm = manager()
    refresh(mm, clock, [topic("a", {0: 1})])
    result = mm.poll(clock.advance(1000))
    assert result.unsent == []
    assert result.wait_ms == MAX_AGE - 1000
    assert mm.poll(clock.advance(MAX_AGE - 1001)).unsent == []
    only_request(mm.poll(clock.advance(1)))


def test_refresh_on_demand() -> None:
    clock = FakeClock()
    mm = manager()
    refresh(mm, clock, [topic("a", {0: 1})])
    clock.advance(5000)
    assert mm.poll(clock.now_ms()).unsent == []
    mm.request_update()
    only_request(mm.poll(clock.now_ms()))


def test_on_demand_refreshes_are_spaced_by_retry_backoff() -> None:
    """Like Java's refresh backoff: a burst of update requests (e.g. NOT_LEADER on every fetch while the
    leader moves) cannot turn into back-to-back Metadata requests."""
    clock = FakeClock()
    mm = manager()
    refresh(mm, clock, [topic("a", {0: 1})])
    mm.request_update()
    result = mm.poll(clock.now_ms())
    assert result.unsent == []
    assert 0 < result.wait_ms <= BACKOFF
    assert mm.poll(clock.advance(BACKOFF - 1)).unsent == []
    only_request(mm.poll(clock.advance(1)))


def test_waiter_topics_are_added_to_the_next_refresh() -> None:
    clock = FakeClock()
    mm = manager(frozenset({"a"}))
    refresh(mm, clock, [topic("a", {0: 1})])
    fut: Future[ClusterMetadata] = Future()
    mm.wait_for_update(fut, frozenset({"z"}))
    req = only_request(mm.poll(clock.advance(BACKOFF)))
    assert requested_topics(req) == ["a", "z"]
    assert not fut.done()
    assert req.on_response is not None
    req.on_response(response([topic("a", {0: 1}), topic("z", {0: 2})]), 12, clock.now_ms())
    assert fut.result().partition_count("z") == 1


def test_waiter_asking_for_all_topics_widens_the_request() -> None:
    mm = manager(frozenset({"a"}))
    fut: Future[ClusterMetadata] = Future()
    mm.wait_for_update(fut, None)
    req = only_request(mm.poll(0))
    assert requested_topics(req) is None


def test_waiter_registered_while_in_flight_gets_the_next_refresh() -> None:
    clock = FakeClock()
    mm = manager()
    first = only_request(mm.poll(clock.now_ms()))
    fut: Future[ClusterMetadata] = Future()
    mm.wait_for_update(fut)
    assert first.on_response is not None
    first.on_response(response([topic("a", {0: 1})]), 12, clock.now_ms())
    assert not fut.done()  # it may need topics the in-flight request did not ask for
    clock.advance(BACKOFF)
    refresh(mm, clock, [topic("a", {0: 2})])
    assert fut.result().leader_for(TopicPartition("a", 0)) == 2


# ---------------------------------------------------------------------------------------------- results


def test_response_updates_cluster_listeners_and_waiters() -> None:
    clock = FakeClock()
    mm = manager()
    seen: list[tuple[ClusterMetadata, int]] = []
    mm.listeners.append(lambda cluster, now: seen.append((cluster, now)))
    fut: Future[ClusterMetadata] = Future()
    mm.wait_for_update(fut)
    req = only_request(mm.poll(clock.now_ms()))
    assert req.on_response is not None
    req.on_response(response([topic("a", {0: 1, 1: 2}, topic_id=TID)]), 12, clock.advance(7))
    cluster = mm.cluster
    assert cluster.leader_for(TopicPartition("a", 1)) == 2
    assert cluster.topic_ids == {"a": TID}
    assert seen == [(cluster, clock.now_ms())]
    assert fut.result() is cluster
    assert mm.updates == 1


def test_leaderless_partition_triggers_a_quick_refresh() -> None:
    clock = FakeClock()
    mm = manager()
    refresh(mm, clock, [topic("a", {0: 1, 1: -1})])
    assert mm.cluster.leader_for(TopicPartition("a", 1)) is None
    result = mm.poll(clock.now_ms())
    assert result.unsent == []
    assert result.wait_ms <= BACKOFF  # not the max age
    clock.advance(BACKOFF)
    refresh(mm, clock, [topic("a", {0: 1, 1: 2})])
    assert mm.cluster.leader_for(TopicPartition("a", 1)) == 2
    assert mm.poll(clock.advance(BACKOFF * 5)).unsent == []  # all leaders known: back to max age


@pytest.mark.parametrize("code", [3, 5])  # UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE
def test_retriable_topic_errors_are_recorded_and_refreshed_soon(code: int) -> None:
    clock = FakeClock()
    mm = manager(frozenset({"a", "b"}))
    refresh(mm, clock, [topic("a", {0: 1}), topic("b", error=code)])
    assert mm.cluster.topic_errors == {"b": code}
    assert mm.cluster.partitions_for("b") is None
    assert mm.cluster.partition_count("a") == 1
    assert mm.poll(clock.advance(BACKOFF - 1)).unsent == []
    only_request(mm.poll(clock.advance(1)))


def test_other_topic_errors_are_recorded_without_a_quick_refresh() -> None:
    clock = FakeClock()
    mm = manager(frozenset({"a"}))
    refresh(mm, clock, [topic("a", error=29)])  # TOPIC_AUTHORIZATION_FAILED
    assert mm.cluster.topic_errors == {"a": 29}
    assert mm.poll(clock.advance(BACKOFF * 10)).unsent == []


# ---------------------------------------------------------------------------------------------- failures


def test_failure_backs_off_then_retries_and_keeps_waiters() -> None:
    clock = FakeClock()
    mm = manager()
    fut: Future[ClusterMetadata] = Future()
    mm.wait_for_update(fut)
    req = only_request(mm.poll(clock.now_ms()))
    err = ConnectionError_("broker went away")
    assert req.on_failure is not None
    req.on_failure(err, clock.now_ms())
    assert mm.last_error is err
    assert not fut.done()
    result = mm.poll(clock.now_ms())
    assert result.unsent == []
    assert BACKOFF * 0.8 <= result.wait_ms <= BACKOFF * 1.2  # first retry after ~retry.backoff.ms
    assert mm.poll(clock.advance(int(BACKOFF * 0.8) - 1)).unsent == []
    clock.advance(int(BACKOFF * 0.4) + 1)
    refresh(mm, clock, [topic("a", {0: 1})])
    assert fut.result().partition_count("a") == 1


def test_failure_backoff_grows_up_to_the_maximum() -> None:
    clock = FakeClock()
    mm = manager()
    waits = []
    for _ in range(8):
        req = only_request(mm.poll(clock.now_ms()))
        assert req.on_failure is not None
        req.on_failure(ConnectionError_("down"), clock.now_ms())
        wait = mm.poll(clock.now_ms()).wait_ms
        waits.append(wait)
        clock.advance(wait)
    assert waits[1] > waits[0] * 1.2  # exponential, not constant
    assert all(w <= BACKOFF_MAX * 1.2 for w in waits)
    assert waits[-1] >= BACKOFF_MAX * 0.8


def test_success_after_failures_resets_backoff() -> None:
    clock = FakeClock()
    mm = manager()
    for _ in range(4):
        req = only_request(mm.poll(clock.now_ms()))
        assert req.on_failure is not None
        req.on_failure(ConnectionError_("down"), clock.now_ms())
        clock.advance(mm.poll(clock.now_ms()).wait_ms)
    refresh(mm, clock, [topic("a", {0: 1})])
    clock.advance(BACKOFF)
    mm.request_update()
    req = only_request(mm.poll(clock.now_ms()))
    assert req.on_failure is not None
    req.on_failure(ConnectionError_("down"), clock.now_ms())
    assert mm.poll(clock.now_ms()).wait_ms <= BACKOFF * 1.2


# ---------------------------------------------------------------------------------------------- parsing


def test_parse_metadata_fields() -> None:
    cluster = parse_metadata(
        response(
            [
                topic("a", {1: 2, 0: 1}, topic_id=TID, epoch=9),
                topic("__consumer_offsets", {0: 1}, internal=True),
                topic("gone", error=3),
            ]
        )
    )
    assert cluster.brokers == {1: BrokerNode(1, "h1", 9092, "r1"), 2: BrokerNode(2, "h2", 9093, None)}
    assert cluster.controller_id == 2
    assert cluster.cluster_id == "cluster-x"
    parts = cluster.partitions_for("a")
    assert parts is not None
    assert [p.partition for p in parts] == [0, 1]  # sorted
    assert parts[1].leader == 2 and parts[1].leader_epoch == 9
    assert parts[1].replicas == (1, 2) and parts[1].isr == (1,)
    assert cluster.topic_ids == {"a": TID}  # the all-zero id of topics without one is not recorded
    assert cluster.internal_topics == frozenset({"__consumer_offsets"})
    assert cluster.topic_errors == {"gone": 3}


def test_parse_metadata_old_version_without_ids_and_epochs() -> None:
    cluster = parse_metadata(response([topic("a", {0: 1})], version=1))
    parts = cluster.partitions_for("a")
    assert parts is not None and parts[0].leader == 1
    assert parts[0].leader_epoch == -1
    assert cluster.topic_ids == {}


# ------------------------------------------------------------------------------------- leader epochs

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)


def test_refresh_from_a_lagging_broker_never_moves_a_leader_back() -> None:
    """A broker behind the controller answers with an older leader epoch: the newer leader is kept (as
    Java's Metadata), so fetches do not go back to the deposed leader."""
    clock = FakeClock()
    mm = manager()
    refresh(mm, clock, [topic("a", {0: 1, 1: 1}, topic_id=TID, epoch=6)])
    mm.request_update()
    clock.advance(BACKOFF)
    refresh(mm, clock, [topic("a", {0: 2, 1: 2}, topic_id=TID, epoch=5)])  # stale
    assert (mm.cluster.leader_for(A0), mm.cluster.partitions["a"][0].leader_epoch) == (1, 6)
    mm.request_update()
    clock.advance(BACKOFF)
    refresh(mm, clock, [topic("a", {0: 2, 1: 2}, topic_id=TID, epoch=7)])  # newer
    assert (mm.cluster.leader_for(A0), mm.cluster.partitions["a"][0].leader_epoch) == (2, 7)


def test_recreated_topic_takes_the_new_epochs() -> None:
    clock = FakeClock()
    mm = manager()
    refresh(mm, clock, [topic("a", {0: 1}, topic_id=TID, epoch=6)])
    mm.request_update()
    clock.advance(BACKOFF)
    refresh(mm, clock, [topic("a", {0: 2}, topic_id=uuid.UUID(int=7), epoch=0)])
    assert (mm.cluster.leader_for(A0), mm.cluster.partitions["a"][0].leader_epoch) == (2, 0)


def test_update_leaders_applies_newer_hints_and_learns_endpoints() -> None:
    clock = FakeClock()
    mm = manager()
    refresh(mm, clock, [topic("a", {0: 1, 1: 1}, topic_id=TID, epoch=5)])
    seen: list[ClusterMetadata] = []
    mm.listeners.append(lambda cluster, now: seen.append(cluster))
    updated = mm.update_leaders(
        {A0: (3, 6), A1: (2, 4)},  # A1's hint is older than what we know
        [BrokerNode(3, "h3", 9094)],
        clock.now_ms(),
    )
    assert updated == {A0}
    assert mm.cluster.leader_for(A0) == 3 and mm.cluster.partitions["a"][0].leader_epoch == 6
    assert mm.cluster.leader_for(A1) == 1
    assert mm.cluster.brokers[3] == BrokerNode(3, "h3", 9094)
    assert seen == [mm.cluster]
    assert mm.poll(clock.now_ms() + MAX_AGE - 1).unsent == []  # not counted as a refresh either way


def test_update_leaders_ignores_hints_to_unknown_brokers() -> None:
    clock = FakeClock()
    mm = manager()
    refresh(mm, clock, [topic("a", {0: 1}, topic_id=TID, epoch=5)])
    before = mm.cluster
    assert mm.update_leaders({A0: (9, 6)}, [], clock.now_ms()) == set()
    assert mm.cluster is before


# ------------------------------------------------------------------------------------- leader hints (KIP-951)


def test_leader_hint_with_a_newer_epoch_moves_the_leader_and_adds_its_endpoint() -> None:
    clock = FakeClock()
    mm = manager()
    refresh(mm, clock, [topic("a", {0: 1, 1: 1}, topic_id=TID, epoch=5)])
    seen: list[ClusterMetadata] = []
    mm.listeners.append(lambda cluster, now: seen.append(cluster))
    moved = mm.update_leaders(
        {TopicPartition("a", 0): (3, 6), TopicPartition("a", 1): (2, 5)},  # the second is not newer
        [BrokerNode(3, "h3", 9094)],
        clock.now_ms(),
    )
    assert moved == {TopicPartition("a", 0)}
    cluster = mm.cluster
    assert cluster.leader_for(TopicPartition("a", 0)) == 3
    assert cluster.partitions["a"][0].leader_epoch == 6
    assert cluster.leader_for(TopicPartition("a", 1)) == 1
    assert cluster.brokers[3] == BrokerNode(3, "h3", 9094)
    assert seen == [cluster]  # listeners see the new snapshot (e.g. the network client's addresses)


def test_leader_hint_for_an_unknown_node_or_partition_is_ignored() -> None:
    clock = FakeClock()
    mm = manager()
    refresh(mm, clock, [topic("a", {0: 1}, topic_id=TID, epoch=5)])
    before = mm.cluster
    hints = {TopicPartition("a", 0): (9, 7), TopicPartition("a", 4): (2, 7), TopicPartition("b", 0): (2, 7)}
    assert mm.update_leaders(hints, [], clock.now_ms()) == set()
    assert mm.cluster is before


def test_a_lagging_brokers_metadata_does_not_undo_a_newer_leader() -> None:
    """After a failover a broker that has not caught up still names the old leader with the old epoch: the
    newer leader (from a hint or an earlier refresh) is kept, as Java's Metadata does."""
    clock = FakeClock()
    mm = manager()
    refresh(mm, clock, [topic("a", {0: 1, 1: 1}, topic_id=TID, epoch=5)])
    mm.update_leaders({TopicPartition("a", 0): (2, 6)}, [], clock.now_ms())
    clock.advance(BACKOFF)
    mm.request_update()
    refresh(mm, clock, [topic("a", {0: 1, 1: 2}, topic_id=TID, epoch=5)])
    assert mm.cluster.leader_for(TopicPartition("a", 0)) == 2  # kept (epoch 6 > 5)
    assert mm.cluster.leader_for(TopicPartition("a", 1)) == 2  # taken (same epoch: the fresh answer wins)
    clock.advance(BACKOFF)
    mm.request_update()
    refresh(mm, clock, [topic("a", {0: 3, 1: 2}, topic_id=TID, epoch=7)])
    assert mm.cluster.leader_for(TopicPartition("a", 0)) == 3  # a newer epoch is taken
    clock.advance(BACKOFF)
    mm.request_update()
    other = uuid.UUID(int=99)
    refresh(mm, clock, [topic("a", {0: 1}, topic_id=other, epoch=0)])
    assert mm.cluster.leader_for(TopicPartition("a", 0)) == 1  # a recreated topic starts over
