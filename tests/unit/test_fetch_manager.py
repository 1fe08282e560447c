"""FetchManager and FetchBuffer, driven with a fake clock and scripted Fetch responses."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from kafka_handoff.consumer.collector import Collector
from kafka_handoff.consumer.fetcher import CompletedFetch, FetchBuffer, FetchManager
from kafka_handoff.consumer.subscription import FetchPosition, SubscriptionState
from kafka_handoff.errors import (
    ConnectionError_,
    KafkaTimeoutError,
    LogTruncationError,
    OffsetOutOfRangeError,
    TopicAuthorizationFailedError,
    UnsupportedVersionError,
)
from kafka_handoff.group.membership import Subscription
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.protocol.records import encode_batch
from kafka_handoff.protocol.requests import FakeClock, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import CLIENT_VERSIONS, ApiKey
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit

FETCH = ApiKey.FETCH
BACKOFF = 100
BACKOFF_MAX = 1000
BACKOFF_MIN_JITTERED = 80  # the first retry waits retry.backoff.ms +/- 20 % jitter
BACKOFF_MAX_JITTERED = 120
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
IDS = {"a": uuid.UUID(int=0xA), "b": uuid.UUID(int=0xB)}
LEADERS = {A0: 1, A1: 2, B0: 1}


def batch(base: int, n: int = 2) -> bytes:
    return encode_batch([(None, b"v%d" % (base + i), 1000 + i) for i in range(n)], base_offset=base)


@dataclass
class Harness:
    leaders: dict[TopicPartition, int] = field(default_factory=lambda: dict(LEADERS))
    topic_ids: bool = True
    reset: str = "latest"
    clock: FakeClock = field(default_factory=FakeClock)
    epoch: int = 7

    def __post_init__(self) -> None:
        self.subs = SubscriptionState(self.reset)
        self.metadata = MetadataManager(retry_backoff_ms=BACKOFF, topics=lambda: frozenset({"a", "b"}))
        self.buffer = FetchBuffer()
        self.fetched: list[tuple[int, int, int]] = []
        self.fm = FetchManager(
            self.subs,
            self.metadata,
            self.buffer,
            fetch_min_bytes=1,
            fetch_max_bytes=52428800,
            fetch_max_wait_ms=500,
            max_partition_fetch_bytes=1048576,
            isolation_level=1,
            rack_id="rack-1",
            retry_backoff_ms=BACKOFF,
            retry_backoff_max_ms=BACKOFF_MAX,
            on_fetched=lambda b, r, ms: self.fetched.append((b, r, ms)),
        )
        self.set_leaders(self.leaders)

    def set_leaders(self, leaders: Mapping[TopicPartition, int], epoch: int | None = None) -> None:
        """Install metadata through a real refresh, leaving the metadata manager with nothing to do."""
        self.leaders = dict(leaders)
        self.epoch = self.epoch if epoch is None else epoch
        self.metadata.request_update()
        # Answered as soon as the metadata manager's refresh backoff allows, without moving the test clock
        # (so that the fetch manager's own backoffs can be checked to the millisecond).
        now = self.clock.now_ms()
        assert any(self.answer_metadata(now + wait) for wait in (0, BACKOFF, 2 * BACKOFF))

    def metadata_response(self) -> Any:
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, leader in self.leaders.items():
            topics.setdefault(tp.topic, []).append(
                {
                    "error_code": 0,
                    "partition_index": tp.partition,
                    "leader_id": leader,
                    "leader_epoch": self.epoch,
                    "replica_nodes": [1, 2],
                    "isr_nodes": [1, 2],
                }
            )
        return wire.build_response(
            ApiKey.METADATA,
            12,
            {
                "throttle_time": 0,
                "brokers": [{"node_id": n, "host": f"h{n}", "port": 9092} for n in (1, 2)],
                "cluster_id": "c",
                "controller_id": 1,
                "topics": [
                    {
                        "error_code": 0,
                        "name": name,
                        "topic_id": IDS[name] if self.topic_ids else None,
                        "is_internal": False,
                        "partitions": parts,
                    }
                    for name, parts in topics.items()
                ],
            },
        )

    def answer_metadata(self, now: int) -> bool:
        """Serve the metadata refresh the manager wants at ``now`` (the installed leaders and epoch)."""
        unsent = self.metadata.poll(now).unsent
        if not unsent:
            return False
        (req,) = unsent
        assert req.on_response is not None
        req.on_response(self.metadata_response(), 12, now)
        return True

    def metadata_refresh_requested(self) -> bool:
        """Whether a refresh is due once the refresh backoff passed (answered, so none stays in flight)."""
        return self.answer_metadata(self.clock.now_ms() + BACKOFF)

    def assign(self, *parts: TopicPartition, at: int = 10) -> None:
        self.subs.assign_from_user(parts)
        for tp in parts:
            self.subs.seek(tp, at)

    def poll(self) -> PollResult:
        return self.fm.poll(self.clock.now_ms())

    def requests(self) -> dict[int, UnsentRequest]:
        out = {}
        for req in self.poll().unsent:
            assert req.api_key == FETCH
            assert req.node not in out, "two fetches for one broker"
            out[req.node] = req
        return out


def sent_partitions(req: UnsentRequest, version: int = 13) -> dict[TopicPartition, int]:
    body = req.body(version)
    names = {v: k for k, v in IDS.items()}
    out = {}
    for t in body["topics"]:
        name = t["topic"] if version <= 12 else names[t["topic_id"]]
        for p in t["partitions"]:
            out[TopicPartition(name, p["partition"])] = p["fetch_offset"]
    return out


def fetch_response(
    version: int, parts: Mapping[TopicPartition, Mapping[str, Any]], *, error: int = 0, ids: bool = True
) -> Any:
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, values in parts.items():
        entry = {
            "partition_index": tp.partition,
            "error_code": 0,
            "high_watermark": 100,
            "last_stable_offset": 90,
            "log_start_offset": 0,
            "records": None,
        }
        entry.update(values)
        topics.setdefault(tp.topic, []).append(entry)
    responses: Sequence[dict[str, Any]] = [
        {("topic_id" if version >= 13 else "topic"): (IDS[name] if version >= 13 else name), "partitions": ps}
        for name, ps in topics.items()
    ]
    return wire.build_response(
        FETCH,
        version,
        {"throttle_time": 0, "error_code": error, "session_id": 0, "responses": list(responses)},
    )


def respond(req: UnsentRequest, response: Any, version: int, now: int) -> None:
    assert req.on_response is not None
    req.on_response(response, version, now)


def drain(buffer: FetchBuffer) -> list[CompletedFetch]:
    out = []
    while (f := buffer.pop()) is not None:
        out.append(f)
    return out


# ---------------------------------------------------------------------------------------------- requests


def test_partitions_grouped_per_leader() -> None:
    h = Harness()
    h.assign(A0, A1, B0)
    reqs = h.requests()
    assert set(reqs) == {1, 2}
    assert sent_partitions(reqs[1]) == {A0: 10, B0: 10}
    assert sent_partitions(reqs[2]) == {A1: 10}


def test_topic_ids_for_v13_and_up() -> None:
    h = Harness()
    h.assign(A0)
    (req,) = h.requests().values()
    assert req.min_version >= 13
    body = req.body(13)
    assert [t["topic_id"] for t in body["topics"]] == [IDS["a"]]
    assert "topic" not in body["topics"][0]


def test_topic_names_for_v12_and_below_when_ids_unknown() -> None:
    h = Harness(topic_ids=False)
    h.assign(A0)
    (req,) = h.requests().values()
    assert req.max_version is not None and req.max_version <= 12
    body = req.body(12)
    assert [t["topic"] for t in body["topics"]] == ["a"]
    assert "topic_id" not in body["topics"][0]


@pytest.mark.parametrize("ids", [True, False])
def test_body_builds_for_every_allowed_version(ids: bool) -> None:
    h = Harness(topic_ids=ids)
    h.assign(A0)
    (req,) = h.requests().values()
    lo, hi = CLIENT_VERSIONS[FETCH]
    versions = range(max(lo, req.min_version), min(hi, req.max_version or hi) + 1)
    assert len(versions) > 0
    for version in versions:
        entity = wire.build_request(FETCH, version, req.body(version))
        part = entity.topics[0].partitions[0]
        assert part.fetch_offset == 10
        assert part.partition_max_bytes == 1048576
        if version >= 9:
            assert part.current_leader_epoch == 7  # the leader's epoch in metadata
        assert entity.min_bytes == 1 and entity.max_wait.total_seconds() == 0.5
        if version >= 4:
            assert int(entity.isolation_level) == 1
        if version >= 11:
            assert entity.rack_id == "rack-1"


def test_one_fetch_in_flight_per_broker() -> None:
    h = Harness()
    h.assign(A0)
    (req,) = h.requests().values()
    assert req.node == 1
    h.subs.assign_from_user([A0, B0])  # B0 (also led by broker 1) becomes fetchable meanwhile
    h.subs.seek(B0, 3)
    assert h.requests() == {}
    respond(req, fetch_response(13, {A0: {}}), 13, h.clock.now_ms())
    (again,) = h.requests().values()
    assert sent_partitions(again) == {A0: 10, B0: 3}


def test_other_brokers_are_fetched_while_one_is_busy() -> None:
    h = Harness()
    h.assign(A0)
    assert set(h.requests()) == {1}
    h.subs.assign_from_user([A0, A1])
    h.subs.seek(A1, 0)
    reqs = h.requests()
    assert set(reqs) == {2}
    assert sent_partitions(reqs[2]) == {A1: 0}


def test_only_fetchable_partitions_are_fetched() -> None:
    h = Harness(leaders={TopicPartition("a", p): 1 for p in range(6)})
    parts = [TopicPartition("a", p) for p in range(6)]
    h.subs.subscribe(Subscription(topics=frozenset({"a"})))
    h.subs.set_group_assignment(parts, awaiting=[parts[2]])
    for tp in parts[:5]:  # a-5 has no position
        h.subs.seek(tp, 1)
    h.subs.pause([parts[0]])
    h.subs.mark_pending_revocation([parts[1]])
    h.buffer.add([CompletedFetch(parts[3], 1, h.subs.state(parts[3]).position_epoch, batch(1))])
    h.buffer.pop()  # the collector took it: a-3 stays buffered until consumed; the queue is empty
    (req,) = h.requests().values()
    assert set(sent_partitions(req)) == {parts[4]}


def test_in_flight_partition_moves_to_its_new_leader_and_the_old_answer_is_ignored() -> None:
    """A fetch hangs on a broker that lost the leadership: the partition is fetched from the new leader
    without waiting for the old request, and the old broker's late answer is discarded."""
    h = Harness()
    h.assign(A0)
    (old,) = h.requests().values()
    h.set_leaders({**LEADERS, A0: 2}, epoch=8)
    (new,) = h.requests().values()
    assert new.node == 2 and sent_partitions(new) == {A0: 10}
    respond(
        old, fetch_response(13, {A0: {"records": batch(10), "high_watermark": 999}}), 13, h.clock.now_ms()
    )
    assert drain(h.buffer) == []
    assert h.subs.state(A0).high_watermark is None  # not the old leader's watermark
    respond(new, fetch_response(13, {A0: {"records": batch(10), "high_watermark": 12}}), 13, h.clock.now_ms())
    (f,) = drain(h.buffer)
    assert f.tp == A0 and h.subs.state(A0).high_watermark == 12


