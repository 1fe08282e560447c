"""delay_revoke's deadline (issue 14 item 4): 0.8 x max.poll.interval.ms measured from the membership's
receipt of the revocation (when the network thread took the CallbackNeeded event), not from when the
application thread got round to it -- so a slow application is never fenced while delay_revoke() still
returns True.  Driven with a fake clock shared by the consumer and its network thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from semantics_harness import ConfiguredHarness
from test_consumer_dispatch import REVOKE, T0, T1

from kafka_handoff.group.membership import CallbackNeeded
from kafka_handoff.protocol.requests import FakeClock, MonotonicClock

pytestmark = pytest.mark.threads  # real clients with their network threads (no broker)

MAX_POLL_INTERVAL = 10_000  # the rebalance timeout: the broker fences an unacknowledged revoke after it
SAFETY = int(0.8 * MAX_POLL_INTERVAL)


class FakeClockHarness(ConfiguredHarness):
    def __init__(self) -> None:
        super().__init__({"max.poll.interval.ms": MAX_POLL_INTERVAL})
        self.clock = FakeClock()
        self.consumer._clock = self.clock  # type: ignore[assignment]
        self.consumer._thread.clock = self.clock

    def shutdown(self) -> None:
        real = MonotonicClock()
        self.consumer._clock = real
        self.consumer._thread.clock = real
        super().shutdown()


@pytest.fixture
def h() -> Iterator[FakeClockHarness]:
    harness = FakeClockHarness()
    try:
        yield harness
    finally:
        harness.shutdown()


def test_the_deadline_runs_from_the_receipt_of_the_revocation(h: FakeClockHarness) -> None:
    h.own(T0, T1)
    received = h.clock.now_ms()
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))  # the membership hands it over now
    h.clock.advance(5_000)  # the application is busy with its last batch before it polls again
    assert h.consumer.poll(0).to_be_revoked_partitions == {T0}
    assert h.consumer.delay_revoke([T0]) is True  # 5 s after the receipt
    h.clock.advance(2_999)
    h.consumer.poll(0)
    assert h.consumer.delay_revoke([T0]) is True  # 7.999 s
    h.clock.advance(1)
    h.consumer.poll(0)
    assert h.clock.now_ms() - received == SAFETY
    # 8 s after the receipt, although only 3 s after the application handled the request.
    assert h.consumer.delay_revoke([T0]) is False
    assert h.completed() == []
    h.consumer.poll(0)
    assert h.calls() == [("revoked", frozenset({T0}))]
    assert h.completed() == [(1, None)]


def test_a_slow_poll_loop_that_keeps_delaying_completes_before_the_broker_fences_it(
    h: FakeClockHarness,
) -> None:
    h.own(T0, T1)
    received = h.clock.now_ms()
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    h.clock.advance(5_000)  # first poll long after the receipt
    granted: list[int] = []
    completed_at: int | None = None
    for _ in range(20):
        h.consumer.poll(0)
        if h.completed():
            completed_at = h.clock.now_ms() - received
            break
        # The application always wants more time (its in-flight work is slow).
        if h.consumer.delay_revoke([T0]):
            granted.append(h.clock.now_ms() - received)
        h.clock.advance(1_500)  # one iteration of the slow poll loop
    assert granted and all(t < SAFETY for t in granted), granted
    assert completed_at is not None and completed_at < MAX_POLL_INTERVAL, (
        f"the revoke completed {completed_at} ms after the broker asked for it: the member would have been "
        "fenced"
    )
    assert h.calls() == [("revoked", frozenset({T0}))]


def test_the_receipt_time_is_stamped_by_the_network_thread(h: FakeClockHarness) -> None:
    h.own(T0)
    at = h.clock.now_ms()
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    h.clock.advance(123)
    event = h.consumer._background.get_nowait()
    assert isinstance(event, CallbackNeeded) and event.received_ms == at
    assert event == CallbackNeeded(REVOKE, frozenset({T0}), seq=1)  # not part of the event's identity
