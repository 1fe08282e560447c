"""The admin client's request manager: one-shot *calls* with retries and deadlines (sans-I/O).

An admin operation is made of :class:`AdminCall` objects.  Each call names its destination (any broker, a
broker id, or the coordinator of a group), builds its request for the negotiated version, and turns the
response into a result with ``handle``.  The :class:`AdminCallManager` sends the calls, retries them after
retriable errors with exponential backoff until their deadline, finds group coordinators with
FindCoordinator (cached per group, forgotten after coordinator errors), and completes each call's future
with the result or the final error.

``handle`` decides what is retried: raising a retriable error (``error.retriable``, a lost connection, a
request timeout) retries the call; raising :class:`NoRetry` fails it at once with the wrapped error;
raising anything else fails it.  Everything here runs on the network thread; times come from the caller.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from kafka_handoff.errors import (
    BrokerResponseError,
    CoordinatorNotAvailableError,
    KafkaError,
    KafkaTimeoutError,
    NotCoordinatorError,
)
from kafka_handoff.group.coordinator import find_coordinator_body, parse_find_coordinator
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.requests import ANY_NODE, MAX_POLL_WAIT_MS, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import BrokerNode

__all__ = [
    "AdminCall",
    "AdminCallManager",
    "Done",
    "GroupCoordinator",
    "NoRetry",
    "Pause",
    "RunCalls",
    "Steps",
    "call_outcome",
    "drives_steps",
    "is_retriable",
    "next_step",
    "run_calls",
    "run_one",
    "set_exception",
    "steps_of",
]

_R = TypeVar("_R")
_S = TypeVar("_S")
_P = ParamSpec("_P")


@dataclass(frozen=True, slots=True)
class GroupCoordinator:
    """Destination: the coordinator of ``group_id`` (found with FindCoordinator)."""

    group_id: str


Target = int | GroupCoordinator
"""``ANY_NODE``, a broker id, or :class:`GroupCoordinator`."""


class NoRetry(Exception):  # a control-flow wrapper, not an error
    """Raised by a ``handle`` function: fail the call with ``error`` without retrying."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


_COORDINATOR_ERRORS = (NotCoordinatorError, CoordinatorNotAvailableError)


def is_retriable(error: BaseException) -> bool:
    return isinstance(error, KafkaError) and bool(error.retriable)


@dataclass(slots=True, eq=False)
class AdminCall:
    """One request of an admin operation, retried until it succeeds, fails for good, or its deadline."""

    name: str
    """For error messages: ``"CreateTopics(topic 'x')"``."""
    api_key: int
    target: Target
    build: Callable[[int, int], Mapping[str, Any]]
    """``build(version, timeout_ms) -> request values`` (``timeout_ms``: what is left of the deadline)."""
    handle: Callable[[Any, int, int], Any]
    """``handle(response, version, node_id) -> result``; raise to retry or fail (see the module doc)."""
    deadline_ms: int
    future: Future[Any] = field(default_factory=Future)
    min_version: int = 0
    max_version: int | None = None
    backoff_max_ms: int | None = None
    """Cap of this call's retry backoff (``None``: the manager's ``retry.backoff.max.ms``)."""
    reroute: bool = False
    """The target is a partition leader: a lost connection or a request timeout fails the call at once
    (with its retriable error) so that the operation looks the leader up again instead of retrying a broker
    that may be gone."""
    attempts: int = 0
    next_attempt_ms: int = 0
    in_flight: bool = False
    last_error: BaseException | None = None


@dataclass(slots=True)
class _Lookup:
    in_flight: bool = False
    attempts: int = 0
    next_ms: int = 0


