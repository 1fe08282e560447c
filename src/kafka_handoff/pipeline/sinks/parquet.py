"""Parquet files plus atomically published manifests (the scheme of Spark's ``_spark_metadata`` log).

Layout under the sink path::

    data/<batch-uuid>/part-*.parquet        written first (Spark's writer, or pyarrow for Arrow input)
    _manifests/00000000000000000007.json    published last, one per commit, never rewritten

A manifest lists the files of its commit and holds *all* marks as of that commit (cumulative), so the
latest manifest alone gives the current marks.  Readers read only files listed in manifests: a crashed or
rejected write leaves an unreferenced ``data/<uuid>`` directory that nobody reads
(:meth:`ParquetSink.orphans` lists them).

Commit = optimistic concurrency on the manifest sequence: read the latest manifest ``N``, check the
expected marks against it, write ``N+1`` to a temporary file and ``link()`` it to its final name --
put-if-absent, atomic on a POSIX file system.  If ``N+1`` appeared meanwhile the link fails, the new
manifest is read and the check repeated (another partition's commit: retry at ``N+2``; one of ours: a
:class:`~kafka_handoff.pipeline.errors.MarkConflictError`).  Needs a local or shared POSIX path (no object
stores: they have no atomic put-if-absent rename here).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_handoff.pipeline.errors import MarkConflictError
from kafka_handoff.pipeline.sinks.base import CommitInfo, MarkUpdate, Sink, mark_key
from kafka_handoff.types import TopicPartition

__all__ = ["ParquetSink"]

_SEQ_DIGITS = 20
_MAX_ATTEMPTS = 1000


class ParquetSink(Sink):
    kind = "parquet"

    def __init__(self, path: str, app_id: str, *, files_per_batch: int = 1) -> None:
        super().__init__(str(Path(path).absolute()), app_id)
        self.root = Path(self.path)
        self.manifests = self.root / "_manifests"
        self.data = self.root / "data"
        self.files_per_batch = files_per_batch
        self._executors = False

    def write_on_executors(self, enabled: bool = True) -> None:
        """Executors mode (``spark.read_on``): each task writes its own file -- no ``coalesce``, which
        would fold the batch's reading tasks into ``files_per_batch`` tasks."""
        self._executors = enabled

    # ------------------------------------------------------------------------------------- manifests
    def _sequence_numbers(self) -> list[int]:
        try:
            names = os.listdir(self.manifests)
        except FileNotFoundError:
            return []
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def _manifest_path(self, seq: int) -> Path:
        return self.manifests / f"{seq:0{_SEQ_DIGITS}d}.json"

    def _read_manifest(self, seq: int) -> dict[str, Any]:
        with open(self._manifest_path(seq), encoding="utf-8") as f:
            manifest: dict[str, Any] = json.load(f)
        return manifest

    def _latest(self) -> tuple[int, dict[str, int]]:
        seqs = self._sequence_numbers()
        if not seqs:
            return 0, {}
        return seqs[-1], dict(self._read_manifest(seqs[-1]).get("marks", {}))

    def exists(self) -> bool:
        return bool(self._sequence_numbers())

    def read_marks(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        _, marks = self._latest()
        out: dict[TopicPartition, int | None] = {}
        for tp in partitions:
            value = marks.get(mark_key(self.app_id, tp))
            out[tp] = None if value is None else int(value)
        return out

    def manifests_list(self) -> list[dict[str, Any]]:
        return [self._read_manifest(seq) for seq in self._sequence_numbers()]

    def files(self) -> list[Path]:
        """Every data file listed in a manifest, in commit order."""
        return [self.root / f for m in self.manifests_list() for f in m.get("files", [])]

    def orphans(self) -> list[Path]:
        """``data/`` directories no manifest refers to (crashed or rejected writes)."""
        referenced = {Path(f).parts[1] for m in self.manifests_list() for f in m.get("files", []) if f}
        try:
            dirs = sorted(self.data.iterdir())
        except FileNotFoundError:
            return []
        return [d for d in dirs if d.name not in referenced]

    # ------------------------------------------------------------------------------------- writing
    def _write_files(self, data: Any, batch_dir: Path) -> tuple[list[str], int]:
        if isinstance(data, pa.Table):
            batch_dir.mkdir(parents=True, exist_ok=True)
            name = "part-00000.parquet"
            pq.write_table(data, batch_dir / name)
            return [f"data/{batch_dir.name}/{name}"], data.num_rows
        if hasattr(data, "write") and hasattr(data, "coalesce"):  # a Spark DataFrame
            frame = data if self._executors else data.coalesce(self.files_per_batch)
            frame.write.mode("errorifexists").parquet(batch_dir.as_uri())
            names = sorted(n for n in os.listdir(batch_dir) if n.endswith(".parquet"))
            rows = sum(pq.ParquetFile(batch_dir / n).metadata.num_rows for n in names)
            return [f"data/{batch_dir.name}/{n}" for n in names], rows
        raise TypeError(
            f"the parquet sink writes pyarrow tables or Spark DataFrames, not {type(data).__name__}"
        )

    def commit(self, data: Any, updates: Mapping[TopicPartition, MarkUpdate]) -> CommitInfo:
        batch_dir = self.data / uuid.uuid4().hex
        files, rows = self._write_files(data, batch_dir)
        self.manifests.mkdir(parents=True, exist_ok=True)
        keys = {tp: mark_key(self.app_id, tp) for tp in updates}
        for _ in range(_MAX_ATTEMPTS):
            seq, marks = self._latest()
            conflicts: dict[TopicPartition, tuple[int | None, int | None]] = {}
            for tp, u in updates.items():
                stored = marks.get(keys[tp])
                if stored != u.expected:
                    conflicts[tp] = (u.expected, stored)
            if conflicts:
                raise MarkConflictError(conflicts)
            new_marks = dict(marks)
            for tp, u in updates.items():
                new_marks[keys[tp]] = u.new
            manifest = {
                "seq": seq + 1,
                "batch": batch_dir.name,
                "app_id": self.app_id,
                "committed_at_ms": int(time.time() * 1000),
                "files": files,
                "rows": rows,
                "ranges": {keys[tp]: [u.expected, u.new] for tp, u in updates.items()},
                "marks": new_marks,
            }
            tmp = self.manifests / f".tmp-{uuid.uuid4().hex}"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(manifest, f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, self._manifest_path(seq + 1))
            except FileExistsError:
                continue  # someone published seq+1 first: re-read and re-check
            finally:
                os.unlink(tmp)
            return CommitInfo(version=seq + 1, rows=rows, files=len(files))
        raise RuntimeError(f"could not publish a manifest in {self.manifests} after {_MAX_ATTEMPTS} attempts")

    # ------------------------------------------------------------------------------------- reading
    def read_table(self, columns: Sequence[str] | None = None) -> Any:
        files = self.files()
        tables = [pq.read_table(f, columns=list(columns) if columns is not None else None) for f in files]
        tables = [t for t in tables if t.num_columns]
        if not tables:
            return pa.table({})
        return pa.concat_tables(tables, promote_options="default")
