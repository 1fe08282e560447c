"""Asynchronous processing without duplicates, asyncio version: KIP-983 delayed revocation with AsyncConsumer.

The same worked example as ``examples/async_processing.py`` (read ``docs/async-processing.md`` first), for an
asyncio application: records are processed by asyncio tasks (``await process(record)``, e.g. an HTTP call)
instead of a thread pool, and everything -- the poll loop, the tasks, the rebalance callbacks -- runs on one
event loop.

* The poll loop (``await consumer.poll(...)``) never waits for processing; per partition, offsets are
  committed in order as tasks complete (:class:`OffsetTracker`), with ``commit_async``.
* When a revoke is requested (``records.to_be_revoked_partitions``) the loop starts nothing new for those
  partitions and calls ``consumer.delay_revoke`` on every poll while their tasks (and the optional
  ``finish_partition`` step, e.g. a flush) are still running; every other partition keeps flowing.
* Once they are done the revoke completes: ``on_partitions_revoked`` -- an ``async def`` callback, awaited
  inside ``poll()`` -- commits the final offsets with ``await consumer.commit_sync(...)`` on the restricted
  view, before the group may hand the partitions to another member.
* Lost partitions' tasks are cancelled and their results discarded; nothing is committed for them again.

Run one member (start more in other terminals to watch partitions move)::

    python examples/async_processing_aio.py --bootstrap 127.0.0.1:9092 --topic orders --group orders-app \\
        --protocol consumer --work-ms 20 --produce 20000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from kafka_handoff import AsyncConsumer, AsyncRebalanceConsumer, AsyncRebalanceListenerBase
from kafka_handoff.consumer.records import ConsumerRecords
from kafka_handoff.errors import KafkaError
from kafka_handoff.types import ConsumerRecord, OffsetAndMetadata, TopicPartition

__all__ = ["AsyncioProcessor", "EventKind", "OffsetTracker", "ProcessorStats", "member_config"]

log = logging.getLogger("async_processing_aio")

EventKind = Literal["assigned", "revoke_requested", "revoke_completed", "lost"]


class OffsetTracker:
    """The in-order commit position of one partition, fed by out-of-order completions (one event loop, so
    no lock): :attr:`committable` is one past the longest finished prefix of the started offsets."""

    __slots__ = ("_done", "_open", "_order", "committable")

    def __init__(self) -> None:
        self._order: deque[int] = deque()
        self._open: set[int] = set()
        self._done: set[int] = set()
        self.committable: int | None = None

    def started(self, offset: int) -> None:
        if self._order and offset <= self._order[-1]:
            raise ValueError(f"offsets must be started in increasing order: {offset} after {self._order[-1]}")
        self._order.append(offset)
        self._open.add(offset)

    def finished(self, offset: int) -> None:
        self._open.discard(offset)
        self._done.add(offset)
        while self._order and self._order[0] in self._done:
            first = self._order.popleft()
            self._done.discard(first)
            self.committable = first + 1

    @property
    def in_flight(self) -> int:
        return len(self._open)


class PartitionWork:
    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.tracker = OffsetTracker()
        self.queued: deque[ConsumerRecord] = deque()
        self.tasks: set[asyncio.Task[None]] = set()
        self.finish_task: asyncio.Task[None] | None = None
        self.revoking = False
        self.abandoned = False
        self.committed: int | None = None
        self.commit_sent: int | None = None

    def busy(self) -> bool:
        finishing = self.finish_task is not None and not self.finish_task.done()
        return finishing or self.tracker.in_flight > 0

    def abandon(self) -> int:
        self.abandoned = True
        self.queued.clear()
        cancelled = sum(1 for t in self.tasks if t.cancel())
        if self.finish_task is not None:
            self.finish_task.cancel()
        return cancelled

    def commit_position(self) -> int | None:
        position = self.tracker.committable
        if self.abandoned or position is None or position == self.commit_sent:
            return None
        return position


@dataclass
class ProcessorStats:
    processed: int = 0
    discarded: int = 0
    cancelled: int = 0
    delayed_polls: int = 0
    delay_refused: int = 0
    revokes_completed: int = 0
    lost: int = 0
    commits_failed: int = 0
    polls: int = 0


def member_config(
    bootstrap: str, group: str, protocol: str, *, client_id: str | None = None, **extra: Any
) -> dict[str, Any]:
    """Manual commits (commit what was processed, not what was fetched); cooperative-sticky for classic."""
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


async def simulated_work(record: ConsumerRecord, work_ms: float = 20.0) -> None:
    await asyncio.sleep(work_ms / 1000.0)


class AsyncioProcessor(AsyncRebalanceListenerBase):
    """One group member on one event loop: a poll loop, processing tasks, in-order commits and KIP-983
    delayed revocation.  ``process(record)`` is awaited in a task per record; ``sink(record)`` runs when it
    finished, unless the partition was lost meanwhile; ``finish_partition(tp)`` is awaited once per revoked
    partition after its last record and before its final commit."""

    def __init__(
        self,
        consumer: AsyncConsumer,
        topics: Collection[str],
        *,
        process: Callable[[ConsumerRecord], Awaitable[object]] = simulated_work,
        sink: Callable[[ConsumerRecord], None] | None = None,
        finish_partition: Callable[[TopicPartition], Coroutine[Any, Any, None]] | None = None,
        max_in_flight_per_partition: int = 8,
        max_queued_per_partition: int = 64,
        poll_timeout_s: float = 0.02,
        commit_interval_s: float = 0.2,
        on_event: Callable[[EventKind, frozenset[TopicPartition]], None] | None = None,
    ) -> None:
        self.consumer = consumer
        self.topics = list(topics)
        self.stats = ProcessorStats()
        self._process = process
        self._sink = sink
        self._finish = finish_partition
        self._max_in_flight = max_in_flight_per_partition
        self._max_queued = max_queued_per_partition
        self._poll_timeout_s = poll_timeout_s
        self._commit_interval_s = commit_interval_s
        self._on_event = on_event
        self._work: dict[TopicPartition, PartitionWork] = {}
        self._backpressured: set[TopicPartition] = set()
        self._revoke_seen: set[TopicPartition] = set()
        self._next_commit = 0.0
        self._closing = False

    # ------------------------------------------------------------------------------ the loop
    async def run(self, stop: asyncio.Event, *, drain_timeout_s: float = 60.0) -> ProcessorStats:
        self.consumer.set_rebalance_listener(self)
        await self.consumer.subscribe(self.topics)
        try:
            while not stop.is_set():
                await self.poll_once()
        finally:
            await self.close(drain_timeout_s)
        return self.stats

    async def poll_once(self) -> ConsumerRecords:
        records = await self.consumer.poll(self._poll_timeout_s)
        self.stats.polls += 1
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
        for tp in to_be_revoked:
            work = self._work.get(tp)
            if work is None:
                continue
            if not work.revoking:
                work.revoking = True
                work.queued.clear()  # not started: the commit stops before them, the next owner gets them
            if not work.tracker.in_flight:
                self._start_finish(work)
            if work.busy():
                if self.consumer.delay_revoke([tp]):
                    self.stats.delayed_polls += 1
                else:
                    self.stats.delay_refused += 1
                    log.warning("delay_revoke(%s) refused; abandoning its in-flight records", tp)

    def _start_work(self) -> None:
        for work in self._work.values():
            if work.revoking or work.abandoned:
                continue
            while work.queued and work.tracker.in_flight < self._max_in_flight:
                record = work.queued.popleft()
                work.tracker.started(record.offset)
                task = asyncio.create_task(self._run_one(work, record))
                work.tasks.add(task)
                task.add_done_callback(work.tasks.discard)

    def _start_finish(self, work: PartitionWork) -> None:
        if self._finish is not None and work.finish_task is None and not work.abandoned:
            work.finish_task = asyncio.create_task(self._finish(work.tp))

    async def _run_one(self, work: PartitionWork, record: ConsumerRecord) -> None:
        try:
            await self._process(record)
        except asyncio.CancelledError:
            return  # abandoned (partition lost): never marked finished, never committed
        except Exception:  # a real application retries or dead-letters before marking it finished
            log.exception("processing %s-%d@%d failed", record.topic, record.partition, record.offset)
        if work.abandoned:
            self.stats.discarded += 1
            return
        if self._sink is not None:
            self._sink(record)
        work.tracker.finished(record.offset)
        self.stats.processed += 1

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

    def _commit_progress(self) -> None:
        now = time.monotonic()
        if now < self._next_commit:
            return
        self._next_commit = now + self._commit_interval_s
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, work in self._work.items():
            position = work.commit_position()
            if position is not None:
                offsets[tp] = OffsetAndMetadata(position)
                work.commit_sent = position
        if offsets:
            future = self.consumer.commit_async(offsets)
            future.add_done_callback(lambda f: self._on_commit_done(offsets, f))

    def _on_commit_done(
        self, offsets: dict[TopicPartition, OffsetAndMetadata], future: asyncio.Future[None]
    ) -> None:
        error = None if future.cancelled() else future.exception()
        for tp, om in offsets.items():
            work = self._work.get(tp)
            if work is None:
                continue
            if error is None:
                work.committed = max(om.offset, work.committed or 0)
            elif work.commit_sent == om.offset:
                work.commit_sent = None
        if error is not None:
            self.stats.commits_failed += 1
            log.info("async commit of %d partitions failed: %s", len(offsets), error)

    # ------------------------------------------------------------------------------ rebalance callbacks
    async def on_partitions_assigned(
        self, partitions: Collection[TopicPartition], consumer: AsyncRebalanceConsumer
    ) -> None:
        if self._closing and partitions:
            consumer.pause(partitions)
        self._emit("assigned", frozenset(partitions))

    async def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: AsyncRebalanceConsumer
    ) -> None:
        """The revoke completes: commit the final offsets (awaited), then forget the partitions.  Nothing is
        in flight here any more, except while closing (then its tasks are awaited first)."""
        works = [w for w in (self._work.get(tp) for tp in partitions) if w is not None]
        if self._closing:
            tasks = [t for w in works for t in w.tasks]
            if tasks:
                await asyncio.wait(tasks, timeout=60)
        final: dict[TopicPartition, OffsetAndMetadata] = {}
        for work in works:
            if work.busy():  # only when a delay was refused: the next owner processes these again
                self.stats.cancelled += work.abandon()
            position = work.tracker.committable
            if position is not None and position != work.committed:
                final[work.tp] = OffsetAndMetadata(position)
        if final:
            try:
                await consumer.commit_sync(final)
            except KafkaError as exc:
                log.error("final commit of %s failed: %s", sorted(final), exc)
                raise
        self._forget(partitions)
        self.stats.revokes_completed += len(partitions)
        self._emit("revoke_completed", frozenset(partitions))

    async def on_partitions_lost(
        self, partitions: Collection[TopicPartition], consumer: AsyncRebalanceConsumer
    ) -> None:
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
    async def close(self, drain_timeout_s: float = 60.0) -> None:
        """Stop starting records, keep polling until the in-flight ones are done, commit, leave."""
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
                await self.poll_once()
            offsets = {
                tp: OffsetAndMetadata(position)
                for tp, work in self._work.items()
                if not work.abandoned
                and (position := work.tracker.committable) is not None
                and position != work.committed
            }
            if offsets:
                await self.consumer.commit(offsets)
                for tp, om in offsets.items():
                    self._work[tp].committed = om.offset
        finally:
            await self.consumer.close()


# ============================================================================================ CLI
async def _main(args: argparse.Namespace) -> int:
    if args.produce:
        from kafka_handoff import AsyncProducer

        async with AsyncProducer({"bootstrap.servers": args.bootstrap, "linger.ms": 20}) as producer:
            futures = [
                await producer.send_future(args.topic, key=b"k%d" % i, value=b"record %d" % i)
                for i in range(args.produce)
            ]
            await asyncio.gather(*futures)
        print(f"produced {args.produce} records to {args.topic}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGINT, stop.set)
    if args.duration:
        loop.call_later(args.duration, stop.set)

    def on_event(kind: EventKind, partitions: frozenset[TopicPartition]) -> None:
        if partitions:
            print(f"{time.strftime('%H:%M:%S')} {kind}: {sorted(str(tp) for tp in partitions)}", flush=True)

    work_ms = args.work_ms

    async def process(record: ConsumerRecord) -> None:
        await simulated_work(record, work_ms)

    finish_ms = args.finish_ms

    async def finish(tp: TopicPartition) -> None:
        await asyncio.sleep(finish_ms / 1000.0)

    consumer = AsyncConsumer(member_config(args.bootstrap, args.group, args.protocol))
    processor = AsyncioProcessor(
        consumer,
        [args.topic],
        process=process,
        finish_partition=finish if finish_ms else None,
        on_event=on_event,
    )

    async def report() -> None:
        last = 0
        while not stop.is_set():
            await asyncio.sleep(1.0)
            now = processor.stats.processed
            print(f"{time.strftime('%H:%M:%S')} processed {now - last} records/s (total {now})", flush=True)
            last = now

    reporter = asyncio.create_task(report())
    stats = await processor.run(stop)
    reporter.cancel()
    print(f"done: {stats}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--bootstrap", required=True, help="host:port of a broker")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--protocol", choices=("consumer", "classic"), default="consumer")
    parser.add_argument("--work-ms", type=float, default=20.0)
    parser.add_argument("--finish-ms", type=float, default=0.0, help="per revoked partition finish step")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds to run (0: until Ctrl-C)")
    parser.add_argument("--produce", type=int, default=0, help="first produce this many records")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return asyncio.run(_main(args))


if __name__ == "__main__":
    sys.exit(main())
