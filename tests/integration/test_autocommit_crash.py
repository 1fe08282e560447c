"""Auto-commit is at-least-once across a crash (issue 14 item 1), against the real broker.

A child process consumes with auto-commit every 100 ms.  It processes its first batch at once, then gets
a second batch and "processes" it until the test kills it (it waits for a line on its stdin that never
comes).  The test SIGKILLs it in the middle of that -- once the first batch was committed, and after 10
more auto-commit intervals -- and starts a new member of the same group: it must start exactly at the
killed member's in-hand batch and receive all of it.

Before the fix the timer committed the positions as soon as ``poll()`` handed records out, so the killed
member had already committed the batch it never finished, and the new member started after it.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from kafka_handoff.admin import AdminClient
from kafka_handoff.consumer import Consumer
from kafka_handoff.producer import Producer
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.integration

RECORDS = 400
BATCH = 200
INTERVALS_S = 1.0  # 10 auto-commit intervals the timer gets to commit the in-hand batch (it must not)

CHILD = r"""
import sys, time
from kafka_handoff.consumer import Consumer

bootstrap, topic, group, protocol = sys.argv[1:5]
config = {
    "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
    "auto.offset.reset": "earliest", "enable.auto.commit": True, "auto.commit.interval.ms": 100,
    "max.poll.records": BATCH,
}
if protocol == "classic":
    config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
consumer = Consumer(config)
consumer.subscribe([topic])
batches = 0
while True:
    records = consumer.poll(0.5)
    if not records:
        continue
    offsets = [r.offset for r in records]
    batches += 1
    if batches == 1:
        print(f"PROCESSED {offsets[0]} {offsets[-1]}", flush=True)  # processed at once
        continue
    print(f"PROCESSING {offsets[0]} {offsets[-1]}", flush=True)
    sys.stdin.readline()  # "processing": the test kills us in here (it never writes a line)
    print("FINISHED", flush=True)
    time.sleep(3600)
""".replace("BATCH", str(BATCH))


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    out: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.put(line.strip())

    threading.Thread(target=pump, daemon=True).start()
    return out


def _await_line(lines: queue.Queue[str], prefix: str, deadline: float) -> str:
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"the child never printed {prefix!r}"
        try:
            line = lines.get(timeout=min(remaining, 0.5))
        except queue.Empty:
            continue
        if line.startswith(prefix):
            return line


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_killed_member_s_unprocessed_batch_is_delivered_again(
    broker: Any, topic_factory: Any, protocol: str
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(partitions=1)
    tp = TopicPartition(topic, 0)
    group = f"autocommit-crash-{topic}"
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(RECORDS):
            producer.send(topic, b"v%d" % i, partition=0)
        producer.flush(30)

    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, bootstrap, topic, group, protocol],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        lines = _lines(proc)
        deadline = time.monotonic() + 90
        first_done = _await_line(lines, "PROCESSED", deadline)
        processing = _await_line(lines, "PROCESSING", deadline)
        in_hand_first, in_hand_last = (int(x) for x in processing.split()[1:3])
        assert int(first_done.split()[2]) + 1 == in_hand_first
        # The first batch was processed (the child polled again): the timer commits it.  Wait for that,
        # give the timer 10 more intervals in which it must not commit the in-hand batch, then kill.
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            while True:
                committed = admin.list_group_offsets(group, [tp], timeout=10).get(tp)
                if committed is not None and committed.offset >= in_hand_first:
                    break
                assert time.monotonic() < deadline, "the first batch was never auto-committed"
                time.sleep(0.05)
        time.sleep(INTERVALS_S)  # (a negative check: the wrong commit would happen meanwhile)
        assert proc.poll() is None and lines.empty(), "the child finished processing before it was killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            committed = admin.list_group_offsets(group, [tp], timeout=10).get(tp)
        assert committed is not None and committed.offset == in_hand_first, (
            f"the killed member committed {committed}, but it had processed only up to {in_hand_first - 1} "
            f"(batch {in_hand_first}-{in_hand_last} was still in its hands)"
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    with Consumer(config) as consumer:
        consumer.subscribe([topic])
        seen: list[int] = []
        deadline = time.monotonic() + 60
        while not seen or seen[-1] < in_hand_last:
            assert time.monotonic() < deadline, f"the new member received only {seen[:3]}...{seen[-3:]}"
            seen.extend(r.offset for r in consumer.poll(0.5))
    assert seen[0] == in_hand_first, (
        f"the new member started at {seen[0]}, but the killed member never finished {in_hand_first}-"
        f"{in_hand_last}"
    )
    assert seen[: in_hand_last - in_hand_first + 1] == list(range(in_hand_first, in_hand_last + 1))
