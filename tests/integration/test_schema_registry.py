"""SchemaRegistryClient against the real dev Schema Registry (Apicurio Registry's Confluent API, started by
the ``schema_registry`` fixture): every call of the client, compatibility rules, deletes, references, the
three schema types, errors, and the asyncio twin.  Where the dev registry departs from Confluent's (see
docs/schema-registry.md, "The dev registry"), the test says so."""

from __future__ import annotations

import asyncio
import json

import pytest
from registry_helpers import avro_record, unique_subject

from kafka_handoff.schema_registry import (
    AsyncSchemaRegistryClient,
    Schema,
    SchemaReference,
    SchemaRegistryClient,
    SchemaRegistryError,
    ServerConfig,
)

pytestmark = pytest.mark.integration

V1 = avro_record("User", [{"name": "id", "type": "long"}])
V2 = avro_record("User", [{"name": "id", "type": "long"}, {"name": "name", "type": "string", "default": ""}])
# Changes the type of an existing field: no reader of one can read the other.
INCOMPATIBLE = avro_record("User", [{"name": "id", "type": "string"}])
PROTO = Schema(
    'syntax = "proto3";\npackage handoff.test;\n\nmessage Click {\n  int64 id = 1;\n}\n', "PROTOBUF"
)
JSON_SCHEMA = Schema(
    json.dumps(
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"id": {"type": "integer"}},
        }
    ),
    "JSON",
)


