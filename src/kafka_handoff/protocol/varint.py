"""Variable-length integer encoders: Kafka's (and protobuf's) unsigned varint and Kafka's zig-zag varint.

Pure functions, the one copy the record batch encoder (``records.py``), the Produce request body
(``producer/produce_request.py``) and the OTLP metrics encoder (``otlp.py``) use.  Decoding stays beside each
decoder (its fast paths are inlined there).
"""

from __future__ import annotations

from typing import Final

__all__ = ["ZIGZAG_CACHE", "ZIGZAG_CACHE_HALF", "uvarint", "zigzag_varint"]


def uvarint(value: int) -> bytes:
    """``value`` (>= 0) as an unsigned varint: 7 bits a byte, least significant first, high bit = more."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def zigzag_varint(value: int) -> bytes:
    """``value`` (an int64) as Kafka's signed varint/varlong: zig-zag mapped, then an unsigned varint."""
    return uvarint(((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF)


ZIGZAG_CACHE_HALF: Final = 1 << 13
"""Every value whose zig-zag varint takes at most two bytes is in :data:`ZIGZAG_CACHE`."""
ZIGZAG_CACHE: Final[tuple[bytes, ...]] = tuple(
    zigzag_varint(v) for v in range(-ZIGZAG_CACHE_HALF, ZIGZAG_CACHE_HALF)
)
"""``zigzag_varint(v)`` at index ``v + ZIGZAG_CACHE_HALF``."""
