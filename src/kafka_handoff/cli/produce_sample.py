"""``handoff produce-sample``: the demo's clickstream generator, written with the project's own producer.

Each record is one page-view event as JSON, keyed by the user (so a user's events stay in order in one
partition), with the event time as the record timestamp::

    {"event_id": "e2a-000000017", "user": "user-0042", "session": "s-0042-3", "page": "/products/12",
     "action": "view", "timestamp": 1700000001234}

A configurable share of records is *malformed*, as real feeds are: either not valid JSON (cut short) or
valid JSON with a required field missing.  Everything is derived from ``--seed`` and ``--start-ms``, so a
run with both given is reproducible; :func:`generate_events` gives tests the same events, with the ground
truth attached.

Event times (also the record timestamps) end about now by default (``--start-ms`` = now - 25 ms x count, the
mean spacing), so the broker's time-based retention (7 days by default) keeps the sample and its
``log.message.timestamp.after.max.ms`` (an hour) accepts it; ``--now`` starts them now instead.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from kafka_handoff.cli.command_config import add_command_config_arg

__all__ = [
    "DEFAULT_START_MS",
    "REQUIRED_FIELDS",
    "SampleEvent",
    "default_start_ms",
    "generate_events",
    "iter_events",
    "register",
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


# ---------------------------------------------------------------------------------------------------------
# command line


#: Mean spacing of event times (0-49 ms per event).
MEAN_SPACING_MS: Final = 25


def default_start_ms(count: int, *, now: bool = False, now_ms: int | None = None) -> int:
    """The first event time when ``--start-ms`` is not given: ``count`` events then end about now (``now``:
    they start now)."""
    current = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    return current if now else current - MEAN_SPACING_MS * count


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "produce-sample",
        help="write clickstream sample events (JSON, some malformed) to a topic",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument(
        "--bootstrap-servers",
        "-b",
        default=None,
        metavar="HOST:PORT[,...]",
        help="brokers (default: the --command-config file's, $HANDOFF_BOOTSTRAP or 127.0.0.1:9092)",
    )
    add_command_config_arg(parser)
    parser.add_argument("--topic", "-t", required=True, help="topic to write to")
    parser.add_argument("--count", "-n", type=int, required=True, help="number of records")
    parser.add_argument(
        "--rate", type=float, default=None, help="records per second (default: as fast as possible)"
    )
    parser.add_argument(
        "--malformed-share", type=float, default=0.01, help="share of malformed records, 0..1 (default 0.01)"
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="create the topic with this many partitions if it does not exist",
    )
    parser.add_argument("--replication-factor", type=int, default=1, help="for a created topic (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="random seed: same seed, same events (default 0)")
    parser.add_argument(
        "--start-ms",
        type=int,
        default=None,
        help="event time of the first event, ms since the epoch (default: so that the events end about now; "
        f"the tests' fixed time is {DEFAULT_START_MS})",
    )
    parser.add_argument("--now", action="store_true", help="start event times at the current time")
    parser.add_argument("--users", type=int, default=1000, help="number of distinct users (default 1000)")
    parser.add_argument(
        "--compression",
        default="lz4",
        choices=("none", "gzip", "snappy", "lz4", "zstd"),
        help="compression.type (default lz4)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def _connection(args: argparse.Namespace) -> dict[str, Any]:
    import os

    from kafka_handoff.cli.command_config import client_config

    fallback = os.environ.get("HANDOFF_BOOTSTRAP", "").strip() or "127.0.0.1:9092"
    return client_config(args, args.bootstrap_servers, fallback)


def _ensure_topic(connection: dict[str, Any], topic: str, partitions: int, replication: int) -> None:
    from kafka_handoff.admin import AdminClient, NewTopic

    with AdminClient(dict(connection)) as admin:
        admin.create_topics([NewTopic(topic, partitions, replication)], if_not_exists=True, timeout=60)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from kafka_handoff.errors import KafkaError
    from kafka_handoff.producer import Producer

    console = Console(stderr=True)
    if args.count < 0:
        console.print("[red]--count must not be negative[/red]")
        return 2
    if not 0.0 <= args.malformed_share <= 1.0:
        console.print("[red]--malformed-share must be within 0..1[/red]")
        return 2
    start_ms = default_start_ms(args.count, now=args.now) if args.start_ms is None else args.start_ms
    try:
        connection = _connection(args)
        if args.partitions is not None:
            _ensure_topic(connection, args.topic, args.partitions, args.replication_factor)
        producer = Producer(
            {
                **connection,
                "compression.type": args.compression,
                "linger.ms": 10,
                "batch.size": 65536,
            }
        )
    except (KafkaError, ValueError) as exc:
        console.print(f"[red]handoff produce-sample: {exc}[/red]")
        return 1

    failures: list[BaseException] = []

    def on_delivery(_md: Any, exc: BaseException | None) -> None:
        if exc is not None:
            failures.append(exc)

    sent = malformed = nbytes = 0
    began = time.monotonic()
    interval = 1.0 / args.rate if args.rate else 0.0
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>10} rec/s"),
        TimeRemainingColumn(),
        console=console,
        disable=args.no_progress,
    )
    try:
        with progress:
            task = progress.add_task(f"producing to {args.topic}", total=args.count, rate="")
            events = iter_events(
                args.count, args.seed, args.malformed_share, start_ms=start_ms, users=args.users
            )
            for event in events:
                if interval:
                    due = began + sent * interval
                    delay = due - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                producer.send(
                    args.topic, event.value, key=event.key, timestamp=event.timestamp, callback=on_delivery
                )
                sent += 1
                nbytes += len(event.key) + len(event.value)
                if event.malformed is not None:
                    malformed += 1
                if sent % 2000 == 0 or sent == args.count:
                    elapsed = max(1e-9, time.monotonic() - began)
                    progress.update(task, completed=sent, rate=f"{sent / elapsed:,.0f}")
            progress.update(task, description="flushing")
            producer.flush(120)
    except KeyboardInterrupt:
        producer.close(5)
        raise
    except KafkaError as exc:
        console.print(f"[red]handoff produce-sample: {exc}[/red]")
        producer.close(5)
        return 1
    producer.close(30)
    elapsed = max(1e-9, time.monotonic() - began)
    out = Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 10_000)
    out.print(
        f"produced {sent - len(failures):,} records to [bold]{args.topic}[/bold] "
        f"({malformed:,} malformed, {nbytes / 1e6:,.1f} MB) in {elapsed:.1f} s: "
        f"{sent / elapsed:,.0f} records/s, {nbytes / 1e6 / elapsed:,.1f} MB/s"
    )
    if failures:
        console.print(f"[red]{len(failures)} record(s) failed; first error: {failures[0]}[/red]")
        return 1
    return 0
