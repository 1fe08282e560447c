"""The confluent-kafka compatibility consumer with its real network thread but no broker: configuration
errors, error_cb for unreachable brokers, the logger= forwarding and closed-consumer behaviour."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from kafka_handoff.compat import confluent_kafka as ck

pytestmark = pytest.mark.threads  # real clients with their network threads (no broker)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_constructor_checks_like_confluent() -> None:
    with pytest.raises(TypeError, match="expected configuration dict"):
        ck.Consumer()
    with pytest.raises(ValueError, match=r"group\.id must be set"):
        ck.Consumer({"bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(ck.KafkaException) as info:
        ck.Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "rebalance_cb": print})
    assert info.value.args[0].code() == ck.KafkaError._INVALID_ARG
    with pytest.raises(ck.KafkaException, match=r"session\.timeout\.ms"):
        ck.Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "session.timeout.ms": "soon"})


def test_error_cb_reports_all_brokers_down_from_poll() -> None:
    errors: list[ck.KafkaError] = []
    consumer = ck.Consumer(
        {"bootstrap.servers": f"127.0.0.1:{_closed_port()}", "group.id": "g", "error_cb": errors.append}
    )
    try:
        consumer.subscribe(["t"])
        deadline = time.monotonic() + 60
        while not errors:
            assert time.monotonic() < deadline, "no error_cb call"
            assert consumer.poll(0.2) is None
        assert errors[0].code() == ck.KafkaError._ALL_BROKERS_DOWN
    finally:
        consumer.close()


def test_logger_receives_client_logs_until_close() -> None:
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("compat-test-logger")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    handler = Collect()
    logger.addHandler(handler)
    try:
        consumer = ck.Consumer(
            {"bootstrap.servers": f"127.0.0.1:{_closed_port()}", "group.id": "g"}, logger=logger, log_level=7
        )
        consumer.subscribe(["t"])
        deadline = time.monotonic() + 60
        while not any(r.name.startswith("kafka_handoff") for r in records):
            assert time.monotonic() < deadline, "no log record forwarded"
            consumer.poll(0.2)
        consumer.close()
        seen = len(records)
        logging.getLogger("kafka_handoff.network.client").warning("after close")
        assert len(records) == seen
    finally:
        logger.removeHandler(handler)


def test_methods_of_a_closed_consumer_raise() -> None:
    consumer = ck.Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    consumer.close()
    consumer.close()  # a second close does nothing
    with pytest.raises(RuntimeError, match="Consumer closed"):
        consumer.poll(0)
    with pytest.raises(RuntimeError, match="Consumer closed"):
        consumer.assignment()
    with pytest.raises(RuntimeError, match="Consumer closed"):
        consumer.commit()
