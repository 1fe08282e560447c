"""A minimal blocking Kafka client for the dev broker: readiness probes, metadata and topic creation.

One plain socket per :class:`ProbeConnection`, one request in flight, the project's wire codec
(:mod:`kafka_handoff.protocol.wire`) for framing.  It exists so that starting a broker needs nothing but
the project itself; real clients live in ``network/``, ``consumer/`` and ``admin/``.
"""

from __future__ import annotations

import itertools
import socket
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_handoff.config import parse_bootstrap_servers
from kafka_handoff.errors import KafkaTimeoutError, raise_for_code
from kafka_handoff.protocol.metadata import parse_metadata
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.protocol.wire import (
    FrameDecoder,
    ProtocolError,
    build_request,
    decode_response,
    encode_request,
    kio_version_range,
    response_correlation_id,
)
from kafka_handoff.types import ClusterMetadata

__all__ = [
    "API_VERSIONS",
    "CREATE_TOPICS",
    "METADATA",
    "ProbeConnection",
    "create_topic",
    "fetch_metadata",
    "parse_bootstrap",
    "wait_for_topic",
]

API_VERSIONS = ApiKey.API_VERSIONS
METADATA = ApiKey.METADATA
CREATE_TOPICS = ApiKey.CREATE_TOPICS
_API_VERSIONS_PROBE_VERSION = 3  # flexible; every 2.4+ broker answers it
_CLIENT_ID = "kafka-handoff-devbroker"


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``"host:port,host:port"`` -> ``[(host, port), ...]`` (``config.parse_bootstrap_servers``)."""
    return parse_bootstrap_servers(bootstrap)


class ProbeConnection:
    """A blocking connection to one broker.  :meth:`request` sends one request and waits for its answer."""

    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        self.host = host
        self.port = port
        self._timeout = timeout
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._decoder = FrameDecoder()
        self._correlation = itertools.count(1)
        self._versions: dict[int, tuple[int, int]] | None = None

    def __enter__(self) -> ProbeConnection:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def request(self, api_key: int, version: int, values: Mapping[str, Any]) -> Any:
        """Send one request built from plain values; return the decoded response entity."""
        correlation_id = next(self._correlation)
        payload = build_request(api_key, version, values)
        self._sock.sendall(encode_request(payload, correlation_id, _CLIENT_ID))
        deadline = time.monotonic() + self._timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(f"no response from {self.host}:{self.port} within {self._timeout}s")
            self._sock.settimeout(remaining)
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionResetError(f"{self.host}:{self.port} closed the connection")
            for frame in self._decoder.feed(chunk):
                got = response_correlation_id(frame)
                if got != correlation_id:
                    raise ProtocolError(f"expected correlation id {correlation_id}, got {got}")
                return decode_response(api_key, version, frame)

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """ApiVersions round trip; the broker's (min, max) version per api key."""
        response = self.request(
            API_VERSIONS,
            _API_VERSIONS_PROBE_VERSION,
            {"client_software_name": "kafka-handoff-devbroker", "client_software_version": "0"},
        )
        raise_for_code(response.error_code, "ApiVersions")
        self._versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
        return dict(self._versions)

    def version_for(self, api_key: int) -> int:
        """The highest version of ``api_key`` that both the broker and kio support."""
        versions = self._versions if self._versions is not None else self.api_versions()
        if api_key not in versions:
            raise ProtocolError(f"{self.host}:{self.port} does not support api key {api_key}")
        broker_min, broker_max = versions[api_key]
        kio_min, kio_max = kio_version_range(api_key)
        version = min(broker_max, kio_max)
        if version < max(broker_min, kio_min):
            raise ProtocolError(f"no common version of api key {api_key} with {self.host}:{self.port}")
        return version

    def metadata(self, topics: Iterable[str] | None = None) -> ClusterMetadata:
        """A Metadata request for ``topics`` (``None``: all topics), as :class:`ClusterMetadata`."""
        version = self.version_for(METADATA)
        values: dict[str, Any] = {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
            "include_cluster_authorized_operations": False,
        }
        return _to_cluster_metadata(self.request(METADATA, version, values))

    def create_topics(
        self,
        topics: Iterable[tuple[str, int, int, Mapping[str, str] | None]],
        timeout_ms: int = 30000,
    ) -> dict[str, tuple[int, str | None]]:
        """CreateTopics for (name, partitions, replication factor, configs); name -> (error code, message)."""
        version = self.version_for(CREATE_TOPICS)
        values = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": replication,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                }
                for name, partitions, replication, configs in topics
            ],
            "timeout": timeout_ms,
            "validate_only": False,
        }
        response = self.request(CREATE_TOPICS, version, values)
        return {str(t.name): (int(t.error_code), t.error_message) for t in response.topics}


def _to_cluster_metadata(response: Any) -> ClusterMetadata:
    return parse_metadata(response)


def fetch_metadata(
    bootstrap: str, topics: Iterable[str] | None = None, timeout: float = 5.0
) -> ClusterMetadata:
    """Metadata from the first bootstrap server that answers."""
    last: Exception | None = None
    for host, port in parse_bootstrap(bootstrap):
        try:
            with ProbeConnection(host, port, timeout) as conn:
                return conn.metadata(topics)
        except (OSError, ProtocolError, KafkaTimeoutError) as exc:
            last = exc
    raise ConnectionError(f"no bootstrap server of {bootstrap} answered a Metadata request: {last}")


def _topic_ready(meta: ClusterMetadata, name: str, partitions: int | None) -> bool:
    parts = meta.partitions_for(name)
    if not parts or (partitions is not None and len(parts) != partitions):
        return False
    return all(p.leader >= 0 and p.error_code == ErrorCode.none for p in parts)


def wait_for_topic(
    bootstrap: str, name: str, partitions: int | None = None, timeout: float = 30.0
) -> ClusterMetadata:
    """Poll Metadata on every bootstrap server until each lists ``name`` with a leader for every partition."""
    deadline = time.monotonic() + timeout
    pending = parse_bootstrap(bootstrap)
    meta: ClusterMetadata | None = None
    while True:
        still: list[tuple[str, int]] = []
        for host, port in pending:
            try:
                with ProbeConnection(host, port, min(5.0, timeout)) as conn:
                    meta = conn.metadata([name])
                if not _topic_ready(meta, name, partitions):
                    still.append((host, port))
            except (OSError, ProtocolError, KafkaTimeoutError):
                still.append((host, port))
        pending = still
        if not pending and meta is not None:
            return meta
        if time.monotonic() >= deadline:
            raise KafkaTimeoutError(f"topic {name!r} has no leader for every partition after {timeout:.0f}s")
        time.sleep(0.1)


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    replication: int = 1,
    configs: Mapping[str, str] | None = None,
    *,
    exist_ok: bool = False,
    timeout: float = 30.0,
) -> ClusterMetadata:
    """Create ``name`` and wait until every partition has a leader; returns that topic's metadata."""
    host, port = parse_bootstrap(bootstrap)[0]
    with ProbeConnection(host, port, timeout) as conn:
        result = conn.create_topics([(name, partitions, replication, configs)], int(timeout * 1000))
    code, message = result.get(name, (int(ErrorCode.unknown_server_error), "no result for the topic"))
    if not (exist_ok and code == int(ErrorCode.topic_already_exists)):
        raise_for_code(code, f"CreateTopics {name!r}: {message or ''}".rstrip(": "))
    return wait_for_topic(bootstrap, name, None if code else partitions, timeout)
