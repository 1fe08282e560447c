"""Rebalance listeners with a restricted consumer view (KIP-1306), and their dispatch.

Three pieces live here; the :class:`~kafka_handoff.consumer.consumer.Consumer` wires them in:

* the listener types -- :class:`RebalanceListener` (a ``typing.Protocol`` whose three methods receive the
  partitions *and* a :class:`RebalanceConsumer`), its convenience base :class:`RebalanceListenerBase`, and
  the legacy one-argument :class:`ConsumerRebalanceListener`;
* :class:`RebalanceConsumer` -- the static type of the restricted view -- and its only implementation,
  the private :class:`_RebalanceConsumerView`, created fresh for every callback and expired when the
  callback returns (also when it raised);
* :func:`invoke_callback` (run one callback on the application thread, never raising) and
  :class:`RebalanceListenerHolder` (``set_rebalance_listener`` versus ``subscribe(..., listener=...)``).

One method name, two forms
--------------------------
Java overloads each callback by arity: ``onPartitionsRevoked(partitions)`` (legacy) and
``onPartitionsRevoked(partitions, consumer)`` (KIP-1306), and the two-argument default delegates to the
one-argument method.  Python has one method per name, so the *form* of a callback is read from its
signature when it is dispatched:

* a method that accepts a second positional argument is the **two-argument form** and is called as
  ``method(partitions, view)``;
* a method that accepts only ``partitions`` is the **one-argument form** and is called as
  ``method(partitions)`` -- this *is* the seed's "two-argument default delegates to the one-argument
  method";
* a class that implements **both forms** (Java: overrides the one-argument *and* the two-argument method)
  writes one method whose consumer parameter is optional: ``def on_partitions_revoked(self, partitions,
  consumer=None)``.  The dispatcher calls it with the view; a delegating default (``on_partitions_lost``
  of :class:`ConsumerRebalanceListener`) calls it with ``partitions`` alone, so ``consumer is None`` there
  marks the one-argument call.

The seed's delegation rules then hold exactly:

=======================================  =====================================================================
listener                                 what runs for a LOST event
=======================================  =====================================================================
``RebalanceListener`` (base or duck)     ``lost(p, view)``; the base's default is ``revoked(p, view)``; a
                                         duck-typed listener without ``on_partitions_lost`` gets
                                         ``revoked(p, view)`` too
legacy ``ConsumerRebalanceListener``     ``lost(p)`` (the two-argument default delegates to it); its default
                                         is ``revoked(p)`` -- also when the subclass overrode
                                         ``on_partitions_revoked`` in the two-argument form (with
                                         ``consumer=None``): lost(2) -> lost(1) -> revoked(1)
=======================================  =====================================================================

A legacy subclass that gives ``on_partitions_revoked`` a *required* consumer parameter and keeps the
default ``on_partitions_lost`` has no one-argument revoked for that default to call (Java would not compile
it: ``onPartitionsRevoked(Collection)`` stays abstract); :func:`check_listener` rejects it with a
``TypeError`` when the listener is registered.
"""

from __future__ import annotations

import inspect
import logging
import time
import uuid
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import Future
from typing import Any, Final, Protocol, TypeAlias, final, runtime_checkable

from kafka_handoff.errors import IllegalStateError
from kafka_handoff.group.membership import CallbackKind
from kafka_handoff.types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    PartitionInfo,
    TopicPartition,
)

__all__ = [
    "FORBIDDEN_OPERATIONS",
    "REBALANCE_CONSUMER_OPERATIONS",
    "AnyRebalanceListener",
    "CommitCallback",
    "ConsumerRebalanceListener",
    "RebalanceConsumer",
    "RebalanceListener",
    "RebalanceListenerBase",
    "RebalanceListenerHolder",
    "check_listener",
    "invoke_callback",
]

log = logging.getLogger(__name__)

CommitCallback: TypeAlias = Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], None]
"""``commit_async``'s callback: ``callback(offsets, error)``, run on the application thread."""

REBALANCE_CONSUMER_OPERATIONS: Final[tuple[str, ...]] = (
    "commit_sync",
    "commit_async",
    "committed",
    "position",
    "seek",
    "seek_to_beginning",
    "seek_to_end",
    "assignment",
    "pause",
    "resume",
    "paused",
    "beginning_offsets",
    "end_offsets",
    "offsets_for_times",
    "partitions_for",
    "list_topics",
    "current_lag",
    "group_metadata",
    "metrics",
    "client_instance_id",
)
"""Every operation a :class:`RebalanceConsumer` offers (KIP-1306's safe set)."""

