"""Record batch codec benchmark: ``python -m kafka_handoff.bench.decode``.

Encodes N records (default 1M, 100-byte values, null keys) into ~16 KB batches, groups the batches into 1 MiB
fetch responses (``max.partition.fetch.bytes``' default), then decodes every response and reports records/s
for the object path (:func:`decode_batches`) and the columnar path (:func:`decode_batches_columnar`), per
codec and for each implementation of the per-record loop (the C extension and pure Python; see
``records.IMPLEMENTATION``).  Encoding throughput is reported too.  Times are process CPU time (best of
``--repeat`` runs), so other load on the machine disturbs them less.  ``--profile`` prints a cProfile of the
object path.

``--arrow`` measures instead what the pipeline worker does with a backlog: ``poll_columns`` (the consumer's
collector, columnar, ``max.poll.records`` 10,000 as the worker's default) over the fetch responses of one
partition, the chunks accumulated per batch (``--batch-records``), each batch's offset range read and the
batch turned into an Arrow table with :func:`~kafka_handoff.pipeline.arrow.chunks_to_table` (needs
pyarrow); records/s over the whole run.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import random
import time
from collections.abc import Callable
from typing import Any

from kafka_handoff.protocol import records
from kafka_handoff.protocol.compression import CompressionType, compression_type_from_name
from kafka_handoff.protocol.records import RecordBatchBuilder, decode_batches, decode_batches_columnar

FETCH_BYTES = 1024 * 1024


def make_values(count: int, size: int, seed: int = 7) -> list[bytes]:
    """Moderately compressible values (words from a small vocabulary), like typical JSON-ish payloads."""
    rng = random.Random(seed)
    words = [bytes(rng.choices(b"abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 9))) for _ in range(512)]
    pool: list[bytes] = []
    for _ in range(1024):
        parts: list[bytes] = []
        n = 0
        while n < size:
            w = rng.choice(words)
            parts.append(w)
            n += len(w) + 1
        pool.append(b" ".join(parts)[:size])
    return [pool[i % len(pool)] for i in range(count)]


def encode(values: list[bytes], codec: CompressionType, batch_bytes: int) -> tuple[list[bytes], float]:
    """(fetch responses, seconds spent encoding)."""
    batches: list[bytes] = []
    t0 = time.process_time()
    builder = RecordBatchBuilder(base_offset=0, compression=codec)
    offset = 0
    ts = 1_700_000_000_000
    for i, value in enumerate(values):
        builder.append(None, value, ts + (i >> 6))
        if builder.size_in_bytes >= batch_bytes:
            batches.append(builder.build())
            offset += builder.count
            builder = RecordBatchBuilder(base_offset=offset, compression=codec)
    if builder.count:
        batches.append(builder.build())
    elapsed = time.process_time() - t0
    responses: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for b in batches:
        if size + len(b) > FETCH_BYTES and current:
            responses.append(b"".join(current))
            current, size = [], 0
        current.append(b)
        size += len(b)
    if current:
        responses.append(b"".join(current))
    return responses, elapsed


def run_decode(responses: list[bytes], fn: Callable[[bytes], int], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.process_time()
        total = 0
        for data in responses:
            total += fn(data)
        best = min(best, time.process_time() - t0)
    return best


def run_arrow(
    responses: list[bytes], max_poll_records: int, batch_records: int, check: bool, list_offsets: bool = False
) -> tuple[float, int]:
    """(CPU seconds, records): responses -> poll_columns -> chunks_to_table, as the pipeline worker does."""
    from kafka_handoff.consumer.collector import Collector
    from kafka_handoff.consumer.fetcher import CompletedFetch, FetchBuffer
    from kafka_handoff.consumer.subscription import SubscriptionState
    from kafka_handoff.pipeline.arrow import chunks_to_table
    from kafka_handoff.types import TopicPartition

    tp = TopicPartition("bench", 0)
    subs = SubscriptionState("earliest")
    subs.assign_from_user([tp])
    subs.seek(tp, int.from_bytes(responses[0][:8], "big"))
    epoch = subs.state(tp).position_epoch
    buffer = FetchBuffer()
    fetches = [CompletedFetch(tp, int.from_bytes(r[:8], "big"), epoch, r) for r in responses]
    collector = Collector(
        subs, buffer, max_poll_records=max_poll_records, check_crcs=check, read_committed=False
    )
    gc.collect()
    t0 = time.process_time()
    total = rows = 0
    acc: dict[TopicPartition, Any] = {}
    pending = 0
    i = 0
    while True:
        if not collector.has_data() and i < len(fetches):
            buffer.add([fetches[i]])
            i += 1
        got = collector.collect(columnar=True)
        for part, chunk in got.items():
            n = len(chunk)
            if part in acc:
                acc[part].extend(chunk)
            else:
                acc[part] = chunk
            pending += n
        if pending >= batch_records or (not got and i >= len(fetches)):
            if pending:
                for chunk in acc.values():  # the batch's offset range, as the worker takes it
                    if list_offsets or not hasattr(chunk, "first_offset"):
                        first, last = chunk.offsets[0], chunk.offsets[-1]
                    else:
                        first, last = chunk.first_offset(), chunk.last_offset()
                    assert first <= last
                table = chunks_to_table(list(acc.values()))
                rows += table.num_rows
                total += pending
            acc, pending = {}, 0
        if not got and i >= len(fetches) and not collector.has_data():
            break
    elapsed = time.process_time() - t0
    assert rows == total
    return elapsed, total


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--batch-bytes", type=int, default=16 * 1024)
    ap.add_argument("--codecs", default="none,lz4,zstd", help="comma-separated: none,gzip,snappy,lz4,zstd")
    ap.add_argument("--repeat", type=int, default=3, help="decode runs per case (best is reported)")
    ap.add_argument("--no-crc", action="store_true", help="decode with check_crcs=False")
    ap.add_argument("--profile", action="store_true", help="cProfile objects (1st codec, 1st --impl)")
    ap.add_argument("--arrow", action="store_true", help="measure poll_columns -> chunks_to_table instead")
    ap.add_argument("--batch-records", type=int, default=100_000, help="--arrow: records per Arrow table")
    ap.add_argument("--max-poll-records", type=int, default=10_000, help="--arrow: max.poll.records")
    ap.add_argument(
        "--list-offsets",
        action="store_true",
        help="--arrow: take each batch's offset range from chunk.offsets (a Python list) instead of "
        "chunk.first_offset()/last_offset()",
    )
    ap.add_argument(
        "--impl",
        default=",".join(records.available_implementations()),
        help="comma-separated implementations of the record loop: c,python (default: all available)",
    )
    args = ap.parse_args(argv)
    impls: list[records.Implementation] = []
    for name in args.impl.split(","):
        if name not in records.available_implementations():
            why = f" -- C extension: {records.C_UNAVAILABLE_REASON}" if records.C_UNAVAILABLE_REASON else ""
            ap.error(f"unknown or unavailable implementation {name!r} "
                     f"(available: {', '.join(records.available_implementations())}){why}")  # fmt: skip
        impls.append("c" if name == "c" else "python")
    active = records.IMPLEMENTATION

    values = make_values(args.records, args.value_size)
    check = not args.no_crc
    if args.arrow:
        main_arrow(args, values, impls, active, check)
        return
    print(
        f"{args.records:,} records x {args.value_size} B values, ~{args.batch_bytes // 1024} KiB batches, "
        f"1 MiB fetch responses, check_crcs={check}"
    )
    if records.C_UNAVAILABLE_REASON:
        print(f"C extension not available: {records.C_UNAVAILABLE_REASON}")
    print(f"{'codec':<8}{'impl':<8}{'bytes':>12}{'encode rec/s':>15}{'objects rec/s':>16}"
          f"{'columnar rec/s':>17}")  # fmt: skip
    for name in args.codecs.split(","):
        codec = compression_type_from_name(name)
        responses, enc_s = encode(values, codec, args.batch_bytes)
        nbytes = sum(len(r) for r in responses)

        def objects(data: bytes) -> int:
            res = decode_batches(data, topic="t", partition=0, check_crcs=check)
            res.raise_error()
            return len(res.records)

        def columnar(data: bytes) -> int:
            res = decode_batches_columnar(data, topic="t", partition=0, check_crcs=check)
            res.raise_error()
            return len(res.columns)

        n = args.records
        for impl in impls:
            records._use_implementation(impl)
            try:
                assert sum(objects(r) for r in responses) == n
                obj_s = run_decode(responses, objects, args.repeat)
                col_s = run_decode(responses, columnar, args.repeat)
            finally:
                records._use_implementation(active)
            print(f"{name:<8}{impl:<8}{nbytes:>12,}{n / enc_s:>15,.0f}{n / obj_s:>16,.0f}{n / col_s:>17,.0f}")
        if args.profile:
            args.profile = False
            print(f"cProfile of the object path ({impls[0]} record loop):")
            records._use_implementation(impls[0])
            prof = cProfile.Profile()
            prof.enable()
            for r in responses:
                objects(r)
            prof.disable()
            records._use_implementation(active)
            pstats.Stats(prof).sort_stats("tottime").print_stats(8)


def main_arrow(
    args: argparse.Namespace,
    values: list[bytes],
    impls: list[records.Implementation],
    active: Any,
    check: bool,
) -> None:
    print(
        f"poll_columns -> chunks_to_table: {args.records:,} records x {args.value_size} B values, "
        f"~{args.batch_bytes // 1024} KiB batches, 1 MiB fetch responses, max.poll.records "
        f"{args.max_poll_records:,}, {args.batch_records:,} records per table, check_crcs={check}"
    )
    print(f"{'codec':<8}{'impl':<8}{'bytes':>12}{'arrow rec/s':>15}")
    for name in args.codecs.split(","):
        codec = compression_type_from_name(name)
        responses, _ = encode(values, codec, args.batch_bytes)
        nbytes = sum(len(r) for r in responses)
        for impl in impls:
            records._use_implementation(impl)
            try:
                best = float("inf")
                for _ in range(args.repeat):
                    secs, n = run_arrow(
                        responses, args.max_poll_records, args.batch_records, check, args.list_offsets
                    )
                    assert n == args.records, n
                    best = min(best, secs)
            finally:
                records._use_implementation(active)
            print(f"{name:<8}{impl:<8}{nbytes:>12,}{args.records / best:>15,.0f}")


if __name__ == "__main__":
    main()
