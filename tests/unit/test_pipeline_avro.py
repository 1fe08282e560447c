"""The Avro decoding core of parse_avro (``pipeline/avro.py``, ``_avrodecode.c``), no Spark, no broker.

Values are written by fastavro (the reference encoder) with the Confluent header; writer schemas come from a
dict by id (the decoder's ``get_schema`` interface; the real registry is in the integration test).  Checked:
every supported Avro type, schema evolution (writer -> reader resolution), every reject reason, the C and the
pure-Python decoders giving identical results (on the cases and a seeded fuzz of mutated values), fastavro's
own resolution agreeing on the decoded values, and a writer schema fetched once per id.
"""

from __future__ import annotations

import io
import json
import os
import random
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from kafka_handoff._native import load_extension
from kafka_handoff.errors import ConfigError
from kafka_handoff.pipeline import avro
from kafka_handoff.pipeline.avro import AvroColumns, Decoded, RegistryUnavailableError, frame

pytestmark = pytest.mark.unit

NATIVE = load_extension("kafka_handoff.pipeline._avrodecode", honour_env=False)
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
needs_c = pytest.mark.skipif(NATIVE is None and not CI, reason="the _avrodecode extension is not built")
FLAT_WAYS = ["native", "python"]


class NotFound(Exception):
    http_status_code = 404
    error_code = 40403


class Registry:
    """Writer schemas by id (what ``SchemaRegistryClient.get_schema`` gives), counting the lookups."""

    def __init__(self, schemas: Mapping[int, Any], types: Mapping[int, str] | None = None) -> None:
        self.schemas = dict(schemas)
        self.types = dict(types or {})
        self.calls: list[int] = []
        self.down = False

    def get_schema(self, schema_id: int) -> Any:
        self.calls.append(schema_id)
        if self.down:
            raise ConnectionError("connection refused")
        if schema_id not in self.schemas:
            raise NotFound(f"Schema {schema_id} not found")
        text = self.schemas[schema_id]
        return _Schema(text if isinstance(text, str) else json.dumps(text), self.types.get(schema_id, "AVRO"))


class _Schema:
    def __init__(self, schema_str: str, schema_type: str) -> None:
        self.schema_str = schema_str
        self.schema_type = schema_type


def encode(schema: Any, record: Mapping[str, Any], schema_id: int = 1) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(json.dumps(schema))), dict(record))
    return frame(schema_id, out.getvalue())


def decode(reader: Any, registry: Registry, values: Sequence[bytes | None], way: str) -> Decoded:
    if way == "native" and NATIVE is None:
        assert not CI, "CI=true: the C Avro decoder must be built"
        pytest.skip("the _avrodecode extension is not built")
    return AvroColumns(json.dumps(reader), registry, implementation=way).decode(pa.array(values, pa.binary()))


def same(a: Decoded, b: Decoded) -> None:
    assert a.ok.tolist() == b.ok.tolist()
    assert a.table.equals(b.table), (a.table.to_pylist(), b.table.to_pylist())
    assert a.errors.to_pylist() == b.errors.to_pylist()


