"""The background network thread and the two event queues (seed 002's threading model).

The application thread never touches a socket.  It submits *application events* -- typed frozen
dataclasses (:mod:`kafka_handoff.network.events`), each with a :class:`concurrent.futures.Future` for its
result -- and waits on the future when the API call blocks.  The network thread loops:

1. drain the application event queue (the :class:`ApplicationEventProcessor` handles each event);
2. poll every request manager and hand their unsent requests to the :class:`NetworkClient`;
3. ``select()`` for at most the smallest wait any manager asked for (capped), then read/write and dispatch
   responses to the managers' handlers;
4. fail events whose deadline passed (the reaper).

Anything that goes wrong on the network thread is caught, kept, and delivered on the *background event
queue* to the application thread, whose next API call raises it: the thread never dies silently.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from kafka_handoff.clock import Clock
from kafka_handoff.errors import KafkaError, KafkaTimeoutError
from kafka_handoff.network.client import NetworkClient
from kafka_handoff.network.events import ApplicationEvent, ApplicationEventProcessor, RunClosure
from kafka_handoff.protocol.requests import MAX_POLL_WAIT_MS, RequestManager

__all__ = ["ApplicationEvent", "BackgroundError", "NetworkThread"]

log = logging.getLogger(__name__)

_AUTH_LOG_INTERVAL_MS = 30_000

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BackgroundError:
    """An error raised on the network thread, delivered to the application thread."""

    error: BaseException
    fatal: bool = False


class NetworkThread:
    def __init__(
        self,
        client: NetworkClient,
        managers: Sequence[RequestManager],
        clock: Clock,
        *,
        name: str = "kafka-handoff-network",
        background_events: queue.SimpleQueue[Any] | None = None,
        on_close: Callable[[int], bool] | None = None,
        processor: ApplicationEventProcessor | None = None,
    ) -> None:
        self.client = client
        self.managers = list(managers)
        self.clock = clock
        self.background_events: queue.SimpleQueue[Any] = background_events or queue.SimpleQueue()
        self.processor = processor or ApplicationEventProcessor()
        self._events: queue.SimpleQueue[ApplicationEvent] = queue.SimpleQueue()
        self._pending: list[ApplicationEvent] = []
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._closing = threading.Event()
        self._close_deadline_ms = 0
        self._on_close = on_close
        self._stopped = threading.Event()
        self.stopped: Future[None] = Future()
        """Completed once the thread has stopped (after its network client was closed)."""
        self.fatal_error: BaseException | None = None
        self._after_poll: list[Callable[[int], None]] = []
        self._auth_logged: dict[str, int] = {}

    # ------------------------------------------------------------------ application-thread side
    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, event: ApplicationEvent) -> Future[Any]:
        if self._stopped.is_set():
            event.future.set_exception(self.fatal_error or KafkaError("the network thread has stopped"))
            return event.future
        self._events.put(event)
        self.client.wakeup()
        return event.future

    def call(
        self,
        fn: Callable[[int, Future[Any]], None],
        *,
        deadline_ms: int | None = None,
        name: str = "",
    ) -> Future[Any]:
        """An untyped event (:class:`RunClosure`): for clients without typed events yet, and tests."""
        return self.submit(RunClosure(fn=fn, deadline_ms=deadline_ms, name=name))

    def call_sync(self, fn: Callable[[int], T], timeout_s: float | None = None) -> T:
        """Run ``fn(now_ms)`` on the network thread and return its result (for quick state reads/writes)."""

        def run(now: int, fut: Future[Any]) -> None:
            fut.set_result(fn(now))

        result: T = self.call(run, name=getattr(fn, "__name__", "")).result(timeout_s)
        return result

    def wakeup(self) -> None:
        self.client.wakeup()

    def add_after_poll(self, hook: Callable[[int], None]) -> None:
        """A hook run on the network thread after every network poll (e.g. drain membership events)."""
        self._after_poll.append(hook)

    def close(self, timeout_ms: int) -> None:
        """Let managers finish (``on_close`` returns True when done) for up to ``timeout_ms``, then stop."""
        self.begin_close(timeout_ms)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(max(0.0, timeout_ms / 1000.0) + 2.0)

    def begin_close(self, timeout_ms: int) -> None:
        """:meth:`close` without waiting: :attr:`stopped` completes once the thread has stopped (the
        asyncio clients await it); a caller waits about ``timeout_ms`` + 2 s for it, as close() does."""
        self._close_deadline_ms = self.clock.now_ms() + max(0, timeout_ms)
        self._closing.set()
        self.client.wakeup()

    # ------------------------------------------------------------------ network-thread side
    def _run(self) -> None:
        try:
            while True:
                now = self.clock.now_ms()
                if self._closing.is_set():
                    done = True
                    if self._on_close is not None:
                        try:
                            done = self._on_close(now)
                        except Exception as exc:
                            self._report(exc)
                            done = True
                    if done or now >= self._close_deadline_ms:
                        break
                self._run_once(now)
        except BaseException as exc:
            log.exception("network thread failed")
            self.fatal_error = exc
            self.background_events.put(BackgroundError(exc, fatal=True))
        finally:
            self._stopped.set()
            self._fail_events(self.fatal_error or KafkaError("the client is closed"))
            try:
                self.client.close()
            except Exception:
                log.debug("error closing network client", exc_info=True)
            if not self.stopped.done():
                self.stopped.set_result(None)

    def _run_once(self, now: int) -> None:
        self._drain_events(now)
        wait = MAX_POLL_WAIT_MS
        for manager in self.managers:
            try:
                result = manager.poll(now)
            except Exception as exc:
                self._report(exc)
                continue
            wait = min(wait, max(0, result.wait_ms))
            for request in result.unsent:
                self.client.send(request, now)
        if self._closing.is_set():
            wait = min(wait, 50)
        if not self._events.empty():
            wait = 0
        for event in self._pending:
            if event.deadline_ms is not None:
                wait = min(wait, max(0, event.deadline_ms - now))
        try:
            self.client.poll(wait, now, self.clock.now_ms)
        except Exception as exc:
            self._report(exc)
        for auth_error in self.client.take_auth_errors():
            # Authentication/TLS failures: the application's next call raises them.  Logged without a
            # traceback, and the same message at most every 30 s (reconnects repeat it every second).
            text = str(auth_error)
            if now - self._auth_logged.get(text, -(1 << 62)) >= _AUTH_LOG_INTERVAL_MS:
                self._auth_logged[text] = now
                log.error("%s", text)
            self.background_events.put(BackgroundError(auth_error))
        now = self.clock.now_ms()
        for hook in self._after_poll:
            try:
                hook(now)
            except Exception as exc:
                self._report(exc)
        self._reap(now)

    def _drain_events(self, now: int) -> None:
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            if event.future.done():
                continue
            try:
                self.processor.process(event, now)
            except BaseException as exc:
                if not event.future.done():
                    event.future.set_exception(exc)
                continue
            if not event.future.done() and event.deadline_ms is not None:
                self._pending.append(event)

    def _reap(self, now: int) -> None:
        if not self._pending:
            return
        keep: list[ApplicationEvent] = []
        for event in self._pending:
            if event.future.done():
                continue
            if event.deadline_ms is not None and event.deadline_ms <= now:
                event.future.set_exception(
                    KafkaTimeoutError(f"{event.name or type(event).__name__} timed out")
                )
                continue
            keep.append(event)
        self._pending = keep

    def _fail_events(self, error: BaseException) -> None:
        for event in self._pending:
            if not event.future.done():
                event.future.set_exception(error)
        self._pending = []
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            if not event.future.done():
                event.future.set_exception(error)

    def _report(self, exc: BaseException) -> None:
        log.error("error on the network thread: %r", exc, exc_info=exc)
        self.background_events.put(BackgroundError(exc))
