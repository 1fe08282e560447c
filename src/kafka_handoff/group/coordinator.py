"""Group coordinator discovery (FindCoordinator), sans-I/O.

The manager finds the coordinator when someone needs it, rediscovers it after ``mark_unknown`` (on
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a disconnect), backs off between failed attempts and
reports every change to its listeners (the network client routes ``COORDINATOR`` requests with it).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from kafka_handoff.errors import CoordinatorNotAvailableError, error_for_code
from kafka_handoff.protocol.requests import ANY_NODE, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import BrokerNode

__all__ = ["CoordinatorManager"]


class CoordinatorManager:
    def __init__(
        self, group_id: str, *, retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000
    ) -> None:
        self.group_id = group_id
        self.coordinator: BrokerNode | None = None
        self._backoff_base = retry_backoff_ms
        self._backoff_max = retry_backoff_max_ms
        self._in_flight = False
        self._attempts = 0
        self._next_ms = 0
        self.wanted = False
        self.listeners: list[Callable[[BrokerNode | None, int], None]] = []
        self.last_error: BaseException | None = None

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
            if version >= 4:
                return {"key_type": 0, "coordinator_keys": [self.group_id]}
            return {"key": self.group_id, "key_type": 0}

        def on_response(response: Any, version: int, now: int) -> None:
            self._in_flight = False
            if version >= 4:
                entries = [c for c in response.coordinators if c.key == self.group_id] or list(
                    response.coordinators
                )
                if not entries:
                    error = CoordinatorNotAvailableError("FindCoordinator response names no coordinator")
                    self._fail(error, now)
                    return
                c = entries[0]
                code, node_id, host, port = int(c.error_code), int(c.node_id), c.host, int(c.port)
                message = c.error_message
            else:
                code, node_id, host, port = (
                    int(response.error_code),
                    int(response.node_id),
                    response.host,
                    int(response.port),
                )
                message = getattr(response, "error_message", None)
            if code != 0:
                self._fail(error_for_code(code, message), now)
                return
            self._attempts = 0
            self.coordinator = BrokerNode(node_id, host, port)
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
        self._attempts += 1
        delay = min(self._backoff_max, self._backoff_base * 2 ** min(self._attempts - 1, 10))
        self._next_ms = now_ms + int(delay * random.uniform(0.8, 1.2))
