"""Fetch-session benchmark (KIP-227): ``python -m kafka_handoff.bench.fetch_sessions``.

For each partition count (default 1,000 and 10,000) it creates one topic on a fresh single-node dev broker
(or ``--bootstrap-servers``), assigns every partition to one consumer positioned at the end, lets it
settle, then measures a steady window of ``--seconds`` twice -- with fetch sessions and with sessionless
full fetches -- while a trickle producer writes ``--rate`` records/s to random partitions.  It reports
Fetch requests sent, request and response bytes (counted at the framing layer), records consumed, and
the broker JVM's CPU seconds in the window (from ``/proc``, when the benchmark started the broker).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from kafka_handoff.protocol.versions import ApiKey

__all__ = ["Result", "main", "measure", "request_sizes"]


@dataclass
class Result:
    partitions: int
    sessions: bool
    seconds: float
    fetches: int
    request_bytes: int
    response_bytes: int
    records: int
    broker_cpu_s: float | None

    @property
    def bytes_per_fetch(self) -> float:
        return self.request_bytes / self.fetches if self.fetches else 0.0


class _Counter:
    """Counts Fetch request/response bytes at the framing layer (wraps :mod:`kafka_handoff.protocol.wire`)."""

    def __init__(self) -> None:
        from kafka_handoff.protocol import wire

        self.lock = threading.Lock()
        self.fetches = 0
        self.request_bytes = 0
        self.response_bytes = 0
        encode, decode = wire.encode_request, wire.decode_response

        def counting_encode(payload: Any, correlation_id: int, client_id: str | None) -> bytes:
            data = encode(payload, correlation_id, client_id)
            if int(payload.__api_key__) == 1:
                with self.lock:
                    self.fetches += 1
                    self.request_bytes += len(data)
            return data

        def counting_decode(api_key: int, version: int, frame: bytes | memoryview) -> Any:
            if api_key == ApiKey.FETCH:
                with self.lock:
                    self.response_bytes += len(frame) + 4
            return decode(api_key, version, frame)

        wire.encode_request = counting_encode
        wire.decode_response = counting_decode

    def snapshot(self) -> tuple[int, int, int]:
        with self.lock:
            return self.fetches, self.request_bytes, self.response_bytes


def _cpu_seconds(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    bootstrap: str,
    topics: dict[str, int],
    *,
    sessions: bool,
    seconds: float,
    rate: int,
    counter: _Counter,
    broker_pid: int | None,
    settle_s: float = 5.0,
) -> Result:
    from kafka_handoff import Consumer, Producer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "auto.offset.reset": "latest", "client.id": f"bench-{sessions}"}
    )
    consumer._fetcher.use_sessions = sessions  # the benchmark's switch
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    stop = threading.Event()

    tps = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]

    def trickle() -> None:
        rnd = random.Random(1)
        while not stop.is_set():
            tp = rnd.choice(tps)
            producer.send(tp.topic, b"x" * 100, partition=tp.partition)
            stop.wait(1.0 / rate if rate > 0 else 1.0)

    records = 0
    try:
        consumer.assign(tps)
        for tp in tps:  # every position known (a new topic's partitions get ready one by one)
            consumer.position(tp, timeout=300)
        writer = threading.Thread(target=trickle, daemon=True)
        if rate > 0:
            writer.start()
        settle_end = time.monotonic() + settle_s
        while time.monotonic() < settle_end:
            consumer.poll(0.2)
        f0, rq0, rs0 = counter.snapshot()
        cpu0 = _cpu_seconds(broker_pid)
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            records += len(consumer.poll(0.2))
        elapsed = time.monotonic() - start
        f1, rq1, rs1 = counter.snapshot()
        cpu1 = _cpu_seconds(broker_pid)
    finally:
        stop.set()
        producer.close(10)
        consumer.close(10)
    return Result(
        len(tps),
        sessions,
        round(elapsed, 2),
        f1 - f0,
        rq1 - rq0,
        rs1 - rs0,
        records,
        None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 2),
    )


def request_sizes(partitions: int, changed: int = 10, version: int = 17) -> dict[str, int]:
    """Encoded Fetch request sizes for ``partitions`` partitions of one topic on one broker (no broker
    needed): sessionless full fetch, session-creating full fetch, an idle incremental fetch, and an
    incremental fetch after ``changed`` partitions' positions moved."""
    from kafka_handoff.consumer.fetcher import FetchBuffer, FetchManager
    from kafka_handoff.consumer.subscription import SubscriptionState
    from kafka_handoff.protocol import wire
    from kafka_handoff.protocol.metadata import MetadataManager
    from kafka_handoff.types import BrokerNode, ClusterMetadata, PartitionInfo, TopicPartition

    topic = "t"
    metadata = MetadataManager()
    metadata.cluster = ClusterMetadata(
        brokers={1: BrokerNode(1, "localhost", 9092)},
        partitions={topic: tuple(PartitionInfo(topic, p, 1, 5) for p in range(partitions))},
        topic_ids={topic: uuid.uuid4()},
    )
    subs = SubscriptionState("latest")
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    subs.assign_from_user(tps)
    for tp in tps:
        subs.seek(tp, 1000)
    fm = FetchManager(
        subs,
        metadata,
        FetchBuffer(),
        fetch_min_bytes=1,
        fetch_max_bytes=52428800,
        fetch_max_wait_ms=500,
        max_partition_fetch_bytes=1048576,
        isolation_level=0,
        rack_id="",
        retry_backoff_ms=100,
    )

    def one_fetch(session_id: int) -> int:
        (req,) = fm.poll(0).unsent
        size = len(
            wire.encode_request(wire.build_request(ApiKey.FETCH, version, req.body(version)), 1, "bench")
        )
        response = wire.build_response(
            ApiKey.FETCH,
            version,
            {"throttle_time": 0, "error_code": 0, "session_id": session_id, "responses": []},
        )
        assert req.on_response is not None
        req.on_response(response, version, 0)
        return size

    out: dict[str, int] = {}
    fm.use_sessions = False
    out["full, no session"] = one_fetch(0)
    fm.use_sessions = True
    out["full, new session"] = one_fetch(42)
    out["incremental, idle"] = one_fetch(42)
    for tp in tps[:changed]:
        st = subs.state(tp)
        subs.advance(tp, st.position_epoch, 1010, 5)
    out[f"incremental, {changed} moved"] = one_fetch(42)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bootstrap-servers", help="an existing cluster (default: start a dev broker)")
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=int, default=50, help="records/s written to random partitions")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--sizes-only", action="store_true", help="only the encoded request sizes (no broker)"
    )
    args = parser.parse_args(argv)
    for n in args.partitions:
        sizes = request_sizes(n)
        print(
            f"{n:>6} partitions, Fetch v17 request bytes: " + ", ".join(f"{k} {v}" for k, v in sizes.items())
        )
    if args.sizes_only:
        return 0

    from kafka_handoff import AdminClient, NewTopic, devbroker

    cluster = None
    bootstrap = args.bootstrap_servers
    broker_pid: int | None = None
    if bootstrap is None:
        cluster = devbroker.start(nodes=1)
        bootstrap = cluster.bootstrap_servers
        broker_pid = cluster.nodes[0].pid
    counter = _Counter()
    results: list[Result] = []
    try:
        for n in args.partitions:
            # Kafka refuses to create more than ~10,000 records in one operation: topics of <= 5,000.
            topics: dict[str, int] = {}
            left = n
            while left > 0:
                topics[f"bench-fetch-sessions-{n}-{uuid.uuid4().hex[:6]}"] = min(left, 5000)
                left -= 5000
            with AdminClient({"bootstrap.servers": bootstrap}) as admin:
                for topic, count in topics.items():
                    admin.create_topics([NewTopic(topic, count, 1)], timeout=600)
            for sessions in (False, True):
                r = measure(
                    bootstrap,
                    topics,
                    sessions=sessions,
                    seconds=args.seconds,
                    rate=args.rate,
                    counter=counter,
                    broker_pid=broker_pid,
                )
                results.append(r)
                if not args.json:
                    print(
                        f"{n:>6} partitions  sessions={'on ' if sessions else 'off'}  "
                        f"{r.fetches:>4} fetches in {r.seconds:.0f} s  "
                        f"request {r.request_bytes / 1e3:>9.1f} kB ({r.bytes_per_fetch:>8.0f} B/fetch)  "
                        f"response {r.response_bytes / 1e3:>9.1f} kB  records {r.records:>5}  "
                        f"broker CPU {r.broker_cpu_s if r.broker_cpu_s is not None else '?'} s",
                        flush=True,
                    )
    finally:
        if cluster is not None:
            cluster.stop()
    if args.json:
        json.dump([asdict(r) for r in results], sys.stdout, indent=2)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
