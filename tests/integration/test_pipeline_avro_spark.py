"""parse_avro on a real local Spark, no broker: on the worker's input DataFrame (decoded from its Arrow table,
no Spark job) and on any other DataFrame (collected first) it returns the same (parsed, rejected) rows, the
rejected ones with their reasons; the pipeline config's reader schema and registry are its defaults."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest

from kafka_handoff.consumer.batch import ColumnChunk
from kafka_handoff.pipeline.arrow import chunks_to_table
from kafka_handoff.pipeline.avro import frame
from kafka_handoff.pipeline.config import load_config
from kafka_handoff.pipeline.transform import AvroSource, native_input, parse_avro
from kafka_handoff.sample import CLICKSTREAM_AVRO_SCHEMA

pytestmark = pytest.mark.spark

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class Schemas:
    """Writer schemas by id (the decoder's lookup interface)."""

    def __init__(self) -> None:
        self.calls = 0

    def get_schema(self, schema_id: int) -> str:
        self.calls += 1
        if schema_id != 7:
            error = LookupError(f"Schema {schema_id} not found")
            error.http_status_code = 404  # type: ignore[attr-defined]
            raise error
        return json.dumps(CLICKSTREAM_AVRO_SCHEMA)


def encode(event: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(CLICKSTREAM_AVRO_SCHEMA), event)
    return frame(7, out.getvalue())


def event(i: int) -> dict[str, Any]:
    return {"event_id": f"e{i}", "user": f"u{i % 3}", "session": "s", "page": f"/p{i % 2}", "action": "view",
            "timestamp": 1_700_000_000_000 + i}  # fmt: skip


def kafka_table(values: list[bytes | None]) -> Any:
    n = len(values)
    chunk = ColumnChunk("clicks", 1, list(range(10, 10 + n)), [1_700_000_000_000 + i for i in range(n)],
                        [b"k"] * n, values, [()] * n)  # fmt: skip
    return chunks_to_table([chunk])


VALUES: list[bytes | None] = [encode(event(0)), b'{"not": "avro"}', encode(event(1)), None,
                              encode(event(2))[:-4], frame(8, b"\x00"), encode(event(3))]  # fmt: skip
REASONS = [
    (11, "not registry-framed: magic byte 0x7b, expected 0x00"),
    (13, "null value"),
    (14, "truncated Avro payload: the value ends inside field 'timestamp' (schema id 7)"),
    (15, "unknown schema id 8: Schema 8 not found"),
]


def rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.collect()]


def test_parse_avro_on_the_workers_input_and_on_any_dataframe(spark: Any) -> None:
    table = kafka_table(VALUES)
    reader = json.dumps(CLICKSTREAM_AVRO_SCHEMA)
    schemas = Schemas()
    df = spark.createDataFrame(table)
    with native_input(spark, df, table) as scope:
        good, rejected = parse_avro(df, reader, registry=schemas)
    assert scope.rejected_arrow(rejected) is not None  # no Spark job to collect them
    other_good, other_rejected = parse_avro(df.where("true"), reader, registry=schemas)
    for g, r in ((good, rejected), (other_good, other_rejected)):
        got = rows(g)
        assert [x["offset"] for x in got] == [10, 12, 16]
        assert [x["event_id"] for x in got] == ["e0", "e1", "e3"]
        assert got[0]["timestamp"] == 1_700_000_000_000 and got[0]["topic"] == "clicks"
        assert g.columns == ["topic", "partition", "offset", "key", *[f["name"] for f in
                             CLICKSTREAM_AVRO_SCHEMA["fields"]]]  # fmt: skip
        assert [(x["offset"], x["error"]) for x in rows(r)] == REASONS
        assert rows(r)[0]["value"] == b'{"not": "avro"}'
    assert schemas.calls == 3  # id 7 once (cached across calls), id 8 each time (unknown ids are not cached)


def test_the_pipeline_config_gives_parse_avro_its_defaults(spark: Any, tmp_path: Path) -> None:
    config = load_config(
        EXAMPLES / "clickstream-avro.toml",
        {"transform.function": "parse_avro", "schema_registry.url": "http://127.0.0.1:1"},
    )
    assert config.transform.function == "kafka_handoff.pipeline.transform:parse_avro"
    assert config.transform.reader_schema == str(EXAMPLES / "clickstream.avsc")
    assert json.loads((EXAMPLES / "clickstream.avsc").read_text()) == CLICKSTREAM_AVRO_SCHEMA
    table = kafka_table(VALUES)
    df = spark.createDataFrame(table)
    with native_input(spark, df, table, avro=AvroSource(config, registry=Schemas())):
        good, rejected = parse_avro(df)
    assert [x["event_id"] for x in rows(good)] == ["e0", "e1", "e3"]
    assert [(x["offset"], x["error"]) for x in rows(rejected)] == REASONS
