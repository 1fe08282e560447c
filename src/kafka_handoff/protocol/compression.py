"""Record batch compression codecs (the ``records`` section of a v2 batch), on top of ``cramjam``.

Codec ids are the low three bits of a batch's attributes: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.

What the Java client writes, and what this module writes:

* gzip: a gzip member (RFC 1952).  Decompression accepts concatenated members.
* snappy: Java wraps snappy in the *xerial* stream format -- a 16-byte header (``\\x82SNAPPY\\x00``, version
  int32 BE, compatible-version int32 BE) followed by chunks of (int32 BE compressed length, raw snappy block).
  We write the same (32 KiB chunks, like xerial's default).  On decompression the header is detected;
  without it the data is treated as one raw snappy block (what some non-Java clients write), and Google's
  snappy framing format (``\\xff\\x06\\x00\\x00sNaPpY``) is accepted as well.  Concatenated xerial
  streams are accepted.
* lz4: the LZ4 *frame* format with independent blocks (Java's reader rejects linked blocks) and 64 KiB blocks.
  Java's default level (9) uses lz4's fast compressor; so does ``level=None``.
* zstd: a zstd frame.  Decompression accepts several concatenated frames (also for gzip and lz4).

Every decompression failure raises :class:`~kafka_handoff.errors.CorruptRecordError` (without topic/partition;
the record batch decoder adds those).

Decompression is bounded: :func:`decompress` takes ``max_bytes`` (the consumer's
``max.decompressed.batch.bytes``) and never writes more than that into memory -- a batch that would expand
beyond it (a "zip bomb": zstd reaches ~32,000:1) fails with :class:`CorruptRecordError` after at most
``max_bytes + 1`` bytes were produced.  The codecs write into a fixed output buffer (cramjam's
``decompress_into``; snappy's block lengths are read before any block is decompressed); the first attempt
uses a buffer sized from the input, a batch that outgrows it is decompressed again into a lazily mapped
buffer of the limit.
"""

from __future__ import annotations

import mmap
import struct
import threading
from collections.abc import Callable
from enum import IntEnum
from typing import Any, Final

import cramjam

from kafka_handoff.errors import ConfigError, CorruptRecordError

__all__ = [
    "DEFAULT_LEVELS",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "CompressionType",
    "compress",
    "compression_type_from_name",
    "decompress",
]


