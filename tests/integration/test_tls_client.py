"""TLS from the client's side against the real broker, through a TLS-terminating proxy (tls_proxy.py).

The broker advertises the proxy's ``localhost:port``, so the producer, both group protocols' consumers and
the admin client talk TLS on every connection: handshake driven by the selector, SNI, host name and chain
verification, mutual TLS with an encrypted key, large frames through TLS records.  The failure cases
(expired certificate, TLS to a plaintext listener, an untrusted CA for the producer and the admin client)
must raise :class:`SslError` naming the broker from the next call within seconds; the untrusted CA and
host name mismatch for the consumer are in test_security.py, against the secured broker.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tls_proxy import Pki, TlsProxy, make_pki

from kafka_handoff import devbroker
from kafka_handoff.admin import AdminClient, NewTopic
from kafka_handoff.config import parse_admin_config
from kafka_handoff.consumer import Consumer
from kafka_handoff.errors import SslError
from kafka_handoff.producer import Producer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_broker(pki: Pki) -> Iterator[tuple[Any, TlsProxy]]:
    proxy = TlsProxy(pki.server_cert, pki.server_key)
    cluster = devbroker.start(
        nodes=1, overrides={"advertised.listeners": f"PLAINTEXT://localhost:{proxy.port}"}
    )
    try:
        host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
        proxy.set_target(host, int(port))
        yield cluster, proxy
    finally:
        cluster.stop()
        proxy.close()


def _ssl(pki: Pki, proxy: TlsProxy, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"localhost:{proxy.port}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca_pem),
        **extra,
    }


def _make_topic(props: dict[str, Any], partitions: int = 3) -> str:
    name = f"tls-{uuid.uuid4().hex[:8]}"
    with AdminClient(props) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)], timeout=60)
        assert name in {t.name for t in admin.list_topics(timeout=30)}
    return name


def _consume(props: dict[str, Any], topic: str, expected: int, timeout_s: float = 60) -> list[Any]:
    out: list[Any] = []
    with Consumer(props) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            out.extend(consumer.poll(0.5))
    return out


@pytest.mark.parametrize("group_protocol", ["classic", "consumer"])
def test_produce_consume_admin_over_tls(tls_broker: Any, pki: Pki, group_protocol: str) -> None:
    _cluster, proxy = tls_broker
    props = _ssl(pki, proxy)
    topic = _make_topic(props)
    big = b"x" * 200_000  # frames far larger than one TLS record
    with Producer(props) as producer:
        futures = [
            producer.send(topic, value=big if i % 10 == 0 else b"v%d" % i, key=b"%d" % i) for i in range(300)
        ]
        producer.flush(60)
        assert all(f.result(0).offset >= 0 for f in futures)
    records = _consume(
        {
            **props,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "group.protocol": group_protocol,
            "auto.offset.reset": "earliest",
        },
        topic,
        300,
    )
    assert len(records) == 300
    assert sum(1 for r in records if r.value == big) == 30
    assert "localhost" in proxy.sni_names  # SNI carries the broker's host name


def test_mutual_tls_with_an_encrypted_key(tls_broker: Any, pki: Pki) -> None:
    cluster, proxy = tls_broker
    mtls = TlsProxy(pki.server_cert, pki.server_key, client_ca=pki.ca_pem)
    try:
        host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
        mtls.set_target(host, int(port))
        props = {
            **_ssl(pki, proxy),
            "bootstrap.servers": f"localhost:{mtls.port}",
            "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key_encrypted),
            "ssl.key.password": pki.client_key_password,
        }
        with AdminClient(props) as admin:
            assert admin.describe_cluster(timeout=30).brokers
        assert mtls.client_subjects and "client" in mtls.client_subjects[0]
        assert not mtls.handshake_errors
    finally:
        mtls.close()


def _expect_ssl_error(props: dict[str, Any], *fragments: str) -> SslError:
    """The next call raises the TLS failure: subscribe(), or a poll(120) whose wait the failure must end (a
    client that kept reconnecting quietly would return nothing after 120 s)."""
    consumer = Consumer({**props, "group.id": "never"})
    try:
        with pytest.raises(SslError) as info:
            consumer.subscribe(["any-topic"])
            consumer.poll(120)
    finally:
        consumer.close()
    for fragment in fragments:
        assert fragment in str(info.value)
    assert not info.value.retriable
    return info.value


def test_expired_certificate_fails(tls_broker: Any, pki: Pki) -> None:
    cluster, _proxy = tls_broker
    expired = TlsProxy(pki.expired_cert, pki.expired_key)
    try:
        host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
        expired.set_target(host, int(port))
        _expect_ssl_error(
            {
                "bootstrap.servers": f"localhost:{expired.port}",
                "security.protocol": "SSL",
                "ssl.ca.location": str(pki.ca_pem),
            },
            f"localhost:{expired.port}",
            "expired",
        )
    finally:
        expired.close()


def test_tls_to_a_plaintext_listener_is_a_clear_error(tls_broker: Any, pki: Pki) -> None:
    cluster, _proxy = tls_broker
    plain = cluster.bootstrap_servers.split(",")[0]
    _expect_ssl_error(
        {
            "bootstrap.servers": plain,
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca_pem),
            "ssl.endpoint.identification.algorithm": "none",
        },
        plain,
        "TLS handshake",
    )


def test_ca_path_must_exist(pki: Pki, tmp_path: Path) -> None:
    from kafka_handoff.errors import ConfigError

    with pytest.raises(ConfigError, match=r"ssl\.truststore\.location"):
        Consumer(
            {
                "bootstrap.servers": "localhost:1",
                "security.protocol": "SSL",
                "ssl.ca.location": str(tmp_path / "missing.pem"),
            }
        )


def test_producer_and_admin_fail_fast_with_an_untrusted_ca(tls_broker: Any, pki: Pki) -> None:
    _cluster, proxy = tls_broker
    # Not retried until a timeout: then the send would fail after max.block.ms or delivery.timeout.ms,
    # and the admin call after its (long) timeout, with a timeout error.
    props = _ssl(pki, proxy, **{"ssl.ca.location": str(pki.other_ca_pem)})
    with Producer(props) as producer, pytest.raises(SslError, match="certificate verify failed"):
        producer.send("any-topic", b"v").result(120)
    with AdminClient(props) as admin, pytest.raises(SslError, match=f"localhost:{proxy.port}"):
        admin.list_topics(timeout=120)


def test_unreachable_brokers_are_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    caplog.set_level(logging.WARNING, logger="kafka_handoff.network.client")
    with Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "g"}) as consumer:
        consumer.subscribe(["t"])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not any(
            r.levelno == logging.WARNING and f"127.0.0.1:{port}" in r.getMessage() for r in caplog.records
        ):
            assert not consumer.poll(0.2)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("no broker reachable" in w and f"127.0.0.1:{port}" in w for w in warnings), warnings
    assert len(warnings) <= 3  # rate-limited, not one per reconnect


def test_inline_pem_settings(tls_broker: Any, pki: Pki) -> None:
    """librdkafka's ssl.ca.pem / ssl.certificate.pem / ssl.key.pem (Java: ssl.truststore.certificates,
    ssl.keystore.certificate.chain, ssl.keystore.key): mutual TLS from PEM text instead of files."""
    cluster, _proxy = tls_broker
    mtls = TlsProxy(pki.server_cert, pki.server_key, client_ca=pki.ca_pem)
    try:
        host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
        mtls.set_target(host, int(port))
        props = {
            "bootstrap.servers": f"localhost:{mtls.port}",
            "security.protocol": "SSL",
            "ssl.ca.pem": pki.ca_pem.read_text(),
            "ssl.certificate.pem": pki.client_cert.read_text(),
            "ssl.key.pem": pki.client_key_encrypted.read_text(),
            "ssl.key.password": pki.client_key_password,
        }
        with AdminClient(props) as admin:
            assert admin.describe_cluster(timeout=30).brokers
        assert mtls.client_subjects and not mtls.handshake_errors
        assert "PRIVATE KEY" not in repr(parse_admin_config(props))
    finally:
        mtls.close()
