"""The user's transform: loading ``module:function``, its result, and a JSON parsing helper.

A transform takes the batch's DataFrame (columns of :data:`~kafka_handoff.pipeline.arrow.KAFKA_SCHEMA`)
and returns either

* a DataFrame -- the rows to write to the sink; or
* ``TransformResult(output, rejected)`` or the tuple ``(output, rejected)``, where ``rejected`` holds the
  malformed input records: at least ``topic``, ``partition``, ``offset`` and an ``error`` string (plus
  ``timestamp``, ``key``, ``value`` when available).  They are handled by ``errors.malformed``: a
  dead-letter table or topic, counted and skipped, or the batch fails.

:func:`parse_json` builds both DataFrames from JSON values with a schema and required fields.

Native JSON parse
-----------------
The worker hands the transform a DataFrame it made from an Arrow table, and registers both for the call
(:func:`native_input`).  When :func:`parse_json` is given exactly that DataFrame, a flat schema of types
whose JSON conversion is the same in Arrow as in Spark (STRING, BIGINT, INT, SMALLINT, TINYINT, DOUBLE,
FLOAT, BOOLEAN) and ``transform.native_json`` is on, it parses the values with ``pyarrow.json`` instead
of Spark's ``from_json``: vectorised, in the worker's process, without a Spark job.  Arrow's parser is
stricter than Spark's (RFC 8259 only, no type coercion); every value it refuses -- and every value it
was not given (not starting with ``{`` and ending with ``}``, containing a line break, parsed to a
non-finite float) -- is judged by the Spark path on just those rows, so the ``(parsed, rejected)`` rows,
their order and the error strings equal what the Spark path returns.  When more than half of a batch
is refused the whole batch takes the Spark path.  Any other DataFrame (Spark's own Kafka source, a
DataFrame derived from the input) takes the Spark path.

Before pyarrow, when the schema has no float field and the C extension ``_jsonscan`` is built (and
``KAFKA_HANDOFF_PURE_PYTHON`` is not set), a strict C scanner of flat JSON objects reads every value
(``_c_scan``): it accepts only what pyarrow would parse to the very same values (one object on one line,
strictly valid UTF-8, integers in range, no duplicate schema key, ...) and fills their fields directly as
Arrow arrays; only the values it refuses take the steps above (pyarrow, then Spark for pyarrow's refusals).

Avro
----
:func:`parse_avro` decodes registry-framed Avro values (Confluent's framing: magic byte 0, schema id, record)
into the columns of a reader schema, with :class:`~kafka_handoff.pipeline.avro.AvroColumns` (the C decoder
``_avrodecode`` for flat records; see :mod:`kafka_handoff.pipeline.avro`).  It never runs a Spark job to
parse: on the worker's input DataFrame it reads the batch's Arrow table; on any other DataFrame it collects
the needed columns (``toArrow``) first.  The pipeline config gives its defaults (``transform.reader_schema``
or ``transform.reader_subject``, ``[schema_registry]``), so ``function = "parse_avro"`` is a whole
transform.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka_handoff._native import load_extension
from kafka_handoff.errors import ConfigError
from kafka_handoff.pipeline.config import PipelineConfig, TransformConfig

__all__ = [
    "REJECTED_COLUMNS",
    "NativeInput",
    "TransformResult",
    "load_transform",
    "native_input",
    "normalize_result",
    "parse_avro",
    "parse_json",
    "parse_protobuf",
]

log = logging.getLogger(__name__)

#: Columns a rejected-records DataFrame must have.
REJECTED_COLUMNS = ("topic", "partition", "offset", "error")
_CORRUPT = "_corrupt_record"
_PARSED = "__parsed"
_INVALID = "invalid JSON (not an object matching the schema)"


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


@dataclass
class NativeInput:
    """The worker's input DataFrame of one batch and the Arrow table it was made from (see
    :func:`native_input`); collects the Arrow form of the rejected DataFrames the native parse made."""

    spark: Any
    df: Any
    table: Any
    enabled: bool = True
    to_frame: Callable[[Any], Any] | None = None
    """Makes the native parse's DataFrames from its Arrow tables (default: ``spark.createDataFrame``)."""
    rejected: list[tuple[Any, Any]] = field(default_factory=list)
    """(rejected DataFrame, the same rows as an Arrow table) per native :func:`parse_json` call."""
    native: int = 0
    """Records judged natively in this batch (parsed by pyarrow, or a null / hopeless value)."""
    refused: int = 0
    """Records the native parse handed to Spark's ``from_json`` (refused by pyarrow, or not tried)."""
    fallbacks: int = 0
    """Native :func:`parse_json` calls that gave the whole batch to the Spark path."""
    avro: AvroSource | None = None
    """:func:`parse_avro`'s defaults from the pipeline config."""

    def frame(self, table: Any) -> Any:
        """``table`` as a DataFrame (the worker's handover: a spooled file, or ``createDataFrame``)."""
        return self.spark.createDataFrame(table) if self.to_frame is None else self.to_frame(table)

    def rejected_arrow(self, rejected_df: Any) -> Any:
        """The Arrow table of ``rejected_df`` if a native :func:`parse_json` made it (no Spark job needed
        to collect it), else None."""
        for df, table in self.rejected:
            if df is rejected_df:
                return table
        return None