def test_unknown_leader_requests_metadata() -> None:
    h = Harness(leaders={A0: 1})
    h.assign(A0, A1)
    result = h.poll()
    assert [sent_partitions(r) for r in result.unsent] == [{A0: 10}]
    assert result.wait_ms <= BACKOFF
    assert h.metadata_refresh_requested()


def test_disabled_manager_fetches_nothing() -> None:
    h = Harness()
    h.assign(A0)
    h.fm.enabled = False
    assert h.requests() == {}


# ---------------------------------------------------------------------------------------------- responses


@pytest.mark.parametrize("version", [12, 13])
def test_response_becomes_completed_fetch_with_watermarks(version: int) -> None:
    h = Harness(topic_ids=version >= 13)
    h.assign(A0, B0)
    (req,) = h.requests().values()
    data = batch(10, 3)
    response = fetch_response(
        version,
        {
            A0: {
                "records": data,
                "high_watermark": 50,
                "last_stable_offset": 40,
                "log_start_offset": 2,
                "aborted_transactions": [{"producer_id": 7, "first_offset": 11}],
            },
            B0: {"high_watermark": 10, "last_stable_offset": 10, "log_start_offset": 0},  # nothing new
        },
    )
    respond(req, response, version, h.clock.advance(30))
    (f,) = drain(h.buffer)
    assert f.tp == A0 and f.fetch_offset == 10 and f.records == data
    assert f.position_epoch == h.subs.state(A0).position_epoch
    assert (f.high_watermark, f.last_stable_offset, f.log_start_offset) == (50, 40, 2)
    assert f.aborted_transactions == ((7, 11),)
    assert f.error is None
    st = h.subs.state(A0)
    assert (st.high_watermark, st.last_stable_offset, st.log_start_offset) == (50, 40, 2)
    assert h.subs.state(B0).high_watermark == 10
    assert h.buffer.buffered_partitions() == {A0}
    assert h.fetched == [(len(data), 0, 30)]


