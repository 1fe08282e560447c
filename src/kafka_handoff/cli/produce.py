"""``handoff produce -t TOPIC [FILE...]``: write records from stdin or files, like kcat's producer mode.

One record per line (``-D`` another delimiter, e.g. ``-D ''`` for a whole file as one record).  ``-K :``
splits each line into key and value at the first ``:``.  ``--format json`` reads JSON lines
``{"key": ..., "value": ..., "headers": {"k": "v"} | [["k", "v"]], "partition": N, "timestamp": MS}``
(strings as they are; objects and numbers as JSON text); ``--base64`` decodes keys, values and header
values from base64 (binary data).  ``-H k=v`` adds a header to every record, ``-p N`` picks the partition.

The producer is idempotent by default (``-X enable.idempotence=false`` to turn it off).  A progress line
with the rate goes to stderr; the first failed delivery stops the command, which exits 1 saying why.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

from kafka_handoff.cli.command_config import add_command_config_arg

__all__ = ["ProduceInput", "parse_records", "register"]


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "produce",
        help="produce records from stdin or files (delimiters, headers, JSON lines, base64)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="read these files (default: stdin; - is stdin)")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument(
        "--bootstrap-servers",
        "-b",
        default=None,
        metavar="HOST:PORT[,...]",
        help="brokers (default: the --command-config file's, $HANDOFF_BOOTSTRAP, the broker `handoff broker "
        "start` started here, or 127.0.0.1:9092)",
    )
    add_command_config_arg(p)
    p.add_argument("--format", choices=("text", "json"), default="text", help="text lines or JSON lines")
    p.add_argument(
        "-D", "--delimiter", default="\n", help="record delimiter (default: newline; '' = one record)"
    )
    p.add_argument("-K", "--key-delimiter", default=None, help="split key and value at the first DELIM")
    p.add_argument("-H", "--header", action="append", default=[], metavar="KEY=VALUE", help="on every record")
    p.add_argument("-p", "--partition", type=int, default=None)
    p.add_argument("--base64", action="store_true", help="keys, values and header values are base64")
    p.add_argument("--rate", type=float, default=None, help="at most this many records per second")
    p.add_argument("--no-progress", action="store_true", help="no progress line")
    p.add_argument(
        "-X", dest="extra", action="append", default=[], metavar="KEY=VALUE", help="extra producer config"
    )
    p.set_defaults(func=run)


class ProduceInput(ValueError):
    """A record that cannot be read: names where (file and record number) and why."""


def _decode(text: str | None, b64: bool, where: str) -> bytes | None:
    if text is None:
        return None
    if not b64:
        return text.encode("utf-8")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ProduceInput(f"{where}: not valid base64") from None


def _json_field(value: Any, b64: bool, where: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return _decode(value, b64, where)
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _chunks(stream: IO[str], delimiter: str) -> Iterator[str]:
    if delimiter == "":
        yield stream.read()
        return
    if delimiter == "\n":
        for line in stream:
            yield line[:-1] if line.endswith("\n") else line
        return
    pending = ""
    while block := stream.read(65536):
        pending += block
        *done, pending = pending.split(delimiter)
        yield from done
    if pending:
        yield pending


def parse_records(
    stream: IO[str], name: str, args: argparse.Namespace
) -> Iterator[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int | None, int | None]]:
    """``(key, value, headers, partition, timestamp)`` of each record of ``stream`` (``name`` for errors)."""
    fixed_headers: list[tuple[str, bytes]] = []
    for item in args.header:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise ProduceInput(f"-H {item!r}: expected KEY=VALUE")
        fixed_headers.append((k, v.encode("utf-8")))
    for number, chunk in enumerate(_chunks(stream, args.delimiter), 1):
        where = f"{name}: record {number}"
        if args.format == "json":
            if not chunk.strip():
                continue
            try:
                obj = json.loads(chunk)
            except ValueError as exc:
                raise ProduceInput(f"{where}: not JSON ({exc})") from None
            if not isinstance(obj, dict) or not set(obj) <= {
                "key",
                "value",
                "headers",
                "partition",
                "timestamp",
            }:
                raise ProduceInput(f'{where}: expected an object with "key", "value", "headers", "partition"')
            raw_headers = obj.get("headers") or []
            pairs = list(raw_headers.items()) if isinstance(raw_headers, dict) else list(raw_headers)
            headers = list(fixed_headers)
            for pair in pairs:
                if not isinstance(pair, list | tuple) or len(pair) != 2 or not isinstance(pair[0], str):
                    raise ProduceInput(f"{where}: headers must be an object or [[key, value], ...]")
                headers.append((pair[0], _json_field(pair[1], args.base64, where) or b""))
            partition = obj.get("partition", args.partition)
            timestamp = obj.get("timestamp")
            if partition is not None and not isinstance(partition, int):
                raise ProduceInput(f"{where}: partition must be an integer")
            if timestamp is not None and not isinstance(timestamp, int):
                raise ProduceInput(f"{where}: timestamp must be an integer (ms)")
            yield (
                _json_field(obj.get("key"), args.base64, where),
                _json_field(obj.get("value"), args.base64, where),
                headers,
                partition,
                timestamp,
            )
            continue
        if args.delimiter == "\n" and chunk == "" and args.key_delimiter is None:
            continue  # blank lines are not records
        key_text: str | None = None
        value_text = chunk
        if args.key_delimiter is not None:
            key_text, sep, value_text = chunk.partition(args.key_delimiter)
            if not sep:
                raise ProduceInput(f"{where}: no key delimiter {args.key_delimiter!r}")
        yield (
            _decode(key_text, args.base64, where),
            _decode(value_text, args.base64, where),
            list(fixed_headers),
            args.partition,
            None,
        )


def run(args: argparse.Namespace) -> int:
    from kafka_handoff.cli.topics import connection_config
    from kafka_handoff.errors import KafkaError
    from kafka_handoff.producer import Producer

    def fail(message: str, status: int = 1) -> int:
        print(f"handoff produce: {message}", file=sys.stderr)
        return status

    try:
        config = connection_config(args)
    except (KafkaError, ValueError) as exc:
        return fail(str(exc))
    config.setdefault("enable.idempotence", True)
    config.setdefault("linger.ms", 5)
    for item in args.extra:
        key, sep, value = item.partition("=")
        if not sep:
            return fail(f"-X {item!r} is not KEY=VALUE", 2)
        config[key] = value
    try:
        producer = Producer(config)
    except (KafkaError, ValueError) as exc:
        return fail(str(exc), 2)

    failures: list[BaseException] = []

    def on_delivery(_md: Any, exc: BaseException | None) -> None:
        if exc is not None and not failures:
            failures.append(exc)

    sent = nbytes = 0
    began = time.monotonic()
    last_progress = began
    interval = 1.0 / args.rate if args.rate else 0.0
    progress = not args.no_progress and sys.stderr.isatty()
    try:
        for name in args.files or ["-"]:
            stream: IO[str] = sys.stdin if name == "-" else open(name, encoding="utf-8", newline="")  # noqa: SIM115
            try:
                for key, value, headers, partition, timestamp in parse_records(stream, name, args):
                    if failures:
                        break
                    if interval:
                        delay = began + sent * interval - time.monotonic()
                        if delay > 0:
                            time.sleep(delay)
                    producer.send(
                        args.topic, value, key=key, partition=partition, headers=headers or None,
                        timestamp=timestamp, callback=on_delivery,
                    )  # fmt: skip
                    sent += 1
                    nbytes += len(value or b"") + len(key or b"")
                    now = time.monotonic()
                    if progress and now - last_progress >= 1.0:
                        last_progress = now
                        rate = sent / max(1e-9, now - began)
                        print(f"\r{sent:,} records, {rate:,.0f} records/s", end="", file=sys.stderr)
            finally:
                if stream is not sys.stdin:
                    stream.close()
            if failures:
                break
        if not failures:
            producer.flush(120)
    except ProduceInput as exc:
        producer.close(30)
        return fail(f"{exc} (records before it were sent)")
    except OSError as exc:
        producer.close(30)
        return fail(f"cannot read {exc.filename}: {exc.strerror}")
    except KafkaError as exc:
        producer.close(5)
        return fail(str(exc))
    except KeyboardInterrupt:
        producer.close(5)
        raise
    producer.close(5 if failures else 30)
    if progress:
        print(file=sys.stderr)
    if failures:
        return fail(f"stopped after {sent:,} record(s) at the first failed delivery: {failures[0]}")
    elapsed = max(1e-9, time.monotonic() - began)
    print(
        f"produced {sent:,} records ({nbytes / 1e6:,.2f} MB) to {args.topic} in {elapsed:.1f}s: "
        f"{sent / elapsed:,.0f} records/s",
        file=sys.stderr,
    )
    return 0