_INPUT: contextvars.ContextVar[NativeInput | None] = contextvars.ContextVar(
    "handoff_native_input", default=None
)


@contextlib.contextmanager
def native_input(
    spark: Any,
    df: Any,
    table: Any,
    *,
    enabled: bool = True,
    to_frame: Callable[[Any], Any] | None = None,
    avro: AvroSource | None = None,
) -> Iterator[NativeInput]:
    """Within the block (in this thread), :func:`parse_json` called with ``df`` -- made from ``table`` --
    may parse ``table``'s values natively; its DataFrames are made by ``to_frame`` (default:
    ``spark.createDataFrame``)."""
    scope = NativeInput(spark, df, table, enabled, to_frame, avro=avro)
    token = _INPUT.set(scope)
    try:
        yield scope
    finally:
        _INPUT.reset(token)


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

    On the worker's own input DataFrame the values are parsed by pyarrow when the schema allows (module
    docstring, "Native JSON parse"); the result is the same.
    """
    from pyspark.sql.types import StructType

    struct: Any = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    names = [f.name for f in struct.fields]
    for name in required:
        if name not in names:
            raise ValueError(f"parse_json: required field {name!r} is not in the schema ({', '.join(names)})")
    scope = _INPUT.get()
    if scope is not None and scope.enabled and scope.df is df:
        plan = _native_plan(scope.table, struct, column, keep)
        if plan is not None:
            try:
                done = _native_parse(scope, plan, required, column, keep)
            except Exception:
                log.warning("native JSON parse failed; using Spark's from_json for this batch", exc_info=True)
                done = None
            if done is not None:
                return done
            scope.fallbacks += 1
    good, rejected, _ = _spark_parse(df, struct, required, column, keep)
    return good, rejected


def _spark_parse(
    df: Any, struct: Any, required: Sequence[str], column: str, keep: Sequence[str]
) -> tuple[Any, Any, Any]:
    """The Spark path: ``(good, rejected, judged)``, ``judged`` having per input row ``__ok``,
    ``__error`` and the parsed fields (what the native path takes from Spark for the rows it refused)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    names = [f.name for f in struct.fields]
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
        .when(invalid, F.lit(_INVALID))
        .otherwise(F.concat(F.lit("missing required field(s): "), missing_list))
    )
    rejected = parsed.where(~ok).select(
        "topic", "partition", "offset", "timestamp", "key", column, error.alias("error")
    )
    judged = parsed.select(
        F.coalesce(ok, F.lit(False)).alias(_OK),
        F.when(~ok, error).alias(_ERROR),
        *[p[name].alias(name) for name in names],
    )
    return good, rejected, judged