class CompressionType(IntEnum):
    """Compression codec ids as stored in bits 0-2 of a record batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def config_name(self) -> str:
        """The value of ``compression.type`` naming this codec (``none``, ``gzip``, ...)."""
        return self.name.lower()


#: Java's default levels (KIP-390: ``compression.gzip.level`` -1 = Deflater's 6, ``compression.lz4.level`` 9,
#: ``compression.zstd.level`` 3).
DEFAULT_LEVELS: Final[dict[CompressionType, int]] = {
    CompressionType.GZIP: 6,
    CompressionType.LZ4: 9,
    CompressionType.ZSTD: 3,
}

#: The default bound of one batch's decompressed records (the consumer's ``max.decompressed.batch.bytes``):
#: 64 MiB, 64 times ``max.partition.fetch.bytes``' default and above ``fetch.max.bytes``' default.
DEFAULT_MAX_DECOMPRESSED_BYTES: Final = 64 * 1024 * 1024

_NAMES: Final[dict[str, CompressionType]] = {c.config_name: c for c in CompressionType}


def compression_type_from_name(name: str, key: str = "compression.type") -> CompressionType:
    """The codec for a ``compression.type`` value; :class:`ConfigError` naming ``key`` when unknown."""
    codec = _NAMES.get(name.strip().lower()) if isinstance(name, str) else None
    if codec is None:
        allowed = ", ".join(_NAMES)
        raise ConfigError(f"Invalid value {name!r} for configuration {key}: allowed values are {allowed}")
    return codec


# ---------------------------------------------------------------------------------------------------------
# snappy (xerial framing)

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_LEN: Final = 16
_XERIAL_BLOCK: Final = 32 * 1024
_GOOGLE_SNAPPY_MAGIC: Final = b"\xff\x06\x00\x00sNaPpY"
_INT32_BE: Final = struct.Struct(">i")


def _snappy_compress_xerial(data: bytes | memoryview) -> bytes:
    mv = memoryview(data)
    parts = [_XERIAL_HEADER]
    pack = _INT32_BE.pack
    compress_raw = cramjam.snappy.compress_raw
    for start in range(0, len(mv), _XERIAL_BLOCK):
        block = bytes(compress_raw(mv[start : start + _XERIAL_BLOCK]))
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes | memoryview, max_bytes: int) -> bytes:
    mv = memoryview(data)
    if bytes(mv[:8]) == XERIAL_MAGIC:
        return _snappy_decompress_xerial(mv, max_bytes)
    if bytes(mv[:10]) == _GOOGLE_SNAPPY_MAGIC:
        return _bounded(cramjam.snappy.decompress_into, mv, max_bytes)
    _check_size(cramjam.snappy.decompress_raw_len(mv), max_bytes)
    return bytes(cramjam.snappy.decompress_raw(mv))


def _snappy_decompress_xerial(mv: memoryview, max_bytes: int) -> bytes:
    _check_size(_xerial_size(mv), max_bytes)
    out: list[bytes] = []
    pos = 0
    end = len(mv)
    decompress_raw = cramjam.snappy.decompress_raw
    unpack_from = _INT32_BE.unpack_from
    while pos < end:
        if bytes(mv[pos : pos + 8]) == XERIAL_MAGIC:  # a (possibly concatenated) stream header
            if end - pos < _XERIAL_HEADER_LEN:
                raise CorruptRecordError("snappy: truncated xerial stream header")
            pos += _XERIAL_HEADER_LEN
            continue
        if end - pos < 4:
            raise CorruptRecordError("snappy: truncated xerial chunk length")
        (size,) = unpack_from(mv, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise CorruptRecordError(
                f"snappy: xerial chunk of {size} bytes exceeds the {end - pos} bytes left"
            )
        out.append(bytes(decompress_raw(mv[pos : pos + size])))
        pos += size
    return b"".join(out)


def _xerial_size(mv: memoryview) -> int:
    """The decompressed size a xerial stream declares (each raw block starts with its length); malformed
    framing is left to the decompression pass that follows, which reports it."""
    total = 0
    pos = 0
    end = len(mv)
    raw_len = cramjam.snappy.decompress_raw_len
    unpack_from = _INT32_BE.unpack_from
    while pos < end:
        if bytes(mv[pos : pos + 8]) == XERIAL_MAGIC:
            pos += _XERIAL_HEADER_LEN
            continue
        if end - pos < 4:
            break
        (size,) = unpack_from(mv, pos)
        pos += 4
        if size < 0 or pos + size > end:
            break
        total += raw_len(mv[pos : pos + size])
        pos += size
    return total


# ---------------------------------------------------------------------------------------------------------
# lz4 (frame format, independent blocks)


_LZ4_BLOCK: Final = 64 * 1024
_LZ4_UNCOMPRESSED: Final = 0x80000000
_UINT32_LE: Final = struct.Struct("<I")


def _xxh32_short(data: bytes, seed: int = 0) -> int:
    """xxHash32 of fewer than 16 bytes (the lz4 frame header checksum)."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    h = (seed + p5 + len(data)) & mask
    i = 0
    while i + 4 <= len(data):
        h = (rotl((h + int.from_bytes(data[i : i + 4], "little") * p3) & mask, 17) * p4) & mask
        i += 4
    for b in data[i:]:
        h = (rotl((h + b * p5) & mask, 11) * p1) & mask
    h ^= h >> 15
    h = (h * p2) & mask
    h ^= h >> 13
    h = (h * p3) & mask
    h ^= h >> 16
    return h


def _lz4_frame_header() -> bytes:
    """Magic, FLG 0x60 (version 1, independent blocks, no block or content checksum, no content size),
    BD 0x40 (64 KiB blocks) and the header checksum byte: the frame Java's producer writes."""
    descriptor = b"\x60\x40"
    return b"\x04\x22\x4d\x18" + descriptor + bytes([(_xxh32_short(descriptor) >> 8) & 0xFF])


_LZ4_HEADER: Final = _lz4_frame_header()


def _lz4_compress(data: bytes | memoryview, level: int | None) -> bytes:
    # Java: the default level (9) selects lz4's fast compressor; any other level the HC compressor.
    cj_level = 0 if level is None or level == DEFAULT_LEVELS[CompressionType.LZ4] else level
    if cj_level == 0:
        return _lz4_compress_fast(memoryview(data))
    compressor = cramjam.lz4.Compressor(level=cj_level, content_checksum=False, block_linked=False)
    compressor.compress(data)
    return bytes(compressor.finish())


def _lz4_compress_fast(mv: memoryview) -> bytes:
    """An lz4 frame of independent 64 KiB blocks (no checksums), written block by block with
    ``compress_block``, which releases the GIL while it compresses (cramjam's streaming compressor holds it,
    which stalls every other thread of the process, e.g. a consumer's heartbeats, for the whole batch)."""
    parts = [_LZ4_HEADER]
    pack = _UINT32_LE.pack
    compress_block = cramjam.lz4.compress_block
    for start in range(0, len(mv), _LZ4_BLOCK):
        chunk = mv[start : start + _LZ4_BLOCK]
        block = compress_block(chunk, store_size=False)
        if len(block) < len(chunk):
            parts.append(pack(len(block)))
            parts.append(bytes(block))
        else:  # incompressible: stored as is
            parts.append(pack(len(chunk) | _LZ4_UNCOMPRESSED))
            parts.append(bytes(chunk))
    parts.append(b"\0\0\0\0")  # end mark
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------------------
# bounded output

