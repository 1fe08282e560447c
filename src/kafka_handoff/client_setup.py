"""The set-up the clients (consumer, share consumer, producer, admin) do alike: their properties from the
constructor's arguments, their metadata manager wired to their network client, a group's coordinator; and
the application thread's wait for a network-thread result."""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from typing import TYPE_CHECKING, Any, TypeVar

from kafka_handoff.errors import KafkaTimeoutError, WakeupError
from kafka_handoff.group.coordinator import CoordinatorManager
from kafka_handoff.network.client import NetworkClient
from kafka_handoff.network.connection import RESPONSE_OVERHEAD_BYTES
from kafka_handoff.network.thread import BackgroundError
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.security import build_security

if TYPE_CHECKING:
    from kafka_handoff.config import _CommonFields

__all__ = ["client_properties", "drain_background", "group_coordinator", "metadata_and_client", "wait_result"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def client_properties(config: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A client's properties: ``config`` by dotted name, with keyword arguments (``linger_ms=10`` for
    ``linger.ms``) on top."""
    props = dict(config or {})
    for key, value in kwargs.items():
        props[key.replace("_", ".")] = value
    return props


def max_response_bytes(cfg: _CommonFields) -> int:
    """The largest response frame a client accepts once connected: ``fetch.max.bytes`` (or
    ``max.partition.fetch.bytes``, whichever is larger) plus :data:`RESPONSE_OVERHEAD_BYTES` for a consumer,
    that overhead alone (64 MiB) for clients that do not fetch."""
    fetch = max(int(getattr(cfg, "fetch_max_bytes", 0)), int(getattr(cfg, "max_partition_fetch_bytes", 0)))
    return fetch + RESPONSE_OVERHEAD_BYTES


def metadata_and_client(
    cfg: _CommonFields,
    client_id: str,
    *,
    allow_auto_topic_creation: bool,
    topics: Callable[[], frozenset[str] | None] = frozenset,
    max_in_flight_per_connection: int = 5,
) -> tuple[MetadataManager, NetworkClient]:
    """The metadata manager (``topics``: the topics it fetches, ``None`` for all) and the network
    client built from the common configs; the client learns the brokers from every metadata update."""
    metadata = MetadataManager(
        max_age_ms=cfg.metadata_max_age_ms,
        retry_backoff_ms=cfg.retry_backoff_ms,
        retry_backoff_max_ms=cfg.retry_backoff_max_ms,
        allow_auto_topic_creation=allow_auto_topic_creation,
        topics=topics,
    )
    client = NetworkClient(
        list(cfg.bootstrap_addresses()),
        client_id=client_id,
        request_timeout_ms=cfg.request_timeout_ms,
        connect_timeout_ms=cfg.socket_connection_setup_timeout_ms,
        reconnect_backoff_ms=cfg.reconnect_backoff_ms,
        reconnect_backoff_max_ms=cfg.reconnect_backoff_max_ms,
        receive_buffer_bytes=cfg.receive_buffer_bytes,
        send_buffer_bytes=cfg.send_buffer_bytes,
        max_in_flight_per_connection=max_in_flight_per_connection,
        security=build_security(cfg),
        max_response_bytes=max_response_bytes(cfg),
    )
    metadata.listeners.append(lambda cluster, now: client.update_brokers(cluster.brokers.values()))
    return metadata, client


def group_coordinator(
    group_id: str,
    cfg: _CommonFields,
    client: NetworkClient,
    on_error: Callable[[BaseException], None],
) -> CoordinatorManager:
    """The coordinator manager of ``group_id``, wired to ``client``: the client learns where the coordinator
    is, and losing the connection to it marks the coordinator unknown."""
    coordinator = CoordinatorManager(
        group_id,
        retry_backoff_ms=cfg.retry_backoff_ms,
        retry_backoff_max_ms=cfg.retry_backoff_max_ms,
        on_error=on_error,
    )
    coordinator.listeners.append(lambda node, now: client.set_coordinator(node, now))

    def on_disconnect(node: int, is_coordinator: bool, now: int) -> None:
        if is_coordinator:
            coordinator.mark_unknown(now, "connection lost", node_id=node)

    client.disconnect_listeners.append(on_disconnect)
    return coordinator


def wait_result(
    future: Future[T],
    timeout_ms: int,
    what: str,
    *,
    before_each: Callable[[], None],
    wakeup: threading.Event | None,
    cancel_on_timeout: bool,
) -> T:
    """Wait on the application thread for a network-thread result, in slices of at most 0.1 s.  Before
    each slice ``before_each()`` takes the network thread's events (it may raise their errors) and, unless
    ``wakeup`` is None, a pending ``wakeup()`` raises WakeupError.  After ``timeout_ms``: KafkaTimeoutError
    (the future cancelled first when ``cancel_on_timeout``)."""
    deadline = time.monotonic() + timeout_ms / 1000.0
    while True:
        before_each()
        if wakeup is not None and wakeup.is_set():
            wakeup.clear()
            raise WakeupError(f"{what} was interrupted by wakeup()")
        remaining = deadline - time.monotonic()
        # concurrent.futures.wait, not result(timeout): a future failed with KafkaTimeoutError (a
        # TimeoutError) must surface as that error, not look like "not done yet".
        done, _ = futures_wait([future], max(0.0, min(remaining, 0.1)))
        if done:
            return future.result()
        if remaining <= 0:
            if cancel_on_timeout:
                future.cancel()
            raise KafkaTimeoutError(f"{what} did not complete within {timeout_ms} ms")


def drain_background(
    background: queue.SimpleQueue[Any],
    errors: collections.deque[BaseException],
    on_event: Callable[[Any], None],
) -> BaseException | None:
    """Take every event the network thread posted, in order, on the application thread; raises nothing.
    A :class:`BackgroundError` queues its error in ``errors``, once: the same error again while the
    application has not seen the first (e.g. every heartbeat) is dropped, so the queue does not grow while
    it is busy.  Any other event goes to ``on_event`` (application-thread work such as a user's callback);
    what that raises is queued too.  Returns the first fatal error among the events, if any."""
    fatal: BaseException | None = None
    while True:
        try:
            event = background.get_nowait()
        except queue.Empty:
            return fatal
        if isinstance(event, BackgroundError):
            error = event.error
            if event.fatal and fatal is None:
                fatal = error
            if any(type(e) is type(error) and str(e) == str(error) for e in errors):
                log.debug("background error repeated before the application saw it: %r", error)
                continue
            errors.append(error)
            continue
        try:
            on_event(event)
        except Exception as exc:  # e.g. a user's callback raised: the application sees it once
            errors.append(exc)
