"""OffsetsManager: position initialisation (committed, then auto.offset.reset) and ListOffsets lookups,
driven with a fake clock and scripted ListOffsets responses."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pytest

from kafka_handoff.consumer.offsets import EARLIEST, LATEST, OffsetsManager
from kafka_handoff.consumer.subscription import FetchPosition, SubscriptionState
from kafka_handoff.errors import (
    ConnectionError_,
    KafkaError,
    KafkaTimeoutError,
    TopicAuthorizationFailedError,
)
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.protocol.requests import FakeClock, UnsentRequest
from kafka_handoff.protocol.versions import CLIENT_VERSIONS, ApiKey
from kafka_handoff.types import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

pytestmark = pytest.mark.unit

LIST_OFFSETS = ApiKey.LIST_OFFSETS
BACKOFF = 100
WALL = 1_700_000_000_000
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
LEADERS = {A0: 1, A1: 2, B0: 1}

Done = Callable[[dict[TopicPartition, Any], int], None]
Lookup = Future[dict[TopicPartition, OffsetAndTimestamp | None]]


class AppActsAfterSnapshot(SubscriptionState):
    """Deterministic thread interleaving: what ``app_steps`` hold runs (as the application thread would) right
    after the network thread read which partitions need a position, before it acted on that."""

    def __init__(self, default_reset: str) -> None:
        super().__init__(default_reset)
        self.app_steps: list[Callable[[], None]] = []

    def needs_position(self) -> dict[TopicPartition, tuple[str, int]]:
        needs = super().needs_position()
        steps, self.app_steps = self.app_steps, []
        for step in steps:
            step()
        return needs


@dataclass
class Harness:
    reset: str = "latest"
    group: bool = True
    leaders: dict[TopicPartition, int] = field(default_factory=lambda: dict(LEADERS))
    isolation: int = 0

    def __post_init__(self) -> None:
        self.clock = FakeClock()
        self.subs = AppActsAfterSnapshot(self.reset)
        self.metadata = MetadataManager(retry_backoff_ms=BACKOFF, topics=lambda: frozenset({"a", "b"}))
        self.committed_calls: list[tuple[set[TopicPartition], Done]] = []
        self.errors: list[BaseException] = []
        self.om = OffsetsManager(
            self.subs,
            self.metadata,
            isolation_level=self.isolation,
            retry_backoff_ms=BACKOFF,
            committed_lookup=self._committed if self.group else None,
            wall_clock_ms=lambda: WALL,
            on_error=self.errors.append,
        )
        self._install_metadata()

    def _committed(self, parts: set[TopicPartition], done: Done) -> bool:
        self.committed_calls.append((set(parts), done))
        return True

    def _install_metadata(self) -> None:
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, leader in self.leaders.items():
            topics.setdefault(tp.topic, []).append(
                {
                    "error_code": 0,
                    "partition_index": tp.partition,
                    "leader_id": leader,
                    "leader_epoch": 1,
                    "replica_nodes": [leader],
                    "isr_nodes": [leader],
                }
            )
        response = wire.build_response(
            ApiKey.METADATA,
            12,
            {
                "throttle_time": 0,
                "brokers": [{"node_id": n, "host": f"h{n}", "port": 9092} for n in (1, 2)],
                "cluster_id": "c",
                "controller_id": 1,
                "topics": [
                    {"error_code": 0, "name": name, "topic_id": None, "is_internal": False, "partitions": ps}
                    for name, ps in topics.items()
                ],
            },
        )
        (req,) = self.metadata.poll(self.clock.now_ms()).unsent
        assert req.on_response is not None
        req.on_response(response, 12, self.clock.now_ms())
        self.clock.advance(BACKOFF)

    def metadata_refresh_requested(self) -> bool:
        return bool(self.metadata.poll(self.clock.now_ms() + BACKOFF).unsent)

    def requests(self) -> dict[int, UnsentRequest]:
        out: dict[int, UnsentRequest] = {}
        for req in self.om.poll(self.clock.now_ms()).unsent:
            assert req.api_key == LIST_OFFSETS
            assert req.node not in out
            out[req.node] = req
        return out


def timestamps(req: UnsentRequest, version: int = 7) -> dict[TopicPartition, int]:
    body = req.body(version)
    return {
        TopicPartition(t["name"], p["partition_index"]): p["timestamp"]
        for t in body["topics"]
        for p in t["partitions"]
    }


def list_offsets_response(results: Mapping[TopicPartition, tuple[int, int] | int], version: int = 7) -> Any:
    """``results``: tp -> offset, or tp -> (error code, offset)."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, value in results.items():
        code, offset = value if isinstance(value, tuple) else (0, value)
        topics.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "error_code": code,
                "timestamp": 1234 if offset >= 0 else -1,
                "offset": offset,
                "leader_epoch": 4 if offset >= 0 else -1,
            }
        )
    return wire.build_response(
        LIST_OFFSETS,
        version,
        {"throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]},
    )


def respond(req: UnsentRequest, results: Mapping[TopicPartition, tuple[int, int] | int], now: int) -> None:
    assert req.on_response is not None
    req.on_response(list_offsets_response(results), 7, now)


# --------------------------------------------------------------------------------------- committed first


def test_committed_offset_is_looked_up_first() -> None:
    h = Harness()
    h.subs.assign_from_user([A0, A1])
    assert h.requests() == {}  # no ListOffsets while the committed offsets are looked up
    ((parts, done),) = h.committed_calls
    assert parts == {A0, A1}
    assert h.requests() == {}
    assert len(h.committed_calls) == 1  # not asked again while in flight
    done({A0: OffsetAndMetadata(42, "m", 3), A1: OffsetAndMetadata(7)}, h.clock.now_ms())
    # The committed leader epoch is kept: that position is validated before it is fetched (KIP-320).
    assert h.subs.position(A0) == FetchPosition(42, 3)
    assert h.subs.state(A0).awaiting_validation
    assert h.subs.position(A1) == FetchPosition(7)
    assert not h.subs.state(A1).awaiting_validation
    assert h.requests() == {}


def test_no_committed_offset_falls_back_to_reset_strategy() -> None:
    h = Harness(reset="earliest")
    h.subs.assign_from_user([A0])
    h.requests()
    ((_, done),) = h.committed_calls
    done({A0: None}, h.clock.now_ms())
    assert h.subs.needs_position() == {A0: ("earliest", 1)}
    (req,) = h.requests().values()
    assert timestamps(req) == {A0: EARLIEST}
    respond(req, {A0: 5}, h.clock.now_ms())
    assert h.subs.position(A0) == FetchPosition(5)


def test_committed_lookup_error_backs_off_then_asks_again() -> None:
    h = Harness()
    h.subs.assign_from_user([A0])
    h.requests()
    ((_, done),) = h.committed_calls
    done({A0: ConnectionError_("coordinator down")}, h.clock.now_ms())
    assert h.subs.position(A0) is None
    h.requests()
    assert len(h.committed_calls) == 1
    h.clock.advance(BACKOFF)
    h.requests()
    assert len(h.committed_calls) == 2


def test_seek_while_committed_lookup_in_flight_wins() -> None:
    h = Harness()
    h.subs.assign_from_user([A0])
    h.requests()
    ((_, done),) = h.committed_calls
    h.subs.seek(A0, 900)
    done({A0: OffsetAndMetadata(42)}, h.clock.now_ms())
    assert h.subs.position(A0) == FetchPosition(900)


def test_without_group_the_reset_strategy_is_used_at_once() -> None:
    h = Harness(group=False)
    h.subs.assign_from_user([A0])
    (req,) = h.requests().values()
    assert timestamps(req) == {A0: LATEST}
    assert h.committed_calls == []


# ------------------------------------------------------------------------- seek right after assign()


def test_seek_after_assign_is_not_undone_by_a_reset_none_decided_before_it() -> None:
    """auto.offset.reset=none, no group: assign() then seek() at once.  The network thread read "A0 needs a
    position" before the seek; the seek must stand and A0 must not be reported without an offset (Java: a
    seek() right after assign() means no NoOffsetForPartitionException)."""
    h = Harness(reset="none", group=False)
    h.subs.assign_from_user([A0])
    h.subs.app_steps.append(lambda: h.subs.seek(A0, 900))
    assert h.requests() == {}
    assert h.subs.position(A0) == FetchPosition(900)
    assert h.subs.partitions_without_offset() == frozenset()
    assert h.subs.needs_position() == {}
    assert h.requests() == {}
    assert h.subs.position(A0) == FetchPosition(900)


def test_seek_after_assign_is_not_undone_by_a_reset_decided_before_it() -> None:
    """The same race with auto.offset.reset=earliest: no ListOffsets, the seeked position is kept (it used to
    be replaced by the beginning of the log, silently)."""
    h = Harness(reset="earliest", group=False)
    h.subs.assign_from_user([A0])
    h.subs.app_steps.append(lambda: h.subs.seek(A0, 900))
    assert h.requests() == {}
    assert h.subs.position(A0) == FetchPosition(900)
    assert h.requests() == {}


def test_seek_after_assign_wins_over_a_committed_lookup_started_before_it() -> None:
    """With a group: the committed-offset lookup was started for the fresh partition before the seek; its
    answer (no committed offset, reset=none) belongs to an older position epoch and is dropped."""
    h = Harness(reset="none")
    h.subs.assign_from_user([A0])
    h.subs.app_steps.append(lambda: h.subs.seek(A0, 900))
    h.requests()
    for _parts, done in h.committed_calls:
        done({A0: None}, h.clock.now_ms())
    assert h.subs.position(A0) == FetchPosition(900)
    assert h.subs.partitions_without_offset() == frozenset()
    assert h.requests() == {}


def test_committed_answer_for_an_older_position_epoch_is_dropped() -> None:
    """A lookup started for one position epoch never sets (or resets) the position at another: here the
    partition was seeked and then set to be initialised from the committed offset again (no consumer call
    does that today; the subscription state allows it) while the first answer was on its way."""
    h = Harness(reset="none")
    h.subs.assign_from_user([A0])
    h.requests()
    ((_, done),) = h.committed_calls
    h.subs.seek(A0, 900)
    h.subs.request_reset(A0, "committed")
    done({A0: None}, h.clock.now_ms())  # the answer for the first epoch
    assert h.subs.partitions_without_offset() == frozenset()
    assert h.subs.needs_position() == {A0: ("committed", h.subs.state(A0).position_epoch)}


def test_by_duration_fallback_to_the_end_is_not_applied_after_a_seek() -> None:
    h = Harness(group=False)
    h.subs.assign_from_user([A0])
    h.subs.request_reset(A0, "by_duration:PT1H")
    (req,) = h.requests().values()
    h.subs.seek(A0, 300)
    respond(req, {A0: -1}, h.clock.now_ms())  # no record newer than an hour
    assert h.subs.position(A0) == FetchPosition(300)
    assert h.requests() == {}


# ---------------------------------------------------------------------------------------------- resets


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [("earliest", EARLIEST), ("latest", LATEST), ("by_duration:PT1H", WALL - 3_600_000)],
)
def test_reset_strategy_timestamps(strategy: str, expected: int) -> None:
    h = Harness(group=False)
    h.subs.assign_from_user([A0])
    h.subs.request_reset(A0, strategy)
    (req,) = h.requests().values()
    assert timestamps(req) == {A0: expected}
    respond(req, {A0: 11}, h.clock.now_ms())
    assert h.subs.position(A0) == FetchPosition(11)


