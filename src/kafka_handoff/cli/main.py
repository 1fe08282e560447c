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

__all__ = ["EXTRA_FOR_MODULE", "SUBCOMMAND_MODULES", "build_parser", "main", "missing_extra_message"]

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
    "spark",
    "completion",
)

#: The optional dependencies a subcommand may need, by top-level module, and the extra that installs each.
EXTRA_FOR_MODULE: dict[str, str] = {
    "rich": "cli",
    "pyspark": "pipeline",
    "pyarrow": "pipeline",
    "deltalake": "pipeline",
    "pandas": "pipeline",
    "numpy": "pipeline",
    "uvloop": "aio",
    "prometheus_client": "metrics",
    "opentelemetry": "metrics",
    "cryptography": "devbroker",
    "gssapi": "kerberos",
    "matplotlib": "bench",
    "psutil": "bench",
    "pyinstrument": "bench",
    "kafka": "bench",
    "aiokafka": "bench",
    "confluent_kafka": "dev",
}


def missing_extra_message(exc: ModuleNotFoundError) -> str | None:
    """What to install when ``exc`` is a missing optional dependency (None when it is not one)."""
    top = (exc.name or "").split(".", 1)[0]
    extra = EXTRA_FOR_MODULE.get(top)
    if extra is None:
        return None
    return (
        f"this command needs the optional package {top!r}, which is not installed; "
        f"install it with: pip install 'kafka-handoff[{extra}]'"
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
    except ModuleNotFoundError as exc:
        message = missing_extra_message(exc)
        if message is None:
            raise
        print(f"handoff: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
