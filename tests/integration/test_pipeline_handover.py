"""How batches reach a real local Spark (:mod:`kafka_handoff.pipeline.handover`): spooled Parquet files read
back row for row in order and split between tasks, their removal, and ``createDataFrame`` for ``arrow``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kafka_handoff.consumer.batch import ColumnChunk
from kafka_handoff.errors import ConfigError
from kafka_handoff.pipeline import handover as handover_module
from kafka_handoff.pipeline.arrow import chunks_to_table
from kafka_handoff.pipeline.handover import Handover

pytestmark = pytest.mark.spark


def kafka_table(n: int) -> Any:
    headers: list[tuple[tuple[str, bytes | None], ...]] = [
        ((f"h{i}", f"v{i}".encode()), ("n", None)) if i % 5 == 0 else () for i in range(n)
    ]
    chunk = ColumnChunk(
        "ev", 3, list(range(1000, 1000 + n)), [1_700_000_000_000 + i for i in range(n)],
        [None if i % 4 == 0 else f"k{i}".encode() for i in range(n)],
        [None if i % 7 == 0 else f'{{"i":{i}}}'.encode() for i in range(n)], headers,
    )  # fmt: skip
    return chunks_to_table([chunk])


def test_a_spooled_table_reads_back_row_for_row_in_order_and_in_several_tasks(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handover_module, "ROW_GROUP_ROWS", 1000)
    # Split even this small file between tasks (a 500,000-record batch's file is split at the defaults).
    spark.conf.set("spark.sql.files.maxPartitionBytes", "65536")
    spark.conf.set("spark.sql.files.openCostInBytes", "0")
    table = kafka_table(10_000)
    try:
        handover = Handover(spark, mode="auto", local=True, spool_dir=str(tmp_path), owner="member/1")
        assert handover.files
        spool = handover.batch("batch-1")
        df = spool.frame(table)
        assert spool.directory is not None and len(list(spool.directory.glob("*.parquet"))) == 1
        assert df.rdd.getNumPartitions() >= 2
        back = df.toArrow()
        assert back.column_names == table.column_names
        for name in table.column_names:
            assert back.column(name).to_pylist() == table.column(name).to_pylist(), name
        # A job that needs two columns of the file (Spark reads only those).
        assert df.where("key IS NULL").select("offset").count() == 2500
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
        spark.conf.unset("spark.sql.files.openCostInBytes")
    spool.close()
    assert not spool.directory.exists()
    handover.close()
    assert not handover.root.exists()


def test_arrow_and_remote_sessions_use_create_data_frame_and_write_nothing(
    spark: Any, tmp_path: Path
) -> None:
    table = kafka_table(100)
    for handover in (
        Handover(spark, mode="arrow", local=True, spool_dir=str(tmp_path), owner="a"),
        Handover(spark, mode="auto", local=False, spool_dir=str(tmp_path), owner="b"),
    ):
        assert not handover.files
        spool = handover.batch("b1")
        assert spool.write(table) is None
        assert spool.frame(table).toArrow().column("offset").to_pylist() == list(range(1000, 1100))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(
        ConfigError, match=r"spark.handover: 'x' is not allowed \(allowed: auto, files, arrow\)"
    ):
        Handover(spark, mode="x", local=True, spool_dir=None, owner="c")


def test_an_empty_table_spools_too(spark: Any, tmp_path: Path) -> None:
    spool = Handover(spark, mode="files", local=True, spool_dir=str(tmp_path), owner="e").batch("b")
    df = spool.frame(kafka_table(0))
    assert df.count() == 0 and df.columns == list(pa.schema(kafka_table(0).schema).names)
