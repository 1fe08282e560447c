"""The simulated world: one virtual clock, one seeded scheduler, and the fake network that joins each member's
real network-thread managers to the simulated broker (:mod:`sim.broker`).

Nothing here reads the wall clock or a socket, and every random choice comes from the world's one
``random.Random(seed)``: a seed replays bit-for-bit (within one interpreter; across interpreters with the same
``PYTHONHASHSEED``, since the client iterates sets of partitions).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kafka_handoff.errors import KafkaTimeoutError
from kafka_handoff.protocol.requests import ANY_NODE, COORDINATOR, UnsentRequest
from kafka_handoff.protocol.wire import kio_version_range
from kafka_handoff.types import BrokerNode

EPOCH_MS = 1_767_225_600_000  # 2026-01-01: the virtual wall clock's origin


class VirtualClock:
    """The world's only clock (``Clock`` protocol: monotonic ``now_ms``, epoch ``wall_ms``/``wall_ns``)."""

    def __init__(self) -> None:
        self.t = 0

    def now_ms(self) -> int:
        return self.t

    def wall_ms(self) -> int:
        return EPOCH_MS + self.t

    def wall_ns(self) -> int:
        return (EPOCH_MS + self.t) * 1_000_000

    def monotonic(self) -> float:
        """``time.monotonic`` for the consumer module (seconds)."""
        return self.t / 1000.0


@dataclass(order=True)
class _Item:
    at: int
    seq: int
    action: Callable[[], None] = field(compare=False)
    owner: str = field(compare=False, default="")
    app: bool = field(compare=False, default=False)
    label: str = field(compare=False, default="")


class Scheduler:
    """Runs actions in (time, insertion) order on the virtual clock.  An *app* action of a member whose
    application thread is blocked (inside one of the consumer's blocking calls, which run the world nested)
    is held back until that call returns, as a real blocked thread would."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self._heap: list[_Item] = []
        self._seq = 0
        self.blocked: set[str] = set()
        self._held: dict[str, list[_Item]] = {}
        self.after_each: list[Callable[[str], None]] = []
        self.steps = 0
        self.cancelled: set[str] = set()  # owners whose actions are dropped (crashed members)

    def at(
        self, when: int, action: Callable[[], None], *, owner: str = "", app: bool = False, label: str = ""
    ) -> None:
        self._seq += 1
        heapq.heappush(self._heap, _Item(max(when, self.clock.t), self._seq, action, owner, app, label))

    def after(self, delay: int, action: Callable[[], None], **kw: Any) -> None:
        self.at(self.clock.t + max(0, delay), action, **kw)

    def block(self, owner: str) -> None:
        self.blocked.add(owner)

    def unblock(self, owner: str) -> None:
        self.blocked.discard(owner)
        for item in self._held.pop(owner, []):
            self.at(self.clock.t, item.action, owner=item.owner, app=item.app, label=item.label)

    def next_time(self) -> int | None:
        return self._heap[0].at if self._heap else None

    def run_one(self) -> bool:
        """Run the next action; False when nothing is scheduled."""
        while self._heap:
            item = heapq.heappop(self._heap)
            if item.owner in self.cancelled:
                continue
            if item.app and item.owner in self.blocked:
                self._held.setdefault(item.owner, []).append(item)
                continue
            self.clock.t = max(self.clock.t, item.at)
            self.steps += 1
            item.action()
            for hook in self.after_each:
                hook(item.label)
            return True
        return False

    def run_until(self, done: Callable[[], bool], deadline: int) -> None:
        """Run actions until ``done()`` or the clock reaches ``deadline`` (the clock is then ``deadline``)."""
        while not done():
            nxt = self.next_time()
            if nxt is None or nxt > deadline:
                self.clock.t = max(self.clock.t, deadline)
                return
            self.run_one()


# ------------------------------------------------------------------------------------------ fake network
# The versions the simulated broker speaks (Kafka 4.x's maximums, capped by what kio knows).
BROKER_MAX_VERSION: dict[int, int] = {
    1: 17,  # Fetch
    2: 9,  # ListOffsets
    3: 12,  # Metadata
    8: 9,  # OffsetCommit
    9: 9,  # OffsetFetch
    10: 4,  # FindCoordinator
    11: 9,  # JoinGroup
    12: 4,  # Heartbeat
    13: 5,  # LeaveGroup
    14: 5,  # SyncGroup
    23: 4,  # OffsetForLeaderEpoch
    68: 1,  # ConsumerGroupHeartbeat
}


def negotiated_version(request: UnsentRequest) -> int:
    lo, hi = kio_version_range(request.api_key)
    hi = min(hi, BROKER_MAX_VERSION.get(request.api_key, hi))
    if request.max_version is not None:
        hi = min(hi, request.max_version)
    return max(lo, request.min_version, hi) if hi < request.min_version else hi


@dataclass
class Exchange:
    """One request/response pair as the fake network carried it (recorded for replays and traces)."""

    member: str
    api_key: int
    version: int
    node: int
    body: dict[str, Any]
    sent_ms: int
    response: dict[str, Any] | None = None


class Faults:
    """The network's fault knobs (set by the schedule; all default off)."""

    def __init__(self) -> None:
        self.drop_p = 0.0  # a request (or its response) is lost: the client times it out
        self.delay_max_ms = 0  # extra delay of a response (reordered in time with later ones)
        self.isolated: set[str] = set()  # members whose every request is lost


