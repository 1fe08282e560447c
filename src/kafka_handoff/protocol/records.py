"""Record batch codec (message format v2, magic 2): decoding fetched data and encoding produced batches.

Sans-I/O and pure.  Layout of one batch (all integers big-endian)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (=2) |
    crc uint32 (CRC32C of attributes..end) | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
    maxTimestamp int64 |
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32 | records...

``batchLength`` counts the bytes after itself (batch size = batchLength + 12).  Attributes: bits 0-2
compression codec, bit 3 timestamp type (1 = LogAppendTime), bit 4 transactional, bit 5 control, bit 6
delete horizon set.
The records section (compressed as a whole when a codec is set) holds ``recordCount`` records::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint | keyLength varint | key |
    valueLength varint | value | headerCount varint | (headerKeyLength varint, key utf-8,
    headerValueLength varint, value)*

(varints are zig-zag encoded; a length of -1 means null).

Decoding (:func:`decode_batches`, :func:`decode_batches_columnar`, :func:`decode_batches_buffers`) takes one
partition's ``records`` bytes from a fetch response, which may end with a truncated batch (normal: the broker
cuts at the byte limit; it is ignored as in Java).  Legacy message sets (magic 0 and 1) are *not* decoded:
they are reported as a :class:`~kafka_handoff.errors.CorruptRecordError` that says so (a Kafka 4 cluster only
holds them if they were written by pre-0.11 producers and never compacted away).

Errors never lose good data: decoding stops at the first bad batch and the result carries the records of the
batches before it, ``next_offset`` just past them and the error in ``result.error`` (call
:meth:`DecodedRecords.raise_error` once those records are handed out).

Encoding (:func:`encode_records`, :func:`assemble_batch`, :func:`restamp_batch`; :class:`RecordBatchBuilder`,
:func:`encode_batch`, :func:`encode_control_batch` on top) is the one encoder of the project: the producer's
batches use it too, and write the same bytes as the builder.

The per-record loops have two implementations, for each of the three decoded forms (objects, lists, Arrow
buffers) and for encoding, with identical results and errors: the C extension
``kafka_handoff.protocol._fastrecords`` (built by ``pip install``; optional) and pure Python.  The C one is
used when it is importable, unless the environment variable ``KAFKA_HANDOFF_PURE_PYTHON`` is set (to anything
but ``""``/``0``/``false``/``no``) at import time (``kafka_handoff._native``).  :data:`IMPLEMENTATION`
(decoding) and :data:`ENCODER_IMPLEMENTATION` say which one is active (``"c"`` or ``"python"``).

Records built by the C loop are not tracked by the cyclic garbage collector (when created they hold only
str/int/bytes/tuples, which cannot form a cycle), which makes decoding ~3x faster because the collector no
longer walks every new record.  The price: a reference cycle that runs through a record -- one whose key,
value or headers are replaced by objects that refer back to the record -- is never collected.
:func:`set_gc_tracking` turns tracking back on.
"""

from __future__ import annotations

import dataclasses
import importlib
import struct
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from itertools import accumulate, repeat
from typing import Any, Final, Literal, NamedTuple

from crc32c import crc32c

from kafka_handoff._native import pure_python_requested
from kafka_handoff.errors import CorruptRecordError
from kafka_handoff.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    CompressionType,
    compress,
    decompress,
)
from kafka_handoff.protocol.varint import ZIGZAG_CACHE, ZIGZAG_CACHE_HALF, zigzag_varint
from kafka_handoff.types import ConsumerRecord

__all__ = [
    "ATTRIBUTES_OFFSET",
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "CRC_OFFSET",
    "C_UNAVAILABLE_REASON",
    "ENCODER_IMPLEMENTATION",
    "IMPLEMENTATION",
    "LOG_OVERHEAD",
    "PRODUCER_OFFSET",
    "RECORD_BATCH_OVERHEAD",
    "BatchHeader",
    "Buffer",
    "ColumnBuffers",
    "ControlType",
    "DecodedBuffers",
    "DecodedColumns",
    "DecodedRecords",
    "EncodeEntry",
    "Header",
    "RecordBatchBuilder",
    "RecordColumns",
    "RecordInput",
    "TimestampType",
    "assemble_batch",
    "available_implementations",
    "decode_batches",
    "decode_batches_buffers",
    "decode_batches_columnar",
    "encode_batch",
    "encode_control_batch",
    "encode_records",
    "iter_batch_headers",
    "lists_to_buffers",
    "parse_control_key",
    "restamp_batch",
    "set_gc_tracking",
]

Header = tuple[str, bytes | None]

MAGIC_V2: Final = 2
LOG_OVERHEAD: Final = 12  # baseOffset + batchLength
RECORD_BATCH_OVERHEAD: Final = 61  # the full v2 batch header
_MIN_LEGACY_SIZE: Final = 14  # Java's LegacyRecord.RECORD_OVERHEAD_V0: smaller sizes are corrupt
_MAGIC_OFFSET: Final = 16
_ATTRIBUTES_OFFSET: Final = 21

ATTR_COMPRESSION_MASK: Final = 0x07
ATTR_TIMESTAMP_TYPE: Final = 0x08
ATTR_TRANSACTIONAL: Final = 0x10
ATTR_CONTROL: Final = 0x20
ATTR_DELETE_HORIZON: Final = 0x40

_BATCH_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_PREFIX: Final = struct.Struct(">qi")
_HEAD: Final = struct.Struct(">qiibI")  # up to and including the crc
_TAIL: Final = struct.Struct(">hiqqqhii")  # attributes .. recordCount (covered by the crc)
_CONTROL_KEY: Final = struct.Struct(">hh")
_END_TXN_VALUE: Final = struct.Struct(">hi")
assert _BATCH_HEADER.size == RECORD_BATCH_OVERHEAD
assert _HEAD.size + _TAIL.size == RECORD_BATCH_OVERHEAD


