"""Broker failures and network faults under a consuming group: the scenarios of ``tests/faults`` and
``handoff bench faults``.

One scenario = one fault on a 3-node dev cluster (:func:`start_fault_cluster`: replication factor 3,
``min.insync.replicas=2``, faster broker fencing, and a :class:`~kafka_handoff.devbroker.proxy.FaultProxy`
in front of every broker) while:

* an idempotent ``acks=all`` kafka-handoff producer writes steadily to every partition (directly, not
  through the proxy); each acknowledged record's ``(partition, offset)`` and acknowledgement time is kept;
* one group per protocol -- classic with ``cooperative-sticky`` and KIP-848 ``consumer`` -- consumes with
  asynchronous processing and KIP-983 delayed revocation (:class:`AsyncMember`: records go to a thread pool,
  offsets are committed in order as processing completes, a revoke is delayed with ``delay_revoke`` while
  the partition has records in flight and completes with a synchronous commit), two members at first, a
  third joining while the fault is on and the first leaving after it healed;
* optionally (the benchmark) a confluent-kafka group does the same work in the same run, as an oracle.

The group ids are picked so that every group of a run has the same group coordinator, which the
coordinator faults then hit.  What a scenario measures, per group (:class:`GroupOutcome`): records
acknowledged, consumed, missing, processed twice (and of those, twice *after a successful commit covered
them* -- the app committed before the partition moved, so a second delivery is a bug), the longest stall of
any partition (the longest time an acknowledged record waited until the application started processing
it; for a missing record, until the scenario ended), errors that reached the application, and the longest
``close()``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from kafka_handoff.consumer import Consumer
from kafka_handoff.consumer.listener import RebalanceConsumer, RebalanceListenerBase
from kafka_handoff.devbroker.cluster import Cluster
from kafka_handoff.devbroker.probe import fetch_metadata
from kafka_handoff.devbroker.proxy import BlackHole, FaultProxy, Latency, ResetMidResponse, start_proxied
from kafka_handoff.errors import (
    CommitFailedError,
    FencedError,
    FencedMemberEpochError,
    IllegalGenerationError,
    KafkaError,
    RebalanceInProgressError,
    StaleMemberEpochError,
    UnknownMemberIdError,
)
from kafka_handoff.producer import Producer
from kafka_handoff.types import OffsetAndMetadata, RecordMetadata, TopicPartition

__all__ = [
    "FAULTS",
    "FAULT_BROKER_OVERRIDES",
    "STALL_BOUND_S",
    "AsyncMember",
    "FaultRun",
    "GroupOutcome",
    "Recorder",
    "main",
    "run_fault",
    "start_fault_cluster",
]

log = logging.getLogger("kafka_handoff.bench.faults")

#: Broker settings of the fault cluster (Java defaults in comments).
FAULT_BROKER_OVERRIDES = {
    "controlled.shutdown.enable": "true",  # default true (the dev broker turns it off for fast teardown)
    "broker.session.timeout.ms": "4000",  # default 9000: a dead or hung broker is fenced sooner
    "broker.heartbeat.interval.ms": "1000",  # default 2000
    "replica.lag.time.max.ms": "6000",  # default 30000: a hung follower leaves the ISR sooner
}
PARTITIONS = 6
#: The consumers' request.timeout.ms (Java's default is 30000; shorter keeps black-hole scenarios short).
REQUEST_TIMEOUT_MS = 10_000
#: The classic members' session.timeout.ms (the consumer protocol's is the broker's: 6 s).
CLASSIC_SESSION_TIMEOUT_MS = 10_000
#: The bound on a partition's stall beyond the fault's *outage* (see :class:`FaultRun`): request.timeout.ms
#: (10 s: an in-flight request to a hung or black-holed broker) + broker.session.timeout.ms (4 s: until the
#: controller fences a dead broker and moves its leaders) + the classic session.timeout.ms (10 s: a
#: coordinator that took over in the middle of a rebalance waits for the members that have not rejoined)
#: + 6 s for metadata refreshes, reconnect backoff and a busy 2-core machine.
STALL_BOUND_S = REQUEST_TIMEOUT_MS / 1000 + 4.0 + CLASSIC_SESSION_TIMEOUT_MS / 1000 + 6.0
#: The slack allowed on top of close()'s timeout (thread scheduling on a loaded 2-core machine).
CLOSE_SLACK_S = 2.0
CLOSE_TIMEOUT_S = 15.0
#: Errors Java's commitSync raises too when a member lost its membership (the app must handle them).
EXPECTED_COMMIT_ERRORS: tuple[type[BaseException], ...] = (
    CommitFailedError,
    FencedError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    IllegalGenerationError,
    FencedMemberEpochError,
    StaleMemberEpochError,
)

PROTOCOLS: dict[str, dict[str, Any]] = {
    "classic": {
        "group.protocol": "classic",
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": CLASSIC_SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": 500,
    },
    "consumer": {"group.protocol": "consumer"},
}


def now() -> float:
    return time.monotonic()


def wait_for(cond: Callable[[], bool], timeout: float, what: str | Callable[[], str]) -> None:
    """Poll ``cond`` every 20 ms until it holds; raise AssertionError naming ``what`` after ``timeout``."""
    deadline = now() + timeout
    while not cond():
        if now() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f} s waiting for {what() if callable(what) else what}"
            )
        time.sleep(0.02)


# ============================================================================================ cluster
def start_fault_cluster(**start_kwargs: Any) -> tuple[Cluster, FaultProxy]:
    """A supervised 3-node dev cluster with :data:`FAULT_BROKER_OVERRIDES`, behind a fault proxy."""
    overrides = {**FAULT_BROKER_OVERRIDES, **start_kwargs.pop("overrides", {})}
    return start_proxied(3, overrides=overrides, **start_kwargs)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit signed)."""
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition (hence the coordinator) of ``group_id`` (Kafka's Utils.abs)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def group_ids(prefix: str, names: Sequence[str], offsets_partitions: int = 3) -> dict[str, str]:
    """One group id per name, all with the same coordinator partition."""
    out: dict[str, str] = {}
    target: int | None = None
    for name in names:
        for i in range(10_000):
            gid = f"{prefix}-{name}-{i}"
            p = offsets_partition(gid, offsets_partitions)
            if target is None:
                target = p
            if p == target:
                out[name] = gid
                break
    return out


def coordinator_node(cluster: Cluster, group_id: str) -> int:
    """The node leading ``group_id``'s ``__consumer_offsets`` partition."""
    meta = fetch_metadata(cluster.bootstrap_servers, ["__consumer_offsets"], 10.0)
    parts = meta.partitions_for("__consumer_offsets") or ()
    target = offsets_partition(group_id, len(parts))
    return next(p.leader for p in parts if p.partition == target)


def leaders(cluster: Cluster, topic: str) -> dict[int, int]:
    """partition -> leader node of ``topic``."""
    meta = fetch_metadata(cluster.bootstrap_servers, [topic], 10.0)
    return {p.partition: p.leader for p in meta.partitions_for(topic) or ()}


# ============================================================================================ recording
@dataclass
class Recorder:
    """Everything one group did, thread-safe: records whose processing started (``handed``: time, member,
    partition, offset, value), successful commits, errors, closes."""

    group: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    handed: list[tuple[float, str, TopicPartition, int, bytes]] = field(default_factory=list)
    commits: dict[TopicPartition, list[tuple[float, int]]] = field(default_factory=lambda: defaultdict(list))
    unexpected: list[str] = field(default_factory=list)
    expected_errors: list[str] = field(default_factory=list)
    closes: list[tuple[str, float, float]] = field(default_factory=list)  # (member, seconds, timeout)
    lost: int = 0
    unsettled: str = ""  # why the group did not settle after the fault (empty: it did)
    revoke_requests: list[tuple[float, str, frozenset[TopicPartition]]] = field(default_factory=list)

    def record(self, member: str, items: Iterable[tuple[TopicPartition, int, bytes]]) -> None:
        t = now()
        with self.lock:
            self.handed.extend((t, member, tp, off, value) for tp, off, value in items)

    def committed(self, offsets: dict[TopicPartition, int]) -> None:
        t = now()
        with self.lock:
            for tp, off in offsets.items():
                self.commits[tp].append((t, off))

    def error(self, member: str, where: str, exc: BaseException, *, expected: bool) -> None:
        text = f"{member} {where}: {type(exc).__name__}: {exc}"
        with self.lock:
            (self.expected_errors if expected else self.unexpected).append(text)
        if not expected:
            log.warning("unexpected error: %s", text)

    def handed_count(self) -> int:
        with self.lock:
            return len(self.handed)

    def consumed(self) -> set[tuple[TopicPartition, int]]:
        with self.lock:
            return {(tp, off) for _t, _m, tp, off, _v in self.handed}


class Acked:
    """What the producer got acknowledged: ``(partition, offset) -> (ack time, value)``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: dict[tuple[TopicPartition, int], tuple[float, bytes]] = {}
        self.failed: list[str] = []

    def snapshot(self) -> dict[tuple[TopicPartition, int], tuple[float, bytes]]:
        with self.lock:
            return dict(self.records)


class SteadyProducer(threading.Thread):
    """An idempotent ``acks=all`` kafka-handoff producer writing ``rate`` records/s round-robin."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float = 120.0) -> None:
        super().__init__(name="fault-producer", daemon=True)
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.acked = Acked()
        self.sent = 0
        self._halt = threading.Event()
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
        )

    def _callback(self, value: bytes) -> Callable[[RecordMetadata | None, BaseException | None], None]:
        def done(md: RecordMetadata | None, exc: BaseException | None) -> None:
            with self.acked.lock:
                if md is not None:
                    tp = TopicPartition(md.topic, md.partition)
                    self.acked.records[(tp, md.offset)] = (now(), value)
                else:
                    self.acked.failed.append(f"{type(exc).__name__}: {exc}")

        return done

    def run(self) -> None:
        start = now()
        while not self._halt.is_set():
            due = int((now() - start) * self.rate)
            while self.sent < due:
                value = b"%d" % self.sent
                self.producer.send(
                    self.topic, value, partition=self.sent % self.partitions, callback=self._callback(value)
                )
                self.sent += 1
            self._halt.wait(0.01)

    def finish(self, timeout: float = 120.0) -> dict[tuple[TopicPartition, int], tuple[float, bytes]]:
        """Stop writing, wait for every outcome, close; the acknowledged records."""
        self._halt.set()
        self.join(10)
        try:
            self.producer.flush(timeout)
        finally:
            self.producer.close(10)
        return self.acked.snapshot()


