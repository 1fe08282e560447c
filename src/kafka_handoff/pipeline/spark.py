"""Spark for the pipeline: building the session from ``[spark]`` and cancelling a batch's jobs.

* ``spark.master`` (default ``local[2]``) starts a classic session; ``spark.remote = "sc://host:port"``
  connects through Spark Connect instead.
* Local defaults follow measurements made while the pipeline was designed (UI off, 2 shuffle
  partitions, UTC, loopback driver address, the venv's Python for workers); anything in ``[spark.conf]``
  wins.
* :class:`JobControl` tags every Spark job a batch runs (``SparkContext.addJobTag``; Spark Connect:
  ``SparkSession.addTag``) so the worker can cancel exactly that batch's jobs when its partitions are lost
  (``cancelJobsWithTag`` / ``interruptTag``).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

from kafka_handoff.pipeline.config import SparkConfig

__all__ = ["JobControl", "build_session", "default_conf", "is_connect"]

log = logging.getLogger(__name__)


def default_conf(config: SparkConfig) -> dict[str, str]:
    """The settings the pipeline applies unless ``[spark.conf]`` overrides them."""
    conf = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "2" if config.master.startswith("local") else "4",
        # Micro-batches are small: adaptive re-planning costs more than it saves here.
        "spark.sql.adaptive.enabled": "false",
    }
    if config.remote is None:
        conf.update(
            {
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.driver.memory": "2g",
                "spark.sql.execution.arrow.maxRecordsPerBatch": "25000",
            }
        )
        if config.master.startswith("local"):
            conf["spark.default.parallelism"] = "2"
        if config.master.startswith("local") or "127.0.0.1" in config.master or "localhost" in config.master:
            conf["spark.driver.bindAddress"] = "127.0.0.1"
            conf["spark.driver.host"] = "127.0.0.1"
    return conf


_LOG4J2 = """\
status = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
rootLogger.level = {level}
rootLogger.appenderRef.stdout.ref = console
"""


#: The log4j2 files this process wrote, by level (removed when it exits).
_log4j2_files: dict[str, str] = {}


def _quiet_log4j2() -> str:
    """A log4j2 config for the driver JVM: errors only (``HANDOFF_SPARK_LOG_LEVEL`` to change), so the
    start-up warnings of a local Spark do not drown the pipeline's progress.

    Written per process with ``mkstemp`` (a new name, mode 0600, never an existing file) and removed when
    the process exits: a file at a fixed name in the shared temporary directory could be planted by another
    local user, and log4j2 appenders can write anywhere the pipeline's user can."""
    level = os.environ.get("HANDOFF_SPARK_LOG_LEVEL", "error").lower()
    path = _log4j2_files.get(level)
    if path is not None and os.path.isfile(path):
        return path
    fd, path = tempfile.mkstemp(prefix=f"handoff-spark-log4j2-{_safe_level(level)}-", suffix=".properties")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(_LOG4J2.replace("{level}", _safe_level(level)))
    if not _log4j2_files:
        atexit.register(_remove_log4j2_files)
    _log4j2_files[level] = path
    return path


def _safe_level(level: str) -> str:
    return "".join(c for c in level if c.isalnum())[:16] or "level"


def _remove_log4j2_files() -> None:
    for path in _log4j2_files.values():
        with contextlib.suppress(OSError):
            os.unlink(path)
    _log4j2_files.clear()


def build_session(config: SparkConfig) -> Any:
    """A SparkSession for ``config`` (classic, or Spark Connect when ``remote`` is set)."""
    from pyspark.sql import SparkSession

    # pyspark 4.x warns on every import path that pandas >= 3 is not fully supported; the pipeline hands
    # Spark Arrow tables, not pandas frames.
    warnings.filterwarnings(
        "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
    )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf = {**default_conf(config), **config.conf}
    builder = SparkSession.builder.appName(config.app_name)
    if config.remote is not None:
        builder = builder.remote(config.remote)
    else:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.master(config.master)
        if "spark.driver.extraJavaOptions" not in conf:
            conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={_quiet_log4j2()}"
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # PySpark logs every analysis error with its full JVM stack trace; the worker reports the error
    # itself (naming the batch), so keep these quiet unless asked for.
    if not log.isEnabledFor(logging.DEBUG):
        for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    if not is_connect(spark):
        spark.sparkContext.setLogLevel(os.environ.get("HANDOFF_SPARK_LOG_LEVEL", "ERROR"))
    return spark


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session (no SparkContext)."""
    return "connect" in type(spark).__module__


class JobControl:
    """Tag the jobs of one batch and cancel them from another thread."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.connect = is_connect(spark)

    @contextlib.contextmanager
    def tagged(self, tag: str) -> Iterator[None]:
        """Every Spark job started by this thread inside the block carries ``tag``."""
        if self.connect:
            self.spark.addTag(tag)
        else:
            self.spark.sparkContext.addJobTag(tag)
        try:
            yield
        finally:
            try:
                if self.connect:
                    self.spark.removeTag(tag)
                else:
                    self.spark.sparkContext.removeJobTag(tag)
            except Exception:  # the session may be stopping
                log.debug("could not remove job tag %s", tag, exc_info=True)

    def cancel(self, tag: str) -> None:
        """Cancel the running jobs tagged ``tag`` (they fail with a cancellation error)."""
        try:
            if self.connect:
                self.spark.interruptTag(tag)
            else:
                self.spark.sparkContext.cancelJobsWithTag(tag)
        except Exception:
            log.warning("cancelling the Spark jobs of %s failed", tag, exc_info=True)
