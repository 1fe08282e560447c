"""The pipeline under broker failures: the scenario of ``tests/faults/test_pipeline_faults.py`` and
``handoff bench faults --pipeline`` (issue 32).

Two pipeline workers (:class:`~kafka_handoff.pipeline.worker.Worker`, threads of this process, one group,
one SparkSession) process an input topic (replication factor 3, ``min.insync.replicas=2``) that an idempotent
``acks=all`` producer writes in chunks of ``chunk`` records.  Before each chunk but the first and the last,
one fault of :data:`PIPELINE_FAULTS` is injected on the 3-node cluster; a chunk is written and every record
of it committed by the workers while the fault holds (a killed node stays down meanwhile), then the node is
restarted.  Everything waits for events -- records committed (the workers' batch reports), leaders moved
(metadata) -- with ``step_timeout`` as the bound after which a step counts as stalled.

Afterwards the sink is read back: every well-formed input record's output row must be there exactly once,
nothing else; the sink's marks and the group's committed offsets must equal the input's end offsets; no
worker may have failed (:meth:`PipelineFaultRun.problems`).

Faults (:data:`PIPELINE_FAULTS`):

* ``kill-leader`` -- SIGKILL the leader of some input partitions (it is down while a chunk is processed);
* ``move-leaders`` -- a leadership move without a failure: the replica order of the partitions is rotated
  (``alter_partition_reassignments``) and a preferred election (``elect_leaders``) makes the new first
  replica the leader;
* ``kill-group-coordinator`` -- SIGKILL the group coordinator's node;
* ``kill-txn-coordinator`` -- SIGKILL the transaction coordinator of a worker's transactional id (the Kafka
  sink's transactions; with another sink it is a broker kill like the others).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kafka_handoff.admin import AdminClient, ElectionType, NewTopic
from kafka_handoff.bench.faults import FAULT_BROKER_OVERRIDES, coordinator_node, leaders, offsets_partition
from kafka_handoff.consumer import Consumer
from kafka_handoff.devbroker.cluster import Cluster
from kafka_handoff.devbroker.probe import fetch_metadata
from kafka_handoff.producer import Producer
from kafka_handoff.types import TopicPartition

__all__ = ["PIPELINE_FAULTS", "PipelineFaultRun", "add_arguments", "cli", "run_pipeline_faults"]

log = logging.getLogger("kafka_handoff.bench.pipeline_faults")

#: The bound of the first step (it includes the Spark session's first jobs).
FIRST_STEP_TIMEOUT_S = 300.0

PIPELINE_FAULTS = ("kill-leader", "move-leaders", "kill-group-coordinator", "kill-txn-coordinator")


class StepStalledError(AssertionError):
    """A step's event did not come within the step timeout (the pipeline stalled) or a worker died."""


@dataclass
class PipelineFaultRun:
    protocol: str
    sink: str
    faults: list[str]
    records: int = 0
    """Input records written (all acknowledged)."""
    expected_rows: int = 0
    """Well-formed input records (each must produce one output row)."""
    output_rows: int = 0
    missing: int = 0
    extra: int = 0
    duplicated: int = 0
    """Event ids in the output more than once."""
    marks_equal_end_offsets: bool = False
    committed_equal_end_offsets: bool = False
    worker_errors: list[str] = field(default_factory=list)
    stalled: str = ""
    """The step that did not complete (a stall, or a worker that died), '' if none."""
    steps: list[str] = field(default_factory=list)
    """What happened when (seconds since the start)."""
    mark_conflicts: int = 0
    kafka_commit_failures: int = 0
    elapsed_s: float = 0.0

    def problems(self) -> list[str]:
        out = []
        if self.stalled:
            out.append(f"stalled: {self.stalled}")
        if self.worker_errors:
            out.append(f"workers failed: {self.worker_errors}")
        if self.missing or self.extra:
            out.append(
                f"output not exactly once: {self.missing} missing, {self.extra} extra, {self.duplicated} "
                "event ids more than once"
            )
        if not self.marks_equal_end_offsets:
            out.append("the sink's marks differ from the input's end offsets")
        if not self.committed_equal_end_offsets:
            out.append("the group's committed offsets differ from the input's end offsets")
        return out

    def report(self) -> str:
        return "\n".join([f"{self.protocol}/{self.sink}: {asdict(self)}", *self.steps])


