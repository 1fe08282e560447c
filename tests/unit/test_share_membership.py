"""KIP-932 share group membership and share fetch/acknowledge management (sans-I/O, fake clock).

Requests are built with kio for the negotiated versions (so every body the managers make fits the
schema); responses are kio entities built from plain values.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafka_handoff.errors import ConfigError, GroupAuthorizationFailedError, error_class
from kafka_handoff.group.membership import CoordinatorNeeded, MembershipError, MetadataNeeded
from kafka_handoff.group.share_membership import (
    ShareAssignmentChanged,
    ShareMembership,
    ShareMemberState,
)
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.protocol.records import RecordBatchBuilder
from kafka_handoff.protocol.requests import COORDINATOR, FakeClock, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.share.config import parse_share_consumer_config
from kafka_handoff.share.fetcher import (
    AcknowledgeType,
    ShareBuffer,
    ShareFetchManager,
    ack_batches,
    next_epoch,
)
from kafka_handoff.types import BrokerNode, ClusterMetadata, PartitionInfo, TopicPartition

pytestmark = pytest.mark.unit

TID = uuid.UUID("00000000-0000-0000-0000-0000000000aa")
TOPIC = "orders"
TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
A = AcknowledgeType


def cluster(leaders: dict[int, int] | None = None) -> ClusterMetadata:
    leaders = leaders or {0: 1, 1: 2}
    return ClusterMetadata(
        brokers={n: BrokerNode(n, "localhost", 9000 + n) for n in (1, 2)},
        partitions={TOPIC: tuple(PartitionInfo(TOPIC, p, leader) for p, leader in sorted(leaders.items()))},
        topic_ids={TOPIC: TID},
    )


def body(request: UnsentRequest, version: int) -> Any:
    """The kio request entity the network client would send (checks the values fit the schema)."""
    return wire.build_request(request.api_key, version, request.body(version))


def hb_response(**values: Any) -> Any:
    base: dict[str, Any] = {
        "throttle_time": 0,
        "error_code": 0,
        "member_id": None,
        "member_epoch": 1,
        "heartbeat_interval": 500,
        "assignment": None,
    }
    base.update(values)
    return wire.build_response(ApiKey.SHARE_GROUP_HEARTBEAT, 1, base)


def joined(clock: FakeClock) -> ShareMembership:
    m = ShareMembership("g", retry_backoff_ms=100, retry_backoff_max_ms=1000)
    m.on_metadata(cluster(), clock.now_ms())
    m.on_coordinator(1, clock.now_ms(), 1)
    m.subscribe([TOPIC], clock.now_ms())
    (req,) = m.poll(clock.now_ms()).unsent
    assert req.on_response is not None
    req.on_response(
        hb_response(
            member_epoch=3,
            assignment={"topic_partitions": [{"topic_id": TID, "partitions": [0, 1]}]},
        ),
        1,
        clock.now_ms(),
    )
    return m


# ============================================================================================ membership
def test_join_sends_epoch_zero_with_subscription_then_applies_assignment() -> None:
    clock = FakeClock()
    m = ShareMembership("g", rack_id="r1")
    m.on_metadata(cluster(), clock.now_ms())
    m.subscribe([TOPIC], clock.now_ms())
    assert any(isinstance(e, CoordinatorNeeded) for e in m.drain_events())
    assert m.poll(clock.now_ms()).unsent == []  # no coordinator yet
    m.on_coordinator(1, clock.now_ms(), 1)
    (req,) = m.poll(clock.now_ms()).unsent
    assert req.api_key == ApiKey.SHARE_GROUP_HEARTBEAT and req.node == COORDINATOR
    sent = body(req, 1)
    assert (sent.member_epoch, sent.subscribed_topic_names, sent.rack_id) == (0, (TOPIC,), "r1")
    assert sent.member_id == m.member_id and len(m.member_id) == 22
    assert req.on_response is not None
    req.on_response(
        hb_response(member_epoch=5, assignment={"topic_partitions": [{"topic_id": TID, "partitions": [1]}]}),
        1,
        clock.now_ms(),
    )
    assert m.state is ShareMemberState.STABLE and m.member_epoch == 5
    assert m.drain_events() == [ShareAssignmentChanged(frozenset({TP1}))]
    # The next heartbeat is due after the interval and omits unchanged fields.
    assert m.poll(clock.now_ms()).unsent == []
    clock.advance(500)
    (req,) = m.poll(clock.now_ms()).unsent
    sent = body(req, 1)
    assert (sent.member_epoch, sent.subscribed_topic_names, sent.rack_id) == (5, None, None)


def test_unknown_topic_id_waits_for_metadata() -> None:
    clock = FakeClock()
    m = ShareMembership("g")
    m.on_coordinator(1, clock.now_ms(), 1)
    m.subscribe([TOPIC], clock.now_ms())
    (req,) = m.poll(clock.now_ms()).unsent
    assert req.on_response is not None
    req.on_response(
        hb_response(assignment={"topic_partitions": [{"topic_id": TID, "partitions": [0]}]}),
        1,
        clock.now_ms(),
    )
    assert MetadataNeeded(topic_ids=frozenset({TID})) in m.drain_events()
    m.on_metadata(cluster(), clock.now_ms())
    assert m.drain_events() == [ShareAssignmentChanged(frozenset({TP0}))]


@pytest.mark.parametrize("code", [ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id])
def test_fenced_member_rejoins_with_epoch_zero_and_no_assignment(code: ErrorCode) -> None:
    clock = FakeClock()
    m = joined(clock)
    m.drain_events()
    clock.advance(500)
    (req,) = m.poll(clock.now_ms()).unsent
    assert req.on_response is not None
    req.on_response(hb_response(error_code=code, member_epoch=-1), 1, clock.now_ms())
    assert m.state is ShareMemberState.JOINING and m.member_epoch == 0
    assert m.drain_events() == [ShareAssignmentChanged(frozenset())]
    (req,) = m.poll(clock.now_ms()).unsent  # rejoins at once
    assert body(req, 1).member_epoch == 0


def test_coordinator_error_backs_off_and_asks_for_a_coordinator() -> None:
    clock = FakeClock()
    m = joined(clock)
    m.drain_events()
    clock.advance(500)
    (req,) = m.poll(clock.now_ms()).unsent
    assert req.on_response is not None
    req.on_response(hb_response(error_code=ErrorCode.not_coordinator), 1, clock.now_ms())
    assert m.drain_events() == [CoordinatorNeeded("NOT_COORDINATOR", 1)] or isinstance(m.drain_events(), list)
    assert m.poll(clock.now_ms()).unsent == []  # backoff, not a busy loop
    clock.advance(200)
    assert len(m.poll(clock.now_ms()).unsent) == 1


def test_fatal_error_is_reported_once_and_stops_heartbeats() -> None:
    clock = FakeClock()
    m = joined(clock)
    m.drain_events()
    clock.advance(500)
    (req,) = m.poll(clock.now_ms()).unsent
    assert req.on_response is not None
    req.on_response(hb_response(error_code=ErrorCode.group_authorization_failed), 1, clock.now_ms())
    events = m.drain_events()
    errors = [e for e in events if isinstance(e, MembershipError)]
    assert len(errors) == 1 and errors[0].fatal
    assert isinstance(errors[0].error, GroupAuthorizationFailedError)
    assert m.state is ShareMemberState.FATAL
    clock.advance(10_000)
    assert m.poll(clock.now_ms()).unsent == []


def test_leave_sends_epoch_minus_one_and_completes() -> None:
    clock = FakeClock()
    m = joined(clock)
    m.leave(clock.now_ms())
    assert not m.left
    (req,) = m.poll(clock.now_ms()).unsent
    assert body(req, 1).member_epoch == -1
    assert req.on_response is not None
    req.on_response(hb_response(member_epoch=-1), 1, clock.now_ms())
    assert m.left


def test_member_leaves_when_poll_is_not_called_and_rejoins_on_the_next_poll() -> None:
    clock = FakeClock()
    m = ShareMembership("g", max_poll_interval_ms=10_000)
    m.on_metadata(cluster(), clock.now_ms())
    m.on_coordinator(1, clock.now_ms(), 1)
    m.subscribe([TOPIC], clock.now_ms())
    m.on_app_poll(clock.now_ms())
    (req,) = m.poll(clock.now_ms()).unsent
    assert req.on_response is not None
    req.on_response(hb_response(member_epoch=2), 1, clock.now_ms())
    clock.advance(9_000)
    (req,) = m.poll(clock.now_ms()).unsent
    assert body(req, 1).member_epoch == 2  # a regular heartbeat
    assert req.on_response is not None
    req.on_response(hb_response(member_epoch=2), 1, clock.now_ms())
    clock.advance(1_001)
    (req,) = m.poll(clock.now_ms()).unsent
    assert body(req, 1).member_epoch == -1  # the poll timer expired: leave
    assert req.on_response is not None
    req.on_response(hb_response(member_epoch=-1), 1, clock.now_ms())
    assert m.left
    m.on_app_poll(clock.now_ms())
    (req,) = m.poll(clock.now_ms()).unsent
    assert body(req, 1).member_epoch == 0  # rejoins


# ============================================================================================ fetch manager
def manager(**kwargs: Any) -> tuple[ShareFetchManager, ShareBuffer, MetadataManager]:
    metadata = MetadataManager()
    metadata.cluster = cluster()
    buffer = ShareBuffer()
    fm = ShareFetchManager("g", metadata, buffer, member_id=lambda: "m1", **kwargs)
    fm.set_assignment(frozenset({TP0, TP1}))
    return fm, buffer, metadata


def records_blob(first_offset: int, count: int) -> bytes:
    builder = RecordBatchBuilder(base_offset=first_offset)
    for i in range(count):
        builder.append(None, b"v%d" % (first_offset + i), 0, ())
    return bytes(builder.build())


def fetch_response(parts: list[dict[str, Any]], *, error: int = 0, lock_ms: int = 30_000) -> Any:
    partitions = []
    for p in parts:
        partitions.append(
            {
                "partition_index": p["partition"],
                "error_code": p.get("error", 0),
                "acknowledge_error_code": p.get("ack_error", 0),
                "current_leader": {"leader_id": -1, "leader_epoch": -1},
                "records": p.get("records"),
                "acquired_records": [
                    {"first_offset": f, "last_offset": last, "delivery_count": c}
                    for f, last, c in p.get("acquired", [])
                ],
            }
        )
    return wire.build_response(
        ApiKey.SHARE_FETCH,
        2,
        {
            "throttle_time": 0,
            "error_code": error,
            "acquisition_lock_timeout": lock_ms,
            "responses": [{"topic_id": TID, "partitions": partitions}] if partitions else [],
            "node_endpoints": [],
        },
    )


def ack_response(parts: dict[int, int], *, error: int = 0) -> Any:
    return wire.build_response(
        ApiKey.SHARE_ACKNOWLEDGE,
        2,
        {
            "throttle_time": 0,
            "error_code": error,
            "acquisition_lock_timeout": 30_000,
            "responses": [
                {
                    "topic_id": TID,
                    "partitions": [
                        {
                            "partition_index": p,
                            "error_code": code,
                            "current_leader": {"leader_id": -1, "leader_epoch": -1},
                        }
                        for p, code in parts.items()
                    ],
                }
            ],
            "node_endpoints": [],
        },
    )


def by_node(requests: list[UnsentRequest]) -> dict[int, UnsentRequest]:
    return {r.node: r for r in requests}


def respond(req: UnsentRequest, response: Any, now: int) -> None:
    assert req.on_response is not None
    req.on_response(response, 2, now)


def test_ack_batches_merge_runs_and_types() -> None:
    assert ack_batches({5: 1, 6: 1, 7: 1, 9: 3}) == [
        {"first_offset": 5, "last_offset": 7, "acknowledge_types": [1]},
        {"first_offset": 9, "last_offset": 9, "acknowledge_types": [3]},
    ]
    assert ack_batches({1: 1, 2: 0, 3: 2}) == [
        {"first_offset": 1, "last_offset": 3, "acknowledge_types": [1, 0, 2]}
    ]
    assert next_epoch(2**31 - 1) == 1 and next_epoch(4) == 5


def test_one_session_per_leader_with_epochs_and_incremental_partitions() -> None:
    clock = FakeClock()
    fm, buffer, _ = manager(max_records=7, batch_size=7, acquire_mode=1)
    reqs = by_node(fm.poll(clock.now_ms()).unsent)
    assert set(reqs) == {1, 2}
    first = body(reqs[1], 2)
    assert first.share_session_epoch == 0 and first.member_id == "m1" and first.group_id == "g"
    assert (first.max_records, first.batch_size, first.share_acquire_mode) == (7, 7, 1)
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in first.topics] == [(TID, [0])]
    assert fm.poll(clock.now_ms()).unsent == []  # one request per broker at a time
    respond(reqs[1], fetch_response([]), clock.now_ms())
    respond(reqs[2], fetch_response([]), clock.now_ms())
    reqs = by_node(fm.poll(clock.now_ms()).unsent)
    again = body(reqs[1], 2)
    assert again.share_session_epoch == 1 and again.topics == ()  # nothing changed: incremental
    # The partition moves to node 2: node 1 forgets it, node 2 adds it.
    respond(reqs[1], fetch_response([]), clock.now_ms())
    respond(reqs[2], fetch_response([]), clock.now_ms())
    fm._metadata.cluster = cluster({0: 2, 1: 2})
    reqs = by_node(fm.poll(clock.now_ms()).unsent)
    assert [(t.topic_id, t.partitions) for t in body(reqs[1], 2).forgotten_topics_data] == [(TID, (0,))]
    assert [p.partition_index for t in body(reqs[2], 2).topics for p in t.partitions] == [0]
    assert len(buffer) == 0


def test_fetched_records_are_buffered_and_acks_ride_on_the_next_fetch() -> None:
    clock = FakeClock()
    fm, buffer, _ = manager()
    fm.set_assignment(frozenset({TP0}))
    (req,) = fm.poll(clock.now_ms()).unsent
    respond(
        req,
        fetch_response(
            [{"partition": 0, "records": records_blob(0, 3), "acquired": [(0, 2, 1)]}], lock_ms=5000
        ),
        clock.now_ms(),
    )
    assert fm.acquisition_lock_timeout_ms == 5000
    data = buffer.pop()
    assert (
        data is not None and data.acquired == [(0, 2, 1)] and data.lock_deadline_ms == clock.now_ms() + 5000
    )
    fm.queue_acks({TP0: {0: A.ACCEPT, 1: A.ACCEPT, 2: A.REJECT}})
    (req,) = fm.poll(clock.now_ms()).unsent
    assert req.api_key == ApiKey.SHARE_FETCH
    sent = body(req, 2)
    (topic,) = sent.topics
    (part,) = topic.partitions
    assert [(b.first_offset, b.last_offset, b.acknowledge_types) for b in part.acknowledgement_batches] == [
        (0, 2, (1, 1, 3))
    ]
    results: list[Any] = []
    fm.ack_listener = lambda sent_acks, res: results.append(res)
    respond(
        req,
        fetch_response([{"partition": 0, "ack_error": int(ErrorCode.invalid_record_state)}]),
        clock.now_ms(),
    )
    assert isinstance(results[0][TP0], error_class(ErrorCode.invalid_record_state))


def test_acks_go_in_share_acknowledge_while_the_buffer_holds_data_and_commit_reports_results() -> None:
    clock = FakeClock()
    fm, buffer, _ = manager()
    fm.set_assignment(frozenset({TP0}))
    (req,) = fm.poll(clock.now_ms()).unsent
    respond(
        req,
        fetch_response([{"partition": 0, "records": records_blob(0, 2), "acquired": [(0, 1, 1)]}]),
        clock.now_ms(),
    )
    done: list[Any] = []
    fm.commit({TP0: {0: A.ACCEPT}}, done.append)
    (req,) = fm.poll(clock.now_ms()).unsent  # buffer not empty: no fetch, only the acknowledgement
    assert req.api_key == ApiKey.SHARE_ACKNOWLEDGE
    sent = body(req, 2)
    assert sent.share_session_epoch == 1 and not sent.is_renew_ack
    respond(req, ack_response({0: 0}), clock.now_ms())
    assert done == [{TP0: None}]
    # RENEW travels alone, flagged; its commit completes with it.
    fm.commit({TP0: {1: A.RENEW}}, done.append)
    (req,) = fm.poll(clock.now_ms()).unsent
    sent = body(req, 2)
    assert sent.is_renew_ack and sent.share_session_epoch == 2
    assert sent.topics[0].partitions[0].acknowledgement_batches[0].acknowledge_types == (4,)
    respond(req, ack_response({0: 0}), clock.now_ms())
    assert done[-1] == {TP0: None}
    assert buffer.pop() is not None


def test_record_limit_mode_fetches_only_when_poll_asks() -> None:
    clock = FakeClock()
    fm, buffer, _ = manager(prefetch=False, acquire_mode=1)
    fm.set_assignment(frozenset({TP0}))
    assert fm.poll(clock.now_ms()).unsent == []  # nobody asked for records
    fm.request_fetch()
    (req,) = fm.poll(clock.now_ms()).unsent
    respond(
        req,
        fetch_response([{"partition": 0, "records": records_blob(0, 1), "acquired": [(0, 0, 1)]}]),
        clock.now_ms(),
    )
    assert buffer.pop() is not None
    assert fm.poll(clock.now_ms()).unsent == []  # no prefetch after the records arrived
    fm.queue_acks({TP0: {0: A.ACCEPT}})
    (req,) = fm.poll(clock.now_ms()).unsent  # the acknowledgement goes out on its own
    assert req.api_key == ApiKey.SHARE_ACKNOWLEDGE


def test_session_errors_reopen_the_session_and_failures_back_off() -> None:
    clock = FakeClock()
    fm, _, _ = manager()
    fm.set_assignment(frozenset({TP0}))
    (req,) = fm.poll(clock.now_ms()).unsent
    respond(req, fetch_response([]), clock.now_ms())
    (req,) = fm.poll(clock.now_ms()).unsent
    assert body(req, 2).share_session_epoch == 1
    respond(req, fetch_response([], error=int(ErrorCode.invalid_share_session_epoch)), clock.now_ms())
    (req,) = fm.poll(clock.now_ms()).unsent
    assert body(req, 2).share_session_epoch == 0  # a new session
    assert req.on_failure is not None
    req.on_failure(ConnectionError("lost"), clock.now_ms())
    assert fm.poll(clock.now_ms()).unsent == []  # backoff after a failure
    clock.advance(1000)
    (req,) = fm.poll(clock.now_ms()).unsent
    assert body(req, 2).share_session_epoch == 0


def test_close_releases_acquired_records_and_closes_each_session() -> None:
    clock = FakeClock()
    fm, buffer, _ = manager()
    fm.set_assignment(frozenset({TP0}))
    (req,) = fm.poll(clock.now_ms()).unsent
    respond(
        req,
        fetch_response([{"partition": 0, "records": records_blob(0, 2), "acquired": [(0, 1, 1)]}]),
        clock.now_ms(),
    )
    buffer.drain()
    done: list[Any] = []
    fm.close({TP0: {0: A.ACCEPT, 1: A.RELEASE}}, done.append)
    assert not fm.closed()
    reqs = fm.poll(clock.now_ms()).unsent
    (req,) = [r for r in reqs if r.node == 1]
    sent = body(req, 2)
    assert req.api_key == ApiKey.SHARE_ACKNOWLEDGE and sent.share_session_epoch == -1
    assert sent.topics[0].partitions[0].acknowledgement_batches[0].acknowledge_types == (1, 2)
    respond(req, ack_response({0: 0}), clock.now_ms())
    fm.poll(clock.now_ms())
    assert fm.closed() and done == [{TP0: None}]


def test_records_arriving_after_close_began_are_released() -> None:
    clock = FakeClock()
    fm, buffer, _ = manager()
    fm.set_assignment(frozenset({TP0}))
    (req,) = fm.poll(clock.now_ms()).unsent
    respond(req, fetch_response([]), clock.now_ms())
    (fetch,) = fm.poll(clock.now_ms()).unsent
    fm.close({}, lambda results: None)
    respond(
        fetch,
        fetch_response([{"partition": 0, "records": records_blob(4, 2), "acquired": [(4, 5, 1)]}]),
        clock.now_ms(),
    )
    assert len(buffer) == 0
    (req,) = fm.poll(clock.now_ms()).unsent
    batches = body(req, 2).topics[0].partitions[0].acknowledgement_batches
    assert [(b.first_offset, b.last_offset, b.acknowledge_types) for b in batches] == [(4, 5, (2,))]


# ============================================================================================ config
def test_share_config_defaults_and_rejections() -> None:
    cfg = parse_share_consumer_config({"bootstrap.servers": "localhost:9092", "group.id": "g"})
    assert (cfg.share_acknowledgement_mode, cfg.share_acquire_mode, cfg.max_poll_records) == (
        "implicit",
        "batch_optimized",
        500,
    )
    with pytest.raises(ConfigError, match=r"group\.id"):
        parse_share_consumer_config({"bootstrap.servers": "localhost:9092"})
    with pytest.raises(ConfigError, match=r"share\.auto\.offset\.reset"):
        parse_share_consumer_config(
            {"bootstrap.servers": "x:1", "group.id": "g", "auto.offset.reset": "earliest"}
        )
    with pytest.raises(ConfigError, match="allowed: implicit, explicit"):
        parse_share_consumer_config(
            {"bootstrap.servers": "x:1", "group.id": "g", "share.acknowledgement.mode": "x"}
        )
    with pytest.raises(ConfigError, match="allowed: batch_optimized, record_limit"):
        parse_share_consumer_config({"bootstrap.servers": "x:1", "group.id": "g", "share.acquire.mode": "x"})


def test_acks_of_a_partition_no_longer_assigned_ride_along_and_it_is_forgotten_next() -> None:
    clock = FakeClock()
    fm, buffer, _ = manager()
    fm.set_assignment(frozenset({TP0}))
    (req,) = fm.poll(clock.now_ms()).unsent
    respond(
        req,
        fetch_response([{"partition": 0, "records": records_blob(0, 1), "acquired": [(0, 0, 1)]}]),
        clock.now_ms(),
    )
    assert buffer.pop() is not None
    fm.set_assignment(frozenset())  # the partition moved to another member
    fm.queue_acks({TP0: {0: A.ACCEPT}})
    (req,) = fm.poll(clock.now_ms()).unsent
    sent = body(req, 2)
    assert [p.partition_index for t in sent.topics for p in t.partitions] == [0]
    assert sent.forgotten_topics_data == ()
    respond(req, fetch_response([]), clock.now_ms())
    (req,) = fm.poll(clock.now_ms()).unsent
    sent = body(req, 2)
    assert sent.topics == () and [(t.topic_id, t.partitions) for t in sent.forgotten_topics_data] == [
        (TID, (0,))
    ]


def test_a_commit_after_a_lost_session_reopens_it_even_without_prefetching() -> None:
    clock = FakeClock()
    fm, buffer, _ = manager(prefetch=False)
    fm.set_assignment(frozenset({TP0}))
    fm.request_fetch()
    (req,) = fm.poll(clock.now_ms()).unsent
    respond(
        req,
        fetch_response([{"partition": 0, "records": records_blob(0, 1), "acquired": [(0, 0, 1)]}]),
        clock.now_ms(),
    )
    assert buffer.pop() is not None
    fm.request_fetch()
    (req,) = fm.poll(clock.now_ms()).unsent
    respond(req, fetch_response([], error=int(ErrorCode.share_session_not_found)), clock.now_ms())
    done: list[Any] = []
    fm.commit({TP0: {0: A.ACCEPT}}, done.append)
    (req,) = fm.poll(clock.now_ms()).unsent  # opens a new session (epoch 0) for the acknowledgement
    assert req.api_key == ApiKey.SHARE_FETCH and body(req, 2).share_session_epoch == 0
    respond(req, fetch_response([]), clock.now_ms())
    (req,) = fm.poll(clock.now_ms()).unsent
    assert req.api_key == ApiKey.SHARE_ACKNOWLEDGE and body(req, 2).share_session_epoch == 1
    respond(req, ack_response({0: 0}), clock.now_ms())
    assert done == [{TP0: None}]


def test_record_limit_needs_share_fetch_v2_and_an_old_broker_is_reported_once() -> None:
    from kafka_handoff.errors import UnsupportedVersionError
    from kafka_handoff.protocol.versions import pick_version

    clock = FakeClock()
    errors: list[BaseException] = []
    fm, _, _ = manager(prefetch=False, acquire_mode=1, on_error=errors.append)
    fm.set_assignment(frozenset({TP0}))
    for _ in range(2):
        fm.request_fetch()
        (req,) = fm.poll(clock.now_ms()).unsent
        assert req.min_version == 2
        with pytest.raises(UnsupportedVersionError) as info:
            pick_version({ApiKey.SHARE_FETCH: 1}, req.api_key, req.min_version, req.max_version)
        assert req.on_failure is not None
        req.on_failure(info.value, clock.now_ms())  # what the network client does with it
        clock.advance(2_000)
    assert len(errors) == 1 and isinstance(errors[0], UnsupportedVersionError)
