"""A cheaper :class:`concurrent.futures.Future` for the one-future-per-record API of ``send()``.

A standard ``Future`` builds a ``threading.Condition`` (and its ``RLock``) in its constructor and takes it
to complete: about half of the per-record cost of ``send()`` plus completion.  Most record futures are never
waited on individually (callers flush, or wait on a few).  :class:`RecordFuture` is a real ``Future``
subclass whose condition is created only when something needs it -- ``result()``, ``done()``,
``add_done_callback()``, ``concurrent.futures.wait()``, ... all go through ``_condition`` -- and whose
completion skips the condition when none was ever created.

Why that is safe: the condition is created under one module-wide lock, and completion checks for it under
the same lock.  If completion finds no condition, nobody can be waiting or have registered a callback (both
need the condition), and whoever creates it later sees the final state and returns at once.  If the
condition exists, completion takes the ordinary ``Future`` path.

The class relies on CPython's ``Future`` attributes (``_state``, ``_result``, ``_exception``, ``_waiters``,
``_done_callbacks``, ``_condition``), stable since Python 3.2; :data:`AVAILABLE` is False (and the producer
uses plain futures) if a future Python changes them.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from concurrent.futures._base import FINISHED, PENDING
from typing import Any, Final

from kafka_handoff._native import load_extension
from kafka_handoff.types import RecordMetadata

__all__ = [
    "AVAILABLE",
    "RecordFuture",
    "complete_all",
    "complete_exception",
    "complete_lazily",
    "complete_result",
    "new_future",
    "record_metadata",
]

_create_lock = threading.Lock()


_ext: Any = load_extension("kafka_handoff.producer._fastencode")
#: ``untrack(obj)`` / ``track(obj)`` from the optional C extension (None without it): see :func:`new_future`.
untrack: Callable[[object], None] | None = _ext.untrack if _ext is not None else None
track: Callable[[object], None] | None = _ext.track if _ext is not None else None


class RecordFuture(Future[RecordMetadata]):
    """A ``Future[RecordMetadata]`` whose condition variable (and waiter lists) are created lazily.

    All state lives in slots, so a future that nobody waits on is one small object (a plain ``Future`` is
    five: itself, its ``__dict__``, two lists and a condition with its lock): fewer allocations and less work
    for the garbage collector, which matters with hundreds of thousands of records in flight.
    """

    __slots__ = (
        "_callbacks_list",
        "_cond",
        "_exception",
        "_lazy_index",
        "_lazy_timestamp",
        "_state",
        "_value",
        "_waiters_list",
    )

    def __init__(self) -> None:  # deliberately no super().__init__(): no Condition yet
        self._state = PENDING
        self._value: Any = None
        self._exception: BaseException | None = None
        self._cond: threading.Condition | None = None
        self._waiters_list: list[Any] | None = None
        self._callbacks_list: list[Any] | None = None
        self._lazy_index: int | None = None
        self._lazy_timestamp: int | None = None

    # ``Future`` reads and writes ``_result``.  A future completed by :func:`complete_lazy` holds its batch's
    # shared :class:`_LazyResult` plus its index and timestamp; its RecordMetadata is built on first read.
    @property
    def _result(self) -> Any:
        value = self._value
        if type(value) is _LazyResult:
            # Two threads reading at once may both build it: equal tuples, either one is kept.
            value = self._value = value.build(self._lazy_index, self._lazy_timestamp)
        return value

    @_result.setter
    def _result(self, value: Any) -> None:
        self._value = value

    @property
    def _condition(self) -> threading.Condition:  # read by every Future method
        cond = self._cond
        if cond is None:
            with _create_lock:
                cond = self._cond
                if cond is None:
                    if track is not None:
                        track(self)  # from now on it may take part in cycles (waiters, callbacks)
                    cond = self._cond = threading.Condition()
        return cond

    @_condition.setter
    def _condition(self, value: threading.Condition) -> None:
        self._cond = value

    # Future's methods use these lists under the condition; they are created on first use.
    @property
    def _waiters(self) -> list[Any]:
        waiters = self._waiters_list
        if waiters is None:
            waiters = self._waiters_list = []
        return waiters

    @_waiters.setter
    def _waiters(self, value: list[Any]) -> None:
        self._waiters_list = value

    @property
    def _done_callbacks(self) -> list[Any]:
        callbacks = self._callbacks_list
        if callbacks is None:
            callbacks = self._callbacks_list = []
        return callbacks

    @_done_callbacks.setter
    def _done_callbacks(self, value: list[Any]) -> None:
        self._callbacks_list = value

    def _complete_fast(self, result: Any, exception: BaseException | None) -> bool | None:
        """Complete without the condition if none exists; True/False: done (False: was not pending);
        None: a condition exists, use the ordinary path."""
        with _create_lock:
            if self._cond is not None:
                return None
            if self._state != PENDING:
                return False
            self._result = result
            self._exception = exception
            self._state = FINISHED
            return True


class _LazyResult:
    """What one acknowledged batch's futures share until their RecordMetadata is read (see RecordFuture)."""

    __slots__ = ("base_offset", "log_append_ms", "partition", "topic")

    def __init__(self, topic: str, partition: int, base_offset: int, log_append_ms: int) -> None:
        self.topic = topic
        self.partition = partition
        self.base_offset = base_offset
        self.log_append_ms = log_append_ms

    def build(self, index: Any, timestamp: Any) -> RecordMetadata:
        """Record ``index``'s metadata, as :func:`record_metadata` builds it."""
        base = self.base_offset
        append_ms = self.log_append_ms
        new: Any = tuple.__new__
        return new(  # type: ignore[no-any-return]
            RecordMetadata,
            (
                self.topic,
                self.partition,
                base + index if base >= 0 else -1,
                append_ms if append_ms >= 0 else timestamp,
            ),
        )