# ----------------------------------------------------------------------------------------- native parse
_OK = "__ok"
_ERROR = "__error"
_WRAP = "v"
#: Rows per piece when a batch does not parse at once and the refused values are searched for.
_PIECE = 2048
_ROW = re.compile(r" in row (\d+)")
_REJECTED_KAFKA = ("topic", "partition", "offset", "timestamp", "key")


@dataclass(frozen=True)
class _Plan:
    struct: Any
    """The Spark schema (StructType)."""
    names: list[str]
    types: list[Any]
    """Arrow type per field."""


def _arrow_type(data_type: Any) -> Any:
    """The Arrow type whose JSON conversion equals Spark's for ``data_type``, or None."""
    import pyarrow as pa
    from pyspark.sql import types as T

    exact = {
        T.LongType: pa.int64(),
        T.IntegerType: pa.int32(),
        T.ShortType: pa.int16(),
        T.ByteType: pa.int8(),
        T.DoubleType: pa.float64(),
        T.FloatType: pa.float32(),
        T.BooleanType: pa.bool_(),
    }
    kind = type(data_type)
    if kind is T.StringType:
        # Only the default collation (a collated STRING compares differently, and is rare).
        return pa.string() if data_type.simpleString() == "string" else None
    return exact.get(kind)


def _native_plan(table: Any, struct: Any, column: str, keep: Sequence[str]) -> _Plan | None:
    """What the native parse needs, or None when the Spark path must run (unsupported field types,
    duplicate names, a column the input does not have)."""
    import pyarrow as pa

    names = [f.name for f in struct.fields]
    if not names or len({n.lower() for n in names}) != len(names) or {_OK, _ERROR, _PARSED} & set(names):
        return None
    types = [_arrow_type(f.dataType) for f in struct.fields]
    if any(t is None for t in types):
        return None
    columns = set(table.column_names)
    if column not in columns or column in _REJECTED_KAFKA or not {*keep, *_REJECTED_KAFKA} <= columns:
        return None
    value_type = table.schema.field(column).type
    if not (pa.types.is_binary(value_type) or pa.types.is_string(value_type)):
        return None  # (large_binary / large_string too: the byte scans read int32 offsets)
    return _Plan(struct, names, types)


def _read_lines(data: Any, wrap: Any, *, single_block: bool) -> Any:
    """``data`` (newline-separated JSON objects) as a table of ``wrap``'s schema."""
    import pyarrow as pa
    import pyarrow.json as pj

    # One block (rows in errors count from the piece's start), or 4 MiB blocks on all cores.
    block = max(len(data) + 1, 1 << 20) if single_block else 4 << 20
    read = pj.ReadOptions(use_threads=not single_block, block_size=block)
    parse = pj.ParseOptions(explicit_schema=wrap, unexpected_field_behavior="ignore")
    return pj.read_json(pa.BufferReader(data), read_options=read, parse_options=parse)


def _parse_rows(lines: Any, wrap: Any) -> list[tuple[int, Any]]:
    """Parse ``lines`` (a binary array, one wrapped JSON object + newline each) in pieces.  Returns the
    parsed pieces as (first row, struct array of the piece's rows); the rows of no piece are those
    pyarrow refused.  All at once first (multi-threaded); if that fails, in pieces of :data:`_PIECE`
    rows, a failing piece split at the row its syntax error names, or else in halves."""

    def attempt(start: int, stop: int, single_block: bool) -> tuple[Any, str]:
        piece = lines.slice(start, stop - start)
        offsets, data = piece.buffers()[1], piece.buffers()[2]
        lo, hi = _offset(offsets, piece.offset), _offset(offsets, piece.offset + len(piece))
        try:
            table = _read_lines(data[lo:hi], wrap, single_block=single_block)
        except Exception as exc:  # ArrowInvalid, or a UnicodeDecodeError for invalid UTF-8
            return None, str(exc)
        if table.num_rows != stop - start:  # never expected: one line is one object
            return None, ""
        return table.column(_WRAP).combine_chunks(), ""

    if not len(lines):
        return []
    result, _ = attempt(0, len(lines), False)
    if result is not None:
        return [(0, result)]
    parsed: list[tuple[int, Any]] = []
    todo = [(a, min(a + _PIECE, len(lines))) for a in range(0, len(lines), _PIECE)]
    while todo:
        start, stop = todo.pop()
        result, error = attempt(start, stop, True)
        if result is not None:
            parsed.append((start, result))
            continue
        if stop - start == 1:
            continue  # refused
        row = _ROW.search(error)
        at = start + int(row.group(1)) if row else -1
        if start <= at < stop:
            # A syntax error names its row (the piece is one block): the rows before it parsed so far.
            todo.extend(p for p in ((start, at), (at + 1, stop)) if p[0] < p[1])
        else:
            mid = (start + stop) // 2
            todo.extend([(start, mid), (mid, stop)])
    parsed.sort(key=lambda p: p[0])
    return parsed


