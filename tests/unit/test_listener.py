"""KIP-1306: the restricted consumer view, the listener delegation rules, callback dispatch, and which
listener is in effect (set_rebalance_listener vs the deprecated subscribe(listener=...))."""

from __future__ import annotations

import copy
import inspect
import pickle
import warnings
from collections.abc import Callable, Collection
from concurrent.futures import Future
from typing import Any

import pytest

from kafka_handoff.consumer.consumer import Consumer
from kafka_handoff.consumer.listener import (
    FORBIDDEN_OPERATIONS,
    REBALANCE_CONSUMER_OPERATIONS,
    ConsumerRebalanceListener,
    RebalanceConsumer,
    RebalanceListener,
    RebalanceListenerBase,
    RebalanceListenerHolder,
    _RebalanceConsumerView,
    check_listener,
    invoke_callback,
)
from kafka_handoff.errors import IllegalStateError, WakeupError
from kafka_handoff.group.membership import CallbackKind
from kafka_handoff.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.unit

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)
PARTS = frozenset({A, B})
ASSIGN, REVOKE, LOST = CallbackKind.ASSIGN, CallbackKind.REVOKE, CallbackKind.LOST


class FakeConsumer:
    """Has the Consumer's method names (allowed and forbidden); records every call it receives."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name in FORBIDDEN_OPERATIONS:

            def forbidden(*args: Any, **kwargs: Any) -> Any:
                raise AssertionError(f"the view reached the consumer's forbidden {name}()")

            return forbidden
        if name in REBALANCE_CONSUMER_OPERATIONS:

            def record(*args: Any, **kwargs: Any) -> Any:
                self.calls.append((name, args, kwargs))
                return ("result-of", name)

            return record
        raise AttributeError(name)


def as_rebalance_consumer(fake: FakeConsumer) -> RebalanceConsumer:
    consumer: RebalanceConsumer = fake  # duck-typed through __getattr__
    return consumer


# One call per allowed operation, with representative arguments.
CALLS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "commit_sync": (({A: OffsetAndMetadata(5)},), {"timeout": 2.0}),
    "commit_async": (({A: 5},), {"callback": print}),
    "committed": (([A],), {"timeout": 1.0}),
    "position": ((A,), {"timeout": 1.5}),
    "seek": ((A, 42), {}),
    "seek_to_beginning": (([A],), {}),
    "seek_to_end": (([B],), {}),
    "assignment": ((), {}),
    "pause": (([A],), {}),
    "resume": (([A],), {}),
    "paused": ((), {}),
    "beginning_offsets": (([A],), {"timeout": 3.0}),
    "end_offsets": (([B],), {"timeout": 4.0}),
    "offsets_for_times": (({A: 1000},), {"timeout": 5.0}),
    "partitions_for": (("t",), {"timeout": 6.0}),
    "list_topics": ((), {"timeout": 7.0}),
    "current_lag": ((A,), {}),
    "group_metadata": ((), {}),
    "metrics": ((), {}),
    "client_instance_id": ((), {"timeout": 2.5}),
}


def expected_forwarded(name: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """What reaches the consumer: the same values; omitted optional arguments as their defaults."""
    sig = inspect.signature(getattr(_RebalanceConsumerView, name))
    args, kwargs = CALLS[name]
    bound = sig.bind(None, *args, **kwargs)
    bound.apply_defaults()
    return tuple(list(bound.arguments.values())[1:]), {}


def flatten(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    return [*args, *kwargs.values()]


# ============================================================================================ the view
def test_operation_lists_match_the_protocol_and_the_view() -> None:
    protocol_ops = {
        n for n in vars(RebalanceConsumer) if not n.startswith("_") and callable(vars(RebalanceConsumer)[n])
    }
    assert protocol_ops == set(REBALANCE_CONSUMER_OPERATIONS)
    assert set(CALLS) == set(REBALANCE_CONSUMER_OPERATIONS)
    view = _RebalanceConsumerView(as_rebalance_consumer(FakeConsumer()), ASSIGN)
    assert {n for n in dir(view) if not n.startswith("_")} == set(REBALANCE_CONSUMER_OPERATIONS)


@pytest.mark.parametrize("name", REBALANCE_CONSUMER_OPERATIONS)
def test_view_and_protocol_have_the_real_consumers_signatures(name: str) -> None:
    def shape(fn: Any) -> list[tuple[str, Any, Any]]:
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert shape(getattr(RebalanceConsumer, name)) == shape(getattr(Consumer, name))
    assert shape(getattr(_RebalanceConsumerView, name)) == shape(getattr(Consumer, name))


@pytest.mark.parametrize("name", REBALANCE_CONSUMER_OPERATIONS)
def test_allowed_operation_is_delegated_with_its_arguments_and_result(name: str) -> None:
    fake = FakeConsumer()
    view = _RebalanceConsumerView(as_rebalance_consumer(fake), REVOKE)
    args, kwargs = CALLS[name]
    assert getattr(view, name)(*args, **kwargs) == (
        ("result-of", name)
        if name not in {"commit_sync", "seek", "seek_to_beginning", "seek_to_end", "pause", "resume"}
        else None
    )
    assert len(fake.calls) == 1
    called, got_args, got_kwargs = fake.calls[0]
    assert called == name
    want_args, _ = expected_forwarded(name)
    assert flatten(got_args, got_kwargs) == list(want_args)


def test_optional_arguments_default_like_the_consumer() -> None:
    fake = FakeConsumer()
    view = _RebalanceConsumerView(as_rebalance_consumer(fake))
    view.commit_sync()
    view.seek_to_end()
    view.commit_async()
    assert [flatten(a, k) for _, a, k in fake.calls] == [[None, None], [None], [None, None]]


@pytest.mark.parametrize("name", FORBIDDEN_OPERATIONS)
def test_forbidden_operation_does_not_exist_on_the_view(name: str) -> None:
    view = _RebalanceConsumerView(as_rebalance_consumer(FakeConsumer()), ASSIGN)
    assert not hasattr(view, name)
    with pytest.raises(AttributeError):
        getattr(view, name)()
    assert not hasattr(RebalanceConsumer, name)


def test_view_does_not_leak_the_consumer() -> None:
    fake = FakeConsumer()
    view = _RebalanceConsumerView(as_rebalance_consumer(fake), ASSIGN)
    assert not hasattr(view, "__dict__")
    with pytest.raises(TypeError):
        vars(view)
    public_values = [getattr(view, n) for n in dir(view) if not n.startswith("_")]
    assert all(value is not fake for value in public_values)
    assert all(getattr(value, "__self__", None) is not fake for value in public_values)
    assert "FakeConsumer" not in repr(view)
    with pytest.raises(AttributeError):
        view.consumer = fake
    with pytest.raises(AttributeError):
        object.__setattr__(view, "consumer", fake)  # no __dict__ to put it in
    with pytest.raises(AttributeError):
        view._RebalanceConsumerView__valid = True
    for clone in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError):
            clone(view)


# ============================================================================================ expiry
@pytest.mark.parametrize("raises", [False, True], ids=["returned", "raised"])
@pytest.mark.parametrize("kind", [ASSIGN, REVOKE, LOST])
def test_view_expires_after_the_callback_also_when_it_raised(kind: CallbackKind, raises: bool) -> None:
    fake = FakeConsumer()
    kept: list[RebalanceConsumer] = []

    class Keeper(RebalanceListenerBase):
        def _keep(self, consumer: RebalanceConsumer) -> None:
            consumer.assignment()  # valid during the callback
            kept.append(consumer)
            if raises:
                raise RuntimeError("boom")

        def on_partitions_assigned(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            self._keep(consumer)

        def on_partitions_revoked(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            self._keep(consumer)

    error = invoke_callback(Keeper(), kind, PARTS, as_rebalance_consumer(fake))
    assert (error is not None) is raises
    assert [c[0] for c in fake.calls] == ["assignment"]
    (view,) = kept
    for name in REBALANCE_CONSUMER_OPERATIONS:
        args, kwargs = CALLS[name]
        with pytest.raises(IllegalStateError, match="expired"):
            getattr(view, name)(*args, **kwargs)
    assert len(fake.calls) == 1  # nothing reached the consumer after expiry
    assert "expired" in repr(view)


def test_each_callback_gets_a_fresh_view() -> None:
    seen: list[RebalanceConsumer] = []

    class Collect(RebalanceListenerBase):
        def on_partitions_assigned(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            seen.append(consumer)

    consumer = as_rebalance_consumer(FakeConsumer())
    invoke_callback(Collect(), ASSIGN, [A], consumer)
    invoke_callback(Collect(), ASSIGN, [B], consumer)
    assert len(seen) == 2 and seen[0] is not seen[1]


# ============================================================================================ delegation
class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, frozenset[TopicPartition], str]] = []

    def __call__(
        self, method: str, partitions: Collection[TopicPartition], consumer: object = "absent"
    ) -> None:
        form = "absent" if consumer == "absent" else ("none" if consumer is None else "view")
        if form == "view":
            assert isinstance(consumer, _RebalanceConsumerView)
        self.calls.append((method, frozenset(partitions), form))


def dispatch_all(listener: object) -> dict[CallbackKind, list[tuple[str, str]]]:
    result: dict[CallbackKind, list[tuple[str, str]]] = {}
    for kind in (ASSIGN, REVOKE, LOST):
        rec: Recorder = listener.rec  # type: ignore[attr-defined]
        rec.calls.clear()
        assert invoke_callback(listener, kind, PARTS, as_rebalance_consumer(FakeConsumer())) is None
        assert all(parts == PARTS for _, parts, _ in rec.calls)
        result[kind] = [(method, form) for method, _, form in rec.calls]
    return result


def test_new_listener_lost_defaults_to_revoked_with_the_view() -> None:
    class L(RebalanceListenerBase):
        rec = Recorder()

        def on_partitions_assigned(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            self.rec("assigned", partitions, consumer)

        def on_partitions_revoked(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            self.rec("revoked", partitions, consumer)

    assert isinstance(L(), RebalanceListener)
    assert dispatch_all(L()) == {
        ASSIGN: [("assigned", "view")],
        REVOKE: [("revoked", "view")],
        LOST: [("revoked", "view")],
    }


def test_new_listener_overriding_lost() -> None:
    class L(RebalanceListenerBase):
        rec = Recorder()

        def on_partitions_revoked(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            self.rec("revoked", partitions, consumer)

        def on_partitions_lost(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            self.rec("lost", partitions, consumer)

    assert dispatch_all(L()) == {ASSIGN: [], REVOKE: [("revoked", "view")], LOST: [("lost", "view")]}


def test_new_listener_base_with_one_argument_revoked_still_gets_lost() -> None:
    class L(RebalanceListenerBase):
        rec = Recorder()

        def on_partitions_revoked(self, partitions: Collection[TopicPartition]) -> None:  # type: ignore[override]
            self.rec("revoked", partitions)

    assert dispatch_all(L()) == {ASSIGN: [], REVOKE: [("revoked", "absent")], LOST: [("revoked", "absent")]}


def test_legacy_listener_one_argument_methods_lost_to_lost1_to_revoked1() -> None:
    class L(ConsumerRebalanceListener):
        rec = Recorder()

        def on_partitions_revoked(self, partitions: Collection[TopicPartition]) -> None:
            self.rec("revoked", partitions)

        def on_partitions_assigned(self, partitions: Collection[TopicPartition]) -> None:
            self.rec("assigned", partitions)

    assert dispatch_all(L()) == {
        ASSIGN: [("assigned", "absent")],
        REVOKE: [("revoked", "absent")],
        LOST: [("revoked", "absent")],
    }


def test_legacy_listener_overriding_lost1() -> None:
    class L(ConsumerRebalanceListener):
        rec = Recorder()

        def on_partitions_revoked(self, partitions: Collection[TopicPartition]) -> None:
            self.rec("revoked", partitions)

        def on_partitions_lost(self, partitions: Collection[TopicPartition]) -> None:
            self.rec("lost", partitions)

    assert dispatch_all(L()) == {ASSIGN: [], REVOKE: [("revoked", "absent")], LOST: [("lost", "absent")]}


def test_legacy_listener_implementing_both_forms() -> None:
    """Both forms = one method with an optional consumer.  The consumer calls the two-argument form; the
    default lost(1) calls revoked(1): lost(2) -> lost(1) -> revoked(1), as in the seed."""

    class L(ConsumerRebalanceListener):
        rec = Recorder()

        def on_partitions_revoked(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer | None = None
        ) -> None:
            self.rec("revoked", partitions, consumer)

        def on_partitions_assigned(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer | None = None
        ) -> None:
            self.rec("assigned", partitions, consumer)

    assert dispatch_all(L()) == {
        ASSIGN: [("assigned", "view")],
        REVOKE: [("revoked", "view")],
        LOST: [("revoked", "none")],
    }


def test_legacy_listener_with_two_argument_lost() -> None:
    class L(ConsumerRebalanceListener):
        rec = Recorder()

        def on_partitions_lost(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer | None = None
        ) -> None:
            self.rec("lost", partitions, consumer)

    assert dispatch_all(L()) == {ASSIGN: [], REVOKE: [], LOST: [("lost", "view")]}


def test_duck_typed_listeners() -> None:
    class TwoArgWithoutLost:
        rec = Recorder()

        def on_partitions_assigned(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            self.rec("assigned", partitions, consumer)

        def on_partitions_revoked(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            self.rec("revoked", partitions, consumer)

    class OneArgKafkaPythonStyle:
        rec = Recorder()

        def on_partitions_revoked(self, revoked: Collection[TopicPartition]) -> None:
            self.rec("revoked", revoked)

        def on_partitions_assigned(self, assigned: Collection[TopicPartition]) -> None:
            self.rec("assigned", assigned)

    class VarArgs:
        rec = Recorder()

        def on_partitions_lost(self, *args: Any) -> None:
            self.rec("lost", *args)

    assert dispatch_all(TwoArgWithoutLost()) == {
        ASSIGN: [("assigned", "view")],
        REVOKE: [("revoked", "view")],
        LOST: [("revoked", "view")],
    }
    assert dispatch_all(OneArgKafkaPythonStyle()) == {
        ASSIGN: [("assigned", "absent")],
        REVOKE: [("revoked", "absent")],
        LOST: [("revoked", "absent")],
    }
    assert dispatch_all(VarArgs()) == {ASSIGN: [], REVOKE: [], LOST: [("lost", "view")]}


def test_listener_receives_a_frozenset() -> None:
    got: list[object] = []

    class L(RebalanceListenerBase):
        def on_partitions_assigned(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            got.append(partitions)

    invoke_callback(L(), ASSIGN, [A, B, A], as_rebalance_consumer(FakeConsumer()))
    assert got == [PARTS] and isinstance(got[0], frozenset)


def test_check_listener_rejects_what_cannot_work() -> None:
    with pytest.raises(TypeError, match="none of"):
        check_listener(object())

    class NotCallable:
        on_partitions_revoked = 3

    with pytest.raises(TypeError, match="not callable"):
        check_listener(NotCallable())

    class TooManyArgs:
        def on_partitions_assigned(self, partitions: object, consumer: object, extra: object) -> None: ...

    with pytest.raises(TypeError, match=r"\(partitions\) or \(partitions, consumer\)"):
        check_listener(TooManyArgs())

    class LegacyRequiringConsumer(ConsumerRebalanceListener):
        def on_partitions_revoked(  # type: ignore[override]
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None: ...

    with pytest.raises(TypeError, match="on_partitions_lost"):
        check_listener(LegacyRequiringConsumer())

    class LegacyRequiringConsumerWithLost(LegacyRequiringConsumer):
        def on_partitions_lost(self, partitions: Collection[TopicPartition]) -> None: ...

    check_listener(LegacyRequiringConsumerWithLost())  # fine: the default lost is not used
    check_listener(RebalanceListenerBase())
    check_listener(ConsumerRebalanceListener())


# ============================================================================================ errors
def test_callback_exception_is_returned_not_raised_and_later_callbacks_still_run() -> None:
    boom = RuntimeError("revoked failed")
    assigned: list[frozenset[TopicPartition]] = []

    class L(RebalanceListenerBase):
        def on_partitions_revoked(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            raise boom

        def on_partitions_assigned(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            assigned.append(frozenset(partitions))

    fake = FakeConsumer()
    listener = L()
    assert invoke_callback(listener, REVOKE, [A], as_rebalance_consumer(fake)) is boom
    assert invoke_callback(listener, ASSIGN, [B], as_rebalance_consumer(fake)) is None
    assert assigned == [frozenset({B})]
    assert invoke_callback(listener, LOST, [B], as_rebalance_consumer(fake)) is boom  # lost -> revoked


@pytest.mark.parametrize("exc", [WakeupError("nested wakeup"), KeyboardInterrupt()], ids=type)
def test_base_exceptions_are_returned_too(exc: BaseException) -> None:
    class L(RebalanceListenerBase):
        def on_partitions_assigned(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            raise exc

    assert invoke_callback(L(), ASSIGN, [A], as_rebalance_consumer(FakeConsumer())) is exc


def test_no_listener_is_a_no_op() -> None:
    fake = FakeConsumer()
    assert invoke_callback(None, REVOKE, [A], as_rebalance_consumer(fake)) is None
    assert fake.calls == []


def test_latency_is_recorded_per_kind_also_on_error_and_without_listener() -> None:
    ticks = iter([100.0, 112.5, 200.0, 203.0, 300.0, 300.25])
    recorded: list[tuple[CallbackKind, float]] = []

    class L(RebalanceListenerBase):
        def on_partitions_revoked(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            raise RuntimeError("x")

    def record(kind: CallbackKind, ms: float) -> None:
        recorded.append((kind, ms))

    consumer = as_rebalance_consumer(FakeConsumer())
    invoke_callback(L(), ASSIGN, [A], consumer, record_latency=record, clock_ms=lambda: next(ticks))
    invoke_callback(L(), REVOKE, [A], consumer, record_latency=record, clock_ms=lambda: next(ticks))
    invoke_callback(None, LOST, [A], consumer, record_latency=record, clock_ms=lambda: next(ticks))
    assert recorded == [(ASSIGN, 12.5), (REVOKE, 3.0), (LOST, 0.25)]


def test_failing_latency_recorder_does_not_mask_the_callback_result() -> None:
    def record(kind: CallbackKind, ms: float) -> None:
        raise ValueError("metrics broken")

    calls: list[str] = []

    class L(RebalanceListenerBase):
        def on_partitions_assigned(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            calls.append("assigned")

    assert (
        invoke_callback(L(), ASSIGN, [A], as_rebalance_consumer(FakeConsumer()), record_latency=record)
        is None
    )
    assert calls == ["assigned"]


def test_view_calls_inside_the_callback_reach_the_consumer() -> None:
    """The usual pattern: commit in revoked, seek and pause in assigned."""
    fake = FakeConsumer()

    class L(RebalanceListenerBase):
        def on_partitions_revoked(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            consumer.commit_sync({tp: OffsetAndMetadata(10) for tp in sorted(partitions)})

        def on_partitions_assigned(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            for tp in sorted(partitions):
                consumer.seek(tp, 7)
            consumer.pause(sorted(partitions))

    invoke_callback(L(), REVOKE, [A], as_rebalance_consumer(fake))
    invoke_callback(L(), ASSIGN, [B], as_rebalance_consumer(fake))
    assert [(n, flatten(a, k)) for n, a, k in fake.calls] == [
        ("commit_sync", [{A: OffsetAndMetadata(10)}, None]),
        ("seek", [B, 7]),
        ("pause", [[B]]),
    ]


# ============================================================================================ the holder
class Named(RebalanceListenerBase):
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def consumer_subscribe(holder: RebalanceListenerHolder, listener: Any = None) -> None:
    """Stands in for Consumer.subscribe(topics, listener=...), which calls the holder directly."""
    holder.set_from_subscribe(listener)


def test_subscribe_listener_works_and_warns_deprecation_at_the_callers_line() -> None:
    holder = RebalanceListenerHolder()
    a = Named("a")
    with pytest.warns(DeprecationWarning, match="set_rebalance_listener") as record:
        consumer_subscribe(holder, a)
    assert record[0].filename == __file__  # stacklevel points at the code calling subscribe()
    assert holder.active is None  # nothing before the first poll
    assert holder.begin_poll() is a
    assert holder.active is a


def test_subscribe_without_listener_neither_warns_nor_changes_anything() -> None:
    holder = RebalanceListenerHolder()
    b = Named("b")
    holder.set_rebalance_listener(b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        consumer_subscribe(holder, None)
    assert holder.begin_poll() is b


def test_subscribe_listener_and_set_rebalance_listener_the_one_set_last_wins() -> None:
    """Issue 14 item 10 (KIP-1306): both paths overwrite one reference, as in Java."""
    a, b = Named("a"), Named("b")
    first = RebalanceListenerHolder()
    with pytest.warns(DeprecationWarning):
        consumer_subscribe(first, a)
    first.set_rebalance_listener(b)
    assert first.begin_poll() is b

    second = RebalanceListenerHolder()
    second.set_rebalance_listener(b)
    with pytest.warns(DeprecationWarning):
        consumer_subscribe(second, a)
    assert second.begin_poll() is a


def test_last_value_set_before_the_next_poll_wins() -> None:
    holder = RebalanceListenerHolder()
    a, b, c = Named("a"), Named("b"), Named("c")
    holder.set_rebalance_listener(a)
    holder.set_rebalance_listener(b)
    assert holder.begin_poll() is b
    holder.set_rebalance_listener(c)
    assert holder.active is b  # takes effect at the next poll ...
    assert holder.resolve() is c  # ... (close/unsubscribe would use it right away)
    assert holder.begin_poll() is c


def test_set_none_removes_the_listener_including_one_from_subscribe() -> None:
    holder = RebalanceListenerHolder()
    with pytest.warns(DeprecationWarning):
        consumer_subscribe(holder, Named("a"))
    holder.set_rebalance_listener(Named("b"))
    holder.set_rebalance_listener(None)
    assert holder.begin_poll() is None


def test_holder_validates_listeners() -> None:
    holder = RebalanceListenerHolder()
    with pytest.raises(TypeError):
        holder.set_rebalance_listener(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        holder.set_from_subscribe(object())  # type: ignore[arg-type]
    assert holder.begin_poll() is None


def test_group_metadata_passes_through_the_view() -> None:
    meta = ConsumerGroupMetadata("g", 3, "m-1", None)

    class Meta:
        def group_metadata(self) -> ConsumerGroupMetadata:
            return meta

    seen: list[ConsumerGroupMetadata] = []

    class L(RebalanceListenerBase):
        def on_partitions_assigned(
            self, partitions: Collection[TopicPartition], consumer: RebalanceConsumer
        ) -> None:
            seen.append(consumer.group_metadata())

    invoke_callback(L(), ASSIGN, [], Meta())  # type: ignore[arg-type]
    assert seen == [meta]


def test_commit_async_future_passes_through() -> None:
    fut: Future[None] = Future()

    class C:
        def commit_async(self, offsets: Any = None, callback: Any = None) -> Future[None]:
            return fut

    view = _RebalanceConsumerView(C())  # type: ignore[arg-type]
    assert view.commit_async() is fut
