"""Auto-commit is at-least-once (issue 14 item 1): the timer commits only offsets of records returned by
*earlier* ``poll()`` calls -- the positions as they stood at the start of the current ``poll()`` -- never
those of the batch the application may still be processing (Java's contract, KAFKA-18641).

The sans-I/O part drives a real :class:`SubscriptionState`, :class:`Collector` and :class:`CommitManager`
with a fake clock; the consumer part checks that ``poll()`` itself takes the snapshot at its start.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from concurrent.futures import Future

import pytest
from semantics_harness import ConfiguredHarness
from test_collector import batch
from test_commit_manager import Harness as CommitHarness
from test_commit_manager import commit_response, committed_offsets, respond

from kafka_handoff.consumer.collector import Collector
from kafka_handoff.consumer.fetcher import CompletedFetch, FetchBuffer
from kafka_handoff.types import OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.threads  # real clients with their network threads (no broker)

A0 = TopicPartition("a", 0)
INTERVAL = 5000  # test_commit_manager's auto.commit.interval.ms


class Pipeline:
    """The application-thread half of poll() (snapshot, then collect) and the network thread's commit
    manager, sharing one SubscriptionState."""

    def __init__(self) -> None:
        self.h = CommitHarness(auto_commit=True)
        self.h.coordinator.wanted = True
        self.h.find_coordinator()
        self.subs = self.h.subs
        self.subs.assign_from_user([A0])
        self.subs.seek(A0, 0)
        self.buffer = FetchBuffer()
        self.collector = Collector(
            self.subs, self.buffer, max_poll_records=200, check_crcs=True, read_committed=False
        )
        self.h.requests()  # arms the timer
        self.committed: list[int] = []

    def poll(self, first: int, count: int) -> list[int]:
        """One poll(): start-of-poll snapshot, then a batch of ``count`` records from ``first``."""
        self.subs.mark_poll_start()
        epoch = self.subs.state(A0).position_epoch
        self.buffer.add([CompletedFetch(A0, first, epoch, batch(first, count))])
        return [r.offset for r in self.collector.collect()[A0]]

    def run_timer(self, times: int = 3) -> None:
        """The application processes its batch while the auto-commit timer fires ``times`` times."""
        for _ in range(times):
            self.h.clock.advance(INTERVAL)
            for req in self.h.requests():
                offsets = committed_offsets(req)
                self.committed.append(offsets[A0])
                respond(req, commit_response({A0: 0}), 9, self.h.clock.now_ms())


def test_the_timer_never_commits_the_batch_in_hand() -> None:
    p = Pipeline()
    got = p.poll(0, 200)
    assert got == list(range(200))
    assert p.subs.position(A0).offset == 200  # type: ignore[union-attr]
    p.run_timer()  # processing batch 0-199 (the first poll): nothing of it may be committed
    assert p.committed == [0]
    assert all(c <= 0 for c in p.committed)

    got = p.poll(200, 200)  # the application polls again: batch 0-199 is processed
    assert got == list(range(200, 400))
    p.run_timer()  # processing 200-399: only 0-199 may be committed
    assert p.committed == [0, 200]

    p.subs.mark_poll_start()  # a third poll (returns nothing) acknowledges 200-399
    p.run_timer()
    assert p.committed == [0, 200, 400]


def test_seeking_back_lowers_what_the_timer_may_commit() -> None:
    p = Pipeline()
    p.poll(0, 200)
    p.poll(200, 200)  # 0-199 processed, 200-399 in hand
    p.subs.seek(A0, 150)  # the application re-reads from 150: not processed from there
    p.run_timer()
    assert p.committed == [150]
    p.subs.seek(A0, 300)  # seeking forward does not commit the skipped records before the next poll()
    p.run_timer()
    assert p.committed == [150]


def test_a_reset_forgets_the_snapshot_until_the_next_poll() -> None:
    p = Pipeline()
    p.poll(0, 200)
    p.subs.request_reset(A0, "earliest")
    p.run_timer()
    assert p.committed == []


# ------------------------------------------------------------------------------------------ the consumer
@pytest.fixture
def ah() -> Iterator[ConfiguredHarness]:
    harness = ConfiguredHarness({"enable.auto.commit": True, "max.poll.records": 200})
    try:
        yield harness
    finally:
        harness.shutdown()


def test_poll_snapshots_the_positions_at_its_start(ah: ConfiguredHarness) -> None:
    c = ah.consumer
    assert c._commits is not None
    ah.own(A0)  # position 0
    ah.fetched(A0, 0, 200)
    assert [r.offset for r in c.poll(1.0)] == list(range(200))
    assert c._subs.position(A0) is not None and c.position(A0) == 200
    # The batch 0-199 is in the application's hands: the timer may commit only what preceded it.
    assert c._commits.auto_commit_offsets() == {A0: OffsetAndMetadata(0)}

    ah.fetched(A0, 200, 200)
    assert [r.offset for r in c.poll(1.0)] == list(range(200, 400))
    assert c._commits.auto_commit_offsets() == {A0: OffsetAndMetadata(200)}

    c.poll(0)
    assert c._commits.auto_commit_offsets() == {A0: OffsetAndMetadata(400)}


def test_commit_sync_without_offsets_still_commits_everything_returned(ah: ConfiguredHarness) -> None:
    """An explicit commit_sync() (and the final commits on close/revoke) commit the consumed positions,
    i.e. everything handed out, as Java does -- only the timer is held back."""
    c = ah.consumer
    ah.own(A0)
    ah.fetched(A0, 0, 200)
    c.poll(1.0)
    sent: list[dict[TopicPartition, OffsetAndMetadata]] = []
    assert c._commits is not None
    original = c._commits.commit

    def capture(
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        future: Future[None],
        deadline_ms: int,
        *,
        retry: bool = True,
        now_ms: int = 0,
        only_owned: bool = False,
    ) -> None:
        sent.append(dict(offsets))
        future.set_result(None)

    c._commits.commit = capture  # type: ignore[method-assign]
    try:
        c.commit_sync(timeout=1.0)
    finally:
        c._commits.commit = original  # type: ignore[method-assign]
    assert sent == [{A0: OffsetAndMetadata(200)}]