#: The C scanner of flat JSON objects (``_jsonscan.c``), or None (not built, or pure Python requested).
_JSONSCAN: Any = load_extension("kafka_handoff.pipeline._jsonscan")


def _scan_kinds(types: Sequence[Any]) -> list[int] | None:
    """The C scanner's kind per Arrow type, or None when a type is not one it scans (floats)."""
    import pyarrow as pa

    kinds = {pa.string(): "STRING", pa.int8(): "INT8", pa.int16(): "INT16", pa.int32(): "INT32",
             pa.int64(): "INT64", pa.bool_(): "BOOLEAN"}  # fmt: skip
    names = [kinds.get(t) for t in types]
    if _JSONSCAN is None or any(k is None for k in names):
        return None
    return [getattr(_JSONSCAN, k) for k in names if k is not None]


def _c_scan(values: Any, plan: _Plan, struct_type: Any) -> tuple[Any, Any] | None:
    """Scan the ChunkedArray ``values`` (binary or string) in C: (per row, accepted: a numpy bool array;
    the struct array of the accepted rows, in row order), or None when the scanner is not available or
    the schema has a type it does not scan.  A refused row is one the C scan leaves to pyarrow and Spark."""
    import numpy as np
    import pyarrow as pa

    kinds = _scan_kinds(plan.types)
    if kinds is None:
        return None
    chunks = []
    for chunk in values.chunks:
        validity, offsets, data = chunk.buffers()[:3]
        if offsets is None and not len(chunk):
            continue
        chunks.append((offsets, b"" if data is None else data, validity, chunk.offset, len(chunk)))
    mask, accepted, fields = _JSONSCAN.scan(chunks, [name.encode() for name in plan.names], kinds)
    children = []
    for (validity, nulls, offsets, data), t in zip(fields, plan.types, strict=True):
        buffers = [_buf(validity), _buf(offsets), pa.py_buffer(data)] if offsets is not None else \
            [_buf(validity), pa.py_buffer(data)]  # fmt: skip
        children.append(pa.Array.from_buffers(t, accepted, buffers, null_count=nulls))
    acc = pa.StructArray.from_arrays(children, fields=list(struct_type))
    return np.frombuffer(mask, dtype=bool, count=len(values)), acc


def _buf(data: Any) -> Any:
    import pyarrow as pa

    return None if data is None else pa.py_buffer(data)


def _offset(buffer: Any, index: int) -> int:
    import numpy as np

    return int(np.frombuffer(buffer, dtype=np.int32, count=1, offset=4 * index)[0])


def _rows_with(values: Any, chars: bytes) -> Any:
    """Per row of the BinaryArray ``values``: does it contain any of the bytes ``chars``.  One
    ``bytes.count`` (memchr speed) per byte over the data at once; the rows of the hits by binary search."""
    import numpy as np

    n = len(values)
    mask = np.zeros(n, dtype=bool)
    data = values.buffers()[2]
    if not n or data is None:
        return mask
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * values.offset)
    lo = int(offsets[0])
    text = data[lo : int(offsets[-1])].to_pybytes()
    for c in chars:
        hits = text.count(c)
        if not hits:
            continue
        if hits > 1000:
            positions = np.flatnonzero(np.frombuffer(text, dtype=np.uint8) == c)
        else:
            found, at = [], text.find(c)
            while at >= 0:
                found.append(at)
                at = text.find(c, at + 1)
            positions = np.array(found, dtype=np.int64)
        mask[np.searchsorted(offsets, positions + lo, side="right") - 1] = True
    return mask


