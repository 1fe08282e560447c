"""The simulator's command line (``make simulate HOURS=H`` runs it open-ended).

    python -m sim.run --hours 1            # seeds from a random start until the time is up
    python -m sim.run --seeds 0:200        # a fixed range
    python -m sim.run --replay seed        # one seed again, with its violations and trace
    python -m sim.run --replay-json FILE   # a (shrunk) schedule printed by an earlier run

It reports schedules/s and, for each kind of violation, the first failing seed with its shrunk schedule.
Run with ``PYTHONPATH=src:tests`` (and ``PYTHONHASHSEED=0`` for bit-for-bit replays across processes:
the client iterates sets of partitions; the runner re-executes itself with it when unset).
"""

from __future__ import annotations

import argparse
import collections
import collections.abc
import json
import logging
import os
import random
import sys
import time
from pathlib import Path

from sim.checks import ISSUE_26_KINDS
from sim.sim import Result, Schedule, generate, run, shrink


def _report_failure(r: Result, *, do_shrink: bool, out: list[str]) -> None:
    s = r.schedule
    out.append(f"seed {s.seed} ({s.protocol}) violates: {', '.join(sorted(r.kinds))}")
    for v in r.violations:
        out.append(f"    {v}")
    if do_shrink:
        kind = sorted(r.kinds)[0]
        small = shrink(s, kind)
        out.append(f"  minimal schedule still showing [{kind}]:")
        out.append("    " + small.describe().replace("\n", "\n    "))
        out.append(
            "  replay: PYTHONHASHSEED=0 PYTHONPATH=src:tests python -m sim.run --replay-json "
            f"'{small.to_json()}'"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sim.run")
    p.add_argument("--hours", type=float, default=None)
    p.add_argument("--seeds", default=None, help="lo:hi")
    p.add_argument("--replay", type=int, default=None)
    p.add_argument("--replay-json", default=None)
    p.add_argument("--no-shrink", action="store_true")
    p.add_argument("--quiet", action="store_true", help="less output per failing seed")
    p.add_argument("--json", action="store_true", help="end with one JSON line: each kind's failing seeds")
    args = p.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(
            sys.executable, [sys.executable, "-m", "sim.run", *(argv if argv is not None else sys.argv[1:])]
        )
    logging.basicConfig(level=logging.CRITICAL)  # the consumer's warnings about injected faults are expected

    if args.replay_json is not None:
        text = args.replay_json
        if not text.lstrip().startswith("{"):
            text = Path(text).read_text()  # a file holding the JSON
        r = run(Schedule.from_json(text))
        print(r.schedule.describe())
        for v in r.violations:
            print(v)
        print(f"{len(r.violations)} violation(s); {r.steps} steps, {r.virtual_ms} virtual ms")
        return 1 if r.violations else 0
    if args.replay is not None:
        r = run(generate(args.replay))
        print(r.schedule.describe())
        for v in r.violations:
            print(v)
        print(f"{len(r.violations)} violation(s); {r.steps} steps, {r.virtual_ms} virtual ms")
        return 1 if r.violations else 0

    if args.seeds is not None:
        lo, hi = (int(x) for x in args.seeds.split(":"))
        seeds: collections.abc.Iterable[int] = range(lo, hi)
        deadline = float("inf")
    else:
        start = random.SystemRandom().randrange(1 << 30)
        seeds = iter(range(start, start + (1 << 40)))
        deadline = time.monotonic() + 3600 * (args.hours if args.hours is not None else 1.0)
    t0 = time.monotonic()
    n = 0
    counts: collections.Counter[str] = collections.Counter()
    first: dict[str, int] = {}
    seeds_of: dict[str, list[int]] = collections.defaultdict(list)
    virtual = 0
    for seed in seeds:
        if time.monotonic() >= deadline:
            break
        r = run(generate(seed))
        n += 1
        virtual += r.virtual_ms
        new = [k for k in sorted(r.kinds) if k not in first]
        for k in r.kinds:
            counts[k] += 1
            first.setdefault(k, seed)
            seeds_of[k].append(seed)
        if new:
            out: list[str] = []
            _report_failure(r, do_shrink=not args.no_shrink, out=out)
            print("\n".join(out if not args.quiet else out[:1]), flush=True)
        if n % 50 == 0:
            el = time.monotonic() - t0
            print(
                f"... {n} schedules in {el:.0f} s ({n / el:.2f}/s), violations so far {dict(counts)}",
                flush=True,
            )
    el = max(1e-9, time.monotonic() - t0)
    print(
        f"{n} schedules in {el:.1f} s: {n / el:.2f} schedules/s "
        f"({virtual / 1000 / el:.0f} virtual s per wall s)"
    )
    for k in sorted(counts):
        tag = f" (issue 26 item {ISSUE_26_KINDS[k]})" if k in ISSUE_26_KINDS else ""
        print(f"  {k}{tag}: {counts[k]} schedule(s), first seed {first[k]}")
    if args.json:
        print(json.dumps({"schedules": n, "seconds": el, "violations": seeds_of}, sort_keys=True))
    return 1 if counts else 0


if __name__ == "__main__":
    sys.exit(main())
