"""CoordinatorManager (FindCoordinator), driven with a fake clock and scripted responses."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_handoff.errors import ConnectionError_, CoordinatorNotAvailableError, GroupAuthorizationFailedError
from kafka_handoff.group.coordinator import COORDINATOR_UNKNOWN_WARN_MS, CoordinatorManager
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.requests import ANY_NODE, FakeClock, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import CLIENT_VERSIONS, ApiKey
from kafka_handoff.types import BrokerNode

pytestmark = pytest.mark.unit

FIND = ApiKey.FIND_COORDINATOR
BACKOFF = 100
BACKOFF_MAX = 1000
GROUP = "g1"


def manager() -> tuple[CoordinatorManager, list[tuple[BrokerNode | None, int]]]:
    cm = CoordinatorManager(GROUP, retry_backoff_ms=BACKOFF, retry_backoff_max_ms=BACKOFF_MAX)
    seen: list[tuple[BrokerNode | None, int]] = []
    cm.listeners.append(lambda node, now: seen.append((node, now)))
    return cm, seen


def only_request(result: PollResult) -> UnsentRequest:
    assert len(result.unsent) == 1, result
    req = result.unsent[0]
    assert req.api_key == FIND and req.node == ANY_NODE
    return req


def found(version: int, node_id: int = 3, *, error: int = 0, key: str = GROUP) -> Any:
    if version >= 4:
        return wire.build_response(
            FIND,
            version,
            {
                "throttle_time": 0,
                "coordinators": [
                    {
                        "key": key,
                        "node_id": node_id if not error else -1,
                        "host": "coord" if not error else "",
                        "port": 9092 if not error else -1,
                        "error_code": error,
                        "error_message": "nope" if error else None,
                    }
                ],
            },
        )
    return wire.build_response(
        FIND,
        version,
        {
            "throttle_time": 0,
            "error_code": error,
            "error_message": "nope" if error else None,
            "node_id": node_id if not error else -1,
            "host": "coord" if not error else "",
            "port": 9092 if not error else -1,
        },
    )


def respond(req: UnsentRequest, response: Any, version: int, now: int) -> None:
    assert req.on_response is not None
    req.on_response(response, version, now)


def test_does_not_ask_until_wanted() -> None:
    cm, _ = manager()
    assert cm.poll(0).unsent == []
    cm.wanted = True
    only_request(cm.poll(0))


@pytest.mark.parametrize("version", range(CLIENT_VERSIONS[FIND][0], CLIENT_VERSIONS[FIND][1] + 1))
def test_body_for_every_version(version: int) -> None:
    cm, _ = manager()
    cm.wanted = True
    req = only_request(cm.poll(0))
    entity = wire.build_request(FIND, version, req.body(version))
    if version >= 1:
        assert int(entity.key_type) == 0  # a group, not a transactional id
    if version >= 4:
        assert tuple(entity.coordinator_keys) == (GROUP,)
    else:
        assert entity.key == GROUP


@pytest.mark.parametrize("version", [3, 4, 6])
def test_found_coordinator_is_reported_to_listeners(version: int) -> None:
    clock = FakeClock()
    cm, seen = manager()
    cm.wanted = True
    req = only_request(cm.poll(clock.now_ms()))
    assert cm.poll(clock.now_ms()).unsent == []  # one request in flight
    respond(req, found(version, 3), version, clock.advance(5))
    node = BrokerNode(3, "coord", 9092)
    assert cm.coordinator == node
    assert seen == [(node, clock.now_ms())]
    assert cm.poll(clock.advance(10_000)).unsent == []  # known: nothing more to ask


def test_batched_response_picks_our_group() -> None:
    cm, _ = manager()
    cm.wanted = True
    req = only_request(cm.poll(0))
    response = wire.build_response(
        FIND,
        4,
        {
            "throttle_time": 0,
            "coordinators": [
                {"key": "other", "node_id": 9, "host": "x", "port": 1, "error_code": 0},
                {"key": GROUP, "node_id": 2, "host": "y", "port": 2, "error_code": 0},
            ],
        },
    )
    respond(req, response, 4, 0)
    assert cm.coordinator == BrokerNode(2, "y", 2)


@pytest.mark.parametrize("version", [3, 4])
def test_error_backs_off_and_retries(version: int) -> None:
    clock = FakeClock()
    cm, seen = manager()
    cm.wanted = True
    req = only_request(cm.poll(clock.now_ms()))
    respond(req, found(version, error=15), version, clock.now_ms())  # COORDINATOR_NOT_AVAILABLE
    assert cm.coordinator is None
    assert isinstance(cm.last_error, CoordinatorNotAvailableError)
    assert seen == []
    result = cm.poll(clock.now_ms())
    assert result.unsent == []
    assert BACKOFF * 0.8 <= result.wait_ms <= BACKOFF * 1.2
    assert cm.poll(clock.advance(int(BACKOFF * 0.8) - 1)).unsent == []
    req = only_request(cm.poll(clock.advance(int(BACKOFF * 0.4) + 1)))
    respond(req, found(version, 1), version, clock.now_ms())
    assert cm.coordinator is not None and cm.coordinator.node_id == 1


def test_non_retriable_error_is_recorded() -> None:
    cm, _ = manager()
    cm.wanted = True
    req = only_request(cm.poll(0))
    respond(req, found(4, error=30), 4, 0)  # GROUP_AUTHORIZATION_FAILED
    assert isinstance(cm.last_error, GroupAuthorizationFailedError)
    assert "nope" in str(cm.last_error)


def test_empty_batched_response_is_a_failure_not_a_crash() -> None:
    cm, _ = manager()
    cm.wanted = True
    req = only_request(cm.poll(0))
    respond(req, wire.build_response(FIND, 4, {"throttle_time": 0, "coordinators": []}), 4, 0)
    assert cm.coordinator is None
    assert cm.last_error is not None
    assert cm.poll(BACKOFF * 2).unsent != []


def test_disconnect_backs_off_exponentially_up_to_max() -> None:
    clock = FakeClock()
    cm, _ = manager()
    cm.wanted = True
    waits = []
    for _ in range(7):
        req = only_request(cm.poll(clock.now_ms()))
        assert req.on_failure is not None
        req.on_failure(ConnectionError_("down"), clock.now_ms())
        wait = cm.poll(clock.now_ms()).wait_ms
        waits.append(wait)
        clock.advance(wait)
    assert waits[0] <= BACKOFF * 1.2
    assert waits[2] >= BACKOFF * 4 * 0.8
    assert max(waits) <= BACKOFF_MAX * 1.2
    assert waits[-1] >= BACKOFF_MAX * 0.8


def test_mark_unknown_notifies_and_rediscovers() -> None:
    clock = FakeClock()
    cm, seen = manager()
    cm.wanted = True
    respond(only_request(cm.poll(clock.now_ms())), found(4, 3), 4, clock.now_ms())
    seen.clear()
    cm.mark_unknown(clock.advance(1), "NOT_COORDINATOR")
    assert cm.coordinator is None
    assert seen == [(None, clock.now_ms())]
    cm.mark_unknown(clock.now_ms())  # already unknown: no second notification
    assert seen == [(None, clock.now_ms())]
    # As Java: even after a success the next FindCoordinator waits retry.backoff.ms.
    assert cm.poll(clock.now_ms()).unsent == []
    req = only_request(cm.poll(clock.advance(int(BACKOFF * 1.2))))
    respond(req, found(4, 5), 4, clock.now_ms())
    assert cm.coordinator is not None and cm.coordinator.node_id == 5
    assert seen[-1] == (BrokerNode(5, "coord", 9092), clock.now_ms())


def found_now(cm: CoordinatorManager, clock: FakeClock, node_id: int) -> int:
    """Let the manager ask (after any backoff) and answer with ``node_id``; returns the new epoch."""
    result = cm.poll(clock.now_ms())
    if not result.unsent:
        result = cm.poll(clock.advance(result.wait_ms))
    respond(only_request(result), found(4, node_id), 4, clock.now_ms())
    assert cm.coordinator is not None and cm.coordinator.node_id == node_id
    return cm.epoch


def test_each_discovery_gets_a_new_epoch() -> None:
    clock = FakeClock()
    cm, _ = manager()
    cm.wanted = True
    first = found_now(cm, clock, 3)
    assert cm.mark_unknown(clock.advance(1), "NOT_COORDINATOR", epoch=first)
    second = found_now(cm, clock, 3)  # the same node again is still a new discovery
    assert second == first + 1


def test_stale_epoch_mark_does_not_invalidate_a_newer_coordinator() -> None:
    # Issue 13: a "coordinator unknown" mark about the old coordinator, applied after the new one was found
    # (e.g. drained in the same network poll), must be a no-op.
    clock = FakeClock()
    cm, seen = manager()
    cm.wanted = True
    old = found_now(cm, clock, 1)
    assert cm.mark_unknown(clock.advance(1), "disconnected", epoch=old)
    new = found_now(cm, clock, 2)
    seen.clear()
    assert not cm.mark_unknown(clock.now_ms(), "stale heartbeat failure", epoch=old)
    assert cm.coordinator is not None and cm.coordinator.node_id == 2
    assert seen == []
    assert cm.mark_unknown(clock.now_ms(), "NOT_COORDINATOR", epoch=new)
    assert cm.coordinator is None


def test_disconnect_of_another_node_does_not_invalidate_the_coordinator() -> None:
    clock = FakeClock()
    cm, _ = manager()
    cm.wanted = True
    found_now(cm, clock, 2)
    assert not cm.mark_unknown(clock.now_ms(), "connection lost", node_id=1)  # the old coordinator's
    assert cm.coordinator is not None
    assert cm.mark_unknown(clock.now_ms(), "connection lost", node_id=2)
    assert cm.coordinator is None


def test_find_coordinator_rate_is_bounded_when_every_coordinator_is_marked_unknown_at_once() -> None:
    # A dead coordinator that FindCoordinator keeps naming (until the controller fences it): every
    # discovery is marked unknown immediately.  Over 10 fake seconds the manager asks at most once per
    # retry.backoff.ms (jitter 0.8..1.2): never a busy loop.
    clock = FakeClock()
    cm, _ = manager()
    cm.wanted = True
    start = clock.now_ms()
    while clock.now_ms() - start < 10_000:
        result = cm.poll(clock.now_ms())
        if result.unsent:
            respond(only_request(result), found(4, 1), 4, clock.now_ms())
            cm.mark_unknown(clock.now_ms(), "connection refused", epoch=cm.epoch)
        else:
            clock.advance(max(1, result.wait_ms))
    assert 10_000 // int(BACKOFF * 1.2) <= cm.requests_sent <= 10_000 // int(BACKOFF * 0.8) + 1


def test_find_coordinator_failures_back_off_exponentially_over_time() -> None:
    clock = FakeClock()
    cm, _ = manager()
    cm.wanted = True
    start = clock.now_ms()
    while clock.now_ms() - start < 10_000:
        result = cm.poll(clock.now_ms())
        if result.unsent:
            respond(only_request(result), found(4, error=15), 4, clock.now_ms())
        else:
            clock.advance(max(1, result.wait_ms))
    # 100, 200, 400, 800, then ~1000 each: about 15 requests in 10 s, not hundreds.
    assert cm.requests_sent <= 20


def test_refresh_re_announces_a_known_coordinator() -> None:
    clock = FakeClock()
    cm, seen = manager()
    cm.refresh(clock.now_ms())
    assert cm.wanted and seen == []  # nothing known yet: it will be discovered
    found_now(cm, clock, 4)
    seen.clear()
    cm.refresh(clock.now_ms())
    assert seen == [(BrokerNode(4, "coord", 9092), clock.now_ms())]


def test_a_long_outage_is_warned_once_even_while_a_dead_node_keeps_being_found(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The stall is logged as a warning (once), also when each discovery is marked unknown right away.
    clock = FakeClock()
    cm, _ = manager()
    cm.wanted = True
    found_now(cm, clock, 1)
    clock.advance(60_000)  # served for a while
    with caplog.at_level("WARNING", logger="kafka_handoff.group.coordinator"):
        cm.mark_unknown(clock.now_ms(), "connection refused", epoch=cm.epoch)
        start = clock.now_ms()
        while clock.now_ms() - start < 3 * COORDINATOR_UNKNOWN_WARN_MS:
            result = cm.poll(clock.now_ms())
            if result.unsent:
                respond(only_request(result), found(4, 1), 4, clock.now_ms())
                cm.mark_unknown(clock.now_ms(), "connection refused", epoch=cm.epoch)
            else:
                clock.advance(max(1, result.wait_ms))
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "no usable group coordinator" in warnings[0].getMessage()
    assert "connection refused" in warnings[0].getMessage()


def test_outage_is_measured_from_when_a_serving_coordinator_was_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    cm, _ = manager()
    cm.wanted = True
    found_now(cm, clock, 1)
    clock.advance(20_000)  # served 20 s
    with caplog.at_level("WARNING", logger="kafka_handoff.group.coordinator"):
        cm.mark_unknown(clock.now_ms(), "connection lost", epoch=cm.epoch)
        start = clock.now_ms()

        def fail_for(ms: int) -> None:
            while clock.now_ms() - start < ms:
                result = cm.poll(clock.now_ms())
                if result.unsent:
                    respond(only_request(result), found(4, error=15), 4, clock.now_ms())
                else:
                    clock.advance(max(1, result.wait_ms))

        fail_for(COORDINATOR_UNKNOWN_WARN_MS - 5000)
        assert [r for r in caplog.records if r.levelname == "WARNING"] == []
        fail_for(COORDINATOR_UNKNOWN_WARN_MS + 5000)
    assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 1


@pytest.mark.parametrize("version", [3, 4])
def test_group_authorization_failure_goes_to_on_error_on_every_attempt(version: int) -> None:
    """No DESCRIBE on the group: the application hears of it (naming the group) after each failed lookup,
    and the lookup keeps backing off rather than spinning."""
    clock = FakeClock()
    errors: list[BaseException] = []
    cm = CoordinatorManager(
        GROUP, retry_backoff_ms=BACKOFF, retry_backoff_max_ms=BACKOFF_MAX, on_error=errors.append
    )
    cm.wanted = True
    for attempt in range(1, 4):
        req = only_request(cm.poll(clock.now_ms()))
        respond(req, found(version, error=30), version, clock.now_ms())
        assert len(errors) == attempt
        assert isinstance(errors[-1], GroupAuthorizationFailedError)
        assert repr(GROUP) in str(errors[-1])
        assert cm.poll(clock.now_ms()).unsent == []  # backing off
        clock.advance(BACKOFF_MAX)
    # other errors are retried quietly
    cm2 = CoordinatorManager(GROUP, on_error=errors.append)
    cm2.wanted = True
    respond(only_request(cm2.poll(0)), found(version, error=15), version, 0)  # COORDINATOR_NOT_AVAILABLE
    assert len(errors) == 3
