"""``handoff share-groups list|describe|set-config|reset-offsets|delete``: KIP-932 share groups.

``describe`` shows the members with their assignments, then each partition's share-partition start offset
(every record below it is acknowledged) and lag.  ``set-config`` sets group configs such as
``share.auto.offset.reset=earliest``, ``share.record.lock.duration.ms`` or ``share.delivery.count.limit``.

Also home of ``handoff consume --share-group G`` (:func:`run_share_consume`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from kafka_handoff.cli.groups import format_partitions, run_delete
from kafka_handoff.cli.topics import add_connection_args, console, run_admin

if TYPE_CHECKING:
    from kafka_handoff.admin import AdminClient

__all__ = ["register", "run_share_consume"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "share-groups",
        help="list, describe, configure and delete share groups (KIP-932)",
        description=__doc__,
    )
    actions = parser.add_subparsers(dest="share_groups_action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="every share group, with its state")
    add_connection_args(listing)
    listing.set_defaults(func=cmd_list)

    describe = actions.add_parser("describe", help="members, assignments, start offsets and lag")
    describe.add_argument("group")
    add_connection_args(describe)
    describe.set_defaults(func=cmd_describe)

    config = actions.add_parser("set-config", help="set group configs (NAME=VALUE; NAME= deletes)")
    config.add_argument("group")
    config.add_argument("configs", nargs="+", metavar="NAME=VALUE")
    add_connection_args(config)
    config.set_defaults(func=cmd_set_config)

    reset = actions.add_parser(
        "reset-offsets", help="move an empty share group's start offsets of a topic (AlterShareGroupOffsets)"
    )
    reset.add_argument("group")
    reset.add_argument("topic")
    reset.add_argument("--to", required=True, metavar="earliest|latest|OFFSET", help="where to start")
    add_connection_args(reset)
    reset.set_defaults(func=cmd_reset_offsets)

    delete = actions.add_parser("delete", help="delete share groups (they must have no members)")
    delete.add_argument("groups", nargs="+", metavar="GROUP")
    add_connection_args(delete)
    delete.set_defaults(func=cmd_delete)


def cmd_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    def action(admin: AdminClient) -> int:
        groups = admin.list_share_groups(timeout=args.timeout)
        table = Table(title=f"{len(groups)} share group(s)", title_justify="left")
        table.add_column("group", no_wrap=True)
        table.add_column("state")
        for g in groups:
            table.add_row(g.group_id, g.state or "?")
        console().print(table)
        return 0

    return run_admin(args, action)


def cmd_describe(args: argparse.Namespace) -> int:
    from rich.table import Table

    def action(admin: AdminClient) -> int:
        group = admin.describe_share_groups([args.group], timeout=args.timeout)[args.group]
        offsets = admin.list_share_group_offsets(args.group, timeout=args.timeout)
        out = console()
        out.print(
            f"share group {group.group_id}  state {group.state}  assignor {group.assignor or '-'}  "
            f"coordinator node {group.coordinator}  group epoch {group.group_epoch}  "
            f"assignment epoch {group.assignment_epoch}"
        )
        members = Table(title=f"{len(group.members)} member(s)", title_justify="left")
        for column in ("member id", "client id", "host", "epoch", "subscription", "assignment"):
            members.add_column(column, overflow="fold")
        for m in group.members:
            members.add_row(
                m.member_id,
                m.client_id,
                m.client_host,
                str(m.member_epoch),
                ",".join(m.subscribed_topics),
                format_partitions(m.assignment),
            )
        out.print(members)
        table = Table(title="share-partition offsets", title_justify="left")
        table.add_column("topic", no_wrap=True)
        for column in ("partition", "start offset", "lag"):
            table.add_column(column, justify="right")
        total = 0
        for tp, o in offsets.items():
            total += o.lag or 0
            table.add_row(
                tp.topic,
                str(tp.partition),
                str(o.start_offset) if o.start_offset >= 0 else "-",
                "-" if o.lag is None else str(o.lag),
            )
        out.print(table)
        out.print(f"total lag {total}")
        return 0

    return run_admin(args, action)


def cmd_set_config(args: argparse.Namespace) -> int:
    configs: dict[str, str | None] = {}
    for item in args.configs:
        name, sep, value = item.partition("=")
        if not sep or not name:
            print(f"handoff share-groups set-config: {item!r} is not NAME=VALUE", file=sys.stderr)
            return 2
        configs[name] = value or None

    def action(admin: AdminClient) -> int:
        admin.alter_group_configs(args.group, configs, timeout=args.timeout)
        for name, value in configs.items():
            print(f"{args.group}: {name}={'(deleted)' if value is None else value}")
        return 0

    return run_admin(args, action)


def cmd_reset_offsets(args: argparse.Namespace) -> int:
    from kafka_handoff.admin import OffsetSpec
    from kafka_handoff.types import TopicPartition

    target = str(args.to).strip().lower()
    if target not in ("earliest", "latest") and not target.isdigit():
        allowed = "earliest, latest, or an offset >= 0"
        print(f"handoff share-groups reset-offsets: --to {args.to!r}: allowed: {allowed}", file=sys.stderr)
        return 2

    def action(admin: AdminClient) -> int:
        described = admin.describe_topics([args.topic], timeout=args.timeout)[args.topic]
        partitions = [TopicPartition(args.topic, p.partition) for p in described.partitions]
        if target.isdigit():
            offsets = dict.fromkeys(partitions, int(target))
        else:
            spec = OffsetSpec.EARLIEST if target == "earliest" else OffsetSpec.LATEST
            offsets = admin.list_offsets(partitions, spec, timeout=args.timeout)
        admin.alter_share_group_offsets(args.group, offsets, timeout=args.timeout)
        for tp, offset in sorted(offsets.items()):
            print(f"{args.group}: {tp.topic}-{tp.partition} start offset {offset}")
        return 0

    return run_admin(args, action)


def cmd_delete(args: argparse.Namespace) -> int:
    return run_delete(
        args, lambda admin: admin.delete_share_groups(args.groups, timeout=args.timeout), "share group"
    )


def run_share_consume(args: argparse.Namespace, config: dict[str, Any], text: Any) -> int:
    """``handoff consume --share-group G``: each record is acknowledged (ACCEPT) once it was printed, so
    the records of a poll not printed when ``--max-records`` stops are released by ``close()`` for other
    members (explicit acknowledgement, unless ``-X share.acknowledgement.mode=implicit``).
    ``--from-beginning`` sets the group config ``share.auto.offset.reset=earliest`` first."""
    from kafka_handoff.admin import AdminClient
    from kafka_handoff.config import ADMIN_CONFIG_DEF
    from kafka_handoff.errors import ConfigError, KafkaError
    from kafka_handoff.share import ShareConsumer

    config = {k: v for k, v in config.items() if k != "auto.offset.reset"}
    config["group.id"] = args.share_group
    config.setdefault("share.acknowledgement.mode", "explicit")
    explicit = config["share.acknowledgement.mode"] == "explicit"
    try:
        if args.from_beginning:
            admin_config = {k: v for k, v in config.items() if k in ADMIN_CONFIG_DEF}
            with AdminClient(admin_config) as admin:
                admin.alter_group_configs(
                    args.share_group, {"share.auto.offset.reset": "earliest"}, timeout=30
                )
        consumer = ShareConsumer(config)
    except (ConfigError, KafkaError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from kafka_handoff.cli.polling import poll_records, stop_on_signals

    stop = stop_on_signals(consumer.wakeup)
    start = time.monotonic()
    out = sys.stdout

    def emit(r: Any) -> None:
        if args.format == "text":
            out.write(
                f"{r.topic}-{r.partition}@{r.offset}\tdelivery {r.delivery_count}\t{text(r.key)}\t"
                f"{text(r.value)}\n"
            )
        elif args.format == "json":
            record = {
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "delivery_count": r.delivery_count,
                "timestamp": r.timestamp,
                "key": text(r.key),
                "value": text(r.value),
                "headers": [[k, text(v)] for k, v in r.headers],
            }
            out.write(json.dumps(record) + "\n")
        if explicit:
            consumer.acknowledge(r)

    try:
        consumer.subscribe([args.topic])
        count, nbytes, first = poll_records(consumer, args, stop, emit, start)
        if explicit:
            consumer.commit_sync(10)
    except KafkaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        consumer.close(10)
    span = time.monotonic() - first
    rate = count / span if span > 0 and count else 0.0
    print(
        f"consumed {count} records (share group {args.share_group}), {nbytes / 1e6:.1f} MB in {span:.2f}s: "
        f"{rate:,.0f} records/s",
        file=sys.stderr,
    )
    return 0