def rec(name: str, fields: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": fields, **extra}


COLOR = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}
ALL_TYPES = rec("All", [
    {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"}, {"name": "l", "type": "long"},
    {"name": "f", "type": "float"}, {"name": "d", "type": "double"}, {"name": "by", "type": "bytes"},
    {"name": "s", "type": "string"}, {"name": "e", "type": COLOR},
    {"name": "fx", "type": {"type": "fixed", "name": "Two", "size": 2}},
    {"name": "n", "type": "null"},
    {"name": "ns", "type": ["null", "string"], "default": None},
    {"name": "sn", "type": ["long", "null"], "default": 0},
    {"name": "ne", "type": ["null", "Color"], "default": None},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
])  # fmt: skip
ALL_READER = rec("All", [f for f in ALL_TYPES["fields"] if f["name"] != "n"])


def all_record(k: int) -> dict[str, Any]:
    import datetime as dt

    utc = dt.UTC
    return {
        "b": k % 2 == 0, "i": -(2**31) if k == 3 else k * 7 - 11, "l": 2**62 + k if k % 3 else -k,
        "f": k / 4, "d": k * 1e300 if k == 5 else -k / 3, "by": bytes([k, 0, 255]), "s": "héllo 🌍" * (k % 3),
        "e": COLOR["symbols"][k % 3], "fx": bytes([k, k]), "n": None, "ns": None if k % 2 else f"v{k}",
        "sn": None if k % 3 == 0 else k, "ne": None if k % 4 == 0 else "BLUE",
        "ts": dt.datetime(2024, 1, 1, tzinfo=utc) + dt.timedelta(milliseconds=k),
        "us": dt.datetime(2024, 1, 1, tzinfo=utc) + dt.timedelta(microseconds=k),
        "day": dt.date(2024, 2, 29) + dt.timedelta(days=k),
    }  # fmt: skip


@pytest.mark.parametrize("way", FLAT_WAYS)
def test_every_flat_type_decodes_to_its_arrow_column(way: str) -> None:
    registry = Registry({1: ALL_TYPES})
    records = [all_record(k) for k in range(12)]
    got = decode(ALL_READER, registry, [encode(ALL_TYPES, r) for r in records], way)
    assert got.ok.all() and len(got.errors) == 0
    schema = got.table.schema
    assert [str(schema.field(n).type) for n in ("b", "i", "l", "f", "d", "by", "s", "e", "fx")] == [
        "bool", "int32", "int64", "float", "double", "binary", "string", "string", "binary"]  # fmt: skip
    assert str(schema.field("ts").type) == "timestamp[ms, tz=UTC]"
    assert str(schema.field("us").type) == "timestamp[us, tz=UTC]"
    assert str(schema.field("day").type) == "date32[day]"
    assert not schema.field("s").nullable and schema.field("ns").nullable and schema.field("sn").nullable
    rows = got.table.to_pylist()
    for row, want in zip(rows, records, strict=True):
        for name in ("b", "i", "l", "d", "by", "s", "e", "fx", "ns", "sn", "ne", "day"):
            assert row[name] == want[name], name
        assert row["f"] == pytest.approx(want["f"])
        assert row["ts"] == want["ts"] and row["us"] == want["us"]


def test_the_flat_decoders_agree_with_fastavros_resolution() -> None:
    registry = Registry({1: ALL_TYPES})
    values = [encode(ALL_TYPES, all_record(k)) for k in range(12)]
    reference = decode(ALL_READER, registry, values, "fastavro")
    for way in FLAT_WAYS:
        same(decode(ALL_READER, registry, values, way), reference)


NESTED = rec("Order", [
    {"name": "id", "type": "string"},
    {"name": "items", "type": {"type": "array", "items": rec("Item", [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}])}},
    {"name": "tags", "type": {"type": "map", "values": "long"}},
    {"name": "ship", "type": ["null", rec("Addr", [{"name": "city", "type": "string"}])], "default": None},
])  # fmt: skip


def test_nested_records_arrays_and_maps_take_the_fastavro_path() -> None:
    registry = Registry({1: NESTED})
    orders: list[dict[str, Any]] = [
        {"id": "o1", "items": [{"sku": "a", "qty": 2}], "tags": {"x": 1}, "ship": {"city": "Oslo"}},
        {"id": "o2", "items": [], "tags": {}, "ship": None},
    ]
    decoder = AvroColumns(json.dumps(NESTED), registry)
    got = decoder.decode(pa.array([encode(NESTED, o) for o in orders], pa.binary()))
    assert got.ok.all() and decoder.counts["fastavro"] == 2
    assert got.table.schema.field("items").type == pa.list_(
        pa.struct([("sku", pa.string()), ("qty", pa.int32())])
    )
    rows = got.table.to_pylist()
    assert rows[0]["items"] == [{"sku": "a", "qty": 2}] and rows[0]["tags"] == [("x", 1)]
    assert rows[0]["ship"] == {"city": "Oslo"} and rows[1]["ship"] is None


