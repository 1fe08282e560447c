"""SASL/GSSAPI against the real broker and a real MIT Kerberos KDC (``devbroker.start(security="kerberos")``).

One broker and one KDC for the module; the KDC holds the broker's ``kafka/127.0.0.1`` principal and the
users' principals with their keytabs, and the broker's GSSAPI listener has 5 s sessions (KIP-368), so
every long enough test also re-authenticates through Kerberos.  The clients take the settings the broker
wrote (``client-kerberos.json``, librdkafka's names) or Java's ``Krb5LoginModule`` JAAS line; the admin
client creates a topic, the producer writes and a group consumer on each protocol reads it all back.  The
failure cases -- a missing keytab, a keytab whose key was rotated at the KDC, an expired ticket in a ticket
cache -- each end the client's call with an ``AuthenticationError`` naming the broker and the cause.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from security_helpers import connections_across_sessions, consume_keyed

from kafka_handoff import devbroker
from kafka_handoff.admin import AdminClient, NewTopic
from kafka_handoff.consumer import Consumer
from kafka_handoff.devbroker import kdc as kdc_mod
from kafka_handoff.devbroker import security
from kafka_handoff.errors import AuthenticationError
from kafka_handoff.producer import Producer

pytestmark = pytest.mark.integration

LONG_S = 120.0
"""The timeout of a call expected to fail: the failure must end it early with its own error (no clock is
read; a client retrying quietly would end with a timeout or nothing instead)."""
SESSION_MS = 5000
BOTH = ("classic", "consumer")


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def kerberized() -> Iterator[devbroker.Cluster]:
    """The broker with its GSSAPI listener and KDC; ``KRB5_CONFIG`` points at the KDC for the module."""
    missing = kdc_mod.missing_binaries()
    try:
        import gssapi  # noqa: F401
    except ImportError:
        missing.append("the gssapi package")
    if missing:
        if _ci():
            pytest.fail(f"CI=true but MIT Kerberos is missing: {', '.join(missing)} (make setup installs it)")
        pytest.skip(f"MIT Kerberos missing: {', '.join(missing)} (make setup installs it)")
    cluster = devbroker.start(nodes=1, security="kerberos", connections_max_reauth_ms=SESSION_MS)
    before = os.environ.get("KRB5_CONFIG")
    assert cluster.security is not None and cluster.security.krb5_conf is not None
    os.environ["KRB5_CONFIG"] = str(cluster.security.krb5_conf)
    try:
        yield cluster
    finally:
        if before is None:
            os.environ.pop("KRB5_CONFIG", None)
        else:
            os.environ["KRB5_CONFIG"] = before
        cluster.stop()


def sec_of(cluster: devbroker.Cluster) -> security.DevSecurity:
    assert cluster.security is not None
    return cluster.security


def kdc_of(cluster: devbroker.Cluster) -> kdc_mod.Kdc:
    kdc = sec_of(cluster).kdc
    assert kdc is not None
    return kdc


def settings(cluster: devbroker.Cluster) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(sec_of(cluster).client_json_path("kerberos").read_text("utf-8"))
    return loaded


def ticket_cache_settings(cluster: devbroker.Cluster, cache: Path) -> dict[str, Any]:
    """Client settings logging in from the ticket cache ``cache`` (Java's JAAS useTicketCache/ticketCache),
    no keytab."""
    return {
        "bootstrap.servers": sec_of(cluster).bootstrap("kerberos"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "GSSAPI",
        "sasl.jaas.config": (
            "com.sun.security.auth.module.Krb5LoginModule required useTicketCache=true "
            f'ticketCache="FILE:{cache}";'
        ),
    }


def round_trip(props: dict[str, Any], protocols: tuple[str, ...] = BOTH, count: int = 30) -> None:
    topic = f"krb-{uuid.uuid4().hex[:10]}"
    with AdminClient(props) as admin:
        admin.create_topics([NewTopic(topic, 2, 1)], timeout=60)
        assert topic in {t.name for t in admin.list_topics(timeout=30)}
    sent = {b"k%03d" % i: b"v%03d-" % i + uuid.uuid4().bytes for i in range(count)}
    with Producer({**props, "linger.ms": 5}) as producer:
        futures = [producer.send(topic, value=v, key=k) for k, v in sent.items()]
        producer.flush(60)
        assert all(f.result(0).offset >= 0 for f in futures)
    for protocol in protocols:
        group = f"krb-{protocol}-{uuid.uuid4().hex[:8]}"
        consumer_props = {
            **props,
            "group.id": group,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
        with Consumer(consumer_props) as consumer:
            consumer.subscribe([topic])
            got = consume_keyed(consumer, len(sent))
            consumer.commit_sync()
        assert got == sent, f"group protocol {protocol}: {len(got)} of {len(sent)} records"


def expect_failure(props: dict[str, Any], *fragments: str) -> str:
    """The consumer's next call raises AuthenticationError (ending a LONG_S poll), naming the broker."""
    group = f"never-{uuid.uuid4().hex[:6]}"
    with Consumer({**props, "group.id": group}) as consumer, pytest.raises(AuthenticationError) as info:
        consumer.subscribe(["any-topic"])
        consumer.poll(LONG_S)
    message = str(info.value)
    assert props["bootstrap.servers"] in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert not info.value.retriable
    return message


# ------------------------------------------------------------------------------------------- success
def test_keytab_login_librdkafka_names_both_group_protocols(
    kerberized: devbroker.Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the broker wrote (sasl.kerberos.principal/keytab): a kinit-free login in a private in-memory
    cache -- the user's own ticket cache (KRB5CCNAME) is never created or touched."""
    user_cache = tmp_path / "krb5cc_user"
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{user_cache}")
    props = settings(kerberized)
    assert props["sasl.mechanism"] == "GSSAPI"
    round_trip(props)
    assert not user_cache.exists()


def test_java_jaas_keytab_login(kerberized: devbroker.Cluster) -> None:
    kdc = kdc_of(kerberized)
    props = {
        "bootstrap.servers": sec_of(kerberized).bootstrap("kerberos"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "GSSAPI",
        "sasl.kerberos.service.name": "kafka",
        "sasl.jaas.config": (
            "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
            f'keyTab="{kdc.keytab("bob")}" principal="{kdc.principal("bob")}";'
        ),
    }
    round_trip(props, protocols=("consumer",))


def test_ticket_cache_login(kerberized: devbroker.Cluster, tmp_path: Path) -> None:
    """Without a keytab: the ticket cache kinit filled (Java's useTicketCache/ticketCache)."""
    kdc = kdc_of(kerberized)
    cache = tmp_path / "krb5cc_alice"
    kdc.kinit("alice", cache)
    props = ticket_cache_settings(kerberized, cache)
    round_trip(props, protocols=("classic",))


def test_sessions_are_renewed_through_kerberos(kerberized: devbroker.Cluster) -> None:
    """The listener's sessions last 5 s: a producer and a consumer working across 2.5 sessions keep their
    connections (each re-authenticated with a new GSSAPI exchange) and lose nothing."""
    props = settings(kerberized)
    port = int(str(props["bootstrap.servers"]).split(",")[0].rsplit(":", 1)[1])
    topic = f"krb-reauth-{uuid.uuid4().hex[:8]}"
    with AdminClient(props) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)], timeout=60)
    sent = received = 0
    consumer_props = {**props, "group.id": f"krb-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}
    with Producer({**props, "linger.ms": 5}) as producer, Consumer(consumer_props) as consumer:
        consumer.subscribe([topic])

        def step(seconds: float) -> None:
            nonlocal sent, received
            producer.send(topic, b"v%d" % sent)
            sent += 1
            received += len(consumer.poll(seconds))

        before, after = connections_across_sessions(port, SESSION_MS, step)
        producer.flush(30)
        deadline = time.monotonic() + 30
        while received < sent and time.monotonic() < deadline:
            received += len(consumer.poll(0.2))
    assert received == sent
    assert after, "no connection to the Kerberos listener at the end"
    assert after <= before, f"connections replaced ({sorted(before)} -> {sorted(after)}): no re-auth"


# ------------------------------------------------------------------------------------------- failures
def test_missing_keytab(kerberized: devbroker.Cluster, tmp_path: Path) -> None:
    props = {**settings(kerberized), "sasl.kerberos.keytab": str(tmp_path / "gone.keytab")}
    expect_failure(props, "GSSAPI", "gone.keytab not found")
    with AdminClient(props) as admin, pytest.raises(AuthenticationError, match=r"gone\.keytab not found"):
        admin.list_topics(timeout=LONG_S)


def test_keytab_of_a_rotated_key(kerberized: devbroker.Cluster, tmp_path: Path) -> None:
    """The principal's key changed at the KDC (kadmin cpw -randkey) after the keytab was exported."""
    kdc = kdc_of(kerberized)
    principal = kdc.principal(f"rotated{uuid.uuid4().hex[:6]}")
    kdc.add_principal(principal)
    keytab = kdc.export_keytab(principal, tmp_path / "old.keytab")
    kdc.rotate(principal)
    props = {
        **settings(kerberized),
        "sasl.kerberos.principal": principal,
        "sasl.kerberos.keytab": str(keytab),
    }
    expect_failure(props, principal, "export the keytab again")
    with Producer(props) as producer, pytest.raises(AuthenticationError, match="export the keytab again"):
        producer.send("any-topic", b"v").result(LONG_S)


def test_expired_ticket(kerberized: devbroker.Cluster, tmp_path: Path) -> None:
    """A ticket cache whose ticket has expired (a 2 s ticket; the test waits until klist says so)."""
    kdc = kdc_of(kerberized)
    cache = tmp_path / "krb5cc_short"
    kdc.kinit("bob", cache, lifetime="2s")
    klist = shutil.which("klist") or "/usr/bin/klist"
    deadline = time.monotonic() + 60
    while subprocess.run([klist, "-s", "-c", f"FILE:{cache}"], env=kdc.env(), check=False).returncode == 0:
        assert time.monotonic() < deadline, "the 2 s ticket never expired"
        time.sleep(0.2)
    props = ticket_cache_settings(kerberized, cache)
    expect_failure(props, "GSSAPI", "expired")
