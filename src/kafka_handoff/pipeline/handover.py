"""How a batch's Arrow tables become Spark DataFrames: spooled Parquet files, or ``createDataFrame``.

``createDataFrame(arrow_table)`` ships the table to the JVM, which turns every row of every column into a
Spark row when a job first reads it -- also the columns the transform never uses.  With a local Spark
(``spark.master = "local[...]"``) the worker can instead write the table as an uncompressed Parquet file
to a spool directory (``/dev/shm`` when there is one: memory, not disk) and read it with
``spark.read.parquet``: Spark's vectorised reader then decodes only the columns the job needs, in several
tasks.  On a 500,000-record clickstream batch this halved the transform's Spark job (docs/benchmarks.md,
section 3.2).

``spark.handover`` chooses: ``auto`` (files for a local master, ``createDataFrame`` for a cluster or Spark
Connect, whose executors cannot see the worker's files), ``files`` (also for a cluster when
``spark.spool_dir`` is a path every executor sees), ``arrow`` (always ``createDataFrame``).

A batch's files live in one directory (:class:`BatchSpool`), removed when the batch is done -- committed,
discarded or failed.  Each worker's spool holds a lock file while the worker lives; a worker starting
removes the spools whose lock is free (:func:`reap`: their worker crashed or was killed), so memory in
``/dev/shm`` is not lost to crashes.  The DataFrames read from files have nullable columns (Spark's file
sources make every column nullable); rows keep the table's order.

The spool directory is private to the worker's user: ``/dev/shm/kafka-handoff-<uid>`` by default (or
``spark.spool_dir``), made with mode 0700 and checked with ``lstat`` before every use -- a directory owned
by another user, a symbolic link, or one that group or others can read or write is refused (a warning, then
``createDataFrame``): in a shared ``/dev/shm`` another local user could otherwise read the batches, swap a
Parquet file between its write and its read, or plant symbolic links.  Files are created 0600 with
``O_EXCL|O_NOFOLLOW``; the lock file too, before it is renamed into place.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

from kafka_handoff.errors import ConfigError
from kafka_handoff.pipeline.config import HANDOVER_MODES

try:
    import fcntl
except ImportError:  # not on POSIX: no reaping of crashed workers' spools
    fcntl = None  # type: ignore[assignment]

__all__ = ["BatchSpool", "Handover", "UnsafeSpoolError", "default_spool_dir", "private_dir", "reap"]

log = logging.getLogger(__name__)

#: Rows per Parquet row group: Spark splits a file between tasks at row-group boundaries.
ROW_GROUP_ROWS = 65536
#: ``/dev/shm`` is the default spool only with this much free space (a container's is often 64 MiB).
SHM_MIN_FREE = 1 << 30


#: Flags of every file the spool creates: a new file, never through a symbolic link.
_CREATE = os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _user() -> str:
    """This process's user in file names: the effective uid (the login name without uids)."""
    if hasattr(os, "geteuid"):
        return str(os.geteuid())
    import getpass

    return _safe(getpass.getuser())


def default_spool_dir() -> str:
    """``/dev/shm/kafka-handoff-<uid>`` when ``/dev/shm`` is a writable directory (memory-backed) with at
    least 1 GiB free, else ``kafka-handoff-<uid>`` in the system's temporary directory."""
    shm = Path("/dev/shm")
    base = Path(tempfile.gettempdir())
    try:
        if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free >= SHM_MIN_FREE:
            base = shm
    except OSError:
        pass
    return str(base / f"kafka-handoff-{_user()}")


class UnsafeSpoolError(OSError):
    """The spool directory is not private to this user (another owner, a symbolic link, a loose mode)."""


