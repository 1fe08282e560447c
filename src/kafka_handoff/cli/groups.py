"""``handoff groups list|describe|delete|lag|reset-offsets|delete-offsets``: consumer groups of both
protocols (classic and KIP-848).

``describe`` shows the members with their assignments (and, for the consumer protocol, member epochs and
target assignments), then each partition's committed offset, log end offset and lag.  ``lag`` shows only the
offsets and lag, with a total.  ``reset-offsets`` takes the flags of Kafka's ``kafka-consumer-groups
--reset-offsets`` (``--to-earliest``, ``--to-latest``, ``--to-offset N``, ``--to-datetime T``,
``--by-duration D``, ``--shift-by N``); it only shows the plan (``--dry-run``, the default) unless given
``--execute``, which needs a group without active members.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kafka_handoff.cli.topics import add_connection_args, add_json_arg, console, print_json, run_admin

if TYPE_CHECKING:
    from kafka_handoff.admin import AdminClient
    from kafka_handoff.types import TopicPartition


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "groups", help="list, describe and delete consumer groups", description=__doc__
    )
    actions = parser.add_subparsers(dest="groups_action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="every group the cluster knows, with type and state")
    listing.add_argument(
        "--type", action="append", default=None, help="classic, consumer, share, streams (repeatable)"
    )
    listing.add_argument("--state", action="append", default=None, help="Stable, Empty, ... (repeatable)")
    add_json_arg(listing)
    add_connection_args(listing)
    listing.set_defaults(func=cmd_list)

    describe = actions.add_parser("describe", help="members, assignments, committed offsets and lag")
    describe.add_argument("group")
    add_connection_args(describe)
    describe.set_defaults(func=cmd_describe)

    delete = actions.add_parser("delete", help="delete groups (they must have no active members)")
    delete.add_argument("groups", nargs="+", metavar="GROUP")
    add_connection_args(delete)
    delete.set_defaults(func=cmd_delete)

    lag = actions.add_parser(
        "lag", help="committed offset, log end offset and lag per partition, with a total"
    )
    lag.add_argument("group")
    lag.add_argument(
        "--watch",
        type=float,
        default=None,
        metavar="SECONDS",
        help="show it again every SECONDS (Ctrl-C stops)",
    )
    lag.add_argument("--iterations", type=int, default=0, help=argparse.SUPPRESS)  # --watch rounds (tests)
    add_json_arg(lag)
    add_connection_args(lag)
    lag.set_defaults(func=cmd_lag)

    reset = actions.add_parser(
        "reset-offsets",
        help="move a group's committed offsets (kafka-consumer-groups --reset-offsets flags; dry run by "
        "default)",
    )
    reset.add_argument("--group", required=True)
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC[:P,P...]",
        help="a topic (every partition) or some of its partitions; repeatable",
    )
    scope.add_argument(
        "--all-topics", action="store_true", help="every partition the group has an offset for"
    )
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument(
        "--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss", help="ISO date-time (no zone: local time)"
    )
    to.add_argument(
        "--by-duration", metavar="DURATION", help="back from now: ISO-8601 (PT10M) or 10m, 2h, 1d"
    )
    to.add_argument("--shift-by", type=int, metavar="N", help="move by N (negative: back)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the new offsets only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    add_json_arg(reset)
    add_connection_args(reset)
    reset.set_defaults(func=cmd_reset_offsets)

    delete_offsets = actions.add_parser(
        "delete-offsets", help="delete a group's committed offsets of topics (or some partitions)"
    )
    delete_offsets.add_argument("--group", required=True)
    delete_offsets.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P...]")
    add_connection_args(delete_offsets)
    delete_offsets.set_defaults(func=cmd_delete_offsets)


def format_partitions(partitions: Iterable[TopicPartition] | None) -> str:
    """``topic: 0,1,2; other: 5`` (``-`` for none)."""
    if partitions is None:
        return "-"
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if not by_topic:
        return "-"
    return "; ".join(f"{t}: {','.join(map(str, ps))}" for t, ps in by_topic.items())


def cmd_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    def action(admin: AdminClient) -> int:
        groups = admin.list_groups(timeout=args.timeout, types=args.type, states=args.state)
        if args.json:
            print_json(
                [
                    {"group": g.group_id, "type": g.type, "state": g.state, "protocol_type": g.protocol_type}
                    for g in groups
                ]
            )
            return 0
        table = Table(title=f"{len(groups)} group(s)", title_justify="left")
        table.add_column("group", no_wrap=True)
        table.add_column("type")
        table.add_column("state")
        table.add_column("protocol type")
        for g in groups:
            table.add_row(g.group_id, g.type or "?", g.state or "?", g.protocol_type or "-")
        console().print(table)
        return 0

    return run_admin(args, action)


def cmd_describe(args: argparse.Namespace) -> int:
    from rich.table import Table

    def action(admin: AdminClient) -> int:
        group = admin.describe_groups([args.group], timeout=args.timeout)[args.group]
        committed = admin.list_group_offsets(args.group, timeout=args.timeout)
        owners: dict[TopicPartition, str] = {}
        for m in group.members:
            for tp in m.assignment:
                owners[tp] = m.client_id or m.member_id
        partitions = sorted(set(committed) | set(owners))
        ends = admin.list_offsets(partitions, timeout=args.timeout) if partitions else {}

        out = console()
        coordinator = f"node {group.coordinator.node_id}" if group.coordinator is not None else "?"
        epochs = ""
        if group.group_epoch is not None:
            epochs = f"  group epoch {group.group_epoch}  assignment epoch {group.assignment_epoch}"
        out.print(
            f"group {group.group_id}  type {group.type}  state {group.state}  "
            f"assignor {group.assignor or '-'}  coordinator {coordinator}{epochs}"
        )

        members = Table(title=f"{len(group.members)} member(s)", title_justify="left")
        members.add_column("member id", no_wrap=True)
        members.add_column("client id")
        members.add_column("host")
        consumer_protocol = group.type == "consumer"
        if consumer_protocol:
            members.add_column("epoch", justify="right")
        members.add_column("assignment", overflow="fold")
        if consumer_protocol:
            members.add_column("target assignment", overflow="fold")
        for m in group.members:
            row = [m.member_id, m.client_id, m.host]
            if consumer_protocol:
                row.append(str(m.member_epoch))
            row.append(format_partitions(m.assignment))
            if consumer_protocol:
                row.append(format_partitions(m.target_assignment))
            members.add_row(*row)
        out.print(members)

        offsets = Table(title="offsets", title_justify="left")
        offsets.add_column("topic", no_wrap=True)
        for column in ("partition", "committed", "end offset", "lag"):
            offsets.add_column(column, justify="right")
        offsets.add_column("owner")
        total_lag = 0
        for tp in partitions:
            c = committed.get(tp)
            end = ends.get(tp)
            lag = None if c is None or end is None else max(0, end - c.offset)
            total_lag += lag or 0
            offsets.add_row(
                tp.topic,
                str(tp.partition),
                "-" if c is None else str(c.offset),
                "-" if end is None else str(end),
                "-" if lag is None else str(lag),
                owners.get(tp, "-"),
            )
        out.print(offsets)
        out.print(f"total lag {total_lag}")
        return 0

    return run_admin(args, action)


def cmd_delete(args: argparse.Namespace) -> int:
    return run_delete(args, lambda admin: admin.delete_groups(args.groups, timeout=args.timeout), "group")


def run_delete(args: argparse.Namespace, delete: Callable[[AdminClient], None], what: str) -> int:
    """``delete GROUP...`` of ``groups`` and ``share-groups``: ``delete`` them, then one line per group."""

    def action(admin: AdminClient) -> int:
        delete(admin)
        for g in args.groups:
            print(f"deleted {what} {g}")
        return 0

    return run_admin(args, action)


def parse_topic_partitions(items: Iterable[str]) -> tuple[list[str], list[TopicPartition]]:
    """``--topic`` values: ``orders`` (every partition) or ``orders:0,2`` (those) -> (names, partitions)."""
    from kafka_handoff.types import TopicPartition

    names: list[str] = []
    partitions: list[TopicPartition] = []
    for item in items:
        topic, sep, parts = item.partition(":")
        if not topic:
            raise ValueError(f"--topic {item!r}: expected TOPIC or TOPIC:P,P")
        if not sep:
            names.append(topic)
            continue
        try:
            partitions.extend(TopicPartition(topic, int(p)) for p in parts.split(",") if p.strip())
        except ValueError:
            raise ValueError(f"--topic {item!r}: partitions must be integers (TOPIC:0,1)") from None
    return names, partitions


def parse_duration_ms(text: str) -> int:
    """``PT10M``/``P1DT2H`` (ISO-8601, as Kafka's tool) or ``90s``, ``10m``, ``2h``, ``1d`` -> ms."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*", text)
    if match:
        unit = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}[match[2]]
        return int(float(match[1]) * unit)
    from kafka_handoff.config import _parse_iso8601_duration_nanos

    try:
        return abs(_parse_iso8601_duration_nanos(text)) // 1_000_000
    except ValueError:
        raise ValueError(
            f"{text!r} is not a duration: use ISO-8601 (PT10M, P1DT2H) or 90s, 10m, 2h, 1d"
        ) from None


