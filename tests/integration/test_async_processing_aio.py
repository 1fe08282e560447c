"""Issue 17 acceptance: the asyncio worked example (``examples/async_processing_aio.py``, AsyncConsumer) on a
real broker, both group protocols, while a second and a third member join and one leaves.

The scenario and its analysis are those of ``test_async_processing.py`` (its ``Recorder``, ``episodes`` and
``produce`` are reused), smaller: each member is an event loop on its own thread, records are processed by
asyncio tasks, ``on_partitions_revoked`` is an ``async def`` that awaits the final commit on the view.
Checked: every record processed exactly once, committed offsets at the log end, and the partitions not being
revoked keep flowing while a revoke is delayed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import test_async_processing as sync_harness
from test_async_processing import THRESHOLD, Recorder, episodes, wait_until

from kafka_handoff import AsyncConsumer, Consumer
from kafka_handoff.types import ConsumerRecord, TopicPartition

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "async_processing_aio.py"


def _load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("examples_async_processing_aio", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ex = _load_example()

PARTITIONS = sync_harness.PARTITIONS
PER_PARTITION = 700
WORK_MS = 20.0
FINISH_MS = 1000.0
MAX_IN_FLIGHT = 3
MAX_QUEUED = 4
CONSUMER_EXTRA = {"max.poll.records": 10, "max.partition.fetch.bytes": 2048}
MIN_EXPECTED_RECORDS = 20


@dataclass
class Member:
    name: str
    stop: threading.Event
    thread: threading.Thread
    stats: list[Any] = field(default_factory=list)
    error: list[BaseException] = field(default_factory=list)


def start_member(
    name: str, bootstrap: str, group: str, topic: str, protocol: str, recorder: Recorder
) -> Member:
    stop = threading.Event()
    member = Member(name, stop, threading.Thread())
    sink = recorder.sink(name)

    async def process(record: ConsumerRecord) -> None:
        await asyncio.sleep(WORK_MS / 1000.0)

    async def finish(tp: TopicPartition) -> None:
        await asyncio.sleep(FINISH_MS / 1000.0)

    async def main() -> None:
        consumer = AsyncConsumer(
            ex.member_config(bootstrap, group, protocol, client_id=f"{group}-{name}", **CONSUMER_EXTRA)
        )
        processor = ex.AsyncioProcessor(
            consumer,
            [topic],
            process=process,
            sink=sink,
            finish_partition=finish,
            max_in_flight_per_partition=MAX_IN_FLIGHT,
            max_queued_per_partition=MAX_QUEUED,
            on_event=recorder.on_event(name),
        )
        member.stats.append(processor.stats)
        loop_stop = asyncio.Event()

        async def watch() -> None:
            while not stop.is_set():
                await asyncio.sleep(0.05)
            loop_stop.set()

        watcher = asyncio.create_task(watch())
        try:
            await processor.run(loop_stop, drain_timeout_s=60)
        finally:
            watcher.cancel()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by the test thread
            member.error.append(exc)

    member.thread = threading.Thread(target=run, name=f"aio-member-{name}", daemon=True)
    member.thread.start()
    return member


def produce(bootstrap: str, topic: str) -> set[bytes]:
    saved = sync_harness.PER_PARTITION
    sync_harness.PER_PARTITION = PER_PARTITION
    try:
        return sync_harness.produce(bootstrap, topic)
    finally:
        sync_harness.PER_PARTITION = saved


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_asyncio_delayed_revocation_no_duplicates_no_gaps_no_stall(
    broker: Any, topic_factory: Any, protocol: str
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(PARTITIONS)
    keys = produce(bootstrap, topic)
    group = f"aio-{protocol}-{uuid.uuid4().hex[:8]}"
    recorder = Recorder()
    members: list[Member] = []

    def start(name: str) -> Member:
        m = start_member(name, bootstrap, group, topic, protocol, recorder)
        members.append(m)
        return m

    def status() -> str:
        counts = {m.name: recorder.count(m.name) for m in members}
        return f"processed per member {counts}, distinct {recorder.distinct()}/{len(keys)}"

    as_members: Any = members  # wait_until reads .name and .error only
    try:
        a = start("A")
        wait_until(
            lambda: recorder.count("A") >= 700, 60, lambda: f"A to process 700 ({status()})", as_members
        )
        start("B")
        wait_until(
            lambda: recorder.count("B") >= 300 and not recorder.pending_revokes(),
            60,
            lambda: f"B to process 300 and revokes to complete ({status()}, {recorder.pending_revokes()})",
            as_members,
        )
        start("C")
        wait_until(
            lambda: recorder.count("C") >= 300 and not recorder.pending_revokes(),
            60,
            lambda: f"C to process 300 and revokes to complete ({status()}, {recorder.pending_revokes()})",
            as_members,
        )
        a.stop.set()
        a.thread.join(60)
        assert not a.thread.is_alive(), "member A did not leave within 60 s"
        assert not a.error, f"member A failed: {a.error!r}"
        wait_until(
            lambda: recorder.distinct() >= len(keys),
            90,
            lambda: f"every record to be processed ({status()})",
            as_members,
        )
        t_end = time.monotonic()
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.thread.join(60)
    for m in members:
        assert not m.thread.is_alive(), f"member {m.name} did not stop"
        assert not m.error, f"member {m.name} failed: {m.error!r}"

    counts = Counter(key for *_, key in recorder.processed)
    twice = sum(n - 1 for n in counts.values() if n > 1)
    never = len(keys - set(counts))
    checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = checker.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        checker.close()
    short = sum(1 for om in committed.values() if om is None or om.offset != PER_PARTITION)
    eps, skipped = episodes(recorder, t_end)
    expected = sum(e.expected for e in eps)
    inside = sum(e.in_window for e in eps)
    stats = [s for m in members for s in m.stats]
    print(
        f"\nasyncio async-processing ({protocol}): produced {len(keys)}, twice {twice}, never {never}, "
        f"committed short {short}, ratio {inside}/{expected:.1f}, episodes {len(eps)} (+{skipped} skipped), "
        f"delayed polls {sum(s.delayed_polls for s in stats)}"
    )
    assert set(counts) <= keys
    assert twice == 0, f"{twice} records were processed twice"
    assert never == 0, f"{never} records were never processed"
    assert short == 0, f"{short} partitions' committed offset is not the end: {committed}"
    assert sum(s.lost for s in stats) == 0, "no partition should be lost in this scenario"
    assert sum(s.delay_refused for s in stats) == 0
    assert sum(s.delayed_polls for s in stats) > 0, "no revoke was ever delayed"
    assert expected >= MIN_EXPECTED_RECORDS, f"revoke windows too short to measure ({eps})"
    ratio = inside / expected
    assert ratio >= THRESHOLD, (
        f"unaffected partitions processed {ratio:.0%} of their steady-state rate while revokes were delayed "
        f"(episodes: {eps})"
    )