# ============================================================================================ members
class AsyncMember(threading.Thread, RebalanceListenerBase):
    """A kafka-handoff group member with asynchronous processing and KIP-983 delayed revocation.

    The poll loop hands records to a pool (``work_ms`` each, at most ``in_flight`` per partition); per
    partition the contiguous finished prefix is committed every ``commit_interval_s`` (``commit_async``).
    A partition whose revoke is requested starts nothing new and is delayed (``delay_revoke``) while it has
    records in flight; ``on_partitions_revoked`` then commits its final offset synchronously.  Lost
    partitions' results are discarded.  :attr:`hold` set: processing blocks (keeps revokes pending).
    """

    def __init__(
        self,
        name: str,
        rec: Recorder,
        config: dict[str, Any],
        topic: str,
        *,
        work_ms: float = 2.0,
        in_flight: int = 4,
        workers: int = 4,
        commit_interval_s: float = 0.2,
    ) -> None:
        threading.Thread.__init__(self, name=f"member-{name}", daemon=True)
        self.member = name
        self.rec = rec
        self.config = config
        self.topic = topic
        self.work_s = work_ms / 1000.0
        self.max_in_flight = in_flight
        self.workers = workers
        self.commit_interval_s = commit_interval_s
        self.hold = threading.Event()
        self.owned: set[TopicPartition] = set()
        self.stopping = threading.Event()
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._queued: dict[TopicPartition, list[tuple[int, bytes]]] = defaultdict(list)
        self._running: dict[TopicPartition, set[int]] = defaultdict(set)
        self._order: dict[TopicPartition, list[int]] = defaultdict(list)  # in start order, not yet done
        self._done: dict[TopicPartition, set[int]] = defaultdict(set)
        self._committable: dict[TopicPartition, int] = {}
        self._commit_sent: dict[TopicPartition, int] = {}
        self._abandoned: set[TopicPartition] = set()
        self._revoking: set[TopicPartition] = set()
        self.consumer: Consumer | None = None

    # ---- processing (pool threads)
    def _process(self, tp: TopicPartition, offset: int) -> None:
        while self.hold.is_set() and not self.stopping.is_set():
            time.sleep(0.01)
        time.sleep(self.work_s)
        with self._lock:
            self._running[tp].discard(offset)
            if tp in self._abandoned:
                return
            self._done[tp].add(offset)
            order = self._order[tp]
            while order and order[0] in self._done[tp]:
                first = order.pop(0)
                self._done[tp].discard(first)
                self._committable[tp] = first + 1

    def _busy(self, tp: TopicPartition) -> bool:
        with self._lock:
            return bool(self._running.get(tp))

    # ---- rebalance callbacks (application thread)
    def on_partitions_assigned(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        with self._lock:
            for tp in partitions:
                self._abandoned.discard(tp)
        self.owned |= set(partitions)

    def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        final: dict[TopicPartition, int] = {}
        with self._lock:
            for tp in partitions:
                pos = self._committable.get(tp)
                if pos is not None:
                    final[tp] = pos
                # Anything still running (a refused delay) is abandoned: the next owner processes it again.
                self._abandoned.add(tp)
        if final:
            try:
                consumer.commit_sync({tp: OffsetAndMetadata(o) for tp, o in final.items()}, timeout=20)
                self.rec.committed(final)
            except KafkaError as exc:
                self.rec.error(
                    self.member,
                    "commit_sync on revoke",
                    exc,
                    expected=isinstance(exc, EXPECTED_COMMIT_ERRORS),
                )
        self._forget(partitions)

    def on_partitions_lost(self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer) -> None:
        with self._lock:
            self._abandoned |= set(partitions)
        with self.rec.lock:
            self.rec.lost += len(partitions)
        self._forget(partitions)

    def _forget(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                for d in (
                    self._queued,
                    self._running,
                    self._order,
                    self._done,
                    self._committable,
                    self._commit_sent,
                ):
                    d.pop(tp, None)
                self._revoking.discard(tp)
        self.owned -= set(partitions)

    # ---- the loop
    def run(self) -> None:
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix=f"work-{self.member}")
        try:
            consumer = self.consumer = Consumer(self.config)
        except Exception as exc:
            self.rec.error(self.member, "Consumer()", exc, expected=False)
            self.closed.set()
            return
        next_commit = 0.0
        try:
            consumer.set_rebalance_listener(self)
            consumer.subscribe([self.topic])
            while not self.stopping.is_set():
                try:
                    records = consumer.poll(0.05)
                except KafkaError as exc:
                    self.rec.error(self.member, "poll", exc, expected=False)
                    time.sleep(0.1)
                    continue
                items = [
                    (TopicPartition(r.topic, r.partition), r.offset, bytes(r.value or b"")) for r in records
                ]
                with self._lock:
                    for tp, off, value in items:
                        if tp not in self._revoking:
                            self._queued[tp].append((off, value))
                for tp in records.to_be_revoked_partitions:
                    with self._lock:
                        if tp not in self._revoking:
                            self._revoking.add(tp)
                            self._queued.pop(tp, None)
                    if self._busy(tp):
                        consumer.delay_revoke([tp])
                self._start_work(pool)
                if now() >= next_commit:
                    next_commit = now() + self.commit_interval_s
                    self._commit_progress(consumer)
            self._drain(consumer)
        except Exception as exc:
            self.rec.error(self.member, "loop", exc, expected=False)
        finally:
            started = now()
            try:
                consumer.close(CLOSE_TIMEOUT_S)
            except Exception as exc:
                self.rec.error(self.member, "close", exc, expected=False)
            with self.rec.lock:
                self.rec.closes.append((self.member, now() - started, CLOSE_TIMEOUT_S))
            self.hold.clear()
            pool.shutdown(wait=True, cancel_futures=True)
            self.closed.set()

    def _start_work(self, pool: ThreadPoolExecutor) -> None:
        started: list[tuple[TopicPartition, int, bytes]] = []
        with self._lock:
            for tp, queue in self._queued.items():
                while queue and len(self._running[tp]) < self.max_in_flight:
                    off, value = queue.pop(0)
                    self._running[tp].add(off)
                    self._order[tp].append(off)
                    started.append((tp, off, value))
                    pool.submit(self._process, tp, off)
        if started:
            # Recorded when processing starts (a record fetched but dropped because its partition is being
            # revoked was never processed: the next owner processing it is no duplicate).
            self.rec.record(self.member, started)

    def _commit_progress(self, consumer: Consumer) -> None:
        with self._lock:
            offsets = {
                tp: pos
                for tp, pos in self._committable.items()
                if pos != self._commit_sent.get(tp) and tp not in self._abandoned
            }
            self._commit_sent.update(offsets)
        if not offsets:
            return

        def done(result: dict[TopicPartition, OffsetAndMetadata], error: BaseException | None) -> None:
            if error is None:
                self.rec.committed({tp: om.offset for tp, om in result.items()})
            else:
                with self._lock:
                    for tp, pos in offsets.items():
                        if self._commit_sent.get(tp) == pos:
                            del self._commit_sent[tp]  # send it again with the next commit
                # An async commit failing during a coordinator move is normal (Java: a retriable error).
                self.rec.error(self.member, "commit_async", error, expected=isinstance(error, KafkaError))

        consumer.commit_async({tp: OffsetAndMetadata(o) for tp, o in offsets.items()}, done)

    def _drain(self, consumer: Consumer) -> None:
        """Leaving: start nothing new, finish what runs (polling meanwhile), commit, then close."""
        with self._lock:
            self._queued.clear()
        deadline = now() + 10.0
        while now() < deadline and any(self._busy(tp) for tp in list(self.owned)):
            consumer.poll(0.05)
        with self._lock:
            final = {
                tp: pos
                for tp, pos in self._committable.items()
                if tp in self.owned and tp not in self._abandoned
            }
        if final:
            try:
                consumer.commit_sync({tp: OffsetAndMetadata(o) for tp, o in final.items()}, timeout=20)
                self.rec.committed(final)
            except KafkaError as exc:
                self.rec.error(
                    self.member, "commit_sync on leave", exc, expected=isinstance(exc, EXPECTED_COMMIT_ERRORS)
                )
        with self._lock:
            self._abandoned |= set(self.owned)  # close() revokes them; nothing is left to commit

    def leave(self, timeout: float = 60.0) -> None:
        self.stopping.set()
        self.closed.wait(timeout)


class ConfluentMember(threading.Thread):
    """The oracle: a confluent-kafka member doing the same work synchronously (process on receipt), commits
    every ``commit_interval_s`` and synchronously in ``on_revoke``."""

    def __init__(
        self, name: str, rec: Recorder, config: dict[str, Any], topic: str, commit_interval_s: float = 0.2
    ) -> None:
        super().__init__(name=f"rdk-{name}", daemon=True)
        self.member = name
        self.rec = rec
        self.config = config
        self.topic = topic
        self.commit_interval_s = commit_interval_s
        self.owned: set[TopicPartition] = set()
        self.stopping = threading.Event()
        self.closed = threading.Event()
        self.hold = threading.Event()  # unused: the usual pattern has no delayed revocation

    def run(self) -> None:
        import confluent_kafka

        processed: dict[TopicPartition, int] = {}
        c = confluent_kafka.Consumer(self.config)

        def tps(ps: Any) -> set[TopicPartition]:
            return {TopicPartition(p.topic, p.partition) for p in ps}

        def commit(offsets: dict[TopicPartition, int]) -> None:
            if not offsets:
                return
            try:
                c.commit(
                    offsets=[
                        confluent_kafka.TopicPartition(tp.topic, tp.partition, o) for tp, o in offsets.items()
                    ],
                    asynchronous=False,
                )
                self.rec.committed(offsets)
            except confluent_kafka.KafkaException as exc:
                self.rec.error(self.member, "commit", exc, expected=True)

        def on_assign(_c: Any, ps: Any) -> None:
            self.owned |= tps(ps)

        def on_revoke(_c: Any, ps: Any) -> None:
            gone = tps(ps)
            commit({tp: o for tp, o in processed.items() if tp in gone})
            for tp in gone:
                processed.pop(tp, None)
            self.owned -= gone

        def on_lost(_c: Any, ps: Any) -> None:
            gone = tps(ps)
            for tp in gone:
                processed.pop(tp, None)
            self.owned -= gone
            with self.rec.lock:
                self.rec.lost += len(gone)

        next_commit = 0.0
        try:
            c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
            while not self.stopping.is_set():
                items = []
                for msg in c.consume(500, 0.05):
                    err = msg.error()
                    if err is not None:
                        if err.fatal():
                            self.rec.error(
                                self.member, "consume", RuntimeError(str(msg.error())), expected=False
                            )
                        continue
                    tp = TopicPartition(str(msg.topic()), int(msg.partition() or 0))
                    offset = int(msg.offset() or 0)
                    items.append((tp, offset, bytes(msg.value() or b"")))
                    processed[tp] = offset + 1
                if items:
                    self.rec.record(self.member, items)
                if now() >= next_commit:
                    next_commit = now() + self.commit_interval_s
                    commit(dict(processed))
            commit(dict(processed))
        except Exception as exc:
            self.rec.error(self.member, "loop", exc, expected=False)
        finally:
            started = now()
            c.close()
            with self.rec.lock:
                self.rec.closes.append((self.member, now() - started, CLOSE_TIMEOUT_S))
            self.closed.set()

    def leave(self, timeout: float = 60.0) -> None:
        self.stopping.set()
        self.closed.wait(timeout)


Member = AsyncMember | ConfluentMember


def member_config(bootstrap: str, group: str, protocol: str, client: str) -> dict[str, Any]:
    if client == "handoff":
        return {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "max.poll.interval.ms": 30_000,
            "fetch.max.wait.ms": 100,
            "request.timeout.ms": REQUEST_TIMEOUT_MS,
            **PROTOCOLS[protocol],
        }
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "log_level": 2,  # librdkafka logs every refused connection on stderr otherwise
        "fetch.wait.max.ms": 100,
        "socket.timeout.ms": REQUEST_TIMEOUT_MS,
        "group.protocol": protocol,
    }
    if protocol == "classic":
        conf.update(
            {
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": CLASSIC_SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": 500,
            }
        )
    return conf


