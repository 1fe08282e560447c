"""A regression guard: ``handoff bench compare REF`` -- this tree against a git ref, side by side.

The consume and produce benchmarks run for two builds of kafka-handoff on one broker:

* **this tree**: the kafka-handoff the running interpreter imports (its C extensions as built);
* **REF** (a commit, branch or tag of this repository): a virtualenv of its own, built once per commit and
  kept under ``~/.cache/kafka-handoff/bench-venvs/<sha>/``: the ref's source (``git archive``) built into a
  wheel with its C extensions (the build fails when they do not compile: a pure-Python ref would be no
  comparison), installed without dependencies; the dependencies (kio, crc32c, cramjam, ...) are reused
  from this interpreter's site-packages through a ``.pth`` file when they import there, else installed
  with pip (from its cache when it has them).

Each run is a fresh child process (:mod:`kafka_handoff.bench.compare_runner`, which uses only the public
client API, so any ref since the first wave runs it).  The data to consume is produced once; one consume
run of this tree warms the broker and is not counted; then ``--repeat`` rounds run the consume benchmark
(``--apis``: ``records`` -- ``poll()`` touching every value -- and/or ``columns`` -- ``poll_columns()``) and
the produce benchmark (``--modes``: ``send`` -- a future per record -- and/or ``nowait``), each round with
the order of the two builds swapped, so that neither always runs first.  The report gives, per benchmark,
the median records/s and CPU seconds per million records (every thread, in the measured window) of each
build and the ratios *this tree / REF*: above 1.0 for records/s is faster, below 1.0 for CPU is cheaper.
Consume runs also report the time from ``Consumer(...)`` to the first record and the peak RSS.

Wall-clock throughput is noisy on a busy machine; CPU per million records less so.  ``--callgrind N``
also runs each build's consumer once under ``valgrind --tool=callgrind`` reading N records and reports the
instruction counts (repeatable whatever the load), keeping the ``callgrind.out`` files in ``--out`` for
``callgrind_annotate``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "RUNNER",
    "Side",
    "cli",
    "ensure_ref_python",
    "resolve_ref",
    "run_compare",
]

#: The runner script both builds execute (by path in the ref's interpreter: it must not import this tree).
RUNNER = Path(__file__).with_name("compare_runner.py")
CONSUME_APIS = ("records", "columns")
PRODUCE_MODES = ("send", "nowait")


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kafka-handoff" / "bench-venvs"


def repo_root(start: Path | None = None) -> Path:
    """The git work tree this module lives in (or ``start``'s)."""
    where = start or Path(__file__).resolve().parent
    out = subprocess.run(
        ["git", "-C", str(where), "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"not in a git work tree ({where}): {out.stderr.strip()}")
    return Path(out.stdout.strip())


def resolve_ref(ref: str, repo: Path) -> str:
    """The full commit id ``ref`` names in ``repo`` (ValueError naming the ref when it names none)."""
    out = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0 or not out.stdout.strip():
        raise ValueError(f"{ref!r} names no commit in {repo}")
    return out.stdout.strip()


def _site_packages() -> list[str]:
    """This interpreter's site-packages directories (where the ref's dependencies may be reused from)."""
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    return sorted(p for p in paths if os.path.isdir(p))


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _check(python: Path, code: str) -> bool:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return (
        subprocess.run([str(python), "-I", "-c", code], env=env, capture_output=True, check=False).returncode
        == 0
    )


_IMPORTS = (
    "import kafka_handoff.consumer, kafka_handoff.producer, kafka_handoff.protocol._fastrecords, "
    "kafka_handoff.producer._fastencode"
)


def ensure_ref_python(
    repo: Path, sha: str, *, cache: Path | None = None, progress: Callable[[str], None] = lambda m: None
) -> Path:
    """The interpreter of the virtualenv holding ``sha``'s build (built now unless cached)."""
    root = (cache or _cache_root()) / sha
    venv = root / "venv"
    python = _venv_python(venv)
    ready = root / "ready"
    if ready.is_file() and python.exists() and _check(python, _IMPORTS):
        return python
    progress(f"building a virtualenv for {sha[:12]} in {root} ...")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="bench-ref-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        archive = Path(tmp) / "src.tar"
        with archive.open("wb") as f:
            subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", sha], stdout=f, check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(src, filter="data")
        wheels = root / "wheels"
        # This interpreter's setuptools builds it (no download of a build environment).
        build = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "-q",
                "-w",
                str(wheels),
                str(src),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if build.returncode != 0:
            raise RuntimeError(f"building {sha[:12]} failed:\n{(build.stdout + build.stderr)[-3000:]}")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    wheel = next(wheels.glob("kafka_handoff-*.whl"))
    pip = [str(python), "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--no-deps", str(wheel)], check=True, capture_output=True)
    # Dependencies: this interpreter's, appended after the venv's own site-packages (so the ref's
    # kafka_handoff comes first); pip installs them when that is not enough.
    site = Path(
        subprocess.run(
            [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "zz-bench-compare-deps.pth").write_text("\n".join(_site_packages()) + "\n", encoding="utf-8")
    if not _check(python, _IMPORTS):
        progress("the ref's dependencies do not import from this environment; installing them with pip")
        (site / "zz-bench-compare-deps.pth").unlink()
        subprocess.run([*pip, "install", str(wheel)], check=True, capture_output=True)
    if not _check(python, _IMPORTS):
        raise RuntimeError(f"the virtualenv of {sha[:12]} cannot import kafka-handoff with its C extensions")
    ready.write_text(sha + "\n", encoding="utf-8")
    return python


# ============================================================================================ runs
@dataclass(frozen=True)
class Side:
    """One build under test: ``python`` runs :data:`RUNNER`; ``isolated``: with ``-I`` (no PYTHONPATH)."""

    name: str
    python: str
    isolated: bool

    def command(self, args: Sequence[str]) -> list[str]:
        if self.isolated:
            return [self.python, "-I", str(RUNNER), *args]
        return [self.python, "-m", "kafka_handoff.bench.compare_runner", *args]


class Unsupported(RuntimeError):
    """The build under test does not have the API a benchmark calls."""


@dataclass
class Result:
    bench: str
    side: str
    round: int
    data: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    #: The build lacks the API (``send_nowait``, ``poll_columns`` before they existed): no ratio, no failure.
    unsupported: bool = False

    @property
    def ok(self) -> bool:
        return not self.error


def run_side(side: Side, args: Sequence[str], timeout_s: float, prefix: Sequence[str] = ()) -> dict[str, Any]:
    """Run the runner once; its JSON line (RuntimeError with its output when it fails)."""
    env = dict(os.environ)
    if side.isolated:
        env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [*prefix, *side.command(args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), None)
    if line is None:
        raise RuntimeError(f"{side.name}: exit {proc.returncode}: {proc.stderr.strip()[-1500:]}")
    data: dict[str, Any] = json.loads(line)
    if "error" in data:
        raise Unsupported(f"{side.name}: {data['error']}")
    if proc.returncode != 0:
        raise RuntimeError(f"{side.name}: exit {proc.returncode}, {data.get('records')} records")
    return data


def callgrind_total(path: Path) -> int:
    """The total instruction count (``Ir``) of a callgrind output file."""
    total = 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                total = max(total, int(line.split()[1]))
    return total


def _rate(data: dict[str, Any], key: str) -> float:
    seconds = float(data[key])
    return data["records"] / seconds if seconds > 0 else 0.0


def _metrics(bench: str, data: dict[str, Any]) -> dict[str, float]:
    if bench.startswith("consume"):
        return {
            "records_per_s": _rate(data, "consume_s"),
            "cpu_s_per_million": data["cpu_s"] * 1e6 / data["records"],
            "startup_s": data["startup_s"],
            "peak_rss_mb": data["peak_rss_mb"],
        }
    return {
        "records_per_s": _rate(data, "seconds"),
        "cpu_s_per_million": data["cpu_s"] * 1e6 / data["records"],
        "peak_rss_mb": data["peak_rss_mb"],
    }


def summarize(results: Sequence[Result], sides: Sequence[str]) -> list[dict[str, Any]]:
    """Per benchmark: each side's medians and the ratios ``sides[0] / sides[1]``."""
    out: list[dict[str, Any]] = []
    benches = list(dict.fromkeys(r.bench for r in results))
    for bench in benches:
        row: dict[str, Any] = {"bench": bench}
        for side in sides:
            runs = [_metrics(bench, r.data) for r in results if r.bench == bench and r.side == side and r.ok]
            errors = sorted({r.error for r in results if r.bench == bench and r.side == side and not r.ok})
            unsupported = any(r.unsupported for r in results if r.bench == bench and r.side == side)
            row[side] = {"runs": len(runs), "errors": errors, "unsupported": unsupported}
            if runs:
                for key in runs[0]:
                    row[side][key] = statistics.median(m[key] for m in runs)
        a, b = row[sides[0]], row[sides[1]]
        for key in ("records_per_s", "cpu_s_per_million", "startup_s", "peak_rss_mb"):
            if a.get(key) and b.get(key):
                row[f"ratio_{key}"] = a[key] / b[key]
        out.append(row)
    return out


def format_table(summary: Sequence[dict[str, Any]], sides: Sequence[str]) -> str:
    """The report: one line per benchmark and build, then the ratios."""
    lines = [
        f"{'benchmark':<18} {'build':<22} {'runs':>4} {'records/s':>12} {'CPU s/M':>8} {'startup s':>9} "
        f"{'RSS MB':>7}"
    ]
    for row in summary:
        for side in sides:
            m = row[side]
            if not m["runs"]:
                what = "not in this build" if m["unsupported"] else "FAILED"
                lines.append(f"{row['bench']:<18} {side:<22} {0:>4}  {what}: {'; '.join(m['errors'])[:200]}")
                continue
            startup = f"{m['startup_s']:9.2f}" if "startup_s" in m else f"{'':9}"
            lines.append(
                f"{row['bench']:<18} {side:<22} {m['runs']:>4} {m['records_per_s']:>12,.0f} "
                f"{m['cpu_s_per_million']:>8.3f} {startup} {m['peak_rss_mb']:>7.0f}"
            )
        ratios = [
            f"{label} {row[key]:.2f}x"
            for key, label in (
                ("ratio_records_per_s", "records/s"),
                ("ratio_cpu_s_per_million", "CPU/M"),
                ("ratio_startup_s", "startup"),
                ("ratio_peak_rss_mb", "RSS"),
            )
            if key in row
        ]
        lines.append(f"{'':<18} {sides[0] + ' / ' + sides[1]:<22} {', '.join(ratios) or 'no ratio'}")
    return "\n".join(lines)


def run_compare(
    bootstrap: str,
    ref_side: Side,
    this_side: Side,
    *,
    records: int,
    produce_records: int,
    value_bytes: int,
    partitions: int,
    repeat: int,
    apis: Sequence[str] = ("records",),
    modes: Sequence[str] = PRODUCE_MODES,
    linger_ms: int | None = 5,
    compression: str = "none",
    callgrind_records: int = 0,
    out: Path | None = None,
    progress: Callable[[str], None] = lambda m: None,
) -> dict[str, Any]:
    """Run the benchmarks for both builds (see the module doc); the JSON-able result."""
    from kafka_handoff.bench.throughput import create_topic, delete_topic, produce_data

    sides = [this_side, ref_side]
    results: list[Result] = []
    callgrind: dict[str, int] = {}
    topics: list[str] = []
    load_start = os.getloadavg()
    timeout = 300.0 + (records + produce_records) / 2_000.0
    try:
        if apis and records:
            topic = create_topic(bootstrap, partitions, prefix="bench-compare")
            topics.append(topic)
            progress(f"producing {records:,} records x {value_bytes} B to {topic} ({partitions} partitions)")
            produce_data(bootstrap, topic, partitions, records, value_bytes)
            consume_args = ["consume", "--bootstrap-servers", bootstrap, "--topic", topic,
                            "--partitions", str(partitions), "--records", str(records)]  # fmt: skip
            progress("warm-up consume (this tree, not counted)")
            run_side(this_side, consume_args, timeout)
        for round_no in range(1, repeat + 1):
            order = sides if round_no % 2 else sides[::-1]
            for api in apis if records else ():
                for side in order:
                    results.append(
                        _one(f"consume-{api}", side, round_no, [*consume_args, "--api", api], timeout)
                    )
                    progress(_line(results[-1]))
            for mode in modes if produce_records else ():
                for side in order:
                    ptopic = create_topic(bootstrap, partitions, prefix="bench-compare-produce")
                    topics.append(ptopic)
                    args = ["produce", "--bootstrap-servers", bootstrap, "--topic", ptopic,
                            "--records", str(produce_records), "--value-bytes", str(value_bytes),
                            "--mode", mode, "--compression", compression]  # fmt: skip
                    if linger_ms is not None:
                        args += ["--linger-ms", str(linger_ms)]
                    results.append(_one(f"produce-{mode}", side, round_no, args, timeout))
                    progress(_line(results[-1]))
        if callgrind_records and apis and records:
            valgrind = shutil.which("valgrind")
            if valgrind is None:
                progress("(no valgrind: --callgrind skipped)")
            else:
                outdir = out or Path(tempfile.mkdtemp(prefix="bench-compare-"))
                outdir.mkdir(parents=True, exist_ok=True)
                n = min(callgrind_records, records)
                for side in sides:
                    slug = hashlib.sha1(side.name.encode()).hexdigest()[:6]
                    path = outdir / f"callgrind.out.consume.{side.name.replace(' ', '_')}.{slug}"
                    args = [*consume_args[:-1], str(n), "--timeout-s", str(timeout * 50)]
                    prefix = [valgrind, "--tool=callgrind", f"--callgrind-out-file={path}"]
                    progress(f"callgrind: {side.name} consuming {n:,} records ...")
                    run_side(side, args, timeout * 50, prefix=prefix)
                    callgrind[side.name] = callgrind_total(path)
                    progress(f"callgrind: {side.name}: {callgrind[side.name]:,} instructions ({path})")
    finally:
        for name in topics:
            delete_topic(bootstrap, name)
    names = [this_side.name, ref_side.name]
    summary = summarize(results, names)
    return {
        "config": {
            "records": records,
            "produce_records": produce_records,
            "value_bytes": value_bytes,
            "partitions": partitions,
            "repeat": repeat,
            "apis": list(apis),
            "modes": list(modes),
            "linger_ms": linger_ms,
            "compression": compression,
            "bootstrap_servers": bootstrap,
        },
        "sides": {s.name: s.python for s in sides},
        "load_avg_start": load_start,
        "load_avg_end": os.getloadavg(),
        "summary": summary,
        "callgrind_instructions": callgrind,
        "samples": [
            {"bench": r.bench, "side": r.side, "round": r.round, **r.data, "error": r.error} for r in results
        ],
    }


def _one(bench: str, side: Side, round_no: int, args: Sequence[str], timeout: float) -> Result:
    try:
        return Result(bench, side.name, round_no, run_side(side, args, timeout))
    except Unsupported as exc:
        return Result(bench, side.name, round_no, error=str(exc), unsupported=True)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return Result(bench, side.name, round_no, error=str(exc))


def _line(r: Result) -> str:
    head = f"round {r.round} {r.bench:<16} {r.side:<22}"
    if not r.ok:
        return f"{head} FAILED: {r.error[:300]}"
    m = _metrics(r.bench, r.data)
    return f"{head} {m['records_per_s']:>11,.0f} rec/s  cpu/M {m['cpu_s_per_million']:.3f} s"


# ============================================================================================ CLI
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("ref", help="the git ref to compare this tree with (a commit, branch or tag)")
    p.add_argument("--records", type=int, default=1_000_000, help="records consumed per run (0: no consume)")
    p.add_argument("--produce-records", type=int, default=500_000, help="records produced per run (0: none)")
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3, help="rounds (the order of the builds swaps each round)")
    p.add_argument("--apis", default="records", help="consume APIs, comma-separated: records, columns")
    p.add_argument("--modes", default="send,nowait", help="produce calls, comma-separated: send, nowait")
    p.add_argument("--linger-ms", type=int, default=5, help="linger.ms of both producers (-1: their default)")
    p.add_argument("--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"), default="none")
    p.add_argument("--callgrind", type=int, default=0, metavar="N",
                   help="also count the instructions of each build's consumer reading N records")  # fmt: skip
    p.add_argument("--cache-dir", type=Path, default=None, help="where the ref virtualenvs are kept")


def cli(args: argparse.Namespace) -> int:
    from kafka_handoff.bench.runs import broker, progress

    apis = [a.strip() for a in args.apis.split(",") if a.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [a for a in apis if a not in CONSUME_APIS] + [m for m in modes if m not in PRODUCE_MODES]
    if bad:
        print(f"error: unknown --apis/--modes value(s) {', '.join(bad)} (allowed: --apis "
              f"{', '.join(CONSUME_APIS)}; --modes {', '.join(PRODUCE_MODES)})", file=sys.stderr)  # fmt: skip
        return 2
    if args.records < 0 or args.produce_records < 0 or args.repeat < 1 or args.partitions < 1:
        print("error: --records/--produce-records must be >= 0, --repeat/--partitions >= 1", file=sys.stderr)
        return 2
    repo = repo_root()
    try:
        sha = resolve_ref(args.ref, repo)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ref_python = ensure_ref_python(repo, sha, cache=args.cache_dir, progress=progress)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    this_side = Side(f"this tree ({head}{'+' if dirty else ''})", sys.executable, isolated=False)
    ref_side = Side(f"{args.ref} ({sha[:9]})", str(ref_python), isolated=True)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with broker(args.bootstrap_servers) as bootstrap:
        data = run_compare(
            bootstrap,
            ref_side,
            this_side,
            records=args.records,
            produce_records=args.produce_records,
            value_bytes=args.value_bytes,
            partitions=args.partitions,
            repeat=args.repeat,
            apis=apis,
            modes=modes,
            linger_ms=None if args.linger_ms < 0 else args.linger_ms,
            compression=args.compression,
            callgrind_records=args.callgrind,
            out=out,
            progress=progress,
        )
    names = [this_side.name, ref_side.name]
    load = f"load {data['load_avg_start'][0]:.1f}-{data['load_avg_end'][0]:.1f} on {os.cpu_count()} CPUs"
    print(
        f"bench compare: {names[0]} vs {names[1]}; {args.partitions} partitions, "
        f"{args.value_bytes} B values, median of {args.repeat}; {load}"
    )
    print(format_table(data["summary"], names))
    cg = data["callgrind_instructions"]
    if len(cg) == 2:
        a, b = cg[names[0]], cg[names[1]]
        n = min(args.callgrind, args.records)
        print(
            f"callgrind (consume {n:,} records): {names[0]} {a:,} instructions, "
            f"{names[1]} {b:,} ({a / b:.3f}x)"
        )
    path = out / f"compare-{sha[:9]}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:4]}.json"
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)
    failed = any(not row[n]["runs"] and not row[n]["unsupported"] for row in data["summary"] for n in names)
    return 1 if failed else 0
