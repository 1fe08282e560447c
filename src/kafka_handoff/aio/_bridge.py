"""The bridge between the network thread's futures and one asyncio event loop.

The synchronous facades wait on :class:`concurrent.futures.Future` objects that the network thread
completes.  Here a completion hook (``add_done_callback``, run on the completing thread) hands the outcome to
the event loop with ``loop.call_soon_threadsafe``: no thread waits, no thread pool.

:class:`LoopBridge` also pins a client to the loop it was created on: every coroutine of the client first
checks that it runs on that loop (and so on that loop's thread), and raises :class:`WrongEventLoopError`
otherwise -- a client never touches a loop it was not created on.

:class:`BlockingWorker` is the one place where a client's *blocking* steps run off the loop: one thread per
consumer, started on first use, which runs the consumer's rebalance phase (its callbacks, the auto-commit
before a revoke) and leaving its group (``unsubscribe()``, ``close()`` of a subscribed member), one at a
time, while the loop awaits the outcome.  Every other call of the asyncio clients completes natively.
User code those steps meet (rebalance callbacks) is sent back to the loop
(:meth:`BlockingWorker.run_on_loop`); while it runs there, the worker serves the blocking calls it makes
(``await view.commit_sync()``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import queue
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from kafka_handoff.errors import IllegalStateError

if TYPE_CHECKING:
    from kafka_handoff.network.thread import NetworkThread

__all__ = ["BlockingWorker", "LoopBridge", "WrongEventLoopError"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class WrongEventLoopError(IllegalStateError):
    """An asyncio client was used outside the event loop it was created on (another loop or thread, or no
    running loop)."""


def _settle(target: asyncio.Future[Any], result: Any, error: BaseException | None, cancelled: bool) -> None:
    """On the loop: complete ``target`` (unless the awaiting side gave up)."""
    if target.done():
        return
    if cancelled:
        target.cancel()
    elif error is not None:
        target.set_exception(error)
    else:
        target.set_result(result)


def _outcome(source: Future[Any]) -> tuple[Any, BaseException | None, bool]:
    if source.cancelled():
        return None, None, True
    error = source.exception()
    return (None if error is not None else source.result()), error, False


class LoopBridge:
    """The event loop (and its thread) a client belongs to."""

    __slots__ = ("_lock", "_ready", "_scheduled", "loop", "owner", "thread_id")

    def __init__(self, owner: str) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise WrongEventLoopError(
                f"{owner} must be created inside a running asyncio event loop (in a coroutine); it belongs "
                "to that loop from then on"
            ) from None
        self.loop = loop
        self.owner = owner
        self.thread_id = threading.get_ident()
        # Completions waiting for the loop, handed over in bulk: one call_soon_threadsafe (one write to the
        # loop's self-pipe) per burst, not per future -- a producer completes thousands of futures at once.
        self._ready: collections.deque[tuple[asyncio.Future[Any], Any, BaseException | None, bool]] = (
            collections.deque()
        )
        self._scheduled = False
        self._lock = threading.Lock()

    def check(self) -> None:
        """Raise :class:`WrongEventLoopError` unless called on the client's loop, inside a coroutine."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not self.loop:
            where = "no running event loop" if running is None else f"event loop {running!r}"
            raise WrongEventLoopError(
                f"{self.owner} was created on event loop {self.loop!r} and can only be used from it "
                f"(called from {where}, thread {threading.current_thread().name!r}); create one client "
                "per event loop"
            )

    def on_loop_thread(self) -> bool:
        return threading.get_ident() == self.thread_id

    def wrap(self, future: Future[T]) -> asyncio.Future[T]:
        """An asyncio future (on this loop) that completes when ``future`` does.

        Cancelling the asyncio future does not cancel ``future`` (the network thread owns it); its outcome
        is then dropped.
        """
        target: asyncio.Future[T] = self.loop.create_future()

        def done(source: Future[T]) -> None:
            self.resolve(target, *_outcome(source))

        future.add_done_callback(done)
        return target

    def resolve(
        self, target: asyncio.Future[Any], result: Any, error: BaseException | None, cancelled: bool = False
    ) -> None:
        """Complete ``target`` (a future of this loop) from any thread: at once on the loop's thread (after
        the outcomes other threads handed over before it: none is overtaken), else through the next bulk
        delivery."""
        if threading.get_ident() == self.thread_id:
            if self._ready:
                self.deliver_now()
            _settle(target, result, error, cancelled)
            return
        self._ready.append((target, result, error, cancelled))
        with self._lock:
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:  # the loop was closed meanwhile: nobody awaits the outcome any more
            log.debug("event loop closed before a result could be delivered")

    def _deliver(self) -> None:
        """On the loop: complete every asyncio future whose outcome arrived since the last delivery."""
        with self._lock:
            self._scheduled = False  # outcomes from now on schedule another delivery
        self.deliver_now()

    def deliver_now(self) -> None:
        """On the loop's thread: complete now, in the order they arrived, the asyncio futures whose outcomes
        other threads already handed over (the delivery they scheduled finds nothing left).  For a call
        that learnt from thread-side state that outcomes exist (a batch marked done after its callbacks
        ran) and must not return before their futures are done."""
        ready = self._ready
        while ready:
            _settle(*ready.popleft())

    async def wait_stopped(self, thread: NetworkThread, timeout_s: float) -> None:
        """Await the end of a client's network thread (after ``thread.begin_close``) for up to ``timeout_s``,
        as ``NetworkThread.close`` joins it: past that the thread is left to stop on its own."""
        if not thread.alive:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.wrap(thread.stopped)), max(0.0, timeout_s))

    async def wait_future(self, future: Future[Any], timeout_s: float) -> bool:
        """Await ``future`` for up to ``timeout_s`` (its outcome is not raised); False if it is not done by
        then."""
        try:
            await asyncio.wait_for(asyncio.shield(self.wrap(future)), max(0.0, timeout_s))
        except TimeoutError:
            if not future.done():
                return False
        except asyncio.CancelledError:
            if not future.cancelled():  # the awaiting task was cancelled, not the future
                raise
        except Exception:
            pass
        return True

    def signal(self, event: asyncio.Event) -> None:
        """Set ``event`` from any thread (a wake-up for a coroutine waiting on it)."""
        if threading.get_ident() == self.thread_id:
            event.set()
            return
        with contextlib.suppress(RuntimeError):  # the loop was closed
            self.loop.call_soon_threadsafe(event.set)