def _mask(array: Any) -> Any:
    """A boolean Arrow array as a numpy bool array (null: False)."""
    import numpy as np
    import pyarrow.compute as pc

    return np.asarray(pc.fill_null(array, False).to_numpy(zero_copy_only=False), dtype=bool)


def _in_order(parts: Sequence[tuple[Any, Any]]) -> Any:
    """The arrays of ``parts`` ((input rows, array of those rows), each in ascending row order) merged
    into one array in input-row order."""
    import numpy as np
    import pyarrow as pa

    filled = [(rows, arr) for rows, arr in parts if len(rows)]
    if not filled:
        return parts[0][1].slice(0, 0)
    if len(filled) == 1:
        return filled[0][1]
    rows = np.concatenate([r for r, _ in filled])
    merged = pa.concat_arrays([a for _, a in filled])
    return merged.take(pa.array(np.argsort(rows, kind="stable")))


def _native_parse(
    scope: NativeInput, plan: _Plan, required: Sequence[str], column: str, keep: Sequence[str]
) -> tuple[Any, Any] | None:
    """The native path (see the module docstring); None: take the Spark path for the whole batch."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    table = scope.table
    n = table.num_rows
    started = time.monotonic()
    struct_type = pa.struct([pa.field(name, t) for name, t in zip(plan.names, plan.types, strict=True)])
    # The C scan first: the rows it accepts are parsed; only the others take the steps below.
    scanned = _c_scan(table.column(column), plan, struct_type)
    if scanned is None:
        c_idx, c_acc = np.empty(0, dtype=np.int64), pa.array([], struct_type)
        rest_idx = np.arange(n)
        values = table.column(column).combine_chunks()
    else:
        c_ok, c_acc = scanned
        c_idx, rest_idx = np.flatnonzero(c_ok), np.flatnonzero(~c_ok)
        values = table.column(column).take(pa.array(rest_idx)).combine_chunks()
    if pa.types.is_string(values.type):
        values = values.cast(pa.binary())
    m = len(values)
    # Four kinds of rows.  null: "null value".  No "{" or no "}" anywhere: Spark cannot make an object
    # of it either ("invalid JSON").  "{...}" on one line: pyarrow parses it.  Anything else: Spark.
    is_null = np.zeros(n, dtype=bool)
    hopeless = np.zeros(n, dtype=bool)
    rest_null = _mask(pc.is_null(values))
    tried = _mask(pc.starts_with(values, b"{")) & _mask(pc.ends_with(values, b"}"))
    tried &= ~_rows_with(values, b"\n\r")
    rest_hopeless = np.zeros(m, dtype=bool)
    other = np.flatnonzero(~tried & ~rest_null)
    if len(other):
        rest = values.take(pa.array(other))
        rest_hopeless[other] = ~(_rows_with(rest, b"{") & _rows_with(rest, b"}"))
    is_null[rest_idx], hopeless[rest_idx] = rest_null, rest_hopeless
    tried_idx = np.flatnonzero(tried)
    prefix = pa.scalar(b'{"' + _WRAP.encode() + b'":')
    lines = pc.binary_join_element_wise(prefix, values, pa.scalar(b"}\n"), b"").filter(pa.array(tried))
    pieces = _parse_rows(lines, pa.schema([pa.field(_WRAP, struct_type)]))
    acc_pos = np.concatenate([np.arange(start, start + len(a)) for start, a in pieces] or [np.empty(0, int)])
    acc = pa.concat_arrays([a for _, a in pieces]) if pieces else pa.array([], struct_type)
    # Parsed, but Spark might make it differently: ``null`` (not an object), or a non-finite float
    # (``NaN``/``Infinity`` spellings and overflow are Jackson's business).
    doubt = _mask(pc.is_null(acc))
    for child, t in zip(acc.flatten(), plan.types, strict=True):  # (.field() ignores the offset)
        if pa.types.is_floating(t):
            doubt |= ~_mask(pc.is_finite(child)) & ~_mask(pc.is_null(child))
    py_idx = rest_idx[tried_idx[acc_pos[~doubt]]]
    if doubt.any():
        acc = acc.filter(pa.array(~doubt))
    # The rows parsed in C and by pyarrow, in input order.
    parsed_idx = np.sort(np.concatenate([c_idx, py_idx])) if len(py_idx) else c_idx
    acc = _in_order([(c_idx, c_acc), (py_idx, acc)])
    to_spark = ~(is_null | hopeless)
    to_spark[parsed_idx] = False
    refused_idx = np.flatnonzero(to_spark)
    if len(refused_idx) * 2 > n:
        return None
    scope.native += n - len(refused_idx)
    scope.refused += len(refused_idx)

    # Parsed rows: ok, or the null required fields (in ``required``'s order, as the Spark path says).
    columns = dict(zip(plan.names, acc.flatten(), strict=True))
    code = np.zeros(len(acc), dtype=np.int64)  # one bit per required field that is null
    for bit, name in enumerate(required):
        code |= _mask(pc.is_null(columns[name])).astype(np.int64) << bit
    nat_ok = code == 0
    codes, where = np.unique(code[~nat_ok], return_inverse=True)
    texts = [
        "missing required field(s): " + ", ".join(name for bit, name in enumerate(required) if c >> bit & 1)
        for c in codes.tolist()
    ]
    nat_error = pa.array(texts, pa.string()).take(pa.array(where.reshape(-1)))

    parsed_at = time.monotonic()
    # Refused rows: Spark's from_json, on just those rows.
    ref_ok = np.zeros(0, dtype=bool)
    ref_error = pa.array([], pa.string())
    ref_columns = {name: pa.array([], t) for name, t in zip(plan.names, plan.types, strict=True)}
    if len(refused_idx):
        sub_df = scope.frame(table.take(pa.array(refused_idx)))
        judged = _spark_parse(sub_df, plan.struct, required, column, keep)[2].toArrow()
        ref_ok = _mask(judged.column(_OK).combine_chunks())
        ref_error = judged.column(_ERROR).combine_chunks().cast(pa.string()).filter(pa.array(~ref_ok))
        ref_columns = {name: judged.column(name).combine_chunks().cast(t).filter(pa.array(ref_ok))
                       for name, t in zip(plan.names, plan.types, strict=True)}  # fmt: skip

    judged_at = time.monotonic()
    # Good rows in input order: the Kafka columns filtered, the parsed fields merged.
    good_mask = np.zeros(n, dtype=bool)
    good_mask[parsed_idx[nat_ok]] = True
    good_mask[refused_idx[ref_ok]] = True
    kept = [c for c in keep if c not in plan.names]
    good_arrays = [table.column(c).filter(pa.array(good_mask)) for c in kept]
    nat_keep = pa.array(nat_ok)
    for name in plan.names:
        good_arrays.append(_in_order([(parsed_idx[nat_ok], columns[name].filter(nat_keep)),
                                      (refused_idx[ref_ok], ref_columns[name])]))  # fmt: skip
    good = pa.table(good_arrays, names=[*kept, *plan.names])
    # Rejected rows in input order, with their error.
    null_idx, hopeless_idx = np.flatnonzero(is_null), np.flatnonzero(hopeless)
    error = _in_order([
        (parsed_idx[~nat_ok], nat_error),
        (refused_idx[~ref_ok], ref_error),
        (null_idx, pa.array(["null value"] * len(null_idx), pa.string())),
        (hopeless_idx, pa.array([_INVALID] * len(hopeless_idx), pa.string())),
    ])  # fmt: skip
    rejected = table.select([*_REJECTED_KAFKA, column]).filter(pa.array(~good_mask))
    rejected = rejected.append_column(pa.field("error", pa.string(), nullable=False), error)
    built_at = time.monotonic()
    good_df = scope.frame(good)
    rejected_df = scope.frame(rejected)
    scope.rejected.append((rejected_df, rejected))
    log.debug(
        "native JSON parse of %d records: %d parsed (%.2f s), %d judged by Spark (%.2f s), tables %.2f s, "
        "to Spark %.2f s", n, len(parsed_idx), parsed_at - started, len(refused_idx), judged_at - parsed_at,
        built_at - judged_at, time.monotonic() - built_at,
    )  # fmt: skip
    return good_df, rejected_df


# ------------------------------------------------------------------------------------------------- Avro
class AvroSource:
    """:func:`parse_avro`'s defaults from a pipeline config: the schema registry client (made on first use)
    and the reader schema (a file, or the latest version of a subject, read once); one decoder, so writer
    schemas are fetched once per id for the worker's life."""

    def __init__(self, config: PipelineConfig, registry: Any = None) -> None:
        self.config = config
        self._registry = registry
        self._decoder: Any = None
        self._lock = threading.Lock()

    @property
    def registry(self) -> Any:
        if self._registry is None:
            self._registry = make_registry(self.config.schema_registry)
        return self._registry

    def reader_schema(self) -> str:
        t = self.config.transform
        if t.reader_schema is not None:
            with open(t.reader_schema, encoding="utf-8") as f:
                return f.read()
        if t.reader_subject is None:
            raise ConfigError(
                "transform.reader_schema: parse_avro without a reader schema argument needs "
                "transform.reader_schema or transform.reader_subject"
            )
        latest = self.registry.get_latest_version(t.reader_subject)
        schema = getattr(latest, "schema", latest)
        return str(getattr(schema, "schema_str", schema))

    def decoder(self) -> Any:
        from kafka_handoff.pipeline.avro import AvroColumns

        with self._lock:
            if self._decoder is None:
                self._decoder = AvroColumns(self.reader_schema(), self.registry)
            return self._decoder


