"""The in-order commit position of a partition whose records are processed concurrently.

:class:`OffsetTracker` is the in-order commit part of the asynchronous-processing pattern
(docs/async-processing.md, ``examples/async_processing.py``): records of a partition are handed to a pool in
offset order and finish in any order; the offset to commit is one past the longest finished prefix, so a
commit never skips a record that is still running.  ``handoff bench rebalance`` measures the same class.
Thread-safe (one lock per partition); pure otherwise (no I/O, no clock).
"""

from __future__ import annotations

import threading
from collections import deque

__all__ = ["OffsetTracker"]


class OffsetTracker:
    """The in-order commit position of one partition, fed by out-of-order completions.

    ``started(offset)`` in offset order (as records are handed to the pool), ``finished(offset)`` from any
    thread as each one completes.  :attr:`committable` is one past the longest finished prefix of the
    started offsets: committing it never skips a record that is still running, however the completions
    are ordered.  Offsets need not be contiguous (compaction, transaction markers).
    """

    __slots__ = ("_committable", "_done", "_last_started", "_lock", "_open", "_order")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._order: deque[int] = deque()  # started and not yet part of the committed prefix
        self._open: set[int] = set()  # started, not finished
        self._done: set[int] = set()  # finished, waiting for an earlier offset
        self._last_started = -1
        self._committable: int | None = None

    def started(self, offset: int) -> None:
        """Record that processing of ``offset`` starts; offsets must be started in increasing order."""
        with self._lock:
            if offset <= self._last_started:
                raise ValueError(
                    f"offsets must be started in increasing order: {offset} after {self._last_started}"
                )
            self._last_started = offset
            self._order.append(offset)
            self._open.add(offset)

    def finished(self, offset: int) -> bool:
        """Record that ``offset`` is done; True if that advanced :attr:`committable`."""
        with self._lock:
            if offset not in self._open:
                raise ValueError(f"offset {offset} was not started, or was finished already")
            self._open.discard(offset)
            self._done.add(offset)
            advanced = False
            while self._order and self._order[0] in self._done:
                first = self._order.popleft()
                self._done.discard(first)
                self._committable = first + 1
                advanced = True
            return advanced

    @property
    def committable(self) -> int | None:
        """The offset to commit (the next record to process), or None while nothing has finished."""
        with self._lock:
            return self._committable

    @property
    def in_flight(self) -> int:
        """How many started records have not finished."""
        with self._lock:
            return len(self._open)
