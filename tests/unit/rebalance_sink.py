"""A rebalance-metrics sink for the membership tests: records each call with its time."""

from __future__ import annotations


class RecordingSink:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def rebalance_started(self, now_ms: int) -> None:
        self.calls.append(("started", now_ms))

    def rebalance_completed(self, now_ms: int) -> None:
        self.calls.append(("completed", now_ms))

    def rebalance_failed(self, now_ms: int) -> None:
        self.calls.append(("failed", now_ms))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]