def avro_source(config: PipelineConfig) -> AvroSource | None:
    """The :class:`AvroSource` of ``config``, or None without ``[schema_registry]``."""
    return AvroSource(config) if config.schema_registry else None


def make_registry(settings: Mapping[str, Any]) -> Any:
    """A :class:`kafka_handoff.schema_registry.SchemaRegistryClient` of ``[schema_registry]``'s settings."""
    from kafka_handoff.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient(dict(settings))


_DECODERS: dict[tuple[int, str], tuple[Any, Any]] = {}
_DECODERS_LOCK = threading.Lock()


def _decoder_for(reader_schema: Any, registry: Any) -> Any:
    from kafka_handoff.pipeline.avro import AvroColumns

    text = reader_schema if isinstance(reader_schema, str) else json.dumps(reader_schema, sort_keys=True)
    key = (id(registry), text)
    with _DECODERS_LOCK:
        held = _DECODERS.get(key)
        if held is None or held[0] is not registry:
            if len(_DECODERS) >= 64:
                _DECODERS.clear()
            held = _DECODERS[key] = (registry, AvroColumns(text, registry))
        return held[1]


def parse_avro(
    df: Any,
    reader_schema: Any = None,
    *,
    registry: Any = None,
    column: str = "value",
    keep: Sequence[str] = ("topic", "partition", "offset", "timestamp", "key"),
) -> tuple[Any, Any]:
    """Decode ``column`` (registry-framed Avro) into the fields of ``reader_schema`` (Avro schema JSON text
    or dict; default: the pipeline's ``transform.reader_schema`` / ``transform.reader_subject``), writer
    schemas fetched by id from ``registry`` (default: the pipeline's ``[schema_registry]``).

    Returns ``(parsed, rejected)`` like :func:`parse_json`: ``parsed`` has the ``keep`` columns (except those
    the schema also names) plus the reader schema's fields; ``rejected`` has ``topic, partition, offset,
    timestamp, key, value, error``, ``error`` naming the reason (:mod:`kafka_handoff.pipeline.avro`).  A
    registry outage raises :class:`~kafka_handoff.pipeline.avro.RegistryUnavailableError` (the batch fails
    and is retried; nothing is rejected for it)."""

    scope = _INPUT.get()
    if reader_schema is None and registry is None:
        if scope is None or scope.avro is None:
            raise ValueError(
                "parse_avro: no reader schema and registry given, and no pipeline [schema_registry] / "
                "transform.reader_schema to take them from"
            )
        decoder = scope.avro.decoder()
    else:
        if registry is None:
            if scope is None or scope.avro is None:
                raise ValueError("parse_avro: no registry given, and no pipeline [schema_registry]")
            registry = scope.avro.registry
        if reader_schema is None:
            if scope is None or scope.avro is None:
                raise ValueError(
                    "parse_avro: no reader schema given, and no pipeline transform.reader_schema"
                )
            reader_schema = scope.avro.reader_schema()
        decoder = _decoder_for(reader_schema, registry)
    return _parse_framed(df, decoder, scope, column, keep, "Avro")


