"""Decompression is bounded (issue 34 item 3): a small compressed batch whose records expand beyond
``max.decompressed.batch.bytes`` (a "zip bomb") is refused with a CorruptRecordError naming topic, partition
and offset, in every codec and every decode form, before more than the limit is produced; batches within the
limit decode as before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cramjam
import pytest

from kafka_handoff.config import parse_consumer_config
from kafka_handoff.errors import CorruptRecordError
from kafka_handoff.protocol import records as records_module
from kafka_handoff.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    CompressionType,
    compress,
    decompress,
)
from kafka_handoff.protocol.records import (
    decode_batches,
    decode_batches_buffers,
    decode_batches_columnar,
    encode_batch,
)

pytestmark = pytest.mark.unit

CODECS = [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD]
DECODERS: list[Callable[..., Any]] = [decode_batches, decode_batches_columnar, decode_batches_buffers]


@pytest.fixture(params=records_module.available_implementations())
def implementation(request: pytest.FixtureRequest) -> Any:
    before = records_module.IMPLEMENTATION
    records_module._use_implementation(request.param)
    yield request.param
    records_module._use_implementation(before)


def _bomb(codec: CompressionType, values: int, size: int, base_offset: int = 0) -> bytes:
    value = bytes(size)
    return encode_batch([(None, value, 1_000)] * values, base_offset=base_offset, compression=codec)


def test_default_limit_is_64_mib_and_a_consumer_setting() -> None:
    assert DEFAULT_MAX_DECOMPRESSED_BYTES == 64 * 1024 * 1024
    cfg = parse_consumer_config({"bootstrap.servers": "localhost:9092"})
    assert cfg.get("max.decompressed.batch.bytes") == DEFAULT_MAX_DECOMPRESSED_BYTES


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.config_name)
@pytest.mark.parametrize("decoder", DECODERS, ids=lambda d: d.__name__)
def test_batch_beyond_the_limit_is_a_corrupt_record_error_naming_where(
    implementation: str, codec: CompressionType, decoder: Callable[..., Any]
) -> None:
    good = encode_batch([(None, b"fine", 1_000)], base_offset=40, compression=codec)
    bomb = _bomb(codec, values=4, size=256 * 1024, base_offset=41)  # ~1 MiB of zeros
    assert len(bomb) < 256 * 1024
    result = decoder(good + bomb, topic="t", partition=3, start_offset=40, max_decompressed_bytes=512 * 1024)
    assert len(result.records if hasattr(result, "records") else result.columns) == 1  # the batch before it
    error = result.error
    assert isinstance(error, CorruptRecordError)
    assert (error.topic, error.partition, error.offset) == ("t", 3, 41)
    assert "topic t, partition 3, batch at offset 41" in str(error)
    assert "more than 524288 bytes" in str(error)
    assert "max.decompressed.batch.bytes" in str(error)
    assert result.next_offset == 41
    # Within the limit the same batch decodes.
    ok = decoder(bomb, topic="t", partition=3, start_offset=41, max_decompressed_bytes=2 * 1024 * 1024)
    assert ok.error is None
    assert ok.next_offset == 45


def test_default_limit_refuses_a_zstd_batch_of_100_mib_of_zeros(implementation: str) -> None:
    # 100 MiB of zeros in one record compresses to a few KiB; without a bound it is decoded (and allocated).
    bomb = _bomb(CompressionType.ZSTD, values=1, size=100 * 1024 * 1024)
    assert len(bomb) < 64 * 1024
    result = decode_batches(bomb, topic="bombs", partition=0)
    assert isinstance(result.error, CorruptRecordError)
    assert "topic bombs, partition 0, batch at offset 0" in str(result.error)
    assert result.records == []


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.config_name)
def test_decompress_exactly_at_the_limit_passes_and_one_byte_more_fails(codec: CompressionType) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    packed = compress(codec, data)
    assert decompress(codec, packed, max_bytes=len(data)) == data
    with pytest.raises(CorruptRecordError, match="more than 1048575 bytes"):
        decompress(codec, packed, max_bytes=len(data) - 1)


@pytest.mark.parametrize(
    "packed",
    [
        bytes(cramjam.snappy.compress(bytes(2 * 1024 * 1024))),  # Google framing
        bytes(cramjam.snappy.compress_raw(bytes(2 * 1024 * 1024))),  # one raw block
    ],
    ids=["framed", "raw"],
)
def test_snappy_other_framings_are_bounded(packed: bytes) -> None:
    with pytest.raises(CorruptRecordError, match="more than 1048576 bytes"):
        decompress(CompressionType.SNAPPY, packed, max_bytes=1024 * 1024)
    assert len(decompress(CompressionType.SNAPPY, packed, max_bytes=2 * 1024 * 1024)) == 2 * 1024 * 1024


def test_corrupt_data_is_still_reported_as_corrupt_not_as_too_large() -> None:
    with pytest.raises(CorruptRecordError, match="zstd decompression failed"):
        decompress(CompressionType.ZSTD, b"not a zstd frame at all" * 10, max_bytes=1024)
