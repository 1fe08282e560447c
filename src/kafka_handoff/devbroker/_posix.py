"""The dev broker's POSIX-only pieces in one place.

The dev broker runs Kafka's JVMs the POSIX way: each in its own session (``start_new_session``), watched by
a supervisor that sets ``PR_SET_PDEATHSIG`` on Linux, stopped, paused and resumed with ``SIGTERM``,
``SIGKILL``, ``SIGSTOP`` and ``SIGCONT``, and the shared jar and CDS caches are guarded by ``fcntl`` locks.
None of that exists on Windows, so :func:`require_posix` fails early there with a message that says what to
do instead, and ``fcntl`` is imported only when a lock is taken: importing :mod:`kafka_handoff.devbroker`
(the CLI and the benchmarks do) works everywhere.  The client itself needs none of this.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Final

__all__ = ["POSIX", "UnsupportedPlatformError", "lock", "require_posix", "unlock"]

#: Whether this system has what the dev broker needs (process sessions, POSIX signals, ``fcntl`` locks).
POSIX: Final = os.name == "posix"


class UnsupportedPlatformError(RuntimeError):
    """The dev broker was asked to run on a system without the POSIX process and signal model it uses."""


def require_posix(what: str) -> None:
    """Raise :class:`UnsupportedPlatformError` naming ``what`` when this system is not POSIX."""
    if not POSIX:
        raise UnsupportedPlatformError(
            f"{what} needs a POSIX system (Linux or macOS); this one is {sys.platform!r}. Run it under WSL "
            "or in a container, or start Kafka yourself and point the clients (HANDOFF_BOOTSTRAP for the "
            "tests) at it"
        )


def lock(file: IO[bytes], *, wait: bool = True) -> bool:
    """Take an exclusive ``flock`` on ``file``; False when ``wait`` is False and another process holds it."""
    require_posix("the dev broker's cache lock")
    import fcntl

    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def unlock(file: IO[bytes]) -> None:
    """Release the lock :func:`lock` took."""
    import fcntl

    fcntl.flock(file.fileno(), fcntl.LOCK_UN)