# ============================================================================================ faults
@dataclass
class FaultContext:
    cluster: Cluster
    proxy: FaultProxy
    topic: str
    coordinator: int
    leaders: dict[int, int]
    join: Callable[[], None]  # starts the joining member of every group (once)
    holds: list[threading.Event]
    revoke_pending: Callable[[], bool]
    #: Seconds during which the fault denied service that no client could route around (see FaultRun).
    outage_s: float = 0.0

    def leader_node(self) -> int:
        """A node leading partitions of the topic that is not the coordinator (else the coordinator)."""
        counts: dict[int, int] = defaultdict(int)
        for node in self.leaders.values():
            counts[node] += 1
        others = [n for n in counts if n != self.coordinator]
        return max(others, key=lambda n: counts[n]) if others else self.coordinator


#: The outage a fault scenario holds the fault for (the rest of a scenario waits for events).
OUTAGE_S = 3.0


def _outage() -> None:
    time.sleep(OUTAGE_S)  # the fault's length (injection), not synchronisation


def fault_kill_coordinator(ctx: FaultContext) -> None:
    ctx.cluster.kill_node(ctx.coordinator)
    ctx.join()
    _outage()
    ctx.cluster.restart_node(ctx.coordinator)


def fault_kill_leader(ctx: FaultContext) -> None:
    node = ctx.leader_node()
    ctx.cluster.kill_node(node)
    ctx.join()
    _outage()
    ctx.cluster.restart_node(node)


