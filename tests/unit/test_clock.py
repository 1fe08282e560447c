"""The one clock module: the real and the fake clock, and the rule that the sans-I/O cores never read one."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import kafka_handoff
from kafka_handoff import clock
from kafka_handoff.consumer.offsets import OffsetsManager
from kafka_handoff.protocol import requests
from kafka_handoff.protocol.telemetry import TelemetryManager

pytestmark = pytest.mark.unit

SRC = Path(kafka_handoff.__file__).parent
# the sans-I/O cores: they take now_ms (and are given the clock's wall time), they never read a clock
_CONSUMER_CORES = ("offsets.py", "fetcher.py", "fetch_session.py", "validation.py", "subscription.py",
                   "dispatch.py", "revoke.py")  # fmt: skip
_PRODUCER_CORES = ("sender.py", "idempotence.py", "transactions.py")
CORES = [
    *sorted((SRC / "protocol").glob("*.py")),
    *sorted((SRC / "group").rglob("*.py")),
    *(SRC / "consumer" / name for name in _CONSUMER_CORES),
    *(SRC / "producer" / name for name in _PRODUCER_CORES),
]
_READS_A_CLOCK = re.compile(
    r"^\s*(import time\s*$|from time import)|\btime\.(time|monotonic|perf_counter)", re.MULTILINE
)


def test_protocol_reexports_the_clock_module() -> None:
    assert requests.MonotonicClock is clock.MonotonicClock
    assert requests.FakeClock is clock.FakeClock
    assert requests.Clock is clock.Clock


def test_monotonic_clock() -> None:
    real = clock.MonotonicClock()
    first = real.now_ms()
    assert real.now_ms() >= first
    wall_ns = real.wall_ns()
    assert abs(real.wall_ms() - wall_ns // 1_000_000) < 60_000
    assert wall_ns > 1_600_000_000_000 * 1_000_000  # epoch time, not monotonic


def test_fake_clock_moves_wall_time_with_it() -> None:
    fake = clock.FakeClock(start_ms=5, wall_start_ms=1_000)
    assert (fake.now_ms(), fake.wall_ms(), fake.wall_ns()) == (5, 1_000, 1_000_000_000)
    assert fake.advance(10) == 15
    assert (fake.now_ms(), fake.wall_ms(), fake.wall_ns()) == (15, 1_010, 1_010_000_000)


@pytest.mark.parametrize(
    ("cls", "param"), [(OffsetsManager, "wall_clock_ms"), (TelemetryManager, "now_unix_nanos")]
)
def test_cores_that_need_wall_time_are_given_it(cls: type, param: str) -> None:
    """No fallback to the real clock inside a core: the facade injects its clock's wall time."""
    assert inspect.signature(cls).parameters[param].default is inspect.Parameter.empty


def test_sans_io_cores_never_read_a_clock() -> None:
    existing = [path for path in CORES if path.exists()]
    assert len(existing) > 20
    offenders = [str(path.relative_to(SRC)) for path in existing if _READS_A_CLOCK.search(path.read_text())]
    assert offenders == []
