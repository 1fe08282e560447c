"""The demo's clickstream sample: deterministic page-view events, some malformed.

Each record is one page-view event as JSON, keyed by the user (so a user's events stay in order in one
partition), with the event time as the record timestamp::

    {"event_id": "e2a-000000017", "user": "user-0042", "session": "s-0042-3", "page": "/products/12",
     "action": "view", "timestamp": 1700000001234}

A configurable share of records is *malformed*, as real feeds are: either not valid JSON (cut short) or
valid JSON with a required field missing.  Everything is derived from ``seed`` and ``start_ms``, so a run
with both given is reproducible; :func:`generate_events` gives tests the same events, with the ground truth
attached.  ``handoff produce-sample`` (``cli/produce_sample.py``) writes them to a topic; the pipeline demo
and the pipeline benchmark produce them too.  Standard library only.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "DEFAULT_START_MS",
    "MALFORMED_KINDS",
    "MEAN_SPACING_MS",
    "REQUIRED_FIELDS",
    "SampleEvent",
    "default_start_ms",
    "generate_events",
    "iter_events",
]

#: Event time of the first event unless ``start_ms`` says otherwise (2023-11-14T22:13:20Z).
DEFAULT_START_MS: Final = 1_700_000_000_000
#: Fields every well-formed event has.
REQUIRED_FIELDS: Final = ("event_id", "user", "session", "page", "action", "timestamp")

_PAGES: Final = (
    "/",
    "/search",
    "/cart",
    "/checkout",
    "/account",
    "/help",
    *(f"/products/{i}" for i in range(1, 41)),
    *(f"/category/{c}" for c in ("books", "music", "garden", "toys", "tools", "sports")),
)
_ACTIONS: Final = ("view", "view", "view", "view", "click", "click", "scroll", "add_to_cart", "purchase")
MALFORMED_KINDS: Final = ("invalid_json", "missing_field")

#: The Avro schema of the events (``examples/clickstream.avsc``; ``handoff produce-sample --format avro``).
CLICKSTREAM_AVRO_SCHEMA: Final[dict[str, Any]] = {
    "type": "record",
    "name": "Click",
    "namespace": "kafka_handoff.demo",
    "doc": "One clickstream event (handoff produce-sample --format avro writes them).",
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "user", "type": "string"},
        {"name": "session", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "action", "type": "string"},
        {"name": "timestamp", "type": "long"},
    ],
}


def avro_value(event: SampleEvent, encode: Callable[[dict[str, Any]], bytes]) -> bytes:
    """The value of ``event`` in Avro: ``encode(event)`` (a registry-framed record) when well-formed; else,
    as malformed as its JSON twin: ``invalid_json`` stays the cut JSON text (not registry-framed), a
    ``missing_field`` event becomes a framed record cut short (a truncated payload)."""
    if event.malformed is None:
        assert event.event is not None
        return encode(event.event)
    if event.malformed == "invalid_json":
        return event.value
    broken = json.loads(event.value)
    fields = CLICKSTREAM_AVRO_SCHEMA["fields"]
    full = {f["name"]: broken.get(f["name"], 0 if f["type"] == "long" else "") for f in fields}
    value = encode(full)
    return value[: max(6, len(value) - 3)]


@dataclass(frozen=True, slots=True)
class SampleEvent:
    """One generated record and its ground truth."""

    index: int
    key: bytes
    """The user id, UTF-8."""
    value: bytes
    """The record value: the JSON event, or the malformed bytes."""
    timestamp: int
    """Event time in ms since the epoch; also the record's timestamp."""
    event: dict[str, Any] | None
    """The event as parsed from a well-formed value; None for a malformed record."""
    malformed: str | None = None
    """None, or which defect: ``invalid_json`` or ``missing_field``."""

    @property
    def is_malformed(self) -> bool:
        return self.malformed is not None


def iter_events(
    count: int,
    seed: int = 0,
    malformed_share: float = 0.01,
    *,
    start_ms: int = DEFAULT_START_MS,
    users: int = 1000,
) -> Iterator[SampleEvent]:
    """Yield ``count`` clickstream events, deterministically from ``seed``.

    About ``malformed_share`` of them (each independently) are malformed.  Event times start at
    ``start_ms`` and grow by 0-49 ms per event.  Users have sessions that end after a random number of
    events.
    """
    if count < 0:
        raise ValueError(f"count must not be negative, got {count}")
    if not 0.0 <= malformed_share <= 1.0:
        raise ValueError(f"malformed_share must be within [0, 1], got {malformed_share}")
    if users < 1:
        raise ValueError(f"users must be at least 1, got {users}")
    rng = random.Random(seed)
    sessions: dict[int, tuple[int, int]] = {}  # user -> (session number, events left in it)
    ts = start_ms
    prefix = f"e{seed & 0xFFFFFFFF:x}"
    width = max(4, len(str(users - 1)))
    for index in range(count):
        ts += rng.randrange(50)
        user = rng.randrange(users)
        number, left = sessions.get(user, (0, 0))
        if left <= 0:
            number, left = number + 1, rng.randint(3, 30)
        sessions[user] = (number, left - 1)
        user_id = f"user-{user:0{width}d}"
        event: dict[str, Any] = {
            "event_id": f"{prefix}-{index:09d}",
            "user": user_id,
            "session": f"s-{user:0{width}d}-{number}",
            "page": rng.choice(_PAGES),
            "action": rng.choice(_ACTIONS),
            "timestamp": ts,
        }
        malformed: str | None = None
        if malformed_share and rng.random() < malformed_share:
            malformed = MALFORMED_KINDS[rng.randrange(len(MALFORMED_KINDS))]
        if malformed is None:
            value = json.dumps(event, separators=(",", ":")).encode()
            yield SampleEvent(index, user_id.encode(), value, ts, event)
        elif malformed == "invalid_json":
            text = json.dumps(event, separators=(",", ":"))
            cut = rng.randrange(1, len(text) - 1)
            yield SampleEvent(index, user_id.encode(), text[:cut].encode(), ts, None, malformed)
        else:
            broken = dict(event)
            del broken[rng.choice(("user", "page", "timestamp", "event_id"))]
            value = json.dumps(broken, separators=(",", ":")).encode()
            yield SampleEvent(index, user_id.encode(), value, ts, None, malformed)


def generate_events(
    count: int,
    seed: int = 0,
    malformed_share: float = 0.01,
    *,
    start_ms: int = DEFAULT_START_MS,
    users: int = 1000,
) -> list[SampleEvent]:
    """The events ``handoff produce-sample`` writes for the same arguments (see :func:`iter_events`)."""
    return list(iter_events(count, seed, malformed_share, start_ms=start_ms, users=users))


#: Mean spacing of event times (0-49 ms per event).
MEAN_SPACING_MS: Final = 25


def default_start_ms(count: int, *, now: bool = False, now_ms: int | None = None) -> int:
    """The first event time when ``--start-ms`` is not given: ``count`` events then end about now (``now``:
    they start now)."""
    current = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    return current if now else current - MEAN_SPACING_MS * count
