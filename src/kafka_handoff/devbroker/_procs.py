"""Process helpers for the dev broker's processes (Linux /proc; plain ``kill(pid, 0)`` elsewhere)."""

from __future__ import annotations

import os

__all__ = ["pid_alive", "process_args"]


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
    return state not in (b"Z", b"X", b"x")


def process_args(pid: int) -> list[bytes] | None:
    """The command line of a live ``pid``; ``[]`` when it is gone, ``None`` when it cannot be read (no
    /proc: the caller trusts the pid)."""
    if not pid_alive(pid):
        return []
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except FileNotFoundError:
        return []
    except OSError:
        return None
