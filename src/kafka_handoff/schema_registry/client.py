"""``SchemaRegistryClient`` and ``AsyncSchemaRegistryClient``: the Confluent Schema Registry REST API with
confluent-kafka's method names, caches and retry behaviour.

Each call is written once as a generator that yields the REST requests it needs and receives their decoded
answers (or has the :class:`SchemaRegistryError` thrown into it); the sync client drives it on the calling
thread, the asyncio client on the event loop (each HTTP attempt in a worker thread, backoff with
``asyncio.sleep``)."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Generator, Hashable, Mapping
from typing import Any, Generic, Literal, TypeVar

from kafka_handoff.errors import KafkaError
from kafka_handoff.schema_registry._config import RegistryConfig, parse_config
from kafka_handoff.schema_registry._http import (
    CONNECTION_ERRORS,
    RETRIABLE_STATUS,
    ConnectionPool,
    Request,
    base_headers,
    decode,
    encode_body,
    error_from,
    full_jitter_ms,
    query,
    unreachable,
)
from kafka_handoff.schema_registry._model import (
    RegisteredSchema,
    Schema,
    SchemaRegistryError,
    SchemaVersion,
    ServerConfig,
)

__all__ = ["AsyncSchemaRegistryClient", "SchemaRegistryClient"]

log = logging.getLogger("kafka_handoff.schema_registry")

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
Op = Generator[Request, Any, T]
Version = int | Literal["latest"]


def _enc(name: str) -> str:
    return urllib.parse.quote(name, safe="")


class _LruCache(Generic[K, V]):
    """A thread-safe LRU map of at most ``capacity`` entries; with ``ttl_s``, entries expire that long after
    they were stored (read on ``clock``)."""

    def __init__(
        self, capacity: int, ttl_s: float | None = None, clock: Callable[[], float] = time.monotonic
    ):
        self._capacity = capacity
        self._ttl = ttl_s
        self._clock = clock
        self._data: OrderedDict[K, tuple[V, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                return None
            value, expires = entry
            if self._ttl is not None and self._clock() >= expires:
                del self._data[key]
                return None
            self._data.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        expires = self._clock() + self._ttl if self._ttl is not None else 0.0
        with self._lock:
            self._data[key] = (value, expires)
            self._data.move_to_end(key)
            while len(self._data) > self._capacity:
                self._data.popitem(last=False)

    def remove_if(self, predicate: Callable[[K], bool]) -> None:
        with self._lock:
            for key in [k for k in self._data if predicate(k)]:
                del self._data[key]

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)


class _ClientBase:
    """Config, caches and the REST calls (as generators) shared by the sync and asyncio clients."""

    def __init__(
        self,
        conf: Mapping[str, Any],
        *,
        _pool: Any = None,
        _sleep: Callable[[float], Any] | None = None,
        _rand: Callable[[], float] = random.random,
        _clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._conf: RegistryConfig = parse_config(conf)
        c = self._conf
        self._pool = _pool if _pool is not None else ConnectionPool(c.ssl_context, c.timeout_s)
        self._sleep_hook = _sleep
        self._rand = _rand
        self._clock = _clock
        self._by_id: _LruCache[int, Schema] = _LruCache(c.cache_capacity, clock=_clock)
        self._by_schema: _LruCache[tuple[str, Schema], RegisteredSchema] = _LruCache(
            c.cache_capacity, clock=_clock
        )
        self._by_version: _LruCache[tuple[str, int], RegisteredSchema] = _LruCache(
            c.cache_capacity, clock=_clock
        )
        self._latest: _LruCache[Hashable, RegisteredSchema] = _LruCache(
            c.cache_capacity, c.cache_latest_ttl_s, clock=_clock
        )
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={','.join(self._conf.urls)!r}, auth={self._conf.auth.kind})"

    def config(self) -> dict[str, Any]:
        """The configuration this client was made with, secrets replaced by ``[hidden]``."""
        return dict(self._conf.redacted)

    # ------------------------------------------------------------------------------------------- transport
    def _auth_headers(self) -> dict[str, str]:
        """The credentials' headers; a token that cannot be had is a :class:`SchemaRegistryError` (its cause
        the token source's error)."""
        try:
            return self._conf.auth.headers()
        except KafkaError as exc:
            raise SchemaRegistryError(-1, -1, f"no credentials for the Schema Registry: {exc}") from exc

    def _headers(self, req: Request) -> dict[str, str]:
        headers = base_headers(req.body is not None)
        headers.update(self._auth_headers())
        return headers

    def _wait_ms(self, attempt: int) -> float:
        c = self._conf
        return full_jitter_ms(c.retries_wait_ms, c.retries_max_wait_ms, attempt, self._rand)

    def _plan(self, status: int | None, attempt: int, url_index: int) -> str:
        """After one attempt: ``"retry"`` (same URL, after a backoff), ``"next"`` (fail over to the next
        URL) or ``"fail"``."""
        retriable = status is None or status in RETRIABLE_STATUS
        if not retriable:
            return "fail"
        if attempt < self._conf.max_retries:
            return "retry"
        return "next" if url_index < len(self._conf.urls) - 1 else "fail"

    # ------------------------------------------------------------------------------------------- cache hooks
    def _forget_subject(self, subject: str, schemas: bool) -> None:
        self._by_version.remove_if(lambda k: k[0] == subject)
        self._latest.remove_if(lambda k: k == subject or (isinstance(k, tuple) and k[0] == subject))
        if schemas:
            self._by_schema.remove_if(lambda k: k[0] == subject)

    def clear_latest_caches(self) -> None:
        """Forget the cached latest versions (``get_latest_version``/``get_latest_with_metadata``)."""
        self._latest.clear()

    def clear_caches(self) -> None:
        """Forget everything cached."""
        self._latest.clear()
        self._by_id.clear()
        self._by_schema.clear()
        self._by_version.clear()

    # ------------------------------------------------------------------------------------------- operations
    def _op_register(self, subject: str, schema: Schema, normalize: bool) -> Op[RegisteredSchema]:
        cached = self._by_schema.get((subject, schema))
        if cached is not None:
            return cached
        body = yield Request(
            "POST", f"subjects/{_enc(subject)}/versions", query(normalize=normalize), schema.to_dict()
        )
        version = body.get("version")
        result = RegisteredSchema(
            schema_id=int(body["id"]),
            schema=schema,
            subject=body.get("subject") or subject,
            version=int(version) if version is not None else None,
            guid=body.get("guid"),
        )
        self._by_schema.put((subject, schema), result)
        self._by_id.put(result.schema_id, schema)
        self._latest.remove_if(lambda k: k == subject or (isinstance(k, tuple) and k[0] == subject))
        return result

    def _op_get_schema(
        self, schema_id: int, subject_name: str | None, fmt: str | None, reference_format: str | None
    ) -> Op[Schema]:
        cacheable = fmt is None and reference_format is None
        if cacheable:
            cached = self._by_id.get(schema_id)
            if cached is not None:
                return cached
        body = yield Request(
            "GET",
            f"schemas/ids/{int(schema_id)}",
            query(subject=subject_name, format=fmt, reference_format=reference_format),
        )
        schema = Schema.from_dict(body)
        if cacheable:
            self._by_id.put(schema_id, schema)
        return schema

    def _op_get_schema_by_guid(self, guid: str, fmt: str | None) -> Op[Schema]:
        body = yield Request("GET", f"schemas/guids/{_enc(guid)}", query(format=fmt))
        return Schema.from_dict(body)

    def _op_get_json(self, req: Request) -> Op[Any]:
        return (yield req)

    def _op_get_schema_versions(
        self, schema_id: int, subject_name: str | None, deleted: bool, offset: int, limit: int
    ) -> Op[list[SchemaVersion]]:
        body = yield Request(
            "GET",
            f"schemas/ids/{int(schema_id)}/versions",
            query(subject=subject_name, deleted=deleted or None, offset=offset, limit=limit),
        )
        return [SchemaVersion.from_dict(item) for item in body or ()]

    def _op_lookup(
        self, subject: str, schema: Schema, normalize: bool, fmt: str | None, deleted: bool
    ) -> Op[RegisteredSchema]:
        cached = self._by_schema.get((subject, schema))
        if cached is not None and cached.version is not None:
            return cached
        body = yield Request(
            "POST",
            f"subjects/{_enc(subject)}",
            query(normalize=normalize, deleted=deleted, format=fmt),
            schema.to_dict(),
        )
        result = RegisteredSchema.from_dict(body, schema=schema)
        if result.subject is None:
            result = RegisteredSchema(result.schema_id, schema, subject, result.version, result.guid)
        self._by_schema.put((subject, schema), result)
        self._by_id.put(result.schema_id, schema)
        return result

    def _op_delete_subject(self, subject: str, permanent: bool) -> Op[list[int]]:
        body = yield Request("DELETE", f"subjects/{_enc(subject)}", query(permanent=permanent or None))
        self._forget_subject(subject, schemas=True)
        return [int(v) for v in body or ()]

    def _op_get_version(
        self, subject: str, version: Version, deleted: bool, fmt: str | None
    ) -> Op[RegisteredSchema]:
        use_cache = version != "latest" and not deleted and fmt is None
        if use_cache:
            cached = self._by_version.get((subject, int(version)))
            if cached is not None:
                return cached
        body = yield Request(
            "GET", f"subjects/{_enc(subject)}/versions/{version}", query(deleted=deleted or None, format=fmt)
        )
        result = RegisteredSchema.from_dict(body)
        if fmt is None and result.version is not None:
            self._by_version.put((subject, result.version), result)
            self._by_id.put(result.schema_id, result.schema)
        return result

    def _op_get_latest(self, subject: str, fmt: str | None) -> Op[RegisteredSchema]:
        key: Hashable = subject if fmt is None else (subject, "format", fmt)
        cached = self._latest.get(key)
        if cached is not None:
            return cached
        result = yield from self._op_get_version(subject, "latest", False, fmt)
        self._latest.put(key, result)
        return result

    def _op_get_latest_with_metadata(
        self, subject: str, metadata: Mapping[str, str], deleted: bool, fmt: str | None
    ) -> Op[RegisteredSchema]:
        key = (subject, frozenset(metadata.items()), deleted, fmt)
        cached = self._latest.get(key)
        if cached is not None:
            return cached
        body = yield Request(
            "GET",
            f"subjects/{_enc(subject)}/metadata",
            query(deleted=deleted or None, format=fmt, key=list(metadata), value=list(metadata.values())),
        )
        result = RegisteredSchema.from_dict(body)
        self._latest.put(key, result)
        return result

    def _op_delete_version(self, subject: str, version: Version, permanent: bool) -> Op[int]:
        body = yield Request(
            "DELETE", f"subjects/{_enc(subject)}/versions/{version}", query(permanent=permanent or None)
        )
        self._forget_subject(subject, schemas=True)
        return int(body)

    def _op_set_compatibility(self, subject: str | None, level: str | None) -> Op[str]:
        if level is None:
            from kafka_handoff.errors import ConfigError

            raise ConfigError("set_compatibility needs a level (e.g. BACKWARD, FULL, NONE)")
        path = "config" if subject is None else f"config/{_enc(subject)}"
        body = yield Request("PUT", path, (), {"compatibility": str(level).upper()})
        return str(body.get("compatibility") or body.get("compatibilityLevel") or str(level).upper())

    def _op_get_config(self, subject: str | None, default_to_global: bool) -> Op[ServerConfig]:
        path = "config" if subject is None else f"config/{_enc(subject)}"
        q = query(defaultToGlobal=True) if subject is not None and default_to_global else ()
        body = yield Request("GET", path, q)
        return ServerConfig.from_dict(body)

    def _op_get_compatibility(self, subject: str | None, default_to_global: bool) -> Op[str]:
        config = yield from self._op_get_config(subject, default_to_global)
        return str(config.compatibility_level or "")

    def _op_set_config(self, subject: str | None, config: ServerConfig | None) -> Op[ServerConfig]:
        if config is None:
            from kafka_handoff.errors import ConfigError

            raise ConfigError("set_config needs a ServerConfig")
        path = "config" if subject is None else f"config/{_enc(subject)}"
        body = yield Request("PUT", path, (), config.to_dict())
        return ServerConfig.from_dict(body)

    def _op_delete_config(self, subject: str | None) -> Op[ServerConfig]:
        path = "config" if subject is None else f"config/{_enc(subject)}"
        body = yield Request("DELETE", path)
        return ServerConfig.from_dict(body)

    def _op_test_compatibility(
        self, subject: str, schema: Schema, version: Version | None, normalize: bool, verbose: bool
    ) -> Op[bool]:
        path = f"compatibility/subjects/{_enc(subject)}/versions"
        if version is not None:
            path += f"/{version}"
        body = yield Request("POST", path, query(normalize=normalize, verbose=verbose), schema.to_dict())
        compatible = bool(body.get("is_compatible"))
        if not compatible and body.get("messages"):
            log.debug("schema incompatible with %s version %s: %s", subject, version, body.get("messages"))
        return compatible

    def _op_mode(self, method: str, subject: str | None, mode: str | None, force: bool) -> Op[str]:
        path = "mode" if subject is None else f"mode/{_enc(subject)}"
        q = query(force=force or None) if method == "PUT" else ()
        body = yield Request(method, path, q, {"mode": mode.upper()} if mode is not None else None)
        return str((body or {}).get("mode", ""))


