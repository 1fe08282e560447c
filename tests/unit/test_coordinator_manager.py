"""CoordinatorManager (FindCoordinator), driven with a fake clock and scripted responses."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_handoff.errors import ConnectionError_, CoordinatorNotAvailableError, GroupAuthorizationFailedError
from kafka_handoff.group.coordinator import CoordinatorManager
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
    req = only_request(cm.poll(clock.now_ms()))
    respond(req, found(4, 5), 4, clock.now_ms())
    assert cm.coordinator is not None and cm.coordinator.node_id == 5
    assert seen[-1] == (BrokerNode(5, "coord", 9092), clock.now_ms())


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