class _Progress:
    """Records committed by the workers (from their batch reports)."""

    def __init__(self) -> None:
        self.committed = 0
        self.failed: list[str] = []
        self.cond = threading.Condition()

    def on_batch(self, report: Any) -> None:
        with self.cond:
            if report.status == "committed":
                self.committed += report.records
            elif report.status == "failed":
                self.failed.append(report.detail)
            self.cond.notify_all()

    def await_committed(self, n: int, what: str, trouble: Callable[[], str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.committed < n:
                bad = trouble()
                if bad:
                    raise StepStalledError(f"{what}: {bad}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StepStalledError(
                        f"{what}: only {self.committed} of {n} records committed within {timeout:.0f} s"
                    )
                self.cond.wait(min(left, 1.0))


class _WorkerThread(threading.Thread):
    def __init__(self, worker: Any) -> None:
        super().__init__(name=f"pipeline-{worker.member}", daemon=True)
        self.worker = worker
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.worker.run()
        except BaseException as exc:  # reported by the scenario
            self.error = exc


def _await_leaders(
    cluster: Cluster, topic: str, cond: Callable[[dict[int, int]], bool], what: str, timeout: float
) -> dict[int, int]:
    deadline = time.monotonic() + timeout
    current: dict[int, int] = {}
    while True:
        try:
            current = leaders(cluster, topic)
        except Exception:  # a bootstrap node is down: the next probe tries again
            current = {}
        if current and cond(current):
            return current
        if time.monotonic() > deadline:
            raise StepStalledError(f"{what}: leaders {current}")
        time.sleep(0.1)  # polling the cluster's metadata for the awaited change


def _without(node: int) -> Callable[[dict[int, int]], bool]:
    return lambda ls: node not in ls.values()


def move_leaders(
    cluster: Cluster, admin: AdminClient, topic: str, timeout: float
) -> tuple[dict[int, int], dict[int, int]]:
    """Move the leader of every partition of ``topic`` to the next node: rotate its replica order
    (``alter_partition_reassignments``, same replicas) and elect the preferred leader; returns (leaders
    before, leaders after) once the metadata shows the move."""
    before = leaders(cluster, topic)
    nodes = cluster.node_ids
    targets = {p: nodes[(nodes.index(n) + 1) % len(nodes)] for p, n in before.items()}
    moves = {TopicPartition(topic, p): [t, *[n for n in nodes if n != t]] for p, t in targets.items()}
    admin.alter_partition_reassignments(moves, timeout=60)

    def moved(ls: dict[int, int]) -> bool:
        if all(ls.get(p) == t for p, t in targets.items()):
            return True
        try:  # asked again until the new order is in place and the replicas are in sync
            admin.elect_leaders(ElectionType.PREFERRED, list(moves), timeout=10)
        except Exception:
            pass
        return False

    _await_leaders(cluster, topic, moved, "preferred leaders elected", timeout)
    return before, targets


def transaction_coordinator(cluster: Cluster, transactional_id: str) -> int:
    """The node leading ``transactional_id``'s ``__transaction_state`` partition."""
    meta = fetch_metadata(cluster.bootstrap_servers, ["__transaction_state"], 10.0)
    parts = meta.partitions_for("__transaction_state") or ()
    target = offsets_partition(transactional_id, len(parts))
    return next(p.leader for p in parts if p.partition == target)


def run_pipeline_faults(
    cluster: Cluster,
    spark: Any,
    *,
    protocol: str,
    sink_format: str,
    workdir: str | Path,
    faults: Sequence[str],
    chunk: int = 6000,
    partitions: int = 6,
    workers: int = 2,
    seed: int = 32,
    step_timeout: float = 180.0,
    max_records: int = 1500,
) -> PipelineFaultRun:
    """Run the scenario (module docstring): ``faults`` in order, one chunk of input processed under each,
    one before the first and one after the last."""
    from kafka_handoff.pipeline import testing as pt
    from kafka_handoff.pipeline.sinks import make_sink
    from kafka_handoff.pipeline.worker import Worker
    from kafka_handoff.sample import generate_events

    unknown = [f for f in faults if f not in PIPELINE_FAULTS]
    if unknown:
        raise ValueError(f"faults: unknown {unknown}; allowed values: {', '.join(PIPELINE_FAULTS)}")
    started = time.monotonic()
    run = PipelineFaultRun(protocol, sink_format, list(faults))
    bootstrap = cluster.bootstrap_servers
    suffix = uuid.uuid4().hex[:8]
    topic = f"pipeline-faults-in-{suffix}"
    out_topic = f"pipeline-faults-out-{suffix}"
    group = f"pipeline-faults-{suffix}"
    topic_config = {"min.insync.replicas": "2", "retention.ms": "-1"}
    topics = [topic, out_topic] if sink_format == "kafka" else [topic]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(t, partitions, 3, topic_config) for t in topics], timeout=60)
    config = pt.pipeline_config(
        bootstrap,
        topic,
        group,
        out_topic if sink_format == "kafka" else str(Path(workdir) / "out"),
        sink_format=sink_format,
        protocol=protocol,
        max_records=max_records,
        max_interval_ms=300,
    )
    events = generate_events(
        chunk * (len(faults) + 2),
        seed=seed,
        malformed_share=0.002,
        start_ms=time.time_ns() // 1_000_000 - 600_000,
    )
    run.records = len(events)
    chunks = [events[i : i + chunk] for i in range(0, len(events), chunk)]
    progress = _Progress()
    threads = [
        _WorkerThread(Worker(config, spark=spark, member=f"w{i + 1}", on_batch=progress.on_batch))
        for i in range(workers)
    ]
    for t in threads:
        t.start()

    def trouble() -> str:
        dead = [f"{t.worker.member}: {t.error!r}" for t in threads if not t.is_alive()]
        return "; ".join(dead + progress.failed)

    def step(text: str) -> None:
        run.steps.append(f"{time.monotonic() - started:6.1f}s {text}")
        log.info("pipeline faults (%s/%s): %s", protocol, sink_format, text)

    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
    )
    written = 0

    def write_and_await(what: str, timeout: float = step_timeout) -> None:
        nonlocal written
        part = chunks.pop(0)
        failures: list[BaseException] = []

        def done(_md: Any, exc: BaseException | None) -> None:
            if exc is not None:
                failures.append(exc)

        for e in part:
            producer.send(topic, e.value, key=e.key, timestamp=e.timestamp, callback=done)
        producer.flush(step_timeout)
        if failures:
            raise StepStalledError(f"{what}: {len(failures)} input records failed; first: {failures[0]!r}")
        written += len(part)
        progress.await_committed(written, what, trouble, timeout)
        step(f"{what}: {written} records committed")

    def kill(node: int, why: str) -> None:
        cluster.kill_node(node)
        step(f"node {node} ({why}) killed")

    def restart(node: int) -> None:
        cluster.restart_node(node)
        step(f"node {node} restarted")

    try:
        # The first batches include Spark's first jobs of the session (code generation, Python workers):
        # on a loaded 2-core machine that alone measured 100 s.
        write_and_await("before the faults", max(step_timeout, FIRST_STEP_TIMEOUT_S))
        for fault in faults:
            if fault == "kill-leader":
                before = leaders(cluster, topic)
                victim = before[random.Random(seed + len(run.steps)).randrange(partitions)]
                led = sorted(p for p, n in before.items() if n == victim)
                kill(victim, f"leader of partitions {led}")
                _await_leaders(cluster, topic, _without(victim), "leaders moving off the killed node",
                               step_timeout)  # fmt: skip
                write_and_await(f"node {victim} down")
                restart(victim)
            elif fault == "move-leaders":
                before, targets = move_leaders(cluster, admin, topic, step_timeout)
                step(f"leaders moved: {before} -> {targets}")
                write_and_await("after the leader move")
            elif fault == "kill-group-coordinator":
                node = coordinator_node(cluster, group)
                kill(node, "group coordinator")
                write_and_await(f"group coordinator {node} down")
                restart(node)
            elif fault == "kill-txn-coordinator":
                sink = threads[0].worker._sink
                txn_id = getattr(sink, "transactional_id", f"handoff-{config.sink.app_id}-w1")
                node = transaction_coordinator(cluster, txn_id)
                kill(node, f"transaction coordinator of {txn_id}")
                write_and_await(f"transaction coordinator {node} down")
                restart(node)
        write_and_await("after the faults")
    except StepStalledError as exc:
        run.stalled = str(exc)
    finally:
        producer.close(30)
        for t in threads:
            t.worker.stop()
        for t in threads:
            t.join(120)
        try:
            cluster.heal()
        finally:
            admin.close()
    for t in threads:
        if t.is_alive():
            run.worker_errors.append(f"{t.worker.member} did not stop within 120 s")
        elif t.error is not None:
            run.worker_errors.append(f"{t.worker.member}: {t.error!r}")
        run.mark_conflicts += t.worker.stats.mark_conflicts
        run.kafka_commit_failures += t.worker.stats.kafka_commit_failures
    _check_output(run, config, events, topic, partitions, make_sink)
    run.elapsed_s = round(time.monotonic() - started, 1)
    try:
        with AdminClient({"bootstrap.servers": bootstrap}) as cleanup:
            cleanup.delete_topics(topics, if_exists=True, wait=False, timeout=15)
    except Exception:  # best effort
        pass
    return run


