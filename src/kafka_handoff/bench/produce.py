"""Produce throughput against the peers: ``handoff bench produce``.

Every client sends N records (default 1M, 100-byte values, no keys) to its own fresh topic on the same
broker, each in a fresh child process (``python -m kafka_handoff.bench.produce CLIENT ...``), one after the
other; repeats are interleaved and rotated (A, B, C, B, C, A, ...) so that changing load on the machine hits
every client alike and none always runs first, after one unmeasured warm-up run (a fresh broker's JIT
warm-up), and the report shows the median of the repeats.  Per run:

* records/s and MB/s (value bytes) from the first send until ``flush`` returned (every record acknowledged);
* the seconds of the send loop alone (until the last record was handed to the client);
* CPU seconds per million records in that window (every thread of the process: librdkafka's included);
* peak RSS of the process.

All clients use ``acks`` (default ``all``) with idempotence on when ``acks=all`` (their defaults; off for
``acks`` 0/1, where Java refuses idempotence) and their own default batching unless ``--linger-ms`` /
``--batch-size`` are given (then every client gets them).  The clients (``--clients``):

* ``handoff``          kafka-handoff ``send()``, a future per record (the Java-style API);
* ``handoff-nowait``   kafka-handoff ``send_nowait()``, no future;
* ``handoff-many``     kafka-handoff ``send_many()`` with ``--chunk`` values per call;
* ``confluent``        confluent-kafka ``produce()`` per record (with a delivery callback, as usual);
* ``confluent-batch``  confluent-kafka ``produce_batch()`` with ``--chunk`` messages per call;
* ``aiokafka``         aiokafka ``send()`` per record.

The values cycle through a pool of 1024 moderately compressible ones (words from a small vocabulary), so
``--compression`` has something to do.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kafka_handoff.bench.runs import BenchReport, peak_rss_mb

__all__ = [
    "CLIENTS",
    "POOL",
    "ProduceReport",
    "Sample",
    "main",
    "make_values",
    "median_samples",
    "run_benchmark",
]

POOL = 1024  # distinct values, cycled (a power of two: the send loops index with ``i & (POOL - 1)``)

#: ``--clients`` name -> label in the report (in report order).
CLIENTS: dict[str, str] = {
    "handoff": "kafka-handoff send()",
    "handoff-nowait": "kafka-handoff send_nowait()",
    "handoff-many": "kafka-handoff send_many()",
    "confluent": "confluent-kafka produce()",
    "confluent-batch": "confluent-kafka produce_batch()",
    "aiokafka": "aiokafka send()",
}
_DISTRIBUTIONS = {
    "handoff": "kafka-handoff",
    "handoff-nowait": "kafka-handoff",
    "handoff-many": "kafka-handoff",
    "confluent": "confluent-kafka",
    "confluent-batch": "confluent-kafka",
    "aiokafka": "aiokafka",
}


def client_available(name: str) -> bool:
    """Whether the client's package is installed (kafka-handoff always is)."""
    module = {"confluent": "confluent_kafka", "confluent-batch": "confluent_kafka", "aiokafka": "aiokafka"}
    if name not in module:
        return True
    import importlib.util

    return importlib.util.find_spec(module[name]) is not None


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


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


# ============================================================================================ runners
@dataclass
class _Run:
    """What one child process measured."""

    seconds: float = 0.0
    send_seconds: float = 0.0
    cpu_seconds: float = 0.0


@dataclass(frozen=True)
class RunConfig:
    bootstrap: str
    topic: str
    records: int
    values: list[bytes]
    acks: str
    compression: str
    linger_ms: int | None
    batch_size: int | None
    chunk: int

    @property
    def idempotence(self) -> bool:
        return self.acks == "all"