_STOP = object()


class _LoopDone:
    __slots__ = ("error", "result")

    def __init__(self, result: Any, error: BaseException | None) -> None:
        self.result = result
        self.error = error


class BlockingWorker:
    """One thread that runs a client's blocking steps, one at a time, while the event loop awaits them."""

    def __init__(self, bridge: LoopBridge, name: str) -> None:
        self._bridge = bridge
        self._name = name
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- loop side
    def submit(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        """Run ``fn()`` on the worker; an asyncio future of its outcome (call on the loop)."""
        future: Future[T] = Future()
        self._ensure_started()
        self._jobs.put((fn, future))
        return self._bridge.wrap(future)

    def stop(self) -> None:
        with self._lock:
            if self._thread is not None:
                self._jobs.put(_STOP)

    @property
    def on_worker(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def _ensure_started(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    # ---------------------------------------------------------------- worker side
    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            if isinstance(job, _LoopDone):  # a stale completion (its waiter gave up): nothing to do
                continue
            self._execute(job)

    @staticmethod
    def _execute(job: tuple[Callable[[], Any], Future[Any]]) -> None:
        fn, future = job
        if not future.set_running_or_notify_cancel():
            return
        try:
            result = fn()
        except BaseException as exc:
            future.set_exception(exc)
        else:
            future.set_result(result)

    def run_on_loop(self, make: Callable[[], Awaitable[T]]) -> T:
        """On the worker: run ``await make()`` on the event loop and wait for it, meanwhile running the jobs
        it submits (the blocking calls of a callback's consumer view).  Raises what the coroutine raised."""
        if not self.on_worker:
            raise IllegalStateError("run_on_loop() must be called on the client's worker thread")
        jobs = self._jobs

        async def runner() -> None:
            try:
                result = await make()
            except BaseException as exc:
                jobs.put(_LoopDone(None, exc))
                if not isinstance(exc, Exception):
                    raise
            else:
                jobs.put(_LoopDone(result, None))

        def start() -> None:
            self._bridge.loop.create_task(runner())

        try:
            self._bridge.loop.call_soon_threadsafe(start)
        except RuntimeError as exc:
            raise IllegalStateError("the event loop is closed: cannot run a rebalance callback") from exc
        stopping = False
        try:
            while True:
                job = jobs.get()
                if isinstance(job, _LoopDone):
                    if job.error is not None:
                        raise job.error
                    result: T = job.result
                    return result
                if job is _STOP:
                    stopping = True  # for the main loop, once this callback returned
                    continue
                self._execute(job)
        finally:
            if stopping:
                jobs.put(_STOP)
