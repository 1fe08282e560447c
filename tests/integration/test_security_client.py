"""kafka-handoff's own clients against the secured real broker (``devbroker.start(security=...)``).

One broker with every listener (SSL, mutual TLS, SASL_PLAINTEXT, SASL_SSL with PLAIN, SCRAM-SHA-256/512 and
OAUTHBEARER, a wrong-host listener, a listener with 5 s sessions).  Each case uses exactly the settings in
the ``client-<mode>[-<mechanism>].json`` the broker tooling wrote (librdkafka's names): the admin client
creates a topic, the producer writes to it, a group consumer of each protocol reads everything back.
Then the failures: each must raise :class:`AuthenticationError` / :class:`SslError` naming the broker and
the cause from the next call within seconds.  And KIP-368: on 5 s sessions a consumer keeps consuming
while its connections survive several session lifetimes (re-authenticated, not replaced).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff import devbroker
from kafka_handoff.admin import AdminClient, NewTopic
from kafka_handoff.consumer import Consumer
from kafka_handoff.errors import AuthenticationError, SslError
from kafka_handoff.producer import Producer

security = pytest.importorskip("kafka_handoff.devbroker.security")

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def secured() -> Iterator[Any]:
    start: Any = devbroker.start  # its security= argument comes with the secured dev broker
    cluster = start(nodes=1, security=security.ALL_MODES)
    try:
        yield cluster
    finally:
        cluster.stop()


def settings(cluster: Any, mode: str, mechanism: str | None = None) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        Path(cluster.security.client_json_path(mode, mechanism)).read_text(encoding="utf-8")
    )
    return loaded


def round_trip(
    props: dict[str, Any], *, count: int = 50, protocols: tuple[str, ...] = ("classic", "consumer")
) -> None:
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    with AdminClient(props) as admin:
        admin.create_topics([NewTopic(topic, 2, 1)], timeout=60)
    with Producer(props) as producer:
        futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in range(count)]
        producer.flush(60)
        assert all(f.result(0).offset >= 0 for f in futures)
    for protocol in protocols:
        got: list[Any] = []
        group = f"g-{protocol}-{uuid.uuid4().hex[:6]}"
        with Consumer(
            {**props, "group.id": group, "group.protocol": protocol, "auto.offset.reset": "earliest"}
        ) as consumer:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 60
            while len(got) < count and time.monotonic() < deadline:
                got.extend(consumer.poll(0.5))
            consumer.commit_sync()
        assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(count)), protocol


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
def test_admin_producer_and_group_consumers(secured: Any, mode: str, mechanism: str | None) -> None:
    round_trip(settings(secured, mode, mechanism))


def test_oauthbearer_with_a_token_callback(secured: Any) -> None:
    calls: list[str | None] = []

    def oauth_cb(config_str: str | None) -> tuple[str, float]:
        calls.append(config_str)
        token, expiry = secured.security.mint_token("alice", lifetime_s=600)
        return token, expiry

    props = settings(secured, "sasl_ssl", "OAUTHBEARER")
    for key in list(props):
        if key.startswith("sasl.oauthbearer."):
            del props[key]
    round_trip(
        {**props, "oauth_cb": oauth_cb, "sasl.oauthbearer.config": "from-config"}, protocols=("consumer",)
    )
    assert calls and calls[0] == "from-config"


def test_java_jaas_config_for_scram(secured: Any) -> None:
    props = settings(secured, "sasl_ssl", "SCRAM-SHA-512")
    user, password = props.pop("sasl.username"), props.pop("sasl.password")
    props["sasl.jaas.config"] = (
        f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" '
        f'password="{password}";'
    )
    props["ssl.truststore.location"] = props.pop("ssl.ca.location")
    round_trip(props, count=10, protocols=("classic",))


# ------------------------------------------------------------------------------------------ failures
def expect_failure(props: dict[str, Any], error: type[AuthenticationError], *fragments: str) -> str:
    start = time.monotonic()
    consumer = Consumer({**props, "group.id": f"never-{uuid.uuid4().hex[:4]}"})
    try:
        with pytest.raises(error) as info:
            consumer.subscribe(["any-topic"])
            while time.monotonic() - start < 40:
                consumer.poll(0.5)
        elapsed = time.monotonic() - start
    finally:
        consumer.close()
    # Seconds, not a reconnect loop until some timeout (bounded loosely: the machine may be loaded).
    assert elapsed < 20, f"took {elapsed:.1f}s"
    text = str(info.value)
    for fragment in fragments:
        assert fragment in text, text
    assert not info.value.retriable
    return text


def test_wrong_password(secured: Any) -> None:
    props = settings(secured, "sasl_ssl", "SCRAM-SHA-512")
    bootstrap = props["bootstrap.servers"].split(",")[0]
    text = expect_failure(
        {**props, "sasl.password": "not-the-password"},
        AuthenticationError,
        bootstrap,
        "SASL_AUTHENTICATION_FAILED",
    )
    assert "not-the-password" not in text


def test_wrong_password_fails_producer_future_and_admin_call(secured: Any) -> None:
    props = {**settings(secured, "sasl_plaintext", "PLAIN"), "sasl.password": "nope-nope"}
    start = time.monotonic()
    with Producer(props) as producer, pytest.raises(AuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
        producer.send("any-topic", b"v").result(20)
    with AdminClient(props) as admin, pytest.raises(AuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
        admin.list_topics(timeout=30)
    assert time.monotonic() - start < 25


def test_mechanism_the_listener_does_not_enable(secured: Any) -> None:
    enabled = [
        line
        for path in Path(secured.data_dir).glob("node-*/*.properties")
        for line in path.read_text(encoding="utf-8").splitlines()
        if "sasl_reauth." in line.lower() and "sasl.enabled.mechanisms" in line
    ]
    if not enabled or any("OAUTHBEARER" in line for line in enabled):
        pytest.skip(f"the dev broker's re-authentication listener enables OAUTHBEARER: {enabled}")
    props = settings(secured, "sasl_ssl_reauth", "SCRAM-SHA-256")
    for key in ("sasl.username", "sasl.password"):
        del props[key]
    props.update(
        {"sasl.mechanism": "OAUTHBEARER", "oauth_cb": lambda cfg: secured.security.mint_token("alice")}
    )
    expect_failure(props, AuthenticationError, "UNSUPPORTED_SASL_MECHANISM", "OAUTHBEARER", "SCRAM-SHA-512")


def test_hostname_mismatch_and_untrusted_ca(secured: Any, tmp_path: Path) -> None:
    wrong = settings(secured, "ssl_wrong_host")
    expect_failure(wrong, SslError, wrong["bootstrap.servers"].split(",")[0], "mismatch")
    with AdminClient({**wrong, "ssl.endpoint.identification.algorithm": "none"}) as admin:
        assert admin.list_topics(timeout=30) is not None
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_bytes(security.generate_ca("some other CA").cert_pem)
    expect_failure(
        {**settings(secured, "ssl"), "ssl.ca.location": str(other_ca)}, SslError, "certificate verify failed"
    )


def test_oidc_endpoint_refusing_the_client(secured: Any) -> None:
    props = settings(secured, "sasl_ssl", "OAUTHBEARER")
    expect_failure(
        {**props, "sasl.oauthbearer.client.secret": "wrong-secret"},
        AuthenticationError,
        props["sasl.oauthbearer.token.endpoint.url"],
        "HTTP 401",
    )


# ------------------------------------------------------------------------------------------ KIP-368
def test_reauthentication_keeps_connections_while_consuming(secured: Any) -> None:
    helpers = pytest.importorskip("security_helpers")
    established_local_ports = helpers.established_local_ports

    props = settings(secured, "sasl_ssl_reauth", "SCRAM-SHA-512")
    port = int(props["bootstrap.servers"].split(",")[0].rsplit(":", 1)[1])
    topic = f"reauth-{uuid.uuid4().hex[:6]}"
    with AdminClient(props) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)], timeout=60)
    sent = received = 0
    lifetime_s = secured.security.test_reauth_ms / 1000
    with (
        Producer({**props, "linger.ms": 5}) as producer,
        Consumer(
            {**props, "group.id": f"reauth-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}
        ) as consumer,
    ):
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while received == 0:
            producer.send(topic, b"x")
            sent += 1
            received += len(consumer.poll(0.2))
            assert time.monotonic() < deadline, "nothing consumed within 30 s"
        before = established_local_ports(port)
        assert before
        until = time.monotonic() + 2.5 * lifetime_s
        while time.monotonic() < until:
            producer.send(topic, b"x")
            sent += 1
            received += len(consumer.poll(0.1))
        after = established_local_ports(port)
        producer.flush(30)
        deadline = time.monotonic() + 30
        while received < sent and time.monotonic() < deadline:
            received += len(consumer.poll(0.2))
    assert received == sent
    assert before & after, f"every connection was replaced ({before} -> {after}): no re-authentication"


# ------------------------------------------------------------------------------------------ CLI and pipeline
def test_handoff_commands_take_command_config(secured: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from kafka_handoff.cli.main import main

    path = secured.security.client_json_path("sasl_ssl", "SCRAM-SHA-256")
    props = settings(secured, "sasl_ssl", "SCRAM-SHA-256")
    topic = f"cli-{uuid.uuid4().hex[:6]}"
    # bootstrap.servers comes from the file
    assert main(["topics", "create", topic, "-p", "2", "--command-config", str(path)]) == 0
    assert main(["topics", "list", "--command-config", str(path)]) == 0
    assert (
        main(["produce-sample", "-t", topic, "-n", "20", "--no-progress", "--command-config", str(path)]) == 0
    )
    assert (
        main(
            [
                "consume",
                "-t",
                topic,
                "--from-beginning",
                "-n",
                "20",
                "--format",
                "none",
                "--command-config",
                str(path),
            ]
        )
        == 0
    )
    out = capsys.readouterr()
    assert topic in out.out
    assert props["sasl.password"] not in out.out + out.err


@pytest.mark.spark
def test_pipeline_run_over_sasl_ssl(secured: Any, tmp_path: Path) -> None:
    """``handoff pipeline run --command-config client.json``: the consumer and the dead-letter producer
    both use SASL_SSL; every well-formed event is in the output once, every malformed one in the dead-letter
    topic."""
    pytest.importorskip("pyspark")
    from kafka_handoff.cli.main import main
    from kafka_handoff.cli.produce_sample import generate_events
    from kafka_handoff.pipeline import load_config
    from kafka_handoff.pipeline import testing as pt
    from kafka_handoff.pipeline.show import read_output

    path = secured.security.client_json_path("sasl_ssl", "SCRAM-SHA-512")
    props = settings(secured, "sasl_ssl", "SCRAM-SHA-512")
    topic, dlq = f"pipe-{uuid.uuid4().hex[:6]}", f"dlq-{uuid.uuid4().hex[:6]}"
    with AdminClient(props) as admin:
        admin.create_topics([NewTopic(topic, 2, 1), NewTopic(dlq, 1, 1)], timeout=60)
    events = generate_events(400, seed=5, malformed_share=0.05, start_ms=int(time.time() * 1000))
    with Producer(props) as producer:
        for e in events:
            producer.send(topic, e.value, key=e.key, timestamp=e.timestamp)
        producer.flush(60)
    toml = pt.write_config_toml(
        tmp_path / "p.toml",
        {
            "kafka": {
                "topics": [topic],
                "group.id": f"g-{topic}",
            },  # bootstrap and security: --command-config
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
    malformed = sorted(e.value for e in events if e.malformed)
    dead: list[Any] = []
    with Consumer({**props, "group.id": f"d-{dlq}", "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe([dlq])
        deadline = time.monotonic() + 30
        while len(dead) < len(malformed) and time.monotonic() < deadline:
            dead.extend(consumer.poll(0.5))
    assert sorted(r.value for r in dead) == malformed