def test_buffered_partition_is_not_fetched_again_until_consumed() -> None:
    h = Harness()
    h.assign(A0, B0)
    (req,) = h.requests().values()
    respond(req, fetch_response(13, {A0: {"records": batch(10)}, B0: {}}), 13, h.clock.now_ms())
    h.buffer.pop()  # the collector took A0's data
    (again,) = h.requests().values()
    assert set(sent_partitions(again)) == {B0}
    respond(again, fetch_response(13, {B0: {}}), 13, h.clock.now_ms())
    h.buffer.done_with(A0)
    (third,) = h.requests().values()
    assert set(sent_partitions(third)) == {A0, B0}


def test_next_fetch_waits_until_the_buffer_is_half_drained() -> None:
    """Released partitions are fetched together once half of the queued data was taken, not one by one."""
    h = Harness(leaders={A0: 1, A1: 1, B0: 1})
    wakes: list[int] = []
    h.buffer.on_release = lambda: wakes.append(1)
    h.assign(A0, A1, B0)
    (req,) = h.requests().values()
    data = {tp: {"records": batch(10)} for tp in (A0, A1, B0)}
    respond(req, fetch_response(13, data), 13, h.clock.now_ms())
    assert h.requests() == {}
    first = h.buffer.pop()
    assert first is not None
    h.buffer.done_with(first.tp)  # 2 of 3 still queued: above the low water mark
    assert h.requests() == {} and wakes == []
    second = h.buffer.pop()
    assert second is not None
    h.buffer.done_with(second.tp)  # 1 of 3 queued: at most half
    assert wakes == [1]  # the network thread is woken once, now
    (again,) = h.requests().values()
    assert set(sent_partitions(again)) == {first.tp, second.tp}


def test_empty_buffer_never_holds_fetches_back() -> None:
    h = Harness()
    h.assign(A0)
    (req,) = h.requests().values()
    respond(req, fetch_response(13, {A0: {"records": batch(10)}}), 13, h.clock.now_ms())
    assert h.buffer.below_low_water() is False
    h.buffer.drop(lambda tp: False)  # e.g. a seek: the queued data is gone
    assert h.buffer.below_low_water() is True
    (again,) = h.requests().values()
    assert set(sent_partitions(again)) == {A0}


def test_offset_out_of_range_requests_reset() -> None:
    h = Harness(reset="earliest")
    h.assign(A0)
    (req,) = h.requests().values()
    epoch = h.subs.state(A0).position_epoch
    respond(req, fetch_response(13, {A0: {"error_code": 1}}), 13, h.clock.now_ms())
    assert drain(h.buffer) == []
    assert h.subs.position(A0) is None
    assert h.subs.needs_position() == {A0: ("earliest", epoch + 1)}
    assert h.requests() == {}  # no position: nothing to fetch until the reset completes


def test_offset_out_of_range_reset_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """Skipping records the application never saw (deleted by retention or DeleteRecords) is never silent:
    an INFO line names the partition, the position and the reset strategy."""
    h = Harness(reset="earliest")
    h.assign(A0)
    (req,) = h.requests().values()
    with caplog.at_level(logging.INFO, logger="kafka_handoff.consumer.fetcher"):
        respond(req, fetch_response(13, {A0: {"error_code": 1}}), 13, h.clock.now_ms())
    (line,) = [r for r in caplog.records if "out of range" in r.getMessage()]
    assert line.levelno == logging.INFO
    assert "position 10 of partition a-0" in line.getMessage()
    assert "auto.offset.reset=earliest" in line.getMessage()


def test_offset_out_of_range_with_reset_none_is_an_error_fetch() -> None:
    h = Harness(reset="none")
    h.assign(A0)
    (req,) = h.requests().values()
    respond(req, fetch_response(13, {A0: {"error_code": 1}}), 13, h.clock.now_ms())
    (f,) = drain(h.buffer)
    assert isinstance(f.error, OffsetOutOfRangeError)
    assert "10" in str(f.error) and "a-0" in str(f.error)
    assert h.subs.position(A0) == FetchPosition(10)


def test_offset_out_of_range_for_an_old_position_is_ignored() -> None:
    h = Harness(reset="earliest")
    h.assign(A0)
    (req,) = h.requests().values()
    h.subs.seek(A0, 500)
    respond(req, fetch_response(13, {A0: {"error_code": 1}}), 13, h.clock.now_ms())
    assert h.subs.position(A0) == FetchPosition(500)
    assert h.subs.needs_position() == {}


# UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH
@pytest.mark.parametrize("code", [3, 6, 74, 75])
def test_stale_metadata_errors_request_a_metadata_refresh(code: int) -> None:
    h = Harness()
    h.assign(A0)
    (req,) = h.requests().values()
    assert not h.metadata_refresh_requested()
    respond(req, fetch_response(13, {A0: {"error_code": code}}), 13, h.clock.now_ms())
    assert drain(h.buffer) == []
    assert h.metadata_refresh_requested()
    assert h.subs.position(A0) == FetchPosition(10)


def test_unknown_topic_id_in_response_requests_metadata() -> None:
    h = Harness()
    h.assign(A0)
    (req,) = h.requests().values()
    response = wire.build_response(
        FETCH,
        13,
        {
            "throttle_time": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [
                {
                    "topic_id": uuid.UUID(int=0xDEAD),
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": 0,
                            "high_watermark": 1,
                            "last_stable_offset": 1,
                            "log_start_offset": 0,
                            "records": batch(10),
                        }
                    ],
                }
            ],
        },
    )
    respond(req, response, 13, h.clock.now_ms())
    assert drain(h.buffer) == []
    assert h.metadata_refresh_requested()


def test_other_partition_errors_reach_the_application() -> None:
    h = Harness()
    h.assign(A0)
    (req,) = h.requests().values()
    respond(req, fetch_response(13, {A0: {"error_code": 29}}), 13, h.clock.now_ms())
    (f,) = drain(h.buffer)
    assert isinstance(f.error, TopicAuthorizationFailedError)
    assert "a-0" in str(f.error)


