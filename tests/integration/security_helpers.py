"""Helpers shared by the security tests: which TCP connections this process holds to a port."""

from __future__ import annotations

import os


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