def _handoff(cfg: RunConfig, mode: str, profile: str | None) -> _Run:
    from kafka_handoff.bench.peers import bench_serializer
    from kafka_handoff.producer import Producer

    config: dict[str, Any] = {
        "bootstrap.servers": cfg.bootstrap,
        "acks": cfg.acks,
        "enable.idempotence": cfg.idempotence,
        "compression.type": cfg.compression,
        "value.serializer": bench_serializer(),
    }
    if cfg.linger_ms is not None:
        config["linger.ms"] = cfg.linger_ms
    if cfg.batch_size is not None:
        config["batch.size"] = cfg.batch_size
    producer = Producer(config)
    topic, values, count, mask = cfg.topic, cfg.values, cfg.records, POOL - 1
    run = _Run()
    try:
        producer.send(topic, b"warm-up").result(60)  # metadata and producer id, outside the timing
        profiler = cProfile.Profile() if profile else None
        chunks: list[list[bytes]] = []
        if mode == "many":
            chunk = max(1, cfg.chunk)
            chunks = [[values[(start + i) & mask] for i in range(min(chunk, count - start))]
                      for start in range(0, min(count, chunk * POOL), chunk)]  # fmt: skip
        cpu0 = _cpu()
        t0 = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        if mode == "send":
            send = producer.send
            for i in range(count):
                send(topic, values[i & mask])
        elif mode == "nowait":
            send_nowait = producer.send_nowait
            for i in range(count):
                send_nowait(topic, values[i & mask])
        else:
            send_many = producer.send_many
            sent = 0
            n = 0
            while sent < count:
                part = chunks[n % len(chunks)]
                if sent + len(part) > count:
                    part = part[: count - sent]
                send_many(topic, part)
                sent += len(part)
                n += 1
        t1 = time.perf_counter()
        producer.flush(600)
        if profiler is not None:
            profiler.disable()
        t2 = time.perf_counter()
        run = _Run(t2 - t0, t1 - t0, _cpu() - cpu0)
        if profiler is not None and profile:
            with open(profile, "w", encoding="utf-8") as out:
                pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(40)
    finally:
        producer.close(30)
    return run


def _confluent(cfg: RunConfig, batch: bool) -> _Run:
    import confluent_kafka

    errors: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    config: dict[str, Any] = {
        "bootstrap.servers": cfg.bootstrap,
        "acks": cfg.acks,
        "enable.idempotence": cfg.idempotence,
        "compression.type": cfg.compression,
    }
    if cfg.linger_ms is not None:
        config["linger.ms"] = cfg.linger_ms
    if cfg.batch_size is not None:
        config["batch.size"] = cfg.batch_size
    producer = confluent_kafka.Producer(config)
    producer.produce(cfg.topic, b"warm-up")
    producer.flush(60)
    topic, values, count, mask = cfg.topic, cfg.values, cfg.records, POOL - 1
    poll: Callable[[float], int] = producer.poll
    cpu0 = _cpu()
    t0 = time.perf_counter()
    if not batch:
        produce = producer.produce
        for i in range(count):
            value = values[i & mask]
            while True:
                try:
                    produce(topic, value, on_delivery=on_delivery)
                    break
                except BufferError:
                    poll(0.005)
    else:
        produce_batch = producer.produce_batch
        chunk = max(1, cfg.chunk)
        sent = 0
        while sent < count:
            n = min(chunk, count - sent)
            messages = [{"value": values[(sent + i) & mask]} for i in range(n)]
            accepted = produce_batch(topic, messages, on_delivery=on_delivery)
            if accepted < n:  # the local queue is full: serve callbacks, then send as many again
                rejected = [m["_error"] for m in messages if "_error" in m]
                other = [e for e in rejected if "QUEUE_FULL" not in str(e)]
                if other:
                    errors.append(other[0])
                    break
                poll(0.005)
                sent += accepted
                continue
            sent += n
            poll(0)
    t1 = time.perf_counter()
    remaining = producer.flush(600)
    t2 = time.perf_counter()
    cpu1 = _cpu()
    if remaining or errors:
        raise RuntimeError(f"confluent-kafka: {remaining} undelivered, {len(errors)} errors ({errors[:1]})")
    return _Run(t2 - t0, t1 - t0, cpu1 - cpu0)


def _aiokafka(cfg: RunConfig) -> _Run:
    import aiokafka

    async def run() -> _Run:
        kwargs: dict[str, Any] = {
            "bootstrap_servers": cfg.bootstrap,
            "acks": "all" if cfg.acks == "all" else int(cfg.acks),
            "enable_idempotence": cfg.idempotence,
            "compression_type": None if cfg.compression == "none" else cfg.compression,
        }
        if cfg.linger_ms is not None:
            kwargs["linger_ms"] = cfg.linger_ms
        if cfg.batch_size is not None:
            kwargs["max_batch_size"] = cfg.batch_size
        producer = aiokafka.AIOKafkaProducer(**kwargs)
        await producer.start()
        try:
            await (await producer.send(cfg.topic, b"warm-up"))
            topic, values, count, mask = cfg.topic, cfg.values, cfg.records, POOL - 1
            send = producer.send
            pending: list[Any] = []
            cpu0 = _cpu()
            t0 = time.perf_counter()
            for i in range(count):
                pending.append(await send(topic, values[i & mask]))
                if len(pending) >= 10_000:  # check outcomes as we go (and let the futures go)
                    await asyncio.gather(*pending)
                    pending.clear()
            t1 = time.perf_counter()
            await producer.flush()
            await asyncio.gather(*pending)
            t2 = time.perf_counter()
            return _Run(t2 - t0, t1 - t0, _cpu() - cpu0)
        finally:
            await producer.stop()

    return asyncio.run(run())