def test_top_level_error_backs_off_the_broker() -> None:
    h = Harness()
    h.assign(A0)
    (req,) = h.requests().values()
    respond(req, fetch_response(13, {}, error=6), 13, h.clock.now_ms())
    assert h.requests() == {}
    assert h.metadata_refresh_requested()
    h.clock.advance(BACKOFF_MAX_JITTERED)
    assert set(h.requests()) == {1}


def test_failure_backs_off_the_broker_only() -> None:
    h = Harness()
    h.assign(A0, A1)
    reqs = h.requests()
    fail = reqs[1].on_failure
    assert fail is not None
    fail(ConnectionError_("disconnected"), h.clock.now_ms())
    respond(reqs[2], fetch_response(13, {A1: {}}), 13, h.clock.now_ms())
    assert set(h.requests()) == {2}  # broker 1 is backing off, broker 2 is not
    assert h.metadata_refresh_requested()
    h.clock.advance(BACKOFF_MIN_JITTERED - 1)
    assert h.requests() == {}  # broker 2 busy again, broker 1 still backing off
    h.clock.advance(BACKOFF_MAX_JITTERED - BACKOFF_MIN_JITTERED + 1)
    assert set(h.requests()) == {1}


def test_forget_allows_a_new_fetch_to_the_node() -> None:
    h = Harness()
    h.assign(A0)
    assert set(h.requests()) == {1}
    h.fm.forget(1)
    assert set(h.requests()) == {1}


# ------------------------------------------------------------------------------------ leader changes


def sent_epochs(req: UnsentRequest, version: int = 13) -> dict[TopicPartition, int]:
    body = req.body(version)
    names = {v: k for k, v in IDS.items()}
    return {
        TopicPartition(names[t["topic_id"]], p["partition"]): p["current_leader_epoch"]
        for t in body["topics"]
        for p in t["partitions"]
    }


def answer_metadata(h: Harness) -> int:
    return int(h.answer_metadata(h.clock.now_ms()))


def test_fetch_names_the_leader_epoch_from_metadata_not_the_position_epoch() -> None:
    """The stall of issue 13: the position's epoch is that of the last record batch consumed; the fetch
    must name the current leader's epoch, or a new leader fences it with FENCED_LEADER_EPOCH forever."""
    h = Harness()
    h.assign(A0)
    h.subs.advance(A0, h.subs.state(A0).position_epoch, 10, 3)  # records of leader epoch 3 consumed
    assert h.subs.position(A0) == FetchPosition(10, 3)
    (req,) = h.requests().values()
    assert sent_epochs(req) == {A0: 7}
    for version in (9, 13, 17):
        part = wire.build_request(FETCH, version, req.body(version)).topics[0].partitions[0]
        assert part.current_leader_epoch == 7


@pytest.mark.parametrize("code", [3, 5, 6, 9, 56, 74, 75])
def test_leader_errors_never_make_a_hot_loop(code: int) -> None:
    """A broker answering every fetch of a partition with a leader error while metadata keeps naming it:
    the partition is retried with exponential backoff (at most retry.backoff.max.ms apart), never at once."""
    h = Harness()
    h.assign(A0)
    fetches = refreshes = 0
    start = h.clock.now_ms()
    while h.clock.now_ms() - start < 10_000:
        for req in h.poll().unsent:
            fetches += 1
            respond(req, fetch_response(13, {A0: {"error_code": code}}), 13, h.clock.now_ms())
        refreshes += answer_metadata(h)
        h.clock.advance(1)
    # 100, 200, 400, 800 ms, then every 1000 ms (+/- 20 %): about 14 in 10 s; 3,500 a second before.
    assert 8 <= fetches <= 20
    assert refreshes >= 1
    assert drain(h.buffer) == []
    assert h.subs.position(A0) == FetchPosition(10)


def test_poll_wait_covers_the_partition_backoff() -> None:
    h = Harness(leaders={A0: 1})
    h.assign(A0)
    (req,) = h.requests().values()
    respond(req, fetch_response(13, {A0: {"error_code": 74}}), 13, h.clock.now_ms())
    result = h.poll()
    assert result.unsent == []
    assert BACKOFF_MIN_JITTERED <= result.wait_ms <= BACKOFF_MAX_JITTERED


def test_newer_leader_epoch_in_metadata_ends_the_backoff_at_once() -> None:
    h = Harness()
    h.assign(A0)
    (req,) = h.requests().values()
    respond(req, fetch_response(13, {A0: {"error_code": 74}}), 13, h.clock.now_ms())
    assert h.requests() == {}
    h.set_leaders({**LEADERS, A0: 2}, epoch=8)  # the refresh names the new leader (clock moved < backoff)
    (again,) = h.requests().values()
    assert again.node == 2 and sent_epochs(again) == {A0: 8}


def test_success_resets_the_partition_backoff() -> None:
    h = Harness(leaders={A0: 1})
    h.assign(A0)
    for _ in range(5):  # five failures in a row: the backoff grows
        h.clock.advance(BACKOFF_MAX)
        (req,) = h.requests().values()
        respond(req, fetch_response(13, {A0: {"error_code": 75}}), 13, h.clock.now_ms())
    h.clock.advance(BACKOFF_MAX * 2)
    (req,) = h.requests().values()
    respond(req, fetch_response(13, {A0: {}}), 13, h.clock.now_ms())
    (req,) = h.requests().values()
    respond(req, fetch_response(13, {A0: {"error_code": 75}}), 13, h.clock.now_ms())
    h.clock.advance(BACKOFF_MAX_JITTERED)
    assert set(h.requests()) == {1}  # back to the first backoff step


def hinted_response(version: int, leader: int, epoch: int, *, code: int = 6) -> Any:
    return wire.build_response(
        FETCH,
        version,
        {
            "throttle_time": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [
                {
                    "topic_id": IDS["a"],
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": code,
                            "high_watermark": -1,
                            "records": None,
                            "current_leader": {"leader_id": leader, "leader_epoch": epoch},
                        }
                    ],
                }
            ],
            "node_endpoints": [{"node_id": 3, "host": "h3", "port": 9093, "rack": None}],
        },
    )


