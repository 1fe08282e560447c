"""Our clients against the secured real broker (issue 12 acceptance): TLS, mutual TLS, SASL, ACLs.

One secured dev broker for the module with every listener (see :mod:`kafka_handoff.devbroker.security`):
SSL, mutual TLS, SASL_PLAINTEXT, SASL_SSL with PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER, a wrong-host
listener and a listener with 5 s sessions.  Each mode is used with exactly the settings the broker wrote
(``client-<mode>[-<mechanism>].json``, in librdkafka's names): the admin client creates the topic, the
producer writes, and a group consumer on each protocol (classic, consumer) reads everything back.  Then:
Java's JAAS and truststore names, the ``handoff`` commands with ``--command-config``, a pipeline run over
SASL_SSL (consumer and dead-letter producer), re-authentication on the 5 s listener while a consumer keeps
consuming, the failure cases (each an ``AuthenticationError``/``SslError`` naming the broker and the cause
from the next call, ending its wait, never a secret) and the ACL cases
(``TopicAuthorizationFailedError``/``GroupAuthorizationFailedError`` naming the resource).

ACLs are created with CreateAcls requests on the PLAINTEXT listener (a super user there), through the dev
broker's probe connection: our admin client has no ACL calls.  The broker allows everything on a resource
without ACLs (``allow.everyone.if.no.acl.found=true``), so each ACL test puts ACLs on its own topic or group
only.
The librdkafka oracle against the same kind of broker is ``test_security_broker.py``; TLS details against
a proxy are ``test_tls_client.py``.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from security_helpers import connections_across_sessions

from kafka_handoff import devbroker
from kafka_handoff.admin import AdminClient, NewTopic
from kafka_handoff.consumer import Consumer
from kafka_handoff.devbroker import security
from kafka_handoff.devbroker.probe import ProbeConnection
from kafka_handoff.errors import (
    AuthenticationError,
    GroupAuthorizationFailedError,
    SslError,
    TopicAuthorizationFailedError,
)
from kafka_handoff.producer import Producer

pytestmark = pytest.mark.integration
pytest.importorskip("cryptography")

LONG_S = 120.0
"""The timeout of a call expected to fail: the failure must end it early, with its own error type (not a
timeout, not a quiet return), so no clock is read.  Also the safety deadline of the waits for an error."""
BOTH = ("classic", "consumer")


def sec_of(cluster: devbroker.Cluster) -> security.DevSecurity:
    assert cluster.security is not None
    return cluster.security


def settings(cluster: devbroker.Cluster, mode: str, mechanism: str | None = None) -> dict[str, Any]:
    """What the broker wrote for ``mode`` (and ``mechanism``): a client takes the file as it is."""
    loaded: dict[str, Any] = json.loads(
        sec_of(cluster).client_json_path(mode, mechanism).read_text(encoding="utf-8")
    )
    return loaded


def produce_all(props: dict[str, Any], topic: str, count: int) -> dict[bytes, bytes]:
    sent = {b"k%04d" % i: b"v%04d-" % i + uuid.uuid4().bytes for i in range(count)}
    with Producer({**props, "linger.ms": 5}) as producer:
        futures = [producer.send(topic, value=v, key=k) for k, v in sent.items()]
        producer.flush(60)
        assert all(f.result(0).offset >= 0 for f in futures)
    return sent


def consume_all(
    props: dict[str, Any], topic: str, expected: int, timeout_s: float = 60
) -> dict[bytes, bytes]:
    got: dict[bytes, bytes] = {}
    with Consumer({**props, "auto.offset.reset": "earliest", "enable.auto.commit": False}) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while len(got) < expected and time.monotonic() < deadline:
            for record in consumer.poll(0.5):
                assert record.key is not None and record.value is not None
                got[record.key] = record.value
        consumer.commit_sync()
    return got


def round_trip(props: dict[str, Any], *, count: int = 60, protocols: tuple[str, ...] = BOTH) -> None:
    """Admin creates a topic, the producer writes, a group consumer per protocol reads it all back."""
    topic = f"sec-{uuid.uuid4().hex[:10]}"
    with AdminClient(props) as admin:
        admin.create_topics([NewTopic(topic, 3, 1)], timeout=60)
        assert topic in {t.name for t in admin.list_topics(timeout=30)}
        assert admin.describe_cluster(timeout=30).brokers
    sent = produce_all(props, topic, count)
    for protocol in protocols:
        group = f"sec-{protocol}-{uuid.uuid4().hex[:8]}"
        got = consume_all({**props, "group.id": group, "group.protocol": protocol}, topic, len(sent))
        assert got == sent, f"group protocol {protocol}: {len(got)} of {len(sent)} records"


# ----------------------------------------------------------------------------------- every mode
CASES = [
    ("ssl", None),
    ("mtls", None),
    ("sasl_plaintext", "PLAIN"),
    ("sasl_ssl", "SCRAM-SHA-256"),
    ("sasl_ssl", "SCRAM-SHA-512"),
    ("sasl_ssl", "OAUTHBEARER"),  # OIDC client credentials against the dev token endpoint
]
# The other mechanism/transport pairs: the same code paths, so one group protocol is enough.
OTHER_CASES = [("sasl_plaintext", "SCRAM-SHA-256"), ("sasl_ssl", "PLAIN")]


@pytest.mark.parametrize(("mode", "mechanism"), CASES, ids=[f"{m}-{x or 'tls'}" for m, x in CASES])
def test_admin_producer_and_group_consumers(
    secured: devbroker.Cluster, mode: str, mechanism: str | None
) -> None:
    props = settings(secured, mode, mechanism)
    if mechanism == "OAUTHBEARER":
        assert props["sasl.oauthbearer.method"] == "oidc"
    round_trip(props)


@pytest.mark.parametrize(("mode", "mechanism"), OTHER_CASES, ids=[f"{m}-{x}" for m, x in OTHER_CASES])
def test_other_mechanism_and_transport_pairs(secured: devbroker.Cluster, mode: str, mechanism: str) -> None:
    round_trip(settings(secured, mode, mechanism), count=20, protocols=("consumer",))


def test_oauthbearer_with_a_token_callback(secured: devbroker.Cluster) -> None:
    """SASL_SSL + OAUTHBEARER with a token callback (no OIDC settings): it gets
    ``sasl.oauthbearer.config`` and its tokens are accepted."""
    sec = sec_of(secured)
    calls: list[str | None] = []

    def oauth_cb(config_str: str | None) -> tuple[str, float]:
        calls.append(config_str)
        return sec.mint_token("alice", lifetime_s=600)

    props = settings(secured, "sasl_ssl", "OAUTHBEARER")
    for key in [k for k in props if k.startswith("sasl.oauthbearer.")]:
        del props[key]
    round_trip({**props, "oauth_cb": oauth_cb, "sasl.oauthbearer.config": "from-config"})
    assert calls and calls[0] == "from-config"


def test_java_jaas_config_and_truststore_names(secured: devbroker.Cluster) -> None:
    props = settings(secured, "sasl_ssl", "SCRAM-SHA-512")
    user, password = props.pop("sasl.username"), props.pop("sasl.password")
    props["sasl.jaas.config"] = (
        f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" '
        f'password="{password}";'
    )
    props["ssl.truststore.location"] = props.pop("ssl.ca.location")
    round_trip(props, count=10, protocols=("classic",))


# ------------------------------------------------------------------------------ CLI and pipeline
def test_handoff_commands_take_command_config(
    secured: devbroker.Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    from kafka_handoff.cli.main import main

    path = str(sec_of(secured).client_json_path("sasl_ssl", "SCRAM-SHA-256"))
    props = settings(secured, "sasl_ssl", "SCRAM-SHA-256")
    topic = f"cli-{uuid.uuid4().hex[:6]}"
    # bootstrap.servers comes from the file
    assert main(["topics", "create", topic, "-p", "2", "--command-config", path]) == 0
    assert main(["topics", "list", "--command-config", path]) == 0
    assert main(["produce-sample", "-t", topic, "-n", "20", "--no-progress", "--command-config", path]) == 0
    assert (
        main(["consume", "-t", topic, "--from-beginning", "-n", "20", "--format", "none",
              "--command-config", path])
        == 0
    )  # fmt: skip
    out = capsys.readouterr()
    assert topic in out.out
    assert props["sasl.password"] not in out.out + out.err


@pytest.mark.spark  # not `slow`: the acceptance run over SASL_SSL; kept small (400 events, local[1])
def test_pipeline_run_over_sasl_ssl(secured: devbroker.Cluster, tmp_path: Path) -> None:
    """``handoff pipeline run --command-config client.json``: the consumer and the dead-letter producer
    both use SASL_SSL + SCRAM; every well-formed event is in the output once, every malformed one in the
    dead-letter topic, and the group's offsets are committed to the end."""
    pytest.importorskip("pyspark")
    from kafka_handoff.cli.main import main
    from kafka_handoff.pipeline import load_config
    from kafka_handoff.pipeline import testing as pt
    from kafka_handoff.pipeline.show import read_output
    from kafka_handoff.sample import generate_events
    from kafka_handoff.types import TopicPartition

    path = sec_of(secured).client_json_path("sasl_ssl", "SCRAM-SHA-512")
    props = settings(secured, "sasl_ssl", "SCRAM-SHA-512")
    topic, dlq = f"pipe-{uuid.uuid4().hex[:6]}", f"dlq-{uuid.uuid4().hex[:6]}"
    group = f"g-{topic}"
    with AdminClient(props) as admin:
        admin.create_topics([NewTopic(topic, 2, 1), NewTopic(dlq, 1, 1)], timeout=60)
    events = generate_events(400, seed=5, malformed_share=0.05, start_ms=int(time.time() * 1000))
    ends: dict[TopicPartition, int] = {}
    with Producer(props) as producer:
        futures = [producer.send(topic, e.value, key=e.key, timestamp=e.timestamp) for e in events]
        producer.flush(60)
        for future in futures:
            meta = future.result(0)
            tp = TopicPartition(topic, meta.partition)
            ends[tp] = max(ends.get(tp, 0), meta.offset + 1)
    toml = pt.write_config_toml(
        tmp_path / "p.toml",
        {
            "kafka": {"topics": [topic], "group.id": group},  # bootstrap and security: --command-config
            "batch": {"max_records": 200, "max_interval_ms": 500},
            "transform": {"function": "kafka_handoff.pipeline.testing:records"},
            "sink": {"format": "parquet", "path": str(tmp_path / "out")},
            "errors": {"malformed": "dead-letter-topic", "dead_letter_topic": dlq},
            "spark": {"master": "local[1]"},
        },
    )
    code = main(["pipeline", "run", str(toml), "--command-config", str(path), "--until-idle", "3", "-q"])
    assert code == 0
    config = load_config(toml, client_settings=props)
    got = pt.output_event_ids(read_output(config))
    assert pt.exactly_once_report(pt.valid_event_ids(events), got) == ""
    with AdminClient(props) as admin:
        committed = admin.list_group_offsets(group, list(ends), timeout=30)
    assert {tp: (c.offset if c else None) for tp, c in committed.items()} == ends
    malformed = sorted(e.value for e in events if e.malformed)
    dead: list[Any] = []
    with Consumer({**props, "group.id": f"d-{dlq}", "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe([dlq])
        deadline = time.monotonic() + 30
        while len(dead) < len(malformed) and time.monotonic() < deadline:
            dead.extend(consumer.poll(0.5))
    assert sorted(r.value for r in dead) == malformed


# ----------------------------------------------------------------------------- re-authentication
def test_reauthentication_keeps_the_connections_while_consuming(secured: devbroker.Cluster) -> None:
    """The ``sasl_ssl_reauth`` listener gives 5 s sessions: the broker closes a connection whose session
    expired.  A consumer that keeps consuming for 2.5 session lifetimes keeps the connections it had
    (KIP-368 re-authentication on the live connection) and receives every record produced meanwhile."""
    sec = sec_of(secured)
    props = settings(secured, "sasl_ssl_reauth", "SCRAM-SHA-512")
    port = int(props["bootstrap.servers"].split(",")[0].rsplit(":", 1)[1])
    topic = f"sec-reauth-{uuid.uuid4().hex[:8]}"
    secured.create_topic(topic, partitions=1)
    sent = received = 0
    with (
        Producer({**props, "linger.ms": 5}) as producer,
        Consumer({**props, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}) as consumer,
    ):
        consumer.subscribe([topic])

        def step(poll_s: float) -> None:
            nonlocal sent, received
            producer.send(topic, value=b"x")
            sent += 1
            received += len(consumer.poll(poll_s))

        deadline = time.monotonic() + 30
        while received == 0:
            step(0.2)
            assert time.monotonic() < deadline, "nothing consumed within 30s"
        # Both clients keep working until their set of connections is settled (unchanged for 10 steps),
        # well within one session lifetime.
        before, after = connections_across_sessions(port, sec.test_reauth_ms, step)
        producer.flush(30)
        deadline = time.monotonic() + 30
        while received < sent and time.monotonic() < deadline:
            received += len(consumer.poll(0.2))
    assert received == sent
    # An expired session is closed by the broker at its next request and the client reconnects: a new local
    # port.  Re-authenticated connections keep theirs.  (An idle connection is never checked by the broker,
    # hence "no new connection" rather than "some connection survived".)
    assert after, "no connection to the re-authentication listener at the end"
    assert after <= before, f"connections replaced ({sorted(before)} -> {sorted(after)}): no re-auth"


# --------------------------------------------------------------------------------- failure cases
def expect_failure(props: dict[str, Any], error: type[AuthenticationError], *fragments: str) -> str:
    """The consumer's next call -- subscribe() or a poll(LONG_S) -- raises ``error``, interrupting the
    poll's wait (a client that kept reconnecting quietly would return nothing after LONG_S), not retriable,
    naming the bootstrap broker in its ``broker`` attribute; its message has ``fragments``.  Returns its str
    and repr (callers check that no secret is in them)."""
    group = f"never-{uuid.uuid4().hex[:6]}"
    with Consumer({**props, "group.id": group}) as consumer, pytest.raises(error) as info:
        consumer.subscribe(["any-topic"])
        consumer.poll(LONG_S)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    assert not info.value.retriable
    assert info.value.broker == broker_of(props), info.value.broker
    return message + "\n" + repr(info.value)


def broker_of(props: dict[str, Any]) -> str:
    return str(props["bootstrap.servers"]).split(",")[0]


def test_wrong_password(secured: devbroker.Cluster) -> None:
    """Over TLS (SCRAM) and without (PLAIN): the broker's SASL error comes with its close, and must not be
    lost to a "connection closed" and a reconnect loop."""
    props = {**settings(secured, "sasl_ssl", "SCRAM-SHA-256"), "sasl.password": "not-the-password-123"}
    text = expect_failure(props, AuthenticationError, broker_of(props), "SASL_AUTHENTICATION_FAILED")
    assert "not-the-password-123" not in text
    assert "SslError" not in text
    plain = {**settings(secured, "sasl_plaintext", "PLAIN"), "sasl.password": "wrong-plain-456"}
    text = expect_failure(plain, AuthenticationError, broker_of(plain), "SASL_AUTHENTICATION_FAILED")
    assert "wrong-plain-456" not in text


def test_wrong_password_fails_producer_future_and_admin_call(secured: devbroker.Cluster) -> None:
    """Not retried until a timeout: a send retried until max.block.ms or delivery.timeout.ms, or an admin
    call retried until its (long) timeout, would fail with a timeout error instead."""
    props = {**settings(secured, "sasl_ssl", "PLAIN"), "sasl.password": "nope-nope"}
    with Producer(props) as producer, pytest.raises(AuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
        producer.send("any-topic", b"v").result(LONG_S)
    with AdminClient(props) as admin, pytest.raises(AuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
        admin.list_topics(timeout=LONG_S)


def test_mechanism_the_listener_does_not_enable(secured: devbroker.Cluster) -> None:
    """The re-authentication listener enables PLAIN and SCRAM only: OAUTHBEARER there is refused in the
    SASL handshake, and the error names the mechanism and the ones the broker offers."""
    props = settings(secured, "sasl_ssl_reauth", "SCRAM-SHA-256")
    for key in ("sasl.username", "sasl.password"):
        del props[key]
    sec = sec_of(secured)

    def oauth_cb(_config: str | None) -> tuple[str, float]:
        return sec.mint_token("alice")

    props.update({"sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb})
    expect_failure(
        props, AuthenticationError, broker_of(props), "UNSUPPORTED_SASL_MECHANISM", "OAUTHBEARER",
        "SCRAM-SHA-512",
    )  # fmt: skip


def test_untrusted_ca(secured: devbroker.Cluster, tmp_path: Path) -> None:
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_bytes(security.generate_ca("not the broker's CA").cert_pem)
    props = {**settings(secured, "ssl"), "ssl.ca.location": str(other_ca)}
    expect_failure(props, SslError, broker_of(props), "certificate verify failed")


def test_hostname_mismatch(secured: devbroker.Cluster) -> None:
    """The ``ssl_wrong_host`` listener's certificate names ``wrong-host.invalid`` only."""
    props = settings(secured, "ssl_wrong_host")
    expect_failure(props, SslError, broker_of(props), "mismatch")
    with AdminClient({**props, "ssl.endpoint.identification.algorithm": ""}) as admin:
        assert admin.describe_cluster(timeout=30).brokers  # only the host name was wrong


def test_mutual_tls_without_a_client_certificate(secured: devbroker.Cluster) -> None:
    """With TLS 1.3 the client's handshake completes before the broker checks the client certificate; the
    broker's alert arrives on the first read and must become an ``SslError``, not a reconnect loop."""
    props = settings(secured, "mtls")
    for key in ("ssl.certificate.location", "ssl.key.location", "ssl.key.password"):
        del props[key]
    text = expect_failure(props, SslError, broker_of(props))
    assert "certificate" in text.lower()


def test_oidc_endpoint_refusing_the_client(secured: devbroker.Cluster) -> None:
    props = {
        **settings(secured, "sasl_ssl", "OAUTHBEARER"),
        "sasl.oauthbearer.client.secret": "wrong-secret-789",
    }
    text = expect_failure(
        props, AuthenticationError, props["sasl.oauthbearer.token.endpoint.url"], "HTTP 401"
    )
    assert "wrong-secret-789" not in text


# -------------------------------------------------------------------------------------------- ACLs
# Kafka's ACL codes (org.apache.kafka.common.acl / resource): what CreateAcls and DescribeAcls carry.
CREATE_ACLS, DESCRIBE_ACLS = 30, 29
RESOURCE_TYPES = {"TOPIC": 2, "GROUP": 3}
OPERATIONS = {"READ": 3, "WRITE": 4, "DESCRIBE": 8}
LITERAL, ALLOW, ANY = 3, 3, 1


def create_acls(cluster: devbroker.Cluster, bindings: list[tuple[str, str, str, str]]) -> None:
    """``(resource type TOPIC|GROUP, name, principal, operation)`` ALLOW bindings, created through the
    PLAINTEXT listener (a super user there) with the dev broker's probe connection, and awaited until the
    broker's authorizer lists them."""
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with ProbeConnection(host, int(port), 30.0) as conn:
        creations = [
            {"resource_type": RESOURCE_TYPES[rtype], "resource_name": name, "resource_pattern_type": LITERAL,
             "principal": principal, "host": "*", "operation": OPERATIONS[op], "permission_type": ALLOW}
            for rtype, name, principal, op in bindings
        ]  # fmt: skip
        created = conn.request(CREATE_ACLS, conn.version_for(CREATE_ACLS), {"creations": creations})
        assert [int(r.error_code) for r in created.results] == [0] * len(bindings), created
        deadline = time.monotonic() + 30
        for rtype, name, _principal, _op in bindings:
            flt = {
                "resource_type_filter": RESOURCE_TYPES[rtype], "resource_name_filter": name,
                "pattern_type_filter": LITERAL, "principal_filter": None, "host_filter": None,
                "operation": ANY, "permission_type": ANY,
            }  # fmt: skip
            while not conn.request(DESCRIBE_ACLS, conn.version_for(DESCRIBE_ACLS), flt).resources:
                assert time.monotonic() < deadline, f"ACLs on {rtype} {name} not visible"
                time.sleep(0.2)


def user_props(cluster: devbroker.Cluster, user: str) -> dict[str, Any]:
    return sec_of(cluster).client_config("sasl_ssl", user=user, mechanism="SCRAM-SHA-256")


def poll_raises(consumer: Consumer, error: type[Exception]) -> Exception:
    """The consumer's poll() raises ``error`` (and is not retried quietly for ever): polls of up to LONG_S,
    which the error must interrupt, awaited until a safety deadline."""
    deadline = time.monotonic() + LONG_S
    with pytest.raises(error) as info:
        while (remaining := deadline - time.monotonic()) > 0:
            consumer.poll(remaining)
    return info.value


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consumer_without_read_on_the_topic(secured: devbroker.Cluster, protocol: str) -> None:
    topic = f"sec-acl-topic-{uuid.uuid4().hex[:8]}"
    secured.create_topic(topic, partitions=1)
    produce_all(user_props(secured, "alice"), topic, 5)  # before the ACLs: then nobody has WRITE
    # alice may read; bob may only describe (so the group assigns him the partition and the fetch is refused)
    create_acls(
        secured,
        [("TOPIC", topic, "User:alice", "READ"), ("TOPIC", topic, "User:alice", "DESCRIBE"),
         ("TOPIC", topic, "User:bob", "DESCRIBE")],
    )  # fmt: skip
    with Consumer(
        {**user_props(secured, "bob"), "group.id": f"g-{topic}", "group.protocol": protocol,
         "auto.offset.reset": "earliest"}
    ) as consumer:  # fmt: skip
        consumer.subscribe([topic])
        err = poll_raises(consumer, TopicAuthorizationFailedError)
    assert f"not allowed READ on TOPIC '{topic}' (Fetch" in str(err), str(err)
    assert isinstance(err, TopicAuthorizationFailedError)
    assert (err.operation, err.resource_type, err.resource_name) == ("READ", "TOPIC", topic)
    # alice reads the same topic fine
    got = consume_all(
        {**user_props(secured, "alice"), "group.id": f"ga-{topic}", "group.protocol": protocol}, topic, 5
    )
    assert len(got) == 5


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consumer_without_read_on_the_group(secured: devbroker.Cluster, protocol: str) -> None:
    topic = f"sec-acl-group-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    secured.create_topic(topic, partitions=1)
    create_acls(secured, [("GROUP", group, "User:alice", "READ")])
    with Consumer({**user_props(secured, "bob"), "group.id": group, "group.protocol": protocol}) as consumer:
        consumer.subscribe([topic])
        err = poll_raises(consumer, GroupAuthorizationFailedError)
    # FindCoordinator is the first request about the group: it needs DESCRIBE on it
    assert f"not allowed DESCRIBE on GROUP '{group}' (FindCoordinator" in str(err), str(err)
    assert isinstance(err, GroupAuthorizationFailedError)
    assert (err.operation, err.resource_type, err.resource_name) == ("DESCRIBE", "GROUP", group)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consumer_that_may_describe_but_not_read_the_group(secured: devbroker.Cluster, protocol: str) -> None:
    topic = f"sec-acl-gread-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    secured.create_topic(topic, partitions=1)
    create_acls(
        secured,
        [("GROUP", group, "User:bob", "DESCRIBE"), ("TOPIC", topic, "User:bob", "READ"),
         ("TOPIC", topic, "User:bob", "DESCRIBE")],
    )  # fmt: skip
    with Consumer({**user_props(secured, "bob"), "group.id": group, "group.protocol": protocol}) as consumer:
        consumer.subscribe([topic])
        err = poll_raises(consumer, GroupAuthorizationFailedError)
    api = "JoinGroup" if protocol == "classic" else "ConsumerGroupHeartbeat"
    assert f"not allowed READ on GROUP '{group}' ({api}" in str(err), str(err)


def test_producer_without_write(secured: devbroker.Cluster) -> None:
    topic = f"sec-acl-write-{uuid.uuid4().hex[:8]}"
    secured.create_topic(topic, partitions=1)
    create_acls(
        secured,
        [("TOPIC", topic, "User:alice", "WRITE"), ("TOPIC", topic, "User:alice", "DESCRIBE"),
         ("TOPIC", topic, "User:bob", "DESCRIBE")],
    )  # fmt: skip
    # The refusal is not retried until delivery.timeout.ms: that would fail the futures with a timeout.
    with Producer({**user_props(secured, "bob"), "linger.ms": 0, "delivery.timeout.ms": 60000}) as producer:
        futures = [producer.send(topic, value=b"v%d" % i) for i in range(3)]
        for future in futures:
            with pytest.raises(TopicAuthorizationFailedError) as info:
                future.result(LONG_S)
            assert f"not allowed WRITE on TOPIC '{topic}' (Produce" in str(info.value), str(info.value)
    # alice may write
    with Producer({**user_props(secured, "alice"), "linger.ms": 0}) as producer:
        assert producer.send(topic, value=b"ok").result(30).offset >= 0


# ------------------------------------------------------------------------------------------- bench
@pytest.mark.slow  # its own private broker, a warm-up pass and two client processes: ~20-50 s
def test_bench_throughput_over_sasl_ssl(tmp_path: Path) -> None:
    """``handoff bench throughput --security sasl_ssl`` (its own private broker): kafka-handoff and
    confluent-kafka consume every record over SASL_SSL; the report says so."""
    from kafka_handoff.cli.main import main

    records = 2000
    code = main(
        [
            "bench", "throughput", "--security", "sasl_ssl", "--sasl-mechanism", "SCRAM-SHA-512",
            "--records", str(records), "--value-bytes", "50", "--partitions", "2", "--repeat", "1",
            "--clients", "handoff,confluent", "--out", str(tmp_path),
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads((tmp_path / "throughput.json").read_text())
    assert data["config"]["security"] == "sasl_ssl SCRAM-SHA-512"
    assert {s["client"] for s in data["samples"]} == {"handoff", "confluent"}
    assert all(s["ok"] and s["records"] == records for s in data["samples"]), data["samples"]
