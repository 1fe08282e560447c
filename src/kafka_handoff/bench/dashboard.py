"""A metrics dashboard drawn from real Prometheus scrapes of a consuming client.

``python -m kafka_handoff.bench.dashboard [--bootstrap-servers B] [--seconds 24] [--out PNG]``

A producer writes at a steady rate to a 4-partition topic; one consumer of a group reads it, exporting its
metrics through :mod:`kafka_handoff.metrics.prometheus` on a local HTTP port.  In the middle third the
application is slowed down (it sleeps per batch), so lag builds up and drains again; near the end a second
member joins and takes half of the partitions.  Every half second the endpoint is scraped over HTTP and
parsed with ``prometheus_client``'s text parser; the PNG shows what a Grafana board over those series shows:
consume rate, per-partition lag, fetch latency and assigned partitions.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import urllib.request
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = ["main", "run"]

Series = dict[str, list[tuple[float, float]]]


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return out


def run(bootstrap: str, seconds: float = 24.0, rate: int = 4000) -> dict[str, Series]:
    """Run the scenario; return the scraped series by panel."""
    from kafka_handoff import AdminClient, Consumer, NewTopic, Producer
    from kafka_handoff.metrics.prometheus import KafkaCollector, start_http_server

    topic = f"dashboard-{uuid.uuid4().hex[:6]}"
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 4, 1)], timeout=60)
    stop = threading.Event()

    def produce() -> None:
        with Producer({"bootstrap.servers": bootstrap, "linger.ms": 20}) as producer:
            start = time.monotonic()
            sent = 0
            while not stop.is_set():
                due = int((time.monotonic() - start) * rate)
                while sent < due:
                    producer.send(topic, value=b"x" * 100, key=b"%d" % sent)
                    sent += 1
                time.sleep(0.01)

    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": topic,
        "auto.offset.reset": "earliest",
        "max.poll.records": 200,
    }
    consumer = Consumer({**conf, "client.id": "dashboard"})
    collector = KafkaCollector()
    collector.add(consumer)
    server = start_http_server(0, collector)
    port = server.server_address[1]
    second: Any = None

    def consume_second() -> None:
        nonlocal second
        second = Consumer({**conf, "client.id": "dashboard-2"})
        second.subscribe([topic])
        while not stop.is_set():
            second.poll(0.2)

    producer_thread = threading.Thread(target=produce, daemon=True)
    producer_thread.start()
    consumer.subscribe([topic])
    series: dict[str, Series] = defaultdict(lambda: defaultdict(list))
    last: dict[str, float] = {}
    t0 = time.monotonic()
    next_scrape = t0
    joined: threading.Thread | None = None
    try:
        while (now := time.monotonic()) - t0 < seconds:
            elapsed = now - t0
            consumer.poll(0.1)
            if seconds / 3 < elapsed < 2 * seconds / 3:
                time.sleep(0.4)  # the slow phase: at most 500 records/s, the application falls behind
            if joined is None and elapsed > 0.8 * seconds:
                joined = threading.Thread(target=consume_second, daemon=True)
                joined.start()
            if now < next_scrape:
                continue
            next_scrape += 0.5
            for (name, labels), value in _scrape(port).items():
                tags = dict(labels)
                if name == "kafka_consumer_fetch_manager_records_consumed_total" and not tags.get("topic"):
                    if "consumed" in last:
                        series["rate"]["records/s"].append((elapsed, (value - last["consumed"]) / 0.5))
                    last["consumed"] = value
                elif name == "kafka_consumer_fetch_manager_records_lag" and tags.get("partition"):
                    series["lag"][f"partition {tags['partition']}"].append((elapsed, value))
                elif name == "kafka_consumer_fetch_manager_fetch_latency_avg":
                    series["latency"]["fetch-latency-avg"].append((elapsed, value))
                elif name == "kafka_consumer_coordinator_assigned_partitions":
                    series["assigned"]["assigned-partitions"].append((elapsed, value))
    finally:
        stop.set()
        producer_thread.join(30)
        if joined is not None:
            joined.join(30)
        if second is not None:
            second.close()
        server.shutdown()
        server.server_close()
        consumer.close()
    return {k: dict(v) for k, v in series.items()}


def plot(series: dict[str, Series], out: Path, seconds: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("rate", "consume rate (records/s)"),
        ("lag", "records-lag per partition"),
        ("latency", "fetch-latency-avg (ms)"),
        ("assigned", "assigned-partitions"),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(12, 7), sharex=True)
    for ax, (key, title) in zip(axes.flat, panels, strict=True):
        for label, points in sorted(series.get(key, {}).items()):
            ax.plot([p[0] for p in points], [p[1] for p in points], label=label, linewidth=1.4)
        ax.set_title(title, fontsize=10)
        ax.axvspan(seconds / 3, 2 * seconds / 3, color="#fdd0a2", alpha=0.35, linewidth=0)
        ax.axvline(0.8 * seconds, color="#636363", linestyle="--", linewidth=0.8)
        ax.grid(alpha=0.3)
        if key == "lag":
            ax.legend(fontsize=8)
    for ax in axes[1]:
        ax.set_xlabel("seconds (shaded: slow application; dashed: a second member joins)")
    fig.suptitle("kafka-handoff consumer, scraped from its Prometheus endpoint every 0.5 s", fontsize=12)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_handoff.bench.dashboard", description=__doc__)
    parser.add_argument("--bootstrap-servers", default=None, help="default: start a private dev broker")
    parser.add_argument("--seconds", type=float, default=24.0)
    parser.add_argument("--out", type=Path, default=Path("bench-results/metrics-dashboard.png"))
    args = parser.parse_args(argv)
    if args.bootstrap_servers:
        series = run(args.bootstrap_servers, args.seconds)
    else:
        from kafka_handoff import devbroker

        cluster = devbroker.start(nodes=1)
        try:
            series = run(cluster.bootstrap_servers, args.seconds)
        finally:
            cluster.stop()
    plot(series, args.out, args.seconds)
    print(f"dashboard: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
