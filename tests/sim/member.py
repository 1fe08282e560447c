"""A simulated member: the real :class:`~kafka_handoff.consumer.consumer.Consumer` facade, its network thread
stepped by the world's scheduler (:class:`SimNetworkThread`), and the seeds' KIP-983 processing loop.

What is real: everything of the consumer above the socket -- the facade's ``poll()``/``commit_sync()``/
``delay_revoke()``/``close()``, the rebalance dispatcher and KIP-983 revoke lists, the listener views, the
Collector (record batch decoding), subscription state and positions, the real network-thread loop body
(``NetworkThread._run_once``: application events, every request manager's ``poll``, the after-poll membership
drain and the reaper), the membership (classic or KIP-848), the assignors, CoordinatorManager, CommitManager,
OffsetsManager, FetchManager and fetch sessions, MetadataManager.  What is replaced: the ``NetworkClient``
(:class:`sim.world.SimNetworkClient`), the clock (the world's virtual clock, also for the facade's
``time.monotonic``), and the application thread's waits (a blocking call runs the world until its future
completes, holding back only this member's application steps).
"""

from __future__ import annotations

import collections
import contextlib
import random
import types
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar
from unittest import mock

import kafka_handoff.consumer.consumer as consumer_mod
from kafka_handoff.consumer.consumer import Consumer
from kafka_handoff.consumer.fetcher import FetchBuffer
from kafka_handoff.consumer.listener import RebalanceConsumer, RebalanceListenerBase
from kafka_handoff.errors import KafkaError, KafkaTimeoutError, WakeupError
from kafka_handoff.network.thread import NetworkThread
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.types import OffsetAndMetadata, TopicPartition
from sim.world import SimNetworkClient, World

T = TypeVar("T")


class SimNetworkThread(NetworkThread):
    """The real network thread's loop body, one iteration per scheduler step (no OS thread)."""

    world: World
    member: str

    def start(self) -> None:
        self._next_at: int | None = None
        self._dead = False
        client = self.client
        assert isinstance(client, SimNetworkClient)
        client.wake = lambda: self.schedule(self.world.clock.t + 1)
        self.schedule(self.world.clock.t)

    @property
    def alive(self) -> bool:
        return not self._dead

    def schedule(self, at: int) -> None:
        if self._dead or (self._next_at is not None and self._next_at <= at):
            return
        self._next_at = at

        def step() -> None:
            if self._next_at != at:
                return  # superseded by an earlier step
            self._next_at = None
            self.step()

        self.world.sched.at(at, step, owner=self.member, label="net")

    def step(self) -> None:
        now = self.clock.now_ms()
        if self._closing.is_set():
            done = True
            if self._on_close is not None:
                try:
                    done = self._on_close(now)
                except Exception as exc:
                    self._report(exc)
            if done or now >= self._close_deadline_ms:
                self.stop()
                return
        client = self.client
        assert isinstance(client, SimNetworkClient)
        client.last_wait = 5000
        self._run_once(now)
        self.schedule(now + max(1, min(client.last_wait, 5000)))

    def stop(self) -> None:
        if self._dead:
            return
        self._dead = True
        self._stopped.set()
        self._fail_events(self.fatal_error or KafkaError("the client is closed"))
        self.client.close()
        if not self.stopped.done():
            self.stopped.set_result(None)

    def close(self, timeout_ms: int) -> None:
        self.begin_close(timeout_ms)
        self.world.sched.run_until(lambda: self._dead, self.clock.now_ms() + timeout_ms + 2000)
        self.stop()


@dataclass
class MemberSpec:
    name: str
    pace_ms: int  # mean time between two polls
    jitter: float  # each interval is pace * uniform(1 - jitter, 1 + jitter)
    process_ms: int  # mean processing time of a record (async processing: in flight meanwhile)
    delay_policy: str  # "needed" | "eager" | "always" (continuous delays, while granted) | "never"
    raise_p: float = 0.0  # probability that a rebalance callback raises
    listener_commits: bool = True  # on_partitions_revoked commits what was processed (legacy pattern)
    join_at: int = 0
    pattern: bool = False  # regex subscription


@dataclass
class Obs:
    """What one member's application observed (read by sim.checks)."""

    poll_times: list[int] = field(default_factory=list)
    owned: set[TopicPartition] = field(default_factory=set)  # by the callbacks (KIP-429 bookkeeping)
    pending_revoke: set[TopicPartition] = field(default_factory=set)
    expect_lost: set[TopicPartition] = field(default_factory=set)
    injected: list[BaseException] = field(default_factory=list)
    raised: list[BaseException] = field(default_factory=list)
    grants: list[tuple[int, TopicPartition, bool]] = field(default_factory=list)
    delayed: set[TopicPartition] = field(default_factory=set)  # a delay was granted since it was assigned
    callbacks: list[tuple[int, str, frozenset[TopicPartition]]] = field(default_factory=list)


class _InjectedError(RuntimeError):
    pass