class TimestampType(IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(IntEnum):
    """The ``type`` field of a control record key (transaction markers)."""

    ABORT = 0
    COMMIT = 1


class BatchHeader(NamedTuple):
    """The fixed 61-byte header of a v2 record batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.attributes & ATTR_COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return (
            TimestampType.LOG_APPEND_TIME
            if self.attributes & ATTR_TIMESTAMP_TYPE
            else TimestampType.CREATE_TIME
        )

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD


def iter_batch_headers(data: bytes | bytearray | memoryview) -> Iterator[BatchHeader]:
    """The headers of the complete v2 batches in ``data`` (no CRC check; stops at a truncated batch).

    Raises ``ValueError`` for a batch that is not magic 2 or is too small.
    """
    buf = data if type(data) is bytes else bytes(data)
    pos = 0
    n = len(buf)
    while n - pos >= LOG_OVERHEAD:
        _, length = _PREFIX.unpack_from(buf, pos)
        if n - pos < length + LOG_OVERHEAD:
            return
        if length + LOG_OVERHEAD < RECORD_BATCH_OVERHEAD or buf[pos + _MAGIC_OFFSET] != MAGIC_V2:
            raise ValueError(f"not a v2 record batch at byte {pos}")
        yield BatchHeader._make(_BATCH_HEADER.unpack_from(buf, pos))
        pos += length + LOG_OVERHEAD


# ---------------------------------------------------------------------------------------------------------
# result types


@dataclass(slots=True)
class RecordColumns:
    """Decoded records as parallel lists (one entry per record), for batch/Arrow consumers.

    Per-batch values are kept once per batch: batch *i* covers rows ``batch_starts[i]`` up to the next start
    and has ``batch_timestamp_types[i]`` and ``batch_leader_epochs[i]``.
    """

    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[tuple[Header, ...]] = field(default_factory=list)
    batch_starts: list[int] = field(default_factory=list)
    batch_timestamp_types: list[int] = field(default_factory=list)
    batch_leader_epochs: list[int | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    def _expand(self, per_batch: Sequence[Any]) -> list[Any]:
        out: list[Any] = []
        starts = self.batch_starts
        total = len(self.offsets)
        for i, value in enumerate(per_batch):
            stop = starts[i + 1] if i + 1 < len(starts) else total
            out.extend([value] * (stop - starts[i]))
        return out

    def timestamp_types(self) -> list[int]:
        """One timestamp type per record (0 CreateTime, 1 LogAppendTime)."""
        return self._expand(self.batch_timestamp_types)

    def leader_epochs(self) -> list[int | None]:
        """One partition leader epoch per record (``None`` when the batch has none)."""
        return self._expand(self.batch_leader_epochs)

    def to_records(self, topic: str, partition: int) -> list[ConsumerRecord]:
        """:class:`ConsumerRecord` objects for these rows (raw bytes keys and values)."""
        return [
            ConsumerRecord(
                topic,
                partition,
                o,
                t,
                tt,
                k,
                v,
                h,
                e,
                -1 if k is None else len(k),
                -1 if v is None else len(v),
            )
            for o, t, tt, k, v, h, e in zip(
                self.offsets,
                self.timestamps,
                self.timestamp_types(),
                self.keys,
                self.values,
                self.headers,
                self.leader_epochs(),
                strict=True,
            )
        ]

    def _truncate(self, size: int, batches: int) -> None:
        del self.offsets[size:], self.timestamps[size:], self.keys[size:], self.values[size:]
        del self.headers[size:], self.batch_starts[batches:], self.batch_timestamp_types[batches:]
        del self.batch_leader_epochs[batches:]

    def _keep_from_offset(self, mark: int, start_offset: int) -> None:
        offsets = self.offsets
        rows = [i for i in range(mark, len(offsets)) if offsets[i] >= start_offset]
        self.offsets[mark:] = [offsets[i] for i in rows]
        self.timestamps[mark:] = [self.timestamps[i] for i in rows]
        self.keys[mark:] = [self.keys[i] for i in rows]
        self.values[mark:] = [self.values[i] for i in rows]
        self.headers[mark:] = [self.headers[i] for i in rows]


_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_BIG_DATA: Final = "more than 2 GiB of keys, values or headers in one fetch"
Buffer = bytes | memoryview
"""One buffer of :class:`ColumnBuffers`."""

_PARTS: Final = (
    "rows", "offsets", "timestamps", "key_validity", "key_offsets", "key_data", "value_validity",
    "value_offsets", "value_data", "header_offsets", "header_count", "header_key_offsets", "header_key_data",
    "header_value_validity", "header_value_offsets", "header_value_data",
)  # fmt: skip
_LIST_COLUMNS: Final = ("offsets", "timestamps", "keys", "values", "headers")


class ColumnBuffers:
    """Decoded records as Arrow-layout buffers (what :func:`decode_batches_buffers` returns): no Python object
    per record, so ``pyarrow.Array.from_buffers`` wraps them without a copy (see ``pipeline/arrow.py``).

    Buffers are ``bytes`` or read-only ``memoryview`` objects (the C builder hands its memory over without a
    copy), native-endian (Arrow's little-endian): ``offsets``/``timestamps`` int64 per row; keys and
    values as Arrow ``binary`` -- ``*_validity`` bitmap (``None``: no nulls), ``*_offsets`` int32 ``rows + 1``
    (starting at 0), ``*_data``; ``header_offsets`` int32 ``rows + 1`` into the ``header_count`` header rows,
    whose keys are Arrow ``string`` (``header_key_offsets``/``header_key_data``) and values Arrow ``binary``
    (``header_value_*``).  Per batch (as in :class:`RecordColumns`): ``batch_starts``,
    ``batch_timestamp_types``, ``batch_leader_epochs``.  :meth:`to_lists` gives the rows as Python lists.
    """

    __slots__ = (
        "batch_leader_epochs",
        "batch_starts",
        "batch_timestamp_types",
        "header_count",
        "header_key_data",
        "header_key_offsets",
        "header_offsets",
        "header_value_data",
        "header_value_offsets",
        "header_value_validity",
        "key_data",
        "key_offsets",
        "key_validity",
        "offsets",
        "rows",
        "timestamps",
        "value_data",
        "value_offsets",
        "value_validity",
    )  # fmt: skip

    rows: int
    offsets: Buffer
    timestamps: Buffer
    key_validity: bytes | None
    key_offsets: Buffer
    key_data: Buffer
    value_validity: bytes | None
    value_offsets: Buffer
    value_data: Buffer
    header_offsets: Buffer
    header_count: int
    header_key_offsets: Buffer
    header_key_data: Buffer
    header_value_validity: bytes | None
    header_value_offsets: Buffer
    header_value_data: Buffer

    def __init__(self, parts: tuple[Any, ...] | None = None) -> None:
        if parts is None:
            parts = lists_to_buffers([], [], [], [], [])
        (self.rows, self.offsets, self.timestamps, self.key_validity, self.key_offsets, self.key_data,
         self.value_validity, self.value_offsets, self.value_data, self.header_offsets, self.header_count,
         self.header_key_offsets, self.header_key_data, self.header_value_validity, self.header_value_offsets,
         self.header_value_data) = parts  # fmt: skip
        self.batch_starts: list[int] = []
        self.batch_timestamp_types: list[int] = []
        self.batch_leader_epochs: list[int | None] = []

    def __len__(self) -> int:
        return self.rows

    def parts(self) -> tuple[Any, ...]:
        """Every buffer and count, in ``__init__``'s order (tests compare implementations with it)."""
        return tuple(getattr(self, name) for name in _PARTS)

    def offset_at(self, row: int) -> int:
        """The offset of one row (no list is built)."""
        value: int = memoryview(self.offsets).cast("q")[row]
        return value

    def to_lists(
        self, start: int = 0, stop: int | None = None, columns: Sequence[str] = _LIST_COLUMNS
    ) -> RecordColumns:
        """Rows ``start:stop`` as a :class:`RecordColumns` of Python lists (its per-batch lists left empty;
        only the named ``columns`` filled)."""
        stop = self.rows if stop is None else stop
        out = RecordColumns()
        if stop <= start:
            return out
        if "offsets" in columns:
            out.offsets = memoryview(self.offsets).cast("q")[start:stop].tolist()
        if "timestamps" in columns:
            out.timestamps = memoryview(self.timestamps).cast("q")[start:stop].tolist()
        if "keys" in columns:
            out.keys = _binary_list(self.key_validity, self.key_offsets, self.key_data, start, stop)
        if "values" in columns:
            out.values = _binary_list(self.value_validity, self.value_offsets, self.value_data, start, stop)
        if "headers" not in columns:
            return out
        hrows = memoryview(self.header_offsets).cast("i")
        first, last = hrows[start], hrows[stop]
        if first == last:
            out.headers = [()] * (stop - start)
            return out
        hkeys = [
            bytes(k or b"").decode("utf-8")
            for k in _binary_list(None, self.header_key_offsets, self.header_key_data, first, last)
        ]
        hvalues = _binary_list(
            self.header_value_validity, self.header_value_offsets, self.header_value_data, first, last
        )
        pairs = list(zip(hkeys, hvalues, strict=True))
        out.headers = [
            tuple(pairs[hrows[i] - first : hrows[i + 1] - first]) if hrows[i] != hrows[i + 1] else ()
            for i in range(start, stop)
        ]
        return out


def _binary_list(
    validity: bytes | None, offsets: Buffer, data: Buffer, start: int, stop: int
) -> list[bytes | None]:
    if IMPLEMENTATION == "c" and _fast is not None:
        result: list[bytes | None] = _fast.binary_list(validity, offsets, data, start, stop)
        return result
    return _py_binary_list(validity, offsets, data, start, stop)


def _py_binary_list(
    validity: bytes | None, offsets: Buffer, data: Buffer, start: int, stop: int
) -> list[bytes | None]:
    ends = memoryview(offsets).cast("i")[start : stop + 1].tolist()
    base = ends[0]
    raw = bytes(data[base : ends[-1]])
    n = stop - start
    if validity is None:
        return [raw[ends[i] - base : ends[i + 1] - base] for i in range(n)]
    return [
        raw[ends[i] - base : ends[i + 1] - base]
        if validity[(start + i) >> 3] >> ((start + i) & 7) & 1
        else None
        for i in range(n)
    ]


def _binary_buffers(items: Sequence[bytes | None]) -> tuple[bytes | None, bytes, bytes]:
    """(validity or None, int32 offsets, data) of an Arrow binary array."""
    items = items if isinstance(items, list) else list(items)
    n = len(items)
    nulls = items.count(None)
    validity: bytes | None = None
    if not nulls:
        parts: list[bytes] = [item for item in items if item is not None]
        lens: list[int] = list(map(len, parts))
    elif nulls == n:
        lens, parts, validity = [0] * n, [], bytes((n + 7) >> 3)
    else:
        lens = [0 if item is None else len(item) for item in items]
        parts = [item for item in items if item is not None]
        bits = bytearray((n + 7) >> 3)
        for i, item in enumerate(items):
            if item is not None:
                bits[i >> 3] |= 1 << (i & 7)
        validity = bytes(bits)
    if sum(lens) > 0x7FFF_FFFF:
        raise OverflowError(_BIG_DATA)
    ends = array("i", [0])
    ends.extend(accumulate(lens))
    return validity, ends.tobytes(), b"".join(parts)


def lists_to_buffers(
    offsets: Sequence[int],
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Sequence[Header]],
) -> tuple[Any, ...]:
    """:class:`ColumnBuffers` parts from Python lists (the pure-Python builder; the same bytes as C's)."""
    kvalid, koffs, kdata = _binary_buffers(keys)
    vvalid, voffs, vdata = _binary_buffers(values)
    flat: list[Header] = []
    if any(headers):
        hrows = array("i", [0])
        for row in headers:
            if row:
                flat.extend(row)
            hrows.append(len(flat))
    else:
        hrows = array("i", bytes(4 * (len(headers) + 1)))
    _, hkoffs, hkdata = _binary_buffers([k.encode("utf-8") for k, _ in flat])
    hvvalid, hvoffs, hvdata = _binary_buffers([v for _, v in flat])
    rows = (len(offsets), array("q", offsets).tobytes(), array("q", timestamps).tobytes())
    return (*rows, kvalid, koffs, kdata, vvalid, voffs, vdata, hrows.tobytes(), len(flat), hkoffs, hkdata,
            hvvalid, hvoffs, hvdata)  # fmt: skip


class _PyColumnBuilder:
    """The pure-Python ``_fastrecords.ColumnBuilder``: rows kept as lists, turned into buffers by finish()."""

    __slots__ = ("cols", "sizes")

    def __init__(self) -> None:
        self.cols = RecordColumns()
        self.sizes = [0, 0, 0, 0]  # bytes of keys, values, header keys, header values

    @property
    def rows(self) -> int:
        return len(self.cols.offsets)

    def truncate(self, rows: int) -> None:
        self.cols._truncate(rows, len(self.cols.batch_starts))

    def finish(self) -> tuple[Any, ...]:
        c = self.cols
        return lists_to_buffers(c.offsets, c.timestamps, c.keys, c.values, c.headers)


@dataclass(slots=True)
class _Outcome:
    topic: str
    partition: int
    #: The offset to fetch next: one past the last complete batch consumed (control, aborted and batches below
    #: ``start_offset`` included), or ``start_offset`` when no batch was complete.
    next_offset: int
    #: Partition leader epoch of the last complete batch consumed (``None``: none, or the batch had -1).
    last_epoch: int | None = None
    #: The error that stopped decoding at the batch at ``next_offset`` (the records before it are good).
    error: CorruptRecordError | None = None
    batches: int = 0  # complete batches consumed (all kinds)
    control_batches: int = 0
    aborted_batches: int = 0  # transactional data batches dropped as aborted (read_committed)
    aborted_records: int = 0
    bytes_consumed: int = 0  # size of the complete batches consumed
    partial_bytes: int = 0  # size of the ignored incomplete trailing batch (0 when none)

    def raise_error(self) -> None:
        """Raise :attr:`error` if decoding stopped at a bad batch."""
        if self.error is not None:
            raise self.error


@dataclass(slots=True)
class DecodedRecords(_Outcome):
    """The result of :func:`decode_batches`: records as :class:`ConsumerRecord` objects."""

    records: list[ConsumerRecord] = field(default_factory=list)


@dataclass(slots=True)
class DecodedColumns(_Outcome):
    """The result of :func:`decode_batches_columnar`: records as :class:`RecordColumns`."""

    columns: RecordColumns = field(default_factory=RecordColumns)


@dataclass(slots=True)
class DecodedBuffers(_Outcome):
    """The result of :func:`decode_batches_buffers`: records as :class:`ColumnBuffers`."""

    columns: ColumnBuffers = field(default_factory=ColumnBuffers)


class _Malformed(ValueError):
    """A structural problem inside a batch (turned into CorruptRecordError by the batch loop)."""


# ---------------------------------------------------------------------------------------------------------
# varints

# zig-zag value of every one-byte varint
_ZZ1: Final[tuple[int, ...]] = tuple((b >> 1) ^ -(b & 1) for b in range(128))


def _read_zz(buf: bytes, pos: int) -> tuple[int, int]:
    """Read a zig-zag varint/varlong at ``pos``; return (value, new position)."""
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            result &= 0xFFFF_FFFF_FFFF_FFFF  # a 10th byte's bits above bit 63 are dropped (as Java does)
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise _Malformed("varint is longer than 10 bytes")


def _zz2_table() -> tuple[int, ...]:
    # zig-zag value of every two-byte varint (first byte b >= 0x80, second c < 0x80) at index b + (c << 7)
    table = [0] * (0x100 + (0x7F << 7))
    for b in range(0x80, 0x100):
        for c in range(0x80):
            u = (b & 0x7F) | (c << 7)
            table[b + (c << 7)] = (u >> 1) ^ -(u & 1)
    return tuple(table)


_ZZ2: Final[tuple[int, ...]] = _zz2_table()


def _read_headers(buf: bytes, pos: int) -> tuple[tuple[Header, ...], int]:
    count, pos = _read_zz(buf, pos)
    if count < 0:
        raise _Malformed(f"invalid negative header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        klen, pos = _read_zz(buf, pos)
        if klen < 0:
            raise _Malformed(f"invalid header key length {klen}")
        end = pos + klen
        if end > len(buf):
            raise _Malformed("header key extends past the end of the data")
        hkey = buf[pos:end].decode("utf-8")
        pos = end
        vlen, pos = _read_zz(buf, pos)
        if vlen >= 0:
            end = pos + vlen
            if end > len(buf):
                raise _Malformed("header value extends past the end of the data")
            headers.append((hkey, buf[pos:end]))
            pos = end
        elif vlen == -1:
            headers.append((hkey, None))
        else:
            raise _Malformed(f"invalid header value length {vlen}")
    return tuple(headers), pos


def _bad_length(what: str, n: int) -> _Malformed:
    return _Malformed(f"invalid {what} length {n}")


# ConsumerRecord objects are built without calling the dataclass __init__ when its fields are the ones this
# module knows (tests assert that this fast path is active).
_CONSUMER_RECORD_FIELDS: Final = (
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestamp_type",
    "key",
    "value",
    "headers",
    "leader_epoch",
    "serialized_key_size",
    "serialized_value_size",
)
_FAST_NEW: Final = tuple(
    f.name for f in dataclasses.fields(ConsumerRecord)
) == _CONSUMER_RECORD_FIELDS and not hasattr(ConsumerRecord, "__post_init__")

# ---------------------------------------------------------------------------------------------------------
# the hot loops: records of one batch.  One Python parser (_py_records_to_columns, which inlines a fast path
# for one- and two-byte varints; longer ones go through _read_zz); the object and buffer forms are made from
# its lists.


def _py_records_to_objects(
    buf: bytes,
    pos: int,
    count: int,
    base_offset: int,
    base_ts: int,
    ts_type: int,
    epoch: int | None,
    topic: str,
    partition: int,
    out: list[ConsumerRecord],
) -> int:
    """The records of one batch as :class:`ConsumerRecord` objects appended to ``out``: parsed by
    :func:`_py_records_to_columns` (the one Python parser), then made into objects."""
    cols = RecordColumns()
    pos = _py_records_to_columns(buf, pos, count, base_offset, base_ts, cols)
    append = out.append
    make = ConsumerRecord
    rows = zip(cols.offsets, cols.timestamps, cols.keys, cols.values, cols.headers, strict=False)
    if _FAST_NEW:  # object.__new__ + slot stores: ~80 ns/record cheaper than the dataclass __init__
        new = object.__new__
        for offset, ts, key, value, headers in rows:
            rec = new(make)
            rec.topic = topic
            rec.partition = partition
            rec.offset = offset
            rec.timestamp = ts
            rec.timestamp_type = ts_type
            rec.key = key
            rec.value = value
            rec.headers = headers
            rec.leader_epoch = epoch
            rec.serialized_key_size = -1 if key is None else len(key)
            rec.serialized_value_size = -1 if value is None else len(value)
            append(rec)
    else:
        for offset, ts, key, value, headers in rows:
            klen = -1 if key is None else len(key)
            vlen = -1 if value is None else len(value)
            append(make(topic, partition, offset, ts, ts_type, key, value, headers, epoch, klen, vlen))
    return pos


def _py_records_to_columns(
    buf: bytes,
    pos: int,
    count: int,
    base_offset: int,
    base_ts: int,
    cols: RecordColumns,
) -> int:
    zz1 = _ZZ1
    zz2 = _ZZ2
    read_zz = _read_zz
    read_headers = _read_headers
    add_offset = cols.offsets.append
    add_ts = cols.timestamps.append
    add_key = cols.keys.append
    add_value = cols.values.append
    add_headers = cols.headers.append
    for _ in repeat(None, count):
        b = buf[pos]
        if b < 0x80:
            rec_end = pos + 1 + zz1[b]
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 0x80:
                pos += 2
                rec_end = pos + zz2[b + (c << 7)]
            else:
                n, pos = read_zz(buf, pos)
                rec_end = pos + n
        b = buf[pos + 1]
        if b < 0x80:
            ts_delta = zz1[b]
            pos += 2
        else:
            c = buf[pos + 2]
            if c < 0x80:
                ts_delta = zz2[b + (c << 7)]
                pos += 3
            else:
                ts_delta, pos = read_zz(buf, pos + 1)
        b = buf[pos]
        if b < 0x80:
            off_delta = zz1[b]
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 0x80:
                off_delta = zz2[b + (c << 7)]
                pos += 2
            else:
                off_delta, pos = read_zz(buf, pos)
        b = buf[pos]
        if b < 0x80:
            klen = zz1[b]
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 0x80:
                klen = zz2[b + (c << 7)]
                pos += 2
            else:
                klen, pos = read_zz(buf, pos)
        if klen >= 0:
            add_key(buf[pos : pos + klen])
            pos += klen
        elif klen == -1:
            add_key(None)
        else:
            raise _bad_length("key", klen)
        b = buf[pos]
        if b < 0x80:
            vlen = zz1[b]
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 0x80:
                vlen = zz2[b + (c << 7)]
                pos += 2
            else:
                vlen, pos = read_zz(buf, pos)
        if vlen >= 0:
            add_value(buf[pos : pos + vlen])
            pos += vlen
        elif vlen == -1:
            add_value(None)
        else:
            raise _bad_length("value", vlen)
        if buf[pos] == 0:
            add_headers(())
            pos += 1
        else:
            headers, pos = read_headers(buf, pos)
            add_headers(headers)
        if pos != rec_end:
            raise _Malformed(f"record length says it ends at byte {rec_end} but its fields end at byte {pos}")
        add_offset(base_offset + off_delta)
        add_ts(base_ts + ts_delta)
    return pos


def _py_records_to_buffers(
    buf: bytes,
    pos: int,
    count: int,
    base_offset: int,
    base_ts: int,
    ts_override: int | None,
    min_offset: int | None,
    builder: _PyColumnBuilder,
) -> int:
    """``_fastrecords.records_to_buffers`` in Python: the same rows and errors (parse errors first, then an
    offset/timestamp outside int64 -- the first record's, offset before timestamp)."""
    tmp = RecordColumns()
    pos = _py_records_to_columns(buf, pos, count, base_offset, base_ts, tmp)
    offsets, timestamps = tmp.offsets, tmp.timestamps
    if offsets and (
        min(offsets) < _INT64_MIN
        or max(offsets) > _INT64_MAX
        or (ts_override is None and (min(timestamps) < _INT64_MIN or max(timestamps) > _INT64_MAX))
    ):
        for o, t in zip(offsets, timestamps, strict=True):  # the first record outside, as C reports it
            if not _INT64_MIN <= o <= _INT64_MAX:
                raise _Malformed("a record's offset is outside the int64 range")
            if ts_override is None and not _INT64_MIN <= t <= _INT64_MAX:
                raise _Malformed("a record's timestamp is outside the int64 range")
    if ts_override is not None:
        tmp.timestamps = [ts_override] * len(tmp.timestamps)
    if min_offset is not None:
        tmp._keep_from_offset(0, min_offset)
    cols = builder.cols
    sizes = builder.sizes
    sizes[0] += sum(map(len, filter(None, tmp.keys)))
    sizes[1] += sum(map(len, filter(None, tmp.values)))
    for row in filter(None, tmp.headers):
        for hkey, hvalue in row:
            sizes[2] += len(hkey.encode("utf-8"))
            sizes[3] += len(hvalue or b"")
    if max(sizes) > 0x7FFF_FFFF:  # as the C builder: Arrow binary arrays have int32 offsets
        raise OverflowError(_BIG_DATA)
    cols.offsets.extend(tmp.offsets)
    cols.timestamps.extend(tmp.timestamps)
    cols.keys.extend(tmp.keys)
    cols.values.extend(tmp.values)
    cols.headers.extend(tmp.headers)
    return pos


# ---------------------------------------------------------------------------------------------------------
# choosing the implementation of the two loops

Implementation = Literal["c", "python"]

#: The active implementation of the per-record loop: ``"c"`` (the ``_fastrecords`` extension) or ``"python"``.
IMPLEMENTATION: Implementation = "python"
_records_to_objects = _py_records_to_objects
_records_to_columns = _py_records_to_columns
_records_to_buffers: Any = _py_records_to_buffers
_new_builder: Any = _PyColumnBuilder


def _load_extension() -> tuple[Any, Any, str | None]:
    """(the ``_fastrecords`` module or None, the same configured for decoding or None, why decoding in C is
    not available)."""
    try:
        module = importlib.import_module("kafka_handoff.protocol._fastrecords")
    except ImportError as exc:
        return None, None, f"{type(exc).__name__}: {exc}"
    if not _FAST_NEW:
        return module, None, "ConsumerRecord's fields are not the ones records.py knows"
    try:
        module.configure(ConsumerRecord, _Malformed, True)
    except TypeError as exc:
        return module, None, f"{type(exc).__name__}: {exc}"
    return module, module, None


_extension, _fast, C_UNAVAILABLE_REASON = _load_extension()


def _use_implementation(name: Implementation) -> None:
    """Switch the per-record loop (tests and benchmarks; not thread-safe against running decodes)."""
    global IMPLEMENTATION, _records_to_objects, _records_to_columns, _records_to_buffers, _new_builder
    if name == "c":
        if _fast is None:
            raise RuntimeError(f"the C record decoder is not available ({C_UNAVAILABLE_REASON})")
        _records_to_objects = _fast.records_to_objects
        _records_to_columns = _fast.records_to_columns
        _records_to_buffers = _fast.records_to_buffers
        _new_builder = _fast.ColumnBuilder
    elif name == "python":
        _records_to_objects = _py_records_to_objects
        _records_to_columns = _py_records_to_columns
        _records_to_buffers = _py_records_to_buffers
        _new_builder = _PyColumnBuilder
    else:
        raise ValueError(f"unknown implementation {name!r} (allowed: 'c', 'python')")
    IMPLEMENTATION = name


def set_gc_tracking(track: bool) -> None:
    """Whether records built by the C loop are tracked by the cyclic GC (default: not tracked; see above)."""
    if _fast is not None:
        _fast.configure(ConsumerRecord, _Malformed, not track)


def available_implementations() -> list[Implementation]:
    """The implementations that can be selected here (``"python"`` always)."""
    return ["c", "python"] if _fast is not None else ["python"]


_PURE_PYTHON_REQUESTED: Final = pure_python_requested()
if _fast is not None and not _PURE_PYTHON_REQUESTED:
    _use_implementation("c")


# ---------------------------------------------------------------------------------------------------------
# the batch loop


def parse_control_key(key: bytes | None) -> ControlType | int:
    """The type of a control record from its key (version int16, type int16); unknown types as plain ints."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise _Malformed(f"control record key of {0 if key is None else len(key)} bytes (needs 4)")
    _version, ctype = _CONTROL_KEY.unpack_from(key)
    try:
        return ControlType(ctype)
    except ValueError:
        return int(ctype)


def _aborted_queue(aborted: Iterable[Any]) -> list[tuple[int, int]]:
    """(first_offset, producer_id) pairs sorted by first offset, from tuples or objects with attributes."""
    pairs: list[tuple[int, int]] = []
    for item in aborted:
        if isinstance(item, tuple):
            pid, first = item[0], item[1]
        else:
            pid, first = item.producer_id, item.first_offset
        pairs.append((int(first), int(pid)))
    pairs.sort()
    return pairs


def _decode(
    data: bytes | bytearray | memoryview | None,
    out: DecodedRecords | DecodedColumns | DecodedBuffers,
    check_crcs: bool,
    read_committed: bool,
    aborted_transactions: Iterable[Any],
    start_offset: int,
    max_decompressed: int,
) -> None:
    buf = data if type(data) is bytes else bytes(data or b"")
    view = memoryview(buf)
    n = len(buf)
    topic = out.topic
    partition = out.partition
    objects = isinstance(out, DecodedRecords)
    records = out.records if isinstance(out, DecodedRecords) else []
    cols = out.columns if isinstance(out, DecodedColumns) else RecordColumns()
    builder = _new_builder() if isinstance(out, DecodedBuffers) else None
    per_batch = out.columns if isinstance(out, DecodedBuffers) else cols
    aborted = _aborted_queue(aborted_transactions) if read_committed else []
    next_aborted = 0
    active_aborted: set[int] = set()
    next_offset = start_offset
    last_epoch = out.last_epoch
    batches = control_batches = aborted_batches = aborted_records = 0
    unpack_header = _BATCH_HEADER.unpack_from
    unpack_prefix = _PREFIX.unpack_from
    pos = 0
    error: CorruptRecordError | None = None
    base_offset = start_offset
    while True:
        left = n - pos
        if left < LOG_OVERHEAD:
            out.partial_bytes = left
            break
        base_offset, length = unpack_prefix(buf, pos)
        if length < _MIN_LEGACY_SIZE:
            error = _corrupt(f"record batch size {length} is smaller than the minimum {_MIN_LEGACY_SIZE}",
                             topic, partition, base_offset)  # fmt: skip
            break
        end = pos + LOG_OVERHEAD + length
        if end > n:
            out.partial_bytes = left
            break
        magic = buf[pos + _MAGIC_OFFSET]
        if magic != MAGIC_V2:
            if magic in (0, 1):
                msg = (f"legacy message format (magic {magic}) is not supported; only record batches of "
                       "magic 2 (Kafka 0.11+) can be read")  # fmt: skip
            else:
                msg = f"unknown record batch magic {magic}"
            error = _corrupt(msg, topic, partition, base_offset)
            break
        if length + LOG_OVERHEAD < RECORD_BATCH_OVERHEAD:
            error = _corrupt(f"record batch size {length + LOG_OVERHEAD} is smaller than the minimum "
                             f"{RECORD_BATCH_OVERHEAD}", topic, partition, base_offset)  # fmt: skip
            break
        (_, _, ple, _, crc, attributes, last_delta, base_ts, max_ts, producer_id, _, _, count) = (
            unpack_header(buf, pos)
        )
        if check_crcs:
            actual = crc32c(view[pos + _ATTRIBUTES_OFFSET : end])
            if actual != crc:
                error = _corrupt(f"record batch CRC mismatch (stored 0x{crc:08x}, computed 0x{actual:08x})",
                                 topic, partition, base_offset)  # fmt: skip
                break
        epoch = ple if ple >= 0 else None
        last_offset = base_offset + last_delta
        if count < 0 or last_delta < 0:
            what = f"record count {count}" if count < 0 else f"last offset delta {last_delta}"
            error = _corrupt(f"invalid {what}", topic, partition, base_offset)
            break
        is_control = attributes & ATTR_CONTROL
        skip = is_control
        mark = len(records) if objects else builder.rows if builder is not None else len(cols.offsets)
        mark_batches = len(per_batch.batch_starts)
        try:
            if count == 0 and end - pos != RECORD_BATCH_OVERHEAD:
                # An empty batch has no records section; bytes there are records the count does not cover.
                _decode_batch_records(buf, pos, end, attributes, 0, base_offset, base_ts, RecordColumns(),
                                      max_decompressed)  # fmt: skip
            if read_committed and producer_id >= 0:
                while next_aborted < len(aborted) and aborted[next_aborted][0] <= last_offset:
                    active_aborted.add(aborted[next_aborted][1])
                    next_aborted += 1
                if is_control:
                    if count > 0:
                        tmp = RecordColumns()
                        _decode_batch_records(buf, pos, end, attributes, count, base_offset, base_ts, tmp,
                                              max_decompressed)  # fmt: skip
                        if parse_control_key(tmp.keys[0]) == ControlType.ABORT:
                            active_aborted.discard(producer_id)
                elif attributes & ATTR_TRANSACTIONAL and producer_id in active_aborted:
                    aborted_batches += 1
                    aborted_records += count
                    skip = True
            if is_control:
                control_batches += 1
            elif not skip and last_offset >= start_offset and count:
                ts_type = 1 if attributes & ATTR_TIMESTAMP_TYPE else 0
                if objects:
                    rpos, rbuf = _records_input(buf, pos, end, attributes, max_decompressed)
                    rpos = _records_to_objects(rbuf, rpos, count, base_offset, base_ts, ts_type, epoch, topic,
                                               partition, records)  # fmt: skip
                    _check_end(rpos, rbuf, end, attributes)
                    if ts_type:
                        for i in range(mark, len(records)):
                            records[i].timestamp = max_ts
                    if base_offset < start_offset:
                        records[mark:] = [r for r in records[mark:] if r.offset >= start_offset]
                elif builder is not None:
                    per_batch.batch_starts.append(mark)
                    per_batch.batch_timestamp_types.append(ts_type)
                    per_batch.batch_leader_epochs.append(epoch)
                    rpos, rbuf = _records_input(buf, pos, end, attributes, max_decompressed)
                    override = max_ts if ts_type else None
                    floor = start_offset if base_offset < start_offset else None
                    rpos = _records_to_buffers(
                        rbuf, rpos, count, base_offset, base_ts, override, floor, builder
                    )
                    _check_end(rpos, rbuf, end, attributes)
                else:
                    cols.batch_starts.append(mark)
                    cols.batch_timestamp_types.append(ts_type)
                    cols.batch_leader_epochs.append(epoch)
                    _decode_batch_records(buf, pos, end, attributes, count, base_offset, base_ts, cols,
                                          max_decompressed)  # fmt: skip
                    if ts_type:
                        cols.timestamps[mark:] = [max_ts] * (len(cols.timestamps) - mark)
                    if base_offset < start_offset:
                        cols._keep_from_offset(mark, start_offset)
        except CorruptRecordError as exc:  # decompression failed
            error = _corrupt(str(exc), topic, partition, base_offset, exc)
        except (_Malformed, IndexError, UnicodeDecodeError, struct.error, OverflowError) as exc:
            error = _corrupt(f"malformed record batch: {_describe(exc)}", topic, partition, base_offset, exc)
        if error is not None:
            if objects:
                del records[mark:]
            elif builder is not None:
                builder.truncate(mark)
                del per_batch.batch_starts[mark_batches:], per_batch.batch_timestamp_types[mark_batches:]
                del per_batch.batch_leader_epochs[mark_batches:]
            else:
                cols._truncate(mark, mark_batches)
            break
        batches += 1
        last_epoch = epoch
        if last_offset + 1 > next_offset:
            next_offset = last_offset + 1
        pos = end
    out.next_offset = next_offset
    out.last_epoch = last_epoch
    out.error = error
    out.batches = batches
    out.control_batches = control_batches
    out.aborted_batches = aborted_batches
    out.aborted_records = aborted_records
    out.bytes_consumed = pos
    if builder is not None and isinstance(out, DecodedBuffers):
        finished = ColumnBuffers(builder.finish())
        finished.batch_starts = per_batch.batch_starts
        finished.batch_timestamp_types = per_batch.batch_timestamp_types
        finished.batch_leader_epochs = per_batch.batch_leader_epochs
        out.columns = finished


def _records_input(
    buf: bytes, pos: int, end: int, attributes: int, max_decompressed: int
) -> tuple[int, bytes]:
    """Where the records of the batch at ``pos`` start: (position, buffer), decompressing when needed."""
    codec = attributes & ATTR_COMPRESSION_MASK
    if codec == 0:
        return pos + RECORD_BATCH_OVERHEAD, buf
    if codec > 4:
        raise _Malformed(f"unknown compression codec id {codec}")
    return 0, decompress(codec, memoryview(buf)[pos + RECORD_BATCH_OVERHEAD : end], max_decompressed)


def _check_end(rpos: int, rbuf: bytes, end: int, attributes: int) -> None:
    expected = end if attributes & ATTR_COMPRESSION_MASK == 0 else len(rbuf)
    if rpos != expected:
        if rpos < expected:
            raise _Malformed(f"{expected - rpos} bytes left after the declared record count")
        raise _Malformed("records extend past the end of the batch")


def _decode_batch_records(
    buf: bytes, pos: int, end: int, attributes: int, count: int, base_offset: int, base_ts: int,
    cols: RecordColumns, max_decompressed: int,
) -> None:  # fmt: skip
    rpos, rbuf = _records_input(buf, pos, end, attributes, max_decompressed)
    rpos = _records_to_columns(rbuf, rpos, count, base_offset, base_ts, cols)
    _check_end(rpos, rbuf, end, attributes)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, IndexError):
        return "a record extends past the end of the data"
    return str(exc)


def _corrupt(
    message: str, topic: str, partition: int, offset: int, cause: BaseException | None = None
) -> CorruptRecordError:
    err = CorruptRecordError(f"{message} (topic {topic}, partition {partition}, batch at offset {offset})",
                             topic, partition, offset)  # fmt: skip
    if cause is not None:
        err.__cause__ = cause
    return err


def decode_batches(
    data: bytes | bytearray | memoryview | None,
    *,
    topic: str,
    partition: int,
    check_crcs: bool = True,
    read_committed: bool = False,
    aborted_transactions: Iterable[Any] = (),
    start_offset: int = 0,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> DecodedRecords:
    """Decode one partition's fetched ``records`` bytes into :class:`ConsumerRecord` objects.

    Records below ``start_offset`` (the fetch offset; a batch may begin before it) are dropped; control
    batches are never returned.  With ``read_committed``, transactional batches of the producers listed in
    ``aborted_transactions`` -- ``(producer_id, first_offset)`` pairs or objects with those attributes (kio's
    ``AbortedTransaction``) -- are dropped until that producer's ABORT marker.  A truncated trailing batch is
    ignored; ``None`` (a fetch partition without records) decodes to nothing.  A bad batch stops decoding: see
    :class:`DecodedRecords` ``error``; so does a compressed batch whose records would decompress to more than
    ``max_decompressed_bytes`` (the consumer's ``max.decompressed.batch.bytes``), before more than that is
    allocated.
    """
    result = DecodedRecords(topic, partition, start_offset)
    _decode(data, result, check_crcs, read_committed, aborted_transactions, start_offset,
            max_decompressed_bytes)  # fmt: skip
    return result


def decode_batches_columnar(
    data: bytes | bytearray | memoryview | None,
    *,
    topic: str,
    partition: int,
    check_crcs: bool = True,
    read_committed: bool = False,
    aborted_transactions: Iterable[Any] = (),
    start_offset: int = 0,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> DecodedColumns:
    """Like :func:`decode_batches`, but the records come as parallel lists (:class:`RecordColumns`)."""
    result = DecodedColumns(topic, partition, start_offset)
    _decode(data, result, check_crcs, read_committed, aborted_transactions, start_offset,
            max_decompressed_bytes)  # fmt: skip
    return result


def decode_batches_buffers(
    data: bytes | bytearray | memoryview | None,
    *,
    topic: str,
    partition: int,
    check_crcs: bool = True,
    read_committed: bool = False,
    aborted_transactions: Iterable[Any] = (),
    start_offset: int = 0,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> DecodedBuffers:
    """Like :func:`decode_batches`, but the records come as Arrow-layout buffers (:class:`ColumnBuffers`),
    with no Python object per record.  Offsets and timestamps must fit int64 (a record whose offset or
    timestamp does not is reported as a malformed batch), and one call's keys, values and header data must
    each stay under 2 GiB (Arrow binary arrays have int32 offsets)."""
    result = DecodedBuffers(topic, partition, start_offset)
    _decode(data, result, check_crcs, read_committed, aborted_transactions, start_offset,
            max_decompressed_bytes)  # fmt: skip
    return result


# ---------------------------------------------------------------------------------------------------------
# encoding


# The one encoder of v2 record batches: the producer's batches (``producer/batch.py``) and
# :class:`RecordBatchBuilder` (tests, benchmarks, the transaction markers below) both go through
# :func:`encode_records` (the records section), :func:`assemble_batch` (header and CRC) and
# :func:`restamp_batch` (new producer fields or attribute bits on an encoded batch).

CRC_OFFSET: Final = 17
"""Byte offset of the CRC in a v2 batch; the CRC covers the bytes from :data:`ATTRIBUTES_OFFSET` on."""
ATTRIBUTES_OFFSET: Final = _ATTRIBUTES_OFFSET
"""Byte offset of the attributes (int16) in a v2 batch."""
PRODUCER_OFFSET: Final = 43
"""Byte offset of producer id (int64), producer epoch (int16) and base sequence (int32) in a v2 batch."""
_PRODUCER: Final = struct.Struct(">qhi")
_CRC: Final = struct.Struct(">I")
_ATTRIBUTES: Final = struct.Struct(">h")

EncodeEntry = tuple[Any, ...]
"""An entry :func:`encode_records` takes: ``(key, value, timestamp, headers, ...)`` -- key and value bytes or
None, headers None or a sequence of ``(str, bytes | None)`` tuples; further items are ignored (the producer
keeps its future and callback there)."""


def _encode_headers(headers: Sequence[Header]) -> bytes:
    zz = ZIGZAG_CACHE
    half = ZIGZAG_CACHE_HALF
    n = len(headers)
    parts = [zz[n + half] if n < half else zigzag_varint(n)]
    for hkey, hvalue in headers:
        kb = hkey.encode("utf-8")
        parts.append(zz[len(kb) + half] if len(kb) < half else zigzag_varint(len(kb)))
        parts.append(kb)
        if hvalue is None:
            parts.append(b"\x01")
        else:
            hv = bytes(hvalue)
            parts.append(zz[len(hv) + half] if len(hv) < half else zigzag_varint(len(hv)))
            parts.append(hv)
    return b"".join(parts)


def _py_encode_records(
    entries: Sequence[EncodeEntry], base_timestamp: int, first_offset_delta: int = 0
) -> tuple[bytes, int]:
    """The records section (uncompressed) of a batch whose offset deltas are ``first_offset_delta``, +1, +2,
    ..., and the largest timestamp (-1 without records)."""
    zz = ZIGZAG_CACHE
    half = ZIGZAG_CACHE_HALF
    top = 2 * half
    parts: list[bytes] = []
    extend = parts.extend
    max_ts = -1
    for delta, entry in enumerate(entries, first_offset_delta):
        key = entry[0]
        value = entry[1]
        ts = entry[2]
        headers = entry[3]
        if ts > max_ts:
            max_ts = ts
        d = ts - base_timestamp + half
        ts_v = zz[d] if 0 <= d < top else zigzag_varint(d - half)
        off_v = zz[delta + half] if delta < half else zigzag_varint(delta)
        if key is None:
            key_v = b"\x01"
            key = b""
        else:
            n = len(key)
            key_v = zz[n + half] if n < half else zigzag_varint(n)
        if value is None:
            value_v = b"\x01"
            value = b""
        else:
            n = len(value)
            value_v = zz[n + half] if n < half else zigzag_varint(n)
        hdr = b"\x00" if not headers else _encode_headers(headers)
        body = 1 + len(ts_v) + len(off_v) + len(key_v) + len(key) + len(value_v) + len(value) + len(hdr)
        extend(
            (
                zz[body + half] if body < half else zigzag_varint(body),
                b"\x00",
                ts_v,
                off_v,
                key_v,
                key,
                value_v,
                value,
                hdr,
            )
        )
    return b"".join(parts), max_ts


#: The active implementation of :func:`encode_records`: ``"c"`` (``_fastrecords``) or ``"python"``.
ENCODER_IMPLEMENTATION: Final[Implementation] = (
    "c" if _extension is not None and not _PURE_PYTHON_REQUESTED else "python"
)
encode_records: Callable[..., tuple[bytes, int]] = (
    _extension.encode_records if ENCODER_IMPLEMENTATION == "c" else _py_encode_records
)
"""``encode_records(entries, base_timestamp, first_offset_delta=0) -> (records bytes, max timestamp)``: the
records section of a batch from a *list* of :data:`EncodeEntry` tuples (the C loop when the extension is
built -- the same bytes -- else the Python one)."""


def assemble_batch(
    records: bytes,
    *,
    count: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One v2 batch: the 61-byte header (with its CRC) and ``records``, the records section as
    :func:`encode_records` made it, compressed already when ``attributes`` names a codec."""
    tail = _TAIL.pack(
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    crc = crc32c(records, crc32c(tail))
    length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(records)
    return _HEAD.pack(base_offset, length, partition_leader_epoch, MAGIC_V2, crc) + tail + records


def restamp_batch(
    payload: bytes, *, producer: tuple[int, int, int] | None = None, set_attributes: int = 0
) -> bytes:
    """``payload`` (one encoded batch) with new ``producer`` fields (id, epoch, base sequence) and/or the
    attribute bits ``set_attributes`` added, and its CRC recomputed (Java's ``ProducerBatch`` does the same
    after an epoch bump)."""
    buf = bytearray(payload)
    if producer is not None:
        _PRODUCER.pack_into(buf, PRODUCER_OFFSET, *producer)
    if set_attributes:
        (attributes,) = _ATTRIBUTES.unpack_from(buf, ATTRIBUTES_OFFSET)
        _ATTRIBUTES.pack_into(buf, ATTRIBUTES_OFFSET, attributes | set_attributes)
    _CRC.pack_into(buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


class RecordBatchBuilder:
    """Builds one v2 record batch with the same layout as Java's ``MemoryRecordsBuilder`` (and the same bytes
    as the producer's batches, through the same :func:`encode_records`).

    ``append`` serializes each record at once (so :attr:`size_in_bytes` is exact for uncompressed data);
    ``build`` compresses the records section when a codec is set and fills in the CRC.  The base timestamp is
    the first record's timestamp; offset deltas count up from 0 unless given.
    """

    __slots__ = (
        "_base_ts",
        "_count",
        "_last_delta",
        "_max_ts",
        "_next_delta",
        "_parts",
        "_size",
        "base_offset",
        "base_sequence",
        "compression",
        "compression_level",
        "is_control",
        "log_append_time",
        "partition_leader_epoch",
        "producer_epoch",
        "producer_id",
        "timestamp_type",
        "transactional",
    )

    def __init__(
        self,
        *,
        base_offset: int = 0,
        compression: CompressionType | int = CompressionType.NONE,
        compression_level: int | None = None,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = -1,
        timestamp_type: int = TimestampType.CREATE_TIME,
        log_append_time: int | None = None,
    ) -> None:
        if int(compression) not in (0, 1, 2, 3, 4):
            raise ValueError(f"unknown compression codec id {int(compression)} (allowed: 0-4)")
        if timestamp_type not in (0, 1):
            raise ValueError(
                f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), not {timestamp_type}"
            )
        self.base_offset = base_offset
        self.compression = CompressionType(compression)
        self.compression_level = compression_level
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.transactional = transactional
        self.is_control = is_control
        self.partition_leader_epoch = partition_leader_epoch
        self.timestamp_type = timestamp_type
        self.log_append_time = log_append_time
        self._parts: list[bytes] = []
        self._size = RECORD_BATCH_OVERHEAD
        self._count = 0
        self._next_delta = 0
        self._last_delta = -1
        self._base_ts: int | None = None
        self._max_ts = -1

    @property
    def count(self) -> int:
        return self._count

    @property
    def size_in_bytes(self) -> int:
        """Size of the batch so far if built uncompressed."""
        return self._size

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[Header] = (),
        offset_delta: int | None = None,
    ) -> int:
        """Serialize one record; return its offset delta."""
        base_ts = self._base_ts
        if base_ts is None:
            base_ts = self._base_ts = timestamp
        if offset_delta is None:
            offset_delta = self._next_delta
        elif offset_delta < self._next_delta:
            raise ValueError(
                f"offset delta {offset_delta} is not above the previous one ({self._next_delta - 1})"
            )
        record, _ = encode_records([(key, value, timestamp, headers or None)], base_ts, offset_delta)
        if timestamp > self._max_ts:
            self._max_ts = timestamp
        self._next_delta = offset_delta + 1
        self._last_delta = offset_delta
        self._count += 1
        self._parts.append(record)
        self._size += len(record)
        return offset_delta

    def build(self, last_offset_delta: int | None = None) -> bytes:
        """The batch bytes.  ``last_offset_delta`` overrides the last appended delta (for empty batches)."""
        payload = b"".join(self._parts)
        if self.compression != CompressionType.NONE:
            payload = compress(self.compression, payload, self.compression_level)
        attributes = int(self.compression)
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            attributes |= ATTR_TIMESTAMP_TYPE
        if self.transactional:
            attributes |= ATTR_TRANSACTIONAL
        if self.is_control:
            attributes |= ATTR_CONTROL
        max_ts = self._max_ts if self._count else -1
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME and self.log_append_time is not None:
            max_ts = self.log_append_time
        if last_offset_delta is None:
            last_offset_delta = self._last_delta if self._count else 0
        return assemble_batch(
            payload,
            count=self._count,
            attributes=attributes,
            last_offset_delta=last_offset_delta,
            base_timestamp=self._base_ts if self._base_ts is not None else -1,
            max_timestamp=max_ts,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            base_offset=self.base_offset,
            partition_leader_epoch=self.partition_leader_epoch,
        )


RecordInput = (
    tuple[bytes | None, bytes | None, int] | tuple[bytes | None, bytes | None, int, Sequence[Header]]
)


def encode_batch(
    records: Iterable[RecordInput],
    base_offset: int = 0,
    compression: CompressionType | int = CompressionType.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type: int = TimestampType.CREATE_TIME,
    *,
    compression_level: int | None = None,
    log_append_time: int | None = None,
) -> bytes:
    """One batch from ``(key, value, timestamp)`` or ``(key, value, timestamp, headers)`` tuples."""
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        compression=compression,
        compression_level=compression_level,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
        is_control=is_control,
        partition_leader_epoch=partition_leader_epoch,
        timestamp_type=timestamp_type,
        log_append_time=log_append_time,
    )
    append = builder.append
    for rec in records:
        if len(rec) == 3:
            append(rec[0], rec[1], rec[2])
        else:
            append(rec[0], rec[1], rec[2], rec[3])
    return builder.build()


def encode_control_batch(
    control_type: ControlType | int,
    *,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    coordinator_epoch: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker batch (transactional + control, one record) as the coordinator writes it."""
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append(
        _CONTROL_KEY.pack(0, int(control_type)), _END_TXN_VALUE.pack(0, coordinator_epoch), timestamp
    )
    return builder.build()