def test_one_list_offsets_per_leader() -> None:
    h = Harness(group=False, isolation=1)
    h.subs.assign_from_user([A0, A1, B0])
    reqs = h.requests()
    assert set(reqs) == {1, 2}
    assert timestamps(reqs[1]) == {A0: LATEST, B0: LATEST}
    assert timestamps(reqs[2]) == {A1: LATEST}
    lo, hi = CLIENT_VERSIONS[LIST_OFFSETS]
    for version in range(max(lo, reqs[1].min_version), hi + 1):
        entity = wire.build_request(LIST_OFFSETS, version, reqs[1].body(version), ignorable=reqs[1].ignorable)
        assert entity.replica_id == -1
        if version >= 2:
            assert int(entity.isolation_level) == 1
    assert h.requests() == {}  # in flight: not asked again


def test_seek_during_in_flight_reset_wins() -> None:
    h = Harness(group=False)
    h.subs.assign_from_user([A0])
    (req,) = h.requests().values()
    h.subs.seek(A0, 300)
    respond(req, {A0: 11}, h.clock.now_ms())
    assert h.subs.position(A0) == FetchPosition(300)


def test_newer_reset_during_in_flight_reset_wins() -> None:
    h = Harness(group=False)
    h.subs.assign_from_user([A0])
    (req,) = h.requests().values()
    h.subs.request_reset(A0, "earliest")
    respond(req, {A0: 11}, h.clock.now_ms())  # the answer to "latest"
    assert h.subs.position(A0) is None
    (again,) = h.requests().values()
    assert timestamps(again) == {A0: EARLIEST}


