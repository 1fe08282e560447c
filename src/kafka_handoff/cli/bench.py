"""``handoff bench throughput|produce|compare|rebalance|faults|decode|hostile``: benchmarks against the peers.

``throughput``, ``produce`` and ``rebalance`` start a private dev broker when no ``--bootstrap-servers`` is
given (and stop it at the end), write JSON and PNG files to ``--out`` and print a table.  ``decode`` runs
:mod:`kafka_handoff.bench.decode` with the arguments that follow; ``hostile`` runs
:mod:`kafka_handoff.bench.hostile` the same way (a consumer against a zstd bomb, an oversized frame and a
slow-drip OIDC endpoint: peak RSS, the error seen).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from kafka_handoff.bench.runs import (
    broker,
    load_note,
    private_broker,
    progress,
    unknown_clients,
    write_throughput,
)

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="benchmarks against the peers (consume throughput, behaviour during rebalances)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="bench_action", metavar="BENCHMARK", required=True)

    tp = _benchmark(
        actions,
        "throughput",
        "consume the same topic with every client; records/s, MB/s, CPU, RSS",
    )
    tp.add_argument("--records", type=int, default=1_000_000)
    tp.add_argument("--value-bytes", type=int, default=100)
    tp.add_argument("--partitions", type=int, default=8)
    tp.add_argument("--repeat", type=int, default=3, help="runs per client, interleaved (median reported)")
    tp.add_argument(
        "--clients",
        default="all",
        help="comma-separated: handoff, handoff-py, handoff-batch, confluent, confluent-tuned, "
        "handoff-compat (confluent's program on kafka_handoff.compat.confluent_kafka), confluent-poll, "
        "handoff-compat-poll (their one-message poll() loops), kafka-python, handoff-aio, aiokafka, "
        "confluent-aio, java (default: all)",
    )
    _common(tp)
    tp.add_argument("--keep-topic", action="store_true", help="do not delete the benchmark topic")
    tp.add_argument(
        "--profile", action="store_true", help="pyinstrument profiles (text) of the first kafka-handoff runs"
    )
    tp.add_argument(
        "--security",
        choices=("ssl", "mtls", "sasl_plaintext", "sasl_ssl"),
        default=None,
        help="consume over a secured listener of the private dev broker (kafka-handoff and confluent-kafka "
        "clients only; 'all' then means those)",
    )
    tp.add_argument(
        "--sasl-mechanism",
        choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
        default=None,
        help="with --security sasl_*: the mechanism (default: the listener's, PLAIN or SCRAM-SHA-256)",
    )
    tp.add_argument(
        "--share",
        action="store_true",
        help="consume as the only member of a fresh share group (KIP-932): handoff-share and, when "
        "installed, confluent-kafka's preview ShareConsumer (confluent-share)",
    )
    tp.add_argument(
        "--serializer",
        choices=("none", "identity", "identity-ctx"),
        default="none",
        help="kafka-handoff's value.deserializer: none (default), identity (a one-argument function "
        "returning its input) or identity-ctx (the same taking (value, ctx)): the cost of the hook",
    )
    tp.set_defaults(func=_throughput)

    rb = _benchmark(
        actions,
        "rebalance",
        "3 members with async processing, a 4th joins, one leaves: duplicates, stalls, timelines",
    )
    rb.add_argument("--protocol", choices=("classic", "consumer", "both"), default="both")
    rb.add_argument(
        "--clients",
        default="handoff,confluent",
        help="comma-separated: handoff, confluent, java (a KafkaConsumer program compiled with javac against "
        "the dev broker's cached kafka-clients jar)",
    )
    rb.add_argument("--partitions", type=int, default=12)
    rb.add_argument("--rate", type=int, default=1200, help="records/s produced (in total)")
    rb.add_argument("--work-ms", type=float, default=5.0, help="processing time per record")
    rb.add_argument("--slow-every", type=int, default=100, help="every N-th offset is slow (0: none)")
    rb.add_argument("--slow-ms", type=float, default=1000.0, help="processing time of a slow record")
    rb.add_argument("--in-flight", type=int, default=16, help="records of one partition processed at once")
    rb.add_argument("--workers", type=int, default=32, help="thread pool size per member")
    rb.add_argument(
        "--steady", type=float, default=8.0, help="seconds of steady state (3 members) before the 4th joins"
    )
    rb.add_argument("--leave-after", type=float, default=14.0, help="seconds from the join until one leaves")
    rb.add_argument(
        "--stop-after", type=float, default=12.0, help="seconds from the leave until the producer stops"
    )
    rb.add_argument(
        "--warm-up", type=float, default=8.0, help="seconds of broker warm-up before the first scenario"
    )
    rb.add_argument(
        "--case",
        choices=("standard", "slow-loop"),
        default="standard",
        help="slow-loop: each member's loop iteration takes 5-30%% of a 10 s max.poll.interval.ms (a "
        "different interval per member, none dividing it) and kafka-handoff delays every revoke for as long "
        "as it is granted; reports fenced members, lost partitions and duplicates",
    )
    _common(rb)
    rb.set_defaults(func=_rebalance)

    pl = _benchmark(
        actions,
        "pipeline",
        "the pipeline worker beside Spark's built-in Kafka source: records/s, latency p50/p99",
    )
    pl.add_argument("--events", type=int, default=200_000)
    pl.add_argument("--partitions", type=int, default=4)
    pl.add_argument("--sink", choices=("delta", "parquet"), default="delta", help="the pipeline's sink")
    pl.add_argument("--mode", choices=("backlog", "live"), default="backlog",
                    help="backlog: drain --events produced first; live: a rate-limited producer")  # fmt: skip
    pl.add_argument("--rate", type=float, default=20_000, help="live: events per second (default 20000)")
    pl.add_argument("--duration", type=float, default=60.0, help="live: seconds of producing (default 60)")
    pl.add_argument(
        "--spark-max-offsets",
        default=None,
        metavar="N[,N...]",
        help="Spark's maxOffsetsPerTrigger values to run (one run each; default: batch.max_records)",
    )
    pl.add_argument(
        "--engines", default="kafka-handoff,spark-kafka", help="comma-separated: kafka-handoff, spark-kafka"
    )
    pl.add_argument(
        "--master",
        default=None,
        help="Spark master for both engines (spark://host:port; 'standalone' starts a local master + 2 "
        "workers for the run; default: the example config's, local[2])",
    )
    pl.add_argument(
        "--spark-dir",
        type=Path,
        default=None,
        help="the directory of a running 'handoff spark start' cluster: use it as the master and measure "
        "its executors' CPU",
    )
    pl.add_argument(
        "--read-on",
        default="auto",
        metavar="MODE[,MODE]",
        help="the worker's spark.read_on values to run, one run each: auto, driver, executors "
        "(reports driver and executor CPU seconds per million records)",
    )
    pl.add_argument(
        "--format",
        choices=("json", "avro"),
        default="json",
        help="the values: JSON (parse_json / from_json) or registry-framed Avro (parse_avro / from_avro)",
    )
    pl.add_argument(
        "--schema-registry",
        default=os.environ.get("HANDOFF_SCHEMA_REGISTRY_URL"),
        metavar="URL",
        help="--format avro: the schema registry (default $HANDOFF_SCHEMA_REGISTRY_URL)",
    )
    _common(pl)
    pl.set_defaults(func=lambda a: __import__("kafka_handoff.bench.pipeline", fromlist=["cli"]).cli(a))

    so = _benchmark(
        actions,
        "source",
        'reader vs reader: spark.read.format("kafka-handoff") beside Spark\'s own Kafka source, records/s',
    )
    so.add_argument("--events", type=int, default=1_000_000)
    so.add_argument("--partitions", type=int, default=4)
    so.add_argument("--master", default="local[2]", help="Spark master: local[N] or spark://host:port")
    so.add_argument("--repeat", type=int, default=3, help="timed runs of each query (after one warm-up)")
    _common(so)
    so.set_defaults(func=lambda a: __import__("kafka_handoff.bench.source", fromlist=["cli"]).cli(a))

    fa = _benchmark(
        actions,
        "faults",
        "broker kills, bounces, a hung broker and network faults under consuming groups: records "
        "lost/duplicated, longest stall, bounded close; against confluent-kafka in the same run",
    )
    fa.add_argument(
        "--faults",
        default="all",
        help="comma-separated, of: kill-coordinator, kill-leader, controlled-shutdown, rolling-bounce, "
        "pause-coordinator, coordinator-dies-mid-rebalance, proxy-latency, proxy-reset, proxy-black-hole "
        "(default: all)",
    )
    fa.add_argument("--protocols", default="classic,consumer", help="comma-separated: classic, consumer")
    fa.add_argument("--clients", default="handoff,confluent", help="comma-separated: handoff, confluent")
    fa.add_argument("--rate", type=float, default=120.0, help="records/s produced")
    fa.add_argument("--json", default="", help="also write the results as JSON to this file")
    __import__("kafka_handoff.bench.pipeline_faults", fromlist=["add_arguments"]).add_arguments(fa)
    fa.set_defaults(func=_faults)

    pr = _benchmark(
        actions,
        "produce",
        "produce N records with every client (ours: send(), send_nowait(), send_many()); records/s, "
        "MB/s, CPU, RSS",
    )
    pr.add_argument("--records", type=int, default=1_000_000)
    pr.add_argument("--value-bytes", type=int, default=100)
    pr.add_argument("--partitions", type=int, default=6)
    pr.add_argument(
        "--compression",
        choices=("none", "gzip", "snappy", "lz4", "zstd"),
        default="none",
        help="every client",
    )
    pr.add_argument(
        "--acks", choices=("all", "1", "0"), default="all", help="every client; idempotence on only with all"
    )
    pr.add_argument("--linger-ms", type=int, default=None, help="every client (default: each client's own)")
    pr.add_argument("--batch-size", type=int, default=None, help="every client (default: each client's own)")
    pr.add_argument(
        "--chunk", type=int, default=1000, help="records per send_many()/produce_batch() call (default 1000)"
    )
    pr.add_argument("--repeat", type=int, default=3, help="runs per client, interleaved (median reported)")
    pr.add_argument(
        "--clients",
        default="all",
        help="comma-separated: handoff, handoff-nowait, handoff-many, confluent, confluent-batch, aiokafka "
        "(default: all that are installed)",
    )
    pr.add_argument("--profile", action="store_true", help="cProfile text of the first kafka-handoff runs")
    pr.add_argument(
        "--serializer",
        choices=("none", "identity", "identity-ctx"),
        default="none",
        help="kafka-handoff's value.serializer: none (default), identity (a one-argument function "
        "returning its input) or identity-ctx (the same taking (value, ctx)): the cost of the hook",
    )
    _common(pr)
    pr.set_defaults(func=_produce)

    cmp = _benchmark(
        actions,
        "compare",
        "the consume and produce benchmarks for this tree and a git ref side by side (a regression guard)",
    )
    __import__("kafka_handoff.bench.compare", fromlist=["add_arguments"]).add_arguments(cmp)
    _common(cmp)
    cmp.set_defaults(func=lambda a: __import__("kafka_handoff.bench.compare", fromlist=["cli"]).cli(a))

    p = actions.add_parser(
        "hostile",
        help="peak RSS of a consumer fed a zstd bomb, an oversized frame, a slow-drip OIDC endpoint, and the "
        "error the application saw (arguments after '--' go to kafka_handoff.bench.hostile)",
        add_help=False,
    )
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_passthrough, module="hostile")

    p = actions.add_parser(
        "decode",
        help="run kafka_handoff.bench.decode (arguments after '--' go to it)",
        add_help=False,
    )
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_passthrough, module="decode")


def _benchmark(actions: Any, name: str, help: str) -> argparse.ArgumentParser:
    """The ``handoff bench NAME`` parser, described by ``kafka_handoff.bench.NAME``'s docstring."""
    parser: argparse.ArgumentParser = actions.add_parser(
        name,
        help=help,
        description=_doc(f"kafka_handoff.bench.{name}"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def _doc(module: str) -> str:
    """The module's docstring, read from its source without importing it: a benchmark may need packages of
    the ``bench`` or ``pipeline`` extra (numpy, pyspark, ...) that a core install lacks, and ``handoff``
    must start without them."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return ""
    return ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8"))) or ""


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap-servers",
        default=None,
        help="an existing broker (default: start a private dev broker for the run)",
    )
    p.add_argument("--out", type=Path, default=Path("bench-results"), help="directory for JSON and PNG files")


def _throughput(args: argparse.Namespace) -> int:
    from kafka_handoff.bench import throughput
    from kafka_handoff.bench.peers import CLIENTS, SECURITY_RUNNERS, SERIALIZER_ENV

    if args.serializer != "none":
        os.environ[SERIALIZER_ENV] = args.serializer  # read by the kafka-handoff child processes

    if args.share:
        return _share_throughput(args)
    secured_clients = [n for n, spec in CLIENTS.items() if spec.runner in SECURITY_RUNNERS]
    if args.clients != "all":
        clients = [c.strip() for c in args.clients.split(",") if c]
    else:
        clients = secured_clients if args.security else list(CLIENTS)
    if unknown_clients(clients, CLIENTS):
        return 2
    if args.security:
        if args.bootstrap_servers:
            print("error: --security needs the private dev broker (no --bootstrap-servers)", file=sys.stderr)
            return 2
        unsupported = [c for c in clients if c not in secured_clients]
        if unsupported:
            allowed = ", ".join(secured_clients)
            print(
                f"error: --security: client(s) {', '.join(unsupported)} not supported (allowed: {allowed})",
                file=sys.stderr,
            )
            return 2
    elif args.sasl_mechanism:
        print("error: --sasl-mechanism needs --security sasl_plaintext or sasl_ssl", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with private_broker(args.bootstrap_servers, args.security) as (bootstrap, cluster):
        client_config = None
        if cluster is not None and cluster.security is not None and args.security:
            mech = args.sasl_mechanism if args.security.startswith("sasl") else None
            client_config = str(cluster.security.client_json_path(args.security, mech))
            progress(f"consumers use {client_config} ({args.security}{' ' + mech if mech else ''})")
        result = throughput.run_benchmark(
            bootstrap,
            client_config=client_config,
            security=(f"{args.security} {args.sasl_mechanism or ''}".strip() if args.security else None),
            records=args.records,
            value_bytes=args.value_bytes,
            partitions=args.partitions,
            repeat=args.repeat,
            clients=clients,
            keep_topic=args.keep_topic,
            profile_dir=out if args.profile else None,
            progress=progress,
        )
    data = result.as_dict()
    subtitle = (
        f"{args.records:,} records x {args.value_bytes} B, {args.partitions} partitions, median of "
        f"{args.repeat}; {load_note(data['environment'])}"
    )
    if args.security:
        subtitle += f"; consumers over {data['config']['security']}"
    write_throughput(out, "throughput", data, subtitle)
    return 0 if all(m.get("runs") for m in data["medians"]) else 1


def _rebalance(args: argparse.Namespace) -> int:
    from rich.console import Console

    from kafka_handoff.bench import rebalance, report

    protocols = ("classic", "consumer") if args.protocol == "both" else (args.protocol,)
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if unknown_clients(clients, rebalance.CLIENT_LABELS):
        return 2
    if min(args.steady, args.leave_after, args.stop_after) < 2:
        print("error: --steady, --leave-after and --stop-after must be at least 2 seconds", file=sys.stderr)
        return 2
    cfg = rebalance.ScenarioConfig(
        partitions=args.partitions,
        rate=args.rate,
        work_ms=args.work_ms,
        slow_every=args.slow_every,
        slow_ms=args.slow_ms,
        in_flight=args.in_flight,
        workers=args.workers,
        steady_s=args.steady,
        leave_after=args.leave_after,
        stop_after=args.stop_after,
        **(rebalance.SLOW_LOOP if args.case == "slow-loop" else {}),
    )
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with broker(args.bootstrap_servers) as bootstrap:
        data = rebalance.run_benchmark(
            bootstrap,
            protocols=protocols,
            clients=clients,
            cfg=cfg,
            work_dir=out / "rebalance-runs",
            warm_up_s=args.warm_up,
            progress=progress,
        )
    suffix = ("" if args.protocol == "both" else f"-{args.protocol}") + (
        "-slow-loop" if args.case == "slow-loop" else ""
    )
    json_path = out / f"rebalance{suffix}.json"
    png_path = out / f"rebalance{suffix}.png"
    json_path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    subtitle = (
        f"{cfg.partitions} partitions, {cfg.rate} records/s, {cfg.work_ms:g} ms/record, every "
        f"{cfg.slow_every}th {cfg.slow_ms:g} ms; join after {cfg.steady_s:g}s steady, "
        f"leave {cfg.leave_after:g}s later; "
        f"{os.cpu_count()} CPUs, load {data['load_avg_start'][0]:.1f}-{data['load_avg_end'][0]:.1f}"
    )
    try:
        report.plot_rebalance(data["results"], png_path, subtitle)
    except ImportError as exc:
        print(f"(no plot: {exc}; install the 'bench' extra)", file=sys.stderr)
    Console(width=160).print(report.rebalance_table(data["results"], title=subtitle))
    if args.case == "slow-loop":
        intervals = ", ".join(f"{v:g}" for v in cfg.loop_interval_ms)
        Console(width=160).print(
            rebalance.fenced_table(
                data["results"],
                title=f"slow loop: loop intervals {intervals} ms, max.poll.interval.ms "
                f"{cfg.max_poll_interval_ms}, continuous delays",
            )
        )
    print(f"wrote {json_path} and {png_path}", file=sys.stderr)
    return 0 if not any(r.get("error") for r in data["results"]) else 1


def _produce(args: argparse.Namespace) -> int:
    from kafka_handoff.bench import produce
    from kafka_handoff.bench.peers import SERIALIZER_ENV

    if args.serializer != "none":
        os.environ[SERIALIZER_ENV] = args.serializer  # read by the kafka-handoff child processes

    if args.clients == "all":
        clients = [c for c in produce.CLIENTS if produce.client_available(c)]
    else:
        clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if unknown_clients(clients, produce.CLIENTS):
        return 2
    if args.records < 1 or args.value_bytes < 1 or args.repeat < 1 or args.chunk < 1:
        print("error: --records, --value-bytes, --repeat and --chunk must be at least 1", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with broker(args.bootstrap_servers) as bootstrap:
        result = produce.run_benchmark(
            bootstrap,
            records=args.records,
            value_bytes=args.value_bytes,
            partitions=args.partitions,
            compression=args.compression,
            acks=args.acks,
            linger_ms=args.linger_ms,
            batch_size=args.batch_size,
            chunk=args.chunk,
            repeat=args.repeat,
            clients=clients,
            profile_dir=out if args.profile else None,
            progress=progress,
        )
    data = result.as_dict()
    idempotence = "idempotent" if args.acks == "all" else "not idempotent"
    subtitle = (
        f"produce {args.records:,} records x {args.value_bytes} B, {args.partitions} partitions, "
        f"acks={args.acks} ({idempotence}), compression={args.compression}, median of {args.repeat}; "
        f"{load_note(data['environment'])}"
    )
    write_throughput(out, "produce", data, subtitle, width=170)
    return 0 if all(m.get("runs") and not m.get("failed") for m in data["medians"]) else 1


def _passthrough(args: argparse.Namespace) -> int:
    import importlib

    rest = list(args.rest)
    if rest and rest[0] == "--":
        rest = rest[1:]
    module = importlib.import_module(f"kafka_handoff.bench.{args.module}")
    return int(module.main(rest) or 0)


def _share_throughput(args: argparse.Namespace) -> int:
    from kafka_handoff.bench.share import SHARE_CLIENTS, run_share_benchmark

    if args.security:
        print("error: --share does not take --security", file=sys.stderr)
        return 2
    clients = None if args.clients == "all" else [c.strip() for c in args.clients.split(",") if c]
    if unknown_clients(clients or (), SHARE_CLIENTS, "share client"):
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with broker(args.bootstrap_servers) as bootstrap:
        result = run_share_benchmark(
            bootstrap,
            records=args.records,
            value_bytes=args.value_bytes,
            partitions=args.partitions,
            repeat=args.repeat,
            clients=clients,
            keep_topic=args.keep_topic,
            progress=progress,
        )
    data = result.as_dict()
    subtitle = (
        f"share groups: {args.records:,} records x {args.value_bytes} B, {args.partitions} partitions, "
        f"median of {args.repeat}; {load_note(data['environment'])}"
    )
    write_throughput(out, "throughput-share", data, subtitle, plot=False)
    return 0 if all(m.get("runs") for m in data["medians"]) else 1


def _faults(args: argparse.Namespace) -> int:
    """``handoff bench faults``: the client scenarios, or with ``--pipeline`` the pipeline soak."""
    if getattr(args, "pipeline", False):
        from kafka_handoff.bench import pipeline_faults

        return pipeline_faults.cli(args)
    from kafka_handoff.bench import faults

    return faults.cli(args)
