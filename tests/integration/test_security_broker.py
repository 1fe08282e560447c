"""The secured dev broker is standard: librdkafka (confluent-kafka) works with the settings it writes.

One broker for the module with every listener (SSL, mutual TLS, SASL_PLAINTEXT, SASL_SSL with PLAIN,
SCRAM-SHA-256/512 and OAUTHBEARER, the hostname-mismatch and short-session listeners): one broker with
several listeners is far cheaper than one per mode.  Each case produces with confluent-kafka's producer and
reads the records back with its group consumer, using exactly what ``client-<mode>[-<mechanism>].json`` says.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from security_helpers import connections_across_sessions

from kafka_handoff import devbroker
from kafka_handoff.devbroker import security

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")
pytest.importorskip("cryptography")


def sec_of(cluster: devbroker.Cluster) -> security.DevSecurity:
    assert cluster.security is not None
    return cluster.security


def load_settings(path: Path) -> dict[str, Any]:
    settings: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return settings


def round_trip(settings: dict[str, Any], topic: str, count: int = 20, timeout: float = 60.0) -> None:
    """Produce ``count`` records and read them back with a group consumer, both with ``settings``."""
    errors: list[Any] = []
    producer = confluent_kafka.Producer({**settings, "acks": "all", "linger.ms": 5})
    sent = {b"k%d" % i: b"v%d-" % i + uuid.uuid4().bytes for i in range(count)}
    for key, value in sent.items():
        producer.produce(
            topic, key=key, value=value, on_delivery=lambda err, msg: errors.append(err) if err else None
        )
    assert producer.flush(timeout) == 0, "records not delivered"
    assert errors == []
    consumer = confluent_kafka.Consumer(
        {
            **settings,
            "group.id": f"oracle-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    got: dict[bytes, bytes] = {}
    deadline = time.monotonic() + timeout
    try:
        consumer.subscribe([topic])
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.key()] = msg.value()
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert got == sent


CASES = [
    ("ssl", None),
    ("mtls", None),
    ("sasl_plaintext", "PLAIN"),
    ("sasl_plaintext", "SCRAM-SHA-256"),
    ("sasl_ssl", "PLAIN"),
    ("sasl_ssl", "SCRAM-SHA-256"),
    ("sasl_ssl", "SCRAM-SHA-512"),
    ("sasl_ssl", "OAUTHBEARER"),
]


@pytest.mark.parametrize(("mode", "mechanism"), CASES, ids=[f"{m}-{x or 'tls'}" for m, x in CASES])
def test_librdkafka_round_trip_with_written_settings(
    secured: devbroker.Cluster, mode: str, mechanism: str | None
) -> None:
    sec = sec_of(secured)
    settings = load_settings(sec.client_json_path(mode, mechanism))
    expected_protocol = {"ssl": "SSL", "mtls": "SSL"}.get(mode, mode.upper())
    assert settings["security.protocol"] == expected_protocol
    if mechanism is not None:
        assert settings["sasl.mechanism"] == mechanism
    topic = f"oracle-{mode}-{(mechanism or 'tls').lower()}-{uuid.uuid4().hex[:6]}"
    secured.create_topic(topic, partitions=2)
    round_trip(settings, topic)


def test_client_json_is_the_first_mode_and_cli_default_names(secured: devbroker.Cluster) -> None:
    sec = sec_of(secured)
    first = load_settings(sec.client_json_path())
    assert first == load_settings(sec.client_json_path(sec.modes[0]))
    mtls = load_settings(sec.client_json_path("mtls"))
    assert {"ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password"} <= set(
        mtls
    )
    oauth = load_settings(sec.client_json_path("sasl_ssl", "OAUTHBEARER"))
    assert oauth["sasl.oauthbearer.method"] == "oidc"
    assert oauth["sasl.oauthbearer.token.endpoint.url"].startswith("http://127.0.0.1:")
    assert "password" not in repr(sec).lower() and sec.users["alice"] not in repr(sec)


def _metadata_error(settings: dict[str, Any], timeout: float = 3.0) -> str | None:
    """None when librdkafka gets metadata with ``settings``; else the errors it reports."""
    errors: list[str] = []
    admin = admin_mod.AdminClient({**settings, "error_cb": lambda err: errors.append(str(err))})
    try:
        admin.list_topics(timeout=timeout)
        return None
    except confluent_kafka.KafkaException as exc:
        admin.poll(0.5)  # error_cb runs from poll
        return f"{exc} {' | '.join(errors)}"


def test_wrong_host_listener_fails_hostname_verification_only(secured: devbroker.Cluster) -> None:
    sec = sec_of(secured)
    settings = load_settings(sec.client_json_path("ssl_wrong_host"))
    error = _metadata_error(settings)
    assert error is not None
    assert "certificate" in error.lower() or "ssl" in error.lower(), error
    # The same listener with hostname verification off works: the certificate's names are the only fault.
    assert _metadata_error({**settings, "ssl.endpoint.identification.algorithm": "none"}, 15) is None


def test_wrong_password_and_untrusted_ca_are_refused(secured: devbroker.Cluster, tmp_path: Path) -> None:
    sec = sec_of(secured)
    scram = load_settings(sec.client_json_path("sasl_ssl", "SCRAM-SHA-512"))
    error = _metadata_error({**scram, "sasl.password": "not-the-password"})
    assert error is not None and "authentication" in error.lower(), error
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_bytes(security.generate_ca("some other CA").cert_pem)
    error = _metadata_error({**load_settings(sec.client_json_path("ssl")), "ssl.ca.location": str(other_ca)})
    assert error is not None and "certificate" in error.lower(), error
    # mutual TLS: no client certificate, no connection.
    mtls = load_settings(sec.client_json_path("mtls"))
    for key in ("ssl.certificate.location", "ssl.key.location", "ssl.key.password"):
        del mtls[key]
    assert _metadata_error(mtls) is not None


def _token_request(url: str, client_id: str, secret: str) -> tuple[int, dict[str, Any]]:
    body = urllib.parse.urlencode(
        {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
    ).encode()
    try:
        with urllib.request.urlopen(url, data=body, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_token_endpoint_issues_tokens_for_registered_clients_only(secured: devbroker.Cluster) -> None:
    sec = sec_of(secured)
    status, body = _token_request(sec.token_endpoint_url, "bob", sec.users["bob"])
    assert status == 200 and body["token_type"] == "Bearer" and body["expires_in"] > 0
    payload = body["access_token"].split(".")[1]
    claims = json.loads(_b64(payload))
    assert claims["sub"] == "bob" and claims["aud"] == security.AUDIENCE
    status, body = _token_request(sec.token_endpoint_url, "bob", "wrong")
    assert status == 401 and body["error"] == "invalid_client"
    # librdkafka with a refused client id gets no connection
    oauth = load_settings(sec.client_json_path("sasl_ssl", "OAUTHBEARER"))
    assert _metadata_error({**oauth, "sasl.oauthbearer.client.secret": "wrong"}) is not None


def _b64(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def test_librdkafka_keeps_consuming_on_short_sessions(secured: devbroker.Cluster) -> None:
    """The ``sasl_ssl_reauth`` listener gives 5 s sessions (``connections.max.reauth.ms``): librdkafka
    (KIP-368) keeps consuming through several session lifetimes and loses nothing.  librdkafka now and then
    fails a re-authentication and reconnects, so only most of its connections must survive; the strict
    "no connection replaced" check is for our client (test_security.py)."""
    sec = sec_of(secured)
    settings = load_settings(sec.client_json_path("sasl_ssl_reauth", "SCRAM-SHA-512"))
    port = int(settings["bootstrap.servers"].rsplit(":", 1)[1])
    topic = f"oracle-reauth-{uuid.uuid4().hex[:6]}"
    secured.create_topic(topic, partitions=1)
    producer = confluent_kafka.Producer({**settings, "linger.ms": 5})
    consumer = confluent_kafka.Consumer(
        {**settings, "group.id": f"reauth-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    received = 0
    sent = 0
    try:
        # Consuming steadily first; then every connection open at that point must live through
        # two and a half session lifetimes (the broker closes any connection whose session expired).
        deadline = time.monotonic() + 30
        while received == 0:
            producer.produce(topic, value=b"x")
            sent += 1
            producer.poll(0)
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                received += 1
            assert time.monotonic() < deadline, "nothing consumed within 30s"

        def step(poll_s: float) -> None:
            nonlocal sent, received
            producer.produce(topic, value=b"x")
            sent += 1
            producer.poll(0)
            msg = consumer.poll(poll_s)
            if msg is not None and msg.error() is None:
                received += 1

        # Keep working until the set of connections is settled (unchanged for 10 steps), well within one
        # session lifetime.
        before, after = connections_across_sessions(port, sec.test_reauth_ms, step)
        producer.flush(10)
        deadline = time.monotonic() + 20
        while received < sent and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                received += 1
    finally:
        consumer.close()
    assert received == sent
    assert after, "no connection to the re-authentication listener at the end"
    assert len(after - before) <= 1, f"connections replaced ({sorted(before)} -> {sorted(after)})"


def test_handoff_broker_start_cli_secured(tmp_path: Path) -> None:
    """``handoff broker start --security sasl_ssl`` prints client.json's path on its own line; the token
    endpoint it started outlives the command and ``handoff broker stop`` ends it."""
    data_dir = tmp_path / "b"
    cli = [sys.executable, "-m", "kafka_handoff.cli.main", "broker"]
    out = subprocess.run(
        [*cli, "start", "--security", "sasl_ssl", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    token_url = ""
    try:
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert str(data_dir.resolve() / "client.json") in lines
        settings = load_settings(data_dir / "client.json")
        assert settings["security.protocol"] == "SASL_SSL"
        assert settings["sasl.password"] not in out.stdout + out.stderr
        oauth = load_settings(data_dir / "client-sasl_ssl-oauthbearer.json")
        token_url = oauth["sasl.oauthbearer.token.endpoint.url"]
        assert _metadata_error(oauth, timeout=15) is None
        status = subprocess.run([*cli, "status", "--data-dir", str(data_dir)], capture_output=True, text=True)
        assert "sasl_ssl: 127.0.0.1:" in status.stdout
    finally:
        subprocess.run([*cli, "stop", "--data-dir", str(data_dir)], capture_output=True, timeout=60)
    with pytest.raises(OSError):
        urllib.request.urlopen(token_url.replace("/token", "/jwks"), timeout=2)
