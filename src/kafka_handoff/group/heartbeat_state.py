"""Heartbeat bookkeeping for the KIP-848 membership (sans-I/O): timing, backoff, "send only what changed".

* :class:`ExponentialBackoff` -- ``retry.backoff.ms`` doubled per consecutive failure up to
  ``retry.backoff.max.ms``, with +/-20 % jitter drawn from an injectable source.
* :class:`HeartbeatTimer` -- when the next heartbeat is due (broker-given interval), backoff after
  failures (the core's :class:`~kafka_handoff.group.membership_core.RetryBackoff`).  All times are
  caller-supplied milliseconds.
* :class:`HeartbeatFields` -- remembers what the last heartbeat carried so the next one sends only the
  fields that changed; :meth:`HeartbeatFields.reset` after any failure makes the next request full.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_handoff.group.membership_core import RetryBackoff
from kafka_handoff.protocol.backoff import ExponentialBackoff

__all__ = [
    "NO_ASSIGNMENT",
    "ExponentialBackoff",
    "HeartbeatFields",
    "HeartbeatTimer",
    "LocalAssignment",
]


@dataclass(frozen=True, slots=True)
class LocalAssignment:
    """An assignment by topic id plus a *local epoch* bumped on every change.

    Two assignments with equal partitions but different local epochs are different: that is how a
    member knows it still has to acknowledge (re-send its owned partitions) after a reconciliation.
    """

    local_epoch: int
    partitions: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)

    @property
    def is_none(self) -> bool:
        return self.local_epoch < 0

    def updated_with(self, partitions: Mapping[uuid.UUID, frozenset[int]]) -> LocalAssignment:
        """``self`` if ``partitions`` is what it holds already, else a new assignment, next local epoch."""
        if not self.is_none and dict(self.partitions) == dict(partitions):
            return self
        return LocalAssignment(self.local_epoch + 1, dict(partitions))

    def wire(self) -> list[dict[str, Any]]:
        """The ``topic_partitions`` value of a heartbeat request (sorted, for stable requests)."""
        return [
            {"topic_id": tid, "partitions": sorted(parts)}
            for tid, parts in sorted(self.partitions.items(), key=lambda item: str(item[0]))
        ]


NO_ASSIGNMENT = LocalAssignment(-1)
"""Not in a group, or nothing reconciled yet (Java's ``LocalAssignment.NONE``)."""


class HeartbeatTimer:
    """Interval timer plus failure backoff (the core's :class:`RetryBackoff`) for one heartbeat stream."""

    def __init__(self, backoff: ExponentialBackoff, interval_ms: int) -> None:
        self.retry = RetryBackoff(backoff)
        self.interval_ms = interval_ms
        self.next_due_ms = 0

    @property
    def backoff(self) -> ExponentialBackoff:
        return self.retry.backoff

    @property
    def failures(self) -> int:
        return self.retry.failures

    def on_sent(self, now_ms: int) -> None:
        self.next_due_ms = now_ms + self.interval_ms

    def on_success(self, now_ms: int, interval_ms: int | None) -> None:
        self.retry.reset()
        if interval_ms is not None and interval_ms > 0 and interval_ms != self.interval_ms:
            self.interval_ms = interval_ms
            self.next_due_ms = now_ms + interval_ms

    def on_failure(self, now_ms: int, *, backoff: bool) -> None:
        """A failed heartbeat: the next one is due at once, after a backoff when ``backoff``."""
        self.next_due_ms = now_ms
        if backoff:
            self.retry.failed(now_ms)
        else:
            self.retry.reset()

    def backoff_remaining(self, now_ms: int) -> int:
        return self.retry.remaining_ms(now_ms)

    def interval_remaining(self, now_ms: int) -> int:
        return max(0, self.next_due_ms - now_ms)


class _Unset(enum.Enum):
    UNSET = 0


_UNSET = _Unset.UNSET


class HeartbeatFields:
    """What the last heartbeat carried; builds the optional fields of the next one.

    ``send_all`` (JOINING) sends everything.  Otherwise a field is sent only when its value differs from
    the last one sent.  After :meth:`reset` nothing counts as sent, so the next request is full.
    """

    def __init__(self) -> None:
        self._rebalance_timeout: int | _Unset = _UNSET
        self._rack: str | _Unset | None = _UNSET
        self._names: tuple[str, ...] | _Unset = _UNSET
        self._regex: str | _Unset | None = _UNSET
        self._assignor: str | _Unset | None = _UNSET
        self._assignment: LocalAssignment | _Unset = _UNSET
        self.regex_used = False
        """A regex was sent since the last join: a full request for a names subscription removes it ("")."""

    def reset(self) -> None:
        self._rebalance_timeout = _UNSET
        self._rack = _UNSET
        self._names = _UNSET
        self._regex = _UNSET
        self._assignor = _UNSET
        self._assignment = _UNSET

    def forget_regex(self) -> None:
        """A fresh join: the broker knows no regex of ours."""
        self.regex_used = False

    def assignment_unsent(self, assignment: LocalAssignment) -> bool:
        """True when ``assignment`` (incl. its local epoch) has not been sent yet: an ack is pending."""
        return self._assignment is _UNSET or self._assignment != assignment

    def build(
        self,
        *,
        send_all: bool,
        rebalance_timeout_ms: int,
        rack_id: str | None,
        topic_names: frozenset[str],
        regex: str | None,
        server_assignor: str | None,
        assignment: LocalAssignment,
    ) -> dict[str, Any]:
        values: dict[str, Any] = {}

        if send_all or self._rebalance_timeout != rebalance_timeout_ms:
            values["rebalance_timeout"] = rebalance_timeout_ms
            self._rebalance_timeout = rebalance_timeout_ms
        else:
            values["rebalance_timeout"] = -1

        values["rack_id"] = None
        if rack_id is not None and (send_all or self._rack != rack_id):
            values["rack_id"] = rack_id
            self._rack = rack_id

        names = tuple(sorted(topic_names))
        values["subscribed_topic_names"] = None
        if send_all or self._names != names:
            values["subscribed_topic_names"] = list(names)
            self._names = names

        values["subscribed_topic_regex"] = None
        if regex is not None:
            if send_all or self._regex != regex:
                values["subscribed_topic_regex"] = regex
                self._regex = regex
                self.regex_used = True
        elif self.regex_used and ((isinstance(self._regex, str) and self._regex) or self._regex is _UNSET):
            # Switched from a pattern to names (or unsure after a failure): "" removes the pattern.
            values["subscribed_topic_regex"] = ""
            self._regex = ""

        values["server_assignor"] = None
        if server_assignor is not None and (send_all or self._assignor != server_assignor):
            values["server_assignor"] = server_assignor
            self._assignor = server_assignor

        values["topic_partitions"] = None
        if send_all or self.assignment_unsent(assignment):
            values["topic_partitions"] = assignment.wire()
            self._assignment = assignment
        return values