def _check() -> bool:
    probe: Future[Any] = Future()
    needed = ("_state", "_result", "_exception", "_waiters", "_done_callbacks", "_condition")
    if not all(hasattr(probe, name) for name in needed):
        return False
    try:
        marker = RecordMetadata("", 0, 1, 0)
        f = RecordFuture()
        f._complete_fast(marker, None)
        waited = RecordFuture()
        waited.add_done_callback(lambda _f: None)
        waited.set_result(marker)
        return f.result(0) is marker and f.done() and waited.result(0) is marker
    except Exception:
        return False


AVAILABLE: Final = _check()


def _c_futures() -> Any:
    if _ext is None or not AVAILABLE or not hasattr(_ext, "set_future_type"):
        return None
    _ext.set_future_type(RecordFuture, PENDING, FINISHED)
    return _ext


#: The C extension when it creates and completes RecordFutures (and provides ``SendPath``), else None.
C_FUTURES: Final[Any] = _c_futures()


def _new_untracked() -> Future[RecordMetadata]:
    future = RecordFuture()
    untrack(future)  # type: ignore[misc]
    return future


def _new_plain() -> Future[RecordMetadata]:
    return Future()


def _new_record_future() -> Future[RecordMetadata]:
    return RecordFuture()


new_future: Callable[[], Future[RecordMetadata]] = (
    C_FUTURES.new_future
    if C_FUTURES is not None
    else (_new_untracked if untrack is not None else _new_record_future)
    if AVAILABLE
    else _new_plain
)
"""A future for one record: a :class:`RecordFuture` when possible, out of the cyclic garbage collector's
sight until something waits on it or registers a callback (with the C extension)."""


def complete_result(future: Future[RecordMetadata], metadata: RecordMetadata) -> None:
    """``future.set_result(metadata)``, cheaply when nobody waits; a cancelled future is left alone."""
    if type(future) is RecordFuture:
        outcome = future._complete_fast(metadata, None)
        if outcome is not None:
            return
    try:
        future.set_result(metadata)
    except InvalidStateError:
        pass


def complete_exception(future: Future[RecordMetadata], error: BaseException) -> None:
    if type(future) is RecordFuture:
        outcome = future._complete_fast(None, error)
        if outcome is not None:
            return
    try:
        future.set_exception(error)
    except InvalidStateError:
        pass


def complete_all(
    futures: Sequence[Future[RecordMetadata] | None],
    results: Sequence[RecordMetadata] | None,
    error: BaseException | None = None,
) -> None:
    """Complete many futures: with ``results[i]`` each, or all with ``error``; None items (records sent
    without a future) are skipped.  Futures nobody waits on are completed under one acquisition of the
    creation lock; the others take the ordinary path after."""
    slow: list[int]
    if C_FUTURES is not None and type(futures) is list and (results is None or type(results) is list):
        slow = C_FUTURES.complete_futures(_create_lock, futures, results, error)
    else:
        slow = _complete_fast_all(futures, results, error)
    for i in slow:
        future = futures[i]
        assert future is not None
        try:
            if results is not None:
                future.set_result(results[i])
            else:
                assert error is not None
                future.set_exception(error)
        except InvalidStateError:
            pass


