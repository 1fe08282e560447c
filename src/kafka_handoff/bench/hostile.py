"""``handoff bench hostile``: what a hostile peer costs a consumer: peak RSS, and the error the application
saw.

Three cases, each in a process of its own (its peak RSS is the consumer's alone):

* ``zstd-bomb``: a consumer with the default settings reads a topic holding one zstd batch of
  ``--bomb-mib`` MiB of zeros (a few KiB on the wire; produced first, by another process, through a private
  dev broker or ``--bootstrap-servers``).  Bounded: the batch is refused once it expands past
  ``max.decompressed.batch.bytes`` (64 MiB), with a ``CorruptRecordError`` naming topic, partition and
  offset.
* ``oversized-frame``: a PLAINTEXT consumer pointed at a peer that answers like a TLS listener (a TLS
  alert, whose first bytes read as a 352 MB frame size).  Bounded: the frame is refused before anything is
  allocated, with an ``SslError`` asking "is this a TLS port?".
* ``slow-drip-oidc``: a SASL/OAUTHBEARER consumer whose OIDC token endpoint sends one byte every 50 ms,
  forever.  Bounded: the token request fails at its deadline (``sasl.login.connect.timeout.ms`` +
  ``sasl.login.read.timeout.ms``, set to 2 s + 2 s here) and ``poll()`` raises an ``AuthenticationError``.

Each case reports the consumer process's peak RSS, its RSS before the consumer was created, the seconds until
the application saw the error, and the error.  The JSON goes to ``--out``/hostile.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["CASES", "main"]

CASES = ("zstd-bomb", "oversized-frame", "slow-drip-oidc")
_TLS_ALERT = bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32])
_MIB = 1024 * 1024


def _rss_mib() -> float:
    """Peak RSS of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _current_rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / _MIB


class _Peer:
    """A listening socket whose connections run ``serve(sock)`` on threads (the hostile side)."""

    def __init__(self, serve: Any) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        self._serve = serve
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._run, args=(sock,), daemon=True).start()

    def _run(self, sock: socket.socket) -> None:
        try:
            sock.settimeout(60)
            self._serve(sock)
        except OSError:
            pass
        finally:
            sock.close()


