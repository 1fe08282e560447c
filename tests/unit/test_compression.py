"""Compression codecs for record batches: round trips, the exact framings Java writes and reads (xerial
snappy, LZ4 frames with independent blocks), multi-frame input, and clear errors for corrupt data."""

from __future__ import annotations

import gzip
import os
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_handoff.errors import ConfigError, CorruptRecordError
from kafka_handoff.protocol.compression import (
    DEFAULT_LEVELS,
    CompressionType,
    compress,
    compression_type_from_name,
    decompress,
)

pytestmark = pytest.mark.unit

CODECS = [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD]


def _sample(size: int) -> bytes:
    # half compressible text, half random bytes
    text = (b"the quick brown fox jumps over the lazy dog " * (size // 40 + 1))[: size // 2]
    return text + os.urandom(size - len(text))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.config_name)
@pytest.mark.parametrize("size", [0, 1, 100, 32 * 1024, 32 * 1024 + 1, 64 * 1024 + 7, 300_000])
def test_round_trip(codec: CompressionType, size: int) -> None:
    data = _sample(size)
    assert decompress(codec, compress(codec, data)) == data


@settings(max_examples=50, deadline=None)
@given(data=st.binary(max_size=5000), codec=st.sampled_from(CODECS))
def test_round_trip_property(data: bytes, codec: CompressionType) -> None:
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(packed)) == data


def test_none_is_identity() -> None:
    assert compress(CompressionType.NONE, b"abc") == b"abc"
    assert decompress(CompressionType.NONE, memoryview(b"abc")) == b"abc"


def test_snappy_writes_xerial_framing_like_java() -> None:
    data = _sample(70_000)  # three 32 KiB chunks
    packed = compress(CompressionType.SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, chunks = 16, []
    while pos < len(packed):
        (size,) = struct.unpack_from(">i", packed, pos)
        chunks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + size])))
        pos += 4 + size
    assert pos == len(packed)
    assert [len(c) for c in chunks] == [32768, 32768, 70_000 - 65536]
    assert b"".join(chunks) == data


def test_snappy_reads_raw_xerial_concatenated_and_google_framed() -> None:
    data = _sample(5000)
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(CompressionType.SNAPPY, raw) == data
    xerial = compress(CompressionType.SNAPPY, data)
    assert decompress(CompressionType.SNAPPY, xerial + xerial) == data + data
    google = bytes(cramjam.snappy.compress(data))
    assert google.startswith(b"\xff\x06\x00\x00sNaPpY")
    assert decompress(CompressionType.SNAPPY, google) == data


def test_lz4_frame_has_independent_64k_blocks() -> None:
    data = _sample(200_000)
    packed = compress(CompressionType.LZ4, data)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # frame magic 0x184D2204 little-endian
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # block independence: Java's reader rejects dependent blocks
    assert not flg & 0x08  # no content size
    assert bd == 0x40  # 64 KiB maximum block size, as Java writes
    assert decompress(CompressionType.LZ4, packed) == data


def test_lz4_java_default_level_is_the_fast_compressor() -> None:
    data = _sample(50_000)
    assert compress(CompressionType.LZ4, data) == compress(
        CompressionType.LZ4, data, DEFAULT_LEVELS[CompressionType.LZ4]
    )
    hc = compress(CompressionType.LZ4, data, 12)
    assert decompress(CompressionType.LZ4, hc) == data


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD], ids=str)
def test_multi_frame_streams_decompress_completely(codec: CompressionType) -> None:
    a, b, c = _sample(1000), _sample(70_000), b"tail"
    packed = compress(codec, a) + compress(codec, b) + compress(codec, c)
    assert decompress(codec, packed) == a + b + c


def test_gzip_output_is_standard_gzip() -> None:
    data = _sample(3000)
    assert gzip.decompress(compress(CompressionType.GZIP, data)) == data
    assert decompress(CompressionType.GZIP, gzip.compress(data)) == data


def test_zstd_streaming_frames_without_content_size() -> None:
    # zstd-jni's ZstdOutputStream (what Java uses) writes frames without the content size
    data = _sample(100_000)
    comp = cramjam.zstd.Compressor()
    comp.compress(data)
    assert decompress(CompressionType.ZSTD, bytes(comp.finish())) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.config_name)
def test_corrupt_input_raises_corrupt_record_error(codec: CompressionType) -> None:
    good = compress(codec, _sample(5000))
    for bad in (b"definitely not compressed data", good[: len(good) // 2]):
        with pytest.raises(CorruptRecordError, match=codec.config_name):
            decompress(codec, bad)


def test_xerial_chunk_length_past_end_is_corrupt() -> None:
    bad = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", 1000) + b"xx"
    with pytest.raises(CorruptRecordError, match="xerial chunk"):
        decompress(CompressionType.SNAPPY, bad)


def test_unknown_codec_id() -> None:
    with pytest.raises(CorruptRecordError, match="codec id 5"):
        decompress(5, b"x")
    with pytest.raises(ValueError, match="codec id 6"):
        compress(6, b"x")


def test_compression_type_from_name() -> None:
    assert compression_type_from_name("lz4") is CompressionType.LZ4
    assert compression_type_from_name(" ZSTD ") is CompressionType.ZSTD
    assert [c.config_name for c in CompressionType] == ["none", "gzip", "snappy", "lz4", "zstd"]
    with pytest.raises(ConfigError, match=r"compression\.type.*none, gzip, snappy, lz4, zstd"):
        compression_type_from_name("brotli")
