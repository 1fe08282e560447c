"""``handoff topics create|delete|list|describe``: manage topics with the project's own admin client.

The broker is ``--bootstrap-servers``, by default the ``--command-config`` file's, ``$HANDOFF_BOOTSTRAP``, the
broker ``handoff broker start`` started from this directory, or ``127.0.0.1:9092``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kafka_handoff.cli.command_config import (
    DEFAULT_BOOTSTRAP,
    add_command_config_arg,
    check_reachable,
    client_config,
    default_bootstrap,
)

if TYPE_CHECKING:
    from rich.console import Console

    from kafka_handoff.admin import AdminClient

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "add_connection_args",
    "add_json_arg",
    "connection_config",
    "console",
    "print_json",
    "print_rows",
    "run_admin",
]


# ------------------------------------------------------------------------------------- shared with groups.py
def add_connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-servers",
        "-b",
        default=None,
        metavar="HOST:PORT[,...]",
        help="brokers to connect to (default: the --command-config file's, $HANDOFF_BOOTSTRAP, the broker "
        f"`handoff broker start` started here, or {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the cluster")
    add_command_config_arg(parser)


def bootstrap_servers(args: argparse.Namespace) -> str:
    value: str | None = args.bootstrap_servers
    return value or default_bootstrap()[0]


def connection_config(args: argparse.Namespace, check: bool = True) -> dict[str, Any]:
    """Client settings of a command: ``--command-config`` FILE, ``--bootstrap-servers`` (or the file's, or
    ``$HANDOFF_BOOTSTRAP``, or the local ``handoff broker start`` broker, or the default).  With ``check``,
    fails fast (:class:`BrokerUnreachableError`) when no bootstrap address answers."""
    props = client_config(args, args.bootstrap_servers)
    if check:
        check_reachable(props, getattr(args, "bootstrap_source", ""))
    return props


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (for scripts) instead of tables")


def print_json(value: Any) -> None:
    """One JSON document on stdout (stable keys, for scripts)."""
    import json

    print(json.dumps(value, indent=2, sort_keys=True, default=str))


def print_rows(rows: list[dict[str, Any]], *, title: str, columns: Iterable[str], as_json: bool) -> None:
    """``rows`` as one JSON document (``as_json``), else as a table titled ``title`` whose ``columns`` take
    each row's values in order."""
    if as_json:
        print_json(rows)
        return
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    console().print(table)


def console() -> Console:
    """A rich console on the current stdout.  When stdout is not a terminal (a pipe, a file, a test) the
    width is unbounded, so tables keep their natural width and no cell is cut."""
    from rich.console import Console

    return Console(file=sys.stdout, width=None if sys.stdout.isatty() else 10_000, highlight=False)


def run_admin(args: argparse.Namespace, action: Callable[[AdminClient], int]) -> int:
    """Run ``action`` with an admin client; Kafka errors become a one-line message and exit status 1."""
    from kafka_handoff.admin import AdminClient
    from kafka_handoff.errors import KafkaError

    try:
        with AdminClient(connection_config(args)) as admin:
            return action(admin)
    except (KafkaError, ValueError) as exc:
        # One line: the first error, then the others of a per-resource operation (its notes).
        others = "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))
        print(f"handoff {args.command}: {exc}{others}".replace("\n", " "), file=sys.stderr)
        return 1


# ------------------------------------------------------------------------------------- parser
def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "topics", help="create, delete, list and describe topics", description=__doc__
    )
    actions = parser.add_subparsers(dest="topics_action", metavar="ACTION", required=True)

    create = actions.add_parser("create", help="create a topic (returns once it is usable)")
    create.add_argument("name")
    create.add_argument(
        "--partitions", "-p", type=int, default=-1, help="default: the broker's num.partitions"
    )
    create.add_argument(
        "--replication-factor",
        "-r",
        type=int,
        default=-1,
        help="default: the broker's default.replication.factor",
    )
    create.add_argument(
        "--config", "-c", action="append", default=[], metavar="KEY=VALUE", help="topic config (repeatable)"
    )
    create.add_argument("--if-not-exists", action="store_true", help="succeed if the topic exists already")
    add_connection_args(create)
    create.set_defaults(func=cmd_create)

    delete = actions.add_parser("delete", help="delete topics")
    delete.add_argument("names", nargs="+", metavar="NAME")
    delete.add_argument("--if-exists", action="store_true", help="succeed if a topic does not exist")
    add_connection_args(delete)
    delete.set_defaults(func=cmd_delete)

    listing = actions.add_parser("list", help="list topics with their partition counts")
    listing.add_argument("--internal", action="store_true", help="include internal topics")
    add_connection_args(listing)
    listing.set_defaults(func=cmd_list)

    describe = actions.add_parser("describe", help="partitions, leaders and configs of a topic")
    describe.add_argument("name")
    add_connection_args(describe)
    describe.set_defaults(func=cmd_describe)