def complete_lazily(
    topic: str, partition: int, base_offset: int, log_append_ms: int, entries: list[Entry]
) -> bool:
    """Complete the futures of an acknowledged batch's ``entries`` (None items: no future) with their
    RecordMetadata built only when read (``result()``, a done callback): the completion thread then makes
    no object per record.  False (nothing done) when an entry has a callback (it needs the metadata now) or
    without the C extension: use :func:`complete_all`."""
    if C_FUTURES is None or not hasattr(C_FUTURES, "complete_lazy"):
        return False
    lazy = _LazyResult(topic, partition, base_offset, log_append_ms)
    slow = C_FUTURES.complete_lazy(_create_lock, entries, lazy)
    if slow is None:
        return False
    for i in slow:
        future = entries[i][4]
        assert future is not None
        try:
            future.set_result(lazy.build(i, entries[i][2]))
        except InvalidStateError:
            pass
    return True


def _complete_fast_all(
    futures: Sequence[Future[RecordMetadata] | None],
    results: Sequence[RecordMetadata] | None,
    error: BaseException | None,
) -> list[int]:
    """:func:`complete_all`'s first step in Python: the indices of the futures it did not complete."""
    slow: list[int] = []
    with _create_lock:
        for i, future in enumerate(futures):
            if type(future) is RecordFuture and future._cond is None:
                if future._state == PENDING:
                    if results is not None:
                        future._result = results[i]
                    else:
                        future._exception = error
                    future._state = FINISHED
            elif future is not None:
                slow.append(i)
    return slow


Entry = tuple[Any, Any, int, Any, Future[RecordMetadata] | None, Any]
FutureEntry = tuple[Any, Any, int, Any, Future[RecordMetadata], Any]


def _py_make_entry(key: Any, value: Any, timestamp: int, headers: Any, callback: Any) -> FutureEntry:
    return (key, value, timestamp, headers, new_future(), callback)


make_entry: Callable[[Any, Any, int, Any, Any], FutureEntry] = (
    functools.partial(_ext.make_entry, C_FUTURES.new_future if C_FUTURES is not None else RecordFuture)
    if _ext is not None and AVAILABLE
    else _py_make_entry
)
"""``(key, value, timestamp, headers, new_future(), callback)``; with the C extension the tuple and the future
are out of the garbage collector's sight (see :func:`new_future`)."""


def _py_make_entry_no_future(key: Any, value: Any, timestamp: int, headers: Any, callback: Any) -> Entry:
    return (key, value, timestamp, headers, None, callback)


make_entry_no_future: Callable[[Any, Any, int, Any, Any], Entry] = (
    functools.partial(_ext.make_entry, None) if _ext is not None else _py_make_entry_no_future
)
"""``(key, value, timestamp, headers, None, callback)`` (``Producer.send_nowait``); untracked with the C
extension."""


def _py_record_metadata(
    md_type: type[RecordMetadata],
    topic: str,
    partition: int,
    base_offset: int,
    log_append_ms: int,
    entries: Sequence[Entry],
) -> list[RecordMetadata]:
    new: Any = tuple.__new__  # RecordMetadata(...) runs a Python-level __new__; this builds it in C
    if base_offset >= 0 and log_append_ms >= 0:
        return [new(md_type, (topic, partition, base_offset + i, log_append_ms)) for i in range(len(entries))]
    if base_offset >= 0:
        return [new(md_type, (topic, partition, base_offset + i, e[2])) for i, e in enumerate(entries)]
    if log_append_ms >= 0:
        return [new(md_type, (topic, partition, -1, log_append_ms)) for _ in entries]
    return [new(md_type, (topic, partition, -1, e[2])) for e in entries]


record_metadata: Callable[
    [type[RecordMetadata], str, int, int, int, Sequence[Entry]], list[RecordMetadata]
] = _ext.record_metadata if _ext is not None and hasattr(_ext, "record_metadata") else _py_record_metadata
"""``record_metadata(RecordMetadata, topic, partition, base_offset, log_append_ms, entries)``: one batch's
results (offset ``base_offset + i`` or -1; the log append time when >= 0, else each record's timestamp); with
the C extension built in one call and out of the garbage collector's sight (a tuple of a str and ints cannot
be part of a cycle), which keeps a million results from triggering collections."""