def test_reset_error_requests_metadata_and_retries_after_backoff() -> None:
    h = Harness(group=False)
    h.subs.assign_from_user([A0])
    (req,) = h.requests().values()
    respond(req, {A0: (6, -1)}, h.clock.now_ms())  # NOT_LEADER_OR_FOLLOWER
    assert h.metadata_refresh_requested()
    assert h.subs.position(A0) is None
    assert h.requests() == {}
    h.clock.advance(BACKOFF)
    assert set(h.requests()) == {1}


def test_reset_failure_retries_after_backoff() -> None:
    h = Harness(group=False)
    h.subs.assign_from_user([A0, B0])
    (req,) = h.requests().values()
    assert req.on_failure is not None
    req.on_failure(ConnectionError_("gone"), h.clock.now_ms())
    assert h.requests() == {}
    h.clock.advance(BACKOFF)
    (again,) = h.requests().values()
    assert set(timestamps(again)) == {A0, B0}


def test_partition_without_leader_waits_for_metadata() -> None:
    h = Harness(group=False, leaders={A0: 1})
    h.subs.assign_from_user([A0, A1])
    reqs = h.requests()
    assert [set(timestamps(r)) for r in reqs.values()] == [{A0}]
    assert h.metadata_refresh_requested()


def test_reset_none_marks_the_partition_without_offset() -> None:
    """No lookup and no background error: the consumer raises NoOffsetForPartitionError from every poll()
    while the subscription state says the partition has no offset (until the application seeks)."""
    h = Harness(reset="none", group=False)
    h.subs.assign_from_user([A0])
    assert h.requests() == {}
    assert h.subs.partitions_without_offset() == {A0}
    h.clock.advance(10_000)
    assert h.requests() == {}
    assert h.errors == []
    assert h.subs.partitions_without_offset() == {A0}


