"""The body of a Produce request (v3-v12), written directly instead of through kio's generic writer.

Building kio entities for each request and walking them with kio's generic writer cost more than
everything else the network thread does per request (about 0.3 ms for a request of a few batches); the
layout of a Produce request is simple, so the sender writes it itself and hands the network client a
:class:`~kafka_handoff.protocol.wire.EncodedBody`.  :func:`kafka_handoff.protocol.wire.build_request` turns
such a body back into kio's entity (the unit tests compare the two).

Layout (``ProduceRequest.json``): ``transactional_id`` nullable string, ``acks`` int16, ``timeout_ms``
int32, then the topics, each a name and its partitions, each an index (int32) and the records (nullable
bytes).  v9+ is flexible: compact strings/arrays/bytes (unsigned varint length + 1) and an empty tagged
field section after each partition, each topic and the body.  v13 names topics by id (KIP-516) and is not
written here (:data:`MAX_VERSION`).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Final

from kafka_handoff.protocol.varint import uvarint

__all__ = ["MAX_VERSION", "MIN_VERSION", "encode_produce_body"]

MIN_VERSION: Final = 3
MAX_VERSION: Final = 12

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_ACKS_TIMEOUT: Final = struct.Struct(">hi")
_INDEX_LEN: Final = struct.Struct(">ii")  # partition index, records length (non-flexible)


def encode_produce_body(
    version: int,
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    topics: Mapping[str, Sequence[tuple[int, bytes]]],
) -> bytes:
    """The request body (after the request header) of Produce ``version`` (3-12)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce v{version} is not supported here (v{MIN_VERSION}-v{MAX_VERSION})")
    parts: list[bytes] = []
    add = parts.append
    tid = None if transactional_id is None else transactional_id.encode("utf-8")
    if version >= 9:
        uv = uvarint
        add(b"\0" if tid is None else uv(len(tid) + 1) + tid)
        add(_ACKS_TIMEOUT.pack(acks, timeout_ms))
        add(uv(len(topics) + 1))
        i32 = _I32.pack
        for name, partitions in topics.items():
            raw = name.encode("utf-8")
            add(uv(len(raw) + 1))
            add(raw)
            add(uv(len(partitions) + 1))
            for index, records in partitions:
                add(i32(index))
                add(uv(len(records) + 1))
                add(records)
                add(b"\0")
            add(b"\0")
        add(b"\0")
    else:
        add(_I16.pack(-1) if tid is None else _I16.pack(len(tid)) + tid)
        add(_ACKS_TIMEOUT.pack(acks, timeout_ms))
        add(_I32.pack(len(topics)))
        index_len = _INDEX_LEN.pack
        for name, partitions in topics.items():
            raw = name.encode("utf-8")
            add(_I16.pack(len(raw)))
            add(raw)
            add(_I32.pack(len(partitions)))
            for index, records in partitions:
                add(index_len(index, len(records)))
                add(records)
    return b"".join(parts)
