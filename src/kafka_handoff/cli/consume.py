"""``handoff consume``: a console consumer, like kcat's consumer mode.

Without ``--group`` it assigns every partition of the topic (no group membership); with ``--group`` it
subscribes and joins the group.  ``--format none`` prints only counts and the rate (for measuring).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from typing import Any

from kafka_handoff.cli.command_config import add_command_config_arg, client_config
from kafka_handoff.cli.polling import poll_records, stop_on_signals

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "consume", help="consume records from a topic and print them (or just count them)"
    )
    p.add_argument(
        "--bootstrap-servers",
        default=None,
        help="host:port[,host:port] (default: the --command-config file's, $HANDOFF_BOOTSTRAP or "
        "127.0.0.1:9092)",
    )
    add_command_config_arg(p)
    p.add_argument("--topic", "-t", required=True)
    p.add_argument(
        "--group", "-g", help="join this consumer group (subscribe) instead of assigning all partitions"
    )
    p.add_argument(
        "--share-group",
        help="join this share group (KIP-932): records are shared with its other members and acknowledged",
    )
    p.add_argument("--group-protocol", choices=["classic", "consumer"], default="classic")
    p.add_argument(
        "--from-beginning", action="store_true", help="start at the earliest offset when none is committed"
    )
    p.add_argument(
        "--max-records", "-n", type=int, default=0, help="stop after this many records (0: no limit)"
    )
    p.add_argument("--format", choices=["text", "json", "none"], default="text")
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=0.0,
        help="stop after this many seconds without records (0: never)",
    )
    p.add_argument(
        "-X", dest="extra", action="append", default=[], metavar="KEY=VALUE", help="extra consumer config"
    )
    p.set_defaults(func=_run)


def _text(value: bytes | None) -> str:
    if value is None:
        return "null"
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode("ascii")


def _run(args: argparse.Namespace) -> int:
    from kafka_handoff.consumer import Consumer
    from kafka_handoff.errors import ConfigError, KafkaError
    from kafka_handoff.types import TopicPartition

    try:
        config = client_config(
            args, args.bootstrap_servers, os.environ.get("HANDOFF_BOOTSTRAP", "").strip() or "127.0.0.1:9092"
        )
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    config["auto.offset.reset"] = "earliest" if args.from_beginning else "latest"
    if args.group:
        config["group.id"] = args.group
        config["group.protocol"] = args.group_protocol
    for item in args.extra:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"error: -X {item!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        config[key] = value
    if args.share_group:
        if args.group:
            print("error: --group and --share-group cannot be used together", file=sys.stderr)
            return 2
        from kafka_handoff.cli.share_groups import run_share_consume

        return run_share_consume(args, config, _text)
    try:
        consumer = Consumer(config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    stop = stop_on_signals(consumer.wakeup)

    start = time.monotonic()
    out = sys.stdout

    def emit(r: Any) -> None:
        if args.format == "text":
            out.write(f"{r.topic}-{r.partition}@{r.offset}\t{_text(r.key)}\t{_text(r.value)}\n")
        elif args.format == "json":
            out.write(
                json.dumps(
                    {
                        "topic": r.topic,
                        "partition": r.partition,
                        "offset": r.offset,
                        "timestamp": r.timestamp,
                        "key": _text(r.key),
                        "value": _text(r.value),
                        "headers": [[k, _text(v)] for k, v in r.headers],
                    }
                )
                + "\n"
            )

    try:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            parts = consumer.partitions_for(args.topic)
            consumer.assign([TopicPartition(args.topic, p.partition) for p in parts])
        count, nbytes, first = poll_records(consumer, args, stop, emit, start)
    except KafkaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        consumer.close(10)
    end = time.monotonic()
    span = end - first
    rate = count / span if span > 0 and count else 0.0
    print(
        f"consumed {count} records, {nbytes / 1e6:.1f} MB in {span:.2f}s: {rate:,.0f} records/s, "
        f"{nbytes / 1e6 / span if span > 0 else 0.0:.1f} MB/s",
        file=sys.stderr,
    )
    return 0
