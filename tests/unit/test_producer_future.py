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
    RecordFuture,
    complete_all,
    complete_exception,
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
