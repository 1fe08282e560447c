"""The one record batch encoder (``protocol/records.py``) writes the bytes the two encoders it replaced wrote.

Until issue 20 the producer (``producer/batch.py`` + ``_fastencode.c``) and ``RecordBatchBuilder`` each had
their own.  ``record_encoder_golden.json`` holds digests of what the old code wrote for every case below (made
by running this file as a script against the old tree: ``python tests/unit/test_record_encoder.py OUT``); the
cases only use the API that both have.  Uncompressed batches are compared byte for byte (sha256 of the whole
batch); compressed ones by their header fields besides length and CRC plus the decompressed records section,
so that a new version of a compression library does not fail the test (the CRC is checked separately).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_handoff.producer import batch as batch_module
from kafka_handoff.producer.batch import ProducerBatch
from kafka_handoff.producer.transactions import mark_transactional
from kafka_handoff.protocol import records
from kafka_handoff.protocol.compression import CompressionType, decompress
from kafka_handoff.protocol.records import (
    RecordBatchBuilder,
    decode_batches,
    encode_batch,
    encode_control_batch,
    iter_batch_headers,
)
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).with_name("record_encoder_golden.json")
T0 = 1_700_000_000_000
CODECS = (CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4,
          CompressionType.ZSTD)  # fmt: skip

Rec = tuple[bytes | None, bytes | None, int, Sequence[tuple[str, bytes | None]] | None]

RECORD_SETS: dict[str, list[Rec]] = {
    "empty": [],
    "one-null": [(None, None, T0, None)],
    "mixed": [
        (b"k1", b"v1", T0, None),
        (None, b"v2", T0 + 5, [("h", b"x")]),
        (b"", b"", T0 - 3, []),
        (b"k4", None, T0 + 2**40, [("a", None), ("\u00e9t\u00e9", b"\x00\xff"), ("", b"")]),
        (b"k5", b"v" * 9000, T0 - 2**35, [("big", b"h" * 9000)] * 3),
    ],
    "many": [
        (
            None if i % 7 == 0 else str(i).encode(),
            bytes([i % 256]) * (i % 50),
            T0 + (i * 37) % 1000,
            [("n", str(i).encode())] if i % 3 == 0 else None,
        )
        for i in range(300)
    ],
}
State = tuple[int, int, int]
PRODUCER_STATES: dict[str, State] = {"plain": (-1, -1, -1), "idempotent": (4242, 7, 2**31 - 10)}


def _producer_batch(records: list[Rec], codec: CompressionType, state: State, txn: bool) -> bytes:
    batch = ProducerBatch(TopicPartition("t", 0), 0, 1 << 30, 0)
    for key, value, ts, headers in records:
        batch.entries.append((key, value, ts, headers, None, None))
    batch.set_producer_state(*state)
    data = batch.encode(codec, None)
    return mark_transactional(batch) if txn else data


def _builder_batch(records: list[Rec], codec: CompressionType, state: State, txn: bool) -> bytes:
    builder = RecordBatchBuilder(compression=codec, producer_id=state[0], producer_epoch=state[1],
                                 base_sequence=state[2], transactional=txn)  # fmt: skip
    for key, value, ts, headers in records:
        builder.append(key, value, ts, headers or ())
    return builder.build()


def cases() -> Iterator[tuple[str, bytes]]:
    """(name, batch bytes) of every case, from the producer's batches and from the builder."""
    for rname, recs in RECORD_SETS.items():
        for codec in CODECS:
            for sname, state in PRODUCER_STATES.items():
                for txn in (False, True):
                    name = f"{rname}/{codec.name}/{sname}/{'txn' if txn else 'plain'}"
                    yield f"producer:{name}", _producer_batch(recs, codec, state, txn)
                    yield f"builder:{name}", _builder_batch(recs, codec, state, txn)
    # what only the builder does
    mixed = RECORD_SETS["mixed"]
    for codec in CODECS:
        builder = RecordBatchBuilder(base_offset=1000, compression=codec, partition_leader_epoch=12)
        for i, (key, value, ts, headers) in enumerate(mixed):
            builder.append(key, value, ts, headers or (), offset_delta=i * 3 + 1)
        yield f"builder-gaps/{codec.name}", builder.build()
        yield (
            f"log-append-time/{codec.name}",
            encode_batch(
                [(k, v, ts, h or ()) for k, v, ts, h in mixed],
                50,
                codec,
                9,
                1,
                0,
                True,
                False,
                3,
                1,
                log_append_time=T0 + 99,
            ),
        )
    yield "empty-last-delta", RecordBatchBuilder(base_offset=10).build(last_offset_delta=4)
    for ctype in (0, 1):
        yield (
            f"control/{ctype}",
            encode_control_batch(
                ctype,
                base_offset=77,
                producer_id=5,
                producer_epoch=2,
                timestamp=T0,
                coordinator_epoch=3,
                partition_leader_epoch=8,
            ),
        )


