"""The simulator's coordinator model (tests/sim/broker.py) checked against the real broker.

Real rebalances are recorded -- our real client against the real dev broker, both group protocols, every
group request with its response captured by a hook on ``NetworkClient.send`` -- and the recorded requests are
replayed through the model in the order they were sent.  The model must answer each with the same error code
as the broker did, and end with the same assignment per member (KIP-848) or the same generation count and
assignment sizes (classic)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from kafka_handoff.consumer import Consumer
from kafka_handoff.network.client import NetworkClient
from kafka_handoff.protocol.requests import UnsentRequest
from kafka_handoff.types import TopicPartition
from sim.broker import Broker

pytestmark = pytest.mark.integration

GROUP_APIS = {8, 9, 11, 12, 13, 14, 68}
COORDINATOR_STATE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


@dataclass
class Recorded:
    client: str
    api_key: int
    version: int
    sent: float
    body: dict[str, Any]
    response: Any


class Recorder:
    """Wraps every group request's response handler: (client, request body, response) in send order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[Recorded] = []
        self.topic_ids: dict[str, uuid.UUID] = {}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_send = NetworkClient.send
        recorder = self

        def send(self: NetworkClient, request: UnsentRequest, now_ms: int) -> None:
            if request.api_key in GROUP_APIS or request.api_key == 3:
                sent = time.monotonic()
                handler = request.on_response
                client = self.client_id

                def on_response(response: Any, version: int, now: int) -> None:
                    if request.api_key == 3:
                        for t in response.topics:
                            if t.name and t.topic_id is not None:
                                recorder.topic_ids[str(t.name)] = t.topic_id
                    else:
                        with recorder.lock:
                            recorder.items.append(
                                Recorded(
                                    client,
                                    request.api_key,
                                    version,
                                    sent,
                                    dict(request.body(version)),
                                    response,
                                )
                            )
                    if handler is not None:
                        handler(response, version, now)

                request.on_response = on_response
            real_send(self, request, now_ms)

        monkeypatch.setattr(NetworkClient, "send", send)


def _poll_until(
    consumers: list[Consumer], cond: Callable[[], bool], what: str, timeout: float = 60.0
) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        for c in consumers:
            c.poll(0.05)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    r = Recorder()
    r.install(monkeypatch)
    yield r


def _record(bootstrap: str, topic: str, protocol: str, group: str) -> None:
    """Two members: A alone, then B joins, both commit, A leaves, B takes everything."""
    base: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "max.poll.interval.ms": 20_000,
    }
    if protocol == "consumer":
        base["group.protocol"] = "consumer"
    else:
        base |= {"group.protocol": "classic", "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500}
        base["partition.assignment.strategy"] = "range" if protocol == "eager" else "cooperative-sticky"
    a = Consumer({**base, "client.id": "rec-a"})
    b = Consumer({**base, "client.id": "rec-b"})
    try:
        a.subscribe([topic])
        _poll_until([a], lambda: len(a.assignment()) == 4, "A owning all 4 partitions")
        a.commit_sync({TopicPartition(topic, p): 0 for p in range(4)})
        b.subscribe([topic])
        _poll_until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, "a 2/2 split")
        a.commit_sync({tp: 0 for tp in a.assignment()})
        b.commit_sync({tp: 0 for tp in b.assignment()})
        a.close()
        _poll_until([b], lambda: len(b.assignment()) == 4, "B owning all 4 partitions")
        b.commit_sync({tp: 0 for tp in b.assignment()})
    finally:
        a.close()
        b.close()


