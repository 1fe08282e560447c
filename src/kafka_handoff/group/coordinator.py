"""Group coordinator discovery (FindCoordinator), sans-I/O.

The manager finds the coordinator when someone needs it, rediscovers it after ``mark_unknown`` (on
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a disconnect or a timed-out request), backs off between
attempts and reports every change to its listeners (the network client routes ``COORDINATOR`` requests
with it).  Marks carry the discovery epoch they are about, so a stale one is a no-op.
A refusal the application must know (GROUP_AUTHORIZATION_FAILED: no DESCRIBE on the group) goes to
``on_error`` on every failed attempt -- the consumer raises it from its next call, as Java's does -- while
the lookup keeps retrying with backoff (the ACL may be granted later).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.errors import (
    CoordinatorNotAvailableError,
    GroupAuthorizationFailedError,
    Needs,
    error_for_code,
)
from kafka_handoff.group.membership import CoordinatorNeeded
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.requests import ANY_NODE, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import BrokerNode

__all__ = [
    "COORDINATOR_UNKNOWN_WARN_MS",
    "CoordinatorManager",
    "find_coordinator_body",
    "parse_find_coordinator",
]

log = logging.getLogger(__name__)

COORDINATOR_UNKNOWN_WARN_MS = 30_000
"""A coordinator unknown for this long is logged as a warning (a stall), once per outage."""
_SHORT_LIVED_MS = 10_000
"""A coordinator marked unknown sooner than this after it was found did not end the outage."""


def find_coordinator_body(group_id: str, version: int) -> dict[str, Any]:
    """A FindCoordinator request body for a group (batched keys from v4)."""
    if version >= 4:
        return {"key_type": 0, "coordinator_keys": [group_id]}
    return {"key": group_id, "key_type": 0}


def parse_find_coordinator(
    group_id: str, response: Any, version: int, *, key_type: int = 0
) -> BrokerNode | BaseException:
    """The coordinator a FindCoordinator response names for ``group_id`` (a transactional.id with
    ``key_type=1``), or the error it reports (a refusal names the DESCRIBE it needed)."""
    if version >= 4:
        entries = [c for c in response.coordinators if c.key == group_id] or list(response.coordinators)
        if not entries:
            return CoordinatorNotAvailableError(
                f"FindCoordinator named no coordinator for group {group_id!r}"
            )
        c = entries[0]
        code, node_id, host, port, message = (
            int(c.error_code),
            int(c.node_id),
            c.host,
            int(c.port),
            c.error_message,
        )
    else:
        code, node_id, host, port = (
            int(response.error_code),
            int(response.node_id),
            response.host,
            int(response.port),
        )
        message = getattr(response, "error_message", None)
    if code != ErrorCode.none:
        if key_type == 1:
            needs = Needs("FindCoordinator", transactional_id=("DESCRIBE", group_id))
        else:
            needs = Needs("FindCoordinator", group=("DESCRIBE", group_id))
        return error_for_code(code, message, needs=needs)
    return BrokerNode(node_id, str(host), port)


class CoordinatorManager:
    """Finds the group coordinator and keeps track of which one is current.

    Every coordinator found gets a new :attr:`epoch` (a discovery generation).  A "coordinator unknown"
    mark names the coordinator it is about -- its ``epoch`` (what a request captured when it was sent) or
    its ``node_id`` (a lost connection) -- and is ignored when a newer coordinator was found meanwhile: a
    stale mark (a failed request to the old coordinator, a membership event drained after the new one
    was found) can never invalidate a fresh coordinator.

    FindCoordinator requests are paced as Java's ``CoordinatorRequestManager`` paces them: at most one in
    flight, and the next one not before ``retry.backoff.ms`` after the last answer, exponentially more (up
    to ``retry.backoff.max.ms``) after consecutive failures.  So a dead node that FindCoordinator keeps
    naming until the controller fences it costs a few requests a second, never a busy loop.
    """

    def __init__(
        self,
        group_id: str,
        *,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.group_id = group_id
        self.coordinator: BrokerNode | None = None
        self.epoch = 0
        """Discovery generation: incremented each time a coordinator is found."""
        self._backoff_base = retry_backoff_ms
        self._backoff_max = retry_backoff_max_ms
        self._backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self._in_flight = False
        self._attempts = 0
        self._next_ms = 0
        self._unknown_since_ms: int | None = None
        """Start of the current outage (no usable coordinator); kept across coordinators that were marked
        unknown again soon after being found (e.g. a dead node FindCoordinator still names)."""
        self._found_ms: int | None = None
        self._last_found_node: int | None = None
        self._last_reason = ""
        self._warned_unknown = False
        self.wanted = False
        self.listeners: list[Callable[[BrokerNode | None, int], None]] = []
        self.last_error: BaseException | None = None
        self.requests_sent = 0
        """FindCoordinator requests built so far (a counter for tests and metrics)."""
        self._on_error = on_error

    def mark_unknown(
        self,
        now_ms: int,
        reason: str = "",
        *,
        epoch: int | None = None,
        node_id: int | None = None,
    ) -> bool:
        """Forget the coordinator if it is the one the mark is about; True when it was forgotten.

        ``epoch``: the :attr:`epoch` the caller saw when it sent the request that failed; ``node_id``: the
        node whose connection was lost.  ``None`` for both marks whatever coordinator is current (only
        for callers that cannot know; every request path passes its epoch).
        """
        current = self.coordinator
        if current is None:
            return False
        if epoch is not None and epoch != self.epoch:
            log.debug(
                "group %s: ignoring a stale coordinator-unknown mark for discovery %d (%s); current is "
                "node %d (discovery %d)",
                self.group_id,
                epoch,
                reason,
                current.node_id,
                self.epoch,
            )
            return False
        if node_id is not None and node_id != current.node_id:
            return False
        self.coordinator = None
        self._last_reason = reason
        found = self._found_ms
        new_outage = self._unknown_since_ms is None or found is None or now_ms - found >= _SHORT_LIVED_MS
        if new_outage:
            # The coordinator served for a while: a new outage starts.  (One marked unknown soon after it
            # was found -- a dead node FindCoordinator still names -- continues the current outage.)
            self._unknown_since_ms = now_ms
            self._warned_unknown = False
        log.log(
            logging.INFO if new_outage else logging.DEBUG,
            "group %s: coordinator node %d is unavailable or invalid (%s); rediscovering",
            self.group_id,
            current.node_id,
            reason or "marked unknown",
        )
        for listener in self.listeners:
            listener(None, now_ms)
        return True

    def on_coordinator_needed(self, event: CoordinatorNeeded, now_ms: int) -> None:
        """Apply a membership's :class:`CoordinatorNeeded`: mark the coordinator it names unknown (a no-op
        if a newer one was found since), then discover one or re-announce the current one."""
        if event.epoch is not None:
            self.mark_unknown(now_ms, event.reason, epoch=event.epoch)
        self.refresh(now_ms)

    def refresh(self, now_ms: int) -> None:
        """Someone needs the coordinator: discover it, or tell the listeners again which one is current."""
        self.wanted = True
        if self.coordinator is not None:
            for listener in self.listeners:
                listener(self.coordinator, now_ms)

    def poll(self, now_ms: int) -> PollResult:
        if self.coordinator is not None or not self.wanted or self._in_flight:
            return PollResult.idle()
        if now_ms < self._next_ms:
            return PollResult.idle(self._next_ms - now_ms)
        self._maybe_warn(now_ms)
        self._in_flight = True
        self.requests_sent += 1

        def build(version: int) -> dict[str, Any]:
            return find_coordinator_body(self.group_id, version)

        def on_response(response: Any, version: int, now: int) -> None:
            self._in_flight = False
            found = parse_find_coordinator(self.group_id, response, version)
            if isinstance(found, BaseException):
                self._fail(found, now)
                return
            # As Java: even after a success the next FindCoordinator waits retry.backoff.ms.
            self._attempts = 0
            self._next_ms = now + self._backoff.after_failures(1)
            self.coordinator = found
            self.epoch += 1
            self._found_ms = now
            changed = found.node_id != self._last_found_node
            self._last_found_node = found.node_id
            if self._unknown_since_ms is not None:
                log.log(
                    logging.INFO if changed else logging.DEBUG,
                    "group %s: discovered coordinator node %d (%s:%d) after %d ms",
                    self.group_id,
                    found.node_id,
                    found.host,
                    found.port,
                    now - self._unknown_since_ms,
                )
            for listener in self.listeners:
                listener(self.coordinator, now)

        def on_failure(error: BaseException, now: int) -> None:
            self._in_flight = False
            self._fail(error, now)

        return PollResult(
            [
                UnsentRequest(
                    api_key=ApiKey.FIND_COORDINATOR,
                    node=ANY_NODE,
                    build=build,
                    on_response=on_response,
                    on_failure=on_failure,
                )
            ],
            self._backoff_base,
        )

    def _maybe_warn(self, now_ms: int) -> None:
        since = self._unknown_since_ms
        if since is None:
            self._unknown_since_ms = now_ms
            return
        if not self._warned_unknown and now_ms - since >= COORDINATOR_UNKNOWN_WARN_MS:
            self._warned_unknown = True
            log.warning(
                "group %s: no usable group coordinator for %d ms (last: %s); still rediscovering",
                self.group_id,
                now_ms - since,
                self.last_error or self._last_reason or "never found",
            )

    def _fail(self, error: BaseException, now_ms: int) -> None:
        self.last_error = error
        if self._on_error is not None and isinstance(error, GroupAuthorizationFailedError):
            self._on_error(error)
        self._attempts += 1
        self._next_ms = now_ms + self._backoff.after_failures(self._attempts)