def parse_datetime_ms(text: str) -> int:
    """An ISO-8601 date-time (``2026-12-01T10:00:00``, ``...Z``, ``...+01:00``; no zone: local time) -> ms."""
    import datetime as dt

    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS[.sss][Z|+hh:mm]") from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, as Kafka's tool
    return int(when.timestamp() * 1000)


def reset_spec(args: argparse.Namespace) -> Any:
    from kafka_handoff.admin import ResetSpec

    if args.to_earliest:
        return ResetSpec.to_earliest()
    if args.to_latest:
        return ResetSpec.to_latest()
    if args.to_offset is not None:
        return ResetSpec.to_offset(args.to_offset)
    if args.to_datetime is not None:
        return ResetSpec.to_timestamp(parse_datetime_ms(args.to_datetime))
    if args.by_duration is not None:
        return ResetSpec.by_duration(parse_duration_ms(args.by_duration))
    return ResetSpec.shift_by(args.shift_by)


def cmd_reset_offsets(args: argparse.Namespace) -> int:
    import sys

    from rich.table import Table

    try:
        spec = reset_spec(args)
        names, partitions = parse_topic_partitions(args.topic or [])
    except ValueError as exc:
        print(f"handoff groups reset-offsets: {exc}", file=sys.stderr)
        return 2
    topics: list[str | TopicPartition] | None = None if args.all_topics else [*names, *partitions]

    def action(admin: AdminClient) -> int:
        plan = admin.reset_consumer_group_offsets(
            args.group, spec, topics=topics, dry_run=not args.execute, timeout=args.timeout
        )
        if args.json:
            print_json(
                {
                    "group": args.group,
                    "executed": bool(args.execute),
                    "partitions": [
                        {
                            "topic": r.partition.topic,
                            "partition": r.partition.partition,
                            "current": r.current,
                            "new": r.new,
                        }
                        for r in plan
                    ],
                }
            )
            return 0
        verb = "reset" if args.execute else "would reset (dry run; add --execute to commit)"
        table = Table(title=f"group {args.group}: {verb}", title_justify="left")
        table.add_column("topic", no_wrap=True)
        for column in ("partition", "current offset", "new offset"):
            table.add_column(column, justify="right")
        for r in plan:
            table.add_row(
                r.partition.topic,
                str(r.partition.partition),
                "-" if r.current is None else str(r.current),
                str(r.new),
            )
        console().print(table)
        return 0

    return run_admin(args, action)


