"""The handover's file side without Spark: where the spool goes, and a table that cannot be spooled (a full
``/dev/shm``) going to ``createDataFrame`` with one warning instead of failing the batch."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafka_handoff.pipeline.handover import Handover, default_spool_dir

pytestmark = pytest.mark.unit


class FakeSpark:
    """Records the tables given to ``createDataFrame`` (the handover's fallback)."""

    def __init__(self) -> None:
        self.created: list[Any] = []

    def createDataFrame(self, table: Any) -> str:
        self.created.append(table)
        return f"frame-{len(self.created)}"


def test_the_spool_is_in_dev_shm_only_when_it_has_room(monkeypatch: pytest.MonkeyPatch) -> None:
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm on this machine")
    usage = shutil.disk_usage("/dev/shm")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage._replace(free=1 << 40))
    assert default_spool_dir() == f"/dev/shm/kafka-handoff-{os.geteuid()}"
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage._replace(free=64 << 20))
    assert default_spool_dir() == str(Path(tempfile.gettempdir()) / f"kafka-handoff-{os.geteuid()}")


def test_a_table_that_cannot_be_spooled_goes_by_create_data_frame_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    spark = FakeSpark()
    handover = Handover(spark, mode="files", local=True, spool_dir=str(tmp_path), owner="m")
    table = pa.table({"offset": pa.array([1, 2, 3], pa.int64())})

    def full(table: Any, where: Any, **_kw: Any) -> None:
        Path(where).write_bytes(b"PAR1")  # a partial file, then the device is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq, "write_table", full)
    caplog.set_level(logging.DEBUG, logger="kafka_handoff.pipeline.handover")
    spool = handover.batch("b1")
    assert spool.frame(table) == "frame-1" and spool.frame(table) == "frame-2"
    assert spark.created == [table, table]
    assert spool.directory is not None and list(spool.directory.iterdir()) == []  # no partial file left
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "No space left on device" in warnings[0].getMessage()
    assert "spark.spool_dir" in warnings[0].getMessage()
    assert handover.write_failures == 2


CRASHING_WORKER = """
import os, sys
import pyarrow as pa
from kafka_handoff.pipeline.handover import Handover
handover = Handover(None, mode="files", local=True, spool_dir=sys.argv[1], owner="crashed")
path = handover.batch("b7").write(pa.table({"offset": pa.array([1, 2], pa.int64())}))
print(path, flush=True)
os._exit(9)
"""


def test_a_starting_worker_removes_the_spools_of_crashed_workers_but_not_of_live_ones(tmp_path: Path) -> None:
    live = Handover(FakeSpark(), mode="files", local=True, spool_dir=str(tmp_path), owner="live")
    live_file = live.batch("b1").write(pa.table({"offset": pa.array([1], pa.int64())}))
    crash = subprocess.run([sys.executable, "-c", CRASHING_WORKER, str(tmp_path)], capture_output=True,
                           text=True, timeout=120, check=False)  # fmt: skip
    assert crash.returncode == 9, crash.stderr
    left = Path(crash.stdout.strip())
    assert left.is_file()  # the crash left its batch file behind
    starting = Handover(FakeSpark(), mode="files", local=True, spool_dir=str(tmp_path), owner="live")
    assert not left.exists() and not left.parents[1].exists()
    assert live_file is not None and live_file.is_file()  # the live worker's spool is its own
    assert starting.root != live.root and starting.root.is_dir()
    live.close()
    starting.close()
    assert list(tmp_path.iterdir()) == []


