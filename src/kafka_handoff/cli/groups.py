"""``handoff groups list|describe|delete``: consumer groups of both protocols (classic and KIP-848).

``describe`` shows the members with their assignments (and, for the consumer protocol, member epochs and
target assignments), then each partition's committed offset, log end offset and lag.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kafka_handoff.cli.topics import add_connection_args, console, run_admin

if TYPE_CHECKING:
    from kafka_handoff.admin import AdminClient
    from kafka_handoff.types import TopicPartition


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "groups", help="list, describe and delete consumer groups", description=__doc__
    )
    actions = parser.add_subparsers(dest="groups_action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="every group the cluster knows, with type and state")
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
        groups = admin.list_groups(timeout=args.timeout)
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