def fault_controlled_shutdown(ctx: FaultContext) -> None:
    node = ctx.leader_node()
    ctx.cluster.stop_node(node)  # SIGTERM; controlled.shutdown.enable=true moves its leaders first
    ctx.join()
    _outage()
    ctx.cluster.restart_node(node)


def fault_rolling_bounce(ctx: FaultContext) -> None:
    """kill -9 and restart every broker in turn, the coordinator last (ConsumerBounceTest)."""
    order = [n for n in ctx.cluster.node_ids if n != ctx.coordinator] + [ctx.coordinator]
    for i, node in enumerate(order):
        ctx.cluster.kill_node(node)
        if i == 0:
            ctx.join()
        time.sleep(1.0)  # each broker's outage (injection)
        ctx.cluster.restart_node(node)


def fault_pause_coordinator(ctx: FaultContext) -> None:
    """SIGSTOP: a hung peer -- connections stay open, nothing is answered -- then SIGCONT."""
    ctx.cluster.pause_node(ctx.coordinator)
    try:
        ctx.join()
        time.sleep(2 * OUTAGE_S)  # longer than broker.session.timeout.ms: it is fenced meanwhile
    finally:
        ctx.cluster.resume_node(ctx.coordinator)


def fault_coordinator_dies_mid_rebalance(ctx: FaultContext) -> None:
    """ConsumerBounceTest: processing is held so a revoke stays pending, a member joins (a rebalance starts),
    the coordinator is killed while the revoke is pending, then processing resumes and it restarts."""
    held = now()
    for h in ctx.holds:
        h.set()
    try:
        ctx.join()
        wait_for(ctx.revoke_pending, 60, "a revoke requested by the join (the rebalance in progress)")
        ctx.cluster.kill_node(ctx.coordinator)
        _outage()
    finally:
        for h in ctx.holds:
            h.clear()
        ctx.outage_s = now() - held  # the application itself held its records this long
    ctx.cluster.restart_node(ctx.coordinator)