def run_one(client: str, cfg: RunConfig, profile: str | None = None) -> _Run:
    """Run one client in this process."""
    if client == "handoff":
        return _handoff(cfg, "send", profile)
    if client == "handoff-nowait":
        return _handoff(cfg, "nowait", profile)
    if client == "handoff-many":
        return _handoff(cfg, "many", profile)
    if client == "confluent":
        return _confluent(cfg, batch=False)
    if client == "confluent-batch":
        return _confluent(cfg, batch=True)
    if client == "aiokafka":
        return _aiokafka(cfg)
    raise ValueError(f"unknown client {client!r} (allowed: {', '.join(CLIENTS)})")


# ============================================================================================ report
@dataclass
class Sample:
    """One client's run."""

    client: str
    label: str
    records: int
    value_bytes: int
    seconds: float
    send_seconds: float
    cpu_seconds: float
    peak_rss_mb: float
    load_1m: float
    ok: bool = True
    error: str = ""

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.records * self.value_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_s_per_million(self) -> float:
        return self.cpu_seconds * 1e6 / self.records if self.records else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "records_per_s": self.records_per_s,
            "mb_per_s": self.mb_per_s,
            "cpu_s_per_million": self.cpu_s_per_million,
        }


def median_samples(samples: Sequence[Sample], order: Sequence[str]) -> list[dict[str, Any]]:
    """Per client (in ``order``), the median of each metric over its successful runs."""
    out: list[dict[str, Any]] = []
    for name in order:
        runs = [s for s in samples if s.client == name and s.ok]
        failed = [s for s in samples if s.client == name and not s.ok]
        if not runs:
            if failed:
                errors = "; ".join(sorted({s.error for s in failed}))
                out.append({"client": name, "label": CLIENTS[name], "runs": 0, "failed": len(failed),
                            "error": errors})  # fmt: skip
            continue
        out.append(
            {
                "client": name,
                "label": runs[0].label,
                "runs": len(runs),
                "failed": len(failed),
                "records": runs[0].records,
                "records_per_s": statistics.median(s.records_per_s for s in runs),
                "records_per_s_min": min(s.records_per_s for s in runs),
                "records_per_s_max": max(s.records_per_s for s in runs),
                "mb_per_s": statistics.median(s.mb_per_s for s in runs),
                "send_seconds": statistics.median(s.send_seconds for s in runs),
                "cpu_s_per_million": statistics.median(s.cpu_s_per_million for s in runs),
                "peak_rss_mb": statistics.median(s.peak_rss_mb for s in runs),
            }
        )
    return out


class ProduceReport(BenchReport[Sample]):
    def medians(self) -> list[dict[str, Any]]:
        return median_samples(self.samples, list(self.config["clients"]))


def _environment() -> dict[str, Any]:
    import platform
    from importlib import metadata

    from kafka_handoff.devbroker import KAFKA_VERSION
    from kafka_handoff.producer.batch import IMPLEMENTATION

    versions: dict[str, str] = {}
    for dist in sorted(set(_DISTRIBUTIONS.values())):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "broker": f"Apache Kafka {KAFKA_VERSION}",
        "encoder": IMPLEMENTATION,
        "load_avg_start": os.getloadavg(),
        "versions": versions,
    }


def _run_child(
    client: str, bootstrap: str, topic: str, args: dict[str, Any], profile: str | None
) -> tuple[dict[str, Any] | None, str, float]:
    """Run one client in a fresh process: (its JSON result or None, error text, peak RSS MB)."""
    from kafka_handoff.bench.throughput import _run_process

    cmd = [sys.executable, "-m", "kafka_handoff.bench.produce", client, "--bootstrap-servers", bootstrap,
           "--topic", topic, "--records", str(args["records"]), "--value-bytes", str(args["value_bytes"]),
           "--acks", str(args["acks"]), "--compression", str(args["compression"]),
           "--chunk", str(args["chunk"])]  # fmt: skip
    if args.get("linger_ms") is not None:
        cmd += ["--linger-ms", str(args["linger_ms"])]
    if args.get("batch_size") is not None:
        cmd += ["--batch-size", str(args["batch_size"])]
    if profile:
        cmd += ["--profile", profile]
    timeout = 120.0 + args["records"] / 2_000.0
    stdout, stderr, code, _cpu_total, rss = _run_process(cmd, dict(os.environ), timeout)
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith("{")), None)
    if line is None or code != 0:
        return None, f"exit {code}: {stderr.strip()[-500:]}", rss
    return json.loads(line), "", rss


#: Records of the unmeasured warm-up run before round 1.
WARM_UP_RECORDS = 200_000


