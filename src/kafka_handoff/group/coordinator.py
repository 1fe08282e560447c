"""Group coordinator discovery (FindCoordinator), sans-I/O.

The manager finds the coordinator when someone needs it, rediscovers it after ``mark_unknown`` (on
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a disconnect), backs off between failed attempts and
reports every change to its listeners (the network client routes ``COORDINATOR`` requests with it).
A refusal the application must know (GROUP_AUTHORIZATION_FAILED: no DESCRIBE on the group) goes to
``on_error`` on every failed attempt -- the consumer raises it from its next call, as Java's does -- while
the lookup keeps retrying with backoff (the ACL may be granted later).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka_handoff.errors import (
    CoordinatorNotAvailableError,
    GroupAuthorizationFailedError,
    error_for_code,
)
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.requests import ANY_NODE, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import BrokerNode

__all__ = ["CoordinatorManager", "find_coordinator_body", "parse_find_coordinator"]


def find_coordinator_body(group_id: str, version: int) -> dict[str, Any]:
    """A FindCoordinator request body for a group (batched keys from v4)."""
    if version >= 4:
        return {"key_type": 0, "coordinator_keys": [group_id]}
    return {"key": group_id, "key_type": 0}


def parse_find_coordinator(group_id: str, response: Any, version: int) -> BrokerNode | BaseException:
    """The coordinator a FindCoordinator response names for ``group_id``, or the error it reports."""
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
    if code != 0:
        error = error_for_code(code, message)
        if isinstance(error, GroupAuthorizationFailedError):
            detail = f": {message}" if message else ""
            return GroupAuthorizationFailedError(
                f"not authorized to use group {group_id!r} (FindCoordinator){detail}"
            )
        return error
    return BrokerNode(node_id, str(host), port)


class CoordinatorManager:
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
        self._backoff_base = retry_backoff_ms
        self._backoff_max = retry_backoff_max_ms
        self._backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self._in_flight = False
        self._attempts = 0
        self._next_ms = 0
        self.wanted = False
        self.listeners: list[Callable[[BrokerNode | None, int], None]] = []
        self.last_error: BaseException | None = None
        self._on_error = on_error

    def mark_unknown(self, now_ms: int, reason: str = "") -> None:
        if self.coordinator is not None:
            self.coordinator = None
            for listener in self.listeners:
                listener(None, now_ms)

    def poll(self, now_ms: int) -> PollResult:
        if self.coordinator is not None or not self.wanted or self._in_flight:
            return PollResult.idle()
        if now_ms < self._next_ms:
            return PollResult.idle(self._next_ms - now_ms)
        self._in_flight = True

        def build(version: int) -> dict[str, Any]:
            return find_coordinator_body(self.group_id, version)

        def on_response(response: Any, version: int, now: int) -> None:
            self._in_flight = False
            found = parse_find_coordinator(self.group_id, response, version)
            if isinstance(found, BaseException):
                self._fail(found, now)
                return
            self._attempts = 0
            self.coordinator = found
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

    def _fail(self, error: BaseException, now_ms: int) -> None:
        self.last_error = error
        if self._on_error is not None and isinstance(error, GroupAuthorizationFailedError):
            self._on_error(error)
        self._attempts += 1
        self._next_ms = now_ms + self._backoff.after_failures(self._attempts)
