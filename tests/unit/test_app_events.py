"""Typed application events and the processor's dispatch table (network/events.py), without a thread."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from concurrent.futures import Future
from types import ModuleType
from typing import Any, cast

import pytest

import kafka_handoff.consumer.events as consumer_events
import kafka_handoff.producer.events as producer_events
import kafka_handoff.share.events as share_events
from kafka_handoff.network.events import (
    ApplicationEvent,
    ApplicationEventProcessor,
    RunClosure,
    TerminateTelemetryEvent,
)
from kafka_handoff.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.unit


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Double(ApplicationEvent):
    value: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Unhandled(ApplicationEvent):
    pass


def test_each_event_type_goes_to_its_own_handler_which_completes_the_future() -> None:
    processor = ApplicationEventProcessor()
    seen: list[int] = []

    def double(event: Double, now: int) -> int:
        seen.append(now)
        return event.value * 2

    processor.register_result(Double, double)
    event = Double(value=21)
    processor.process(event, 5)
    assert event.future.result(0) == 42
    assert seen == [5]


def test_an_event_without_a_handler_is_an_error_naming_its_type() -> None:
    processor = ApplicationEventProcessor()
    with pytest.raises(TypeError, match="Unhandled"):
        processor.process(Unhandled(), 0)


def test_a_second_handler_for_one_type_is_refused() -> None:
    processor = ApplicationEventProcessor()
    processor.register_result(Double, lambda e, now: None)
    with pytest.raises(ValueError, match="Double"):
        processor.register_result(Double, lambda e, now: None)


def test_events_are_frozen() -> None:
    event = Double(value=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.value = 2  # type: ignore[misc]


def test_run_closure_is_still_handled_by_every_processor() -> None:
    processor = ApplicationEventProcessor()
    ran: list[int] = []

    def fn(now: int, fut: Future[Any]) -> None:
        ran.append(now)
        fut.set_result("done")

    event = RunClosure(fn=fn)
    processor.process(event, 7)
    assert ran == [7] and event.future.result(0) == "done"


def _event_types(module: ModuleType) -> list[type[ApplicationEvent]]:
    return [
        obj
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if issubclass(obj, ApplicationEvent)
        and obj is not ApplicationEvent
        and obj.__module__ == module.__name__
    ]


def _consumer_processor() -> ApplicationEventProcessor:
    none: Any = None
    return consumer_events.ConsumerEventProcessor(
        subs=none,
        metadata=none,
        offsets=none,
        telemetry=none,
        coordinator=None,
        commits=None,
        membership=lambda: None,
        managers=lambda: [],
        extra_metadata_topics=set(),
        group_metadata=none,
        owned=lambda: None,
    )


def _share_processor() -> ApplicationEventProcessor:
    none: Any = None
    return share_events.ShareEventProcessor(membership=none, fetcher=none, metadata=none)


class _Recorder:
    """Stands in for the producer's metadata, telemetry and transaction managers: records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        def record(*args: Any) -> None:
            self.calls.append((name, *args))

        return record


def _producer_processor(txn: Any = None) -> producer_events.ProducerEventProcessor:
    none: Any = None
    return producer_events.ProducerEventProcessor(
        metadata=none,
        telemetry=none,
        txn=cast(Any, _Recorder() if txn is None else txn),
        add_topic=lambda t, now: None,
        purge=lambda error, now: 0,
    )


@pytest.mark.parametrize(
    ("module", "make"),
    [
        (consumer_events, _consumer_processor),
        (share_events, _share_processor),
        (producer_events, _producer_processor),
    ],
)
def test_every_event_type_of_a_client_is_frozen_and_has_a_handler(
    module: ModuleType, make: Callable[[], ApplicationEventProcessor]
) -> None:
    types = _event_types(module)
    assert len(types) >= 6
    processor = make()
    for event_type in types:
        assert event_type.__dataclass_params__.frozen, event_type  # type: ignore[attr-defined]
        assert processor.handles(event_type), f"{event_type.__name__} has no handler"

    if module is not share_events:
        assert processor.handles(TerminateTelemetryEvent)


def test_producer_events_reach_their_managers_on_the_network_thread_side() -> None:
    metadata, telemetry, txn = _Recorder(), _Recorder(), _Recorder()
    added: list[tuple[str, int]] = []
    processor = producer_events.ProducerEventProcessor(
        metadata=cast(Any, metadata),
        telemetry=cast(Any, telemetry),
        txn=cast(Any, txn),
        add_topic=lambda topic, now: added.append((topic, now)),
        purge=lambda error, now: 0,
    )
    wait = producer_events.TopicMetadataEvent(topic="t", deadline_ms=100)
    processor.process(wait, 3)
    assert added == [("t", 3)]
    assert metadata.calls == [("wait_for_update", wait.future, frozenset({"t"}))]
    assert not wait.future.done()  # completed by the metadata manager when the update arrives

    push = TerminateTelemetryEvent()
    processor.process(push, 4)
    assert telemetry.calls == [("terminate", 4, push.future)]

    begin = producer_events.BeginTransactionEvent()
    processor.process(begin, 5)
    assert begin.future.result(0) is None  # completes at once
    offsets = {TopicPartition("t", 0): OffsetAndMetadata(7)}
    group = ConsumerGroupMetadata("g")
    init = producer_events.InitTransactionsEvent()
    send = producer_events.SendOffsetsToTransactionEvent(offsets=offsets, group_metadata=group)
    commit = producer_events.CommitTransactionEvent()
    abort = producer_events.AbortTransactionEvent()
    for event in (init, send, commit, abort):
        processor.process(event, 6)
    assert txn.calls == [
        ("begin_transaction",),
        ("init_transactions", init.future),
        ("send_offsets", offsets, group, send.future),
        ("commit", commit.future),
        ("abort", abort.future, 6),
    ]


def test_a_producer_without_transactional_id_has_no_transaction_handlers() -> None:
    none: Any = None
    processor = producer_events.ProducerEventProcessor(
        metadata=none, telemetry=none, txn=None, add_topic=lambda t, now: None, purge=lambda error, now: 0
    )
    assert processor.handles(producer_events.TopicMetadataEvent)
    with pytest.raises(TypeError, match="InitTransactionsEvent"):
        processor.process(producer_events.InitTransactionsEvent(), 0)
