"""The Protobuf decoding core of parse_protobuf (``pipeline/protobuf.py``), no Spark, no broker: scalar, enum,
repeated and message fields into Arrow columns, the message indexes, and every reject reason."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from kafka_handoff.pipeline.avro import RegistryUnavailableError, frame
from kafka_handoff.pipeline.protobuf import ProtobufColumns, read_message_indexes
from sr_protos import Money, Order, OrderLine, Refund

pytestmark = pytest.mark.unit

F = descriptor_pb2.FieldDescriptorProto


def _scalars() -> Any:
    pool = descriptor_pool.Default()
    name = "kh/pipeline_scalars.proto"
    try:
        pool.FindFileByName(name)
    except KeyError:
        fd = descriptor_pb2.FileDescriptorProto(name=name, package="kh.pipeline", syntax="proto3")
        e = fd.enum_type.add(name="Kind")
        for i, n in enumerate(("NONE", "VIEW", "BUY")):
            e.value.add(name=n, number=i)
        m = fd.message_type.add(name="Scalars")
        kinds = [("d", F.TYPE_DOUBLE), ("f", F.TYPE_FLOAT), ("i32", F.TYPE_SINT32), ("u32", F.TYPE_UINT32),
                 ("i64", F.TYPE_INT64), ("u64", F.TYPE_FIXED64), ("b", F.TYPE_BOOL), ("s", F.TYPE_STRING),
                 ("by", F.TYPE_BYTES)]  # fmt: skip
        for number, (fname, kind) in enumerate(kinds, 1):
            m.field.add(name=fname, number=number, type=kind, label=F.LABEL_OPTIONAL)
        m.field.add(
            name="kind", number=20, type=F.TYPE_ENUM, type_name=".kh.pipeline.Kind", label=F.LABEL_OPTIONAL
        )
        m.field.add(name="nums", number=21, type=F.TYPE_INT32, label=F.LABEL_REPEATED)
        pool.AddSerializedFile(fd.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("kh.pipeline.Scalars"))


Scalars = _scalars()


class NotFound(Exception):
    http_status_code = 404


class Schema:
    def __init__(self, schema_type: str) -> None:
        self.schema_str = "..."
        self.schema_type = schema_type


class Registry:
    def __init__(self) -> None:
        self.calls: list[int] = []
        self.down = False

    def get_schema(self, schema_id: int) -> Schema:
        self.calls.append(schema_id)
        if self.down:
            raise ConnectionError("connection refused")
        if schema_id == 3:
            return Schema("AVRO")
        if schema_id not in (1, 2):
            raise NotFound(f"Schema {schema_id} not found")
        return Schema("PROTOBUF")


def framed(message: Any, schema_id: int = 1, indexes: bytes = b"\x00") -> bytes:
    return frame(schema_id, indexes + message.SerializeToString())


def test_scalar_enum_and_repeated_fields_become_typed_columns() -> None:
    first = {"d": 1.5, "f": 0.25, "i32": -7, "u32": 2**32 - 1, "i64": -(2**62), "u64": 2**64 - 1, "b": True,
             "s": "hé", "by": b"\x00", "kind": 2, "nums": [1, 2]}  # fmt: skip
    msgs = [Scalars(**first), Scalars()]
    registry = Registry()
    got = ProtobufColumns(Scalars, registry).decode(pa.array([framed(m) for m in msgs], pa.binary()))
    assert got.ok.tolist() == [True, True]
    schema = got.table.schema
    names = ("d", "f", "i32", "u32", "i64", "u64", "b", "s", "by", "kind")
    want = ["double", "float", "int32", "uint32", "int64", "uint64", "bool", "string", "binary", "string"]
    assert [str(schema.field(n).type) for n in names] == want
    assert schema.field("nums").type == pa.list_(pa.int32())
    rows = got.table.to_pylist()
    assert rows[0] == {**first, "kind": "BUY"}
    assert rows[1] == {"d": 0.0, "f": 0.0, "i32": 0, "u32": 0, "i64": 0, "u64": 0, "b": False, "s": "",
                       "by": b"", "kind": "NONE", "nums": []}  # fmt: skip
    assert registry.calls == [1]  # the schema id checked once


def test_message_fields_are_json_and_unset_ones_null() -> None:
    order = Order(id="o1", total=Money(currency="EUR", units=12), lines=[OrderLine(sku="a", qty=2)])
    got = ProtobufColumns(Order, Registry()).decode(
        pa.array([framed(order), framed(Order(id="o2"))], pa.binary())
    )
    rows = got.table.to_pylist()
    assert rows[0]["id"] == "o1" and json.loads(rows[0]["total"]) == {"currency": "EUR", "units": "12"}
    assert json.loads(rows[0]["lines"]) == [{"sku": "a", "qty": 2}]
    assert rows[1]["total"] is None and json.loads(rows[1]["lines"]) == []


def test_message_indexes() -> None:
    assert read_message_indexes(b"\x00" * 5 + b"\x00") == ([0], 6)
    assert read_message_indexes(b"\x00" * 5 + b"\x04\x00\x02") == ([0, 1], 8)
    assert read_message_indexes(b"\x00" * 5 + b"\x04\x00") is None
    refund = Refund(order_id="o1", reason="late")
    got = ProtobufColumns(Refund, Registry()).decode(
        pa.array([framed(refund, indexes=b"\x02\x02")], pa.binary())
    )
    assert got.table.to_pylist() == [{"order_id": "o1", "reason": "late"}]


def test_each_bad_value_is_rejected_with_its_reason() -> None:
    good = framed(Scalars(s="ok"))
    cases = [
        (None, "null value"),
        (b"\x00\x00", "not registry-framed: shorter than the 5-byte header (magic byte 0 + schema id)"),
        (b'{"json": 1}', "not registry-framed: magic byte 0x7b, expected 0x00"),
        (framed(Scalars(), 9), "unknown schema id 9: Schema 9 not found"),
        (framed(Scalars(), 3), "schema id 3 is an AVRO schema, not Protobuf"),
        (frame(1, b"\x04\x00"), "invalid Protobuf message indexes (schema id 1)"),
    ]
    truncated = frame(2, b"\x00" + Scalars(s="hello").SerializeToString()[:-2])
    values = [good, *(v for v, _ in cases), truncated]
    got = ProtobufColumns(Scalars, Registry()).decode(pa.array(values, pa.binary()))
    assert got.ok.tolist() == [True] + [False] * (len(cases) + 1)
    errors = got.errors.to_pylist()
    assert errors[:-1] == [reason for _, reason in cases]
    assert errors[-1].startswith("invalid Protobuf data (schema id 2): ")
    assert got.table.column("s").to_pylist() == ["ok"]


def test_a_registry_outage_fails_instead_of_rejecting() -> None:
    registry = Registry()
    registry.down = True
    with pytest.raises(RegistryUnavailableError, match="connection refused"):
        ProtobufColumns(Scalars, registry).decode(pa.array([framed(Scalars())], pa.binary()))
