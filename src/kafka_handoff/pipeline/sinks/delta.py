"""A Delta table through ``deltalake`` (delta-rs, no JVM), marks as Delta app transactions.

Each commit is one Delta commit holding the data files *and* one ``txn`` action per input partition:
``Transaction(app_id="<app>-<topic>-<partition>", version=<mark>)``
(``CommitProperties(app_transactions=...)``, several app ids per commit).  ``DeltaTable.transaction_version``
reads a mark back.

Conditional commit: the writer loads the table's latest snapshot, checks that each partition's stored
version equals the expected mark, and commits *against that snapshot*.  If another writer committed a
``txn`` for any of the same app ids in between, delta-rs's conflict checker rejects the commit
("Concurrent transaction failed") -- measured with deltalake 1.6 -- so the check and the write are one
atomic step.  Non-conflicting concurrent appends (other partitions) are retried by delta-rs itself.
A missing table is first created by an empty commit without marks, so that every marked commit is made
against a snapshot (a write to a bare path would append to a table created meanwhile unchecked).

Executors mode (``spark.read_on``, :meth:`DeltaSink.write_on_executors`): a Spark DataFrame is not collected
here.  Spark's executors write its rows as Parquet files into a new directory under the table
(``_handoff-<uuid>/``, hive-style subdirectories for ``partition_by``); this process then commits those
files (``DeltaTable.create_write_transaction`` with one ``add`` action per file) together with the marks,
in one Delta commit, under the same conditional check.  Files of a batch that is never committed are
unreferenced (Delta's ``VACUUM`` removes them).  Needs a path both Spark and delta-rs reach (a local or
shared file system here).
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa

from kafka_handoff.pipeline.errors import MarkConflictError
from kafka_handoff.pipeline.sinks.base import CommitInfo, MarkUpdate, Sink, mark_key
from kafka_handoff.types import TopicPartition

__all__ = ["DeltaSink"]

log = logging.getLogger(__name__)

_ATTEMPTS = 6


def _conflicts(
    updates: Mapping[TopicPartition, MarkUpdate], stored: Mapping[TopicPartition, int | None]
) -> dict[TopicPartition, tuple[int | None, int | None]]:
    return {tp: (u.expected, stored[tp]) for tp, u in updates.items() if stored[tp] != u.expected}


class DeltaSink(Sink):
    kind = "delta"

    def __init__(
        self,
        path: str,
        app_id: str,
        *,
        partition_by: tuple[str, ...] = (),
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(path, app_id)
        self.partition_by = list(partition_by) or None
        self.storage_options = dict(storage_options or {}) or None
        self._executors = False

    def write_on_executors(self, enabled: bool = True) -> None:
        """Spark DataFrames given to :meth:`commit` are written by Spark's executors (module docstring).
        Only for file system paths: a table on an object store is written by delta-rs here (said once)."""
        remote = "://" in self.path and not self.path.startswith("file://")
        if enabled and remote:
            log.warning(
                "delta sink %s is on an object store: its data files are written by this process "
                "(delta-rs), not by the executors",
                self.path,
            )
        self._executors = enabled and not remote

    def _load(self) -> Any:
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.path, storage_options=self.storage_options):
            return None
        return DeltaTable(self.path, storage_options=self.storage_options)

    def exists(self) -> bool:
        return self._load() is not None

    def _marks(self, table: Any, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        if table is None:
            return {tp: None for tp in partitions}
        out: dict[TopicPartition, int | None] = {}
        for tp in partitions:
            version = table.transaction_version(mark_key(self.app_id, tp))
            out[tp] = None if version is None else int(version)
        return out

    def read_marks(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return self._marks(self._load(), partitions)

    def commit(self, data: Any, updates: Mapping[TopicPartition, MarkUpdate]) -> CommitInfo:
        from deltalake import CommitProperties, Transaction, write_deltalake
        from deltalake.exceptions import CommitFailedError

        if self._executors and not isinstance(data, pa.Table) and hasattr(data, "write"):
            return self._commit_files(data, updates)
        table = self._to_arrow(data)
        txns = [Transaction(mark_key(self.app_id, tp), u.new) for tp, u in updates.items()]
        for attempt in range(_ATTEMPTS):
            snapshot = self._load()
            if snapshot is None:
                # Create the table first (no marks in that commit), so that every marked commit is made
                # against a snapshot: writing to a bare path would let delta-rs append to a table another
                # writer created meanwhile without checking our marks.
                self._create(table.schema)
                continue
            stored = self._marks(snapshot, updates)
            conflicts = _conflicts(updates, stored)
            if conflicts:
                raise MarkConflictError(conflicts)
            try:
                write_deltalake(
                    snapshot, table, mode="append", commit_properties=CommitProperties(app_transactions=txns)
                )
            except CommitFailedError as exc:
                # A concurrent commit: the next round re-reads the marks; if ours moved it is a conflict,
                # otherwise (table creation race, protocol change) the write is simply retried.
                log.info("delta commit attempt %d failed (%s); re-checking the marks", attempt + 1, exc)
                continue
            version = snapshot.version()
            return CommitInfo(version=int(version), rows=table.num_rows, files=1 if table.num_rows else 0)
        conflicts = _conflicts(updates, self.read_marks(updates))
        if conflicts:
            raise MarkConflictError(conflicts)
        raise RuntimeError(f"delta commit to {self.path} failed {_ATTEMPTS} times in a row")

    def _commit_files(self, df: Any, updates: Mapping[TopicPartition, MarkUpdate]) -> CommitInfo:
        """Executors write ``df`` as Parquet under the table; commit those files and the marks here."""
        from deltalake import CommitProperties, Transaction
        from deltalake.exceptions import CommitFailedError
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = to_arrow_schema(df.schema)
        actions, rows = self._write_with_spark(df)
        txns = [Transaction(mark_key(self.app_id, tp), u.new) for tp, u in updates.items()]
        for attempt in range(_ATTEMPTS):
            snapshot = self._load()
            if snapshot is None:
                self._create(schema)
                continue
            conflicts = _conflicts(updates, self._marks(snapshot, updates))
            if conflicts:
                raise MarkConflictError(conflicts)
            version = int(snapshot.version())
            try:
                snapshot.create_write_transaction(
                    actions,
                    mode="append",
                    schema=snapshot.schema(),
                    partition_by=self.partition_by,
                    commit_properties=CommitProperties(app_transactions=txns),
                )
            except CommitFailedError as exc:
                log.info("delta commit attempt %d failed (%s); re-checking the marks", attempt + 1, exc)
                continue
            return CommitInfo(version=version + 1, rows=rows, files=len(actions))
        conflicts = _conflicts(updates, self.read_marks(updates))
        if conflicts:
            raise MarkConflictError(conflicts)
        raise RuntimeError(f"delta commit to {self.path} failed {_ATTEMPTS} times in a row")

    def _write_with_spark(self, df: Any) -> tuple[list[Any], int]:
        """Spark writes ``df`` into a new directory under the table; its files as ``add`` actions."""
        import pyarrow.parquet as pq
        from deltalake.transaction import AddAction

        if "://" in self.path and not self.path.startswith("file://"):
            raise ValueError(
                f"executors writing Delta data files need a file system path, not {self.path!r} "
                '(set spark.read_on = "driver" for object stores)'
            )
        root = self.path[len("file://") :] if self.path.startswith("file://") else self.path
        root = os.path.abspath(root)
        staging = f"_handoff-{uuid.uuid4().hex}"
        writer = df.write.mode("errorifexists")
        if self.partition_by:
            writer = writer.partitionBy(*self.partition_by)
        # Delta wants TIMESTAMP_MICROS, not Spark's default INT96.
        df.sparkSession.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        writer.parquet("file://" + os.path.join(root, staging))
        actions, rows = [], 0
        now_ms = int(time.time() * 1000)
        for dirpath, _, names in os.walk(os.path.join(root, staging)):
            for name in sorted(names):
                if not name.endswith(".parquet"):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                n = pq.ParquetFile(full).metadata.num_rows
                rows += n
                parts = {}
                for comp in os.path.relpath(dirpath, os.path.join(root, staging)).split(os.sep):
                    if "=" in comp:
                        k, v = comp.split("=", 1)
                        parts[k] = None if v == "__HIVE_DEFAULT_PARTITION__" else unquote(v)
                stats = json.dumps({"numRecords": n})
                actions.append(AddAction(rel, os.path.getsize(full), parts, now_ms, True, stats))
        return actions, rows

    def _create(self, schema: Any) -> None:
        from deltalake import write_deltalake

        try:
            write_deltalake(
                self.path,
                schema.empty_table(),
                mode="append",
                partition_by=self.partition_by,
                storage_options=self.storage_options,
            )
        except Exception as exc:  # created concurrently by another writer: fine
            if self._load() is None:
                raise
            log.debug("delta table %s was created concurrently (%s)", self.path, exc)

    @staticmethod
    def _to_arrow(data: Any) -> Any:
        if isinstance(data, pa.Table):
            return data
        if hasattr(data, "toArrow"):  # a Spark DataFrame
            return data.toArrow()
        raise TypeError(
            f"the delta sink writes pyarrow tables or Spark DataFrames, not {type(data).__name__}"
        )

    def read_table(self, columns: Sequence[str] | None = None) -> Any:
        table = self._load()
        if table is None:
            return pa.table({})
        return table.to_pyarrow_table(columns=list(columns) if columns is not None else None)

    def version(self) -> int | None:
        table = self._load()
        return None if table is None else int(table.version())