class SchemaRegistryClient(_ClientBase):
    """A Schema Registry client (Confluent's REST API, as Confluent's registry, Apicurio's ``ccompat`` API and
    Karapace serve it), with confluent-kafka's configuration keys and method names.

    Configuration: ``url`` (required; comma-separated for fail-over), ``basic.auth.user.info``
    (``user:password``), ``basic.auth.credentials.source`` (``USER_INFO``, ``URL``, ``SASL_INHERIT``),
    ``bearer.auth.credentials.source`` (``STATIC_TOKEN`` with ``bearer.auth.token``; ``OAUTHBEARER`` with
    ``bearer.auth.issuer.endpoint.url``, ``bearer.auth.client.id``, ``bearer.auth.client.secret``,
    ``bearer.auth.scope``; ``CUSTOM`` with ``bearer.auth.custom.provider.function``/``.config``),
    ``bearer.auth.logical.cluster``, ``bearer.auth.identity.pool.id``, ``ssl.ca.location``,
    ``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password``, ``timeout`` (seconds, 10),
    ``cache.capacity`` (1000), ``cache.latest.ttl.sec`` (none: until :meth:`clear_latest_caches`),
    ``max.retries`` (3), ``retries.wait.ms`` (1000), ``retries.max.wait.ms`` (20000).

    Thread-safe.  Ids and schemas are cached (id -> schema, (subject, schema) -> registration,
    (subject, version) -> registration); HTTP 408/429/5xx answers and connection failures are retried with
    exponential backoff and full jitter; every failure is a :class:`SchemaRegistryError`."""

    def __init__(self, conf: Mapping[str, Any], **hooks: Any) -> None:
        super().__init__(conf, **hooks)
        self._sleep: Callable[[float], Any] = self._sleep_hook or time.sleep

    def __enter__(self) -> SchemaRegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the idle connections and stop the OAuth token refresher (the client is unusable then)."""
        self._closed = True
        self._pool.close()
        self._conf.auth.close()

    def _send(self, req: Request) -> Any:
        headers = self._headers(req)
        payload = encode_body(req.body)
        target = req.target()
        last: SchemaRegistryError | None = None
        for index, url in enumerate(self._conf.urls):
            attempt = 0
            while True:
                status: int | None
                try:
                    status, data = self._pool.request(url, req.method, target, payload, headers)
                except CONNECTION_ERRORS as exc:
                    if self._closed:
                        raise SchemaRegistryError(-1, -1, "the Schema Registry client is closed") from None
                    status, data, last = None, b"", unreachable(url, exc, attempt + 1)
                else:
                    if 200 <= status < 300:
                        return decode(status, data)
                    last = error_from(status, data)
                plan = self._plan(status, attempt, index)
                if plan == "retry":
                    wait = self._wait_ms(attempt)
                    log.info("Schema Registry %s %s: %s; retrying in %.0f ms", req.method, url, last, wait)
                    self._sleep(wait / 1000.0)
                    attempt += 1
                    continue
                if plan == "next":
                    break
                raise last
        assert last is not None
        raise last

    def _run(self, op: Op[T]) -> T:
        try:
            req = next(op)
            while True:
                try:
                    answer = self._send(req)
                except SchemaRegistryError as exc:
                    req = op.throw(exc)
                else:
                    req = op.send(answer)
        except StopIteration as stop:
            result: T = stop.value
            return result

    # ------------------------------------------------------------------------------------------- schemas
    def register_schema(self, subject_name: str, schema: Schema, normalize_schemas: bool = False) -> int:
        """Register ``schema`` under ``subject_name``; its id (the same id for the same schema)."""
        return self._run(self._op_register(subject_name, schema, normalize_schemas)).schema_id

    def register_schema_full_response(
        self, subject_name: str, schema: Schema, normalize_schemas: bool = False
    ) -> RegisteredSchema:
        """Register ``schema`` under ``subject_name``; the registration (id, and version when the registry
        says it)."""
        return self._run(self._op_register(subject_name, schema, normalize_schemas))

    def get_schema(
        self,
        schema_id: int,
        subject_name: str | None = None,
        fmt: str | None = None,
        reference_format: str | None = None,
    ) -> Schema:
        """The schema with id ``schema_id`` (cached)."""
        return self._run(self._op_get_schema(schema_id, subject_name, fmt, reference_format))

    def get_schema_by_guid(self, guid: str, fmt: str | None = None) -> Schema:
        """The schema with this GUID (registries that assign GUIDs only)."""
        return self._run(self._op_get_schema_by_guid(guid, fmt))

    def get_schema_types(self) -> list[str]:
        """The schema types the registry supports (e.g. ``["AVRO", "JSON", "PROTOBUF"]``)."""
        return list(self._run(self._op_get_json(Request("GET", "schemas/types"))) or ())

    def get_subjects_by_schema_id(
        self,
        schema_id: int,
        subject_name: str | None = None,
        deleted: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[str]:
        """The subjects under which the schema ``schema_id`` is registered."""
        q = query(subject=subject_name, deleted=deleted or None, offset=offset, limit=limit)
        return list(
            self._run(self._op_get_json(Request("GET", f"schemas/ids/{int(schema_id)}/subjects", q))) or ()
        )

    def get_schema_versions(
        self,
        schema_id: int,
        subject_name: str | None = None,
        deleted: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[SchemaVersion]:
        """The (subject, version) pairs of the schema ``schema_id``."""
        return self._run(self._op_get_schema_versions(schema_id, subject_name, deleted, offset, limit))

    def lookup_schema(
        self,
        subject_name: str,
        schema: Schema,
        normalize_schemas: bool = False,
        fmt: str | None = None,
        deleted: bool = False,
    ) -> RegisteredSchema:
        """The registration of ``schema`` under ``subject_name`` (HTTP 404 when not registered there)."""
        return self._run(self._op_lookup(subject_name, schema, normalize_schemas, fmt, deleted))

    # ------------------------------------------------------------------------------------------- subjects
    def get_subjects(
        self,
        subject_prefix: str | None = None,
        deleted: bool = False,
        deleted_only: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[str]:
        """The registered subjects."""
        q = query(
            subjectPrefix=subject_prefix,
            deleted=deleted or None,
            deletedOnly=deleted_only or None,
            offset=offset,
            limit=limit,
        )
        return list(self._run(self._op_get_json(Request("GET", "subjects", q))) or ())

    def delete_subject(self, subject_name: str, permanent: bool = False) -> list[int]:
        """Delete a subject (soft; ``permanent=True`` for a hard delete, after a soft one); the versions
        deleted."""
        return self._run(self._op_delete_subject(subject_name, permanent))

    def get_latest_version(self, subject_name: str, fmt: str | None = None) -> RegisteredSchema:
        """The subject's latest version (cached; ``cache.latest.ttl.sec`` bounds for how long)."""
        return self._run(self._op_get_latest(subject_name, fmt))

    def get_latest_with_metadata(
        self, subject_name: str, metadata: Mapping[str, str], deleted: bool = False, fmt: str | None = None
    ) -> RegisteredSchema:
        """The subject's latest version whose metadata has these properties (data-contract registries)."""
        return self._run(self._op_get_latest_with_metadata(subject_name, metadata, deleted, fmt))

    def get_version(
        self, subject_name: str, version: Version = "latest", deleted: bool = False, fmt: str | None = None
    ) -> RegisteredSchema:
        """Version ``version`` (a number, or ``"latest"``) of the subject."""
        return self._run(self._op_get_version(subject_name, version, deleted, fmt))

    def get_versions(
        self,
        subject_name: str,
        deleted: bool = False,
        deleted_only: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[int]:
        """The subject's version numbers."""
        q = query(deleted=deleted or None, deletedOnly=deleted_only or None, offset=offset, limit=limit)
        return [
            int(v)
            for v in self._run(
                self._op_get_json(Request("GET", f"subjects/{_enc(subject_name)}/versions", q))
            )
            or ()
        ]

    def get_referenced_by(
        self, subject_name: str, version: Version = "latest", offset: int = 0, limit: int = -1
    ) -> list[int]:
        """The ids of the schemas that reference this subject version."""
        req = Request(
            "GET",
            f"subjects/{_enc(subject_name)}/versions/{version}/referencedby",
            query(offset=offset, limit=limit),
        )
        return [int(v) for v in self._run(self._op_get_json(req)) or ()]

    def delete_version(self, subject_name: str, version: Version, permanent: bool = False) -> int:
        """Delete one version (soft; ``permanent=True`` for a hard delete, after a soft one); its number."""
        return self._run(self._op_delete_version(subject_name, version, permanent))

    # ----------------------------------------------------------------------------------- compatibility
    def test_compatibility(
        self,
        subject_name: str,
        schema: Schema,
        version: Version = "latest",
        normalize: bool = False,
        verbose: bool = False,
    ) -> bool:
        """Whether ``schema`` is compatible with version ``version`` of the subject, under its level."""
        return self._run(self._op_test_compatibility(subject_name, schema, version, normalize, verbose))

    def test_compatibility_all_versions(
        self, subject_name: str, schema: Schema, normalize: bool = False, verbose: bool = False
    ) -> bool:
        """Whether ``schema`` is compatible with the subject's versions its level checks against."""
        return self._run(self._op_test_compatibility(subject_name, schema, None, normalize, verbose))

    def set_compatibility(self, subject_name: str | None = None, level: str | None = None) -> str:
        """Set the compatibility level of a subject (or the registry's, without one); the level set."""
        return self._run(self._op_set_compatibility(subject_name, level))

    def get_compatibility(self, subject_name: str | None = None, default_to_global: bool = False) -> str:
        """The compatibility level of a subject (or the registry's, without one)."""
        return self._run(self._op_get_compatibility(subject_name, default_to_global))

    def set_config(self, subject_name: str | None = None, config: ServerConfig | None = None) -> ServerConfig:
        """Set a subject's config (or the registry's, without one)."""
        return self._run(self._op_set_config(subject_name, config))

    def get_config(self, subject_name: str | None = None, default_to_global: bool = False) -> ServerConfig:
        """A subject's config (or the registry's, without one)."""
        return self._run(self._op_get_config(subject_name, default_to_global))

    def delete_config(self, subject_name: str | None = None) -> ServerConfig:
        """Remove a subject's config (it falls back to the registry's); the config removed."""
        return self._run(self._op_delete_config(subject_name))

    # ------------------------------------------------------------------------------------------- modes
    def get_mode(self, subject_name: str | None = None) -> str:
        """A subject's mode (``READWRITE``, ``READONLY``, ``IMPORT``), or the registry's without one."""
        return self._run(self._op_mode("GET", subject_name, None, False))

    def update_mode(self, subject_name: str, mode: str, force: bool = False) -> str:
        """Set a subject's mode; the mode set."""
        return self._run(self._op_mode("PUT", subject_name, mode, force))

    def set_mode(self, subject_name: str | None, mode: str, force: bool = False) -> str:
        """Set a subject's mode, or the registry's with ``subject_name=None``; the mode set."""
        return self._run(self._op_mode("PUT", subject_name, mode, force))

    def delete_mode(self, subject_name: str) -> str:
        """Remove a subject's mode (it falls back to the registry's)."""
        return self._run(self._op_mode("DELETE", subject_name, None, False))

    def get_global_mode(self) -> str:
        """The registry's mode."""
        return self._run(self._op_mode("GET", None, None, False))

    def update_global_mode(self, mode: str, force: bool = False) -> str:
        """Set the registry's mode; the mode set."""
        return self._run(self._op_mode("PUT", None, mode, force))

    def get_contexts(self, offset: int = 0, limit: int = -1) -> list[str]:
        """The registry's schema contexts."""
        return list(
            self._run(self._op_get_json(Request("GET", "contexts", query(offset=offset, limit=limit)))) or ()
        )


class AsyncSchemaRegistryClient(_ClientBase):
    """:class:`SchemaRegistryClient` for asyncio: the same configuration, caches and methods, as coroutines.
    Each HTTP attempt runs in a worker thread (the event loop never blocks on the network); backoff waits
    with ``asyncio.sleep``."""

    def __init__(self, conf: Mapping[str, Any], **hooks: Any) -> None:
        super().__init__(conf, **hooks)
        self._asleep: Callable[[float], Any] = self._sleep_hook or asyncio.sleep

    async def __aenter__(self) -> AsyncSchemaRegistryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the idle connections and stop the OAuth token refresher."""
        self._closed = True
        self._pool.close()
        self._conf.auth.close()

    async def _send(self, req: Request) -> Any:
        if self._conf.auth.dynamic:
            auth = await asyncio.to_thread(self._auth_headers)
        else:
            auth = self._auth_headers()
        headers = base_headers(req.body is not None)
        headers.update(auth)
        payload = encode_body(req.body)
        target = req.target()
        last: SchemaRegistryError | None = None
        for index, url in enumerate(self._conf.urls):
            attempt = 0
            while True:
                status: int | None
                try:
                    status, data = await asyncio.to_thread(
                        self._pool.request, url, req.method, target, payload, headers
                    )
                except CONNECTION_ERRORS as exc:
                    if self._closed:
                        raise SchemaRegistryError(-1, -1, "the Schema Registry client is closed") from None
                    status, data, last = None, b"", unreachable(url, exc, attempt + 1)
                else:
                    if 200 <= status < 300:
                        return decode(status, data)
                    last = error_from(status, data)
                plan = self._plan(status, attempt, index)
                if plan == "retry":
                    wait = self._wait_ms(attempt)
                    log.info("Schema Registry %s %s: %s; retrying in %.0f ms", req.method, url, last, wait)
                    await self._asleep(wait / 1000.0)
                    attempt += 1
                    continue
                if plan == "next":
                    break
                raise last
        assert last is not None
        raise last

    async def _run(self, op: Op[T]) -> T:
        try:
            req = next(op)
            while True:
                try:
                    answer = await self._send(req)
                except SchemaRegistryError as exc:
                    req = op.throw(exc)
                else:
                    req = op.send(answer)
        except StopIteration as stop:
            result: T = stop.value
            return result

    async def register_schema(
        self, subject_name: str, schema: Schema, normalize_schemas: bool = False
    ) -> int:
        return (await self._run(self._op_register(subject_name, schema, normalize_schemas))).schema_id

    async def register_schema_full_response(
        self, subject_name: str, schema: Schema, normalize_schemas: bool = False
    ) -> RegisteredSchema:
        return await self._run(self._op_register(subject_name, schema, normalize_schemas))

    async def get_schema(
        self,
        schema_id: int,
        subject_name: str | None = None,
        fmt: str | None = None,
        reference_format: str | None = None,
    ) -> Schema:
        return await self._run(self._op_get_schema(schema_id, subject_name, fmt, reference_format))

    async def get_schema_by_guid(self, guid: str, fmt: str | None = None) -> Schema:
        return await self._run(self._op_get_schema_by_guid(guid, fmt))

    async def get_schema_types(self) -> list[str]:
        return list(await self._run(self._op_get_json(Request("GET", "schemas/types"))) or ())

    async def get_subjects_by_schema_id(
        self,
        schema_id: int,
        subject_name: str | None = None,
        deleted: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[str]:
        q = query(subject=subject_name, deleted=deleted or None, offset=offset, limit=limit)
        req = Request("GET", f"schemas/ids/{int(schema_id)}/subjects", q)
        return list(await self._run(self._op_get_json(req)) or ())

    async def get_schema_versions(
        self,
        schema_id: int,
        subject_name: str | None = None,
        deleted: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[SchemaVersion]:
        return await self._run(self._op_get_schema_versions(schema_id, subject_name, deleted, offset, limit))

    async def lookup_schema(
        self,
        subject_name: str,
        schema: Schema,
        normalize_schemas: bool = False,
        fmt: str | None = None,
        deleted: bool = False,
    ) -> RegisteredSchema:
        return await self._run(self._op_lookup(subject_name, schema, normalize_schemas, fmt, deleted))

    async def get_subjects(
        self,
        subject_prefix: str | None = None,
        deleted: bool = False,
        deleted_only: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[str]:
        q = query(
            subjectPrefix=subject_prefix,
            deleted=deleted or None,
            deletedOnly=deleted_only or None,
            offset=offset,
            limit=limit,
        )
        return list(await self._run(self._op_get_json(Request("GET", "subjects", q))) or ())

    async def delete_subject(self, subject_name: str, permanent: bool = False) -> list[int]:
        return await self._run(self._op_delete_subject(subject_name, permanent))

    async def get_latest_version(self, subject_name: str, fmt: str | None = None) -> RegisteredSchema:
        return await self._run(self._op_get_latest(subject_name, fmt))

    async def get_latest_with_metadata(
        self, subject_name: str, metadata: Mapping[str, str], deleted: bool = False, fmt: str | None = None
    ) -> RegisteredSchema:
        return await self._run(self._op_get_latest_with_metadata(subject_name, metadata, deleted, fmt))

    async def get_version(
        self, subject_name: str, version: Version = "latest", deleted: bool = False, fmt: str | None = None
    ) -> RegisteredSchema:
        return await self._run(self._op_get_version(subject_name, version, deleted, fmt))

    async def get_versions(
        self,
        subject_name: str,
        deleted: bool = False,
        deleted_only: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[int]:
        q = query(deleted=deleted or None, deletedOnly=deleted_only or None, offset=offset, limit=limit)
        req = Request("GET", f"subjects/{_enc(subject_name)}/versions", q)
        return [int(v) for v in await self._run(self._op_get_json(req)) or ()]

    async def get_referenced_by(
        self, subject_name: str, version: Version = "latest", offset: int = 0, limit: int = -1
    ) -> list[int]:
        req = Request(
            "GET",
            f"subjects/{_enc(subject_name)}/versions/{version}/referencedby",
            query(offset=offset, limit=limit),
        )
        return [int(v) for v in await self._run(self._op_get_json(req)) or ()]

    async def delete_version(self, subject_name: str, version: Version, permanent: bool = False) -> int:
        return await self._run(self._op_delete_version(subject_name, version, permanent))

    async def test_compatibility(
        self,
        subject_name: str,
        schema: Schema,
        version: Version = "latest",
        normalize: bool = False,
        verbose: bool = False,
    ) -> bool:
        return await self._run(self._op_test_compatibility(subject_name, schema, version, normalize, verbose))

    async def test_compatibility_all_versions(
        self, subject_name: str, schema: Schema, normalize: bool = False, verbose: bool = False
    ) -> bool:
        return await self._run(self._op_test_compatibility(subject_name, schema, None, normalize, verbose))

    async def set_compatibility(self, subject_name: str | None = None, level: str | None = None) -> str:
        return await self._run(self._op_set_compatibility(subject_name, level))

    async def get_compatibility(
        self, subject_name: str | None = None, default_to_global: bool = False
    ) -> str:
        return await self._run(self._op_get_compatibility(subject_name, default_to_global))

    async def set_config(
        self, subject_name: str | None = None, config: ServerConfig | None = None
    ) -> ServerConfig:
        return await self._run(self._op_set_config(subject_name, config))

    async def get_config(
        self, subject_name: str | None = None, default_to_global: bool = False
    ) -> ServerConfig:
        return await self._run(self._op_get_config(subject_name, default_to_global))

    async def delete_config(self, subject_name: str | None = None) -> ServerConfig:
        return await self._run(self._op_delete_config(subject_name))

    async def get_mode(self, subject_name: str | None = None) -> str:
        return await self._run(self._op_mode("GET", subject_name, None, False))

    async def update_mode(self, subject_name: str, mode: str, force: bool = False) -> str:
        return await self._run(self._op_mode("PUT", subject_name, mode, force))

    async def set_mode(self, subject_name: str | None, mode: str, force: bool = False) -> str:
        return await self._run(self._op_mode("PUT", subject_name, mode, force))

    async def delete_mode(self, subject_name: str) -> str:
        return await self._run(self._op_mode("DELETE", subject_name, None, False))

    async def get_global_mode(self) -> str:
        return await self._run(self._op_mode("GET", None, None, False))

    async def update_global_mode(self, mode: str, force: bool = False) -> str:
        return await self._run(self._op_mode("PUT", None, mode, force))

    async def get_contexts(self, offset: int = 0, limit: int = -1) -> list[str]:
        req = Request("GET", "contexts", query(offset=offset, limit=limit))
        return list(await self._run(self._op_get_json(req)) or ())
