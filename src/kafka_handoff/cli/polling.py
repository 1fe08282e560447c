"""The poll loop of ``handoff consume``, shared by its plain and share-group modes.

:mod:`kafka_handoff.cli.consume` (plain consumers) and :mod:`kafka_handoff.cli.share_groups` (``handoff
consume --share-group``) both import this module; neither imports the other's loop.
"""

from __future__ import annotations

import argparse
import signal
import time
from collections.abc import Callable
from typing import Any

__all__ = ["poll_records", "stop_on_signals"]


def stop_on_signals(wakeup: Callable[[], None]) -> dict[str, bool]:
    """SIGTERM/SIGINT set the returned ``{"flag": ...}`` and wake the consumer's blocking poll."""
    stop = {"flag": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["flag"] = True
        wakeup()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def poll_records(
    consumer: Any, args: argparse.Namespace, stop: dict[str, bool], emit: Callable[[Any], None], start: float
) -> tuple[int, int, float]:
    """The poll loop of ``handoff consume`` (plain and share groups): ``emit`` every record until a signal,
    ``--idle-timeout`` seconds without records or ``--max-records``.  Returns the records and value bytes
    consumed and when the first record came (``start``, when none came)."""
    from kafka_handoff.errors import WakeupError

    count = 0
    nbytes = 0
    first: float | None = None
    last_record = start  # the idle timeout counts from the start, subscribing included
    while not stop["flag"]:
        try:
            records = consumer.poll(0.5)
        except WakeupError:
            break
        if not records:
            if args.idle_timeout and time.monotonic() - last_record > args.idle_timeout:
                break
            continue
        last_record = time.monotonic()
        if first is None:
            first = last_record
        for r in records:
            count += 1
            nbytes += len(r.value or b"")
            emit(r)
            if args.max_records and count >= args.max_records:
                stop["flag"] = True
                break
    return count, nbytes, start if first is None else first
