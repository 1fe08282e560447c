"""The clocks: the one real clock the I/O shell reads and hands to the sans-I/O cores, and the fake one tests
drive them with.

The cores (``protocol/``, ``group/``, the request managers) never read a clock themselves: they take
``now_ms`` in every call, and a core that also needs epoch time (a ``by_duration`` offset reset, a telemetry
timestamp) is given the clock's ``wall_ms``/``wall_ns`` when it is built.  The facades build one
:class:`MonotonicClock` and pass it on.  No dependencies: any layer may import this module
(``protocol.requests`` re-exports the names for older imports).
"""

from __future__ import annotations

from time import monotonic_ns, time_ns
from typing import Protocol

__all__ = ["Clock", "FakeClock", "MonotonicClock", "WallClock"]


class Clock(Protocol):
    """Monotonic milliseconds, for deadlines and timers."""

    def now_ms(self) -> int: ...


class WallClock(Clock, Protocol):
    """A :class:`Clock` that also tells epoch time, for timestamps sent to brokers."""

    def wall_ms(self) -> int: ...

    def wall_ns(self) -> int: ...


class MonotonicClock:
    """The real clock: ``now_ms`` is monotonic (for deadlines and timers), ``wall_ms``/``wall_ns`` are epoch
    time (for timestamps sent to brokers, such as a ``by_duration`` offset reset or a telemetry push)."""

    __slots__ = ()

    def now_ms(self) -> int:
        return monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        return time_ns() // 1_000_000

    def wall_ns(self) -> int:
        return time_ns()


class FakeClock:
    """A clock for sans-I/O tests: time moves only when the test says so (wall time with it)."""

    def __init__(self, start_ms: int = 1_000_000, wall_start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._wall_offset = wall_start_ms - start_ms

    def now_ms(self) -> int:
        return self._now

    def wall_ms(self) -> int:
        """Wall-clock (epoch) milliseconds; moves with :meth:`advance`."""
        return self._now + self._wall_offset

    def wall_ns(self) -> int:
        return self.wall_ms() * 1_000_000

    def advance(self, ms: int) -> int:
        self._now += ms
        return self._now