FORBIDDEN_OPERATIONS: Final[tuple[str, ...]] = (
    "poll",
    "close",
    "subscribe",
    "unsubscribe",
    "assign",
    "wakeup",
    "enforce_rebalance",
    "set_rebalance_listener",
    "delay_revoke",
)
"""Consumer operations that do not exist on the view: re-entrant polling, closing or re-subscribing
mid-rebalance, manual assignment, interrupting or re-triggering the rebalance.  (``set_rebalance_listener``
and ``delay_revoke`` are consumer-level controls that do not belong in a callback either.)"""


# ============================================================================================ the view
class RebalanceConsumer(Protocol):
    """A restricted view of the consumer, passed to rebalance callbacks (KIP-1306).

    It offers only operations that are safe during a rebalance -- offset management (``commit_sync``,
    ``commit_async``, ``committed``, ``position``), seeking (``seek``, ``seek_to_beginning``,
    ``seek_to_end``), partition state (``assignment``, ``pause``, ``resume``, ``paused``) and read-only
    queries (``beginning_offsets``, ``end_offsets``, ``offsets_for_times``, ``partitions_for``,
    ``list_topics``, ``current_lag``, ``group_metadata``, ``metrics``, ``client_instance_id``) -- with the
    consumer's own
    signatures.  ``poll``, ``close``, ``subscribe``, ``unsubscribe``, ``assign``, ``wakeup`` and
    ``enforce_rebalance`` are absent: calling them is a type error (mypy) and an ``AttributeError`` at
    runtime.

    The view is valid only while the callback it was passed to runs.  Afterwards -- also when the callback
    raised -- every call raises :class:`~kafka_handoff.errors.IllegalStateError`; do not keep it.

    In ``on_partitions_lost`` the partitions are already gone from the assignment: committing, seeking or
    asking the position of them fails (the view adds no guard rails for that, as in Java).  A pause set in
    ``on_partitions_assigned`` persists after the callback; pause flags of revoked partitions are cleared.
    """

    def commit_sync(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        timeout: float | None = None,
    ) -> None: ...

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        callback: CommitCallback | None = None,
    ) -> Future[None]: ...

    def committed(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]: ...

    def position(self, partition: TopicPartition, timeout: float | None = None) -> int: ...

    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None: ...

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None: ...

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None: ...

    def assignment(self) -> frozenset[TopicPartition]: ...

    def pause(self, partitions: Iterable[TopicPartition]) -> None: ...

    def resume(self, partitions: Iterable[TopicPartition]) -> None: ...

    def paused(self) -> frozenset[TopicPartition]: ...

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]: ...

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]: ...

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]: ...

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[PartitionInfo]: ...

    def list_topics(self, timeout: float | None = None) -> dict[str, list[PartitionInfo]]: ...

    def current_lag(self, partition: TopicPartition) -> int | None: ...

    def group_metadata(self) -> ConsumerGroupMetadata: ...

    def metrics(self) -> dict[str, float]: ...

    def client_instance_id(self, timeout: float = 30.0) -> uuid.UUID | None: ...


_CALLBACK_NAMES: Final[dict[CallbackKind, str]] = {
    CallbackKind.ASSIGN: "on_partitions_assigned",
    CallbackKind.REVOKE: "on_partitions_revoked",
    CallbackKind.LOST: "on_partitions_lost",
}


