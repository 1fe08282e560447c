"""Asynchronous processing without duplicates: the worked example of KIP-983 delayed revocation.

A poll loop hands records to a thread pool and never waits for processing.  Per partition, offsets are
committed in order as processing completes (:class:`OffsetTracker`, which kafka-handoff ships in
``kafka_handoff.consumer.offset_tracker``: the benchmark measures the same code).  When a revoke is requested
(``records.to_be_revoked_partitions``), the loop stops starting records of those partitions and calls
``consumer.delay_revoke`` on every poll while their in-flight records (and an optional per-partition
finish step, e.g. a flush) are still running; once they are done it lets the revoke complete, and
``on_partitions_revoked`` commits the final offsets through the restricted consumer view.  Lost
partitions' work is abandoned: unstarted records are cancelled, results that finish later are discarded,
nothing is committed for them again.  Records of every other partition keep flowing at full speed
meanwhile.

For comparison, ``revocation="block"`` runs the *usual pattern* (what confluent-kafka users do): the loop
ignores ``to_be_revoked_partitions`` and ``on_partitions_revoked`` blocks until the partitions' in-flight
records are done, then commits.  ``docs/async-processing.md`` explains both and has the measurements.

Use it as a library (``tests/integration/test_async_processing.py`` drives it) or run one member::

    python examples/async_processing.py --bootstrap 127.0.0.1:9092 --topic orders --group orders-app \\
        --protocol consumer --workers 8 --work-ms 20 --produce 20000

Start the same command in more terminals (without ``--produce``) to watch partitions move between members
while every member keeps processing; Ctrl-C makes a member drain its in-flight work, commit and leave.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any, Literal

from kafka_handoff import Consumer
from kafka_handoff.consumer.listener import RebalanceConsumer, RebalanceListenerBase
from kafka_handoff.consumer.offset_tracker import OffsetTracker
from kafka_handoff.consumer.records import ConsumerRecords
from kafka_handoff.errors import KafkaError
from kafka_handoff.types import ConsumerRecord, OffsetAndMetadata, TopicPartition

__all__ = [
    "AsyncProcessor",
    "EventKind",
    "OffsetTracker",
    "PartitionWork",
    "ProcessorStats",
    "RevocationMode",
    "SimulatedWork",
    "member_config",
]

log = logging.getLogger("async_processing")

RevocationMode = Literal["delay", "block"]
"""``"delay"``: KIP-983 (this example's point).  ``"block"``: the usual pattern, for comparison."""

EventKind = Literal["assigned", "revoke_requested", "revoke_completed", "lost"]
"""What :class:`AsyncProcessor` reports to its ``on_event`` hook (instrumentation only)."""


# ============================================================================================ pure parts
class PartitionWork:
    """Everything the processor keeps for one owned partition.

    The application thread queues records, starts them (:meth:`start`) and decides about revokes;
    worker threads report completions (:meth:`complete`).  :meth:`abandon` (partition lost) makes every
    later completion a no-op: its result is discarded and the tracker never moves again, so nothing is
    ever committed for the partition by this member.
    """

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.tracker = OffsetTracker()
        self.queued: deque[ConsumerRecord] = deque()  # fetched, not started
        self.futures: list[Future[None]] = []  # started; pruned as they finish
        self.finish_future: Future[None] | None = None  # the partition's finish step, once started
        self.revoking = False  # revoke requested: start nothing new
        self.committed: int | None = None  # last offset the broker acknowledged
        self.commit_sent: int | None = None  # last offset sent (commit may be in flight)
        self.discarded = 0  # results dropped because the partition was lost
        self._lock = threading.Lock()
        self._abandoned = False

    @property
    def abandoned(self) -> bool:
        return self._abandoned

    def in_flight(self) -> int:
        return self.tracker.in_flight

    def busy(self) -> bool:
        """Records in flight, or a finish step that has not completed."""
        finishing = self.finish_future is not None and not self.finish_future.done()
        return finishing or self.tracker.in_flight > 0

    def start(self, record: ConsumerRecord) -> None:
        """Mark ``record`` as started (before it is submitted, so completion never precedes it)."""
        self.tracker.started(record.offset)

    def complete(self, record: ConsumerRecord, deliver: Callable[[], None]) -> bool:
        """A worker finished ``record``: ``deliver`` its result and advance the tracker, unless abandoned.

        Returns False when the result was discarded.  Delivering and abandoning are mutually exclusive,
        so a result is either delivered before the partition counts as lost or never.
        """
        with self._lock:
            if self._abandoned:
                self.discarded += 1
                return False
            try:
                deliver()
            finally:
                self.tracker.finished(record.offset)
            return True

    def abandon(self) -> int:
        """The partition was lost: cancel what has not started, discard later results.  Returns how many
        records were cancelled before they started."""
        with self._lock:
            self._abandoned = True
        self.queued.clear()
        cancelled = sum(1 for f in self.futures if f.cancel())
        self.futures.clear()
        if self.finish_future is not None:
            self.finish_future.cancel()
        return cancelled

    def prune(self) -> None:
        self.futures = [f for f in self.futures if not f.done()]

    def commit_position(self) -> int | None:
        """The offset to commit now, or None when it was sent already (or nothing finished yet)."""
        if self._abandoned:
            return None
        position = self.tracker.committable
        if position is None or position == self.commit_sent:
            return None
        return position


@dataclass(frozen=True)
class SimulatedWork:
    """The slow part, simulated: ``work_ms`` per record, and every ``slow_every``-th offset of a partition
    (offset % slow_every == slow_every - 1) takes ``slow_ms`` instead -- a slow downstream call.  The
    duration depends only on the offset, so every member sees the same work for a record."""

    work_ms: float = 20.0
    slow_every: int = 0
    slow_ms: float = 0.0

    def duration_s(self, record: ConsumerRecord) -> float:
        if self.slow_every > 0 and record.offset % self.slow_every == self.slow_every - 1:
            return self.slow_ms / 1000.0
        return self.work_ms / 1000.0

    def __call__(self, record: ConsumerRecord) -> None:
        time.sleep(self.duration_s(record))


@dataclass
class ProcessorStats:
    processed: int = 0
    discarded: int = 0
    cancelled: int = 0
    delayed_polls: int = 0  # delay_revoke calls that were accepted
    delay_refused: int = 0  # delay_revoke calls refused (partition lost or the safety deadline passed)
    revokes_completed: int = 0
    lost: int = 0
    commits_failed: int = 0
    polls: int = 0


def member_config(
    bootstrap: str, group: str, protocol: str, *, client_id: str | None = None, **extra: Any
) -> dict[str, Any]:
    """The consumer configuration the example needs: manual commits (``enable.auto.commit=false``,
    otherwise the consumer commits what was *fetched*, not what was *processed*) and, for the classic
    protocol, the cooperative-sticky assignor (with eager assignors every revoke stalls the whole group)."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if protocol == "classic":
        config["partition.assignment.strategy"] = "cooperative-sticky"
    if client_id is not None:
        config["client.id"] = client_id
    config.update(extra)
    return config


# ============================================================================================ the processor
class AsyncProcessor(RebalanceListenerBase):
    """One group member: a poll loop, a thread pool, in-order commits and KIP-983 delayed revocation.

    ``process(record)`` runs on a pool thread (the slow part).  ``sink(record)`` runs when it finished,
    unless the partition was lost meanwhile -- think "publish the result"; it must be quick and
    thread-safe.  ``finish_partition(tp)``, if given, runs on a pool thread once per revoked partition after
    its last record finished and before its final commit (flush a per-partition writer, close a file);
    the revoke waits for it too.  ``on_event(kind, partitions)`` is an instrumentation hook (called on the
    poll thread).

    Backpressure: at most ``max_in_flight_per_partition`` records of a partition are in the pool, and a
    partition with ``max_queued_per_partition`` records waiting is paused until half of them started.
    """

    def __init__(
        self,
        consumer: Consumer,
        topics: Collection[str],
        *,
        process: Callable[[ConsumerRecord], object] = SimulatedWork(),
        sink: Callable[[ConsumerRecord], None] | None = None,
        finish_partition: Callable[[TopicPartition], None] | None = None,
        workers: int = 8,
        max_in_flight_per_partition: int = 8,
        max_queued_per_partition: int = 64,
        revocation: RevocationMode = "delay",
        poll_timeout_s: float = 0.02,
        commit_interval_s: float = 0.2,
        block_timeout_s: float = 60.0,
        on_event: Callable[[EventKind, frozenset[TopicPartition]], None] | None = None,
    ) -> None:
        if revocation not in ("delay", "block"):
            raise ValueError(f"revocation must be 'delay' or 'block', got {revocation!r}")
        if max_in_flight_per_partition < 1 or max_queued_per_partition < 1:
            raise ValueError("max_in_flight_per_partition and max_queued_per_partition must be >= 1")
        self.consumer = consumer
        self.topics = list(topics)
        self.revocation: RevocationMode = revocation
        self.stats = ProcessorStats()
        self._process = process
        self._sink = sink
        self._finish = finish_partition
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="async-processing")
        self._max_in_flight = max_in_flight_per_partition
        self._max_queued = max_queued_per_partition
        self._poll_timeout_s = poll_timeout_s
        self._commit_interval_s = commit_interval_s
        self._block_timeout_s = block_timeout_s
        self._on_event = on_event
        self._work: dict[TopicPartition, PartitionWork] = {}
        self._backpressured: set[TopicPartition] = set()
        self._revoke_seen: set[TopicPartition] = set()
        self._next_commit = 0.0
        self._closing = False
        self._stats_lock = threading.Lock()

    # ------------------------------------------------------------------------------ the loop
    def run(self, stop: threading.Event | None = None, *, drain_timeout_s: float = 60.0) -> ProcessorStats:
        """Subscribe and run the poll loop until ``stop`` is set; then drain, commit and leave."""
        self.consumer.set_rebalance_listener(self)
        self.consumer.subscribe(self.topics)
        try:
            while stop is None or not stop.is_set():
                self.poll_once()
        finally:
            self.close(drain_timeout_s)
        return self.stats

    def poll_once(self) -> ConsumerRecords:
        """One iteration: poll, queue the new records, handle revokes and losses, start work, commit."""
        records = self.consumer.poll(self._poll_timeout_s)
        self.stats.polls += 1
        # on_partitions_lost abandoned these already; a loop without a listener would do it here.
        for tp in records.lost_partitions:
            self._abandon(tp)
        if not self._closing:
            for tp, batch in records.by_partition().items():
                self._work.setdefault(tp, PartitionWork(tp)).queued.extend(batch)
        self._handle_revokes(records.to_be_revoked_partitions)
        self._start_work()
        self._backpressure()
        self._commit_progress()
        return records

    def _handle_revokes(self, to_be_revoked: frozenset[TopicPartition]) -> None:
        new = to_be_revoked - self._revoke_seen
        if new:
            self._revoke_seen |= new
            self._emit("revoke_requested", new)
        if self.revocation == "block":
            return  # the usual pattern knows nothing of KIP-983: on_partitions_revoked does the waiting
        for tp in to_be_revoked:
            work = self._work.get(tp)
            if work is None:
                continue  # nothing was ever started: let the revoke complete
            if not work.revoking:
                # Start nothing new; records fetched but not started are dropped -- the commit stops
                # before them, so the next owner processes them.
                work.revoking = True
                work.queued.clear()
            if not work.in_flight():
                self._start_finish(work)
            if work.busy():
                if self.consumer.delay_revoke([tp]):
                    self.stats.delayed_polls += 1
                else:
                    # Lost meanwhile, or the consumer's safety deadline (a fraction of
                    # max.poll.interval.ms) passed.  The revoke completes at the next poll; what is still
                    # running is abandoned there (the next owner processes it again).
                    self.stats.delay_refused += 1
                    log.warning("delay_revoke(%s) refused; abandoning its in-flight records", tp)

    def _start_work(self) -> None:
        for work in self._work.values():
            if work.revoking or work.abandoned:
                continue
            work.prune()
            while work.queued and work.in_flight() < self._max_in_flight:
                record = work.queued.popleft()
                work.start(record)
                work.futures.append(self._pool.submit(self._run_one, work, record))

    def _start_finish(self, work: PartitionWork) -> None:
        if self._finish is not None and work.finish_future is None and not work.abandoned:
            work.finish_future = self._pool.submit(self._run_finish, work.tp)

    def _run_finish(self, tp: TopicPartition) -> None:
        assert self._finish is not None
        try:
            self._finish(tp)
        except Exception:
            log.exception("finishing %s failed", tp)

    def _run_one(self, work: PartitionWork, record: ConsumerRecord) -> None:
        try:
            self._process(record)
        except Exception:  # a real application retries or dead-letters before marking it finished
            log.exception("processing %s-%d@%d failed", record.topic, record.partition, record.offset)
        sink = self._sink
        delivered = work.complete(record, (lambda: sink(record)) if sink is not None else (lambda: None))
        with self._stats_lock:
            if delivered:
                self.stats.processed += 1
            else:
                self.stats.discarded += 1

    def _backpressure(self) -> None:
        pause: list[TopicPartition] = []
        resume: list[TopicPartition] = []
        for tp, work in self._work.items():
            queued = len(work.queued)
            if tp not in self._backpressured and queued >= self._max_queued and not work.revoking:
                pause.append(tp)
            elif tp in self._backpressured and queued <= self._max_queued // 2:
                resume.append(tp)
        if pause:
            self.consumer.pause(pause)
            self._backpressured.update(pause)
        if resume and not self._closing:
            self.consumer.resume(resume)
            self._backpressured.difference_update(resume)

    def _commit_progress(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self._next_commit:
            return
        self._next_commit = now + self._commit_interval_s
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, work in self._work.items():
            position = work.commit_position()
            if position is not None:
                offsets[tp] = OffsetAndMetadata(position)
                work.commit_sent = position
        if offsets:
            self.consumer.commit_async(offsets, self._on_commit_done)

    def _on_commit_done(
        self, offsets: dict[TopicPartition, OffsetAndMetadata], error: BaseException | None
    ) -> None:
        for tp, om in offsets.items():
            work = self._work.get(tp)
            if work is None:
                continue
            if error is None:
                work.committed = max(om.offset, work.committed or 0)
            elif work.commit_sent == om.offset:
                work.commit_sent = None  # send it again with the next commit
        if error is not None:
            self.stats.commits_failed += 1
            log.info("async commit of %d partitions failed: %s", len(offsets), error)

    # ------------------------------------------------------------------------------ rebalance callbacks
    def on_partitions_assigned(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        if self._closing and partitions:
            consumer.pause(partitions)
        self._emit("assigned", frozenset(partitions))

    def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        """The revoke completes: commit the final offsets, then forget the partitions.

        With ``revocation="delay"`` nothing is in flight here any more (the loop delayed the revoke until
        the records and the finish step were done).  With ``"block"`` this is where the usual pattern waits
        for the in-flight records and then the finish step -- inside ``poll()``, so no partition gets new
        records meanwhile.  (``close()`` waits here too: the member is leaving anyway.)
        """
        works = [w for w in (self._work.get(tp) for tp in partitions) if w is not None]
        if self.revocation == "block" or self._closing:
            for work in works:
                work.revoking = True
                work.queued.clear()
            deadline = time.monotonic() + self._block_timeout_s
            _done, not_done = wait_futures(
                [f for w in works for f in w.futures], timeout=self._block_timeout_s
            )
            for work in works:
                if not work.in_flight():
                    self._start_finish(work)
            finishing = [w.finish_future for w in works if w.finish_future is not None]
            _done, still = wait_futures(finishing, timeout=max(0.0, deadline - time.monotonic()))
            if not_done or still:
                log.warning(
                    "%d tasks still running after %.0f s", len(not_done) + len(still), self._block_timeout_s
                )
        final: dict[TopicPartition, OffsetAndMetadata] = {}
        for work in works:
            if work.busy():
                # Only when a delay was refused: what still runs is processed again by the next owner.
                self.stats.cancelled += work.abandon()
            position = work.tracker.committable
            if position is not None and position != work.committed:
                final[work.tp] = OffsetAndMetadata(position)
        if final:
            try:
                consumer.commit_sync(final)
            except KafkaError as exc:
                log.error("final commit of %s failed: %s", sorted(final), exc)
                raise
        self._forget(partitions)
        self.stats.revokes_completed += len(partitions)
        self._emit("revoke_completed", frozenset(partitions))

    def on_partitions_lost(self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer) -> None:
        """Another member may own these already: abandon their work and never commit for them."""
        for tp in partitions:
            self._abandon(tp)
        self._emit("lost", frozenset(partitions))

    def _abandon(self, tp: TopicPartition) -> None:
        work = self._work.get(tp)
        if work is not None:
            self.stats.cancelled += work.abandon()
            self.stats.lost += 1
        self._forget([tp])

    def _forget(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._work.pop(tp, None)
            self._backpressured.discard(tp)
            self._revoke_seen.discard(tp)

    def _emit(self, kind: EventKind, partitions: frozenset[TopicPartition]) -> None:
        if self._on_event is not None:
            self._on_event(kind, partitions)

    # ------------------------------------------------------------------------------ shutdown
    def in_flight(self) -> int:
        return sum(work.in_flight() for work in self._work.values() if not work.abandoned)

    def close(self, drain_timeout_s: float = 60.0) -> None:
        """Stop starting records, keep polling until the in-flight ones are done (revokes and losses
        are still handled), commit, and leave the group (``on_partitions_revoked`` runs for the rest)."""
        if self._closing:
            return
        self._closing = True
        try:
            for work in self._work.values():
                work.queued.clear()
            assigned = self.consumer.assignment()
            if assigned:
                self.consumer.pause(assigned)
            deadline = time.monotonic() + drain_timeout_s
            while (
                any(w.busy() for w in self._work.values() if not w.abandoned) and time.monotonic() < deadline
            ):
                self.poll_once()
            self._commit_final()
        finally:
            try:
                self.consumer.close()
            finally:
                self._pool.shutdown(wait=True, cancel_futures=True)

    def _commit_final(self) -> None:
        offsets = {
            tp: OffsetAndMetadata(position)
            for tp, work in self._work.items()
            if not work.abandoned
            and (position := work.tracker.committable) is not None
            and position != work.committed
        }
        if offsets:
            self.consumer.commit_sync(offsets)
            for tp, om in offsets.items():
                self._work[tp].committed = om.offset


# ============================================================================================ CLI
def _produce(bootstrap: str, topic: str, count: int) -> None:
    from kafka_handoff import Producer

    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 20}) as producer:
        for i in range(count):
            producer.send(topic, key=b"k%d" % i, value=b"record %d" % i)
        producer.flush(60)
    print(f"produced {count} records to {topic}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--bootstrap", required=True, help="host:port of a broker")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--protocol", choices=("consumer", "classic"), default="consumer")
    parser.add_argument("--revocation", choices=("delay", "block"), default="delay")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--work-ms", type=float, default=20.0)
    parser.add_argument("--slow-every", type=int, default=0, help="every N-th offset is slow (0: none)")
    parser.add_argument("--slow-ms", type=float, default=1000.0)
    parser.add_argument("--finish-ms", type=float, default=0.0, help="per revoked partition finish step")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds to run (0: until Ctrl-C)")
    parser.add_argument("--produce", type=int, default=0, help="first produce this many records")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    if args.produce:
        _produce(args.bootstrap, args.topic, args.produce)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    if args.duration:
        threading.Timer(args.duration, stop.set).start()

    def on_event(kind: EventKind, partitions: frozenset[TopicPartition]) -> None:
        if partitions:
            print(f"{time.strftime('%H:%M:%S')} {kind}: {sorted(str(tp) for tp in partitions)}", flush=True)

    consumer = Consumer(member_config(args.bootstrap, args.group, args.protocol))
    processor = AsyncProcessor(
        consumer,
        [args.topic],
        process=SimulatedWork(args.work_ms, args.slow_every, args.slow_ms),
        finish_partition=(lambda tp: time.sleep(args.finish_ms / 1000.0)) if args.finish_ms else None,
        workers=args.workers,
        revocation=args.revocation,
        on_event=on_event,
    )

    def report() -> None:
        last = 0
        while not stop.wait(1.0):
            now = processor.stats.processed
            print(f"{time.strftime('%H:%M:%S')} processed {now - last} records/s (total {now})", flush=True)
            last = now

    threading.Thread(target=report, daemon=True).start()
    stats = processor.run(stop)
    print(f"done: {stats}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
