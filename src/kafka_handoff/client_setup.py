"""The set-up the clients (consumer, share consumer, producer, admin) do alike: their properties from the
constructor's arguments, their metadata manager wired to their network client, and a group's coordinator."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kafka_handoff.group.coordinator import CoordinatorManager
from kafka_handoff.network.client import NetworkClient
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.security import build_security

if TYPE_CHECKING:
    from kafka_handoff.config import _CommonFields

__all__ = ["client_properties", "group_coordinator", "metadata_and_client"]


def client_properties(config: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A client's properties: ``config`` by dotted name, with keyword arguments (``linger_ms=10`` for
    ``linger.ms``) on top."""
    props = dict(config or {})
    for key, value in kwargs.items():
        props[key.replace("_", ".")] = value
    return props


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
