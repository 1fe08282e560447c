"""``handoff partitions elect-leaders|reassign|reassignments``: leader elections (Kafka's
``kafka-leader-election`` flags) and partition reassignments (``kafka-reassign-partitions``' JSON file, or
``--topic T --partition P --replicas 1,2,3``; ``--cancel`` stops an ongoing move)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from kafka_handoff.cli.topics import add_connection_args, add_json_arg, print_rows, run_admin

if TYPE_CHECKING:
    from kafka_handoff.admin import AdminClient
    from kafka_handoff.types import TopicPartition


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "partitions", help="elect leaders, reassign partitions", description=__doc__
    )
    actions = parser.add_subparsers(dest="partitions_action", metavar="ACTION", required=True)

    elect = actions.add_parser("elect-leaders", help="preferred or unclean leader election")
    elect.add_argument("--election-type", choices=("preferred", "unclean"), required=True)
    scope = elect.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", "-t")
    scope.add_argument("--all-topic-partitions", action="store_true")
    elect.add_argument("--partition", "-p", type=int, action="append", default=None)
    add_json_arg(elect)
    add_connection_args(elect)
    elect.set_defaults(func=cmd_elect)

    reassign = actions.add_parser("reassign", help="move partitions to other replicas (or --cancel a move)")
    reassign.add_argument("--reassignment-json-file", type=argparse.FileType("r"), default=None)
    reassign.add_argument("--topic", "-t")
    reassign.add_argument("--partition", "-p", type=int, action="append", default=None)
    reassign.add_argument("--replicas", help="broker ids, e.g. 1,2,3")
    reassign.add_argument("--cancel", action="store_true", help="cancel the ongoing moves of the partitions")
    add_connection_args(reassign)
    reassign.set_defaults(func=cmd_reassign)

    ongoing = actions.add_parser("reassignments", help="the ongoing reassignments")
    add_json_arg(ongoing)
    add_connection_args(ongoing)
    ongoing.set_defaults(func=cmd_reassignments)


def _usage(args: argparse.Namespace, message: str) -> int:
    print(f"handoff partitions {args.partitions_action}: {message}", file=sys.stderr)
    return 2


def cmd_elect(args: argparse.Namespace) -> int:
    from kafka_handoff.admin import ElectionType
    from kafka_handoff.types import TopicPartition

    def action(admin: AdminClient) -> int:
        partitions: list[TopicPartition] | None = None
        if args.topic:
            parts = args.partition or [
                p.partition
                for p in admin.describe_topics([args.topic], timeout=args.timeout)[args.topic].partitions
            ]
            partitions = [TopicPartition(args.topic, p) for p in parts]
        result = admin.elect_leaders(
            ElectionType[args.election_type.upper()], partitions, timeout=args.timeout
        )
        failed = {tp: e for tp, e in result.items() if e is not None and "ELECTION_NOT_NEEDED" not in str(e)}
        rows = [
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "result": "elected"
                if e is None
                else ("not needed" if "ELECTION_NOT_NEEDED" in str(e) else str(e)),
            }
            for tp, e in result.items()
        ]
        print_rows(
            rows,
            title=f"{args.election_type} leader election",
            columns=("topic", "partition", "result"),
            as_json=args.json,
        )
        if failed:
            first = next(iter(failed.values()))
            print(f"handoff partitions elect-leaders: {len(failed)} failed; {first}", file=sys.stderr)
            return 1
        return 0

    return run_admin(args, action)


def _plan(args: argparse.Namespace) -> dict[TopicPartition, list[int] | None]:
    from kafka_handoff.types import TopicPartition

    if args.reassignment_json_file is not None:
        data = json.load(args.reassignment_json_file)
        return {
            TopicPartition(str(p["topic"]), int(p["partition"])): (
                None if args.cancel else [int(r) for r in p["replicas"]]
            )
            for p in data.get("partitions", [])
        }
    if not args.topic or not args.partition:
        raise ValueError("give --reassignment-json-file, or --topic and --partition (with --replicas)")
    if args.cancel:
        return {TopicPartition(args.topic, p): None for p in args.partition}
    if not args.replicas:
        raise ValueError("--replicas 1,2,3 (or --cancel)")
    replicas = [int(r) for r in args.replicas.split(",") if r.strip()]
    return {TopicPartition(args.topic, p): replicas for p in args.partition}


def cmd_reassign(args: argparse.Namespace) -> int:
    try:
        plan = _plan(args)
    except (ValueError, KeyError, TypeError) as exc:
        return _usage(args, str(exc))

    def action(admin: AdminClient) -> int:
        admin.alter_partition_reassignments(plan, timeout=args.timeout)
        for tp, replicas in sorted(plan.items()):
            what = "cancelled the move of" if replicas is None else f"moving to {replicas}:"
            print(f"{what} {tp}")
        return 0

    return run_admin(args, action)


def cmd_reassignments(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        ongoing = admin.list_partition_reassignments(timeout=args.timeout)
        rows = [
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "replicas": list(r.replicas),
                "adding": list(r.adding_replicas),
                "removing": list(r.removing_replicas),
            }
            for tp, r in ongoing.items()
        ]
        print_rows(
            rows,
            title=f"{len(rows)} ongoing reassignment(s)",
            columns=("topic", "partition", "replicas", "adding", "removing"),
            as_json=args.json,
        )
        return 0

    return run_admin(args, action)