@pytest.mark.parametrize("code", [6, 74])
def test_leader_hint_moves_the_partition_without_waiting_for_metadata(code: int) -> None:
    """KIP-951: NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH in a v16+ Fetch response name the new leader
    and its endpoint: the next fetch goes there at once, with the new epoch."""
    h = Harness(leaders={A0: 1})
    h.assign(A0)
    seen: list[int] = []
    h.metadata.listeners.append(lambda cluster, now: seen.extend(cluster.brokers))
    (req,) = h.requests().values()
    respond(req, hinted_response(17, 3, 9, code=code), 17, h.clock.now_ms())
    (again,) = h.requests().values()  # no clock movement, no metadata response
    assert again.node == 3 and sent_epochs(again) == {A0: 9}
    assert h.metadata.cluster.brokers[3].host == "h3"  # the network client learns the endpoint
    assert 3 in seen


def test_leader_hint_with_an_older_epoch_is_ignored() -> None:
    h = Harness(leaders={A0: 1})
    h.assign(A0)
    (req,) = h.requests().values()
    respond(req, hinted_response(17, 3, 6), 17, h.clock.now_ms())  # epoch 6 < the known 7
    assert h.metadata.cluster.leader_for(A0) == 1
    assert h.requests() == {}  # backing off


def test_timed_out_fetch_is_refetched_from_the_new_leader() -> None:
    """A fetch to a dead or hung broker fails after request.timeout.ms; the partition is fetched from the
    leader that metadata names then."""
    h = Harness()
    h.assign(A0)
    (req,) = h.requests().values()
    assert req.timeout_ms is None  # the client's request.timeout.ms
    assert req.on_failure is not None
    h.clock.advance(30_000)
    req.on_failure(KafkaTimeoutError("request timed out after 30000 ms"), h.clock.now_ms())
    assert h.metadata_refresh_requested()
    assert h.requests() == {}  # broker 1 backs off; metadata still names it
    h.set_leaders({**LEADERS, A0: 2}, epoch=8)
    (again,) = h.requests().values()
    assert again.node == 2 and sent_partitions(again) == {A0: 10} and sent_epochs(again) == {A0: 8}


def test_overdue_fetch_refreshes_metadata_at_a_bounded_rate() -> None:
    """A fetch unanswered long after fetch.max.wait.ms (a hung broker): metadata is refreshed while it
    lasts, at most once per retry.backoff.max.ms, so a new leader is found before the request times out."""
    h = Harness(leaders={A0: 1})
    h.assign(A0)
    assert set(h.requests()) == {1}
    refreshes = 0
    for _ in range(10_000):  # 10 s
        h.poll()
        refreshes += answer_metadata(h)
        h.clock.advance(1)
    assert 5 <= refreshes <= 10
    h.set_leaders({A0: 2}, epoch=8)
    (moved,) = h.requests().values()
    assert moved.node == 2