def run_benchmark(
    bootstrap: str,
    *,
    records: int,
    value_bytes: int,
    partitions: int,
    compression: str = "none",
    acks: str = "all",
    linger_ms: int | None = None,
    batch_size: int | None = None,
    chunk: int = 1000,
    repeat: int = 3,
    clients: Sequence[str] = tuple(CLIENTS),
    profile_dir: Path | None = None,
    progress: Callable[[str], None] = lambda msg: None,
) -> ProduceReport:
    """Every client ``repeat`` times, interleaved (each round starting with the next client), each run in
    a fresh process to a fresh topic, after one unmeasured warm-up run of the first client."""
    from kafka_handoff.bench.throughput import create_topic, delete_topic

    for name in clients:
        if name not in CLIENTS:
            raise ValueError(f"unknown client {name!r} (allowed: {', '.join(CLIENTS)})")
    args = {
        "records": records,
        "value_bytes": value_bytes,
        "partitions": partitions,
        "compression": compression,
        "acks": acks,
        "idempotence": acks == "all",
        "linger_ms": linger_ms,
        "batch_size": batch_size,
        "chunk": chunk,
        "repeat": repeat,
        "clients": list(clients),
        "bootstrap_servers": bootstrap,
    }
    report = ProduceReport(config=args, environment=_environment())
    if clients:
        # One unmeasured run first: a fresh broker's JIT warm-up would otherwise be paid by whichever
        # client runs first in round 1.
        warm_args = {**args, "records": min(records, WARM_UP_RECORDS)}
        topic = create_topic(bootstrap, partitions, prefix="bench-produce")
        try:
            _data, error, _rss = _run_child(clients[0], bootstrap, topic, warm_args, None)
        finally:
            delete_topic(bootstrap, topic)
        failed = f" FAILED: {error}" if error else ""
        progress(f"warm-up {clients[0]} {warm_args['records']:,} records (not measured){failed}")
    try:
        for round_no in range(1, repeat + 1):
            shift = (round_no - 1) % max(1, len(clients))  # each round starts with another client
            for name in [*clients[shift:], *clients[:shift]]:
                load = os.getloadavg()[0]
                topic = create_topic(bootstrap, partitions, prefix="bench-produce")
                prof = None
                if profile_dir is not None and round_no == 1 and name.startswith("handoff"):
                    prof = str(profile_dir / f"profile-produce-{name}.txt")
                try:
                    data, error, rss = _run_child(name, bootstrap, topic, args, prof)
                finally:
                    delete_topic(bootstrap, topic)
                if data is None:
                    sample = Sample(name, CLIENTS[name], records, value_bytes, 0.0, 0.0, 0.0, rss, load,
                                    ok=False, error=error)  # fmt: skip
                    progress(f"round {round_no}/{repeat} {name:<16} FAILED: {error}")
                else:
                    sample = Sample(
                        client=name,
                        label=CLIENTS[name],
                        records=int(data["records"]),
                        value_bytes=int(data["value_bytes"]),
                        seconds=float(data["seconds"]),
                        send_seconds=float(data["send_seconds"]),
                        cpu_seconds=float(data["cpu_seconds"]),
                        peak_rss_mb=float(data.get("peak_rss_mb") or rss),
                        load_1m=load,
                    )
                    progress(
                        f"round {round_no}/{repeat} {name:<16} {sample.records_per_s:>11,.0f} rec/s "
                        f"{sample.mb_per_s:>6.1f} MB/s  send loop {sample.send_seconds:5.2f} s  "
                        f"cpu/M {sample.cpu_s_per_million:5.2f} s  rss {sample.peak_rss_mb:5.0f} MB  "
                        f"(load {load:.1f})"
                    )
                report.samples.append(sample)
    finally:
        report.environment["load_avg_end"] = os.getloadavg()
    return report


# ============================================================================================ child CLI
def main(argv: list[str] | None = None) -> int:
    """One client's run in this process (the parent is ``handoff bench produce``); prints one JSON line."""
    parser = argparse.ArgumentParser(prog="python -m kafka_handoff.bench.produce", description=__doc__)
    parser.add_argument("client", choices=list(CLIENTS))
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--acks", choices=("all", "1", "0"), default="all")
    parser.add_argument("--compression", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd"))
    parser.add_argument("--linger-ms", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--chunk", type=int, default=1000)
    parser.add_argument("--profile", default=None, metavar="FILE", help="cProfile text of the send loop")
    args = parser.parse_args(argv)
    cfg = RunConfig(
        bootstrap=args.bootstrap_servers,
        topic=args.topic,
        records=args.records,
        values=make_values(args.value_bytes),
        acks=args.acks,
        compression=args.compression,
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        chunk=args.chunk,
    )
    run = run_one(args.client, cfg, args.profile)
    result = {"client": args.client, "records": args.records, "value_bytes": args.value_bytes,
              **asdict(run), "peak_rss_mb": peak_rss_mb()}  # fmt: skip
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
