"""One side of ``handoff bench compare``: consume or produce with the kafka-handoff this interpreter imports.

``handoff bench compare REF`` runs this file in two interpreters -- the current tree's and a virtualenv that
holds REF's build -- so it imports nothing of kafka-handoff but the public client API (``Consumer``,
``Producer``, ``TopicPartition``) that every tree since the first wave has, and nothing else of the package:
the ref's copy of the benchmark modules may differ from (or predate) the current one.  Prints one JSON line.

``consume``: assign every partition of a pre-filled topic, read from the beginning, touch every record
(count it, add up its value's length; ``--api columns``: ``poll_columns()`` and its value column) until
``--records`` were read.  ``startup_s`` runs from ``Consumer(...)`` to the first record, ``consume_s`` from
the first record to the last, ``cpu_s`` is the process's CPU (every thread) in that window.

``produce``: send ``--records`` values (``--mode send``: ``send()``, a future per record; ``nowait``:
``send_nowait()``) to a topic and flush; ``seconds``/``cpu_s`` from the first send until ``flush`` returned.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import time
from typing import Any

BATCH = 500  # max.poll.records, as in kafka_handoff.bench.peers


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss_mb() -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def consume(
    bootstrap: str, topic: str, partitions: int, records: int, api: str, timeout_s: float
) -> dict[str, Any]:
    from kafka_handoff.consumer import Consumer
    from kafka_handoff.types import TopicPartition

    t0 = time.perf_counter()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "max.poll.records": BATCH,
        }
    )
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    deadline = time.monotonic() + timeout_s
    count = nbytes = 0
    t_first = cpu_first = 0.0
    try:
        if api == "columns":
            poll_columns = consumer.poll_columns
            while count < records and time.monotonic() < deadline:
                got = 0
                for chunk in poll_columns(1.0):
                    got += len(chunk)
                    nbytes += sum(len(v) for v in chunk.values if v is not None)
                if got:
                    if not t_first:
                        t_first, cpu_first = time.perf_counter(), _cpu()
                    count += got
        else:
            poll = consumer.poll
            while count < records and time.monotonic() < deadline:
                batch = poll(1.0)
                if not batch:
                    continue
                if not t_first:
                    t_first, cpu_first = time.perf_counter(), _cpu()
                for record in batch:
                    count += 1
                    nbytes += len(record.value)
        t_end, cpu_end = time.perf_counter(), _cpu()
    finally:
        consumer.close()
    return {
        "records": count,
        "value_bytes": nbytes,
        "startup_s": t_first - t0 if t_first else 0.0,
        "consume_s": t_end - t_first if t_first else 0.0,
        "cpu_s": cpu_end - cpu_first,
        "peak_rss_mb": _peak_rss_mb(),
    }


def produce(
    bootstrap: str,
    topic: str,
    records: int,
    value_bytes: int,
    mode: str,
    acks: str,
    linger_ms: int | None,
    compression: str,
) -> dict[str, Any]:
    from kafka_handoff.producer import Producer

    rng = random.Random(7)
    words = [bytes(rng.choices(b"abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 9))) for _ in range(512)]
    pool = [
        b" ".join(rng.choices(words, k=value_bytes))[:value_bytes].ljust(value_bytes, b".")
        for _ in range(1024)
    ]
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "enable.idempotence": acks == "all",
        "compression.type": compression,
    }
    if linger_ms is not None:
        config["linger.ms"] = linger_ms
    producer = Producer(config)
    try:
        producer.send(topic, b"warm-up").result(60)  # metadata and producer id, outside the timing
        cpu0 = _cpu()
        t0 = time.perf_counter()
        if mode == "nowait":
            send_nowait = producer.send_nowait
            for i in range(records):
                send_nowait(topic, pool[i & 1023])
        else:
            send = producer.send
            for i in range(records):
                send(topic, pool[i & 1023])
        producer.flush(600)
        seconds, cpu = time.perf_counter() - t0, _cpu() - cpu0
    finally:
        producer.close(30)
    return {"records": records, "value_bytes": records * value_bytes, "seconds": seconds, "cpu_s": cpu,
            "peak_rss_mb": _peak_rss_mb()}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("what", choices=("consume", "produce"))
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--api", choices=("records", "columns"), default="records")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--mode", choices=("send", "nowait"), default="send")
    parser.add_argument("--acks", default="all")
    parser.add_argument("--linger-ms", type=int, default=None)
    parser.add_argument("--compression", default="none")
    parser.add_argument(
        "--timeout-s", type=float, default=0.0, help="give up consuming after (default: by size)"
    )
    args = parser.parse_args(argv)
    try:
        if args.what == "consume":
            timeout = args.timeout_s or 120.0 + args.records / 20_000.0
            result = consume(
                args.bootstrap_servers, args.topic, args.partitions, args.records, args.api, timeout
            )
        else:
            result = produce(
                args.bootstrap_servers,
                args.topic,
                args.records,
                args.value_bytes,
                args.mode,
                args.acks,
                args.linger_ms,
                args.compression,
            )
    except AttributeError as exc:  # an API the ref does not have yet (send_nowait, poll_columns)
        print(json.dumps({"error": f"not supported by this tree: {exc}"}), flush=True)
        return 3
    from kafka_handoff.protocol import records as records_mod

    result["implementation"] = getattr(records_mod, "IMPLEMENTATION", "?")
    print(json.dumps(result), flush=True)
    return 0 if result["records"] >= args.records else 1


if __name__ == "__main__":
    sys.exit(main())
