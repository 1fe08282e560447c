"""kafka-python's ``kafka.future.Future`` shape over a ``concurrent.futures.Future``.

``add_callback(f, *args, **kwargs)`` calls ``f(*args, value, **kwargs)`` once the future succeeded;
``add_errback`` likewise with the exception; both return the future, so they chain.  They run on the
thread that completes the future (the producer's completion thread, or at once when the future is done
already) -- kafka-python runs them on its I/O thread.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from concurrent.futures import CancelledError
from concurrent.futures import Future as _CFuture
from concurrent.futures import TimeoutError as _FutureTimeout
from typing import Any, Generic, TypeVar

from kafka_handoff.compat.kafka_python.errors import KafkaTimeoutError

__all__ = ["Future"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class Future(Generic[T]):
    """A result that arrives later: ``get(timeout)``, ``is_done``, ``succeeded()``, ``failed()``,
    ``value``, ``exception``, ``add_callback``, ``add_errback``, ``add_both``."""

    def __init__(self, inner: _CFuture[Any], convert: Callable[[Any], T] | None = None) -> None:
        self._inner = inner
        self._convert = convert

    def _value(self, raw: Any) -> T:
        return self._convert(raw) if self._convert is not None else raw

    @property
    def is_done(self) -> bool:
        return self._inner.done()

    @property
    def value(self) -> T | None:
        if not self._inner.done() or self._inner.exception() is not None:
            return None
        return self._value(self._inner.result())

    @property
    def exception(self) -> BaseException | None:
        if not self._inner.done():
            return None
        try:
            return self._inner.exception()
        except CancelledError as exc:
            return exc

    def succeeded(self) -> bool:
        return self._inner.done() and self.exception is None

    def failed(self) -> bool:
        return self._inner.done() and self.exception is not None

    def retriable(self) -> bool:
        exc = self.exception
        return bool(getattr(exc, "retriable", False))

    def get(self, timeout: float | None = None) -> T:
        """The result, waiting up to ``timeout`` seconds (``None``: as long as it takes); raises the
        failure, or :class:`KafkaTimeoutError` when the wait ran out."""
        try:
            raw = self._inner.result(timeout)
        except _FutureTimeout:
            raise KafkaTimeoutError(f"Timeout after waiting for {timeout} secs.") from None
        return self._value(raw)

    def add_callback(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[T]:
        fn = functools.partial(f, *args, **kwargs) if args or kwargs else f

        def done(inner: _CFuture[Any]) -> None:
            if inner.cancelled() or inner.exception() is not None:
                return
            try:
                fn(self._value(inner.result()))
            except Exception:
                log.exception("error in a future's callback %r", f)

        self._inner.add_done_callback(done)
        return self

    def add_errback(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[T]:
        fn = functools.partial(f, *args, **kwargs) if args or kwargs else f

        def done(inner: _CFuture[Any]) -> None:
            exc = self.exception
            if exc is None:
                return
            try:
                fn(exc)
            except Exception:
                log.exception("error in a future's errback %r", f)

        self._inner.add_done_callback(done)
        return self

    def add_both(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[T]:
        self.add_callback(f, *args, **kwargs)
        self.add_errback(f, *args, **kwargs)
        return self

    def chain(self, future: Any) -> Future[T]:
        """Complete ``future`` (a kafka-python-style future with ``success``/``failure``) like this one."""
        self.add_callback(future.success)
        self.add_errback(future.failure)
        return self
