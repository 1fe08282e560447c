"""The sans-I/O contract between request managers and the network client.

A *request manager* (coordinator discovery, heartbeat, commit, fetch, ...) never touches a socket.  The
network thread calls ``poll(now_ms)`` on each manager; the manager answers with the requests it wants sent
(:class:`UnsentRequest`) and how long it can wait before it needs to be polled again.  When a response (or
a failure) arrives, the network client calls the request's ``on_response`` / ``on_failure`` with the
current time.  All times are integer milliseconds from a monotonic clock supplied by the caller, so tests
drive managers with a fake clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kafka_handoff.clock import Clock, FakeClock, MonotonicClock

if TYPE_CHECKING:
    from kafka_handoff.protocol.wire import EncodedBody

__all__ = [
    "ANY_NODE",
    "COORDINATOR",
    "Clock",
    "FakeClock",
    "MonotonicClock",
    "PollResult",
    "RequestManager",
    "UnsentRequest",
]

ANY_NODE = -1
"""Send to the least loaded connected broker (metadata, FindCoordinator, ...)."""

COORDINATOR = -2
"""Send to the group coordinator, whichever broker that currently is."""

MAX_POLL_WAIT_MS = 5000


@dataclass(slots=True)
class UnsentRequest:
    """A request a manager wants sent.

    ``values`` are plain values for :func:`kafka_handoff.protocol.wire.build_request`; the network client
    builds the entity for the version it negotiated with the destination broker, so managers are
    version-independent.  ``build`` may be given instead of ``values`` when the body depends on the
    negotiated version (it receives the version and returns the values).
    """

    api_key: int
    node: int
    values: Mapping[str, Any] | None = None
    on_response: Callable[[Any, int, int], None] | None = None
    """Called as ``on_response(response_entity, api_version, now_ms)``."""
    on_failure: Callable[[BaseException, int], None] | None = None
    """Called as ``on_failure(error, now_ms)`` on disconnect, timeout or an unsendable request."""
    build: Callable[[int], Mapping[str, Any]] | None = None
    timeout_ms: int | None = None
    """Request timeout; ``None`` means the client's ``request.timeout.ms``."""
    min_version: int = 0
    max_version: int | None = None
    expect_response: bool = True
    created_ms: int = 0
    encode: Callable[[int], EncodedBody] | None = None
    """A hot-path shortcut: the body already encoded for a version (the network client uses it instead of
    :meth:`body`, which must describe the same request; the producer's Produce requests)."""
    ignorable: frozenset[str] = frozenset()
    """Fields an older version may lack that are dropped for it even with a non-default value (Java's
    "ignorable" fields); any other such field raises ``UnsupportedVersionError`` (see ``build_request``)."""

    def body(self, version: int) -> Mapping[str, Any]:
        if self.build is not None:
            return self.build(version)
        assert self.values is not None, "UnsentRequest needs values or build"
        return self.values


@dataclass(slots=True)
class PollResult:
    unsent: list[UnsentRequest] = field(default_factory=list)
    wait_ms: int = MAX_POLL_WAIT_MS
    """How long the manager can wait before it must be polled again."""

    @staticmethod
    def idle(wait_ms: int = MAX_POLL_WAIT_MS) -> PollResult:
        return PollResult([], wait_ms)


class RequestManager(Protocol):
    def poll(self, now_ms: int) -> PollResult: ...