@pytest.fixture
def client(schema_registry: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": schema_registry, "max.retries": 1, "retries.wait.ms": 100})


def fresh(url: str) -> SchemaRegistryClient:
    """A client with empty caches: what it returns comes from the registry."""
    return SchemaRegistryClient({"url": url})


def test_register_returns_the_same_id_for_the_same_schema(
    client: SchemaRegistryClient, schema_registry: str
) -> None:
    subject, other = unique_subject("same-id"), unique_subject("same-id-other")
    first = client.register_schema(subject, V1)
    assert fresh(schema_registry).register_schema(subject, V1) == first
    # As Confluent's: a schema has one id whichever subject registers it.
    assert fresh(schema_registry).register_schema(other, V1) == first
    assert fresh(schema_registry).register_schema(subject, V2) != first


def test_lookups_by_id_subject_and_version(client: SchemaRegistryClient, schema_registry: str) -> None:
    subject = unique_subject("lookups")
    id1 = client.register_schema(subject, V1)
    id2 = client.register_schema(subject, V2)
    reader = fresh(schema_registry)
    assert json.loads(reader.get_schema(id1).schema_str) == json.loads(V1.schema_str)
    assert reader.get_schema(id2).schema_type == "AVRO"
    found = reader.lookup_schema(subject, V1)
    assert (found.schema_id, found.subject, found.version) == (id1, subject, 1)
    assert subject in reader.get_subjects()
    assert reader.get_versions(subject) == [1, 2]
    version = reader.get_version(subject, 2)
    assert (version.schema_id, version.version, version.subject) == (id2, 2, subject)
    latest = reader.get_latest_version(subject)
    assert (latest.schema_id, latest.version) == (id2, 2)
    pairs = {(v.subject, v.version) for v in reader.get_schema_versions(id1)}
    assert (subject, 1) in pairs
    assert set(reader.get_schema_types()) >= {"AVRO", "PROTOBUF", "JSON"}


def test_unknown_subject_version_and_id_are_404_with_confluent_codes(client: SchemaRegistryClient) -> None:
    subject = unique_subject("missing")
    with pytest.raises(SchemaRegistryError) as info:
        client.get_versions(subject)
    assert (info.value.http_status_code, info.value.error_code) == (404, 40401)
    client.register_schema(subject, V1)
    with pytest.raises(SchemaRegistryError) as info:
        client.get_version(subject, 99)
    assert (info.value.http_status_code, info.value.error_code) == (404, 40402)
    with pytest.raises(SchemaRegistryError) as info:
        client.get_schema(987_654_321)
    assert (info.value.http_status_code, info.value.error_code) == (404, 40403)
    with pytest.raises(SchemaRegistryError) as info:
        client.lookup_schema(subject, V2)
    assert info.value.http_status_code == 404


def test_compatibility_check_and_an_incompatible_registration_refused(client: SchemaRegistryClient) -> None:
    subject = unique_subject("compat")
    client.register_schema(subject, V1)
    assert client.set_compatibility(subject, "BACKWARD") == "BACKWARD"
    assert client.get_compatibility(subject) == "BACKWARD"
    assert client.test_compatibility(subject, V2) is True
    assert client.test_compatibility(subject, INCOMPATIBLE, verbose=True) is False
    with pytest.raises(SchemaRegistryError) as info:
        client.register_schema(subject, INCOMPATIBLE)
    err = info.value
    assert err.http_status_code == 409
    # The message says what is wrong (Apicurio: "Incompatible artifact: ... reader type: STRING not compatible
    # with writer type: LONG ..."); its error_code is 0 where Confluent's is 409.
    assert "ncompatible" in err.error_message
    assert client.get_versions(subject) == [1]
    client.register_schema(subject, V2)  # the compatible one is accepted
    assert client.get_versions(subject) == [1, 2]


def test_config_set_get_delete(client: SchemaRegistryClient) -> None:
    subject = unique_subject("config")
    client.register_schema(subject, V1)
    assert client.set_config(subject, ServerConfig(compatibility="FULL")).compatibility == "FULL"
    assert client.get_config(subject).compatibility_level == "FULL"
    assert client.delete_config(subject).compatibility_level == "FULL"
    # Back to the registry's level (Apicurio's default is NONE; Confluent's is BACKWARD).
    assert client.get_config(subject).compatibility_level == client.get_config().compatibility_level


def test_soft_and_hard_deletes(client: SchemaRegistryClient, schema_registry: str) -> None:
    subject = unique_subject("deletes")
    client.register_schema(subject, V1)
    client.register_schema(subject, V2)
    assert client.delete_version(subject, 2) == 2
    assert client.delete_version(subject, 2, permanent=True) == 2
    assert fresh(schema_registry).get_versions(subject) == [1]
    assert client.delete_subject(subject) == [1]
    assert subject not in client.get_subjects()
    client.delete_subject(subject, permanent=True)
    assert subject not in client.get_subjects(deleted=True)
    with pytest.raises(SchemaRegistryError) as info:
        client.get_versions(subject)
    assert info.value.http_status_code == 404


def test_references(client: SchemaRegistryClient, schema_registry: str) -> None:
    address_subject, person_subject = unique_subject("address"), unique_subject("person")
    address = avro_record("Address", [{"name": "city", "type": "string"}])
    client.register_schema(address_subject, address)
    person = Schema(
        json.dumps(
            {
                "type": "record",
                "name": "Person",
                "namespace": "handoff.test",
                "fields": [{"name": "home", "type": "handoff.test.Address"}],
            }
        ),
        "AVRO",
        [SchemaReference("handoff.test.Address", address_subject, 1)],
    )
    person_id = client.register_schema(person_subject, person)
    reader = fresh(schema_registry)
    assert reader.get_schema(person_id).references == (
        SchemaReference("handoff.test.Address", address_subject, 1),
    )
    assert reader.get_latest_version(person_subject).schema.references == person.references
    assert reader.get_referenced_by(address_subject, 1) == [person_id]


@pytest.mark.parametrize("schema", [PROTO, JSON_SCHEMA], ids=["protobuf", "json"])
def test_protobuf_and_json_schema_types(
    client: SchemaRegistryClient, schema_registry: str, schema: Schema
) -> None:
    subject = unique_subject(schema.schema_type.lower())
    schema_id = client.register_schema(subject, schema)
    reader = fresh(schema_registry)
    back = reader.get_schema(schema_id)
    assert back.schema_type == schema.schema_type
    latest = reader.get_latest_version(subject)
    assert (latest.schema_id, latest.schema.schema_type) == (schema_id, schema.schema_type)
    assert reader.lookup_schema(subject, schema).schema_id == schema_id


def test_what_the_dev_registry_does_not_serve_reaches_the_caller(client: SchemaRegistryClient) -> None:
    """Modes and subjects-by-id are not in Apicurio's Confluent API: the caller gets a 404 error, once."""
    subject = unique_subject("unsupported")
    schema_id = client.register_schema(subject, V1)
    with pytest.raises(SchemaRegistryError) as info:
        client.get_mode(subject)
    assert info.value.http_status_code == 404
    with pytest.raises(SchemaRegistryError) as info:
        client.get_global_mode()
    assert info.value.http_status_code == 404
    with pytest.raises(SchemaRegistryError) as info:
        client.get_subjects_by_schema_id(schema_id)
    assert info.value.http_status_code == 404


def test_asyncio_twin(schema_registry: str) -> None:
    subject = unique_subject("aio")

    async def main() -> None:
        async with AsyncSchemaRegistryClient({"url": schema_registry}) as client:
            first = await client.register_schema(subject, V1)
            assert await client.register_schema(subject, V1) == first
            assert (await client.get_latest_version(subject)).schema_id == first
            assert await client.get_versions(subject) == [1]
            assert await client.set_compatibility(subject, "BACKWARD") == "BACKWARD"
            assert await client.test_compatibility(subject, INCOMPATIBLE) is False
            with pytest.raises(SchemaRegistryError) as info:
                await client.register_schema(subject, INCOMPATIBLE)
            assert info.value.http_status_code == 409
            assert await client.delete_subject(subject) == [1]

    asyncio.run(main())


def test_keep_alive_connections_are_reused(client: SchemaRegistryClient) -> None:
    subject = unique_subject("keepalive")
    client.register_schema(subject, V1)
    for _ in range(5):
        assert client.get_versions(subject) == [1]
    pool = client._pool
    assert sum(len(bucket) for bucket in pool._idle.values()) == 1