@final
class _RebalanceConsumerView:
    """The one implementation of :class:`RebalanceConsumer`: delegates to the consumer while valid.

    The consumer is held in a name-mangled slot (no ``__dict__``, no public attribute, no ``__getattr__``
    pass-through), attributes cannot be set from outside, and the view refuses to be copied or pickled (a
    copy would otherwise outlive the expiry of the original).  Python cannot make this airtight against
    deliberate introspection; it makes leaking the full consumer something nobody does by accident.
    """

    __slots__ = ("__consumer", "__kind", "__valid")
    __consumer: RebalanceConsumer | None
    __kind: CallbackKind | None
    __valid: bool

    def __init__(self, consumer: RebalanceConsumer, kind: CallbackKind | None = None) -> None:
        object.__setattr__(self, "_RebalanceConsumerView__consumer", consumer)
        object.__setattr__(self, "_RebalanceConsumerView__kind", kind)
        object.__setattr__(self, "_RebalanceConsumerView__valid", True)

    # ------------------------------------------------------------------------------- lifetime
    def _expire(self) -> None:
        """Make every further call raise ``IllegalStateError`` (the dispatcher calls this)."""
        object.__setattr__(self, "_RebalanceConsumerView__valid", False)
        object.__setattr__(self, "_RebalanceConsumerView__consumer", None)

    def __target(self) -> RebalanceConsumer:
        target: RebalanceConsumer | None = self.__consumer
        if not self.__valid or target is None:
            where = f" ({_CALLBACK_NAMES[self.__kind]})" if self.__kind is not None else ""
            raise IllegalStateError(
                f"this RebalanceConsumer has expired: it is valid only while the rebalance callback it was "
                f"passed to{where} runs; do not keep a reference to it"
            )
        return target

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"RebalanceConsumer attributes are read-only (tried to set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"RebalanceConsumer attributes cannot be deleted (tried to delete {name!r})")

    def __copy__(self) -> _RebalanceConsumerView:
        raise TypeError("a RebalanceConsumer cannot be copied; it is valid only during its callback")

    def __deepcopy__(self, memo: dict[int, object]) -> _RebalanceConsumerView:
        raise TypeError("a RebalanceConsumer cannot be copied; it is valid only during its callback")

    def __reduce_ex__(self, protocol: Any) -> Any:  # pickling
        raise TypeError("a RebalanceConsumer cannot be pickled; it is valid only during its callback")

    def __repr__(self) -> str:
        state = "valid" if self.__valid else "expired"
        where = f" for {_CALLBACK_NAMES[self.__kind]}" if self.__kind is not None else ""
        return f"<RebalanceConsumer{where} ({state})>"

    # ------------------------------------------------------------------------------- offset management
    def commit_sync(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        timeout: float | None = None,
    ) -> None:
        self.__target().commit_sync(offsets, timeout=timeout)

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        callback: CommitCallback | None = None,
    ) -> Future[None]:
        return self.__target().commit_async(offsets, callback=callback)

    def committed(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self.__target().committed(partitions, timeout=timeout)

    def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        return self.__target().position(partition, timeout=timeout)

    # ------------------------------------------------------------------------------- seek
    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        self.__target().seek(partition, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self.__target().seek_to_beginning(partitions)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self.__target().seek_to_end(partitions)

    # ------------------------------------------------------------------------------- partition state
    def assignment(self) -> frozenset[TopicPartition]:
        return self.__target().assignment()

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self.__target().pause(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self.__target().resume(partitions)

    def paused(self) -> frozenset[TopicPartition]:
        return self.__target().paused()

    # ------------------------------------------------------------------------------- read-only queries
    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        return self.__target().beginning_offsets(partitions, timeout=timeout)

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        return self.__target().end_offsets(partitions, timeout=timeout)

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self.__target().offsets_for_times(timestamps, timeout=timeout)

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[PartitionInfo]:
        return self.__target().partitions_for(topic, timeout=timeout)

    def list_topics(self, timeout: float | None = None) -> dict[str, list[PartitionInfo]]:
        return self.__target().list_topics(timeout=timeout)

    def current_lag(self, partition: TopicPartition) -> int | None:
        return self.__target().current_lag(partition)

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self.__target().group_metadata()

    def metrics(self) -> dict[str, float]:
        return self.__target().metrics()

    def client_instance_id(self, timeout: float = 30.0) -> uuid.UUID | None:
        return self.__target().client_instance_id(timeout)


_VIEW_IS_A_REBALANCE_CONSUMER: type[RebalanceConsumer] = _RebalanceConsumerView  # checked by mypy


# ============================================================================================ listeners
@runtime_checkable
class RebalanceListener(Protocol):
    """Callbacks for partition assignment changes; each receives a :class:`RebalanceConsumer` (KIP-1306).

    They run on the application thread inside ``poll()`` (and ``unsubscribe()``/``close()``), as in Java:

    * ``on_partitions_revoked(partitions, consumer)`` -- the partitions are still owned until the callback
      returns: commit their final offsets here.  With delayed revocation (KIP-983) it runs when the revoke
      *completes* -- at the start of the ``poll()`` after the one that reported it in
      ``to_be_revoked_partitions``, later if :meth:`Consumer.delay_revoke` postponed it.
    * ``on_partitions_assigned(partitions, consumer)`` -- the partitions are owned; their records are
      fetched only after the callback returned.  Seek or pause here; a pause persists.
    * ``on_partitions_lost(partitions, consumer)`` -- the partitions already belong to someone else and
      are out of the assignment: their offsets can no longer be committed.  Implementations that have no
      special handling typically do what ``on_partitions_revoked`` does
      (:class:`RebalanceListenerBase` does exactly that by default).

    An exception raised by a callback propagates out of ``poll()``, but only after the rebalance step has
    completed; the other callbacks still run and the consumer stays usable.

    Any object with these three methods is a ``RebalanceListener`` (structural typing; ``isinstance``
    works too).  Subclass :class:`RebalanceListenerBase` to get the ``lost -> revoked`` default.
    """

    def on_partitions_assigned(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None: ...

    def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None: ...

    def on_partitions_lost(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None: ...


class RebalanceListenerBase:
    """A concrete :class:`RebalanceListener`: assigned/revoked do nothing; lost delegates to revoked.

    Unlike Java, where ``onPartitionsAssigned``/``onPartitionsRevoked`` are abstract, both default to
    doing nothing so a subclass overrides only what it needs.  ``on_partitions_lost`` defaults to
    ``self.on_partitions_revoked(partitions, consumer)`` (the seed's rule); override it when offsets must
    not be committed for lost partitions (they cannot be: another member owns them).
    """

    def on_partitions_assigned(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        """Called after ``partitions`` were assigned (possibly an empty collection)."""

    def on_partitions_revoked(
        self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
    ) -> None:
        """Called when the revoke of ``partitions`` completes; they are still owned until this returns."""

    def on_partitions_lost(self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer) -> None:
        """Called when ``partitions`` were lost; by default delegates to :meth:`on_partitions_revoked`."""
        _call_in_form(self.on_partitions_revoked, partitions, consumer)


class ConsumerRebalanceListener:
    """The legacy listener with one-argument callbacks (deprecated in favour of :class:`RebalanceListener`).

    Subclasses override ``on_partitions_revoked(partitions)``, ``on_partitions_assigned(partitions)`` and
    optionally ``on_partitions_lost(partitions)``, which defaults to ``on_partitions_revoked(partitions)``.

    The consumer dispatches every callback in the two-argument form; for a method that accepts only
    ``partitions`` that form's default applies, which calls the one-argument method -- so a legacy
    listener behaves exactly as before.

    To use the restricted consumer in a legacy listener (Java: override the two-argument method as well),
    give the method an optional consumer parameter::

        class Committer(ConsumerRebalanceListener):
            def on_partitions_revoked(self, partitions, consumer: RebalanceConsumer | None = None) -> None:
                if consumer is not None:          # the two-argument form, called by the consumer
                    consumer.commit_sync()
                # consumer is None: the one-argument form, called by the default on_partitions_lost

    Lost partitions then follow the seed's chain lost(2) -> lost(1) -> revoked(1): the default
    ``on_partitions_lost`` calls ``on_partitions_revoked(partitions)`` *without* a consumer (committing
    lost partitions would fail anyway).  Override ``on_partitions_lost`` (either form) to change that.
    """

    def on_partitions_revoked(self, partitions: Collection[TopicPartition]) -> None:
        """Called when the revoke of ``partitions`` completes; they are still owned until this returns."""

    def on_partitions_assigned(self, partitions: Collection[TopicPartition]) -> None:
        """Called after ``partitions`` were assigned (possibly an empty collection)."""

    def on_partitions_lost(self, partitions: Collection[TopicPartition]) -> None:
        """Called when ``partitions`` were lost; by default calls ``on_partitions_revoked(partitions)``."""
        self.on_partitions_revoked(partitions)


AnyRebalanceListener: TypeAlias = RebalanceListener | ConsumerRebalanceListener
"""What ``set_rebalance_listener`` and ``subscribe(..., listener=...)`` accept (duck-typed objects with
one-argument methods, e.g. kafka-python style listeners, work at runtime too)."""


# ============================================================================================ dispatch
def _positional_arity(method: Callable[..., object]) -> tuple[int, int] | None:
    """(required, maximum) positional arguments of a bound method; max -1 means ``*args``; None: unknown."""
    try:
        sig = inspect.signature(method)
    except (TypeError, ValueError):
        return None
    required = 0
    maximum = 0
    for param in sig.parameters.values():
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            maximum = -1
        elif param.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            if maximum != -1:
                maximum += 1
            if param.default is inspect.Parameter.empty:
                required += 1
    return required, maximum


def _accepts_consumer(method: Callable[..., object]) -> bool:
    """True if ``method`` is the two-argument form (takes a second positional argument)."""
    arity = _positional_arity(method)
    if arity is None:
        return True  # cannot inspect (a builtin or C callable): assume the protocol's form
    _, maximum = arity
    return maximum == -1 or maximum >= 2


def _requires_consumer(method: Callable[..., object]) -> bool:
    arity = _positional_arity(method)
    return arity is not None and arity[0] >= 2


def _call_in_form(
    method: Callable[..., object], partitions: Collection[TopicPartition], consumer: RebalanceConsumer
) -> None:
    if _accepts_consumer(method):
        method(partitions, consumer)
    else:
        method(partitions)


def _dispatch(
    listener: object, kind: CallbackKind, partitions: frozenset[TopicPartition], view: RebalanceConsumer
) -> None:
    method = getattr(listener, _CALLBACK_NAMES[kind], None)
    if method is None and kind is CallbackKind.LOST:
        # A duck-typed listener without on_partitions_lost: RebalanceListener's default, lost -> revoked.
        method = getattr(listener, _CALLBACK_NAMES[CallbackKind.REVOKE], None)
    if method is None:
        return
    _call_in_form(method, partitions, view)


def _default_clock_ms() -> float:
    return time.perf_counter() * 1000.0


def invoke_callback(
    listener: object | None,
    kind: CallbackKind,
    partitions: Iterable[TopicPartition],
    consumer: RebalanceConsumer,
    *,
    record_latency: Callable[[CallbackKind, float], object] | None = None,
    clock_ms: Callable[[], float] = _default_clock_ms,
) -> BaseException | None:
    """Run one rebalance callback on the application thread; return (never raise) its exception.

    Creates a fresh :class:`RebalanceConsumer` view over ``consumer``, calls the listener's method for
    ``kind`` in the right form (see the module docstring), expires the view in ``finally`` and records the
    callback's latency with ``record_latency(kind, milliseconds)`` (also when there is no listener, as
    Java's no-op listener is still timed).

    The exception a callback raises -- any ``BaseException``, including ``WakeupError`` from a nested
    call or ``KeyboardInterrupt`` -- is returned so the consumer can first complete the rebalance step
    (report ``on_callback_completed``, run the other callbacks, clear pause flags) and then raise it from
    ``poll()``; when several callbacks of one ``poll()`` fail, the consumer raises the first.
    ``partitions`` is passed to the listener as a ``frozenset``.  The caller decides whether an event
    with no partitions warrants a call (Java always calls assigned, revoked only when non-empty).
    """
    parts = frozenset(partitions)
    view = _RebalanceConsumerView(consumer, kind)
    error: BaseException | None = None
    start = clock_ms()
    try:
        if listener is not None:
            _dispatch(listener, kind, parts, view)
    except BaseException as exc:  # returned to the consumer, which raises it from poll()
        error = exc
    finally:
        view._expire()
        if record_latency is not None:
            try:
                record_latency(kind, max(0.0, clock_ms() - start))
            except Exception:  # metrics must never break a rebalance
                log.warning("recording the %s callback latency failed", kind.value, exc_info=True)
    if error is not None:
        log.debug("rebalance listener %s raised %r", _CALLBACK_NAMES[kind], error)
    return error


# ============================================================================================ registration
_LISTENER_METHODS: Final[tuple[str, ...]] = tuple(_CALLBACK_NAMES.values())


def check_listener(listener: object) -> None:
    """Raise ``TypeError`` if ``listener`` cannot serve as a rebalance listener.

    It must have at least one of ``on_partitions_assigned``, ``on_partitions_revoked`` and
    ``on_partitions_lost``, each callable, taking ``partitions`` (and optionally the consumer view).  A
    :class:`ConsumerRebalanceListener` subclass whose ``on_partitions_revoked`` *requires* the consumer and
    which keeps the default ``on_partitions_lost`` is rejected: that default calls the one-argument form.
    """
    present = [name for name in _LISTENER_METHODS if getattr(listener, name, None) is not None]
    if not present:
        raise TypeError(
            f"{type(listener).__name__} is not a rebalance listener: it has none of "
            f"{', '.join(_LISTENER_METHODS)}"
        )
    for name in present:
        method = getattr(listener, name)
        if not callable(method):
            raise TypeError(f"{type(listener).__name__}.{name} is not callable")
        arity = _positional_arity(method)
        if arity is not None:
            required, maximum = arity
            if required > 2 or (maximum != -1 and maximum < 1):
                raise TypeError(
                    f"{type(listener).__name__}.{name} must take (partitions) or (partitions, consumer); "
                    f"its signature is {inspect.signature(method)}"
                )
    if isinstance(listener, ConsumerRebalanceListener):
        lost_is_default = type(listener).on_partitions_lost is ConsumerRebalanceListener.on_partitions_lost
        if lost_is_default and _requires_consumer(listener.on_partitions_revoked):
            raise TypeError(
                f"{type(listener).__name__} overrides on_partitions_revoked with a required consumer "
                f"argument, but keeps ConsumerRebalanceListener's on_partitions_lost, which calls "
                f"on_partitions_revoked(partitions); give the consumer parameter a default of None, "
                f"override on_partitions_lost, or implement RebalanceListener instead"
            )


class RebalanceListenerHolder:
    """Which listener receives callbacks: ``set_rebalance_listener`` versus ``subscribe(listener=...)``.

    Rules (KIP-1306):

    * :meth:`set_rebalance_listener` may be called any number of times; ``None`` removes the listener.
      The value set last takes effect at the next ``poll()`` (:meth:`begin_poll`): callbacks during that
      poll and later ones use it.
    * When both ``set_rebalance_listener`` and ``subscribe(..., listener=...)`` are used, the one called
      last wins: as in Java, both paths overwrite a single reference (KIP-1306: "calling this method will
      override it", and the consumers "eventually override the reference").
    * ``subscribe(..., listener=X)`` still works and emits a :class:`DeprecationWarning`.
      ``subscribe(...)`` without a listener changes nothing, so ``set_rebalance_listener(l)`` followed by
      ``subscribe(topics)`` keeps ``l``.

    Used only from the application thread (no locking).
    """

    __slots__ = ("_active", "_current")

    def __init__(self) -> None:
        self._current: object | None = None
        self._active: object | None = None

    def set_rebalance_listener(self, listener: AnyRebalanceListener | None) -> None:
        """``Consumer.set_rebalance_listener``: validates, then records the value (effective next poll)."""
        if listener is not None:
            check_listener(listener)
        self._current = listener

    def set_from_subscribe(self, listener: AnyRebalanceListener | None, *, stacklevel: int = 3) -> None:
        """``Consumer.subscribe(..., listener=...)``: deprecated path; ``None`` leaves things unchanged.

        ``stacklevel`` is passed to ``warnings.warn``; the default (3) points at the caller of the
        consumer's ``subscribe`` when that method calls this one directly.
        """
        if listener is None:
            return
        check_listener(listener)
        warnings.warn(
            "subscribe(..., listener=...) is deprecated; call consumer.set_rebalance_listener(listener) "
            "instead",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
        self._current = listener

    def resolve(self) -> object | None:
        """The listener that the most recent calls select (what the next ``poll()`` will use)."""
        return self._current

    def begin_poll(self) -> object | None:
        """Call at the start of ``poll()``: fixes and returns the listener for this poll's callbacks."""
        self._active = self.resolve()
        return self._active

    @property
    def active(self) -> object | None:
        """The listener fixed by the last :meth:`begin_poll` (``None`` before the first poll).

        ``unsubscribe()``/``close()`` run their revoke callback outside ``poll()``; they should use
        :meth:`resolve` so a listener set just before closing is honoured.
        """
        return self._active
