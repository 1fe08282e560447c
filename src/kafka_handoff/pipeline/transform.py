"""The user's transform: loading ``module:function``, its result, and a JSON parsing helper.

A transform takes the batch's DataFrame (columns of :data:`~kafka_handoff.pipeline.arrow.KAFKA_SCHEMA`)
and returns either

* a DataFrame -- the rows to write to the sink; or
* ``TransformResult(output, rejected)`` or the tuple ``(output, rejected)``, where ``rejected`` holds the
  malformed input records: at least ``topic``, ``partition``, ``offset`` and an ``error`` string (plus
  ``timestamp``, ``key``, ``value`` when available).  They are handled by ``errors.malformed``: a
  dead-letter table or topic, counted and skipped, or the batch fails.

:func:`parse_json` builds both DataFrames from JSON values with a schema and required fields.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_handoff.errors import ConfigError
from kafka_handoff.pipeline.config import TransformConfig

__all__ = [
    "REJECTED_COLUMNS",
    "TransformResult",
    "load_transform",
    "normalize_result",
    "parse_json",
]

#: Columns a rejected-records DataFrame must have.
REJECTED_COLUMNS = ("topic", "partition", "offset", "error")
_CORRUPT = "_corrupt_record"
_PARSED = "__parsed"


@dataclass(frozen=True)
class TransformResult:
    output: Any
    """The DataFrame to write to the sink."""
    rejected: Any = None
    """Malformed input records (a DataFrame with :data:`REJECTED_COLUMNS`), or None."""


def load_transform(config: TransformConfig) -> Callable[[Any], Any]:
    """Import ``module:function`` (after adding ``config.path`` to ``sys.path``); ConfigError if it
    cannot be imported or is not callable."""
    for entry in reversed(config.path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    try:
        module = importlib.import_module(config.module)
    except ImportError as exc:
        where = f" (searched transform.path {list(config.path)} and sys.path)" if config.path else ""
        raise ConfigError(
            f"transform.function: cannot import module {config.module!r}{where}: {exc}"
        ) from exc
    func = getattr(module, config.attribute, None)
    if func is None:
        raise ConfigError(
            f"transform.function: module {config.module!r} has no attribute {config.attribute!r}"
        )
    if not callable(func):
        raise ConfigError(f"transform.function: {config.function} is not callable")
    return func  # type: ignore[no-any-return]


def _is_dataframe(value: Any) -> bool:
    """A classic or Spark Connect DataFrame (checked by class, without importing Spark Connect)."""
    return any(
        c.__name__ == "DataFrame" and c.__module__.startswith("pyspark.sql") for c in type(value).__mro__
    )


def normalize_result(value: Any, function: str) -> TransformResult:
    """Check what a transform returned; TypeError (with the function's name) when it is unusable."""
    if isinstance(value, TransformResult):
        result = value
    elif isinstance(value, tuple) and len(value) == 2:
        result = TransformResult(value[0], value[1])
    else:
        result = TransformResult(value)
    if not _is_dataframe(result.output):
        raise TypeError(
            f"transform {function} returned {type(result.output).__name__}, expected a DataFrame "
            "(or a (DataFrame, rejected DataFrame) pair)"
        )
    if result.rejected is not None:
        if not _is_dataframe(result.rejected):
            raise TypeError(
                f"transform {function} returned rejected records as {type(result.rejected).__name__}, "
                "expected a DataFrame"
            )
        missing = [c for c in REJECTED_COLUMNS if c not in result.rejected.columns]
        if missing:
            raise TypeError(
                f"transform {function}: the rejected DataFrame lacks column(s) {', '.join(missing)} "
                f"(needs {', '.join(REJECTED_COLUMNS)})"
            )
    return result


def parse_json(
    df: Any,
    schema: Any,
    *,
    required: Sequence[str] = (),
    column: str = "value",
    keep: Sequence[str] = ("topic", "partition", "offset", "timestamp", "key"),
) -> tuple[Any, Any]:
    """Parse ``column`` (JSON text or bytes) with ``schema`` (DDL string or StructType).

    Returns ``(parsed, rejected)``: ``parsed`` has the ``keep`` columns (except those the schema also
    names: the parsed field wins) plus the schema's fields, for the
    records that are valid JSON objects with every ``required`` field present and non-null; ``rejected``
    has ``topic, partition, offset, timestamp, key, value, error`` for the others, ``error`` saying what is
    wrong (``invalid JSON``, ``missing required field(s): ...``, ``null value``).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    struct: Any = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    names = [f.name for f in struct.fields]
    for name in required:
        if name not in names:
            raise ValueError(f"parse_json: required field {name!r} is not in the schema ({', '.join(names)})")
    with_corrupt = StructType([*struct.fields, StructField(_CORRUPT, StringType(), True)])
    text = F.col(column).cast("string")
    parsed = df.withColumn(
        _PARSED,
        F.from_json(text, with_corrupt, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}),
    )
    p = F.col(_PARSED)
    invalid = p.isNull() | p[_CORRUPT].isNotNull()
    missing = [F.when(p[name].isNull(), F.lit(name)) for name in required]
    missing_list = F.concat_ws(", ", *missing) if missing else F.lit("")
    ok = F.col(column).isNotNull() & ~invalid & (missing_list == F.lit(""))
    kept = [c for c in keep if c not in names]  # a parsed field wins over a Kafka column of that name
    good = parsed.where(ok).select(*kept, *[p[name].alias(name) for name in names])
    error = (
        F.when(F.col(column).isNull(), F.lit("null value"))
        .when(invalid, F.lit("invalid JSON (not an object matching the schema)"))
        .otherwise(F.concat(F.lit("missing required field(s): "), missing_list))
    )
    rejected = parsed.where(~ok).select(
        "topic", "partition", "offset", "timestamp", "key", column, error.alias("error")
    )
    return good, rejected