def private_dir(path: Path) -> None:
    """Make the directory ``path`` with mode 0700 (its parents as usual) unless it exists, then check with
    ``lstat`` that it is a directory, not a symbolic link, owned by this process's user and closed to group
    and others; :class:`UnsafeSpoolError` says what is wrong."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeSpoolError(f"{path} is a symbolic link (a spool directory must be a real directory)")
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeSpoolError(f"{path} is not a directory")
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        raise UnsafeSpoolError(
            f"{path} is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()}): another user "
            "made it and could read or replace the batches' files"
        )
    mode = stat.S_IMODE(info.st_mode)
    if os.name == "posix" and mode & 0o077:
        raise UnsafeSpoolError(
            f"{path} has mode {mode:04o}: other users can read or change the batches' files "
            f"(allowed: 0700; chmod 700 {path})"
        )


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


class Handover:
    """The worker's way of turning Arrow tables into DataFrames (see the module docstring)."""

    _instances = itertools.count()

    def __init__(self, spark: Any, *, mode: str, local: bool, spool_dir: str | None, owner: str) -> None:
        if mode not in HANDOVER_MODES:
            allowed = ", ".join(HANDOVER_MODES)
            raise ConfigError(f"spark.handover: {mode!r} is not allowed (allowed: {allowed})")
        self.spark = spark
        self.files = mode == "files" or (mode == "auto" and local)
        self.base = Path(spool_dir or default_spool_dir())
        self.root = self.base / f"{_safe(owner)}-{os.getpid()}-{next(self._instances)}"
        self.write_failures = 0
        self._lock: int | None = None
        if self.files:
            try:
                private_dir(self.base)
                reap(self.base)
                private_dir(self.root)
                self._lock = _hold_new(self.root / LOCK_NAME)
            except OSError as exc:
                log.warning("cannot use the spool directory %s (%s); handing batches to Spark with "
                            "createDataFrame (set spark.spool_dir to a private directory, or "
                            "spark.handover = \"arrow\")", self.base, exc)  # fmt: skip
                self.files = False

    def describe(self) -> str:
        return f"Parquet files in {self.root}" if self.files else "createDataFrame (Arrow)"

    def batch(self, name: str) -> BatchSpool:
        """The spool of one batch (its directory is made on the first file)."""
        return BatchSpool(self.spark, self.root / _safe(name) if self.files else None, self)

    def write_failed(self, path: Path, exc: OSError) -> None:
        """A file could not be written (a full or read-only spool): that table goes by ``createDataFrame``;
        warned about once per worker, then at debug level."""
        self.write_failures += 1
        level = logging.WARNING if self.write_failures == 1 else logging.DEBUG
        log.log(level, "could not spool a batch table to %s (%s); handing it to Spark with createDataFrame "
                "(set spark.spool_dir, or spark.handover = \"arrow\")", path, exc)  # fmt: skip

    def close(self) -> None:
        """Remove the spool (every batch's files) and release its lock."""
        if self.files:
            shutil.rmtree(self.root, ignore_errors=True)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


#: Each worker's spool holds this file locked (``flock``) while the worker lives.
LOCK_NAME = ".owner.lock"


def _hold_new(path: Path) -> int | None:
    """Create ``path`` already locked (made under another name, locked, then renamed: a worker reaping
    never sees it unlocked); locked for as long as the descriptor stays open (None without ``flock``)."""
    if fcntl is None:
        return None
    # A new file (O_EXCL|O_NOFOLLOW: never one planted there, never through a link), 0600; the rename
    # replaces whatever is at ``path`` -- a planted symbolic link too -- without following it.
    draft = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_RDWR | _CREATE, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(draft, path)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(draft)
        raise
    return fd


def _hold(path: Path) -> int | None:
    """Lock the existing ``path`` for as long as the descriptor stays open (None without ``flock``);
    OSError when another process holds it, or it is gone."""
    if fcntl is None:
        return None
    fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def reap(base: Path) -> list[Path]:
    """Remove the spools under ``base`` whose worker is gone (its lock is free: the process ended, by a
    crash too); returns them.  A spool whose lock is held is left alone."""
    if fcntl is None or not base.is_dir():
        return []
    reaped = []
    for lock in base.glob(f"*/{LOCK_NAME}"):
        try:
            fd = _hold(lock)
        except OSError:
            continue  # held: its worker is alive
        try:
            shutil.rmtree(lock.parent, ignore_errors=True)
            reaped.append(lock.parent)
        finally:
            if fd is not None:
                os.close(fd)
    if reaped:
        log.info("removed %d spool(s) of pipeline workers that ended without cleaning up: %s", len(reaped),
                 ", ".join(str(p) for p in reaped))  # fmt: skip
    return reaped


class BatchSpool:
    """The DataFrames of one batch; :meth:`close` removes their files.  ``directory`` None:
    ``createDataFrame``."""

    def __init__(self, spark: Any, directory: Path | None, owner: Handover | None = None) -> None:
        self.spark = spark
        self.directory = directory
        self.owner = owner
        self._names = itertools.count()

    def write(self, table: Any) -> Path | None:
        """Write ``table`` as one of the batch's files (thread-safe for distinct calls); None without a
        directory, or when the file cannot be written (see :meth:`Handover.write_failed`)."""
        if self.directory is None:
            return None
        import pyarrow.parquet as pq

        path = self.directory / f"part-{next(self._names):03d}.parquet"
        try:
            self.directory.mkdir(mode=0o700, exist_ok=True)
            os.close(os.open(path, os.O_WRONLY | _CREATE, 0o600))  # made private before anything is in it
            pq.write_table(table, path, compression="none", use_dictionary=False, write_statistics=False,
                           row_group_size=ROW_GROUP_ROWS)  # fmt: skip
        except OSError as exc:
            path.unlink(missing_ok=True)
            if self.owner is not None:
                self.owner.write_failed(path, exc)
            else:
                log.warning("could not spool a batch table to %s (%s); using createDataFrame", path, exc)
            return None
        return path

    def read(self, path: Path, table: Any) -> Any:
        """The DataFrame of a file :meth:`write` made from ``table``."""
        from pyspark.sql.pandas.types import from_arrow_schema

        return self.spark.read.schema(from_arrow_schema(table.schema)).parquet(str(path))

    def frame(self, table: Any) -> Any:
        """``table`` as a DataFrame: read from a file of this batch, or made by ``createDataFrame``."""
        path = self.write(table)
        if path is None:
            return self.spark.createDataFrame(table)
        return self.read(path, table)

    def close(self) -> None:
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
