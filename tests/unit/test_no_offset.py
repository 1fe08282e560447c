"""No committed offset and ``auto.offset.reset=none`` (issue 14 item 11): ``NoOffsetForPartitionError`` is
raised by every ``poll()`` (and ``position()``) until the application seeks, as Java does -- not once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from semantics_harness import ConfiguredHarness
from test_consumer_dispatch import T0, T1

from kafka_handoff.errors import NoOffsetForPartitionError
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.threads  # real clients with their network threads (no broker)


@pytest.fixture
def h() -> Iterator[ConfiguredHarness]:
    harness = ConfiguredHarness({"auto.offset.reset": "none"})
    try:
        yield harness
    finally:
        harness.shutdown()


def no_committed_offset(h: ConfiguredHarness, *parts: TopicPartition) -> None:
    """The committed-offset lookup found nothing for ``parts``: what OffsetsManager leaves behind."""

    def run(now: int) -> None:
        for tp in parts:
            h.consumer._subs.request_reset(tp, "none")

    h.consumer._thread.call_sync(run, 5.0)


def test_every_poll_raises_until_the_application_seeks(h: ConfiguredHarness) -> None:
    h.own(T0, T1)
    no_committed_offset(h, T0)
    for _ in range(3):
        with pytest.raises(NoOffsetForPartitionError) as info:
            h.consumer.poll(0)
        assert info.value.partitions == {T0}
        assert "t-0" in str(info.value)
    with pytest.raises(NoOffsetForPartitionError):
        h.consumer.position(T0, timeout=1.0)
    assert h.consumer.position(T1) == 0  # other partitions are fine
    h.consumer.seek(T0, 5)
    h.consumer.poll(0)
    h.consumer.poll(0)
    assert h.consumer.position(T0) == 5


def test_seek_to_beginning_also_ends_it(h: ConfiguredHarness) -> None:
    h.own(T0)
    no_committed_offset(h, T0)
    with pytest.raises(NoOffsetForPartitionError):
        h.consumer.poll(0)
    h.consumer.seek_to_beginning([T0])
    h.consumer.poll(0)  # the reset to the beginning is under way: no error any more
    h.consumer.poll(0)