def _parse_framed(
    df: Any, decoder: Any, scope: NativeInput | None, column: str, keep: Sequence[str], what: str
) -> tuple[Any, Any]:
    """The DataFrames of ``decoder.decode`` (:class:`~kafka_handoff.pipeline.avro.Decoded`) of ``column``:
    from the batch's Arrow table on the worker's input DataFrame, else from the collected columns."""
    import pyarrow as pa

    native = scope is not None and scope.df is df
    if native:
        assert scope is not None
        table = scope.table
        frame: Callable[[Any], Any] = scope.frame
    else:
        table = df.select(*_REJECTED_KAFKA, column).toArrow()
        spark = df.sparkSession

        def frame(t: Any) -> Any:
            return spark.createDataFrame(t)

    started = time.monotonic()
    decoded = decoder.decode(table.column(column))
    names = list(decoder.schema.names)
    kept = [c for c in keep if c not in names]
    ok = pa.array(decoded.ok)
    good = pa.table(
        [*(table.column(c).filter(ok) for c in kept), *decoded.table.columns],
        names=[*kept, *names],
    )
    rejected = table.select([*_REJECTED_KAFKA, column]).filter(pa.array(~decoded.ok))
    if column != "value":
        rejected = rejected.rename_columns([*_REJECTED_KAFKA, "value"])
    rejected = rejected.append_column(pa.field("error", pa.string(), nullable=False), decoded.errors)
    good_df, rejected_df = frame(good), frame(rejected)
    if scope is not None and native:
        scope.rejected.append((rejected_df, rejected))
        scope.native += table.num_rows
    log.debug(
        "%s parse of %d records: %d decoded, %d rejected (%.3f s; %s)",
        what, table.num_rows, good.num_rows, rejected.num_rows, time.monotonic() - started,
        getattr(decoder, "counts", {}),
    )  # fmt: skip
    return good_df, rejected_df


def parse_protobuf(
    df: Any,
    message_type: Any,
    *,
    registry: Any = None,
    column: str = "value",
    keep: Sequence[str] = ("topic", "partition", "offset", "timestamp", "key"),
) -> tuple[Any, Any]:
    """Decode ``column`` (registry-framed Protobuf: magic byte, schema id, message indexes, message) into
    ``message_type`` (a generated message class), one column per top-level field
    (:mod:`kafka_handoff.pipeline.protobuf`); schema ids are checked against ``registry`` (default: the
    pipeline's ``[schema_registry]``, if any).  Returns ``(parsed, rejected)`` like :func:`parse_avro`.
    The messages are parsed one by one by the protobuf runtime (no native decoder)."""
    from kafka_handoff.pipeline.protobuf import ProtobufColumns

    scope = _INPUT.get()
    if registry is None and scope is not None and scope.avro is not None:
        registry = scope.avro.registry
    return _parse_framed(df, ProtobufColumns(message_type, registry), scope, column, keep, "Protobuf")