def digest(data: bytes) -> dict[str, Any]:
    """What the golden file keeps of one batch (see the module docstring)."""
    (header,) = iter_batch_headers(data)
    if header.compression == CompressionType.NONE:
        return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    fields = header._replace(batch_length=0, crc=0)
    records = decompress(header.compression, data[61:])
    return {"header": list(fields), "records_sha256": hashlib.sha256(records).hexdigest()}


def _golden() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(GOLDEN.read_text())
    return loaded


@pytest.mark.parametrize(("name", "data"), list(cases()), ids=lambda v: v if isinstance(v, str) else "")
def test_same_bytes_as_the_old_encoders(name: str, data: bytes) -> None:
    assert digest(data) == _golden()[name]
    decoded = decode_batches(data, topic="t", partition=0, check_crcs=True)  # the CRC is right
    assert decoded.error is None


def test_producer_and_builder_write_identical_batches() -> None:
    """The producer's batches and the builder's are the same bytes wherever both can make a batch (also
    compressed, where the golden file compares only the decompressed records)."""
    made = dict(cases())
    pairs = [(n, n.replace("producer:", "builder:", 1)) for n in made if n.startswith("producer:")]
    assert len(pairs) == len(RECORD_SETS) * len(CODECS) * len(PRODUCER_STATES) * 2
    for producer, builder in pairs:
        assert made[producer] == made[builder], producer


def test_pure_python_and_c_write_the_same_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    made = dict(cases())
    monkeypatch.setattr(records, "encode_records", records._py_encode_records)
    monkeypatch.setattr(batch_module, "encode_records", records._py_encode_records)
    assert dict(cases()) == made


_C_ENCODE: Any = getattr(records._extension, "encode_records", None)
_header = st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=20))
_entry = st.tuples(
    st.none() | st.binary(max_size=30),
    st.none() | st.binary(max_size=300),
    st.integers(min_value=T0 - 2**40, max_value=T0 + 2**40),
    st.none() | st.lists(_header, max_size=3).map(tuple),
)


@pytest.mark.skipif(_C_ENCODE is None, reason="the C encoder is not built")
@settings(max_examples=150, deadline=None)
@given(entries=st.lists(_entry, max_size=20), first=st.sampled_from([0, 1, 127, 128, 8191, 8192, 2**31 - 30]))
def test_c_and_python_loops_agree_from_any_first_offset_delta(entries: list[Rec], first: int) -> None:
    assert _C_ENCODE(entries, T0, first) == records._py_encode_records(entries, T0, first)


@pytest.mark.skipif(_C_ENCODE is None, reason="the C encoder is not built")
def test_c_loop_rejects_a_bad_first_offset_delta() -> None:
    with pytest.raises(OverflowError):
        _C_ENCODE([(None, b"v", T0, None)], T0, -1)
    with pytest.raises(OverflowError):
        _C_ENCODE([(None, b"v", T0, None)], T0, 2**31)
    with pytest.raises(TypeError, match="2 or 3 arguments"):
        _C_ENCODE([], T0, 0, 0)


def test_restamp_batch_is_a_fresh_encode_with_the_new_fields() -> None:
    recs = [(k, v, ts, h or ()) for k, v, ts, h in RECORD_SETS["mixed"]]
    plain = encode_batch(recs, compression=CompressionType.LZ4)
    restamped = records.restamp_batch(
        plain, producer=(77, 3, 1000), set_attributes=records.ATTR_TRANSACTIONAL
    )
    (header,) = iter_batch_headers(restamped)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 1000)
    assert header.is_transactional and header.compression == CompressionType.LZ4
    assert restamped[61:] == plain[61:]  # the records untouched
    fresh = encode_batch(recs, compression=CompressionType.LZ4, producer_id=77, producer_epoch=3,
                         base_sequence=1000, transactional=True)  # fmt: skip
    assert restamped == fresh  # the CRC too


if __name__ == "__main__":  # write the golden file from the code on PYTHONPATH
    out = {name: digest(data) for name, data in cases()}
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
