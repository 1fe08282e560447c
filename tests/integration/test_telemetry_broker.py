"""KIP-714 client telemetry against the real broker (issue 16 item 4).

Kafka 4.3.1 ships no metrics reporter that receives client telemetry (the broker serves
GetTelemetrySubscriptions/PushTelemetry only when a ``metric.reporters`` class implements
``ClientTelemetryExporterProvider``), so the test compiles a tiny one with the JDK's ``javac`` against the
broker's own jars (``tests/integration/telemetry/HandoffTelemetryReporter.java``, cached by source digest),
loads it into a dedicated broker as a Java agent (which puts it on the class path; the agent argument names
the file it appends every received push to), and configures a client-metrics resource with Kafka's own
admin tool (``kafka.admin.ConfigCommand``: IncrementalAlterConfigs on resource type CLIENT_METRICS).

Then a consumer and a producer of this project must push the requested metrics (and only those), their
``client_instance_id()`` must be the id the broker assigned (the one the pushes carry), and closing them
sends a terminating push.  The fallback -- a broker without a receiver -- is checked on the session broker:
telemetry disables itself after one request, without errors, warnings or retries.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import shutil
import subprocess
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff import devbroker
from kafka_handoff.consumer.consumer import Consumer
from kafka_handoff.consumer.listener import RebalanceConsumer, RebalanceListenerBase
from kafka_handoff.devbroker.config import java_executable
from kafka_handoff.devbroker.jars import cache_root, ensure_jars
from kafka_handoff.producer.producer import Producer
from kafka_handoff.protocol import telemetry as telemetry_module
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.integration

SOURCE = Path(__file__).parent / "telemetry" / "HandoffTelemetryReporter.java"
REPORTER_CLASS = "HandoffTelemetryReporter"
PREFIXES = ("org.apache.kafka.consumer.", "org.apache.kafka.producer.")
PUSH_INTERVAL_MS = 500


# ============================================================================================ helpers
def _javac(java: str) -> str:
    sibling = Path(java).resolve().parent / "javac"
    if sibling.is_file():
        return str(sibling)
    found = shutil.which("javac")
    if found is None:
        pytest.skip("no javac (a JDK) to build the test-only telemetry reporter")
    return found


def build_reporter_jar() -> Path:
    """Compile the reporter against the broker's jars into an agent jar (cached by source digest)."""
    jars = ensure_jars()
    java = java_executable()
    digest = hashlib.sha256(SOURCE.read_bytes() + jars.version.encode()).hexdigest()[:16]
    out_dir = cache_root() / "test-telemetry-reporter" / digest
    jar = out_dir / "handoff-telemetry-reporter.jar"
    if jar.is_file():
        return jar
    classes = out_dir / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [_javac(java), "-d", str(classes), "-cp", jars.classpath, str(SOURCE)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    tmp = out_dir / "reporter.jar.tmp"
    with zipfile.ZipFile(tmp, "w") as zf:
        zf.writestr("META-INF/MANIFEST.MF", f"Manifest-Version: 1.0\nPremain-Class: {REPORTER_CLASS}\n\n")
        for cls in classes.glob("*.class"):
            zf.write(cls, cls.name)
    tmp.replace(jar)
    return jar


def configure_client_metrics(bootstrap: str, name: str, metrics: tuple[str, ...], interval_ms: int) -> None:
    """Create a client-metrics resource with Kafka's admin tool (IncrementalAlterConfigs, CLIENT_METRICS)."""
    jars = ensure_jars()
    result = subprocess.run(
        [
            java_executable(),
            "-Xshare:auto",
            "-cp",
            jars.classpath,
            "kafka.admin.ConfigCommand",
            "--bootstrap-server",
            bootstrap,
            "--alter",
            "--entity-type",
            "client-metrics",
            "--entity-name",
            name,
            "--add-config",
            f"metrics=[{','.join(metrics)}],interval.ms={interval_ms}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"ConfigCommand failed: {result.stdout}\n{result.stderr}"


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of one protobuf message (bytes for length-delimited fields)."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i : i + size], i + size
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        else:
            raise AssertionError(f"unexpected protobuf wire type {wire}")
        yield number, wire, value


def metric_names(otlp: bytes) -> set[str]:
    """The metric names in an OTLP ``MetricsData`` (resource_metrics/scope_metrics/metrics/name)."""
    names: set[str] = set()
    for n1, _, resource_metrics in _fields(otlp):
        if n1 != 1:
            continue
        for n2, _, scope_metrics in _fields(resource_metrics):
            if n2 != 2:
                continue
            for n3, _, metric in _fields(scope_metrics):
                if n3 != 2:
                    continue
                for n4, _, value in _fields(metric):
                    if n4 == 1:
                        names.add(value.decode())
    return names


@dataclass
class Push:
    instance_id: uuid.UUID
    terminating: bool
    content_type: str
    metrics: set[str]


def kafka_uuid(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes, without padding."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def read_pushes(path: Path) -> list[Push]:
    if not path.exists():
        return []
    out: list[Push] = []
    for line in path.read_text().splitlines():
        parts = line.split(" ")
        if len(parts) != 4:
            continue  # a line being written
        instance, terminating, content_type, data = parts
        out.append(
            Push(
                kafka_uuid(instance),
                terminating == "true",
                content_type,
                metric_names(base64.b64decode(data)),
            )
        )
    return out


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# ============================================================================================ fixtures
@dataclass
class TelemetryBroker:
    bootstrap_servers: str
    pushes_file: Path


@pytest.fixture(scope="module")
def telemetry_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TelemetryBroker]:
    jar = build_reporter_jar()
    pushes = tmp_path_factory.mktemp("telemetry") / "pushes.txt"
    cluster = devbroker.start(
        nodes=1,
        overrides={"metric.reporters": REPORTER_CLASS},
        jvm_opts=[f"-javaagent:{jar}={pushes}"],
    )
    try:
        configure_client_metrics(cluster.bootstrap_servers, "handoff-test", PREFIXES, PUSH_INTERVAL_MS)
        yield TelemetryBroker(cluster.bootstrap_servers, pushes)
    finally:
        cluster.stop()


# ============================================================================================ tests
def test_consumer_and_producer_push_the_requested_metrics_to_the_broker(
    telemetry_broker: TelemetryBroker, topic_factory: Any
) -> None:
    bootstrap = telemetry_broker.bootstrap_servers
    topic = topic_factory(partitions=1, on=bootstrap)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"telemetry-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
        }
    )
    from_view: list[uuid.UUID | None] = []

    class Listener(RebalanceListenerBase):
        def on_partitions_assigned(
            self, partitions: Collection[TopicPartition], view: RebalanceConsumer
        ) -> None:
            from_view.append(view.client_instance_id(30))  # KIP-1306 lists it on the view

    try:
        consumer.set_rebalance_listener(Listener())
        consumer.subscribe([topic])
        for i in range(20):
            producer.send(topic, value=f"v{i}".encode())
        producer.flush(30)
        producer_id = producer.client_instance_id(30)
        consumer_id = consumer.client_instance_id(30)
        assert isinstance(producer_id, uuid.UUID) and isinstance(consumer_id, uuid.UUID)
        assert producer_id != consumer_id

        def pushed_both() -> bool:
            consumer.poll(0.1)
            ids = {p.instance_id for p in read_pushes(telemetry_broker.pushes_file) if p.metrics}
            return {producer_id, consumer_id} <= ids and bool(from_view)

        wait_for(pushed_both, 45, "pushes from the consumer and the producer, and the assign callback")
    finally:
        consumer.close(10)
        producer.close(10)

    assert from_view and from_view[0] == consumer_id
    pushes = read_pushes(telemetry_broker.pushes_file)
    by_client = {cid: [p for p in pushes if p.instance_id == cid] for cid in (consumer_id, producer_id)}
    consumer_metrics = set().union(*(p.metrics for p in by_client[consumer_id]))
    producer_metrics = set().union(*(p.metrics for p in by_client[producer_id]))
    # The requested metrics arrived, and nothing that was not requested.
    assert "org.apache.kafka.consumer.fetch.manager.records.consumed.total" in consumer_metrics
    assert "org.apache.kafka.producer.record.send.total" in producer_metrics
    for name in consumer_metrics | producer_metrics:
        assert name.startswith(PREFIXES), name
    assert {p.content_type for p in pushes} == {"OTLP"}  # the broker decompressed and parsed them
    # close() sends a terminating push (KIP-714).
    assert any(p.terminating for p in by_client[consumer_id])
    assert any(p.terminating for p in by_client[producer_id])


def test_without_a_telemetry_receiver_telemetry_disables_itself_quietly(
    broker: Any, topic_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The session broker has no receiver: the client gives up after one attempt, logs nothing above
    DEBUG, keeps working, and client_instance_id() answers None at once instead of waiting."""
    topic = topic_factory(partitions=1)
    caplog.set_level(logging.DEBUG, logger="kafka_handoff.protocol.telemetry")
    sent: list[int] = []
    original = telemetry_module.TelemetryManager._get_subscriptions

    def counting(self: telemetry_module.TelemetryManager) -> Any:
        sent.append(1)
        return original(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(telemetry_module.TelemetryManager, "_get_subscriptions", counting)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        try:
            producer.send(topic, value=b"x").result(30)
            # client_instance_id(600) on another thread, awaited for 30 s: it answers without waiting out
            # its timeout because the client knows telemetry is unsupported.
            answers: list[uuid.UUID | None] = []
            asker = threading.Thread(
                target=lambda: answers.append(producer.client_instance_id(600)), daemon=True
            )
            asker.start()
            asker.join(30)
            assert not asker.is_alive(), "client_instance_id() waited although telemetry is off"
            assert answers == [None]
            time.sleep(1.0)  # would show a retry loop
        finally:
            producer.close(10)
    assert sent == [1]
    records = [r for r in caplog.records if r.name == "kafka_handoff.protocol.telemetry"]
    assert all(r.levelno <= logging.DEBUG for r in records), [r.getMessage() for r in records]
    assert any("does not support client telemetry" in r.getMessage() for r in records)