def _check_output(
    run: PipelineFaultRun, config: Any, events: list[Any], topic: str, partitions: int, make_sink: Any
) -> None:
    from kafka_handoff.pipeline import testing as pt

    expected = pt.valid_event_ids(events)
    sink = make_sink(config.sink, pipeline=config)
    try:
        got = pt.output_event_ids(sink.read_table())
        run.expected_rows = sum(expected.values())
        run.output_rows = sum(got.values())
        run.missing = sum((expected - got).values())
        run.extra = sum((got - expected).values())
        run.duplicated = sum(1 for n in got.values() if n > 1)
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        with Consumer(
            {"bootstrap.servers": config.bootstrap_servers, "group.id": config.group_id,
             "enable.auto.commit": False}
        ) as c:  # fmt: skip
            ends = c.end_offsets(tps, timeout=30)
            committed = c.committed(tps, timeout=30)
        run.marks_equal_end_offsets = sink.read_marks(tps) == ends and sum(ends.values()) == run.records
        offsets = {tp: (om.offset if om is not None else None) for tp, om in committed.items()}
        run.committed_equal_end_offsets = offsets == ends
        if not run.committed_equal_end_offsets:
            run.steps.append(f"committed {offsets} != end offsets {ends}")
    finally:
        close = getattr(sink, "close", None)
        if close is not None:
            close()


