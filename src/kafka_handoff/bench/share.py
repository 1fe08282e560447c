"""Share group consume throughput: ``handoff bench throughput --share``.

Like ``handoff bench throughput`` (data produced once, each client in a fresh child process, repeats
interleaved, medians reported), but every run consumes the whole topic as the single member of a fresh share
group (KIP-932) whose ``share.auto.offset.reset`` is ``earliest``, acknowledging implicitly (every record
ACCEPTed by the next poll).  So each record is acquired, delivered and acknowledged: the numbers include
the share-partition bookkeeping of the broker, and are not comparable with plain consumer throughput.

Clients: ``handoff-share`` (:class:`kafka_handoff.ShareConsumer`) and ``confluent-share``
(confluent-kafka's ``ShareConsumer``, a preview in librdkafka 2.15+; skipped when not installed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from kafka_handoff.bench.peers import (
    BATCH,
    ClientSpec,
    _Meter,
    consume_loop,
    visit_confluent,
    visit_records,
)
from kafka_handoff.bench.runs import peak_rss_mb
from kafka_handoff.bench.throughput import (
    Sample,
    ThroughputReport,
    child_sample,
    create_topic,
    delete_topic,
    environment,
    median_samples,
    produce_data,
    sample_line,
)

__all__ = ["SHARE_CLIENTS", "run_share_benchmark"]

SHARE_CLIENTS: dict[str, ClientSpec] = {
    spec.name: spec
    for spec in (
        ClientSpec(
            "handoff-share",
            "kafka-handoff ShareConsumer",
            "handoff_share",
            (("KAFKA_HANDOFF_PURE_PYTHON", "0"),),
        ),
        ClientSpec("confluent-share", "confluent-kafka ShareConsumer (preview)", "confluent_share"),
    )
}


def confluent_has_share_consumer() -> bool:
    try:
        import confluent_kafka
    except ImportError:
        return False
    return hasattr(confluent_kafka, "ShareConsumer")


def _deadline(records: int) -> float:
    return time.monotonic() + 60.0 + records / 2_000.0


def run_handoff_share(bootstrap: str, topic: str, group: str, records: int) -> _Meter:
    from kafka_handoff.share import ShareConsumer

    m = _Meter(records)
    m.start()
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": BATCH})
    consumer.subscribe([topic])
    # finish: the last poll's records are acknowledged before the clock stops
    return consume_loop(
        m,
        _deadline(records),
        lambda: consumer.poll(1.0),
        visit_records,
        consumer.close,
        finish=lambda: consumer.commit_sync(30),
    )


def run_confluent_share(bootstrap: str, topic: str, group: str, records: int) -> _Meter:
    import confluent_kafka

    m = _Meter(records)
    m.start()
    consumer = confluent_kafka.ShareConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": BATCH}
    )
    consumer.subscribe([topic])
    return consume_loop(
        m,
        _deadline(records),
        lambda: consumer.poll(1.0),
        visit_confluent,
        consumer.close,
        finish=lambda: consumer.commit_sync(30),
    )


_RUNNERS: dict[str, Callable[[str, str, str, int], _Meter]] = {
    "handoff_share": run_handoff_share,
    "confluent_share": run_confluent_share,
}


def _new_group(bootstrap: str) -> str:
    from kafka_handoff.admin import AdminClient

    group = f"bench-share-{uuid.uuid4().hex[:10]}"
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.alter_group_configs(group, {"share.auto.offset.reset": "earliest"}, timeout=30)
    return group


def run_share_client(spec: ClientSpec, bootstrap: str, topic: str, records: int) -> Sample:
    load = os.getloadavg()[0]
    group = _new_group(bootstrap)
    env = {**os.environ, **dict(spec.env)}
    assert spec.runner is not None
    cmd = [
        sys.executable, "-m", "kafka_handoff.bench.share", spec.runner,
        "--bootstrap-servers", bootstrap, "--topic", topic, "--group", group, "--records", str(records),
    ]  # fmt: skip
    return child_sample(spec, cmd, env, records, load)


class ShareThroughputReport(ThroughputReport):
    def medians(self) -> list[dict[str, Any]]:
        order = list(self.config["clients"])
        ok = {s.client for s in self.samples if s.ok}
        out = median_samples([s for s in self.samples if s.ok], [c for c in order if c in ok])
        for name in order:
            if name not in ok:
                errors = sorted({s.error for s in self.samples if s.client == name})
                failed = sum(1 for s in self.samples if s.client == name)
                out.append({"client": name, "label": SHARE_CLIENTS[name].label, "runs": 0, "failed": failed,
                            "error": "; ".join(errors)})  # fmt: skip
        return out


def run_share_benchmark(
    bootstrap: str,
    *,
    records: int,
    value_bytes: int,
    partitions: int,
    repeat: int,
    clients: Sequence[str] | None = None,
    keep_topic: bool = False,
    progress: Callable[[str], None] = lambda msg: None,
) -> ShareThroughputReport:
    """Produce once, then consume with every share client ``repeat`` times, interleaved."""
    if clients is None:
        clients = [c for c in SHARE_CLIENTS if c != "confluent-share" or confluent_has_share_consumer()]
    for name in clients:
        if name not in SHARE_CLIENTS:
            raise ValueError(f"unknown share client {name!r} (allowed: {', '.join(SHARE_CLIENTS)})")
    env = environment()
    env["versions"] = {**env.get("versions", {}), "confluent-share": env.get("versions", {}).get("confluent")}
    report = ShareThroughputReport(
        config={
            "records": records,
            "value_bytes": value_bytes,
            "partitions": partitions,
            "repeat": repeat,
            "clients": list(clients),
            "bootstrap_servers": bootstrap,
            "share": True,
        },
        environment=env,
    )
    topic = create_topic(bootstrap, partitions, prefix="bench-share")
    try:
        progress(f"producing {records:,} records x {value_bytes} B to {topic} ({partitions} partitions)")
        report.config["produce_s"] = produce_data(bootstrap, topic, partitions, records, value_bytes)
        report.config["topic"] = topic
        for round_no in range(1, repeat + 1):
            for name in clients:
                sample = run_share_client(SHARE_CLIENTS[name], bootstrap, topic, records)
                report.samples.append(sample)
                progress(sample_line(f"round {round_no}/{repeat} {name:<16}", sample))
    finally:
        report.environment["load_avg_end"] = os.getloadavg()
        if not keep_topic:
            delete_topic(bootstrap, topic)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_handoff.bench.share", description=__doc__)
    parser.add_argument("runner", choices=sorted(_RUNNERS))
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--records", type=int, required=True)
    args = parser.parse_args(argv)
    meter = _RUNNERS[args.runner](args.bootstrap_servers, args.topic, args.group, args.records)
    result = meter.result(args.runner)
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result), flush=True)
    return 0 if meter.count >= args.records else 1


if __name__ == "__main__":
    sys.exit(main())