class SimMember:
    def __init__(self, sim: Any, spec: MemberSpec, config: dict[str, Any]) -> None:
        self.sim = sim
        self.world: World = sim.world
        self.spec = spec
        self.name = spec.name
        self.obs = Obs()
        self.crashed = False
        self.closed = False
        self.inflight: dict[TopicPartition, collections.deque[tuple[int, int]]] = {}
        self.processed: dict[TopicPartition, int] = {}  # next offset after what was processed, per partition
        self.committed: dict[TopicPartition, int] = {}
        self.position: dict[TopicPartition, int] = {}
        self.in_app_step = False
        with sim.env.member(self):
            self.consumer = Consumer(config)
        listener = _Listener(self)
        if spec.pattern:
            import re

            self.consumer.subscribe(re.compile(r"t\d"))
        else:
            self.consumer.subscribe(sorted(sim.schedule.topics))
        self.consumer.set_rebalance_listener(listener)

    # ------------------------------------------------------------------ the application loop
    def next_interval(self) -> int:
        j = self.spec.jitter
        return max(1, int(self.spec.pace_ms * self.world.rng.uniform(1 - j, 1 + j)))

    def start(self) -> None:
        self.world.sched.after(0, self.app_step, owner=self.name, app=True, label="app")

    def app_step(self) -> None:
        if self.crashed or self.closed:
            return
        self.sim.env.current.append(self)
        try:
            self._iteration()
        finally:
            self.sim.env.current.pop()
        if not (self.crashed or self.closed):
            self.world.sched.after(
                self.next_interval(), self.app_step, owner=self.name, app=True, label="app"
            )

    def _iteration(self) -> None:
        now = self.world.clock.t
        c = self.consumer
        self.obs.poll_times.append(now)
        try:
            recs = c.poll(0)
        except Exception as exc:
            self.sim.checks.on_raised(self, exc)
            return
        self.sim.checks.on_poll(self, recs)
        for tp in recs.lost_partitions:
            self.abandon(tp)
        for tp in recs.partitions():
            q = self.inflight.setdefault(tp, collections.deque())
            for rec in recs.records(tp):
                q.append(
                    (rec.offset, now + int(self.world.rng.expovariate(1 / max(1, self.spec.process_ms))))
                )
        self.finish_processing(self.world.clock.t)
        self.commit_processed()
        tbr = recs.to_be_revoked_partitions
        for tp in sorted(tbr, key=lambda x: (x.topic, x.partition)):
            busy = bool(self.inflight.get(tp)) or self.processed.get(tp, -1) > self.committed.get(tp, -1)
            policy = self.spec.delay_policy
            want = (
                policy == "always"
                or (policy == "needed" and busy)
                or (policy == "eager" and (busy or self.world.rng.random() < 0.5))
            )
            if want:
                granted = c.delay_revoke([tp])
                self.sim.checks.on_delay(self, tp, granted)
                if not granted:
                    self.abandon(tp, refused=True)
            else:
                self.abandon(tp, refused=busy)

    def finish_processing(self, now: int) -> None:
        for tp, q in self.inflight.items():
            while q and q[0][1] <= now:
                off, _ = q.popleft()
                self.sim.checks.on_processed(self, tp, off)
                self.processed[tp] = off + 1

    def abandon(self, tp: TopicPartition, *, refused: bool = False) -> None:
        """Stop the work of ``tp``: records in flight are dropped (never processed)."""
        self.inflight.pop(tp, None)
        if refused:
            self.sim.checks.excuse(tp, f"{self.name} let go of {tp} with work in flight")
        self.processed.pop(tp, None)
        self.committed.pop(tp, None)

    def commit_processed(self, parts: frozenset[TopicPartition] | None = None, view: Any = None) -> None:
        c = view if view is not None else self.consumer
        owned = self.consumer.assignment() if view is None else view.assignment()
        offsets = {
            tp: OffsetAndMetadata(off, "")
            for tp, off in self.processed.items()
            if off > self.committed.get(tp, -1) and tp in owned and (parts is None or tp in parts)
        }
        if not offsets:
            return
        try:
            c.commit_sync(offsets)
        except Exception as exc:
            if view is not None:
                self.sim.checks.on_view_error(self, exc)
            else:
                self.sim.checks.on_raised(self, exc)
            return
        for tp, om in offsets.items():
            self.committed[tp] = om.offset

    # ------------------------------------------------------------------ faults
    def crash(self) -> None:
        self.crashed = True
        self.world.sched.cancelled.add(self.name)
        thread = self.consumer._thread
        assert isinstance(thread, SimNetworkThread)
        thread._dead = True
        self.sim.checks.on_gone(self, "crashed")

    def close(self) -> None:
        if self.crashed or self.closed:
            return
        self.sim.env.current.append(self)
        try:
            self.finish_processing(self.world.clock.t)
            self.commit_processed()
            self.consumer.close(5.0)
        except Exception as exc:
            self.sim.checks.on_raised(self, exc)
        finally:
            self.sim.env.current.pop()
        self.closed = True
        self.sim.checks.on_gone(self, "closed")