def _proxy_fault(
    fault: Any, nodes: Callable[[FaultContext], list[int] | None]
) -> Callable[[FaultContext], None]:
    def run(ctx: FaultContext) -> None:
        started = now()
        ctx.proxy.set_fault(fault, nodes(ctx))
        try:
            ctx.join()
            time.sleep(2 * OUTAGE_S)  # the fault's length (injection)
        finally:
            ctx.proxy.heal()
            ctx.outage_s = now() - started  # the brokers behind it still lead: nothing to fail over to

    return run


FAULTS: dict[str, Callable[[FaultContext], None]] = {
    "kill-coordinator": fault_kill_coordinator,
    "kill-leader": fault_kill_leader,
    "controlled-shutdown": fault_controlled_shutdown,
    "rolling-bounce": fault_rolling_bounce,
    "pause-coordinator": fault_pause_coordinator,
    "coordinator-dies-mid-rebalance": fault_coordinator_dies_mid_rebalance,
    "proxy-latency": _proxy_fault(Latency(300), lambda ctx: None),
    "proxy-reset": _proxy_fault(ResetMidResponse(64), lambda ctx: [ctx.leader_node()]),
    "proxy-black-hole": _proxy_fault(BlackHole(), lambda ctx: [ctx.leader_node()]),
}
#: The faults whose clients go through the proxy.
PROXY_FAULTS = frozenset({"proxy-latency", "proxy-reset", "proxy-black-hole"})