def cmd_delete_offsets(args: argparse.Namespace) -> int:
    import sys

    try:
        names, partitions = parse_topic_partitions(args.topic)
    except ValueError as exc:
        print(f"handoff groups delete-offsets: {exc}", file=sys.stderr)
        return 2

    def action(admin: AdminClient) -> int:
        wanted = set(partitions)
        if names:
            committed = admin.list_group_offsets(args.group, timeout=args.timeout)
            wanted.update(tp for tp in committed if tp.topic in names)
        if not wanted:
            print(f"group {args.group} has no committed offsets of {', '.join(args.topic)}", file=sys.stderr)
            return 1
        admin.delete_consumer_group_offsets(args.group, sorted(wanted), timeout=args.timeout)
        print(f"deleted the offsets of group {args.group} for {format_partitions(wanted)}")
        return 0

    return run_admin(args, action)


def cmd_lag(args: argparse.Namespace) -> int:
    from rich.table import Table

    def action(admin: AdminClient) -> int:
        import time

        rounds = 0
        while True:
            show_lag(admin)
            rounds += 1
            if args.watch is None or (args.iterations and rounds >= args.iterations):
                return 0
            try:
                time.sleep(args.watch)
            except KeyboardInterrupt:
                return 0

    def show_lag(admin: AdminClient) -> None:
        committed = admin.list_group_offsets(args.group, timeout=args.timeout)
        partitions = sorted(committed)
        ends = admin.list_offsets(partitions, timeout=args.timeout) if partitions else {}
        rows = []
        total = 0
        for tp in partitions:
            meta = committed[tp]
            end = ends.get(tp)
            lag = None if meta is None or end is None else max(0, end - meta.offset)
            total += lag or 0
            rows.append((tp, None if meta is None else meta.offset, end, lag))
        if args.json:
            print_json(
                {
                    "group": args.group,
                    "total_lag": total,
                    "partitions": [
                        {
                            "topic": tp.topic,
                            "partition": tp.partition,
                            "committed": c,
                            "end_offset": e,
                            "lag": lag,
                        }
                        for tp, c, e, lag in rows
                    ],
                }
            )
            return
        table = Table(title=f"group {args.group}: lag", title_justify="left")
        table.add_column("topic", no_wrap=True)
        for column in ("partition", "committed", "end offset", "lag"):
            table.add_column(column, justify="right")
        for tp, c, e, lag in rows:
            table.add_row(
                tp.topic,
                str(tp.partition),
                "-" if c is None else str(c),
                "-" if e is None else str(e),
                "-" if lag is None else str(lag),
            )
        out = console()
        out.print(table)
        out.print(f"total lag {total}")

    return run_admin(args, action)
