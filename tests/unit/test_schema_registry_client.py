"""SchemaRegistryClient without a registry: configuration, caches, retries and backoff (a fake clock and a
scripted HTTP layer), error mapping, secret redaction, and the asyncio twin."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest

from kafka_handoff.errors import ConfigError
from kafka_handoff.schema_registry import (
    AsyncSchemaRegistryClient,
    Schema,
    SchemaReference,
    SchemaRegistryClient,
    SchemaRegistryError,
    ServerConfig,
)

pytestmark = pytest.mark.unit

AVRO = Schema('{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}', "AVRO")
Answer = tuple[int, Any] | BaseException


class ScriptedPool:
    """Plays the HTTP layer: each request pops the next scripted answer (status, JSON body) or raises the
    scripted exception; records what was sent."""

    def __init__(self, *answers: Answer) -> None:
        self.answers: list[Answer] = list(answers)
        self.calls: list[tuple[str, str, str, Any, dict[str, str]]] = []
        self.closed = False

    def add(self, *answers: Answer) -> None:
        self.answers.extend(answers)

    def request(
        self, base_url: str, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        self.calls.append((base_url, method, target, json.loads(body) if body else None, dict(headers)))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        status, payload = answer
        return status, b"" if payload is None else json.dumps(payload).encode()

    def close(self) -> None:
        self.closed = True


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def client(pool: ScriptedPool, clock: FakeClock | None = None, **conf: Any) -> SchemaRegistryClient:
    clock = clock or FakeClock()
    settings: dict[str, Any] = {
        "url": "http://localhost:8081",
        **{k.replace("_", "."): v for k, v in conf.items()},
    }
    return SchemaRegistryClient(settings, _pool=pool, _sleep=clock.sleep, _rand=lambda: 0.5, _clock=clock)


# ---------------------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    ("conf", "key"),
    [
        ({}, "url"),
        ({"url": "ftp://x"}, "url"),
        ({"url": "http://localhost:8081", "proxy": "http://p"}, "proxy"),
        ({"url": "http://localhost:8081", "max.retries": "many"}, "max.retries"),
        ({"url": "http://localhost:8081", "retries.wait.ms": -1}, "retries.wait.ms"),
        ({"url": "http://localhost:8081", "cache.capacity": 0}, "cache.capacity"),
        ({"url": "http://localhost:8081", "timeout": True}, "timeout"),
        (
            {"url": "http://localhost:8081", "basic.auth.credentials.source": "KERBEROS"},
            "basic.auth.credentials.source",
        ),
        (
            {"url": "http://localhost:8081", "bearer.auth.credentials.source": "MAGIC"},
            "bearer.auth.credentials.source",
        ),
        (
            {"url": "http://localhost:8081", "bearer.auth.credentials.source": "STATIC_TOKEN"},
            "bearer.auth.token",
        ),
        (
            {"url": "http://localhost:8081", "bearer.auth.credentials.source": "CUSTOM"},
            "bearer.auth.custom.provider",
        ),
        (
            {"url": "http://localhost:8081", "bearer.auth.credentials.source": "OAUTHBEARER"},
            "bearer.auth.issuer.endpoint.url",
        ),
        ({"url": "http://localhost:8081", "ssl.key.location": "/k.pem"}, "ssl.certificate.location"),
        ({"url": "https://localhost:8081", "ssl.ca.location": "/no/such/ca.pem"}, "ssl.ca.location"),
        (
            {
                "url": "http://localhost:8081",
                "basic.auth.user.info": "u:p",
                "bearer.auth.credentials.source": "STATIC_TOKEN",
            },
            "bearer.auth.credentials.source",
        ),
    ],
)
def test_bad_config_names_the_key(conf: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        SchemaRegistryClient(conf)
    assert f"'{key}" in str(info.value)


def test_bad_config_names_allowed_values() -> None:
    with pytest.raises(ConfigError, match="allowed: STATIC_TOKEN, OAUTHBEARER, CUSTOM"):
        SchemaRegistryClient({"url": "http://localhost:8081", "bearer.auth.credentials.source": "x"})
    with pytest.raises(ConfigError, match="allowed: USER_INFO, URL, SASL_INHERIT"):
        SchemaRegistryClient({"url": "http://localhost:8081", "basic.auth.credentials.source": "x"})


def test_user_info_without_colon_is_refused_without_showing_it() -> None:
    with pytest.raises(ConfigError) as info:
        SchemaRegistryClient({"url": "http://localhost:8081", "basic.auth.user.info": "s3cr3tvalue"})
    assert "'basic.auth.user.info'" in str(info.value)
    assert "s3cr3tvalue" not in str(info.value)


def test_credentials_in_url_and_user_info_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"'basic\.auth\.user\.info'"):
        SchemaRegistryClient({"url": "http://a:b@localhost:8081", "basic.auth.user.info": "c:d"})


# ---------------------------------------------------------------------------------------- auth and secrets
def test_basic_auth_header_from_user_info() -> None:
    pool = ScriptedPool((200, ["s"]))
    c = client(pool, basic_auth_user_info="alice:pa:ss")
    assert c.get_subjects() == ["s"]
    headers = pool.calls[0][4]
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"alice:pa:ss").decode()


def test_basic_auth_from_url_userinfo_and_sasl_inherit() -> None:
    pool = ScriptedPool((200, []), (200, []))
    c1 = SchemaRegistryClient({"url": "http://bob:pw%40x@localhost:8081"}, _pool=pool)
    c1.get_subjects()
    assert pool.calls[0][0] == "http://localhost:8081"  # the credentials are not part of the request URL
    assert pool.calls[0][4]["Authorization"] == "Basic " + base64.b64encode(b"bob:pw@x").decode()
    c2 = SchemaRegistryClient(
        {
            "url": "http://localhost:8081",
            "basic.auth.credentials.source": "SASL_INHERIT",
            "sasl.username": "carol",
            "sasl.password": "pw2",
        },
        _pool=pool,
    )
    c2.get_subjects()
    assert pool.calls[1][4]["Authorization"] == "Basic " + base64.b64encode(b"carol:pw2").decode()


def test_static_bearer_and_custom_bearer_headers() -> None:
    pool = ScriptedPool((200, []), (200, []), (200, []))
    c = client(
        pool,
        bearer_auth_credentials_source="STATIC_TOKEN",
        bearer_auth_token="tok-1",
        bearer_auth_logical_cluster="lsrc-1",
    )
    c.get_subjects()
    assert pool.calls[0][4]["Authorization"] == "Bearer tok-1"
    assert pool.calls[0][4]["target-sr-cluster"] == "lsrc-1"
    tokens = iter(["t-a", "t-b"])
    seen: list[Any] = []

    def provider(config: Any) -> dict[str, str]:
        seen.append(config)
        return {"bearer.auth.token": next(tokens)}

    c2 = SchemaRegistryClient(
        {
            "url": "http://localhost:8081",
            "bearer.auth.credentials.source": "CUSTOM",
            "bearer.auth.custom.provider.function": provider,
            "bearer.auth.custom.provider.config": {"k": 1},
        },
        _pool=pool,
    )
    c2.get_subjects()
    c2.get_subjects()
    assert [call[4]["Authorization"] for call in pool.calls[1:]] == ["Bearer t-a", "Bearer t-b"]
    assert seen == [{"k": 1}, {"k": 1}]


def test_oauthbearer_uses_the_token_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    from kafka_handoff import security
    from kafka_handoff.protocol.sasl import OAuthToken

    fetched: list[tuple[str, str, str]] = []

    def fake_oidc_fetcher(
        url: str, client_id: str, secret: str, scope: str | None, ext: Any, **kw: Any
    ) -> Any:
        fetched.append((url, client_id, secret))
        return lambda: OAuthToken("jwt-1", 10**13, "svc", {})

    monkeypatch.setattr(security, "oidc_fetcher", fake_oidc_fetcher)
    pool = ScriptedPool((200, []))
    c = SchemaRegistryClient(
        {
            "url": "http://localhost:8081",
            "bearer.auth.credentials.source": "OAUTHBEARER",
            "bearer.auth.issuer.endpoint.url": "https://idp.example/token",
            "bearer.auth.client.id": "svc",
            "bearer.auth.client.secret": "very-secret",
            "bearer.auth.scope": "sr",
        },
        _pool=pool,
    )
    try:
        c.get_subjects()
    finally:
        c.close()
    assert fetched == [("https://idp.example/token", "svc", "very-secret")]
    assert pool.calls[0][4]["Authorization"] == "Bearer jwt-1"
    assert "very-secret" not in repr(c) and "very-secret" not in str(c.config())


def test_secrets_never_in_repr_config_or_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "kafka_handoff")
    pool = ScriptedPool(
        ConnectionRefusedError(111, "Connection refused"), (401, {"error_code": 401, "message": "no"})
    )
    c = SchemaRegistryClient(
        {"url": "http://user:pw-in-url@localhost:8081", "max.retries": 1},
        _pool=pool,
        _sleep=lambda s: None,
    )
    c2 = SchemaRegistryClient(
        {
            "url": "http://localhost:8081",
            "bearer.auth.credentials.source": "STATIC_TOKEN",
            "bearer.auth.token": "tk-9",
        }
    )
    with pytest.raises(SchemaRegistryError) as info:
        c.get_subjects()
    texts = [
        repr(c),
        str(c.config()),
        repr(c._conf),
        repr(c2),
        str(c2.config()),
        str(info.value),
        repr(info.value),
    ]
    texts += [r.getMessage() for r in caplog.records]
    for text in texts:
        assert "pw-in-url" not in text and "tk-9" not in text
    assert c2.config()["bearer.auth.token"] == "[hidden]"


# ---------------------------------------------------------------------------------------- requests and errors
def test_register_sends_the_schema_and_returns_the_id() -> None:
    ref = SchemaReference("com.x.Other", "other-value", 2)
    schema = Schema('{"type":"record","name":"R","fields":[]}', "AVRO", [ref])
    pool = ScriptedPool((200, {"id": 7}))
    assert client(pool).register_schema("my topic-value", schema, normalize_schemas=True) == 7
    _, method, target, body, headers = pool.calls[0]
    assert (method, target) == ("POST", "subjects/my%20topic-value/versions?normalize=true")
    assert body == {
        "schema": schema.schema_str,
        "references": [{"name": "com.x.Other", "subject": "other-value", "version": 2}],
    }
    assert headers["Content-Type"] == "application/vnd.schemaregistry.v1+json"


def test_protobuf_schema_type_is_sent() -> None:
    pool = ScriptedPool((200, {"id": 3}))
    client(pool).register_schema("p", Schema('syntax = "proto3"; message M {}', "PROTOBUF"))
    assert pool.calls[0][3]["schemaType"] == "PROTOBUF"


def test_error_answer_becomes_schema_registry_error() -> None:
    pool = ScriptedPool((409, {"error_code": 409, "message": "Schema being registered is incompatible"}))
    with pytest.raises(SchemaRegistryError) as info:
        client(pool).register_schema("s", AVRO)
    err = info.value
    assert (err.http_status_code, err.error_code) == (409, 409)
    assert err.error_message == "Schema being registered is incompatible"
    assert "HTTP status code 409, SR code 409" in str(err)


def test_non_json_error_answer() -> None:
    class RawPool(ScriptedPool):
        def request(self, *args: Any) -> tuple[int, bytes]:
            return 404, b"<html>not here</html>"

    with pytest.raises(SchemaRegistryError) as info:
        client(RawPool()).get_subjects()
    assert info.value.http_status_code == 404
    assert info.value.error_code == SchemaRegistryError.UNKNOWN
    assert "not here" in info.value.error_message


def test_config_compatibility_and_mode_requests() -> None:
    pool = ScriptedPool(
        (200, {"compatibility": "FULL"}),
        (200, {"compatibilityLevel": "FULL"}),
        (200, {"compatibility": "NONE"}),
        (200, {"is_compatible": False, "messages": ["field removed"]}),
        (200, {"mode": "READONLY"}),
        (200, {"mode": "READONLY"}),
        (200, [1, 2]),
        (200, 2),
    )
    c = client(pool)
    assert c.set_compatibility("s", "full") == "FULL"
    assert c.get_compatibility("s") == "FULL"
    assert c.set_config(None, ServerConfig(compatibility="NONE")).compatibility == "NONE"
    assert c.test_compatibility("s", AVRO, version=1, verbose=True) is False
    assert c.set_mode("s", "readonly", force=True) == "READONLY"
    assert c.get_mode("s") == "READONLY"
    assert c.delete_subject("s", permanent=True) == [1, 2]
    assert c.delete_version("t", 2) == 2
    targets = [(call[1], call[2], call[3]) for call in pool.calls]
    assert targets == [
        ("PUT", "config/s", {"compatibility": "FULL"}),
        ("GET", "config/s", None),
        ("PUT", "config", {"compatibility": "NONE"}),
        ("POST", "compatibility/subjects/s/versions/1?normalize=false&verbose=true", AVRO.to_dict()),
        ("PUT", "mode/s?force=true", {"mode": "READONLY"}),
        ("GET", "mode/s", None),
        ("DELETE", "subjects/s?permanent=true", None),
        ("DELETE", "subjects/t/versions/2", None),
    ]


# ---------------------------------------------------------------------------------------- caches
def test_register_and_get_schema_are_cached() -> None:
    pool = ScriptedPool((200, {"id": 5}), (200, {"schema": "x", "schemaType": "JSON"}))
    c = client(pool)
    assert c.register_schema("s", AVRO) == 5
    assert c.register_schema("s", AVRO) == 5
    assert c.get_schema(5) == AVRO  # known from the registration: no request
    assert c.get_schema(6).schema_type == "JSON"
    assert c.get_schema(6).schema_str == "x"
    assert len(pool.calls) == 2


def test_get_version_and_lookup_are_cached_and_deletes_forget() -> None:
    reg = {"subject": "s", "id": 4, "version": 1, "schema": AVRO.schema_str}
    pool = ScriptedPool((200, reg), (200, reg), (200, [1]), (200, reg))
    c = client(pool)
    assert c.get_version("s", 1).schema_id == 4
    assert c.get_version("s", 1).version == 1
    assert c.lookup_schema("s", AVRO).version == 1
    assert c.lookup_schema("s", AVRO).schema_id == 4
    assert len(pool.calls) == 2
    c.delete_subject("s")
    c.get_version("s", 1)  # asked again after the delete
    assert len(pool.calls) == 4


def test_latest_version_ttl_on_the_clock() -> None:
    clock = FakeClock()
    v1 = {"subject": "s", "id": 1, "version": 1, "schema": "a"}
    v2 = {"subject": "s", "id": 2, "version": 2, "schema": "b"}
    pool = ScriptedPool((200, v1), (200, v2))
    c = client(pool, clock, cache_latest_ttl_sec=60)
    assert c.get_latest_version("s").version == 1
    clock.now += 59
    assert c.get_latest_version("s").version == 1
    clock.now += 2
    assert c.get_latest_version("s").version == 2
    assert len(pool.calls) == 2


def test_cache_capacity_evicts_least_recently_used() -> None:
    pool = ScriptedPool(*[(200, {"schema": f"s{i}"}) for i in range(4)])
    c = client(pool, cache_capacity=2)
    c.get_schema(1)
    c.get_schema(2)
    c.get_schema(1)  # 1 is now the most recent
    c.get_schema(3)  # evicts 2
    c.get_schema(1)
    assert len(pool.calls) == 3
    c.get_schema(2)
    assert len(pool.calls) == 4


# ---------------------------------------------------------------------------------------- retries
def test_retries_5xx_and_429_with_exponential_full_jitter_backoff() -> None:
    clock = FakeClock()
    pool = ScriptedPool((503, {"message": "busy"}), (429, None), (500, None), (200, ["s"]))
    c = client(pool, clock, max_retries=3, retries_wait_ms=100, retries_max_wait_ms=250)
    assert c.get_subjects() == ["s"]
    # rand() = 0.5: half of min(100 * 2**attempt, 250) ms
    assert clock.slept == [0.05, 0.1, 0.125]
    assert len(pool.calls) == 4


def test_backoff_is_capped_for_any_attempt_number() -> None:
    from kafka_handoff.schema_registry._http import full_jitter_ms

    assert full_jitter_ms(1000, 20000, 5000, lambda: 0.5) == 10000.0
    assert full_jitter_ms(1000, 20000, 0, lambda: 0.5) == 500.0


def test_gives_up_after_max_retries_with_the_last_error() -> None:
    clock = FakeClock()
    pool = ScriptedPool(*[(503, {"error_code": 50003, "message": "down"})] * 3)
    c = client(pool, clock, max_retries=2, retries_wait_ms=10)
    with pytest.raises(SchemaRegistryError) as info:
        c.get_subjects()
    assert (info.value.http_status_code, info.value.error_code) == (503, 50003)
    assert len(pool.calls) == 3 and len(clock.slept) == 2


def test_client_errors_are_not_retried() -> None:
    clock = FakeClock()
    pool = ScriptedPool((404, {"error_code": 40401, "message": "Subject 's' not found."}))
    with pytest.raises(SchemaRegistryError) as info:
        client(pool, clock).get_versions("s")
    assert info.value.error_code == 40401
    assert clock.slept == [] and len(pool.calls) == 1


def test_connection_errors_are_retried_then_fail_over_to_the_next_url() -> None:
    clock = FakeClock()
    pool = ScriptedPool(ConnectionRefusedError(111, "refused"), TimeoutError("timed out"), (200, ["ok"]))
    c = SchemaRegistryClient(
        {"url": "http://a:1,http://b:2", "max.retries": 1, "retries.wait.ms": 10},
        _pool=pool,
        _sleep=clock.sleep,
        _rand=lambda: 1.0,
    )
    assert c.get_subjects() == ["ok"]
    assert [call[0] for call in pool.calls] == ["http://a:1", "http://a:1", "http://b:2"]
    assert clock.slept == [0.01]


def test_unreachable_registry_error() -> None:
    pool = ScriptedPool(*[ConnectionRefusedError(111, "Connection refused")] * 2)
    with pytest.raises(SchemaRegistryError) as info:
        client(pool, max_retries=1).get_subjects()
    assert info.value.http_status_code == -1
    assert "cannot reach the Schema Registry at http://localhost:8081 after 2 attempt(s)" in str(info.value)


# ---------------------------------------------------------------------------------------- asyncio twin
def test_async_client_same_methods_retries_and_caches() -> None:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    pool = ScriptedPool(
        (502, None), (200, {"id": 9}), (200, {"subject": "s", "id": 9, "version": 1, "schema": "a"})
    )
    sync_methods = {n for n in dir(SchemaRegistryClient) if not n.startswith("_")}
    async_methods = {n for n in dir(AsyncSchemaRegistryClient) if not n.startswith("_")}
    assert sync_methods == async_methods

    async def main() -> None:
        async with AsyncSchemaRegistryClient(
            {"url": "http://localhost:8081", "retries.wait.ms": 40},
            _pool=pool,
            _sleep=fake_sleep,
            _rand=lambda: 0.5,
        ) as c:
            assert await c.register_schema("s", AVRO) == 9
            assert await c.register_schema("s", AVRO) == 9
            assert (await c.get_version("s", 1)).schema_id == 9

    asyncio.run(main())
    assert slept == [0.02]
    assert len(pool.calls) == 3 and pool.closed


def test_async_and_sync_methods_are_coroutines_and_plain() -> None:
    is_coroutine: Callable[[Any], bool] = asyncio.iscoroutinefunction
    for name in ("register_schema", "get_schema", "lookup_schema", "delete_subject", "get_mode", "close"):
        assert is_coroutine(getattr(AsyncSchemaRegistryClient, name))
        assert not is_coroutine(getattr(SchemaRegistryClient, name))