def parse_configs(items: Iterable[str]) -> dict[str, str]:
    configs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--config {item!r} is not KEY=VALUE")
        configs[key.strip()] = value.strip()
    return configs


# ------------------------------------------------------------------------------------- commands
def cmd_create(args: argparse.Namespace) -> int:
    from kafka_handoff.admin import NewTopic

    try:
        configs = parse_configs(args.config)
    except ValueError as exc:
        print(f"handoff topics create: {exc}", file=sys.stderr)
        return 2

    def action(admin: AdminClient) -> int:
        topic = NewTopic(args.name, args.partitions, args.replication_factor, configs)
        result = admin.create_topics([topic], if_not_exists=args.if_not_exists, timeout=args.timeout)[
            args.name
        ]
        verb = "created" if result.created else "exists already:"
        print(
            f"{verb} topic {result.name} ({result.num_partitions} partitions, "
            f"replication factor {result.replication_factor}, id {result.topic_id})"
        )
        return 0

    return run_admin(args, action)


def cmd_delete(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        admin.delete_topics(args.names, if_exists=args.if_exists, timeout=args.timeout)
        for name in args.names:
            print(f"deleted topic {name}")
        return 0

    return run_admin(args, action)


def cmd_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    def action(admin: AdminClient) -> int:
        listings = admin.list_topics(include_internal=args.internal, timeout=args.timeout)
        described = (
            admin.describe_topics([t.name for t in listings], timeout=args.timeout) if listings else {}
        )
        table = Table(title=f"{len(listings)} topic(s)", title_justify="left")
        table.add_column("topic", no_wrap=True)
        table.add_column("partitions", justify="right")
        table.add_column("replication", justify="right")
        table.add_column("topic id", no_wrap=True)
        for t in listings:
            d = described.get(t.name)
            name = f"{t.name} (internal)" if t.internal else t.name
            if d is None:
                table.add_row(name, "?", "?", str(t.topic_id))
            else:
                table.add_row(name, str(len(d.partitions)), str(d.replication_factor), str(t.topic_id))
        console().print(table)
        return 0

    return run_admin(args, action)


def cmd_describe(args: argparse.Namespace) -> int:
    from rich.table import Table

    def action(admin: AdminClient) -> int:
        d = admin.describe_topics([args.name], timeout=args.timeout)[args.name]
        configs = admin.describe_configs([args.name], timeout=args.timeout)[args.name]
        out = console()
        out.print(
            f"topic {d.name}  id {d.topic_id}  partitions {len(d.partitions)}  "
            f"replication factor {d.replication_factor}{'  (internal)' if d.internal else ''}"
        )
        parts = Table(title="partitions", title_justify="left")
        for column in ("partition", "leader", "replicas", "isr", "offline"):
            parts.add_column(column, justify="right" if column in ("partition", "leader") else "left")
        for p in d.partitions:
            parts.add_row(
                str(p.partition),
                str(p.leader),
                ",".join(map(str, p.replicas)),
                ",".join(map(str, p.isr)),
                ",".join(map(str, p.offline_replicas)),
            )
        out.print(parts)
        set_here = {k: v for k, v in configs.items() if not v.is_default}
        cfg = Table(title="configs that are not defaults", title_justify="left")
        cfg.add_column("config", no_wrap=True)
        cfg.add_column("value")
        cfg.add_column("source")
        for name, entry in sorted(set_here.items()):
            cfg.add_row(name, "(sensitive)" if entry.sensitive else str(entry.value), entry.source)
        out.print(cfg)
        return 0

    return run_admin(args, action)