class _Listener(RebalanceListenerBase):
    def __init__(self, member: SimMember) -> None:
        self.m = member

    def _maybe_raise(self, kind: str) -> None:
        m = self.m
        if m.spec.raise_p and m.world.rng.random() < m.spec.raise_p:
            exc = _InjectedError(f"{m.name}: injected failure in {kind} at {m.world.clock.t}")
            m.obs.injected.append(exc)
            raise exc

    def on_partitions_revoked(self, partitions: Any, consumer: RebalanceConsumer) -> None:
        parts = frozenset(partitions)
        self.m.sim.checks.on_callback(self.m, "revoked", parts)
        if self.m.spec.listener_commits and parts:
            self.m.finish_processing(self.m.world.clock.t)
            self.m.commit_processed(parts, consumer)
        for tp in parts:
            if self.m.inflight.get(tp):
                self.m.abandon(tp, refused=True)
        self._maybe_raise("revoked")

    def on_partitions_assigned(self, partitions: Any, consumer: RebalanceConsumer) -> None:
        parts = frozenset(partitions)
        self.m.sim.checks.on_callback(self.m, "assigned", parts)
        if parts and self.m.world.rng.random() < 0.3:
            try:
                consumer.committed(set(parts))
            except Exception as exc:
                self.m.sim.checks.on_view_error(self.m, exc)
        self._maybe_raise("assigned")

    def on_partitions_lost(self, partitions: Any, consumer: RebalanceConsumer) -> None:
        parts = frozenset(partitions)
        self.m.sim.checks.on_callback(self.m, "lost", parts)
        for tp in parts:
            self.m.abandon(tp)
        self._maybe_raise("lost")


# ---------------------------------------------------------------------------------------------- environment
class Env:
    """Patches the consumer module so that every Consumer built inside :meth:`active` lives in the world."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.current: list[SimMember] = []
        self._building: SimMember | None = None

    @contextlib.contextmanager
    def member(self, m: SimMember) -> Iterator[None]:
        self._building = m
        try:
            yield
        finally:
            self._building = None

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        world = self.world
        env = self
        rng = random.Random(world.seed ^ 0x5EED)

        def uuid4() -> uuid.UUID:
            return uuid.UUID(int=rng.getrandbits(128), version=4)

        def metadata_and_client(
            cfg: Any, client_id: str, *, allow_auto_topic_creation: bool, topics: Any = frozenset, **_: Any
        ) -> Any:
            metadata = MetadataManager(
                max_age_ms=cfg.metadata_max_age_ms,
                retry_backoff_ms=cfg.retry_backoff_ms,
                retry_backoff_max_ms=cfg.retry_backoff_max_ms,
                allow_auto_topic_creation=allow_auto_topic_creation,
                topics=topics,
            )
            assert env._building is not None
            client = SimNetworkClient(world, env._building.name, cfg.request_timeout_ms)
            metadata.listeners.append(lambda cluster, now: client.update_brokers(cluster.brokers.values()))
            return metadata, client

        class Thread(SimNetworkThread):
            pass

        Thread.world = world

        def make_thread(*args: Any, **kwargs: Any) -> SimNetworkThread:
            t = Thread(*args, **kwargs)
            assert env._building is not None
            t.member = env._building.name
            return t

        def wait_result(
            future: Future[T],
            timeout_ms: int,
            what: str,
            *,
            before_each: Callable[[], None],
            wakeup: Any,
            cancel_on_timeout: bool,
        ) -> T:
            owner = env.current[-1].name if env.current else ""
            deadline = world.clock.t + timeout_ms
            world.sched.block(owner)
            try:
                while True:
                    before_each()
                    if wakeup is not None and wakeup.is_set():
                        wakeup.clear()
                        raise WakeupError(f"{what} was interrupted by wakeup()")
                    if future.done():
                        return future.result()
                    if world.clock.t >= deadline:
                        if cancel_on_timeout:
                            future.cancel()
                        raise KafkaTimeoutError(f"{what} did not complete within {timeout_ms} ms")
                    world.sched.run_until(future.done, min(deadline, world.clock.t + 100))
            finally:
                world.sched.unblock(owner)

        def buffer_wait(timeout_s: float, ready: Callable[[], bool]) -> None:
            owner = env.current[-1].name if env.current else ""
            world.sched.block(owner)
            try:
                world.sched.run_until(ready, world.clock.t + max(1, int(timeout_s * 1000)))
            finally:
                world.sched.unblock(owner)

        time_shim = types.SimpleNamespace(monotonic=world.clock.monotonic)
        saved_random = random.getstate()
        random.seed(world.seed)

        class Buffer(FetchBuffer):
            __slots__ = ()

            def wait(self, timeout_s: float, ready: Callable[[], bool]) -> None:
                buffer_wait(timeout_s, ready)

        try:
            with (
                mock.patch.object(consumer_mod, "MonotonicClock", lambda: world.clock),
                mock.patch.object(consumer_mod, "metadata_and_client", metadata_and_client),
                mock.patch.object(consumer_mod, "NetworkThread", make_thread),
                mock.patch.object(consumer_mod, "wait_result", wait_result),
                mock.patch.object(consumer_mod, "time", time_shim),
                mock.patch.object(consumer_mod, "FetchBuffer", Buffer),
                mock.patch("uuid.uuid4", uuid4),
            ):
                yield
        finally:
            random.setstate(saved_random)
