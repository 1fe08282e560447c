"""Helpers for tests against the ``schema_registry`` fixture (one registry shared by the whole run)."""

from __future__ import annotations

import json
import uuid

from kafka_handoff.schema_registry import Schema


def unique_subject(prefix: str = "subject") -> str:
    """A subject name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def avro_record(name: str, fields: list[dict[str, object]], namespace: str = "handoff.test") -> Schema:
    """An Avro record schema."""
    return Schema(json.dumps({"type": "record", "name": name, "namespace": namespace, "fields": fields}))