def test_reset_none_after_no_committed_offset() -> None:
    h = Harness(reset="none")
    h.subs.assign_from_user([A0])
    h.requests()
    ((_, done),) = h.committed_calls
    done({A0: None}, h.clock.now_ms())
    assert h.requests() == {}
    assert h.subs.partitions_without_offset() == {A0}


def test_seek_to_beginning_after_no_offset_error_resets() -> None:
    """The application's answer to NoOffsetForPartitionError is seek_to_beginning/end: it must work."""
    h = Harness(reset="none", group=False)
    h.subs.assign_from_user([A0])
    h.requests()
    assert h.subs.partitions_without_offset() == {A0}
    h.subs.request_reset(A0, "earliest")  # what Consumer.seek_to_beginning does
    (req,) = h.requests().values()
    assert timestamps(req) == {A0: EARLIEST}
    respond(req, {A0: 0}, h.clock.now_ms())
    assert h.subs.position(A0) == FetchPosition(0)
    assert h.subs.partitions_without_offset() == frozenset()


def test_by_duration_without_a_newer_record_resets_to_the_end() -> None:
    """ListOffsets finds no record at or after now - duration (offset -1): reset to the end (Java), not a
    retry that would ask the same question forever."""
    h = Harness(reset="by_duration:PT1H", group=False)
    h.subs.assign_from_user([A0])
    (req,) = h.requests().values()
    assert timestamps(req) == {A0: WALL - 3_600_000}
    respond(req, {A0: -1}, h.clock.now_ms())
    (req,) = h.requests().values()  # at once, no backoff
    assert timestamps(req) == {A0: LATEST}
    respond(req, {A0: 42}, h.clock.now_ms())
    assert h.subs.position(A0) == FetchPosition(42)
    h.clock.advance(10_000)
    assert h.requests() == {}


def test_by_duration_with_an_error_is_retried_after_the_backoff() -> None:
    h = Harness(reset="by_duration:PT1H", group=False)
    h.subs.assign_from_user([A0])
    (req,) = h.requests().values()
    respond(req, {A0: (6, -1)}, h.clock.now_ms())  # NOT_LEADER_OR_FOLLOWER
    assert h.requests() == {}
    h.clock.advance(BACKOFF)
    (req,) = h.requests().values()
    assert timestamps(req) == {A0: WALL - 3_600_000}


def test_seek_after_failed_reset_is_not_delayed_by_the_backoff() -> None:
    h = Harness(group=False)
    h.subs.assign_from_user([A0])
    (req,) = h.requests().values()
    respond(req, {A0: (6, -1)}, h.clock.now_ms())
    h.subs.request_reset(A0, "earliest")  # a new reset: the old one's backoff does not apply
    (again,) = h.requests().values()
    assert timestamps(again) == {A0: EARLIEST}


