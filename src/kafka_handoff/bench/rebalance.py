"""Behaviour during rebalances: ``handoff bench rebalance``.

A producer writes a steady stream (``--rate`` records/s, round-robin over the partitions).  Three members
consume it with *asynchronous processing*: a poll loop hands records to a thread pool, at most
``--in-flight`` records per partition run at once, and offsets are committed in order as processing
completes.  Each record takes ``--work-ms``; every ``--slow-every``-th offset of a partition takes
``--slow-ms`` (a slow downstream call; staggered across partitions), so at any moment some partitions have
a slow record in flight.
At ``--join-at`` seconds a fourth member joins; at ``--leave-at`` one of the first three leaves (graceful
close); at ``--stop-at`` the producer stops and the members drain before they are stopped.

Two ways of handling a revocation are compared, each member in its own process:

* **kafka-handoff, KIP-983**: the loop stops starting records of a partition whose revoke was requested
  (``to_be_revoked_partitions``) and calls ``delay_revoke`` while its in-flight records run; the revoke
  completes (final commit in ``on_partitions_revoked``) once they are done.  Every other partition keeps
  going meanwhile.
* **confluent-kafka, the usual pattern** (cooperative-sticky on the classic protocol, ``group.protocol=
  consumer`` for KIP-848): ``on_revoke`` blocks until the revoked partitions' in-flight records are done,
  then commits -- inside ``consume()``, so no record of any partition starts meanwhile.

Reported per scenario: records processed twice and never, for each event the rate of the partitions the
event did not move (minimum over any 1-second window, relative to their rate in the seconds before) and
their longest gap between two processed records (with the longest gap of the steady state before, for
scale), and the time from the joiner's ``subscribe`` to its first processed record.  A PNG shows each
member's processed records/s over time.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CLIENT_LABELS",
    "SLOW_LOOP",
    "ScenarioConfig",
    "analyse",
    "fenced_table",
    "main",
    "run_benchmark",
    "run_scenario",
]

CLIENT_LABELS = {
    "handoff": "kafka-handoff (KIP-983 delay_revoke)",
    "confluent": "confluent-kafka (block in on_revoke)",
    "java": "Java KafkaConsumer (commit in onPartitionsRevoked)",
}


@dataclass
class ScenarioConfig:
    partitions: int = 12
    rate: int = 1200  # records/s produced, in total
    value_bytes: int = 100
    work_ms: float = 5.0
    slow_every: int = 100
    slow_ms: float = 1000.0
    in_flight: int = 16  # per partition
    workers: int = 32  # per member
    poll_timeout: float = 0.02  # the loop starts new work at least this often
    steady_s: float = 8.0  # after the first three members are stable, until the fourth joins
    leave_after: float = 14.0  # seconds from the join until a member leaves
    stop_after: float = 12.0  # seconds from the leave until the producer stops
    start_timeout: float = 60.0
    drain_timeout: float = 30.0
    commit_interval: float = 0.2
    # The "slow loop" case (issue 26): each loop iteration of member m<i> also takes
    # loop_interval_ms[(i - 1) % len] (its slow processing step), max.poll.interval.ms (the rebalance
    # timeout) is max_poll_interval_ms, and with always_delay the kafka-handoff loop asks to delay every
    # revoke for as long as delay_revoke() grants it (continuous delays).
    loop_interval_ms: list[float] = field(default_factory=list)
    max_poll_interval_ms: int = 300_000
    always_delay: bool = False

    def loop_interval_s(self, member: str) -> float:
        if not self.loop_interval_ms:
            return 0.0
        index = int(member[1:]) - 1 if member[1:].isdigit() else 0
        return self.loop_interval_ms[index % len(self.loop_interval_ms)] / 1000.0


#: ``handoff bench rebalance --case slow-loop``: loop intervals 5-30 % of a 10 s rebalance timeout (none of
#: them divides it), continuous delays.
SLOW_LOOP: dict[str, Any] = {
    "loop_interval_ms": [700.0, 1_300.0, 1_900.0, 2_900.0],
    "max_poll_interval_ms": 10_000,
    "always_delay": True,
}


# ============================================================================================ member side
class _Partition:
    """One owned partition: records waiting, the in-order commit position and the records in flight (the
    documented pattern's :class:`~kafka_handoff.consumer.offset_tracker.OffsetTracker`)."""

    __slots__ = ("abandoned", "committed", "futures", "lock", "queued", "revoking", "sent", "tracker")

    def __init__(self) -> None:
        from kafka_handoff.consumer.offset_tracker import OffsetTracker

        self.queued: deque[tuple[int, Any]] = deque()  # (offset, record) fetched, not started
        self.tracker = OffsetTracker()
        self.committed: int | None = None
        self.sent: int | None = None
        self.revoking = False
        self.abandoned = False
        self.futures: set[Future[None]] = set()
        self.lock = threading.Lock()


class _Member:
    """The processing core both members share: pool, per-partition state, in-order commit positions and
    the log (processed records and events with wall-clock times)."""

    def __init__(self, name: str, cfg: ScenarioConfig) -> None:
        self.name = name
        self.cfg = cfg
        self.parts: dict[int, _Partition] = {}
        self.pool = ThreadPoolExecutor(cfg.workers, thread_name_prefix=f"{name}-work")
        self.processed: list[tuple[float, int, int]] = []  # (time, partition, offset)
        self.slow_polls: list[tuple[float, float]] = []  # (time, seconds) of poll()/consume() calls > 50 ms
        self.events: list[tuple[float, str, list[int]]] = []
        self.discarded = 0
        self.refused_delays = 0
        self._log_lock = threading.Lock()

    def event(self, kind: str, partitions: Iterable[int] = ()) -> None:
        self.events.append((time.time(), kind, sorted(partitions)))

    def work_s(self, partition: int, offset: int) -> float:
        """Depends on the record only (every member sees the same work).  The slow offsets are staggered
        across partitions, so the slow calls do not all start at the same moment."""
        cfg = self.cfg
        if cfg.slow_every > 0 and (offset + 37 * partition) % cfg.slow_every == cfg.slow_every - 1:
            return cfg.slow_ms / 1000.0
        return cfg.work_ms / 1000.0

    def queue(self, partition: int, offset: int, record: Any) -> None:
        p = self.parts.get(partition)
        if p is None:
            p = self.parts[partition] = _Partition()
        if not p.revoking and not p.abandoned:
            p.queued.append((offset, record))

    def start_work(self) -> None:
        for partition, p in self.parts.items():
            if p.revoking or p.abandoned:
                continue
            while p.queued and p.tracker.in_flight < self.cfg.in_flight:
                offset, _record = p.queued.popleft()
                p.tracker.started(offset)
                fut = self.pool.submit(self._run, partition, p, offset)
                p.futures.add(fut)
                fut.add_done_callback(p.futures.discard)

    def _run(self, partition: int, p: _Partition, offset: int) -> None:
        time.sleep(self.work_s(partition, offset))
        with p.lock:  # against abandon(): a result is recorded before the partition is abandoned, or never
            if p.abandoned:
                self.discarded += 1
                return
            with self._log_lock:
                self.processed.append((time.time(), partition, offset))
            p.tracker.finished(offset)

    def commit_positions(
        self, partitions: Iterable[int] | None = None, *, force: bool = False
    ) -> dict[int, int]:
        """Committable offsets not sent yet (``force``: also those sent but not known to be committed)."""
        out: dict[int, int] = {}
        for partition in self.parts if partitions is None else partitions:
            p = self.parts.get(partition)
            if p is None or p.abandoned:
                continue
            position = p.tracker.committable
            if position is None or position == p.committed or (position == p.sent and not force):
                continue
            out[partition] = position
        return out

    def mark_sent(self, offsets: dict[int, int]) -> None:
        for partition, offset in offsets.items():
            p = self.parts.get(partition)
            if p is not None:
                p.sent = offset

    def mark_committed(self, offsets: dict[int, int]) -> None:
        for partition, offset in offsets.items():
            p = self.parts.get(partition)
            if p is not None:
                p.committed = max(offset, p.committed or 0)

    def stop_starting(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            p = self.parts.get(partition)
            if p is not None:
                p.revoking = True
                p.queued.clear()

    def wait_in_flight(self, partitions: Iterable[int], timeout_s: float = 60.0) -> None:
        futures = [
            f for part in partitions if (p := self.parts.get(part)) is not None for f in list(p.futures)
        ]
        wait_futures(futures, timeout=timeout_s)

    def abandon(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            p = self.parts.pop(partition, None)
            if p is not None:
                with p.lock:
                    p.abandoned = True
                p.queued.clear()
                for f in list(p.futures):
                    f.cancel()

    def forget(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            self.parts.pop(partition, None)

    def busy(self, partition: int) -> bool:
        p = self.parts.get(partition)
        return p is not None and p.tracker.in_flight > 0

    def dump(self, path: Path, extra: dict[str, Any]) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self._log_lock:
            processed = list(self.processed)
        data = {"name": self.name, "events": self.events, "processed": processed, "discarded": self.discarded,
                "slow_polls": self.slow_polls, "refused_delays": self.refused_delays, **extra}  # fmt: skip
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        tmp.replace(path)


def _member_handoff(args: argparse.Namespace, cfg: ScenarioConfig, stop: threading.Event) -> dict[str, Any]:
    from kafka_handoff.consumer import Consumer
    from kafka_handoff.consumer.listener import RebalanceConsumer, RebalanceListenerBase
    from kafka_handoff.errors import KafkaError
    from kafka_handoff.types import OffsetAndMetadata, TopicPartition

    m = _Member(args.name, cfg)
    topic = args.topic

    def tps(offsets: dict[int, int]) -> dict[TopicPartition, OffsetAndMetadata]:
        return {TopicPartition(topic, p): OffsetAndMetadata(o) for p, o in offsets.items()}

    class Listener(RebalanceListenerBase):
        def on_partitions_assigned(self, partitions: Any, consumer: RebalanceConsumer) -> None:
            for tp in partitions:
                m.parts.setdefault(tp.partition, _Partition())
            m.event("assigned", [tp.partition for tp in partitions])

        def on_partitions_revoked(self, partitions: Any, consumer: RebalanceConsumer) -> None:
            parts = [tp.partition for tp in partitions]
            m.stop_starting(parts)
            m.wait_in_flight(parts)  # only at close (or a refused delay): normally nothing is in flight
            final = m.commit_positions(parts, force=True)
            if final:
                try:
                    consumer.commit_sync(tps(final))
                    m.mark_committed(final)
                except KafkaError as exc:
                    print(f"{m.name}: final commit failed: {exc}", file=sys.stderr, flush=True)
            m.forget(parts)
            m.event("revoked", parts)

        def on_partitions_lost(self, partitions: Any, consumer: RebalanceConsumer) -> None:
            parts = [tp.partition for tp in partitions]
            m.abandon(parts)
            m.event("lost", parts)

    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_servers,
        "group.id": args.group,
        "group.protocol": args.protocol,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "client.id": args.name,
        "max.poll.interval.ms": cfg.max_poll_interval_ms,
    }
    if args.protocol == "classic":
        config["partition.assignment.strategy"] = "cooperative-sticky"
        config["session.timeout.ms"] = min(45_000, cfg.max_poll_interval_ms)
    consumer = Consumer(config)
    loop_s = cfg.loop_interval_s(args.name)
    consumer.set_rebalance_listener(Listener())
    m.event("subscribe")
    consumer.subscribe([topic])
    next_commit = 0.0
    delayed: set[int] = set()

    def on_commit(offsets: dict[TopicPartition, OffsetAndMetadata], error: BaseException | None) -> None:
        if error is None:
            m.mark_committed({tp.partition: om.offset for tp, om in offsets.items()})
        else:
            for tp in offsets:
                p = m.parts.get(tp.partition)
                if p is not None:
                    p.sent = None

    def one_poll() -> None:
        nonlocal next_commit
        t_poll = time.time()
        records = consumer.poll(cfg.poll_timeout)
        took = time.time() - t_poll
        if took > 0.05:
            m.slow_polls.append((t_poll, took))
        for tp, batch in records.by_partition().items():
            for r in batch:
                m.queue(tp.partition, r.offset, None)
        revoking = {tp.partition for tp in records.to_be_revoked_partitions}
        new = revoking - delayed
        if new:
            m.event("revoke_requested", new)
        m.stop_starting(revoking)
        delayed.intersection_update(revoking)
        for partition in revoking:
            if m.busy(partition) or cfg.always_delay:
                if consumer.delay_revoke([TopicPartition(topic, partition)]):
                    delayed.add(partition)
                else:
                    m.refused_delays += 1
                    print(f"{m.name}: delay_revoke refused for {partition}", file=sys.stderr, flush=True)
        m.start_work()
        now = time.monotonic()
        if now >= next_commit:
            next_commit = now + cfg.commit_interval
            offsets = m.commit_positions()
            if offsets:
                m.mark_sent(offsets)
                consumer.commit_async(tps(offsets), on_commit)

    print("ready", flush=True)
    while not stop.is_set():
        one_poll()
        if loop_s:
            stop.wait(loop_s)  # the slow part of the loop (slow-loop case)
    # Graceful stop: start nothing new, let the in-flight records finish, commit, leave.
    m.event("stopping")
    for p in m.parts.values():
        p.queued.clear()
    if consumer.assignment():
        consumer.pause(consumer.assignment())
    deadline = time.monotonic() + 60
    while any(p.tracker.in_flight for p in m.parts.values()) and time.monotonic() < deadline:
        one_poll()
    final = m.commit_positions(force=True)
    if final:
        consumer.commit_sync(tps(final))
        m.mark_committed(final)
    consumer.close()
    m.event("closed")
    return {"member": m}


def _member_confluent(args: argparse.Namespace, cfg: ScenarioConfig, stop: threading.Event) -> dict[str, Any]:
    import confluent_kafka

    m = _Member(args.name, cfg)
    topic = args.topic

    def tps(offsets: dict[int, int]) -> list[Any]:
        return [confluent_kafka.TopicPartition(topic, p, o) for p, o in offsets.items()]

    def on_assign(consumer: Any, partitions: list[Any]) -> None:
        for tp in partitions:
            m.parts.setdefault(tp.partition, _Partition())
        m.event("assigned", [tp.partition for tp in partitions])

    def on_revoke(consumer: Any, partitions: list[Any]) -> None:
        # The usual pattern: wait here (inside consume()) until the revoked partitions' work is done.
        parts = [tp.partition for tp in partitions]
        m.event("revoke_requested", parts)
        m.stop_starting(parts)
        m.wait_in_flight(parts)
        final = m.commit_positions(parts, force=True)
        if final:
            try:
                consumer.commit(offsets=tps(final), asynchronous=False)
                m.mark_committed(final)
            except confluent_kafka.KafkaException as exc:
                print(f"{m.name}: final commit failed: {exc}", file=sys.stderr, flush=True)
        m.forget(parts)
        m.event("revoked", parts)

    def on_lost(consumer: Any, partitions: list[Any]) -> None:
        parts = [tp.partition for tp in partitions]
        m.abandon(parts)
        m.event("lost", parts)

    def on_commit(err: Any, partitions: list[Any]) -> None:
        if err is None:
            m.mark_committed({tp.partition: tp.offset for tp in partitions if tp.error is None})

    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_servers,
        "group.id": args.group,
        "group.protocol": args.protocol,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "client.id": args.name,
        "on_commit": on_commit,
        "max.poll.interval.ms": cfg.max_poll_interval_ms,
    }
    if args.protocol == "classic":
        config["partition.assignment.strategy"] = "cooperative-sticky"
        config["session.timeout.ms"] = min(45_000, cfg.max_poll_interval_ms)
    consumer = confluent_kafka.Consumer(config)
    loop_s = cfg.loop_interval_s(args.name)
    m.event("subscribe")
    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    next_commit = 0.0
    print("ready", flush=True)
    while not stop.is_set():
        t_poll = time.time()
        msgs = consumer.consume(num_messages=500, timeout=cfg.poll_timeout)
        took = time.time() - t_poll
        if took > 0.05:
            m.slow_polls.append((t_poll, took))
        for msg in msgs:
            partition, offset = msg.partition(), msg.offset()
            if msg.error() is None and partition is not None and offset is not None:
                m.queue(partition, offset, None)
        m.start_work()
        now = time.monotonic()
        if now >= next_commit:
            next_commit = now + cfg.commit_interval
            offsets = m.commit_positions()
            if offsets:
                m.mark_sent(offsets)
                try:
                    consumer.commit(offsets=tps(offsets), asynchronous=True)
                except confluent_kafka.KafkaException:
                    for p in offsets:
                        m.parts[p].sent = None
        if loop_s:
            stop.wait(loop_s)  # the slow part of the loop (slow-loop case)
    m.event("stopping")
    consumer.close()  # on_revoke waits for the in-flight records and commits, then the member leaves
    m.event("closed")
    return {"member": m}


def member_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_handoff.bench.rebalance member")
    parser.add_argument("--client", choices=("confluent", "handoff"), required=True)
    parser.add_argument("--protocol", choices=("classic", "consumer"), required=True)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--config", required=True, help="ScenarioConfig as JSON")
    args = parser.parse_args(argv)
    cfg = ScenarioConfig(**json.loads(args.config))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    run = _member_handoff if args.client == "handoff" else _member_confluent
    result = run(args, cfg, stop)
    member: _Member = result["member"]
    member.dump(args.out, {"client": args.client, "protocol": args.protocol})
    return 0


# ============================================================================================ orchestration
class _Producer:
    """Produces ``rate`` records/s round-robin over the partitions from a background thread."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int, value_bytes: int) -> None:
        import confluent_kafka

        self._producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.value = b"v" * value_bytes
        self.counts = [0] * partitions
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.errors += 1

    def _run(self) -> None:
        t0 = time.monotonic()
        sent = 0
        i = 0
        while not self._stop.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while sent < due:
                partition = i % self.partitions
                self._producer.produce(
                    self.topic, self.value, partition=partition, on_delivery=self._on_delivery
                )
                self.counts[partition] += 1
                sent += 1
                i += 1
            self._producer.poll(0)
            time.sleep(0.01)
        remaining = self._producer.flush(30)
        self.errors += remaining

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join(60)
        return list(self.counts)


@dataclass
class _MemberProc:
    name: str
    proc: subprocess.Popen[str]
    out: Path
    log: Path


def _start_member(
    client: str,
    protocol: str,
    bootstrap: str,
    topic: str,
    group: str,
    name: str,
    cfg: ScenarioConfig,
    out_dir: Path,
) -> _MemberProc:
    out = out_dir / f"{name}.json"
    log = out_dir / f"{name}.log"
    if client == "java":
        from kafka_handoff.bench.peers import slow_loop_member_command

        options = {
            "protocol": protocol, "bootstrap-servers": bootstrap, "topic": topic, "group": group,
            "name": name, "out": str(out), "work-ms": repr(cfg.work_ms), "slow-every": str(cfg.slow_every),
            "slow-ms": repr(cfg.slow_ms), "in-flight": str(cfg.in_flight), "workers": str(cfg.workers),
            "poll-timeout": repr(cfg.poll_timeout), "commit-interval": repr(cfg.commit_interval),
            "max-poll-interval-ms": str(cfg.max_poll_interval_ms),
            "loop-ms": repr(1000 * cfg.loop_interval_s(name)),
        }  # fmt: skip
        cmd = slow_loop_member_command(options)
        with open(log, "w", encoding="utf-8") as logf:
            proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, text=True)
        return _MemberProc(name, proc, out, log)
    cmd = [
        sys.executable, "-m", "kafka_handoff.bench.rebalance", "member",
        "--client", client, "--protocol", protocol, "--bootstrap-servers", bootstrap, "--topic", topic,
        "--group", group, "--name", name, "--out", str(out), "--config", json.dumps(asdict(cfg)),
    ]  # fmt: skip
    with open(log, "w", encoding="utf-8") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, text=True)
    return _MemberProc(name, proc, out, log)


def _sleep_until(t: float) -> None:
    while True:
        remaining = t - time.monotonic()
        if remaining <= 0:
            return
        time.sleep(min(remaining, 0.2))


def _wait_stable(bootstrap: str, group: str, members: int, partitions: int, deadline: float) -> float:
    """Wait until ``members`` members own all partitions between them, each at least one, and the group
    is stable; returns that moment (``time.monotonic()``)."""
    from kafka_handoff.admin import AdminClient

    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        while time.monotonic() < deadline:
            try:
                desc = admin.describe_groups([group], timeout=5).get(group)
            except Exception:
                desc = None
            if desc is not None and len(desc.members) == members and desc.state.lower() == "stable":
                owned = [m.assignment for m in desc.members]
                settled = all(
                    m.target_assignment is None or set(m.target_assignment) == set(m.assignment)
                    for m in desc.members
                )
                if settled and all(owned) and len({tp for a in owned for tp in a}) == partitions:
                    return time.monotonic()
            time.sleep(0.2)
    raise TimeoutError(f"group {group} did not become stable with {members} members in time")


def _committed_total(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    from kafka_handoff.admin import AdminClient
    from kafka_handoff.types import TopicPartition

    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        offsets = admin.list_group_offsets(
            group, [TopicPartition(topic, p) for p in range(partitions)], timeout=10
        )
    return [
        (om.offset if (om := offsets.get(TopicPartition(topic, p))) is not None else 0)
        for p in range(partitions)
    ]


def run_scenario(
    bootstrap: str,
    client: str,
    protocol: str,
    cfg: ScenarioConfig,
    work_dir: Path,
    progress: Callable[[str], None] = lambda msg: None,
) -> dict[str, Any]:
    """Run one scenario (three members, a fourth joins, one leaves) and analyse it."""
    from kafka_handoff.bench.throughput import create_topic, delete_topic

    run_id = uuid.uuid4().hex[:8]
    topic = create_topic(bootstrap, cfg.partitions, prefix=f"bench-rebalance-{client}-{protocol}")
    group = f"bench-rebalance-{client}-{protocol}-{run_id}"
    out_dir = work_dir / f"{client}-{protocol}-{run_id}"
    out_dir.mkdir(parents=True, exist_ok=True)
    producer = _Producer(bootstrap, topic, cfg.partitions, cfg.rate, cfg.value_bytes)
    members: dict[str, _MemberProc] = {}
    marks: dict[str, float] = {}
    try:
        t0 = time.monotonic()
        wall0 = time.time()
        for name in ("m1", "m2", "m3"):
            members[name] = _start_member(client, protocol, bootstrap, topic, group, name, cfg, out_dir)
        t_stable = _wait_stable(bootstrap, group, 3, cfg.partitions, time.monotonic() + cfg.start_timeout)
        # The stream starts once the group is stable, so the steady state has no backlog to catch up on.
        producer.start()
        marks["stable"] = time.time()
        progress(f"  {client}/{protocol}: 3 members stable after {t_stable - t0:.1f} s; producing")
        _sleep_until(t_stable + cfg.steady_s)
        members["m4"] = _start_member(client, protocol, bootstrap, topic, group, "m4", cfg, out_dir)
        marks["join_started"] = time.time()
        progress(f"  {client}/{protocol}: m4 joins")
        t_join = time.monotonic()
        _sleep_until(t_join + cfg.leave_after)
        marks["leave"] = time.time()
        members["m3"].proc.send_signal(signal.SIGTERM)
        progress(f"  {client}/{protocol}: m3 leaves")
        _sleep_until(t_join + cfg.leave_after + cfg.stop_after)
        produced = producer.stop()
        marks["produce_stopped"] = time.time()
        progress(f"  {client}/{protocol}: producer stopped ({sum(produced):,} records); draining")
        deadline = time.monotonic() + cfg.drain_timeout
        committed: list[int] = []
        while time.monotonic() < deadline:
            try:
                committed = _committed_total(bootstrap, group, topic, cfg.partitions)
            except Exception:
                committed = []
            if committed and all(c >= n for c, n in zip(committed, produced, strict=True)):
                break
            time.sleep(0.5)
        marks["drained"] = time.time()
    finally:
        for mp in members.values():
            if mp.proc.poll() is None:
                mp.proc.send_signal(signal.SIGTERM)
        for mp in members.values():
            try:
                mp.proc.wait(90)
            except subprocess.TimeoutExpired:
                mp.proc.kill()
                mp.proc.wait()
        if "produce_stopped" not in marks:
            producer.stop()
        delete_topic(bootstrap, topic)
    logs: dict[str, dict[str, Any]] = {}
    failures: list[str] = []
    for name, mp in members.items():
        if mp.out.is_file():
            logs[name] = json.loads(mp.out.read_text(encoding="utf-8"))
        else:
            tail = mp.log.read_text(encoding="utf-8", errors="replace")[-800:] if mp.log.is_file() else ""
            failures.append(f"{name} exit {mp.proc.returncode}: {tail}")
    result = analyse(logs, produced, marks, wall0, cfg)
    result.update(
        client=client,
        label=CLIENT_LABELS[client],
        protocol=protocol,
        topic=topic,
        group=group,
        producer_errors=producer.errors,
        committed_at_end=committed,
    )
    if failures:
        result["error"] = "; ".join(failures)
    return result


# ============================================================================================ analysis
_CHANGES = ("assigned", "revoked", "lost")


def _owners(logs: dict[str, dict[str, Any]]) -> list[tuple[float, str, str, list[int]]]:
    """Every membership event of every member, by time: (t, member, kind, partitions)."""
    out = [
        (float(t), name, kind, list(parts)) for name, log in logs.items() for t, kind, parts in log["events"]
    ]
    out.sort()
    return out


def analyse(
    logs: dict[str, dict[str, Any]],
    produced: Sequence[int],
    marks: dict[str, float],
    wall0: float,
    cfg: ScenarioConfig,
) -> dict[str, Any]:
    """Duplicates, gaps, per-event stall figures and the timeline from the members' logs."""
    seen: dict[tuple[int, int], int] = {}
    by_partition: dict[int, list[float]] = {p: [] for p in range(cfg.partitions)}
    by_member: dict[str, list[float]] = {}
    for name, log in logs.items():
        times = by_member.setdefault(name, [])
        for t, partition, offset in log["processed"]:
            key = (int(partition), int(offset))
            seen[key] = seen.get(key, 0) + 1
            by_partition[int(partition)].append(float(t))
            times.append(float(t))
    for times in by_partition.values():
        times.sort()
    total_processed = sum(seen.values())
    duplicates = total_processed - len(seen)
    missing = sum(1 for p, n in enumerate(produced) for o in range(n) if (p, o) not in seen)
    beyond = sum(1 for (p, o) in seen if p >= len(produced) or o >= produced[p])

    events = _owners(logs)
    # Event times: the joiner's subscribe call, and the leaver's stop signal.
    t_join = next(
        (t for t, name, kind, _ in events if name == "m4" and kind == "subscribe"), marks.get("join_started")
    )
    t_leave = marks.get("leave")
    scenario_events = [e for e in (("m4 joins", t_join), ("m3 leaves", t_leave)) if e[1] is not None]
    first_record_m4 = min(by_member.get("m4", []), default=None)
    m4_assigned = min(
        (t for t, name, kind, parts in events if name == "m4" and kind == "assigned" and parts), default=None
    )
    origin = marks.get("stable", wall0)  # the stream starts when the first three members are stable
    steady_start = origin + 1.0
    out_events: list[dict[str, Any]] = []
    prev_end = steady_start
    for i, (label, t_ev) in enumerate(scenario_events):
        assert t_ev is not None
        next_t = (
            scenario_events[i + 1][1]
            if i + 1 < len(scenario_events)
            else marks.get("produce_stopped", t_ev + 30)
        )
        assert next_t is not None
        changes = [t for t, _n, kind, parts in events if t_ev <= t < next_t and kind in _CHANGES and parts]
        settle = max(changes, default=t_ev)
        end = min(next_t, max(settle, t_ev + 1.0) + 1.0)
        moved = {p for t, _n, kind, parts in events if t_ev <= t <= end and kind in _CHANGES for p in parts}
        unaffected = [p for p in range(cfg.partitions) if p not in moved]
        steady_from = max(prev_end, t_ev - 6.0)
        ev: dict[str, Any] = {
            "event": label,
            "t": t_ev - origin,
            "settled_after_s": settle - t_ev,
            "window_s": end - t_ev,
            "moved_partitions": sorted(moved),
            "unaffected_partitions": unaffected,
        }
        if unaffected and t_ev - steady_from >= 1.0:
            merged = sorted(t for p in unaffected for t in by_partition[p])
            steady_rate = _count(merged, steady_from, t_ev) / (t_ev - steady_from)
            min_rate = _min_window_rate(merged, t_ev, end, 1.0)
            ev["steady_rate"] = steady_rate
            ev["unaffected_min_rate"] = min_rate
            ev["unaffected_min_rate_ratio"] = (min_rate / steady_rate) if steady_rate > 0 else None
            ev["unaffected_longest_gap_ms"] = 1000 * max(
                _longest_gap(by_partition[p], t_ev, end) for p in unaffected
            )
            ev["steady_longest_gap_ms"] = 1000 * max(
                _longest_gap(by_partition[p], max(steady_from, t_ev - (end - t_ev)), t_ev) for p in unaffected
            )
        polls = [
            float(d) for log in logs.values() for t, d in log.get("slow_polls", []) if t_ev <= float(t) <= end
        ]
        ev["longest_poll_ms"] = 1000 * max(polls) if polls else None  # None: every call took under 50 ms
        out_events.append(ev)
        prev_end = end

    t_end = marks.get("drained", max((t for ts in by_member.values() for t in ts), default=wall0)) + 1.0
    # The timeline starts a second before the stream does (the group is stable then); times in the events
    # and the plot count from the start of the stream.
    t_first = origin - 1.0
    bin_s = 0.5
    nbins = max(1, int((t_end - t_first) / bin_s) + 1)
    member_rates = {name: _bins(ts, t_first, bin_s, nbins) for name, ts in sorted(by_member.items())}
    stable = _stable_partitions(events, cfg.partitions, until=marks.get("drained", t_end))
    stable_times = sorted(t for p in stable for t in by_partition[p])
    # Lost partitions and fenced members: a member that lost partitions while it was running was fenced or
    # expelled.  A loss once the member itself is stopping (a graceful close that lands in a rebalance:
    # Java's classic consumer also calls onPartitionsLost then) is counted apart, as is anything after the
    # producer stopped (the members are being shut down).
    stopped_at = marks.get("produce_stopped", float("inf"))
    stopping: dict[str, float] = {}
    for t, name, kind, _parts in events:
        if kind == "stopping":
            stopping.setdefault(name, t)
    lost_events = [
        (name, parts)
        for t, name, kind, parts in events
        if kind == "lost" and parts and t < min(stopped_at, stopping.get(name, float("inf")))
    ]
    lost_on_leave = sum(
        len(parts)
        for t, name, kind, parts in events
        if kind == "lost" and parts and stopping.get(name, float("inf")) <= t < stopped_at
    )
    return {
        "fenced_members": len({name for name, _ in lost_events}),
        "lost_partitions": sum(len(parts) for _, parts in lost_events),
        "lost_on_own_leave": lost_on_leave,
        "refused_delays": sum(int(log.get("refused_delays", 0)) for log in logs.values()),
        "produced": int(sum(produced)),
        "processed": total_processed,
        "unique_processed": len(seen),
        "duplicates": duplicates,
        "missing": missing,
        "beyond_produced": beyond,
        "discarded": sum(int(log.get("discarded", 0)) for log in logs.values()),
        "join_to_first_record_s": (first_record_m4 - t_join) if first_record_m4 and t_join else None,
        "join_to_assigned_s": (m4_assigned - t_join) if m4_assigned and t_join else None,
        "events": out_events,
        "stable_partitions": stable,
        "timeline": {
            "t": [round(i * bin_s - 1.0, 3) for i in range(nbins)],
            "members": member_rates,
            "unaffected": _bins(stable_times, t_first, bin_s, nbins) if stable else [],
        },
        "member_events": {name: log["events"] for name, log in logs.items()},
        "config": asdict(cfg),
    }


def _count(times: Sequence[float], start: float, end: float) -> int:
    import bisect

    return bisect.bisect_left(times, end) - bisect.bisect_left(times, start)


def _min_window_rate(times: Sequence[float], start: float, end: float, width: float) -> float:
    """The lowest records/s over any ``width``-second window inside [start, end] (stepped by 50 ms)."""
    if end - start < width:
        return _count(times, start, end) / max(1e-9, end - start)
    best = float("inf")
    t = start
    while t + width <= end + 1e-9:
        best = min(best, _count(times, t, t + width) / width)
        t += 0.05
    return best


def _longest_gap(times: Sequence[float], start: float, end: float) -> float:
    import bisect

    i = bisect.bisect_left(times, start)
    j = bisect.bisect_left(times, end)
    points = [start, *times[i:j], end]
    return max(b - a for a, b in itertools.pairwise(points))


def _bins(times: Sequence[float], t0: float, width: float, n: int) -> list[float]:
    counts = [0] * n
    for t in times:
        i = int((t - t0) / width)
        if 0 <= i < n:
            counts[i] += 1
    return [c / width for c in counts]


def _stable_partitions(
    events: Sequence[tuple[float, str, str, list[int]]], partitions: int, until: float
) -> list[int]:
    """Partitions assigned once and never revoked or lost before ``until`` (when the members were stopped)."""
    assigned: dict[int, int] = {}
    moved: set[int] = set()
    for t, _name, kind, parts in events:
        if t >= until:
            break
        for p in parts:
            if kind == "assigned":
                assigned[p] = assigned.get(p, 0) + 1
            elif kind in ("revoked", "lost", "revoke_requested"):
                moved.add(p)
    return [p for p in range(partitions) if assigned.get(p) == 1 and p not in moved]


def fenced_table(results: Sequence[dict[str, Any]], title: str = "") -> Any:
    """The slow-loop case's table: fenced members, lost partitions and duplicates per client and protocol
    (kafka-handoff's targets: all 0)."""
    from rich.table import Table

    table = Table(title=title or None, title_justify="left")
    for column in ("client / protocol", "fenced members", "lost partitions", "processed twice",
                   "never processed", "refused delays", "lost when leaving"):  # fmt: skip
        table.add_column(column, justify="left" if column == "client / protocol" else "right")
    for r in results:
        name = f"{r.get('label', r.get('client'))} / {r.get('protocol')}"
        if r.get("error"):
            table.add_row(name, "failed", str(r["error"])[:60], "", "", "", "")
            continue
        refused = str(r["refused_delays"]) if r["client"] == "handoff" else "n/a"
        table.add_row(name, str(r["fenced_members"]), str(r["lost_partitions"]), f"{r['duplicates']:,}",
                      f"{r['missing']:,}", refused, str(r.get("lost_on_own_leave", 0)))  # fmt: skip
    return table


# ============================================================================================ driver
def warm_up(bootstrap: str, cfg: ScenarioConfig, protocols: Sequence[str], seconds: float = 8.0) -> None:
    """Exercise the broker's produce, fetch and group paths before the first scenario.

    A freshly started broker (the JVM's JIT still cold) appends and serves records with latencies of
    a second or more for a while; the first scenario would measure that instead of the clients.
    """
    from kafka_handoff.bench.throughput import create_topic, delete_topic, produce_data
    from kafka_handoff.consumer import Consumer

    topic = create_topic(bootstrap, cfg.partitions, prefix="bench-rebalance-warmup")
    try:
        produce_data(bootstrap, topic, cfg.partitions, 100_000, cfg.value_bytes)
        producer = _Producer(bootstrap, topic, cfg.partitions, cfg.rate, cfg.value_bytes)
        producer.start()
        per_protocol = seconds / max(1, len(protocols))
        for protocol in protocols:
            config: dict[str, Any] = {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-rebalance-warmup-{uuid.uuid4().hex[:8]}",
                "group.protocol": protocol,
                "auto.offset.reset": "earliest",
            }
            with Consumer(config) as consumer:
                consumer.subscribe([topic])
                deadline = time.monotonic() + per_protocol
                while time.monotonic() < deadline:
                    consumer.poll(0.05)
        producer.stop()
    finally:
        delete_topic(bootstrap, topic)


def run_benchmark(
    bootstrap: str,
    *,
    protocols: Sequence[str] = ("classic", "consumer"),
    clients: Sequence[str] = ("handoff", "confluent"),
    cfg: ScenarioConfig | None = None,
    work_dir: Path,
    warm_up_s: float = 8.0,
    progress: Callable[[str], None] = lambda msg: None,
) -> dict[str, Any]:
    cfg = cfg or ScenarioConfig()
    for c in clients:
        if c not in CLIENT_LABELS:
            raise ValueError(f"unknown client {c!r} (allowed: {', '.join(CLIENT_LABELS)})")
    results: list[dict[str, Any]] = []
    load_start = os.getloadavg()
    if warm_up_s > 0:
        progress(f"warming the broker up ({warm_up_s:g} s, not measured)")
        warm_up(bootstrap, cfg, protocols, warm_up_s)
    for protocol in protocols:
        for client in clients:
            progress(f"scenario {client} / {protocol} (load {os.getloadavg()[0]:.1f})")
            try:
                results.append(run_scenario(bootstrap, client, protocol, cfg, work_dir, progress))
            except Exception as exc:
                results.append({"client": client, "label": CLIENT_LABELS[client], "protocol": protocol,
                                "error": f"{type(exc).__name__}: {exc}"})  # fmt: skip
    return {"config": asdict(cfg), "load_avg_start": load_start, "load_avg_end": os.getloadavg(),
            "results": results}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "member":
        return member_main(args[1:])
    print(
        "usage: python -m kafka_handoff.bench.rebalance member ... (or: handoff bench rebalance)",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