class AdminCallManager:
    """Sends :class:`AdminCall` objects; a :class:`~kafka_handoff.protocol.requests.RequestManager`."""

    def __init__(
        self,
        *,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        request_timeout_ms: int = 30000,
        max_retries: int = 2**31 - 1,
        on_unknown_node: Callable[[], None] | None = None,
    ) -> None:
        self._backoff_base = retry_backoff_ms
        self._backoff_max = retry_backoff_max_ms
        self._request_timeout = request_timeout_ms
        self._max_retries = max_retries
        self._on_unknown_node = on_unknown_node
        self._calls: list[AdminCall] = []
        self.coordinators: dict[str, BrokerNode] = {}
        self._lookups: dict[str, _Lookup] = {}

    # ------------------------------------------------------------------ submitting
    def submit(self, call: AdminCall, now_ms: int) -> None:
        """Queue ``call``; it is sent on the next :meth:`poll`."""
        call.next_attempt_ms = now_ms
        self._calls.append(call)

    def pending(self) -> int:
        return len(self._calls)

    def fail_all(self, error: BaseException) -> None:
        """Fail every call not finished yet (the client is closing)."""
        calls, self._calls = self._calls, []
        for call in calls:
            set_exception(call.future, error)

    def forget_coordinator(self, group_id: str) -> None:
        self.coordinators.pop(group_id, None)

    # ------------------------------------------------------------------ polling
    def poll(self, now_ms: int) -> PollResult:
        unsent: list[UnsentRequest] = []
        wait = MAX_POLL_WAIT_MS
        keep: list[AdminCall] = []
        wanted_groups: set[str] = set()
        for call in self._calls:
            if call.future.done():  # cancelled by the caller, or completed
                continue
            if now_ms >= call.deadline_ms:  # even in flight: a late response is ignored
                self._timed_out(call)
                continue
            keep.append(call)
            wait = min(wait, call.deadline_ms - now_ms)
            if call.in_flight:
                continue
            if now_ms < call.next_attempt_ms:
                wait = min(wait, call.next_attempt_ms - now_ms)
                continue
            node = self._resolve(call)
            if node is None:
                assert isinstance(call.target, GroupCoordinator)
                wanted_groups.add(call.target.group_id)
                continue
            unsent.append(self._request(call, node, now_ms))
        self._calls = keep
        for group_id in sorted(wanted_groups):
            lookup = self._lookups.setdefault(group_id, _Lookup())
            if lookup.in_flight:
                continue
            if now_ms < lookup.next_ms:
                wait = min(wait, lookup.next_ms - now_ms)
                continue
            unsent.append(self._find_coordinator(group_id, lookup, now_ms))
        return PollResult(unsent, max(0, wait))

    def _resolve(self, call: AdminCall) -> int | None:
        if isinstance(call.target, GroupCoordinator):
            node = self.coordinators.get(call.target.group_id)
            return None if node is None else node.node_id
        return call.target

    def _request(self, call: AdminCall, node: int, now_ms: int) -> UnsentRequest:
        call.in_flight = True
        call.attempts += 1
        timeout_ms = max(1, min(self._request_timeout, call.deadline_ms - now_ms))

        def on_response(response: Any, version: int, now: int) -> None:
            call.in_flight = False
            if call.future.done():
                return
            try:
                result = call.handle(response, version, node)
            except NoRetry as wrapper:
                set_exception(call.future, wrapper.error)
            except BaseException as exc:  # decided below: retry or fail the call
                self._failed(call, exc, now)
            else:
                _set_result(call.future, result)

        def on_failure(error: BaseException, now: int) -> None:
            call.in_flight = False
            if not call.future.done():
                self._failed(call, error, now)

        return UnsentRequest(
            api_key=call.api_key,
            node=node,
            build=lambda version: call.build(version, timeout_ms),
            on_response=on_response,
            on_failure=on_failure,
            timeout_ms=timeout_ms,
            min_version=call.min_version,
            max_version=call.max_version,
        )

    def _failed(self, call: AdminCall, error: BaseException, now_ms: int) -> None:
        call.last_error = error
        if isinstance(call.target, GroupCoordinator) and (
            isinstance(error, _COORDINATOR_ERRORS) or not isinstance(error, BrokerResponseError)
        ):
            # The coordinator moved, or its connection failed: find it again before retrying.
            self.forget_coordinator(call.target.group_id)
        if not is_retriable(error) or call.attempts > self._max_retries:
            set_exception(call.future, error)
            return
        if not isinstance(error, BrokerResponseError) and self._on_unknown_node is not None:
            self._on_unknown_node()  # a lost connection or an unknown address: refresh the brokers
        if call.reroute and not isinstance(error, BrokerResponseError):
            set_exception(call.future, error)  # the caller finds the (new) leader and tries again
            return
        cap = self._backoff_max if call.backoff_max_ms is None else call.backoff_max_ms
        delay = _backoff(self._backoff_base, cap, call.attempts)
        if now_ms + delay >= call.deadline_ms:
            delay = max(0, call.deadline_ms - now_ms)
        call.next_attempt_ms = now_ms + delay

    def _timed_out(self, call: AdminCall) -> None:
        detail = f"; last error: {call.last_error}" if call.last_error is not None else ""
        error = KafkaTimeoutError(f"{call.name} timed out after {call.attempts} attempt(s){detail}")
        if call.last_error is not None:
            error.__cause__ = call.last_error
        set_exception(call.future, error)

    # ------------------------------------------------------------------ coordinators
    def _find_coordinator(self, group_id: str, lookup: _Lookup, now_ms: int) -> UnsentRequest:
        lookup.in_flight = True

        def build(version: int) -> dict[str, Any]:
            return find_coordinator_body(group_id, version)

        def on_response(response: Any, version: int, now: int) -> None:
            lookup.in_flight = False
            found = parse_find_coordinator(group_id, response, version)
            if isinstance(found, BaseException):
                self._lookup_failed(group_id, lookup, found, now)
                return
            lookup.attempts = 0
            self.coordinators[group_id] = found

        def on_failure(error: BaseException, now: int) -> None:
            lookup.in_flight = False
            self._lookup_failed(group_id, lookup, error, now)

        return UnsentRequest(
            api_key=ApiKey.FIND_COORDINATOR,
            node=ANY_NODE,
            build=build,
            on_response=on_response,
            on_failure=on_failure,
        )

    def _lookup_failed(self, group_id: str, lookup: _Lookup, error: BaseException, now_ms: int) -> None:
        lookup.attempts += 1
        lookup.next_ms = now_ms + _backoff(self._backoff_base, self._backoff_max, lookup.attempts)
        for call in self._calls:
            if call.target == GroupCoordinator(group_id) and not call.future.done():
                call.last_error = error
                if not is_retriable(error):
                    set_exception(call.future, error)


