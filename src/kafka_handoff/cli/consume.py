"""``handoff consume``: a console consumer, like kcat's consumer mode.

Without ``--group`` it assigns every partition of the topic (or ``--partition``s; no group membership) and
starts where ``--offset`` says (``beginning``, ``end``, ``N``, or ``-N``: N before the end of each
partition) or at ``--since 10m`` / ``--timestamp MS`` (the first record at or after that time);
``--until-end`` exits once every partition reached the end it had at the start.  With ``--group`` it
subscribes and joins the group.  ``--format text|json|none`` or a template such as
``'{partition}:{offset} {key} {value}'`` (fields: topic, partition, offset, timestamp, key, value,
headers); ``--format none`` prints only counts and the rate (for measuring).  The JSON lines are stable:
``{"topic", "partition", "offset", "timestamp", "key", "value", "headers": [[k, v], ...]}`` with keys,
values and header values as UTF-8 text, or ``"base64:..."`` when they are not UTF-8 (``null`` for none).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from typing import Any

from kafka_handoff.cli.command_config import add_command_config_arg, check_reachable, client_config
from kafka_handoff.cli.polling import poll_records, stop_on_signals

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "consume", help="consume records from a topic and print them (or just count them)"
    )
    p.add_argument(
        "--bootstrap-servers",
        default=None,
        help="host:port[,host:port] (default: the --command-config file's, $HANDOFF_BOOTSTRAP, the broker "
        "`handoff broker start` started here, or 127.0.0.1:9092)",
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
    p.add_argument(
        "--format",
        default="text",
        help="text, json, none, or a template like '{partition}:{offset} {key} {value}' (fields: topic, "
        "partition, offset, timestamp, key, value, headers)",
    )
    p.add_argument(
        "--offset",
        "-o",
        default=None,
        help="where to start without --group: beginning, end, N, or -N (N before the end)",
    )
    p.add_argument(
        "--since", default=None, help="start at records from this long ago: 90s, 10m, 2h, 1d, PT10M"
    )
    p.add_argument("--timestamp", type=int, default=None, help="start at this time (ms since the epoch)")
    p.add_argument("--partition", "-p", type=int, action="append", default=None, help="repeatable")
    p.add_argument("--count", "-c", type=int, default=None, help="stop after this many records")
    p.add_argument(
        "--until-end",
        "-e",
        action="store_true",
        help="exit at the end offsets the partitions had at the start",
    )
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
    from kafka_handoff.cli.command_config import BrokerUnreachableError
    from kafka_handoff.consumer import Consumer
    from kafka_handoff.errors import ConfigError, KafkaError
    from kafka_handoff.types import TopicPartition

    try:
        config = client_config(args, args.bootstrap_servers)
        check_reachable(config, getattr(args, "bootstrap_source", ""))
    except BrokerUnreachableError as exc:
        print(f"handoff consume: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.count is not None:
        args.max_records = args.count
    positioned = args.offset is not None or args.since is not None or args.timestamp is not None
    if args.group and (positioned or args.partition or args.until_end):
        print(
            "error: --offset, --since, --timestamp, --partition and --until-end work without --group",
            file=sys.stderr,
        )
        return 2
    if sum(x is not None for x in (args.offset, args.since, args.timestamp)) > 1:
        print("error: give one of --offset, --since, --timestamp", file=sys.stderr)
        return 2
    if args.format not in ("text", "json", "none") and "{" not in args.format:
        print(
            f"error: --format {args.format!r}: text, json, none or a template with {{fields}}",
            file=sys.stderr,
        )
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

    ends: dict[TopicPartition, int] = {}
    reached: set[TopicPartition] = set()

    def emit(r: Any) -> None:
        if ends:
            tp = TopicPartition(r.topic, r.partition)
            if tp in reached or r.offset >= ends.get(tp, 0):
                return
            if r.offset + 1 >= ends[tp]:
                reached.add(tp)
                if len(reached) == len(ends):
                    stop["flag"] = True
        if args.format not in ("text", "json", "none"):
            fields = {
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": _text(r.key),
                "value": _text(r.value),
                "headers": ",".join(f"{k}={_text(v)}" for k, v in r.headers),
            }
            try:
                out.write(args.format.format(**fields) + "\n")
            except (KeyError, IndexError, ValueError) as exc:
                raise SystemExit(f"error: --format {args.format!r}: {exc!r} is not a field") from None
        elif args.format == "text":
            out.write(f"{r.topic}-{r.partition}@{r.offset}\t{_text(r.key)}\t{_text(r.value)}\n")
        elif args.format == "json":
            out.write(
                json.dumps(
                    {
                        "topic": r.topic,
                        "partition": r.partition,
                        "offset": r.offset,
                        "timestamp": r.timestamp,
                        "key": None if r.key is None else _text(r.key),
                        "value": None if r.value is None else _text(r.value),
                        "headers": [[k, None if v is None else _text(v)] for k, v in r.headers],
                    }
                )
                + "\n"
            )

    try:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            parts = consumer.partitions_for(args.topic)
            known = [p.partition for p in parts]
            chosen = args.partition if args.partition else known
            unknown = sorted(set(chosen) - set(known))
            if unknown:
                print(
                    f"error: {args.topic} has no partition {unknown} (it has 0..{len(known) - 1})",
                    file=sys.stderr,
                )
                return 1
            tps = [TopicPartition(args.topic, p) for p in chosen]
            consumer.assign(tps)
            position(consumer, tps, args)
            if args.until_end:
                starts = {tp: consumer.position(tp) for tp in tps}
                ends.update(consumer.end_offsets(tps))
                reached.update(tp for tp in tps if starts[tp] >= ends[tp])
                if len(reached) == len(ends):
                    stop["flag"] = True
        count, nbytes, first = poll_records(consumer, args, stop, emit, start)
    except (KafkaError, ValueError) as exc:
        print(f"handoff consume: {exc}", file=sys.stderr)
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


def position(consumer: Any, tps: list[Any], args: argparse.Namespace) -> None:
    """Seek the assigned partitions where ``--offset``/``--since``/``--timestamp`` say."""
    if args.since is not None or args.timestamp is not None:
        if args.timestamp is not None:
            at = args.timestamp
        else:
            from kafka_handoff.cli.groups import parse_duration_ms

            at = int(time.time() * 1000) - parse_duration_ms(args.since)
        found = consumer.offsets_for_times({tp: at for tp in tps})
        ends = consumer.end_offsets(tps)
        for tp in tps:
            hit = found.get(tp)
            consumer.seek(tp, hit.offset if hit is not None else ends[tp])
        return
    spec = args.offset
    if spec is None:
        if args.from_beginning:
            consumer.seek_to_beginning(tps)
        return
    if spec == "beginning":
        consumer.seek_to_beginning(tps)
    elif spec == "end":
        consumer.seek_to_end(tps)
    else:
        try:
            n = int(spec)
        except ValueError:
            raise ValueError(f"--offset {spec!r}: beginning, end, N or -N") from None
        if n >= 0:
            for tp in tps:
                consumer.seek(tp, n)
        else:
            begins = consumer.beginning_offsets(tps)
            ends = consumer.end_offsets(tps)
            for tp in tps:
                consumer.seek(tp, max(begins[tp], ends[tp] + n))
