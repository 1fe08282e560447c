"""Producer benchmark: ``python -m kafka_handoff.bench.produce --bootstrap-servers HOST:PORT``.

Sends N records (default 1M, 100-byte values, no keys) with kafka-handoff's producer and, in the same run
against the same broker, with confluent-kafka's (librdkafka) producer, each to its own fresh topic, and
reports records/s and MB/s from the first ``send`` until ``flush`` returned (every record acknowledged), plus
the process CPU time each client used.  Both clients run with ``acks=all`` and idempotence (their defaults)
and their own default batching unless ``--linger-ms``/``--batch-size`` are given (then both get them).

``--profile`` runs our producer's send loop under cProfile and prints the top functions (the network and
callback threads are not profiled).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import resource
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Result", "main", "run_confluent", "run_ours"]


@dataclass
class Result:
    client: str
    records: int
    value_bytes: int
    seconds: float
    send_seconds: float
    cpu_seconds: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.records * self.value_bytes / 1e6 / self.seconds if self.seconds else 0.0


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


POOL = 1024  # distinct values, cycled (a power of two: the send loops index with ``i & (POOL - 1)``)


def make_values(size: int, seed: int = 7) -> list[bytes]:
    """A pool of :data:`POOL` moderately compressible values (words from a small vocabulary).

    The send loops cycle through it instead of holding N values in one list: a list of a million items
    makes every full garbage collection walk a million references, a cost that has nothing to do with
    the clients being measured."""
    rng = random.Random(seed)
    words = [bytes(rng.choices(b"abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 9))) for _ in range(512)]
    pool: list[bytes] = []
    for _ in range(POOL):
        parts: list[bytes] = []
        n = 0
        while n < size:
            word = rng.choice(words)
            parts.append(word)
            n += len(word) + 1
        pool.append(b" ".join(parts)[:size].ljust(size, b"."))
    return pool


def create_topic(bootstrap: str, partitions: int) -> str:
    from kafka_handoff.admin import AdminClient, NewTopic

    name = f"bench-produce-{uuid.uuid4().hex[:8]}"
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)], timeout=60)
    return name


def delete_topic(bootstrap: str, name: str) -> None:
    from kafka_handoff.admin import AdminClient

    try:
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            admin.delete_topics([name], timeout=30)
    except Exception as exc:  # best effort
        print(f"(could not delete {name}: {exc})", file=sys.stderr)


def run_ours(
    bootstrap: str, topic: str, count: int, values: list[bytes], extra: dict[str, Any], profile: bool = False
) -> Result:
    from kafka_handoff.producer import Producer

    config = {"bootstrap.servers": bootstrap, **extra}
    producer = Producer(config)
    try:
        producer.send(topic, b"warm-up").result(60)  # metadata and producer id, outside the timing
        profiler = cProfile.Profile() if profile else None
        send = producer.send
        cpu0 = _cpu()
        t0 = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        mask = POOL - 1
        for i in range(count):
            send(topic, values[i & mask])
        if profiler is not None:
            profiler.disable()
        t1 = time.perf_counter()
        producer.flush(600)
        t2 = time.perf_counter()
        cpu1 = _cpu()
        if profiler is not None:
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(20)
    finally:
        producer.close(30)
    return Result("kafka-handoff", count, len(values[0]), t2 - t0, t1 - t0, cpu1 - cpu0)


def run_confluent(
    bootstrap: str, topic: str, count: int, values: list[bytes], extra: dict[str, Any]
) -> Result:
    import confluent_kafka

    errors: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    config = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", **extra}
    producer = confluent_kafka.Producer(config)
    producer.produce(topic, b"warm-up")
    producer.flush(60)
    produce = producer.produce
    poll: Callable[[float], int] = producer.poll
    cpu0 = _cpu()
    t0 = time.perf_counter()
    mask = POOL - 1
    for i in range(count):
        value = values[i & mask]
        while True:
            try:
                produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                poll(0.005)
    t1 = time.perf_counter()
    remaining = producer.flush(600)
    t2 = time.perf_counter()
    cpu1 = _cpu()
    if remaining or errors:
        raise RuntimeError(f"confluent-kafka: {remaining} undelivered, {len(errors)} errors ({errors[:1]})")
    return Result("confluent-kafka", count, len(values[0]), t2 - t0, t1 - t0, cpu1 - cpu0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_handoff.bench.produce", description=__doc__)
    parser.add_argument("--bootstrap-servers", "-b", required=True)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--compression", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd"))
    parser.add_argument("--linger-ms", type=int, default=None, help="for both clients (default: each's own)")
    parser.add_argument("--batch-size", type=int, default=None, help="for both clients (default: each's own)")
    parser.add_argument("--clients", default="ours,confluent", help="comma-separated: ours, confluent")
    parser.add_argument("--repeat", type=int, default=1, help="runs per client (best is reported)")
    parser.add_argument("--profile", action="store_true", help="cProfile our send loop")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--keep-topics", action="store_true")
    args = parser.parse_args(argv)

    values = make_values(args.value_bytes)
    shared: dict[str, Any] = {"compression.type": args.compression}
    if args.linger_ms is not None:
        shared["linger.ms"] = args.linger_ms
    if args.batch_size is not None:
        shared["batch.size"] = args.batch_size
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    results: list[Result] = []
    for client in clients:
        best: Result | None = None
        for _ in range(max(1, args.repeat)):
            topic = create_topic(args.bootstrap_servers, args.partitions)
            try:
                if client == "ours":
                    result = run_ours(
                        args.bootstrap_servers, topic, args.records, values, shared, args.profile
                    )
                elif client == "confluent":
                    result = run_confluent(args.bootstrap_servers, topic, args.records, values, shared)
                else:
                    parser.error(f"unknown client {client!r} (allowed: ours, confluent)")
            finally:
                if not args.keep_topics:
                    delete_topic(args.bootstrap_servers, topic)
            if best is None or result.seconds < best.seconds:
                best = result
        assert best is not None
        results.append(best)

    if args.json:
        print(
            json.dumps(
                [{**asdict(r), "records_per_s": r.records_per_s, "mb_per_s": r.mb_per_s} for r in results]
            )
        )
        return 0
    print(
        f"{args.records:,} records x {args.value_bytes} bytes, {args.partitions} partitions, "
        f"compression={args.compression}, acks=all, idempotence on"
        + (f", linger.ms={args.linger_ms}" if args.linger_ms is not None else "")
        + (f", batch.size={args.batch_size}" if args.batch_size is not None else "")
    )
    print(f"{'client':<16} {'records/s':>12} {'MB/s':>8} {'seconds':>8} {'send loop s':>11} {'CPU s':>7}")
    for r in results:
        print(
            f"{r.client:<16} {r.records_per_s:>12,.0f} {r.mb_per_s:>8.1f} {r.seconds:>8.2f} "
            f"{r.send_seconds:>11.2f} {r.cpu_seconds:>7.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