V1 = rec("Click", [
    {"name": "id", "type": "string"}, {"name": "count", "type": "int"}, {"name": "ratio", "type": "float"},
    {"name": "page", "type": "string"}, {"name": "gone", "type": "string"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["VIEW", "BUY", "OLD"]}},
    {"name": "maybe", "type": ["null", "long"], "default": None},
])  # fmt: skip
V2 = rec("Click", [
    {"name": "id", "type": "string"},
    {"name": "count", "type": "long"},                       # int -> long
    {"name": "ratio", "type": "double"},                     # float -> double
    {"name": "url", "type": "bytes", "aliases": ["page"]},   # renamed (alias), string -> bytes
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["VIEW", "BUY", "OTHER"],
                              "default": "OTHER"}},          # OLD -> the reader's default
    {"name": "maybe", "type": ["null", "long"], "default": None},
    {"name": "country", "type": "string", "default": "NO"},  # added, with a default
    {"name": "score", "type": ["null", "double"], "default": None},
])  # fmt: skip


@pytest.mark.parametrize("way", [*FLAT_WAYS, "fastavro"])
def test_a_v2_reader_reads_v1_and_v2_records(way: str) -> None:
    registry = Registry({1: V1, 2: V2})
    v1 = [{"id": f"a{k}", "count": k, "ratio": 0.5, "page": f"/p{k}", "gone": "x",
           "kind": ["VIEW", "OLD"][k % 2], "maybe": k if k % 2 else None} for k in range(4)]  # fmt: skip
    v2 = {"id": "b", "count": 2**40, "ratio": 0.1, "url": b"/q", "kind": "BUY", "maybe": 3, "country": "SE",
          "score": 1.5}  # fmt: skip
    got = decode(V2, registry, [*(encode(V1, r, 1) for r in v1), encode(V2, v2, 2)], way)
    assert got.ok.all(), got.errors.to_pylist()
    rows = got.table.to_pylist()
    assert [r["count"] for r in rows] == [0, 1, 2, 3, 2**40]
    assert [r["url"] for r in rows] == [b"/p0", b"/p1", b"/p2", b"/p3", b"/q"]
    assert [r["kind"] for r in rows] == ["VIEW", "OTHER", "VIEW", "OTHER", "BUY"]
    assert [r["country"] for r in rows] == ["NO"] * 4 + ["SE"]
    assert [r["maybe"] for r in rows] == [None, 1, None, 3, 3]
    assert [r["score"] for r in rows] == [None] * 4 + [1.5]
    assert rows[0]["ratio"] == 0.5 and "gone" not in rows[0] and "page" not in rows[0]
    assert registry.calls.count(1) == 1 and registry.calls.count(2) == 1


@pytest.mark.parametrize("way", FLAT_WAYS)
def test_writer_schemas_are_fetched_once_per_id_across_batches(way: str) -> None:
    registry = Registry({1: V1})
    if way == "native" and NATIVE is None:
        pytest.skip("the _avrodecode extension is not built")
    decoder = AvroColumns(json.dumps(V2), registry, implementation=way)
    value = encode(
        V1, {"id": "a", "count": 1, "ratio": 1.0, "page": "/", "gone": "", "kind": "VIEW", "maybe": None}
    )
    for _ in range(3):
        assert decoder.decode(pa.array([value, value], pa.binary())).ok.all()
    assert registry.calls == [1]


def test_an_unresolvable_writer_schema_rejects_its_records_naming_the_field() -> None:
    reader = rec("R", [{"name": "id", "type": "string"}, {"name": "must", "type": "int"}])
    wrong = rec("R", [{"name": "id", "type": "long"}])
    registry = Registry({1: rec("R", [{"name": "id", "type": "string"}]), 2: wrong})
    for way in FLAT_WAYS:
        got = decode(
            reader, registry, [encode(registry.schemas[1], {"id": "x"}, 1), encode(wrong, {"id": 1}, 2)], way
        )
        assert not got.ok.any()
        assert got.errors.to_pylist() == [
            "schema mismatch: writer schema id 1 cannot be read with the reader schema: reader field 'must' "
            "is not in the writer schema and has no default",
            "schema mismatch: writer schema id 2 cannot be read with the reader schema: field 'id': long "
            "cannot be read as string",
        ]  # fmt: skip