def test_an_unusable_spool_directory_means_create_data_frame(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")  # the spool directory would be below a file
    spark = FakeSpark()
    handover = Handover(spark, mode="files", local=True, spool_dir=str(blocker), owner="m")
    assert not handover.files
    table = pa.table({"offset": pa.array([1], pa.int64())})
    assert handover.batch("b1").frame(table) == "frame-1" and spark.created == [table]


def test_a_spool_lock_appears_already_held_under_its_name(tmp_path: Path) -> None:
    from kafka_handoff.pipeline.handover import LOCK_NAME, _hold, _hold_new

    lock = tmp_path / LOCK_NAME
    fd = _hold_new(lock)
    if fd is None:
        pytest.skip("no flock on this platform")
    try:
        assert [p.name for p in tmp_path.iterdir()] == [LOCK_NAME]  # the draft was renamed, not left
        with pytest.raises(OSError):
            _hold(lock)  # a reaper cannot take it while the worker lives
    finally:
        os.close(fd)
    again = _hold(lock)  # the worker is gone: free
    assert again is not None
    os.close(again)


# ----------------------------------------------------------------------------- another local user's attacks
TABLE = pa.table({"offset": pa.array([1, 2], pa.int64())})


def _refused(caplog: pytest.LogCaptureFixture, spool_dir: Path, fragment: str) -> None:
    caplog.set_level(logging.WARNING, logger="kafka_handoff.pipeline.handover")
    spark = FakeSpark()
    handover = Handover(spark, mode="files", local=True, spool_dir=str(spool_dir), owner="m")
    assert not handover.files  # nothing is written there, nothing is read from there
    assert handover.batch("b1").frame(TABLE) == "frame-1" and spark.created == [TABLE]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and fragment in warnings[0] and "createDataFrame" in warnings[0], warnings
    handover.close()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_a_spool_directory_another_user_made_first_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    theirs = tmp_path / "kafka-handoff-0"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)  # made first by "nobody", private to them
    _refused(caplog, theirs, "owned by uid 65534")
    assert list(theirs.iterdir()) == []


def test_a_spool_directory_with_a_loose_mode_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "spool"
    shared.mkdir()
    shared.chmod(0o1777)  # as /dev/shm/kafka-handoff was: anyone may create entries in it
    _refused(caplog, shared, "mode 1777")
    assert list(shared.iterdir()) == []


def test_a_spool_directory_that_is_a_symlink_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "spool"
    link.symlink_to(target)
    _refused(caplog, link, "symbolic link")
    assert list(target.iterdir()) == []


def test_the_spool_directory_is_made_private_and_its_files_are_0600(tmp_path: Path) -> None:
    base = tmp_path / "new" / "spool"
    handover = Handover(FakeSpark(), mode="files", local=True, spool_dir=str(base), owner="m")
    assert handover.files
    path = handover.batch("b1").write(TABLE)
    assert path is not None and pq.read_table(path).equals(TABLE)
    for directory in (base, handover.root, path.parent):
        info = directory.lstat()
        assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700, directory
    for file in (path, handover.root / ".owner.lock"):
        info = file.lstat()
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600, file
        assert info.st_uid == os.geteuid()
    handover.close()


def test_a_symlink_planted_at_the_lock_path_is_replaced_not_followed(tmp_path: Path) -> None:
    from kafka_handoff.pipeline.handover import LOCK_NAME, _hold, _hold_new

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o700)
    lock = spool / LOCK_NAME
    lock.symlink_to(victim)
    (spool / f"{LOCK_NAME}.{os.getpid()}").symlink_to(victim)  # the old, predictable draft name too
    fd = _hold_new(lock)
    if fd is None:
        pytest.skip("no flock on this platform")
    try:
        assert victim.read_bytes() == b"precious"  # not truncated through a link
        assert not lock.is_symlink() and stat.S_ISREG(lock.lstat().st_mode)
        assert stat.S_IMODE(lock.lstat().st_mode) == 0o600
        with pytest.raises(OSError):
            _hold(lock)  # the real lock is held
    finally:
        os.close(fd)
    victim.unlink()
    lock.unlink()
    lock.symlink_to(victim)  # a reaper never opens a lock through a link either
    with pytest.raises(OSError):
        _hold(lock)
