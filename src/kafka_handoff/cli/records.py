"""``handoff records delete``: delete a topic's records before an offset (Kafka's
``kafka-delete-records``), moving each partition's log start offset forward."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kafka_handoff.cli.topics import add_connection_args, add_json_arg, console, print_json, run_admin

if TYPE_CHECKING:
    from kafka_handoff.admin import AdminClient


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("records", help="delete records before an offset", description=__doc__)
    actions = parser.add_subparsers(dest="records_action", metavar="ACTION", required=True)
    delete = actions.add_parser("delete", help="delete the records before --offset (-1: all of them)")
    delete.add_argument("--topic", "-t", required=True)
    delete.add_argument(
        "--partition", "-p", type=int, action="append", default=None, help="repeatable (default: all)"
    )
    delete.add_argument(
        "--offset", type=int, required=True, help="delete the records before it; -1: up to the high watermark"
    )
    add_json_arg(delete)
    add_connection_args(delete)
    delete.set_defaults(func=cmd_delete)


def cmd_delete(args: argparse.Namespace) -> int:
    from rich.table import Table

    from kafka_handoff.types import TopicPartition

    def action(admin: AdminClient) -> int:
        parts = args.partition
        if parts is None:
            parts = [
                p.partition
                for p in admin.describe_topics([args.topic], timeout=args.timeout)[args.topic].partitions
            ]
        result = admin.delete_records(
            {TopicPartition(args.topic, p): args.offset for p in parts}, timeout=args.timeout
        )
        if args.json:
            print_json(
                [
                    {"topic": tp.topic, "partition": tp.partition, "low_watermark": r.low_watermark}
                    for tp, r in result.items()
                ]
            )
            return 0
        table = Table(title=f"records deleted from {args.topic}", title_justify="left")
        table.add_column("partition", justify="right")
        table.add_column("low watermark", justify="right")
        for tp, r in result.items():
            table.add_row(str(tp.partition), str(r.low_watermark))
        console().print(table)
        return 0

    return run_admin(args, action)
