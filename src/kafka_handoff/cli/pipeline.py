"""``handoff pipeline run|show CONFIG.toml``: the Kafka -> Spark -> table pipeline.

``run`` starts one worker (a consumer-group member with its own Spark driver); start more with the same
config to scale out.  It stops on Ctrl-C/SIGTERM after committing the running batch, or by itself with
``--until-idle SECONDS`` / ``--max-records N``.  ``show`` prints the output table (merged per ``[show]``).
Settings can be overridden with ``--set section.key=value`` (e.g. ``--set kafka.bootstrap.servers=h:9092``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kafka_handoff.cli.command_config import add_command_config_arg


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "pipeline", help="run the Kafka -> Spark -> table pipeline, show its output", description=__doc__
    )
    actions = parser.add_subparsers(dest="pipeline_action", metavar="ACTION", required=True)

    run = actions.add_parser("run", help="run one pipeline worker (a consumer-group member)")
    run.add_argument("config", type=Path, help="pipeline config (TOML)")
    _add_set(run)
    add_command_config_arg(run)
    run.add_argument(
        "--until-idle",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop once no record arrived for this long and nothing is pending",
    )
    run.add_argument("--max-records", type=int, default=None, help="stop after committing this many records")
    run.add_argument("--summary-json", type=Path, default=None, help="also write the summary here as JSON")
    run.add_argument("--member", default=None, help="member name in progress and summary (default host-pid)")
    run.add_argument("--quiet", "-q", action="store_true", help="no per-batch progress lines")
    run.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="N",
        help="serve the consumer's and the worker's metrics for Prometheus at http://127.0.0.1:N/metrics",
    )
    run.set_defaults(func=cmd_run)

    show = actions.add_parser("show", help="print the pipeline's output table")
    show.add_argument("config", type=Path, help="pipeline config (TOML)")
    _add_set(show)
    show.add_argument("--limit", type=int, default=None, help="rows to print (default: [show] limit)")
    show.add_argument("--raw", action="store_true", help="the rows as written, without [show]'s merging")
    show.add_argument("--dead-letter", action="store_true", help="show the dead-letter table instead")
    show.set_defaults(func=cmd_show)


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value (repeatable)",
    )


def _stdout_console() -> Any:
    from rich.console import Console

    return Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200, highlight=False)


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from kafka_handoff.cli.command_config import load_command_config, load_registry_settings
    from kafka_handoff.errors import ConfigError, KafkaError
    from kafka_handoff.pipeline import load_config, run_worker

    err = Console(stderr=True, highlight=False)
    try:
        client_settings = None
        if args.command_config:
            # schema.registry.* (client.json) become the [schema_registry] settings (parse_avro)
            client_settings = {
                **load_command_config(args.command_config),
                **load_registry_settings(args.command_config),
            }
        config = load_config(args.config, args.overrides, client_settings=client_settings)
    except ConfigError as exc:
        err.print(f"[red]handoff pipeline run: {exc}[/red]")
        return 2
    try:
        summary = run_worker(
            config,
            console=None if args.quiet else err,
            until_idle_s=args.until_idle,
            max_records=args.max_records,
            member=args.member,
            summary_console=err,
            summary_json=args.summary_json,
            metrics_port=args.metrics_port,
        )
    except ConfigError as exc:
        err.print(f"[red]handoff pipeline run: {exc}[/red]")
        return 2
    except KafkaError as exc:
        err.print(f"[red]handoff pipeline run: {exc}[/red]")
        return 1
    return {"failed": 1, "interrupted": 130}.get(summary.status, 0)


def cmd_show(args: argparse.Namespace) -> int:
    from kafka_handoff.errors import ConfigError
    from kafka_handoff.pipeline import load_config
    from kafka_handoff.pipeline.show import aggregate, read_output, render

    out = _stdout_console()
    try:
        config = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"handoff pipeline show: {exc}", file=sys.stderr)
        return 2
    table = read_output(config, dead_letter=args.dead_letter)
    where = config.errors.dead_letter_path if args.dead_letter else config.sink.path
    if table.num_columns == 0:
        print(f"handoff pipeline show: nothing committed yet in {where}", file=sys.stderr)
        return 1
    rows = table.num_rows
    if not args.raw and not args.dead_letter:
        try:
            table = aggregate(table, config.show)
        except KeyError as exc:
            print(f"handoff pipeline show: {exc.args[0]}", file=sys.stderr)
            return 2
    limit = args.limit if args.limit is not None else config.show.limit
    title = f"{where}: {rows:,} rows written" + (
        f", {table.num_rows:,} after merging by {', '.join(config.show.group_by)}"
        if config.show.group_by and not args.raw and not args.dead_letter
        else ""
    )
    if table.num_rows > limit:
        title += f" (first {limit} shown)"
    out.print(render(table, limit, title))
    return 0