def test_unknown_strategy_is_reported() -> None:
    h = Harness(group=False)
    h.subs.assign_from_user([A0])
    h.subs.request_reset(A0, "sideways")
    assert h.requests() == {}
    (err,) = h.errors
    assert isinstance(err, KafkaError) and "sideways" in str(err)


# ---------------------------------------------------------------------------------------------- user lookups


def test_lookup_completes_with_offsets_and_none_for_missing() -> None:
    h = Harness()
    fut: Lookup = Future()
    h.om.lookup({A0: 5000, A1: 5000, B0: EARLIEST}, fut, h.clock.now_ms() + 1000)
    reqs = h.requests()
    assert timestamps(reqs[1]) == {A0: 5000, B0: EARLIEST}
    assert timestamps(reqs[2]) == {A1: 5000}
    respond(reqs[1], {A0: 17, B0: 0}, h.clock.now_ms())
    assert not fut.done()
    assert h.requests() == {}  # nothing left to ask while A1 is in flight
    respond(reqs[2], {A1: -1}, h.clock.now_ms())
    assert fut.result() == {A0: OffsetAndTimestamp(17, 1234, 4), B0: OffsetAndTimestamp(0, 1234, 4), A1: None}


def test_lookup_times_out() -> None:
    h = Harness()
    fut: Lookup = Future()
    h.om.lookup({A0: LATEST}, fut, h.clock.now_ms() + 500)
    (req,) = h.requests().values()
    h.clock.advance(500)
    h.requests()
    with pytest.raises(KafkaTimeoutError):
        fut.result(0)
    respond(req, {A0: 9}, h.clock.now_ms())  # a late answer is harmless
    assert isinstance(fut.exception(0), KafkaTimeoutError)


def test_lookup_maps_broker_errors() -> None:
    h = Harness()
    fut: Lookup = Future()
    h.om.lookup({A0: LATEST}, fut, h.clock.now_ms() + 1000)
    (req,) = h.requests().values()
    respond(req, {A0: (29, -1)}, h.clock.now_ms())  # TOPIC_AUTHORIZATION_FAILED
    err = fut.exception(0)
    assert isinstance(err, TopicAuthorizationFailedError)
    assert "a-0" in str(err)


def test_lookup_with_several_failed_partitions_does_not_crash() -> None:
    h = Harness()
    fut: Lookup = Future()
    h.om.lookup({A0: LATEST, B0: LATEST}, fut, h.clock.now_ms() + 1000)
    (req,) = h.requests().values()
    respond(req, {A0: (29, -1), B0: (29, -1)}, h.clock.now_ms())
    assert isinstance(fut.exception(0), TopicAuthorizationFailedError)


def test_lookup_retries_metadata_errors_and_failures() -> None:
    h = Harness()
    fut: Lookup = Future()
    h.om.lookup({A0: LATEST}, fut, h.clock.now_ms() + 5000)
    (req,) = h.requests().values()
    respond(req, {A0: (6, -1)}, h.clock.now_ms())
    assert h.metadata_refresh_requested()
    assert not fut.done()
    assert h.requests() == {}  # not asked again at once
    h.clock.advance(BACKOFF * 12 // 10)  # retry.backoff.ms +/- 20 %
    (req,) = h.requests().values()
    assert req.on_failure is not None
    req.on_failure(ConnectionError_("gone"), h.clock.now_ms())
    assert h.requests() == {}
    h.clock.advance(BACKOFF * 2 * 12 // 10)  # the backoff doubles
    (req,) = h.requests().values()
    respond(req, {A0: 33}, h.clock.now_ms())
    assert fut.result(0) == {A0: OffsetAndTimestamp(33, 1234, 4)}


def test_lookup_during_a_leader_move_is_not_a_hot_loop() -> None:
    """end_offsets() while the leader answers NOT_LEADER_OR_FOLLOWER: retried with exponential backoff."""
    h = Harness()
    fut: Lookup = Future()
    h.om.lookup({A0: LATEST}, fut, h.clock.now_ms() + 10_000)
    sent = 0
    for _ in range(10_000):
        for req in h.requests().values():
            sent += 1
            respond(req, {A0: (6, -1)}, h.clock.now_ms())
        h.clock.advance(1)
    assert 8 <= sent <= 20  # 100, 200, 400, 800 ms, then about every second


def test_lookup_of_partition_without_leader_requests_metadata() -> None:
    h = Harness(leaders={A0: 1})
    fut: Lookup = Future()
    h.om.lookup({A1: LATEST}, fut, h.clock.now_ms() + 1000)
    assert h.metadata_refresh_requested()
    assert h.requests() == {}