SIMPLE = rec("S", [
    {"name": "s", "type": "string"}, {"name": "n", "type": ["null", "int"], "default": None},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
])  # fmt: skip
STRICT = rec("S", [
    {"name": "s", "type": "string"}, {"name": "n", "type": "int"},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}},
])  # fmt: skip


def _body(schema: Any, record: Mapping[str, Any]) -> bytes:
    return encode(schema, record)[avro.HEADER_SIZE :]


def reject_cases() -> list[tuple[bytes | None, str]]:
    good = _body(SIMPLE, {"s": "hi", "n": 1, "e": "A"})
    return [
        (None, "null value"),
        (b"\x00\x00\x00", "not registry-framed: shorter than the 5-byte header (magic byte 0 + schema id)"),
        (b"\x01" + struct.pack(">I", 1) + good, "not registry-framed: magic byte 0x01, expected 0x00"),
        (b'{"json": 1}', "not registry-framed: magic byte 0x7b, expected 0x00"),
        (frame(99, good), "unknown schema id 99: Schema 99 not found"),
        (frame(5, good), "schema id 5 is a PROTOBUF schema, not Avro"),
        (frame(1, good[:2]), "truncated Avro payload: the value ends inside field 's' (schema id 1)"),
        (frame(1, good[:-1]), "truncated Avro payload: the value ends inside field 'e' (schema id 1)"),
        (
            frame(1, good + b"\x00"),
            "schema mismatch: bytes left after the record of schema id 1 (the value was "
            "not written with that schema)",
        ),
        (
            frame(1, b"\x04hi\x04\x02\x00"),
            "invalid Avro data in field 'n' (schema id 1): union branch index out of range",
        ),
        (
            frame(1, b"\x04hi\x00\x06"),
            "invalid Avro data in field 'e' (schema id 1): enum index out of range",
        ),
        (
            frame(1, b"\x04\xff\xfe\x00\x00"),
            "invalid Avro data in field 's' (schema id 1): string is not valid UTF-8",
        ),
        (
            frame(1, b"\x04\xed\xa0\x00\x00"),
            "invalid Avro data in field 's' (schema id 1): string is not valid UTF-8",
        ),
        (frame(1, b"\x03hi\x00\x00"), "invalid Avro data in field 's' (schema id 1): negative length"),
        (
            frame(1, b"\x04hi\x02" + b"\xff" * 11),
            "invalid Avro data in field 'n' (schema id 1): varint too long, or int out of range",
        ),
        (
            frame(1, b"\x04hi\x02\xfe\xff\xff\xff\x1f\x00"),
            "invalid Avro data in field 'n' (schema id 1): varint too long, or int out of range",
        ),
    ]


@pytest.mark.parametrize("way", FLAT_WAYS)
def test_each_bad_value_is_rejected_with_its_reason(way: str) -> None:
    registry = Registry({1: SIMPLE, 5: "syntax = 'proto3';"}, {5: "PROTOBUF"})
    cases = reject_cases()
    good = encode(SIMPLE, {"s": "ok", "n": None, "e": "B"})
    values = [good, *(v for v, _ in cases), good]
    got = decode(SIMPLE, registry, values, way)
    assert got.ok.tolist() == [True, *([False] * len(cases)), True]
    assert got.errors.to_pylist() == [reason for _, reason in cases]
    assert got.table.to_pylist() == [{"s": "ok", "n": None, "e": "B"}] * 2


