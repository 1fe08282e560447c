"""``handoff spark start|stop|status``: a local Spark standalone cluster (master + workers) in the background.

Started from the installed pyspark package (``bin/spark-class``), detached: it keeps running until
``handoff spark stop`` (same ``--dir``).  ``start`` prints the master URL, for example for
``handoff bench pipeline --master spark://127.0.0.1:PORT`` or ``[spark] master`` in a pipeline config.
Executors import kafka_handoff from this installation and run the interpreter that started the cluster.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DEFAULT_DIR = Path(".handoff") / "spark"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "spark",
        help="start/stop a local Spark standalone cluster (master + workers) for the pipeline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="spark_action", metavar="ACTION", required=True)
    start = actions.add_parser("start", help="start a master and workers; print the master URL")
    start.add_argument("--workers", type=int, default=2, help="standalone workers (separate JVMs)")
    start.add_argument("--cores", type=int, default=1, help="cores each worker offers")
    start.add_argument("--memory", default="1g", help="memory each worker offers (Spark size)")
    start.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for readiness")
    _dir_arg(start)
    start.set_defaults(func=cmd_start)
    stop = actions.add_parser("stop", help="stop the cluster started with the same --dir")
    _dir_arg(stop)
    stop.set_defaults(func=cmd_stop)
    status = actions.add_parser("status", help="print the master URL if the cluster runs")
    _dir_arg(status)
    status.set_defaults(func=cmd_status)


def _dir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help=f"cluster directory (default {DEFAULT_DIR})"
    )


def cmd_start(args: argparse.Namespace) -> int:
    from kafka_handoff.devbroker.spark import SparkStandalone

    running = SparkStandalone.attach(args.dir)
    if running is not None:
        print(running.url)
        return 0
    cluster = SparkStandalone(
        workers=args.workers,
        cores_per_worker=args.cores,
        memory_per_worker=args.memory,
        directory=args.dir,
        supervised=False,
    ).start(timeout=args.timeout)
    print(cluster.url)
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from kafka_handoff.devbroker.spark import SparkStandalone

    cluster = SparkStandalone.attach(args.dir)
    if cluster is None:
        print(f"no Spark cluster runs from {args.dir}")
        return 0
    cluster.stop()
    print(f"stopped {cluster.url}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from kafka_handoff.devbroker.spark import SparkStandalone

    cluster = SparkStandalone.attach(args.dir)
    if cluster is None:
        print(f"no Spark cluster runs from {args.dir}")
        return 1
    print(cluster.url)
    return 0
