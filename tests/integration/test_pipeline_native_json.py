"""The native JSON parse of ``parse_json`` (pyarrow on the worker's input table) against the Spark path
(``from_json``) on a real local Spark, no broker: the same (parsed, rejected) rows, in the same order,
with the same error strings, for a corpus of tricky values; the fallbacks to the Spark path."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff.consumer.batch import ColumnChunk
from kafka_handoff.pipeline import testing as pt
from kafka_handoff.pipeline import transform as T
from kafka_handoff.pipeline.arrow import chunks_to_table
from kafka_handoff.pipeline.handover import BatchSpool
from kafka_handoff.pipeline.transform import NativeInput, native_input, parse_json
from kafka_handoff.pipeline.worker import Batch, PartitionRange, Worker
from kafka_handoff.sample import generate_events
from kafka_handoff.types import TopicPartition
from native_json_corpus import CORPUS

pytestmark = pytest.mark.spark


def kafka_table(values: list[bytes | None]) -> Any:
    n = len(values)
    keys = [None if i % 3 == 0 else f"k{i}".encode() for i in range(n)]
    chunk = ColumnChunk("ev", 2, list(range(100, 100 + n)), [1_700_000_000_000 + i for i in range(n)], keys,
                        values, [()] * n)  # fmt: skip
    return chunks_to_table([chunk])


SCHEMA = (
    "s STRING, l LONG, i INT, sh SHORT, b BYTE, d DOUBLE, f FLOAT, ok BOOLEAN, "
    "timestamp LONG"  # a parsed field named like a Kafka column: the parsed one wins
)


@dataclass
class Parsed:
    good_schema: Any
    good: list[tuple[Any, ...]]
    rejected_schema: Any
    rejected: list[tuple[Any, ...]]


def parsed(good: Any, rejected: Any) -> Parsed:
    return Parsed(good.schema, _rows(good), rejected.schema, _rows(rejected))


def run_both(
    spark: Any, values: list[bytes | None], schema: str = SCHEMA, required: tuple[str, ...] = ("s", "l"),
    **kwargs: Any,
) -> tuple[Parsed, Parsed, NativeInput, Any]:  # fmt: skip
    """parse_json on the same input DataFrame by the Spark path and within :func:`native_input`: both
    results, the native scope and the Arrow table of the native rejected rows (None if not native)."""
    table = kafka_table(values)
    df = spark.createDataFrame(table)
    on_spark = parsed(*parse_json(df, schema, required=required, **kwargs))
    with native_input(spark, df, table) as scope:
        good, rejected = parse_json(df, schema, required=required, **kwargs)
    return on_spark, parsed(good, rejected), scope, scope.rejected_arrow(rejected)


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return [tuple(_norm(v) for v in row) for row in df.collect()]


def _norm(v: Any) -> Any:
    # NaN != NaN: compare floats by their repr so NaN matches NaN and -0.0 stays apart from 0.0
    if isinstance(v, float):
        return ("float", repr(v)) if math.isnan(v) or v == 0 else v
    return v


def with_valid(values: list[bytes | None], per_value: int = 2) -> list[bytes | None]:
    """``values`` with ``per_value`` valid records after each (the native path falls back to Spark for a
    batch that is mostly refused)."""
    out: list[bytes | None] = []
    for n, v in enumerate(values):
        out.append(v)
        out.extend(f'{{"s":"ok-{n}-{k}","l":{n * 10 + k},"d":{n}.25}}'.encode() for k in range(per_value))
    return out


def test_the_native_parse_equals_spark_row_for_row_on_a_corpus_of_tricky_values(spark: Any) -> None:
    values = with_valid(CORPUS)
    on_spark, native, scope, arrow = run_both(spark, values)
    assert native.good_schema == on_spark.good_schema
    assert native.rejected_schema == on_spark.rejected_schema
    assert native.good == on_spark.good
    assert native.rejected == on_spark.rejected
    # the native parse did the bulk and handed Spark the values Arrow refused or was not given
    assert scope.native > 0 and scope.refused > 0 and scope.fallbacks == 0
    assert scope.native + scope.refused == len(values)
    # its rejected rows are known as Arrow: the worker needs no Spark job to collect them
    assert arrow is not None
    naive = [tuple(v.replace(tzinfo=None) if k == "timestamp" else v for k, v in r.items())
             for r in arrow.to_pylist()]  # fmt: skip
    assert naive == on_spark.rejected
    # Spark's from_json took values Arrow refused: a number for a STRING field, single quotes
    good_strings = {row[native.good_schema.names.index("s")] for row in native.good}
    assert {"123", "1.5", "single quotes"} <= good_strings


def test_the_c_scan_and_the_native_parse_equal_spark_on_the_corpus_for_a_schema_without_floats(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No float field: the C scanner (when built) judges the rows first, pyarrow and Spark the rest.
    scans: list[Any] = []
    real = T._c_scan

    def spy(*args: Any) -> Any:
        scans.append(real(*args))
        return scans[-1]

    monkeypatch.setattr(T, "_c_scan", spy)
    values = with_valid(CORPUS)
    schema = "s STRING, l LONG, i INT, sh SHORT, b BYTE, ok BOOLEAN, timestamp LONG"
    on_spark, native, scope, _ = run_both(spark, values, schema=schema)
    assert native == on_spark
    assert scope.native > 0 and scope.refused > 0 and scope.fallbacks == 0
    assert len(scans) == 1
    if T._JSONSCAN is not None:
        mask, _ = scans[0]
        assert len(CORPUS) * 2 < int(mask.sum()) < len(values)


def test_values_arrow_refuses_are_found_among_thousands_and_judged_by_spark(spark: Any) -> None:
    # More rows than one piece of the search (2,048), the refused ones scattered: type changes name
    # their row, conversion errors (overflow, a float for LONG) do not and are found by halving.
    tricky = [b'{"s":1,"l":1}', b'{"s":"x","l":9223372036854775808}', b'{"s":"x","l":1.5}',
              b'{"s":"x","l":"7"}', b'{"s":"x","l":1,"d":NaN}', b'{"s":"x\\q","l":1}']  # fmt: skip
    values: list[bytes | None] = []
    for n in range(6000):
        if n % 257 == 5:
            values.append(tricky[n % len(tricky)])
        else:
            values.append(f'{{"s":"v{n}","l":{n},"d":{n}.5,"ok":{str(n % 2 == 0).lower()}}}'.encode())
    on_spark, native, scope, _ = run_both(spark, values)
    assert native == on_spark
    assert scope.refused == sum(1 for n in range(6000) if n % 257 == 5) and scope.fallbacks == 0
    assert len(on_spark.good) > 5900


def test_the_missing_required_fields_are_named_in_the_order_given(spark: Any) -> None:
    values = with_valid([b'{"l":1}', b"{}", b'{"s":null,"d":2}', b'{"d":null,"l":3}'])
    on_spark, native, scope, _ = run_both(spark, values, required=("l", "d", "s"))
    assert native == on_spark and scope.refused == 0
    assert {r[-1] for r in native.rejected} == {
        "missing required field(s): d, s",
        "missing required field(s): l, d, s",
        "missing required field(s): l, s",
    }


def test_unsupported_schemas_and_other_dataframes_take_the_spark_path(spark: Any) -> None:
    values = with_valid([b'{"s":"x","l":1,"t":"2024-01-02T03:04:05Z","n":{"a":1}}'])
    for schema in ("s STRING, l LONG, t TIMESTAMP", "s STRING, l LONG, n STRUCT<a: INT>",
                   "s STRING, l LONG, x DECIMAL(10,2)", "s STRING, l LONG, a ARRAY<INT>"):  # fmt: skip
        on_spark, native, scope, arrow = run_both(spark, values, schema=schema)
        assert native == on_spark, schema
        assert (scope.native, scope.refused, arrow) == (0, 0, None), schema
    # a DataFrame derived from the input, and the input with the switch off: the Spark path
    table = kafka_table(values)
    df = spark.createDataFrame(table)
    with native_input(spark, df, table) as scope:
        parse_json(df.where("offset >= 0"), SCHEMA)
    with native_input(spark, df, table, enabled=False) as off:
        parse_json(df, SCHEMA)
    assert (scope.native, scope.refused, off.native, off.refused) == (0, 0, 0, 0)


def test_an_empty_batch_and_a_schema_without_required_fields(spark: Any) -> None:
    on_spark, native, scope, arrow = run_both(spark, [])
    assert native == on_spark and not native.good and arrow is not None and arrow.num_rows == 0
    on_spark, native, scope, _ = run_both(spark, with_valid([b'{"s":null}', b"{}"]), required=())
    assert native == on_spark and not native.rejected and scope.refused == 0


def test_a_batch_mostly_refused_by_arrow_falls_back_to_spark_whole(spark: Any) -> None:
    values: list[bytes | None] = [*[b"{'s':'single quoted','l':1}"] * 30, *[b'{"s":"x","l":2}'] * 10]
    on_spark, native, scope, arrow = run_both(spark, values)
    assert native == on_spark
    assert (scope.fallbacks, scope.native, arrow) == (1, 0, None)
    assert len(on_spark.good) == 40


class RecordingSpool(BatchSpool):
    def __init__(self, spark: Any, directory: Path | None) -> None:
        super().__init__(spark, directory)
        self.written: list[Path | None] = []

    def write(self, table: Any) -> Path | None:
        self.written.append(super().write(table))
        return self.written[-1]


def test_the_worker_commits_the_same_output_and_dead_letters_with_the_native_parse_on_and_off(
    spark: Any, tmp_path: Path
) -> None:
    """... and whether the batch reaches Spark as spooled Parquet files or by createDataFrame."""
    from deltalake import DeltaTable

    events = generate_events(3000, seed=11, malformed_share=0.05, start_ms=1_800_000_000_000)
    tp = TopicPartition("ev", 0)
    results = {}
    for native_json, handover in ((True, "files"), (True, "arrow"), (False, "files")):
        name = f"{native_json}-{handover}"
        config = pt.pipeline_config(
            "unused:9092", "ev", "g", str(tmp_path / f"out-{name}"),
            malformed="dead-letter-table", dead_letter_path=str(tmp_path / f"dead-{name}"),
        )  # fmt: skip
        config = dataclasses.replace(
            config,
            transform=dataclasses.replace(config.transform, native_json=native_json),
            spark=dataclasses.replace(config.spark, handover=handover, spool_dir=str(tmp_path / "spool")),
        )
        worker = Worker(config, spark=spark)
        worker._setup()
        n = len(events)
        chunk = ColumnChunk("ev", 0, list(range(n)), [e.timestamp for e in events], [e.key for e in events],
                            [e.value for e in events], [()] * n)  # fmt: skip
        batch = Batch(1, [chunk], {tp: PartitionRange(None, 0, len(events) - 1, len(events))},
                      len(events), f"native-{name}")  # fmt: skip
        assert worker._handover is not None
        spool = worker._handover.batch(batch.tag)
        batch.spool = recording = RecordingSpool(spool.spark, spool.directory)
        outcome = worker._process(batch)
        assert outcome.report.status == "committed"
        files = [p for p in recording.written if p is not None]
        # files: the input, and with the native parse its parsed and rejected rows; all gone afterwards
        assert len(files) == {"True-files": 3, "True-arrow": 0, "False-files": 1}[name]
        assert not any(p.exists() for p in files)
        out = DeltaTable(str(tmp_path / f"out-{name}")).to_pyarrow_table()
        dead = DeltaTable(str(tmp_path / f"dead-{name}")).to_pyarrow_table()
        results[name] = (
            sorted(out.drop_columns([c for c in out.column_names if c.startswith("_")]).to_pylist(),
                   key=lambda r: r["src_offset"]),
            sorted(dead.select(["offset", "value", "error"]).to_pylist(), key=lambda r: r["offset"]),
            outcome.report.malformed,
        )  # fmt: skip
    assert results["True-files"] == results["True-arrow"] == results["False-files"]
    assert pt.output_event_ids(
        DeltaTable(str(tmp_path / "out-True-files")).to_pyarrow_table()
    ) == pt.valid_event_ids(events)
    assert results["True-files"][2] == sum(1 for e in events if e.malformed)
