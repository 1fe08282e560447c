"""``AdminClient.list_offsets(isolation_level=)``: the allowed values are checked before anything is sent
(tests/integration/test_compat_confluent_admin.py checks what the broker answers for each)."""

from __future__ import annotations

import socket

import pytest

from kafka_handoff.admin import AdminClient
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit


def test_an_unknown_isolation_level_names_the_allowed_values() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    try:
        with pytest.raises(ValueError, match="allowed: read_uncommitted, read_committed"):
            admin.list_offsets([TopicPartition("t", 0)], isolation_level="committed", timeout=1)
    finally:
        admin.close(0)