# ============================================================================================ outcome
@dataclass
class GroupOutcome:
    group: str  # e.g. "handoff/consumer"
    acknowledged: int
    consumed: int
    missing: int
    duplicated: int  # processed more than once
    duplicated_after_commit: int  # processed again after a successful commit covered it
    longest_stall_s: float
    stalled_partition: str
    unexpected_errors: list[str]
    expected_errors: int
    lost_partitions: int
    longest_close_s: float
    close_bounded: bool
    log_duplicates: int  # produced values written at more than one offset (idempotence)
    unsettled: str = ""  # the group did not settle over the remaining members after the fault
    expected_error_samples: list[str] = field(default_factory=list)  # the first few, for the report

    def problems(self, outage_s: float) -> list[str]:
        """What breaks the guarantees (empty: all held)."""
        out = [self.unsettled] if self.unsettled else []
        if self.missing:
            out.append(f"{self.missing} acknowledged records never consumed")
        if self.duplicated_after_commit:
            out.append(f"{self.duplicated_after_commit} records processed again after their commit")
        if self.longest_stall_s > outage_s + STALL_BOUND_S:
            out.append(
                f"partition {self.stalled_partition} stalled {self.longest_stall_s:.1f} s "
                f"(bound: outage {outage_s:.1f} s + {STALL_BOUND_S:.0f} s)"
            )
        if self.unexpected_errors:
            out.append(f"errors reached the application: {self.unexpected_errors[:5]}")
        if not self.close_bounded:
            out.append(f"close() took {self.longest_close_s:.1f} s (timeout {CLOSE_TIMEOUT_S:.0f} s)")
        if self.log_duplicates:
            out.append(f"{self.log_duplicates} produced records were written twice")
        return out


def analyse(
    rec: Recorder, acked: dict[tuple[TopicPartition, int], tuple[float, bytes]], t_end: float
) -> GroupOutcome:
    with rec.lock:
        handed = list(rec.handed)
        commits = {tp: sorted(v) for tp, v in rec.commits.items()}
        closes = list(rec.closes)
    first: dict[tuple[TopicPartition, int], float] = {}
    count: dict[tuple[TopicPartition, int], int] = defaultdict(int)
    value_at: dict[bytes, set[tuple[TopicPartition, int]]] = defaultdict(set)
    again_after_commit = 0
    for t, _m, tp, off, value in sorted(handed, key=lambda h: h[0]):
        key = (tp, off)
        count[key] += 1
        value_at[value].add(key)
        if key not in first:
            first[key] = t
        elif any(tc < t and o > off for tc, o in commits.get(tp, ())):
            again_after_commit += 1
    stall = 0.0
    stalled = ""
    for key, (t_ack, _v) in acked.items():
        wait = first.get(key, t_end) - t_ack
        if wait > stall:
            stall, stalled = wait, f"{key[0].topic}-{key[0].partition}@{key[1]}"
    longest_close = max((s for _m, s, _t in closes), default=0.0)
    return GroupOutcome(
        group=rec.group,
        acknowledged=len(acked),
        consumed=sum(1 for k in acked if k in first),
        missing=sum(1 for k in acked if k not in first),
        duplicated=sum(1 for n in count.values() if n > 1),
        duplicated_after_commit=again_after_commit,
        longest_stall_s=round(max(stall, 0.0), 2),
        stalled_partition=stalled,
        unexpected_errors=list(rec.unexpected),
        expected_errors=len(rec.expected_errors),
        lost_partitions=rec.lost,
        longest_close_s=round(longest_close, 2),
        close_bounded=all(s <= t + CLOSE_SLACK_S for _m, s, t in closes),
        log_duplicates=sum(1 for keys in value_at.values() if len(keys) > 1),
        unsettled=rec.unsettled,
        expected_error_samples=list(rec.expected_errors[:5]),
    )


