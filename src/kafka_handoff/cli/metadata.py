"""``handoff metadata``: the cluster as its metadata shows it -- brokers, the controller, topics, partitions,
leaders, replicas, in-sync replicas and offline replicas (``--topic`` for some topics only)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kafka_handoff.cli.topics import add_connection_args, add_json_arg, console, print_json, run_admin

if TYPE_CHECKING:
    from kafka_handoff.admin import AdminClient


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "metadata", help="brokers, controller, topics, partitions, leaders, ISR", description=__doc__
    )
    parser.add_argument("--topic", "-t", action="append", default=None, help="only this topic (repeatable)")
    parser.add_argument("--internal", action="store_true", help="include internal topics")
    add_json_arg(parser)
    add_connection_args(parser)
    parser.set_defaults(func=cmd_metadata)


def cmd_metadata(args: argparse.Namespace) -> int:
    from rich.table import Table

    def action(admin: AdminClient) -> int:
        cluster = admin.describe_cluster(timeout=args.timeout)
        names = args.topic or [
            t.name for t in admin.list_topics(include_internal=args.internal, timeout=args.timeout)
        ]
        topics = admin.describe_topics(sorted(names), timeout=args.timeout) if names else {}
        if args.json:
            print_json(
                {
                    "cluster_id": cluster.cluster_id,
                    "controller_id": cluster.controller_id,
                    "brokers": [
                        {"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                        for b in cluster.brokers
                    ],
                    "topics": [
                        {
                            "name": t.name,
                            "topic_id": str(t.topic_id),
                            "internal": t.internal,
                            "partitions": [
                                {
                                    "partition": p.partition,
                                    "leader": p.leader,
                                    "replicas": list(p.replicas),
                                    "isr": list(p.isr),
                                    "offline_replicas": list(p.offline_replicas),
                                }
                                for p in t.partitions
                            ],
                        }
                        for t in topics.values()
                    ],
                }
            )
            return 0
        out = console()
        out.print(f"cluster {cluster.cluster_id}  controller {cluster.controller_id}")
        brokers = Table(title=f"{len(cluster.brokers)} broker(s)", title_justify="left")
        for column in ("id", "host", "port", "rack"):
            brokers.add_column(column)
        for b in cluster.brokers:
            brokers.add_row(str(b.node_id), b.host, str(b.port), b.rack or "-")
        out.print(brokers)
        parts = Table(title=f"{len(topics)} topic(s)", title_justify="left")
        parts.add_column("topic", no_wrap=True)
        for column in ("partition", "leader"):
            parts.add_column(column, justify="right")
        for column in ("replicas", "isr", "offline"):
            parts.add_column(column)
        for t in topics.values():
            for p in t.partitions:
                parts.add_row(
                    t.name,
                    str(p.partition),
                    str(p.leader),
                    ",".join(map(str, p.replicas)),
                    ",".join(map(str, p.isr)),
                    ",".join(map(str, p.offline_replicas)) or "-",
                )
        out.print(parts)
        return 0

    return run_admin(args, action)