# ============================================================================================ CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``handoff bench faults``'s ``--pipeline`` options."""
    parser.add_argument(
        "--pipeline",
        action="store_true",
        help="instead: the pipeline (2 workers, local Spark) under randomized broker kills and leader moves "
        "(a soak); output exactly once, marks and committed offsets at the end offsets",
    )
    parser.add_argument("--rounds", type=int, default=8, help="--pipeline: faults per run (default 8)")
    parser.add_argument("--chunk", type=int, default=6000, help="--pipeline: records written per fault")
    parser.add_argument("--sinks", default="delta,kafka", help="--pipeline: comma-separated: delta, kafka")
    parser.add_argument("--seed", type=int, default=32, help="--pipeline: random seed of the fault sequence")
    parser.add_argument(
        "--step-timeout", type=float, default=180.0, help="--pipeline: seconds a step may take (a stall)"
    )


def cli(args: argparse.Namespace) -> int:
    """``handoff bench faults --pipeline``: a randomized soak of :func:`run_pipeline_faults` on a fresh
    3-node cluster, per protocol and sink; exit 1 when a run broke a guarantee."""
    from kafka_handoff import devbroker
    from kafka_handoff.pipeline.config import SparkConfig
    from kafka_handoff.pipeline.spark import build_session

    rng = random.Random(args.seed)
    protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
    sinks = [s.strip() for s in args.sinks.split(",") if s.strip()]
    if not protocols or not set(protocols) <= {"classic", "consumer"}:
        print(f"handoff: --protocols: {protocols}; allowed values: classic, consumer", file=sys.stderr)
        return 2
    if not sinks or not set(sinks) <= {"delta", "kafka"}:
        print(f"handoff: --sinks: {sinks}; allowed values: delta, kafka", file=sys.stderr)
        return 2
    print("starting a 3-node cluster and Spark ...", flush=True)
    cluster = devbroker.start(nodes=3, overrides=FAULT_BROKER_OVERRIDES)
    spark = build_session(SparkConfig(app_name="handoff-bench-pipeline-faults"))
    bad = 0
    runs: list[PipelineFaultRun] = []
    try:
        for protocol in protocols:
            for sink in sinks:
                faults = [rng.choice(PIPELINE_FAULTS) for _ in range(args.rounds)]
                print(f"-- {protocol}/{sink}: {', '.join(faults)}", flush=True)
                with tempfile.TemporaryDirectory(prefix="handoff-pipeline-faults-") as tmp:
                    run = run_pipeline_faults(
                        cluster, spark, protocol=protocol, sink_format=sink, workdir=tmp, faults=faults,
                        chunk=args.chunk, seed=rng.randrange(1 << 30), step_timeout=args.step_timeout,
                    )  # fmt: skip
                for line in run.steps:
                    print(f"   {line}")
                print(
                    f"   {run.records} records, {run.output_rows} output rows (expected {run.expected_rows}),"
                    f" missing {run.missing}, extra {run.extra}, mark conflicts {run.mark_conflicts},"
                    f" Kafka commit failures {run.kafka_commit_failures}, {run.elapsed_s:.0f} s"
                )
                for p in run.problems():
                    print(f"   ! {p}")
                bad += bool(run.problems())
                runs.append(run)
    finally:
        spark.stop()
        cluster.stop()
    if getattr(args, "json", ""):
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump([asdict(r) for r in runs], fh, indent=2)
    return 1 if bad else 0