def test_stall_is_reported_once_per_interval_not_per_retry(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(leaders={A0: 1})
    h.assign(A0)
    caplog.set_level("WARNING", logger="kafka_handoff.consumer.fetcher")
    start = h.clock.now_ms()
    while h.clock.now_ms() - start < 65_000:
        for req in h.poll().unsent:
            respond(req, fetch_response(13, {A0: {"error_code": 74}}), 13, h.clock.now_ms())
        h.clock.advance(10)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2  # after 30 s and after 60 s
    assert "a-0" in warnings[0] and "FENCED_LEADER_EPOCH" in warnings[0]
    caplog.clear()
    h.clock.advance(BACKOFF_MAX * 2)
    (req,) = h.requests().values()
    respond(req, fetch_response(13, {A0: {}}), 13, h.clock.now_ms())
    assert any("fetched again" in r.getMessage() for r in caplog.records)


def test_short_outage_logs_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(leaders={A0: 1})
    h.assign(A0)
    caplog.set_level("DEBUG", logger="kafka_handoff.consumer.fetcher")
    for _ in range(5):
        (req,) = h.requests().values()
        respond(req, fetch_response(13, {A0: {"error_code": 6}}), 13, h.clock.now_ms())
        h.clock.advance(BACKOFF_MAX * 2)
    (req,) = h.requests().values()
    respond(req, fetch_response(13, {A0: {}}), 13, h.clock.now_ms())
    h.poll()
    assert [r for r in caplog.records if r.levelno >= 30] == []


def test_leader_change_drops_the_old_leaders_watermark() -> None:
    """Lag comes from the current leader's high watermark: the old leader's is not kept after a change."""
    h = Harness(leaders={A0: 1})
    h.assign(A0)
    (req,) = h.requests().values()
    respond(
        req, fetch_response(13, {A0: {"high_watermark": 10, "last_stable_offset": 10}}), 13, h.clock.now_ms()
    )
    assert h.subs.state(A0).high_watermark == 10
    h.set_leaders({A0: 2}, epoch=8)
    (req,) = h.requests().values()
    assert h.subs.state(A0).high_watermark is None  # unknown until the new leader answers
    respond(
        req, fetch_response(13, {A0: {"high_watermark": 60, "last_stable_offset": 60}}), 13, h.clock.now_ms()
    )
    assert h.subs.state(A0).high_watermark == 60


# ------------------------------------------------------------------------------------ with the collector


def test_seek_while_fetch_in_flight_drops_the_fetched_data() -> None:
    h = Harness()
    h.assign(A0)
    collector = Collector(h.subs, h.buffer, max_poll_records=500, check_crcs=True, read_committed=False)
    (req,) = h.requests().values()
    h.subs.seek(A0, 3)
    respond(req, fetch_response(13, {A0: {"records": batch(10)}}), 13, h.clock.now_ms())
    assert collector.collect() == {}
    assert h.subs.position(A0) == FetchPosition(3)
    (again,) = h.requests().values()  # the stale data no longer blocks fetching
    assert sent_partitions(again) == {A0: 3}
    respond(again, fetch_response(13, {A0: {"records": batch(3)}}), 13, h.clock.now_ms())
    records = collector.collect()[A0]
    assert [r.offset for r in records] == [3, 4]
    assert h.subs.position(A0) == FetchPosition(5)


# ---------------------------------------------------------------------------------------------- buffer


def test_buffer_tracks_bytes_and_drops_by_partition() -> None:
    buf = FetchBuffer()
    fa, fb = CompletedFetch(A0, 0, 0, b"xx"), CompletedFetch(B0, 0, 0, b"yyy")
    buf.add([fa, fb])
    assert len(buf) == 2 and buf.bytes_buffered == 5
    assert buf.has_buffered(A0) and buf.peek() is fa
    buf.drop(lambda tp: tp != A0)
    assert len(buf) == 1 and buf.bytes_buffered == 3
    assert not buf.has_buffered(A0) and buf.has_buffered(B0)
    assert buf.pop() is fb
    assert buf.has_buffered(B0)  # until the collector is done with it
    buf.done_with(B0)
    assert buf.buffered_partitions() == set()


def test_buffer_wakeup_is_taken_once() -> None:
    buf = FetchBuffer()
    buf.wakeup()
    buf.wait(10.0, lambda: False)  # returns at once: woken
    assert buf.take_wakeup()
    assert not buf.take_wakeup()


# ---------------------------------------------------------------------------------------------- KIP-320

OFFSETS_FOR_EPOCH = ApiKey.OFFSET_FOR_LEADER_EPOCH


def epoch_end_response(
    tp: TopicPartition, *, end_offset: int = -1, leader_epoch: int = -1, code: int = 0
) -> Any:
    return wire.build_response(
        OFFSETS_FOR_EPOCH,
        4,
        {
            "throttle_time": 0,
            "topics": [
                {
                    "topic": tp.topic,
                    "partitions": [
                        {
                            "error_code": code,
                            "partition": tp.partition,
                            "leader_epoch": leader_epoch,
                            "end_offset": end_offset,
                        }
                    ],
                }
            ],
        },
    )


def validation_body(req: UnsentRequest) -> dict[TopicPartition, tuple[int, int]]:
    """{tp: (current leader epoch, epoch looked up)} of an OffsetsForLeaderEpoch request."""
    assert req.api_key == OFFSETS_FOR_EPOCH
    return {
        TopicPartition(t["topic"], p["partition"]): (p["current_leader_epoch"], p["leader_epoch"])
        for t in req.body(4)["topics"]
        for p in t["partitions"]
    }


def consumed_at(h: Harness, tp: TopicPartition, offset: int, record_epoch: int) -> None:
    """The partition was fetched from the leader (epoch 7) and records of ``record_epoch`` consumed."""
    (req,) = [r for r in h.poll().unsent if r.api_key == FETCH]
    respond(req, fetch_response(13, {tp: {}}), 13, h.clock.now_ms())
    h.subs.advance(tp, h.subs.state(tp).position_epoch, offset, record_epoch)


def validation_after_leader_change(h: Harness, tp: TopicPartition = A0) -> UnsentRequest:
    h.set_leaders({tp: 2}, epoch=8)
    (req,) = h.poll().unsent
    return req


def test_leader_change_validates_the_position_before_fetching_again() -> None:
    h = Harness(leaders={A0: 1})
    h.assign(A0)
    consumed_at(h, A0, 10, 5)
    req = validation_after_leader_change(h)
    assert req.node == 2 and req.min_version == 3
    assert validation_body(req) == {A0: (8, 5)}
    assert h.poll().unsent == []  # not fetched while the validation is in flight
    respond(req, epoch_end_response(A0, end_offset=10, leader_epoch=5), 4, h.clock.now_ms())
    (fetch,) = h.requests().values()
    assert fetch.node == 2 and sent_partitions(fetch) == {A0: 10} and sent_epochs(fetch) == {A0: 8}
    assert h.subs.position(A0) == FetchPosition(10, 5)


def test_leader_change_without_a_record_epoch_needs_no_validation() -> None:
    h = Harness(leaders={A0: 1})
    h.assign(A0)  # a position from seek()/reset: no record epoch yet
    (req,) = h.requests().values()
    respond(req, fetch_response(13, {A0: {}}), 13, h.clock.now_ms())
    h.set_leaders({A0: 2}, epoch=8)
    (fetch,) = h.requests().values()
    assert fetch.node == 2


def test_truncation_moves_the_position_to_the_first_diverging_offset(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness(leaders={A0: 1}, reset="earliest")
    h.assign(A0)
    consumed_at(h, A0, 10, 5)
    req = validation_after_leader_change(h)
    respond(req, epoch_end_response(A0, end_offset=7, leader_epoch=5), 4, h.clock.now_ms())
    assert h.subs.position(A0) == FetchPosition(7, 5)
    assert "truncation" in caplog.text and "a-0" in caplog.text
    (fetch,) = h.requests().values()
    assert sent_partitions(fetch) == {A0: 7}


def test_truncation_with_reset_none_raises_log_truncation_error_from_the_next_poll() -> None:
    h = Harness(leaders={A0: 1}, reset="none")
    h.assign(A0)
    collector = Collector(h.subs, h.buffer, max_poll_records=500, check_crcs=True, read_committed=False)
    consumed_at(h, A0, 10, 5)
    req = validation_after_leader_change(h)
    respond(req, epoch_end_response(A0, end_offset=7, leader_epoch=5), 4, h.clock.now_ms())
    with pytest.raises(LogTruncationError) as info:
        collector.collect()
    err = info.value
    assert isinstance(err, OffsetOutOfRangeError)  # the offset-out-of-range family, as Java's
    assert (err.partition, err.fetch_offset, err.divergent_offset) == (A0, 10, 7)
    assert "a-0" in str(err) and "10" in str(err) and "7" in str(err)
    assert collector.collect() == {}  # raised once
    assert h.subs.position(A0) == FetchPosition(10, 5)
    assert [r for r in h.poll().unsent if r.api_key == FETCH] == []  # not fetched past a truncation
    h.subs.seek(A0, 7)  # the application decides
    (fetch,) = h.requests().values()
    assert sent_partitions(fetch) == {A0: 7}


def test_truncation_with_reset_none_is_raised_again_until_the_application_seeks() -> None:
    h = Harness(leaders={A0: 1}, reset="none")
    h.assign(A0)
    consumed_at(h, A0, 10, 5)
    req = validation_after_leader_change(h)
    respond(req, epoch_end_response(A0, end_offset=7, leader_epoch=5), 4, h.clock.now_ms())
    assert h.poll().unsent == []  # the error waits in the buffer: nothing is sent meanwhile
    (f,) = drain(h.buffer)
    h.buffer.done_with(A0)
    assert isinstance(f.error, LogTruncationError)
    assert h.poll().unsent == []  # backing off
    h.clock.advance(BACKOFF_MAX_JITTERED)
    (again,) = h.poll().unsent
    assert validation_body(again) == {A0: (8, 5)}


def test_unknown_epoch_on_the_leader_resets_by_the_strategy() -> None:
    h = Harness(leaders={A0: 1}, reset="latest")
    h.assign(A0)
    consumed_at(h, A0, 10, 5)
    req = validation_after_leader_change(h)
    respond(req, epoch_end_response(A0), 4, h.clock.now_ms())  # UNDEFINED epoch / end offset
    assert h.subs.position(A0) is None
    assert set(h.subs.needs_position()) == {A0} and h.subs.needs_position()[A0][0] == "latest"


def test_unknown_epoch_with_reset_none_raises_without_a_divergent_offset() -> None:
    h = Harness(leaders={A0: 1}, reset="none")
    h.assign(A0)
    consumed_at(h, A0, 10, 5)
    req = validation_after_leader_change(h)
    respond(req, epoch_end_response(A0), 4, h.clock.now_ms())
    (f,) = drain(h.buffer)
    assert isinstance(f.error, LogTruncationError) and f.error.divergent_offset is None


def test_offset_with_a_leader_epoch_is_validated_before_the_first_fetch() -> None:
    """A committed offset (restart) or seek(OffsetAndMetadata) carries a leader epoch: validated first."""
    h = Harness(leaders={A0: 1})
    h.subs.assign_from_user([A0])
    h.subs.seek(A0, 42, leader_epoch=3)
    (req,) = h.poll().unsent
    assert validation_body(req) == {A0: (7, 3)}
    respond(req, epoch_end_response(A0, end_offset=50, leader_epoch=3), 4, h.clock.now_ms())
    (fetch,) = h.requests().values()
    assert sent_partitions(fetch) == {A0: 42}


def test_seek_during_validation_discards_its_answer() -> None:
    h = Harness(leaders={A0: 1}, reset="none")
    h.subs.assign_from_user([A0])
    h.subs.seek(A0, 42, leader_epoch=3)
    (req,) = h.poll().unsent
    h.subs.seek(A0, 5)
    respond(req, epoch_end_response(A0, end_offset=1, leader_epoch=3), 4, h.clock.now_ms())
    assert drain(h.buffer) == []
    assert h.subs.position(A0) == FetchPosition(5)
    (fetch,) = h.requests().values()
    assert sent_partitions(fetch) == {A0: 5}


@pytest.mark.parametrize("code", [6, 74, 75])
def test_validation_errors_back_off_and_refresh_metadata(code: int) -> None:
    h = Harness(leaders={A0: 1})
    h.subs.assign_from_user([A0])
    h.subs.seek(A0, 42, leader_epoch=3)
    sent = refreshes = 0
    start = h.clock.now_ms()
    while h.clock.now_ms() - start < 10_000:
        for req in h.poll().unsent:
            sent += 1
            respond(req, epoch_end_response(A0, code=code), 4, h.clock.now_ms())
        refreshes += answer_metadata(h)
        h.clock.advance(1)
    assert 8 <= sent <= 20
    assert refreshes >= 1
    assert h.subs.state(A0).awaiting_validation


def test_broker_without_offsets_for_leader_epoch_v3_skips_validation() -> None:
    h = Harness(leaders={A0: 1})
    h.subs.assign_from_user([A0])
    h.subs.seek(A0, 42, leader_epoch=3)
    (req,) = h.poll().unsent
    assert req.on_failure is not None
    req.on_failure(UnsupportedVersionError("OffsetForLeaderEpoch needs version >= 3"), h.clock.now_ms())
    (fetch,) = h.requests().values()
    assert sent_partitions(fetch) == {A0: 42}
    respond(fetch, fetch_response(13, {A0: {}}), 13, h.clock.now_ms())
    h.subs.seek(A0, 50, leader_epoch=4)
    (again,) = h.requests().values()  # that broker is known not to support it
    assert again.api_key == FETCH


def test_validation_authorization_error_reaches_the_application() -> None:
    h = Harness(leaders={A0: 1})
    h.subs.assign_from_user([A0])
    h.subs.seek(A0, 42, leader_epoch=3)
    (req,) = h.poll().unsent
    respond(req, epoch_end_response(A0, code=29), 4, h.clock.now_ms())
    (f,) = drain(h.buffer)
    assert isinstance(f.error, TopicAuthorizationFailedError) and "a-0" in str(f.error)


def test_validation_request_builds_for_every_allowed_version() -> None:
    h = Harness(leaders={A0: 1})
    h.subs.assign_from_user([A0])
    h.subs.seek(A0, 42, leader_epoch=3)
    (req,) = h.poll().unsent
    lo, hi = CLIENT_VERSIONS[OFFSETS_FOR_EPOCH]
    for version in range(max(lo, req.min_version), hi + 1):
        entity = wire.build_request(OFFSETS_FOR_EPOCH, version, req.body(version))
        part = entity.topics[0].partitions[0]
        assert (part.current_leader_epoch, part.leader_epoch) == (7, 3)
        assert entity.replica_id == -1


# ---------------------------------------------------------------------------------------------- KIP-227


def body_partitions(body: Any) -> dict[TopicPartition, int]:
    names = {v: k for k, v in IDS.items()}
    return {
        TopicPartition(names[t["topic_id"]], p["partition"]): p["fetch_offset"]
        for t in body["topics"]
        for p in t["partitions"]
    }


def forgotten(body: Any) -> set[TopicPartition]:
    names = {v: k for k, v in IDS.items()}
    return {
        TopicPartition(names[t["topic_id"]], p)
        for t in body["forgotten_topics_data"]
        for p in t["partitions"]
    }


def session_response(
    parts: dict[TopicPartition, dict[str, Any]], *, session_id: int = 42, error: int = 0
) -> Any:
    response = fetch_response(13, parts, error=error)
    return wire.build_response(
        FETCH,
        13,
        {
            "throttle_time": 0,
            "error_code": error,
            "session_id": session_id,
            "responses": [
                {"topic_id": t.topic_id, "partitions": [vars_of(p) for p in t.partitions]}
                for t in response.responses
            ],
        },
    )


def vars_of(p: Any) -> dict[str, Any]:
    return {
        "partition_index": p.partition_index,
        "error_code": p.error_code,
        "high_watermark": p.high_watermark,
        "last_stable_offset": p.last_stable_offset,
        "log_start_offset": p.log_start_offset,
        "records": p.records,
        "aborted_transactions": None,
    }


def one(h: Harness) -> Any:
    (req,) = h.requests().values()
    return req


def test_idle_partitions_are_not_named_again() -> None:
    h = Harness(leaders={A0: 1, A1: 1, B0: 1})
    h.assign(A0, A1, B0)
    req = one(h)
    body = req.body(13)
    assert (body["session_id"], body["session_epoch"]) == (0, 0)
    assert body_partitions(body) == {A0: 10, A1: 10, B0: 10}
    respond(req, session_response({A0: {}, A1: {}, B0: {}}), 13, h.clock.now_ms())
    req = one(h)
    body = req.body(13)
    assert (body["session_id"], body["session_epoch"]) == (42, 1)
    assert body_partitions(body) == {} and forgotten(body) == set()


def test_consumed_partition_is_forgotten_while_buffered_then_named_with_its_new_offset() -> None:
    h = Harness(leaders={A0: 1, A1: 1, B0: 1})
    h.assign(A0, A1, B0)
    req = one(h)
    respond(req, session_response({A0: {"records": batch(10)}, A1: {}, B0: {}}), 13, h.clock.now_ms())
    f = h.buffer.pop()
    assert f is not None and f.tp == A0
    body = one(h).body(13)  # A0's data waits for the application: not fetched meanwhile
    assert body["session_epoch"] == 1 and body_partitions(body) == {} and forgotten(body) == {A0}
    h.fm.forget(1)
    h.subs.advance(A0, f.position_epoch, 12, None)
    h.buffer.done_with(A0)
    body = one(h).body(13)
    assert body_partitions(body) == {A0: 12}


@pytest.mark.parametrize("code", [70, 71])
def test_session_error_is_followed_by_a_full_fetch_at_once(code: int) -> None:
    h = Harness(leaders={A0: 1, A1: 1})
    h.assign(A0, A1)
    respond(one(h), session_response({A0: {}, A1: {}}), 13, h.clock.now_ms())
    respond(one(h), session_response({}, error=code, session_id=0), 13, h.clock.now_ms())
    body = one(h).body(13)  # no clock movement: no backoff for a session error
    assert body["session_epoch"] == 0 and body_partitions(body) == {A0: 10, A1: 10}


def test_disconnect_is_followed_by_a_full_fetch() -> None:
    h = Harness(leaders={A0: 1})
    h.assign(A0)
    respond(one(h), session_response({A0: {}}), 13, h.clock.now_ms())
    req = one(h)
    assert req.on_failure is not None
    req.on_failure(ConnectionError_("reset"), h.clock.now_ms())
    h.clock.advance(1000)
    body = one(h).body(13)
    assert (body["session_id"], body["session_epoch"]) == (42, 0) and body_partitions(body) == {A0: 10}


def test_new_assignment_is_followed_by_a_full_fetch() -> None:
    h = Harness(leaders={A0: 1, A1: 1})
    h.assign(A0)
    respond(one(h), session_response({A0: {}}), 13, h.clock.now_ms())
    h.subs.assign_from_user([A0, A1])
    h.subs.seek(A1, 0)
    body = one(h).body(13)
    assert body["session_epoch"] == 0 and body_partitions(body) == {A0: 10, A1: 0}


def test_new_assignment_while_a_fetch_is_in_flight_is_followed_by_a_full_fetch() -> None:
    h = Harness(leaders={A0: 1, A1: 1})
    h.assign(A0)
    respond(one(h), session_response({A0: {}}), 13, h.clock.now_ms())
    in_flight = one(h)  # incremental, epoch 1
    h.subs.assign_from_user([A1])
    h.subs.seek(A1, 0)
    assert h.requests() == {}  # the fetch to broker 1 is still in flight
    respond(in_flight, session_response({}), 13, h.clock.now_ms())
    body = one(h).body(13)
    # Full (closing session 42): not an incremental fetch of epoch 1, which the broker (expecting epoch 2)
    # would refuse, and which would never forget A0.
    assert (body["session_id"], body["session_epoch"]) == (42, 0) and body_partitions(body) == {A1: 0}


def test_leader_change_is_followed_by_a_full_fetch_from_the_new_leader() -> None:
    h = Harness(leaders={A0: 1, A1: 2})
    h.assign(A0, A1)
    for req in h.requests().values():
        respond(req, session_response({tp: {} for tp in (A0, A1) if h.leaders[tp] == req.node}), 13, 0)
    h.set_leaders({A0: 2, A1: 2}, epoch=8)
    reqs = h.requests()
    body = reqs[2].body(13)
    assert body["session_epoch"] == 0 and body_partitions(body) == {A0: 10, A1: 10}


def test_brokers_before_v7_get_sessionless_full_fetches() -> None:
    h = Harness(leaders={A0: 1}, topic_ids=False)
    h.assign(A0)
    req = one(h)
    assert req.body(6)["topics"][0]["partitions"][0]["fetch_offset"] == 10
    respond(req, fetch_response(6, {A0: {}}, ids=False), 6, h.clock.now_ms())
    body = one(h).body(6)
    assert body["topics"] and body["session_epoch"] == -1


def test_close_sends_one_final_epoch_request_per_session() -> None:
    h = Harness(leaders={A0: 1, A1: 2})
    h.assign(A0, A1)
    for req in h.requests().values():
        respond(req, session_response({tp: {} for tp in (A0, A1) if h.leaders[tp] == req.node}), 13, 0)
    respond(h.requests()[1], session_response({}), 13, 0)  # broker 2's fetch stays in flight
    h.fm.close_sessions(h.clock.now_ms())
    assert not h.fm.sessions_closed()
    closing = h.poll().unsent
    assert [(r.node, r.body(13)["session_id"], r.body(13)["session_epoch"]) for r in closing] == [(1, 42, -1)]
    assert closing[0].timeout_ms is not None and closing[0].timeout_ms <= 1000  # never holds close() up
    entity = wire.build_request(FETCH, 13, closing[0].body(13))
    assert entity.topics == () and entity.session_epoch == -1
    assert h.poll().unsent == []  # no more fetches
    respond(closing[0], session_response({}, session_id=0), 13, 0)
    assert h.fm.sessions_closed()


def test_a_leaderless_spell_that_ended_logs_no_warning_later(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(leaders={A0: -1})
    h.assign(A0)
    caplog.set_level("WARNING", logger="kafka_handoff.consumer.fetcher")
    assert h.requests() == {}  # no leader: a stall begins
    h.clock.advance(5_000)
    h.set_leaders({A0: 1})
    (req,) = h.requests().values()
    respond(req, fetch_response(13, {A0: {}}), 13, h.clock.now_ms())
    for _ in range(70):  # then 70 s of healthy (empty) fetches
        h.clock.advance(1_000)
        for req in h.requests().values():
            respond(req, fetch_response(13, {A0: {}}), 13, h.clock.now_ms())
    assert [r for r in caplog.records if r.levelno >= 30] == []
