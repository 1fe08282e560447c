"""``handoff demo``: the furthest the project has got, on embedded defaults.

Start a local Kafka broker (in ``.handoff/demo-broker``), create the topic ``events``, print the
cluster's metadata, generate sample clickstream events (with a small share of malformed ones), run the
PySpark pipeline of ``examples/clickstream.toml`` (parse, count page views per page per minute, Delta sink
with exactly-once marks) until it is idle, print the resulting table, stop the broker.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from kafka_handoff.types import ClusterMetadata

DEFAULT_DATA_DIR = Path(".handoff") / "demo-broker"
DEMO_TOPIC = "events"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the demo end to end on a local broker", description=__doc__
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="broker data dir")
    parser.add_argument("--partitions", type=int, default=6, help=f"partitions of the {DEMO_TOPIC!r} topic")
    parser.add_argument("--events", type=int, default=None, help="sample events to generate")
    parser.add_argument("--no-pipeline", action="store_true", help="stop after printing the metadata")
    parser.set_defaults(func=cmd_demo)


def format_metadata(meta: ClusterMetadata) -> str:
    lines = [f"cluster id: {meta.cluster_id}   controller: node {meta.controller_id}", "brokers:"]
    for node_id, node in sorted(meta.brokers.items()):
        lines.append(f"  node {node_id}  {node.host}:{node.port}")
    lines.append("topics:")
    for topic in sorted(meta.topics()):
        parts = meta.partitions_for(topic) or ()
        internal = " (internal)" if topic in meta.internal_topics else ""
        lines.append(f"  {topic}{internal}: {len(parts)} partition(s)")
        for p in parts:
            replicas, isr = list(p.replicas), list(p.isr)
            lines.append(f"    partition {p.partition}: leader {p.leader}  replicas {replicas}  isr {isr}")
    return "\n".join(lines)


def cmd_demo(args: argparse.Namespace) -> int:
    from kafka_handoff import devbroker

    t0 = time.monotonic()
    devbroker.stop(args.data_dir)  # a broker left over from an earlier demo
    print(f"starting Kafka {devbroker.KAFKA_VERSION} (1 node) in {args.data_dir} ...", flush=True)
    try:
        cluster = devbroker.start(1, args.data_dir, supervised=True)
    except (devbroker.BrokerStartError, devbroker.JarResolutionError) as exc:
        print(f"handoff demo: {exc}", file=sys.stderr)
        return 1
    with cluster:
        print(f"broker ready at {cluster.bootstrap_servers} in {time.monotonic() - t0:.1f}s")
        cluster.create_topic(DEMO_TOPIC, partitions=args.partitions, exist_ok=True)
        print(f"created topic {DEMO_TOPIC!r} with {args.partitions} partitions\n")
        print(format_metadata(cluster.metadata()))
        print(flush=True)
        status = 0
        if not args.no_pipeline:
            from kafka_handoff.pipeline.demo import run_pipeline_demo

            kwargs: dict[str, Any] = {"topic": DEMO_TOPIC}
            if args.events is not None:
                kwargs["count"] = args.events
            status = run_pipeline_demo(cluster.bootstrap_servers, **kwargs)
        t1 = time.monotonic()
    print(f"broker stopped in {time.monotonic() - t1:.1f}s; demo took {time.monotonic() - t0:.1f}s")
    return status
