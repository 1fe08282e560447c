"""The admin client's sans-I/O call manager: sending, retries with backoff, deadlines, coordinators."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from kafka_handoff.admin.calls import AdminCall, AdminCallManager, GroupCoordinator, NoRetry
from kafka_handoff.errors import (
    ConnectionError_,
    GroupAuthorizationFailedError,
    InvalidReplicationFactorError,
    KafkaError,
    KafkaTimeoutError,
    NotCoordinatorError,
    RequestTimedOutError,
)
from kafka_handoff.protocol.requests import ANY_NODE, FakeClock, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.protocol.wire import build_response

pytestmark = pytest.mark.unit


class Script:
    """A ``handle`` that raises the queued exceptions first, then returns ``result``."""

    def __init__(self, *raises: BaseException, result: Any = "ok") -> None:
        self.raises = list(raises)
        self.result = result
        self.seen: list[tuple[Any, int, int]] = []

    def __call__(self, response: Any, version: int, node: int) -> Any:
        self.seen.append((response, version, node))
        if self.raises:
            raise self.raises.pop(0)
        return self.result


def make_call(
    handle: Script,
    *,
    target: Any = ANY_NODE,
    deadline_ms: int,
    name: str = "Test(x)",
    backoff: int | None = None,
) -> AdminCall:
    return AdminCall(
        name,
        ApiKey.METADATA,
        target,
        lambda version, timeout_ms: {"timeout_ms": timeout_ms},
        handle,
        deadline_ms,
        backoff_max_ms=backoff,
    )


def manager(**kwargs: Any) -> AdminCallManager:
    defaults: dict[str, Any] = {
        "retry_backoff_ms": 100,
        "retry_backoff_max_ms": 1000,
        "request_timeout_ms": 30000,
    }
    defaults.update(kwargs)
    return AdminCallManager(**defaults)


def only(requests: list[UnsentRequest]) -> UnsentRequest:
    assert len(requests) == 1, requests
    return requests[0]


def respond(request: UnsentRequest, now: int, response: Any = None, version: int = 1) -> None:
    assert request.on_response is not None
    request.on_response(response, version, now)


def find_coordinator_response(group: str, node_id: int = 3, error_code: int = 0) -> Any:
    return build_response(
        ApiKey.FIND_COORDINATOR,
        4,
        {
            "throttle_time": 0,
            "coordinators": [
                {"key": group, "node_id": node_id, "host": "broker3", "port": 9092, "error_code": error_code}
            ],
        },
    )


def test_a_call_is_sent_once_and_its_future_gets_the_handled_result() -> None:
    clock = FakeClock()
    mgr = manager(request_timeout_ms=5000)
    call = make_call(Script(result=42), deadline_ms=clock.now_ms() + 60_000)
    mgr.submit(call, clock.now_ms())
    request = only(mgr.poll(clock.now_ms()).unsent)
    assert request.node == ANY_NODE
    assert request.api_key == ApiKey.METADATA
    # The request timeout is request.timeout.ms, or what is left of the deadline if that is shorter.
    assert request.timeout_ms == 5000
    assert request.body(1) == {"timeout_ms": 5000}
    assert mgr.poll(clock.now_ms()).unsent == []  # in flight: not sent twice
    respond(request, clock.now_ms())
    assert call.future.result(0) == 42
    assert mgr.poll(clock.now_ms()).unsent == []
    assert mgr.pending() == 0


def test_request_timeout_is_capped_by_the_deadline() -> None:
    clock = FakeClock()
    mgr = manager(request_timeout_ms=30000)
    call = make_call(Script(), deadline_ms=clock.now_ms() + 700)
    mgr.submit(call, clock.now_ms())
    assert only(mgr.poll(clock.now_ms()).unsent).timeout_ms == 700


def test_retriable_errors_are_retried_after_an_exponential_backoff() -> None:
    clock = FakeClock()
    mgr = manager(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    handle = Script(RequestTimedOutError("slow"), RequestTimedOutError("slow"), result="done")
    call = make_call(handle, deadline_ms=clock.now_ms() + 60_000)
    mgr.submit(call, clock.now_ms())

    respond(only(mgr.poll(clock.now_ms()).unsent), clock.now_ms())
    assert not call.future.done()
    result = mgr.poll(clock.now_ms())
    assert result.unsent == []
    assert 80 <= result.wait_ms <= 120  # first backoff: 100 ms +-20 % jitter
    clock.advance(result.wait_ms)

    respond(only(mgr.poll(clock.now_ms()).unsent), clock.now_ms())
    result = mgr.poll(clock.now_ms())
    assert result.unsent == []
    assert 160 <= result.wait_ms <= 240  # doubled
    clock.advance(result.wait_ms)

    respond(only(mgr.poll(clock.now_ms()).unsent), clock.now_ms())
    assert call.future.result(0) == "done"
    assert call.attempts == 3


def test_a_call_backoff_cap_overrides_the_managers() -> None:
    clock = FakeClock()
    mgr = manager(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    errors = [RequestTimedOutError("slow") for _ in range(6)]
    call = make_call(Script(*errors), deadline_ms=clock.now_ms() + 60_000, backoff=250)
    mgr.submit(call, clock.now_ms())
    waits = []
    for _ in range(6):
        respond(only(mgr.poll(clock.now_ms()).unsent), clock.now_ms())
        wait = mgr.poll(clock.now_ms()).wait_ms
        waits.append(wait)
        clock.advance(wait)
    assert max(waits) <= 300  # 250 +20 % jitter, never the manager's 1000


def test_no_retry_and_non_retriable_errors_fail_at_once() -> None:
    clock = FakeClock()
    mgr = manager()
    wrapped = KafkaError("definitive")
    fatal = InvalidReplicationFactorError("cannot create topic 't': replication factor 3 > 1 broker")
    a = make_call(Script(NoRetry(wrapped)), deadline_ms=clock.now_ms() + 60_000)
    b = make_call(Script(fatal), deadline_ms=clock.now_ms() + 60_000)
    mgr.submit(a, clock.now_ms())
    mgr.submit(b, clock.now_ms())
    for request in mgr.poll(clock.now_ms()).unsent:
        respond(request, clock.now_ms())
    assert a.future.exception(0) is wrapped
    assert b.future.exception(0) is fatal
    assert mgr.poll(clock.now_ms()).unsent == []


def test_a_lost_connection_is_retried_and_asks_for_fresh_metadata() -> None:
    clock = FakeClock()
    refreshes: list[int] = []
    mgr = manager(on_unknown_node=lambda: refreshes.append(1))
    call = make_call(Script(result="ok"), deadline_ms=clock.now_ms() + 60_000)
    mgr.submit(call, clock.now_ms())
    request = only(mgr.poll(clock.now_ms()).unsent)
    assert request.on_failure is not None
    request.on_failure(ConnectionError_("connection refused"), clock.now_ms())
    assert not call.future.done()
    assert refreshes == [1]
    clock.advance(200)
    respond(only(mgr.poll(clock.now_ms()).unsent), clock.now_ms())
    assert call.future.result(0) == "ok"


def test_the_deadline_fails_the_call_naming_it_and_the_last_error() -> None:
    clock = FakeClock()
    mgr = manager()
    call = make_call(
        Script(*[RequestTimedOutError("broker busy") for _ in range(100)]),
        deadline_ms=clock.now_ms() + 1000,
        name="CreateTopics(topic 't')",
    )
    mgr.submit(call, clock.now_ms())
    while not call.future.done():
        result = mgr.poll(clock.now_ms())
        for request in result.unsent:
            respond(request, clock.now_ms())
        if not result.unsent and not call.future.done():  # as the network thread: re-poll after a response
            clock.advance(max(1, result.wait_ms))
        assert clock.now_ms() <= call.deadline_ms, "the call outlived its deadline"
    error = call.future.exception(0)
    assert isinstance(error, KafkaTimeoutError)
    assert "CreateTopics(topic 't') timed out" in str(error)
    assert "broker busy" in str(error)
    assert call.attempts >= 3


def test_retries_are_bounded_by_the_retries_setting() -> None:
    clock = FakeClock()
    mgr = manager(max_retries=1)
    call = make_call(
        Script(RequestTimedOutError("a"), RequestTimedOutError("b")), deadline_ms=clock.now_ms() + 60_000
    )
    mgr.submit(call, clock.now_ms())
    respond(only(mgr.poll(clock.now_ms()).unsent), clock.now_ms())
    clock.advance(1000)
    respond(only(mgr.poll(clock.now_ms()).unsent), clock.now_ms())
    error = call.future.exception(0)
    assert isinstance(error, RequestTimedOutError) and "b" in str(error)


def test_a_cancelled_call_is_dropped_without_a_request() -> None:
    clock = FakeClock()
    mgr = manager()
    call = make_call(Script(), deadline_ms=clock.now_ms() + 60_000)
    mgr.submit(call, clock.now_ms())
    assert call.future.cancel()
    assert mgr.poll(clock.now_ms()).unsent == []
    assert mgr.pending() == 0


def test_a_response_after_the_caller_gave_up_is_ignored() -> None:
    clock = FakeClock()
    mgr = manager()
    call = make_call(Script(result="late"), deadline_ms=clock.now_ms() + 60_000)
    mgr.submit(call, clock.now_ms())
    request = only(mgr.poll(clock.now_ms()).unsent)
    call.future.cancel()
    respond(request, clock.now_ms())  # must not raise InvalidStateError on the network thread
    assert call.future.cancelled()


def test_coordinator_calls_find_the_coordinator_once_then_go_to_it() -> None:
    clock = FakeClock()
    mgr = manager()
    a = make_call(Script(result="a"), target=GroupCoordinator("g"), deadline_ms=clock.now_ms() + 60_000)
    b = make_call(Script(result="b"), target=GroupCoordinator("g"), deadline_ms=clock.now_ms() + 60_000)
    mgr.submit(a, clock.now_ms())
    mgr.submit(b, clock.now_ms())
    lookup = only(mgr.poll(clock.now_ms()).unsent)
    assert lookup.api_key == ApiKey.FIND_COORDINATOR
    assert lookup.node == ANY_NODE
    assert lookup.body(4) == {"key_type": 0, "coordinator_keys": ["g"]}
    assert mgr.poll(clock.now_ms()).unsent == []  # lookup in flight: not repeated
    respond(lookup, clock.now_ms(), find_coordinator_response("g", node_id=3), version=4)
    assert mgr.coordinators["g"].node_id == 3
    requests = mgr.poll(clock.now_ms()).unsent
    assert [r.node for r in requests] == [3, 3]
    assert all(r.api_key == ApiKey.METADATA for r in requests)
    for r in requests:
        respond(r, clock.now_ms())
    assert (a.future.result(0), b.future.result(0)) == ("a", "b")


def test_not_coordinator_forgets_the_coordinator_and_finds_it_again() -> None:
    clock = FakeClock()
    mgr = manager()
    handle = Script(NotCoordinatorError("moved"), result="ok")
    call = make_call(handle, target=GroupCoordinator("g"), deadline_ms=clock.now_ms() + 60_000)
    mgr.submit(call, clock.now_ms())
    respond(
        only(mgr.poll(clock.now_ms()).unsent), clock.now_ms(), find_coordinator_response("g", 3), version=4
    )
    respond(only(mgr.poll(clock.now_ms()).unsent), clock.now_ms())  # -> NOT_COORDINATOR
    assert "g" not in mgr.coordinators
    clock.advance(200)
    lookup = only(mgr.poll(clock.now_ms()).unsent)
    assert lookup.api_key == ApiKey.FIND_COORDINATOR
    respond(lookup, clock.now_ms(), find_coordinator_response("g", 5), version=4)
    request = only(mgr.poll(clock.now_ms()).unsent)
    assert request.node == 5
    respond(request, clock.now_ms())
    assert call.future.result(0) == "ok"
    assert [node for _r, _v, node in handle.seen] == [3, 5]


def test_a_fatal_coordinator_lookup_error_fails_the_groups_calls() -> None:
    clock = FakeClock()
    mgr = manager()
    call = make_call(Script(), target=GroupCoordinator("g"), deadline_ms=clock.now_ms() + 60_000)
    other = make_call(Script(), target=GroupCoordinator("h"), deadline_ms=clock.now_ms() + 60_000)
    mgr.submit(call, clock.now_ms())
    mgr.submit(other, clock.now_ms())
    lookups = {r.body(4)["coordinator_keys"][0]: r for r in mgr.poll(clock.now_ms()).unsent}
    respond(lookups["g"], clock.now_ms(), find_coordinator_response("g", error_code=30), version=4)
    assert isinstance(call.future.exception(0), GroupAuthorizationFailedError)
    assert not other.future.done()


def test_a_retriable_lookup_error_is_retried_after_backoff() -> None:
    clock = FakeClock()
    mgr = manager()
    call = make_call(Script(result="ok"), target=GroupCoordinator("g"), deadline_ms=clock.now_ms() + 60_000)
    mgr.submit(call, clock.now_ms())
    # COORDINATOR_NOT_AVAILABLE (15): the offsets topic is still being created.
    respond(
        only(mgr.poll(clock.now_ms()).unsent),
        clock.now_ms(),
        find_coordinator_response("g", error_code=15),
        4,
    )
    assert not call.future.done()
    result = mgr.poll(clock.now_ms())
    assert result.unsent == [] and result.wait_ms > 0
    clock.advance(result.wait_ms)
    respond(only(mgr.poll(clock.now_ms()).unsent), clock.now_ms(), find_coordinator_response("g", 1), 4)
    respond(only(mgr.poll(clock.now_ms()).unsent), clock.now_ms())
    assert call.future.result(0) == "ok"


def test_fail_all_fails_every_pending_call() -> None:
    clock = FakeClock()
    mgr = manager()
    calls = [make_call(Script(), deadline_ms=clock.now_ms() + 60_000) for _ in range(3)]
    for c in calls:
        mgr.submit(c, clock.now_ms())
    mgr.poll(clock.now_ms())
    mgr.fail_all(KafkaError("closed"))
    assert all(str(c.future.exception(0)) == "closed" for c in calls)
    assert mgr.pending() == 0


def test_submit_is_idempotent_for_already_done_futures() -> None:
    clock = FakeClock()
    mgr = manager()
    fut: Future[Any] = Future()
    fut.set_result("earlier")
    call = AdminCall(
        "x", ApiKey.METADATA, ANY_NODE, lambda v, t: {}, Script(), clock.now_ms() + 1000, future=fut
    )
    mgr.submit(call, clock.now_ms())
    assert mgr.poll(clock.now_ms()).unsent == []


def test_a_leader_call_fails_at_once_on_a_lost_connection_so_the_leader_is_looked_up_again() -> None:
    """A call to a partition leader (``reroute``) does not retry a broker that is gone: the operation asks
    the metadata for the new leader.  Errors the leader answers are still retried in place."""
    clock = FakeClock()
    mgr = manager()
    call = AdminCall(
        "ListOffsets(broker 1)",
        ApiKey.LIST_OFFSETS,
        1,
        lambda version, timeout_ms: {},
        Script(RequestTimedOutError("slow"), result="ok"),
        clock.now_ms() + 60_000,
        reroute=True,
    )
    mgr.submit(call, clock.now_ms())
    request = only(mgr.poll(clock.now_ms()).unsent)
    respond(request, clock.now_ms())  # a broker error: retried after the backoff
    assert not call.future.done()
    clock.advance(200)
    request = only(mgr.poll(clock.now_ms()).unsent)
    assert request.on_failure is not None
    request.on_failure(ConnectionError_("connection refused"), clock.now_ms())
    assert isinstance(call.future.exception(0), ConnectionError_)
    assert mgr.poll(clock.now_ms()).unsent == []