def _read_request(sock: socket.socket) -> tuple[int, int, int]:
    def exact(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    size = struct.unpack(">i", exact(4))[0]
    body = exact(size)
    api_key, version, cid = struct.unpack(">hhi", body[:8])
    return api_key, version, cid


def _poll_for_error(consumer: Any, limit_s: float) -> tuple[BaseException | None, float]:
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        try:
            consumer.poll(0.2)
        except Exception as exc:
            return exc, time.monotonic() - start
    return None, time.monotonic() - start


# ------------------------------------------------------------------------------------------------- cases
def _case_zstd_bomb(args: argparse.Namespace) -> dict[str, Any]:
    from kafka_handoff.consumer import Consumer
    from kafka_handoff.types import TopicPartition

    before = _current_rss_mib()
    tp = TopicPartition(args.topic, 0)
    with Consumer({"bootstrap.servers": args.bootstrap_servers, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([tp])
        error, seconds = _poll_for_error(consumer, args.limit_s)
    return {"rss_before_mib": before, "error": error, "seconds": seconds}


def _case_oversized_frame(args: argparse.Namespace) -> dict[str, Any]:
    from kafka_handoff.consumer import Consumer
    from kafka_handoff.types import TopicPartition

    def tls_listener(sock: socket.socket) -> None:
        _read_request(sock)  # the client's ApiVersions, which a TLS server reads as a bad ClientHello
        sock.sendall(_TLS_ALERT)

    peer = _Peer(tls_listener)
    before = _current_rss_mib()
    config = {"bootstrap.servers": f"127.0.0.1:{peer.port}", "security.protocol": "PLAINTEXT"}
    with Consumer(config) as consumer:
        consumer.assign([TopicPartition("t", 0)])
        error, seconds = _poll_for_error(consumer, args.limit_s)
    return {"rss_before_mib": before, "error": error, "seconds": seconds}


def _case_slow_drip_oidc(args: argparse.Namespace) -> dict[str, Any]:
    from kafka_handoff.consumer import Consumer
    from kafka_handoff.protocol import wire
    from kafka_handoff.types import TopicPartition

    stop = threading.Event()

    def broker(sock: socket.socket) -> None:  # answers ApiVersions (SASL offered), then waits
        api_key, version, cid = _read_request(sock)
        apis = [
            {"api_key": k, "min_version": 0, "max_version": v}
            for k, v in ((18, 3), (17, 1), (36, 2), (3, 12), (1, 12))
        ]
        frame = wire.encode_response(
            wire.build_response(api_key, version, {"error_code": 0, "throttle_time": 0, "api_keys": apis}),
            cid,
        )
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        stop.wait()

    def token_endpoint(sock: socket.socket) -> None:
        sock.recv(65536)
        sock.sendall(b"HTTP/1.1 200 OK\r\n")
        while not stop.wait(0.05):
            sock.sendall(b"X")

    kafka = _Peer(broker)
    idp = _Peer(token_endpoint)
    before = _current_rss_mib()
    config = {
        "bootstrap.servers": f"127.0.0.1:{kafka.port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": f"http://127.0.0.1:{idp.port}/token",
        "sasl.oauthbearer.token.endpoint.allow.http": True,
        "sasl.oauthbearer.client.id": "bench",
        "sasl.oauthbearer.client.secret": "bench-secret",
        "sasl.login.connect.timeout.ms": 2000,
        "sasl.login.read.timeout.ms": 2000,
    }
    try:
        with Consumer(config) as consumer:
            consumer.assign([TopicPartition("t", 0)])
            error, seconds = _poll_for_error(consumer, args.limit_s)
    finally:
        stop.set()
    return {"rss_before_mib": before, "error": error, "seconds": seconds}


_RUNNERS = {
    "zstd-bomb": _case_zstd_bomb,
    "oversized-frame": _case_oversized_frame,
    "slow-drip-oidc": _case_slow_drip_oidc,
}


def _child(args: argparse.Namespace) -> int:
    result = _RUNNERS[args.case](args)
    error = result.pop("error")
    result.update(
        case=args.case,
        peak_rss_mib=round(_rss_mib(), 1),
        rss_before_mib=round(result["rss_before_mib"], 1),
        seconds=round(result["seconds"], 2),
        error_type=type(error).__name__ if error is not None else None,
        error=str(error) if error is not None else None,
    )
    print(json.dumps(result))
    return 0


# -------------------------------------------------------------------------------------------------- parent
def _produce_bomb(bootstrap: str, topic: str, bomb_mib: int) -> None:
    """One zstd batch of ``bomb_mib`` MiB of zeros (records of up to 16 MiB), produced by a child process."""
    code = f"""
from kafka_handoff.admin import AdminClient, NewTopic
from kafka_handoff.producer import Producer
admin = AdminClient({{"bootstrap.servers": {bootstrap!r}}})
admin.create_topics([NewTopic({topic!r}, 1, 1)])
admin.close()
size = {bomb_mib} * 1024 * 1024
record = min(size, 16 * 1024 * 1024)
zeros = bytes(record)
config = {{"bootstrap.servers": {bootstrap!r}, "compression.type": "zstd", "linger.ms": 600000,
          "batch.size": size + (1 << 20), "max.request.size": size + (1 << 20),
          "buffer.memory": 2 * size + (32 << 20)}}
with Producer(config) as producer:
    for _ in range(size // record):
        producer.send({topic!r}, zeros, partition=0)
    producer.flush(120)
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)


def _run_case(case: str, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "kafka_handoff.bench.hostile",
        "--child",
        case,
        "--limit-s",
        str(args.limit_s),
    ]
    out = subprocess.run(cmd + extra, capture_output=True, text=True, timeout=args.limit_s + 120)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"case": case, "failed": f"exit {out.returncode}: {out.stderr.strip()[-800:]}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated: {', '.join(CASES)}")
    ap.add_argument("--bomb-mib", type=int, default=256, help="zstd-bomb: MiB of zeros in the batch")
    ap.add_argument("--limit-s", type=float, default=60.0, help="how long a case waits for the error")
    ap.add_argument("--bootstrap-servers", default=None, help="zstd-bomb: an existing broker")
    ap.add_argument("--out", type=Path, default=Path("bench-results"))
    ap.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    ap.add_argument("--topic", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        args.case = args.child
        return _child(args)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        print(f"unknown case(s) {', '.join(unknown)} (allowed: {', '.join(CASES)})", file=sys.stderr)
        return 2
    from kafka_handoff.bench.runs import private_broker, progress

    results: list[dict[str, Any]] = []
    for case in cases:
        progress(f"case {case}")
        if case == "zstd-bomb":
            with private_broker(args.bootstrap_servers, None) as (bootstrap, _cluster):
                topic = f"hostile-bomb-{int(time.time())}"
                _produce_bomb(bootstrap, topic, args.bomb_mib)
                extra = ["--bootstrap-servers", bootstrap, "--topic", topic]
                result = _run_case(case, args, extra)
                result["bomb_mib"] = args.bomb_mib
        else:
            result = _run_case(case, args, [])
        results.append(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "hostile.json").write_text(json.dumps({"cases": results}, indent=2) + "\n")
    print(f"{'case':<17} {'peak RSS':>9} {'before':>8} {'seconds':>8}  error the application saw")
    ok = True
    for r in results:
        if "failed" in r:
            ok = False
            print(f"{r['case']:<17} FAILED {r['failed']}")
            continue
        ok = ok and r["error_type"] is not None
        error = f"{r['error_type']}: {r['error']}" if r["error_type"] else "NONE (no error within the limit)"
        rss = f"{r['peak_rss_mib']:>6.1f} MB {r['rss_before_mib']:>5.1f} MB"
        print(f"{r['case']:<17} {rss} {r['seconds']:>8.2f}  {error[:300]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
