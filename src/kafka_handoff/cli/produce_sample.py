"""``handoff produce-sample``: the demo's clickstream generator, written with the project's own producer.

Each record is one page-view event as JSON, keyed by the user (so a user's events stay in order in one
partition), with the event time as the record timestamp::

    {"event_id": "e2a-000000017", "user": "user-0042", "session": "s-0042-3", "page": "/products/12",
     "action": "view", "timestamp": 1700000001234}

A configurable share of records is *malformed*, as real feeds are: either not valid JSON (cut short) or
valid JSON with a required field missing.  Everything is derived from ``--seed`` and ``--start-ms``, so a
run with both given is reproducible.  The generator is :mod:`kafka_handoff.sample`.

``--format avro`` writes the same events as registry-framed Avro instead (our ``AvroSerializer``: the schema
``examples/clickstream.avsc`` registered under ``<topic>-value`` in ``--schema-registry``); a malformed one
is either not registry-framed (the cut JSON) or a framed record cut short.

Event times (also the record timestamps) end about now by default (``--start-ms`` = now - 25 ms x count, the
mean spacing), so the broker's time-based retention (7 days by default) keeps the sample and its
``log.message.timestamp.after.max.ms`` (an hour) accepts it; ``--now`` starts them now instead.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from kafka_handoff.cli.command_config import add_command_config_arg
from kafka_handoff.sample import (
    DEFAULT_START_MS,
    REQUIRED_FIELDS,
    SampleEvent,
    avro_value,
    default_start_ms,
    generate_events,
    iter_events,
)

__all__ = [
    "DEFAULT_START_MS",
    "REQUIRED_FIELDS",
    "SampleEvent",
    "default_start_ms",
    "generate_events",
    "iter_events",
    "register",
]


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
        help="brokers (default: the --command-config file's, $HANDOFF_BOOTSTRAP, the broker `handoff broker "
        "start` started here, or 127.0.0.1:9092)",
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
    parser.add_argument(
        "--format",
        choices=("json", "avro"),
        default="json",
        help="the values: JSON (default) or registry-framed Avro (with --schema-registry)",
    )
    parser.add_argument(
        "--schema-registry",
        default=None,
        metavar="URL",
        help="--format avro: the schema registry (default: the --command-config file's schema.registry.url, "
        "$HANDOFF_SCHEMA_REGISTRY_URL, or http://127.0.0.1:8081)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def _connection(args: argparse.Namespace) -> dict[str, Any]:
    from kafka_handoff.cli.topics import connection_config

    return connection_config(args)


def _ensure_topic(connection: dict[str, Any], topic: str, partitions: int, replication: int) -> None:
    from kafka_handoff.admin import AdminClient, NewTopic

    with AdminClient(dict(connection)) as admin:
        admin.create_topics([NewTopic(topic, partitions, replication)], if_not_exists=True, timeout=60)


def _registry_url(args: argparse.Namespace, connection: dict[str, Any]) -> str:
    import os

    return str(
        args.schema_registry
        or connection.get("schema.registry.url")
        or os.environ.get("HANDOFF_SCHEMA_REGISTRY_URL")
        or "http://127.0.0.1:8081"
    )


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
    encode = None
    try:
        connection = _connection(args)
        registry_settings: dict[str, Any] = {}
        if getattr(args, "command_config", None):
            from kafka_handoff.cli.command_config import load_registry_settings

            registry_settings = load_registry_settings(args.command_config)
        if getattr(args, "format", "json") == "avro":
            from kafka_handoff.pipeline.demo import avro_encoder
            from kafka_handoff.schema_registry import SchemaRegistryClient

            url = _registry_url(args, registry_settings)
            encode = avro_encoder(SchemaRegistryClient({"url": url}), args.topic)
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
        console.print(f"[red]handoff produce-sample: {exc}[/red]", soft_wrap=True)
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
                if failures:
                    break  # stop at the first failed delivery: the rest would fail the same way
                value = event.value if encode is None else avro_value(event, encode)
                producer.send(
                    args.topic, value, key=event.key, timestamp=event.timestamp, callback=on_delivery
                )
                sent += 1
                nbytes += len(event.key) + len(value)
                if event.malformed is not None:
                    malformed += 1
                if sent % 2000 == 0 or sent == args.count:
                    elapsed = max(1e-9, time.monotonic() - began)
                    progress.update(task, completed=sent, rate=f"{sent / elapsed:,.0f}")
            if not failures:
                progress.update(task, description="flushing")
                producer.flush(120)
    except KeyboardInterrupt:
        producer.close(5)
        raise
    except KafkaError as exc:
        console.print(f"[red]handoff produce-sample: {exc}[/red]", soft_wrap=True)
        producer.close(5)
        return 1
    producer.close(5 if failures else 30)
    if failures:
        console.print(
            f"[red]handoff produce-sample: stopped after {sent:,} record(s) at the first failed delivery: "
            f"{failures[0]}[/red]",
            soft_wrap=True,
        )
        return 1
    elapsed = max(1e-9, time.monotonic() - began)
    out = Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 10_000)
    out.print(
        f"produced {sent:,} records to [bold]{args.topic}[/bold] "
        f"({malformed:,} malformed, {nbytes / 1e6:,.1f} MB) in {elapsed:.1f} s: "
        f"{sent / elapsed:,.0f} records/s, {nbytes / 1e6 / elapsed:,.1f} MB/s"
    )
    return 0