def _backoff(base_ms: int, max_ms: int, attempts: int) -> int:
    return ExponentialBackoff(base_ms, max_ms).after_failures(max(attempts, 1))


def _set_result(future: Future[Any], value: Any) -> None:
    try:
        future.set_result(value)
    except InvalidStateError:  # cancelled by the waiting caller meanwhile
        pass


def set_exception(future: Future[Any], error: BaseException) -> None:
    """Fail ``future`` unless it is done (or was cancelled by its waiter) already."""
    try:
        future.set_exception(error)
    except InvalidStateError:
        pass


def raise_first(errors: Sequence[BaseException]) -> None:
    """Raise the first of per-entity errors, the others attached as notes (nothing when there are none)."""
    if not errors:
        return
    first = errors[0]
    for other in errors[1:]:
        first.add_note(f"also: {other}")
    raise first


# ======================================================================================== operation steps
# An admin operation is written once, as a generator of *steps*: it yields a :class:`RunCalls` (send these
# calls together; the driver sends back each one's result or exception, in order) or a :class:`Pause`
# (wait; the driver sends back ``None``) and returns the operation's result.  The synchronous client drives
# it by blocking (``AdminClient._drive``); the asyncio client by awaiting the calls' futures on its loop.


@dataclass(frozen=True, slots=True)
class RunCalls:
    """A step: send ``calls`` together and wait (until ``deadline_ms``) for each one's outcome."""

    calls: Sequence[AdminCall]
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class Pause:
    """A step: wait ``seconds`` (a retry backoff)."""

    seconds: float


Steps = Generator["RunCalls | Pause", Any, _R]
"""An admin operation: a generator of steps returning its result."""


def call_outcome(future: Any, what: str) -> Any:
    """A done call future's outcome as the drivers hand it to the operation: its result or its exception (a
    cancelled call: a timeout naming ``what``).  ``future``: a ``concurrent.futures`` or asyncio future."""
    if future.cancelled():
        return KafkaTimeoutError(f"{what} was cancelled")
    error = future.exception()
    return error if error is not None else future.result()


@dataclass(frozen=True, slots=True)
class Done(Generic[_R]):
    """What :func:`next_step` gives once the operation returned: its result."""

    value: _R


def next_step(steps: Steps[_R], value: Any, error: BaseException | None) -> RunCalls | Pause | Done[_R]:
    """One turn of a driver (the blocking and the asyncio client's): send the last step's outcome into the
    operation (``value``, or raise ``error`` where it waited); its next step, or :class:`Done`."""
    try:
        return steps.send(value) if error is None else steps.throw(error)
    except StopIteration as stop:
        return Done(stop.value)


def run_calls(calls: Sequence[AdminCall], deadline_ms: int) -> Steps[list[Any]]:
    """``yield from``: each call's result or exception, in order."""
    if not calls:
        return []
    outcomes: list[Any] = yield RunCalls(calls, deadline_ms)
    return outcomes


def run_one(call: AdminCall) -> Steps[Any]:
    """``yield from``: the call's result; raises its error."""
    (outcome,) = yield from run_calls([call], call.deadline_ms)
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def drives_steps(steps: Callable[Concatenate[_S, _P], Steps[_R]]) -> Callable[Concatenate[_S, _P], _R]:
    """Make an admin operation written as steps a blocking method (driven by ``self._drive``); the
    generator function stays available as the method's ``steps`` attribute (the asyncio client drives it
    on its loop)."""

    @functools.wraps(steps)
    def blocking(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        result: _R = self._drive(steps(self, *args, **kwargs))  # type: ignore[attr-defined]
        return result

    blocking.steps = steps  # type: ignore[attr-defined]
    # Documentation tools read the signature: the method returns what its steps produce, not the
    # generator (``Steps[X]`` -> ``X``).
    signature = inspect.signature(steps)
    returned = signature.return_annotation
    if isinstance(returned, str) and returned.startswith("Steps[") and returned.endswith("]"):
        signature = signature.replace(return_annotation=returned[len("Steps[") : -1])
    blocking.__signature__ = signature  # type: ignore[attr-defined]
    return blocking


def steps_of(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], Steps[_R]]:
    """The steps of an admin operation made blocking by :func:`drives_steps` (``AdminClient.list_topics``
    -> its generator function), for a driver of another kind (the asyncio client)."""
    steps: Callable[Concatenate[_S, _P], Steps[_R]] | None = getattr(method, "steps", None)
    if steps is None:
        raise TypeError(f"{method!r} is not an admin operation written as steps")
    return steps