@pytest.mark.parametrize("way", FLAT_WAYS)
def test_values_the_reader_has_no_place_for_are_rejected_per_record(way: str) -> None:
    registry = Registry({1: SIMPLE})
    records = [("a", 1, "A"), ("b", None, "A"), ("c", 2, "B"), ("d", None, "B")]
    values = [encode(SIMPLE, {"s": s, "n": n, "e": e}) for s, n, e in records]
    got = decode(STRICT, registry, values, way)
    assert got.ok.tolist() == [True, False, False, False]
    assert got.errors.to_pylist() == [
        "schema mismatch: field 'n' is null (schema id 1) and the reader's field is not nullable",
        "schema mismatch: field 'e': enum symbol 'B' (schema id 1) is not in the reader's enum, which has no "
        "default",
        # two problems: the first field of the reader's names it
        "schema mismatch: field 'n' is null (schema id 1) and the reader's field is not nullable",
    ]  # fmt: skip
    assert got.table.to_pylist() == [{"s": "a", "n": 1, "e": "A"}]


def test_a_registry_outage_fails_the_batch_instead_of_rejecting() -> None:
    registry = Registry({1: SIMPLE})
    registry.down = True
    decoder = AvroColumns(json.dumps(SIMPLE), registry)
    with pytest.raises(RegistryUnavailableError, match=r"schema id 1 .*connection refused"):
        decoder.decode(pa.array([encode(SIMPLE, {"s": "a", "n": 1, "e": "A"})], pa.binary()))
    registry.down = False
    assert decoder.decode(pa.array([encode(SIMPLE, {"s": "a", "n": 1, "e": "A"})], pa.binary())).ok.all()


def test_a_reader_schema_the_columns_cannot_hold_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="reader schema: the reader schema must be an Avro record"):
        AvroColumns('"string"', Registry({}))
    with pytest.raises(ConfigError, match="unions other than"):
        AvroColumns(json.dumps(rec("R", [{"name": "u", "type": ["int", "string"]}])), Registry({}))


@needs_c
def test_c_and_python_decoders_agree_on_mutated_values() -> None:
    """A seeded fuzz: valid values of several writer schemas with bytes flipped, cut, inserted."""
    registry = Registry({1: ALL_TYPES, 2: V1, 3: SIMPLE})
    rng = random.Random(29)
    values: list[bytes | None] = []
    for k in range(400):
        which = k % 3
        value = [encode(ALL_TYPES, all_record(k % 12), 1),
                 encode(V1, {"id": "a" * (k % 5), "count": k, "ratio": 0.25, "page": "/", "gone": "é",
                             "kind": "OLD", "maybe": k}, 2),
                 encode(SIMPLE, {"s": "x" * k, "n": None, "e": "B"}, 3)][which]  # fmt: skip
        data = bytearray(value)
        for _ in range(rng.randrange(4)):
            op = rng.randrange(3)
            at = rng.randrange(avro.HEADER_SIZE, len(data)) if len(data) > avro.HEADER_SIZE else len(data)
            if op == 0 and at < len(data):
                data[at] = rng.randrange(256)
            elif op == 1:
                del data[at:]
            else:
                data[at:at] = bytes([rng.randrange(256)])
        values.append(bytes(data))
    for reader in (ALL_READER, V2, SIMPLE, STRICT):
        native = decode(reader, registry, values, "native")
        python = decode(reader, registry, values, "python")
        same(native, python)
        if reader is not STRICT:  # (no SIMPLE record fits STRICT)
            assert 0 < int(native.ok.sum()) < len(values)


@needs_c
def test_the_native_decoder_reads_sliced_and_nullable_arrays() -> None:
    registry = Registry({1: SIMPLE})
    values = pa.array([None, encode(SIMPLE, {"s": "a", "n": 1, "e": "A"}), None,
                       encode(SIMPLE, {"s": "b", "n": None, "e": "B"})], pa.binary())  # fmt: skip
    for array in (values.slice(1), pa.chunked_array([values.slice(0, 2), values.slice(2)])):
        got = {
            w: AvroColumns(json.dumps(SIMPLE), registry, implementation=w).decode(array) for w in FLAT_WAYS
        }
        same(got["native"], got["python"])
        assert got["native"].table.column("s").to_pylist() == ["a", "b"]


def test_c_extension_is_built_under_ci() -> None:
    if not CI:
        pytest.skip("only under CI=true")
    assert NATIVE is not None and avro.IMPLEMENTATION in ("native", "python")