_BUFFER_FULL: Final = "failed to write whole buffer"
"""cramjam's error when ``decompress_into`` runs out of output buffer (``write_all`` on a full slice)."""
_FIRST_GUESS_RATIO: Final = 8
_FIRST_GUESS_MIN: Final = 64 * 1024
_LAZY_BUFFER: Final = 1024 * 1024


_SCRATCH = threading.local()


def _scratch(size: int) -> bytearray:
    """This thread's reusable output buffer, at least ``size`` bytes."""
    buf: bytearray | None = getattr(_SCRATCH, "buf", None)
    if buf is None or len(buf) < size:
        buf = bytearray(size)
        _SCRATCH.buf = buf
    return buf


class _TooLarge(Exception):
    pass


def _check_size(size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise _TooLarge(f"declares {size} bytes")


def _bounded(decompress_into: Callable[[Any, Any], int], data: bytes | memoryview, max_bytes: int) -> bytes:
    """``data`` decompressed into at most ``max_bytes`` bytes of memory; :class:`_TooLarge` beyond."""
    first = max(_FIRST_GUESS_MIN, _FIRST_GUESS_RATIO * len(data))
    if first <= max_bytes:  # most batches fit a buffer a few times their compressed size
        # Up to 1 MiB: this thread's scratch buffer (no allocation, no zeroing per batch); beyond, a mapping
        # whose untouched pages cost nothing.
        mapped = mmap.mmap(-1, first) if first > _LAZY_BUFFER else None
        out = memoryview(mapped) if mapped is not None else memoryview(_scratch(first))[:first]
        try:
            n = decompress_into(data, out)
        except Exception as exc:
            if _BUFFER_FULL not in str(exc):
                raise
        else:
            return bytes(out[:n])
        finally:
            out.release()
            if mapped is not None:
                mapped.close()
    # Pages of an anonymous mapping cost memory only once written: a limit of 64 MiB costs what is produced.
    mapped = mmap.mmap(-1, max_bytes + 1)
    try:
        try:
            n = decompress_into(data, mapped)
        except Exception as exc:
            if _BUFFER_FULL in str(exc):
                raise _TooLarge("does not fit") from None
            raise
        if n > max_bytes:
            raise _TooLarge("does not fit")
        return mapped[:n]
    finally:
        mapped.close()


# ---------------------------------------------------------------------------------------------------------
# public entry points


def _level(codec: CompressionType, level: int | None) -> int:
    return DEFAULT_LEVELS[codec] if level is None else level


def compress(codec: CompressionType | int, data: bytes | memoryview, level: int | None = None) -> bytes:
    """Compress ``data`` (a batch's serialized records) the way the Java producer does.

    ``level=None`` uses Java's default level for the codec (:data:`DEFAULT_LEVELS`).
    """
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        return bytes(cramjam.gzip.compress(data, level=_level(CompressionType.GZIP, level)))
    if codec == CompressionType.SNAPPY:
        return _snappy_compress_xerial(data)
    if codec == CompressionType.LZ4:
        return _lz4_compress(data, level)
    if codec == CompressionType.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=_level(CompressionType.ZSTD, level)))
    raise ValueError(f"unknown compression codec id {int(codec)} (allowed: 0-4)")


def decompress(
    codec: CompressionType | int,
    data: bytes | memoryview,
    max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """Decompress a batch's records section; :class:`CorruptRecordError` when the data is not valid or would
    decompress to more than ``max_bytes`` bytes (no more than ``max_bytes + 1`` bytes are ever produced)."""
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be at least 1, not {max_bytes}")
    try:
        if codec == CompressionType.GZIP:
            return _bounded(cramjam.gzip.decompress_into, data, max_bytes)
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(data, max_bytes)
        if codec == CompressionType.LZ4:
            return _bounded(cramjam.lz4.decompress_into, data, max_bytes)
        if codec == CompressionType.ZSTD:
            return _bounded(cramjam.zstd.decompress_into, data, max_bytes)
        if codec == CompressionType.NONE:
            return bytes(data)
    except CorruptRecordError:
        raise
    except _TooLarge:
        name = CompressionType(codec).config_name
        raise CorruptRecordError(
            f"{name}: the batch's records decompress to more than {max_bytes} bytes "
            "(max.decompressed.batch.bytes); a batch this large is refused as a possible decompression bomb"
        ) from None
    except Exception as exc:  # cramjam.DecompressionError and friends
        name = CompressionType(codec).config_name
        raise CorruptRecordError(f"{name} decompression failed: {exc}") from exc
    raise CorruptRecordError(f"unknown compression codec id {int(codec)} in record batch attributes")
