"""The ``handoff`` command: one argparse parser, one module per subcommand.

Adding a subcommand: create ``kafka_handoff/cli/<name>.py`` with ``register(subparsers)`` that adds its
parser and sets ``func`` (``func(args) -> int``, the exit status), and list ``<name>`` in
:data:`SUBCOMMAND_MODULES`.  Modules that do not exist yet are skipped, so the list may run ahead of the
code.  Import heavy dependencies (pyspark, confluent-kafka, ...) inside ``func``, not at module level, so
that ``handoff --help`` and ``handoff broker ...`` stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from kafka_handoff import __version__

__all__ = ["SUBCOMMAND_MODULES", "build_parser", "main"]

#: Subcommand modules in ``kafka_handoff.cli``, in help order.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "demo",
    "broker",
    "consume",
    "produce",
    "produce_sample",
    "topics",
    "metadata",
    "groups",
    "share_groups",
    "configs",
    "acls",
    "records",
    "partitions",
    "transactions",
    "users",
    "bench",
    "pipeline",
    "completion",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="handoff",
        description="kafka-handoff: a Kafka consumer that hands partitions over without stalls or duplicates",
    )
    parser.add_argument("--version", action="version", version=f"kafka-handoff {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        qualified = f"{__package__}.{name}"
        try:
            module = importlib.import_module(qualified)
        except ModuleNotFoundError as exc:
            if exc.name == qualified:
                continue  # not written yet
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
