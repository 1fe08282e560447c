"""``handoff transactions list|describe|abort``: the transactions the cluster coordinates (Kafka's
``kafka-transactions``).  ``abort --topic T --partition P [--start-offset O]`` aborts the hanging
transaction on a partition (the one starting at O, or the only one there), as Kafka's tool does."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kafka_handoff.cli.topics import (
    add_connection_args,
    add_json_arg,
    console,
    print_json,
    print_rows,
    run_admin,
)

if TYPE_CHECKING:
    from kafka_handoff.admin import AdminClient


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("transactions", help="list and describe transactions", description=__doc__)
    actions = parser.add_subparsers(dest="transactions_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every transaction, with its state and producer id")
    listing.add_argument(
        "--state", action="append", default=None, help="Ongoing, CompleteCommit, ... (repeatable)"
    )
    add_json_arg(listing)
    add_connection_args(listing)
    listing.set_defaults(func=cmd_list)

    describe = actions.add_parser("describe", help="state, producer, timeout and partitions of a transaction")
    describe.add_argument("--transactional-id", required=True)
    add_json_arg(describe)
    add_connection_args(describe)
    describe.set_defaults(func=cmd_describe)

    abort = actions.add_parser("abort", help="abort the hanging transaction on a partition")
    abort.add_argument("--topic", "-t", required=True)
    abort.add_argument("--partition", "-p", type=int, required=True)
    abort.add_argument("--start-offset", type=int, default=None, help="the open transaction's first offset")
    add_connection_args(abort)
    abort.set_defaults(func=cmd_abort)


def cmd_abort(args: argparse.Namespace) -> int:
    import sys

    from kafka_handoff.admin import AbortTransactionSpec
    from kafka_handoff.types import TopicPartition

    tp = TopicPartition(args.topic, args.partition)

    def action(admin: AdminClient) -> int:
        open_ = [
            s
            for s in admin.describe_producers([tp], timeout=args.timeout).get(tp, [])
            if s.current_transaction_start_offset is not None
            and (args.start_offset is None or s.current_transaction_start_offset == args.start_offset)
        ]
        if len(open_) != 1:
            what = (
                "no open transaction"
                if not open_
                else f"{len(open_)} open transactions (give --start-offset)"
            )
            print(f"handoff transactions abort: {tp} has {what}", file=sys.stderr)
            return 1
        s = open_[0]
        admin.abort_transaction(
            AbortTransactionSpec(tp, s.producer_id, s.producer_epoch, s.coordinator_epoch),
            timeout=args.timeout,
        )
        print(
            f"aborted the transaction of producer {s.producer_id} on {tp} "
            f"(started at offset {s.current_transaction_start_offset})"
        )
        return 0

    return run_admin(args, action)


def cmd_list(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        listed = admin.list_transactions(states=args.state, timeout=args.timeout)
        rows = [
            {"transactional_id": t.transactional_id, "producer_id": t.producer_id, "state": t.state}
            for t in listed
        ]
        print_rows(
            rows,
            title=f"{len(rows)} transaction(s)",
            columns=("transactional id", "producer id", "state"),
            as_json=args.json,
        )
        return 0

    return run_admin(args, action)


def cmd_describe(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        d = admin.describe_transactions([args.transactional_id], timeout=args.timeout)[args.transactional_id]
        row = {
            "transactional_id": d.transactional_id,
            "coordinator_id": d.coordinator_id,
            "state": d.state,
            "producer_id": d.producer_id,
            "producer_epoch": d.producer_epoch,
            "transaction_timeout_ms": d.transaction_timeout_ms,
            "transaction_start_time_ms": d.transaction_start_time_ms,
            "partitions": [str(tp) for tp in d.topic_partitions],
        }
        if args.json:
            print_json(row)
            return 0
        out = console()
        for key, value in row.items():
            shown = ", ".join(value) or "-" if isinstance(value, list) else value
            out.print(f"{key.replace('_', ' ')}: {shown}")
        return 0

    return run_admin(args, action)
