"""Helpers shared by the security tests: which TCP connections this process holds to a port, and how they
fare across SASL session expiries (KIP-368 re-authentication); reading back keyed records."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from kafka_handoff.consumer import Consumer


def _socket_inodes() -> set[str]:
    inodes: set[str] = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def established_local_ports(remote_port: int) -> set[int]:
    """Local ports of this process's ESTABLISHED TCP (v4) connections to 127.0.0.1:``remote_port``.

    A connection the broker closed (an expired SASL session) disappears from this set; a re-authenticated
    one keeps its local port."""
    mine = _socket_inodes()
    ports: set[int] = set()
    with open("/proc/net/tcp", encoding="ascii") as f:
        next(f)
        for line in f:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if state != "01" or inode not in mine:  # 01 = ESTABLISHED
                continue
            if int(remote.split(":")[1], 16) == remote_port:
                ports.add(int(local.split(":")[1], 16))
    return ports


def connections_across_sessions(
    port: int, session_ms: int, step: Callable[[float], None]
) -> tuple[set[int], set[int]]:
    """Keep the clients working (``step(poll_seconds)``) until their connections to ``port`` are settled
    (unchanged for 10 steps, within half a session lifetime), then for 2.5 session lifetimes; returns the
    local ports before and after.  Re-authenticated connections keep their ports; expired ones, closed by
    the broker, come back on new ones."""
    before, stable = established_local_ports(port), 0
    deadline = time.monotonic() + session_ms / 2000
    while stable < 10 and time.monotonic() < deadline:
        step(0.05)
        now = established_local_ports(port)
        stable = stable + 1 if now == before else 0
        before = now
    assert before, "no connection to the re-authentication listener"
    until = time.monotonic() + 2.5 * session_ms / 1000
    while time.monotonic() < until:
        step(0.1)
    return before, established_local_ports(port)


def consume_keyed(consumer: Consumer, count: int, timeout: float = 60) -> dict[bytes, bytes]:
    """Poll the subscribed ``consumer`` until ``count`` distinct keys arrived (or ``timeout`` seconds
    passed): key -> value of what it read.  Every record must have a key and a value."""
    got: dict[bytes, bytes] = {}
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for record in consumer.poll(0.5):
            assert record.key is not None and record.value is not None
            got[record.key] = record.value
    return got