@dataclass
class FaultRun:
    fault: str
    #: The part of the fault no client can route around, which the stall bound builds on: 0 for a dead,
    #: stopped or hung node (the other two take over its leaders and coordinators once it is fenced), the
    #: fault's length for a proxy fault (the broker behind it stays the leader), the time the application
    #: held its records for ``coordinator-dies-mid-rebalance``.
    outage_s: float
    fault_s: float  # from the fault's injection until it healed (node restarted and serving / proxy healed)
    producer_failed: list[str]
    groups: list[GroupOutcome]
    elapsed_s: float

    def problems(self) -> list[str]:
        out = (
            [f"producer: {len(self.producer_failed)} records failed: {self.producer_failed[:3]}"]
            if self.producer_failed
            else []
        )
        for g in self.groups:
            out += [f"{g.group}: {p}" for p in g.problems(self.outage_s)]
        return out


# ============================================================================================ scenario
def _settled(members: Sequence[Member], partitions: int) -> bool:
    owned = [m.owned for m in members]
    union: set[TopicPartition] = set().union(*owned)
    return len(union) == partitions and sum(len(o) for o in owned) == partitions and all(owned)


def _settled_check(members: Sequence[Member]) -> Callable[[], bool]:
    return lambda: _settled(members, PARTITIONS)


def _all_consumed(rec: Recorder, acked: Collection[tuple[TopicPartition, int]]) -> Callable[[], bool]:
    wanted = set(acked)
    return lambda: wanted <= rec.consumed()


def run_fault(
    cluster: Cluster,
    proxy: FaultProxy,
    fault: str,
    *,
    protocols: Sequence[str] = ("classic", "consumer"),
    clients: Sequence[str] = ("handoff",),
    rate: float = 120.0,
    settle_timeout: float = 90.0,
    drain_timeout: float = 90.0,
) -> FaultRun:
    """Run one fault scenario (see the module docstring) on a healthy ``cluster``; heal it afterwards."""
    if fault not in FAULTS:
        raise ValueError(f"fault: {fault!r} is not known; allowed values: {', '.join(FAULTS)}")
    started = now()
    topic = f"faults-{fault}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    bootstrap = proxy.bootstrap_servers if fault in PROXY_FAULTS else cluster.bootstrap_servers
    labels = [f"{c}/{p}" for c in clients for p in protocols]
    gids = group_ids(f"faults-{uuid.uuid4().hex[:6]}", [lb.replace("/", "-") for lb in labels])
    recs = {lb: Recorder(lb) for lb in labels}
    groups: dict[str, list[Member]] = {lb: [] for lb in labels}

    def new_member(label: str, name: str) -> Member:
        client, protocol = label.split("/")
        conf = member_config(bootstrap, gids[label.replace("/", "-")], protocol, client)
        m: Member = (
            AsyncMember(name, recs[label], conf, topic)
            if client == "handoff"
            else ConfluentMember(name, recs[label], conf, topic)
        )
        groups[label].append(m)
        m.start()
        return m

    producer: SteadyProducer | None = None
    joined = threading.Event()
    acked: dict[tuple[TopicPartition, int], tuple[float, bytes]] = {}
    outage = fault_s = 0.0
    try:
        for lb in labels:
            for name in ("A", "B"):
                new_member(lb, name)
        for lb in labels:
            wait_for(_settled_check(groups[lb]), settle_timeout, f"{lb}: A and B share the partitions")
        producer = SteadyProducer(cluster.bootstrap_servers, topic, PARTITIONS, rate)
        producer.start()
        wait_for(
            lambda: all(len({tp for tp, _ in r.consumed()}) == PARTITIONS for r in recs.values()),
            settle_timeout,
            "every group consuming every partition",
        )

        def join() -> None:
            if not joined.is_set():
                joined.set()
                for lb in labels:
                    new_member(lb, "C")

        def revoke_pending() -> bool:
            return any(
                isinstance(m, AsyncMember) and bool(m._revoking & m.owned)
                for ms in groups.values()
                for m in ms
            )

        ctx = FaultContext(
            cluster,
            proxy,
            topic,
            coordinator_node(cluster, next(iter(gids.values()))),
            leaders(cluster, topic),
            join,
            [m.hold for ms in groups.values() for m in ms if isinstance(m, AsyncMember)],
            revoke_pending,
        )
        t_fault = now()
        try:
            FAULTS[fault](ctx)
        finally:
            proxy.heal()
            cluster.heal()
        fault_s = now() - t_fault
        outage = ctx.outage_s
        join()
        for lb in labels:  # the first member leaves once the fault healed
            groups[lb][0].leave()
        deadline = now() + settle_timeout
        for lb in labels:
            try:
                wait_for(
                    _settled_check(groups[lb][1:]), deadline - now(), f"{lb}: B and C share the partitions"
                )
            except AssertionError:  # measured and reported; the scenario goes on
                owners = [sorted(tp.partition for tp in m.owned) for m in groups[lb]]
                recs[
                    lb
                ].unsettled = f"B and C did not share the partitions in {settle_timeout:.0f} s: {owners}"
        acked = producer.finish()
        for lb in labels:
            with contextlib.suppress(AssertionError):  # a missing record is measured below, not raised here
                wait_for(_all_consumed(recs[lb], acked), drain_timeout, f"{lb}: every acknowledged record")
        t_end = now()
    finally:
        if producer is not None and producer.is_alive():  # an error above: stop writing
            with contextlib.suppress(Exception):
                producer.finish(10)
        for ms in groups.values():
            for m in ms:
                m.stopping.set()
        for ms in groups.values():
            for m in ms:
                m.closed.wait(60)
    assert producer is not None
    return FaultRun(
        fault=fault,
        outage_s=round(outage, 2),
        fault_s=round(fault_s, 2),
        producer_failed=list(producer.acked.failed),
        groups=[analyse(recs[lb], acked, t_end) for lb in labels],
        elapsed_s=round(now() - started, 1),
    )