def _replay(rec: Recorder, topic: str, group: str) -> list[str]:
    """Feed the recorded requests to the model in send order; return every mismatch."""
    model = Broker({topic: 4}, session_timeout_848=6_000, hb_interval_848=500)
    model.topics[topic].topic_id = rec.topic_ids[topic]
    model.group_id = group
    model.coordinator = 0
    items = sorted(rec.items, key=lambda r: r.sent)
    t0 = items[0].sent
    ids: dict[str, str] = {}  # real member id -> the model's
    epochs: dict[
        tuple[str, int], int
    ] = {}  # (member, real epoch) -> the model's (epochs are opaque to clients)

    def epoch(member: str, value: Any) -> Any:
        if not isinstance(value, int) or value <= 0:
            return value
        return epochs.get((member, value), value)

    answers: list[tuple[Recorded, list[dict[str, Any]]]] = []

    def mapped(body: dict[str, Any]) -> dict[str, Any]:
        out = dict(body)
        if out.get("member_id") in ids:
            out["member_id"] = ids[out["member_id"]]
        if "assignments" in out:
            out["assignments"] = [
                {**a, "member_id": ids.get(a["member_id"], a["member_id"])} for a in out["assignments"]
            ]
        if "groups" in out:
            out["groups"] = [
                {**g, "member_id": ids.get(g.get("member_id"), g.get("member_id"))} for g in out["groups"]
            ]
        if "member_epoch" in out:
            out["member_epoch"] = epoch(str(body.get("member_id")), out["member_epoch"])
        if "generation_id_or_member_epoch" in out and "member_id" in body:
            out["generation_id_or_member_epoch"] = epoch(
                str(body["member_id"]), out["generation_id_or_member_epoch"]
            )
        if "groups" in body:
            out["groups"] = [
                {**g, "member_epoch": epoch(str(o.get("member_id")), g.get("member_epoch"))}
                for g, o in zip(out["groups"], body["groups"], strict=True)
            ]
        if "members" in out:
            out["members"] = [
                {**m, "member_id": ids.get(m.get("member_id"), m.get("member_id"))} for m in out["members"]
            ]
        return out

    for item in items:
        if set(_codes(item.api_key, item.response)) & COORDINATOR_STATE:
            continue  # the coordinator was not ready (new __consumer_offsets): not the group's answer
        got: list[dict[str, Any]] = []
        answers.append((item, got))
        now = int((item.sent - t0) * 1000)

        def keep(values: dict[str, Any] | None, got: list[dict[str, Any]] = got) -> None:
            if values is not None:
                got.append(values)

        model.handle(item.client, item.api_key, item.version, 0, mapped(item.body), now, keep)
        real_id = getattr(item.response, "member_id", None)
        if got and item.api_key in (11, 68) and real_id and got[-1].get("member_id"):
            ids.setdefault(str(real_id), str(got[-1]["member_id"]))
        if got and item.api_key == 68 and real_id and got[-1].get("member_epoch", 0) > 0:
            epochs[(str(real_id), int(item.response.member_epoch))] = int(got[-1]["member_epoch"])
    problems: list[str] = []
    current: dict[str, set[tuple[str, int]]] = {}
    broker_assigned: set[str] = set()  # members the broker has assigned partitions to so far
    for item, got in answers:
        real = _codes(item.api_key, item.response)
        mine = sorted({c for g in got for c in _codes_values(item.api_key, g)}) if got else None
        if item.api_key == 68 and got and got[-1].get("assignment") is not None:
            current[item.client] = _parts_values(got[-1]["assignment"])
        if mine is None:
            problems.append(f"{item.client} api {item.api_key}: the model never answered (broker: {real})")
        elif item.api_key == 68 and item.response.assignment is not None:
            # The broker resends an unchanged assignment more often than the model: compare with what the
            # model has assigned that member (its latest assignment sent).
            real_parts = _parts(item.response.assignment)
            # The broker's coordinator learns of the new topic from its metadata image, which can lag the
            # topic's creation on a loaded machine: until then it assigns nobody anything (the model has no
            # such lag).  Before the broker's first assignment to anyone, an empty one is not compared.
            not_yet = not real_parts and not broker_assigned
            if real_parts:
                broker_assigned.add(item.client)
            if not not_yet and real_parts != current.get(item.client):
                problems.append(
                    f"{item.client}: broker assigned {_parts(item.response.assignment)}, "
                    f"the model {current.get(item.client)}"
                )
            elif mine != real:
                problems.append(f"{item.client} api 68: model {mine}, broker {real}")
        elif mine != real:
            problems.append(
                f"{item.client} api {item.api_key} epoch {item.body.get('member_epoch', '')}: model {mine} "
                f"(epoch {got[-1].get('member_epoch')}), broker {real} "
                f"(epoch {getattr(item.response, 'member_epoch', None)})"
            )
    return problems


def _parts(assignment: Any) -> set[tuple[str, int]]:
    return {(str(t.topic_id), int(p)) for t in assignment.topic_partitions for p in t.partitions}


def _parts_values(assignment: dict[str, Any]) -> set[tuple[str, int]]:
    return {(str(t["topic_id"]), int(p)) for t in assignment["topic_partitions"] for p in t["partitions"]}


def _codes(api_key: int, response: Any) -> list[int]:
    if api_key == 8:
        return sorted({int(p.error_code) for t in response.topics for p in t.partitions})
    if api_key == 9:
        return sorted(
            {int(g.error_code) for g in response.groups}
            | {int(p.error_code) for g in response.groups for t in g.topics for p in t.partitions}
        )
    return [int(response.error_code)]


def _codes_values(api_key: int, values: dict[str, Any]) -> list[int]:
    if api_key == 8:
        return [p["error_code"] for t in values["topics"] for p in t["partitions"]]
    if api_key == 9:
        return [g["error_code"] for g in values["groups"]] + [
            p["error_code"] for g in values["groups"] for t in g["topics"] for p in t["partitions"]
        ]
    return [values["error_code"]]


@pytest.mark.parametrize("protocol", ["eager", "cooperative", "consumer"])
def test_the_coordinator_model_answers_a_recorded_rebalance_as_the_broker_did(
    broker: Any, topic_factory: Any, recorder: Recorder, protocol: str
) -> None:
    topic = topic_factory(partitions=4)
    group = f"g-sim-{protocol}-{uuid.uuid4().hex[:8]}"
    _record(broker.bootstrap_servers, topic, protocol, group)
    assert recorder.items, "nothing recorded"
    kinds = {r.api_key for r in recorder.items}
    assert (68 in kinds) == (protocol == "consumer") and 8 in kinds
    problems = _replay(recorder, topic, group)
    assert not problems, "\n".join(problems)
