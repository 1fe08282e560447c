"""RecordFuture: a Future whose condition is created lazily must behave exactly like a Future."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from concurrent.futures import FIRST_COMPLETED, Future, as_completed, wait

import pytest

from kafka_handoff.producer.future import (
    AVAILABLE,
    C_FUTURES,
    Entry,
    RecordFuture,
    _LazyResult,
    _py_record_metadata,
    complete_all,
    complete_exception,
    complete_lazily,
    complete_result,
    new_future,
    untrack,
)
from kafka_handoff.types import RecordMetadata

pytestmark = pytest.mark.unit

MD = RecordMetadata("t", 0, 5, 123)


def test_available_on_this_python() -> None:
    assert AVAILABLE
    assert isinstance(new_future(), RecordFuture)
    assert isinstance(new_future(), Future)


def test_completed_without_waiters_skips_the_condition() -> None:
    f = RecordFuture()
    complete_result(f, MD)
    assert f._cond is None
    assert f._waiters_list is None and f._callbacks_list is None
    assert not hasattr(f, "__dict__") or not f.__dict__
    assert f.done() and f.result(0) is MD and f.exception(0) is None


def test_waiter_in_another_thread_is_woken() -> None:
    f = RecordFuture()
    started = threading.Event()
    got: list[RecordMetadata] = []

    def waiter() -> None:
        started.set()
        got.append(f.result(10))

    t = threading.Thread(target=waiter)
    t.start()
    assert started.wait(5)
    # Wait until the waiter created the condition (it is blocked in result()).
    for _ in range(1000):
        if f._cond is not None:
            break
        threading.Event().wait(0.001)
    complete_result(f, MD)
    t.join(10)
    assert got == [MD]


def test_done_callbacks_before_and_after_completion() -> None:
    f = RecordFuture()
    calls: list[object] = []
    f.add_done_callback(lambda x: calls.append(("before", x.result())))
    complete_result(f, MD)
    f.add_done_callback(lambda x: calls.append(("after", x.result())))
    assert calls == [("before", MD), ("after", MD)]


def test_exception_and_cancel() -> None:
    f = RecordFuture()
    error = ValueError("boom")
    complete_exception(f, error)
    assert f.exception(0) is error
    with pytest.raises(ValueError):
        f.result(0)
    g = RecordFuture()
    assert g.cancel()
    complete_result(g, MD)  # ignored: already cancelled
    assert g.cancelled()


def test_wait_and_as_completed() -> None:
    futures = [RecordFuture() for _ in range(4)]
    timer = threading.Timer(0.05, lambda: complete_all(futures, [MD] * 4))
    timer.start()
    done, not_done = wait(futures, timeout=10, return_when=FIRST_COMPLETED)
    assert done and len(done) + len(not_done) == 4
    assert [f.result() for f in as_completed(futures, timeout=10)] == [MD] * 4
    timer.join()


def test_complete_all_mixes_fast_and_slow_paths() -> None:
    plain: Future[RecordMetadata] = Future()
    watched = RecordFuture()
    watched.done()  # creates the condition
    fast = RecordFuture()
    cancelled = RecordFuture()
    cancelled.cancel()
    results = [RecordMetadata("t", 0, i, 0) for i in range(4)]
    complete_all([plain, watched, fast, cancelled], results)
    assert [plain.result(0).offset, watched.result(0).offset, fast.result(0).offset] == [0, 1, 2]
    assert cancelled.cancelled()
    errors = [RecordFuture(), RecordFuture()]
    errors[1].done()
    complete_all(errors, None, RuntimeError("x"))
    assert all(isinstance(f.exception(0), RuntimeError) for f in errors)


def test_asyncio_wrap_future() -> None:
    f = RecordFuture()

    async def main() -> RecordMetadata:
        wrapped = asyncio.wrap_future(f)
        asyncio.get_running_loop().call_later(0.01, complete_result, f, MD)
        return await wrapped

    assert asyncio.run(main()) is MD


@pytest.mark.skipif(untrack is None, reason="the C extension is not built")
def test_new_futures_are_untracked_until_someone_waits() -> None:
    f = new_future()
    assert not gc.is_tracked(f)
    complete_result(f, MD)
    assert not gc.is_tracked(f)  # completed with nobody waiting: still untracked
    assert f.result(0) is MD  # result() creates the condition...
    assert gc.is_tracked(f)  # ...and puts the future back under the collector


@pytest.mark.skipif(untrack is None, reason="the C extension is not built")
def test_a_cycle_through_a_done_callback_is_collected() -> None:
    class Holder:
        future: Future[RecordMetadata] | None = None

    f = new_future()
    holder = Holder()
    holder.future = f

    def keep(_f: Future[RecordMetadata], h: Holder = holder) -> None:
        assert h is not None

    f.add_done_callback(keep)  # future -> callback -> holder -> future
    ref = weakref.ref(holder)
    del f, holder, keep
    gc.collect()
    assert ref() is None


@pytest.mark.skipif(C_FUTURES is None, reason="the C extension is not built")
@pytest.mark.parametrize(("base", "append_ms"), [(100, 5000), (100, -1), (-1, 5000), (-1, -1)])
def test_complete_lazily_gives_the_metadata_record_metadata_builds(base: int, append_ms: int) -> None:
    watched = new_future()
    watched.done()  # has a condition: completed the ordinary way
    cancelled = new_future()
    cancelled.cancel()
    plain: Future[RecordMetadata] = Future()
    futures: list[Future[RecordMetadata] | None] = [
        new_future(),
        None,
        watched,
        cancelled,
        plain,
        new_future(),
    ]
    entries: list[Entry] = [(None, b"v", 1000 + i, None, f, None) for i, f in enumerate(futures)]
    expected = _py_record_metadata(RecordMetadata, "t", 3, base, append_ms, entries)
    assert complete_lazily("t", 3, base, append_ms, entries)
    lazy = futures[0]
    # Completed without a condition and without building its metadata (done() would create the condition).
    assert isinstance(lazy, RecordFuture) and lazy._cond is None and type(lazy._value) is _LazyResult
    assert not gc.is_tracked(lazy)
    for i in (0, 2, 4, 5):
        f = futures[i]
        assert f is not None and f.done()
        md = f.result(0)
        assert md == expected[i] and type(md) is RecordMetadata
        assert f.result(0) is md  # built once, then kept
    assert cancelled.cancelled()


@pytest.mark.skipif(C_FUTURES is None, reason="the C extension is not built")
def test_lazily_completed_future_feeds_callbacks_wait_and_asyncio() -> None:
    futures = [new_future() for _ in range(3)]
    entries: list[Entry] = [(None, b"v", 7, None, f, None) for f in futures]
    complete_lazily("t", 1, 40, -1, entries)
    seen: list[RecordMetadata] = []
    futures[0].add_done_callback(lambda f: seen.append(f.result()))
    assert seen == [RecordMetadata("t", 1, 40, 7)]
    done, _ = wait(futures, timeout=0)
    assert len(done) == 3
    assert [f.result() for f in as_completed(futures, timeout=1)] != []
    assert "returned RecordMetadata" in repr(futures[1])

    async def main() -> RecordMetadata:
        return await asyncio.wrap_future(futures[2])

    assert asyncio.run(main()) == RecordMetadata("t", 1, 42, 7)
    # Already complete: a second completion changes nothing.
    complete_lazily("t", 1, 90, -1, entries)
    assert futures[1].result() == RecordMetadata("t", 1, 41, 7)
    complete_result(futures[1], MD)
    assert futures[1].result() == RecordMetadata("t", 1, 41, 7)


@pytest.mark.skipif(C_FUTURES is None, reason="the C extension is not built")
def test_complete_lazily_leaves_a_batch_with_a_callback_alone() -> None:
    f = new_future()
    entries: list[Entry] = [(None, b"v", 7, None, f, None), (None, b"v", 8, None, None, lambda md, e: None)]
    assert not complete_lazily("t", 1, 40, -1, entries)
    assert not f.done()
    assert complete_lazily("t", 1, 40, -1, entries[:1])
    assert f.result(0) == RecordMetadata("t", 1, 40, 7)