# ============================================================================================ CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--faults", default="all", help=f"comma-separated, of: {', '.join(FAULTS)} (default: all)"
    )
    parser.add_argument("--protocols", default="classic,consumer", help="comma-separated: classic, consumer")
    parser.add_argument("--clients", default="handoff,confluent", help="comma-separated: handoff, confluent")
    parser.add_argument("--rate", type=float, default=120.0, help="records/s produced")
    parser.add_argument("--json", default="", help="also write the results as JSON to this file")


def cli(args: argparse.Namespace) -> int:
    """Run the scenarios on a fresh 3-node cluster; exit 1 when kafka-handoff broke a guarantee.
    (``handoff bench faults --pipeline`` runs :func:`kafka_handoff.bench.pipeline_faults.cli` instead.)"""
    faults = (
        list(FAULTS) if args.faults == "all" else [f.strip() for f in args.faults.split(",") if f.strip()]
    )
    protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = [f for f in faults if f not in FAULTS]
    if unknown or not faults:
        print(f"handoff: --faults: unknown {unknown}; allowed values: {', '.join(FAULTS)}", file=sys.stderr)
        return 2
    if not protocols or not set(protocols) <= set(PROTOCOLS):
        print(f"handoff: --protocols: {protocols}; allowed values: classic, consumer", file=sys.stderr)
        return 2
    if not clients or not set(clients) <= {"handoff", "confluent"}:
        print(f"handoff: --clients: {clients}; allowed values: handoff, confluent", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    print("starting a 3-node cluster behind the fault proxy ...", flush=True)
    cluster, proxy = start_fault_cluster()
    runs: list[FaultRun] = []
    try:
        for fault in faults:
            print(f"-- {fault}", flush=True)
            run = run_fault(cluster, proxy, fault, protocols=protocols, clients=clients, rate=args.rate)
            runs.append(run)
            _print_run(run)
    finally:
        cluster.stop()
        proxy.close()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump([asdict(r) for r in runs], fh, indent=2)
    bad = [p for r in runs for p in r.problems() if not p.startswith("confluent")]
    return 1 if bad else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="handoff bench faults", description=__doc__)
    add_arguments(parser)
    return cli(parser.parse_args(argv))


def _print_run(run: FaultRun) -> None:
    failures = len(run.producer_failed)
    print(
        f"   fault {run.fault_s:.1f} s (outage {run.outage_s:.1f} s), scenario {run.elapsed_s:.0f} s, "
        f"producer failures {failures}"
    )
    head = (
        f"   {'group':<20}{'acked':>7}{'consumed':>9}{'missing':>8}{'dup':>5}{'dup>commit':>11}"
        f"{'stall s':>9}{'close s':>8}  bounded  errors"
    )
    print(head)
    for g in run.groups:
        print(
            f"   {g.group:<20}{g.acknowledged:>7}{g.consumed:>9}{g.missing:>8}{g.duplicated:>5}"
            f"{g.duplicated_after_commit:>11}{g.longest_stall_s:>9.1f}{g.longest_close_s:>8.1f}  "
            f"{'yes' if g.close_bounded else 'NO':<7}  {len(g.unexpected_errors)}"
        )
    for p in run.problems():
        print(f"   ! {p}")
    print(flush=True)
