"""HTTP for the Schema Registry client: a keep-alive connection pool on ``http.client`` and the retry policy
(exponential backoff with full jitter, on 408/429/5xx answers and connection failures only)."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka_handoff._version import __version__
from kafka_handoff.schema_registry._model import SchemaRegistryError

RETRIABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
"""HTTP answers retried with backoff (the registry is busy, restarting or behind a failing proxy)."""

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
ACCEPT = "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json"

CONNECTION_ERRORS: tuple[type[BaseException], ...] = (OSError, http.client.HTTPException, ssl.SSLError)


@dataclass(frozen=True)
class Request:
    """One REST call: ``path`` is relative to the registry's base URL, already URL-encoded."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...] = ()
    body: Any = None

    def target(self) -> str:
        if not self.query:
            return self.path
        return self.path + "?" + urllib.parse.urlencode(self.query)


def query(**params: Any) -> tuple[tuple[str, str], ...]:
    """URL query parameters, ``None`` ones left out, booleans as ``true``/``false``."""
    out: list[tuple[str, str]] = []
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out.append((key, "true" if value else "false"))
        elif isinstance(value, (list, tuple)):
            out.extend((key, str(v)) for v in value)
        else:
            out.append((key, str(value)))
    return tuple(out)


def full_jitter_ms(wait_ms: int, max_wait_ms: int, attempt: int, rand: Callable[[], float]) -> float:
    """The wait before retry ``attempt + 1``: uniform in [0, min(wait_ms * 2**attempt, max_wait_ms))."""
    return rand() * min(wait_ms * (2.0 ** min(attempt, 62)), float(max_wait_ms))


class ConnectionPool:
    """Idle keep-alive connections per (scheme, host, port); a request takes one (or opens one), and gives it
    back when the answer was read whole and the server keeps it open."""

    def __init__(self, ssl_context: ssl.SSLContext | None, timeout_s: float, max_idle: int = 8) -> None:
        self._ssl = ssl_context
        self._timeout = timeout_s
        self._max_idle = max_idle
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _new(self, scheme: str, host: str, port: int) -> http.client.HTTPConnection:
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=self._timeout, context=self._ssl)
        return http.client.HTTPConnection(host, port, timeout=self._timeout)

    def request(
        self, base_url: str, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """One attempt: ``(status, body)``, or an ``OSError``/``HTTPException`` when no answer came."""
        parts = urllib.parse.urlsplit(base_url)
        scheme = parts.scheme
        host = parts.hostname or "localhost"
        port = parts.port or (443 if scheme == "https" else 80)
        key = (scheme, host, port)
        url = parts.path.rstrip("/") + "/" + target.lstrip("/")
        with self._lock:
            if self._closed:
                raise OSError("the Schema Registry client is closed")
            idle = self._idle.get(key)
            conn = idle.pop() if idle else None
        reused = conn is not None
        while True:
            if conn is None:
                conn = self._new(scheme, host, port)
            try:
                conn.request(method, url, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
            except CONNECTION_ERRORS as exc:
                conn.close()
                conn = None
                # A pooled connection the server closed meanwhile: once more on a fresh one (not a retry).
                stale = isinstance(
                    exc, (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)
                )
                if reused and stale:
                    reused = False
                    continue
                raise
            break
        if response.will_close:
            conn.close()
        else:
            with self._lock:
                bucket = self._idle.setdefault(key, [])
                if self._closed or len(bucket) >= self._max_idle:
                    conn.close()
                else:
                    bucket.append(conn)
        return response.status, data

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = [c for bucket in self._idle.values() for c in bucket]
            self._idle.clear()
        for conn in conns:
            conn.close()


def encode_body(body: Any) -> bytes | None:
    return None if body is None else json.dumps(body).encode()


def base_headers(has_body: bool) -> dict[str, str]:
    headers = {"Accept": ACCEPT, "User-Agent": f"kafka-handoff/{__version__}"}
    if has_body:
        headers["Content-Type"] = CONTENT_TYPE
    return headers


def decode(status: int, data: bytes) -> Any:
    if status == 204 or not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        raise SchemaRegistryError(
            status,
            SchemaRegistryError.UNKNOWN,
            f"the Schema Registry answered HTTP {status} with a body that is not JSON",
        ) from None


def error_from(status: int, data: bytes) -> SchemaRegistryError:
    """The registry's error answer as a :class:`SchemaRegistryError` (its ``error_code`` and ``message``)."""
    try:
        payload = json.loads(data) if data else None
    except ValueError:
        payload = None
    if isinstance(payload, dict) and ("message" in payload or "error_code" in payload):
        code = payload.get("error_code")
        return SchemaRegistryError(
            status,
            int(code) if isinstance(code, (int, float)) else SchemaRegistryError.UNKNOWN,
            str(payload.get("message") or ""),
        )
    text = data[:200].decode("utf-8", "replace").strip()
    return SchemaRegistryError(
        status,
        SchemaRegistryError.UNKNOWN,
        f"Unknown Schema Registry error: HTTP {status}" + (f": {text}" if text else ""),
    )


def unreachable(url: str, exc: BaseException, attempts: int) -> SchemaRegistryError:
    reason = exc.__class__.__name__ + (f": {exc}" if str(exc) else "")
    if isinstance(exc, socket.timeout):
        reason = "timed out"
    return SchemaRegistryError(
        SchemaRegistryError.UNKNOWN,
        SchemaRegistryError.UNKNOWN,
        f"cannot reach the Schema Registry at {url} after {attempts} attempt(s): {reason}",
    )