class SimNetworkClient:
    """What the consumer's network thread and managers use of ``NetworkClient``, over the world's scheduler.

    Requests reach the broker after a latency and their responses come back after another; a response is
    handed to the manager inside the member's next network step (as the real client does in ``poll()``).
    A request past its timeout fails with ``KafkaTimeoutError`` and, as on a real connection, takes every
    other request in flight on that connection with it (a coordinator connection's loss is reported to the
    disconnect listeners)."""

    def __init__(self, world: World, member: str, request_timeout_ms: int) -> None:
        self.world = world
        self.member = member
        self.request_timeout_ms = request_timeout_ms
        self.coordinator_id: int | None = None
        self._brokers: dict[int, BrokerNode] = {}
        self.disconnect_listeners: list[Callable[[int, bool, int], None]] = []
        # connection id -> {request id: (request, version, deadline)}
        self._in_flight: dict[int, dict[int, tuple[UnsentRequest, int, int]]] = {}
        self._ready: list[tuple[int, int, int, Any, int]] = []  # (at, seq, conn, response, rid)
        self._ids = 0
        self._closed = False
        self.wake: Callable[[], None] = lambda: None
        self.last_wait = 0

    # topology ------------------------------------------------------------------------------------
    def update_brokers(self, brokers: Iterable[BrokerNode]) -> None:
        self._brokers = {b.node_id: b for b in brokers}

    def set_coordinator(self, node: BrokerNode | None, now_ms: int) -> None:
        old = self.coordinator_id
        self.coordinator_id = None if node is None else node.node_id
        if old is not None and self.coordinator_id != old:
            self._disconnect(
                _COORD_BASE + old, KafkaTimeoutError("coordinator changed"), now_ms, notify=False
            )

    def finalized_feature(self, name: str, api_key: int | None = None) -> tuple[int, int] | None:
        return None

    def wakeup(self) -> None:
        self.wake()

    def take_auth_errors(self) -> list[Any]:
        return []

    def has_in_flight(self) -> bool:
        return any(self._in_flight.values())

    def in_flight_count(self, node_id: int) -> int:
        return len(self._in_flight.get(node_id, {}))

    def least_loaded_node(self, now_ms: int) -> int | None:
        nodes = sorted(self._brokers) or [0]
        return min(nodes, key=lambda n: (len(self._in_flight.get(n, {})), n))

    def close(self) -> None:
        self._closed = True
        self._in_flight.clear()
        self._ready.clear()

    def disconnect(self, node_id: int, now_ms: int) -> None:
        self._disconnect(node_id, KafkaTimeoutError("disconnected"), now_ms)

    # requests ------------------------------------------------------------------------------------
    def send(self, request: UnsentRequest, now_ms: int) -> None:
        from kafka_handoff.errors import CoordinatorNotAvailableError

        if self._closed:
            return
        if request.node == COORDINATOR:
            if self.coordinator_id is None:
                if request.on_failure is not None:
                    request.on_failure(CoordinatorNotAvailableError("coordinator unknown"), now_ms)
                return
            conn, node = _COORD_BASE + self.coordinator_id, self.coordinator_id
        elif request.node == ANY_NODE:
            node = self.least_loaded_node(now_ms) or 0
            conn = node
        else:
            node = conn = request.node
        version = negotiated_version(request)
        body = dict(request.body(version))
        self._ids += 1
        rid = self._ids
        timeout = request.timeout_ms if request.timeout_ms is not None else self.request_timeout_ms
        self._in_flight.setdefault(conn, {})[rid] = (request, version, now_ms + timeout)
        world = self.world
        ex = Exchange(self.member, request.api_key, version, node, body, now_ms)
        world.exchanges_seen += 1
        if world.record is not None:
            world.record.append(ex)
        lost = self.member in world.faults.isolated or (
            world.faults.drop_p > 0 and world.rng.random() < world.faults.drop_p
        )
        latency = world.rng.randint(1, 5)
        if not lost:

            def arrive() -> None:
                world.broker.handle(self.member, request.api_key, version, node, body, world.clock.t, respond)

            def respond(values: dict[str, Any] | None) -> None:
                # The broker answers (maybe later: a JoinGroup waits for the rebalance).
                if values is None or self._closed:
                    return
                ex.response = values
                if world.faults.drop_p > 0 and world.rng.random() < world.faults.drop_p / 2:
                    return  # the response is lost
                delay = world.rng.randint(1, 5)
                if world.faults.delay_max_ms:
                    delay += world.rng.randint(0, world.faults.delay_max_ms)
                response = _response(request.api_key, version, values)
                world.sched.after(
                    delay, lambda: self._arrived(conn, rid, response), owner=self.member, label="net"
                )

            world.sched.after(latency, arrive, owner="broker", label="broker")
        # the member's next network step must look at the deadline
        world.sched.at(now_ms + timeout + 1, self.wake, owner=self.member, label="timeout")

    def _arrived(self, conn: int, rid: int, response: Any) -> None:
        self._ready.append((self.world.clock.t, rid, conn, response, rid))
        self.wake()

    def poll(self, timeout_ms: int, now_ms: int, clock: Callable[[], int]) -> None:
        self.last_wait = timeout_ms
        ready, self._ready = self._ready, []
        for _at, _seq, conn, response, rid in ready:
            entry = self._in_flight.get(conn, {}).pop(rid, None)
            if entry is None:
                continue  # failed meanwhile (timeout / disconnect)
            request, version, _deadline = entry
            if request.on_response is not None:
                request.on_response(response, version, now_ms)
        for conn, entries in list(self._in_flight.items()):
            if any(deadline <= now_ms for _r, _v, deadline in entries.values()):
                self._disconnect(conn, KafkaTimeoutError("request timed out"), now_ms)
                ready.append((0, 0, 0, None, 0))
        if ready:
            # The real loop goes round at once after I/O (its select returned early): so does ours.
            self.last_wait = 0

    def _disconnect(self, conn: int, error: BaseException, now_ms: int, *, notify: bool = True) -> None:
        entries = self._in_flight.pop(conn, {})
        for request, _v, _d in entries.values():
            if request.on_failure is not None:
                request.on_failure(error, now_ms)
        if notify and entries:
            is_coord = conn >= _COORD_BASE
            node = conn - _COORD_BASE if is_coord else conn
            for listener in self.disconnect_listeners:
                listener(node, is_coord, now_ms)


_COORD_BASE = 1 << 30
_RESPONSES: dict[str, Any] = {}


def _response(api_key: int, version: int, values: dict[str, Any]) -> Any:
    """The kio response entity (kio entities are immutable: equal answers are built once)."""
    from kafka_handoff.protocol.wire import build_response

    if api_key == 1 and any(
        p.get("records") is not None for t in values["responses"] for p in t["partitions"]
    ):
        return build_response(api_key, version, values)
    key = f"{api_key}/{version}/{values!r}"
    entity = _RESPONSES.get(key)
    if entity is None:
        entity = build_response(api_key, version, values)
        if len(_RESPONSES) > 20_000:
            _RESPONSES.clear()
        _RESPONSES[key] = entity
    return entity


class World:
    """Clock, scheduler, RNG, broker and network faults of one simulated run."""

    def __init__(self, seed: int, broker: Any) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = VirtualClock()
        self.sched = Scheduler(self.clock)
        self.broker = broker
        self.faults = Faults()
        self.record: list[Exchange] | None = None
        self.exchanges_seen = 0
