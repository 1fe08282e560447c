"""Typed application events and the processor that handles them on the network thread (seed 002).

An application event is a small frozen dataclass: the parameters of one API call plus the
:class:`concurrent.futures.Future` the caller may wait on.  The application thread creates it and puts it on
the network thread's queue; the network thread hands it to the :class:`ApplicationEventProcessor`, whose
dispatch table has one handler per event type.  A handler runs on the network thread and must complete the
event's future, now or later (a request manager may complete it when a response arrives).

A handler changes only state the network thread owns (request managers, the membership, subscription state
under its lock); what the application thread owns (its fetch-buffer collector, its listener state) it
changes itself, from the completed future's result.  No closure crosses the threads except
:class:`RunClosure`, kept for clients that have not moved to typed events and for tests.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["ApplicationEvent", "ApplicationEventProcessor", "RunClosure", "TerminateTelemetryEvent"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplicationEvent:
    """Base of every application event: its future, its deadline (the network thread fails the future with
    a timeout once it passes), and the name used in that timeout's message."""

    future: Future[Any] = field(default_factory=Future, compare=False, repr=False)
    deadline_ms: int | None = None
    name: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class TerminateTelemetryEvent(ApplicationEvent):
    """KIP-714: the terminating telemetry push before close (consumer and producer; each client's processor
    hands it to its telemetry manager)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunClosure(ApplicationEvent):
    """An untyped event: ``fn(now_ms, future)`` on the network thread.  Only for clients without typed
    events yet (admin, share consumer) and for tests; the consumer and the producer use none."""

    fn: Callable[[int, Future[Any]], None]


E = TypeVar("E", bound=ApplicationEvent)


def _run_closure(event: RunClosure, now: int) -> None:
    event.fn(now, event.future)


class ApplicationEventProcessor:
    """The network thread's dispatch table: event type -> handler(event, now_ms)."""

    def __init__(self) -> None:
        self._handlers: dict[type[ApplicationEvent], Callable[[Any, int], None]] = {}
        self.register(RunClosure, _run_closure)

    def register(self, event_type: type[E], handler: Callable[[E, int], None]) -> None:
        """``handler`` handles events of exactly ``event_type`` and completes their future."""
        if event_type in self._handlers and event_type is not RunClosure:
            raise ValueError(f"a handler for {event_type.__name__} is already registered")
        self._handlers[event_type] = handler

    def register_result(self, event_type: type[E], handler: Callable[[E, int], object]) -> None:
        """A handler that completes at once: the future's result is what ``handler`` returns."""

        def complete(event: E, now: int) -> None:
            event.future.set_result(handler(event, now))

        self.register(event_type, complete)

    def handles(self, event_type: type[ApplicationEvent]) -> bool:
        return event_type in self._handlers

    def process(self, event: ApplicationEvent, now: int) -> None:
        """Network thread: run the handler of ``event``'s type."""
        handler = self._handlers.get(type(event))
        if handler is None:
            raise TypeError(f"no handler for application event {type(event).__name__}")
        handler(event, now)
