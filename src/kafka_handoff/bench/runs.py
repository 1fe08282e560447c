"""What the benchmark commands share: the broker of a run (an existing one, or a private dev broker started
and stopped around it), progress lines on stderr, the clients check, the report and its result files with
their table, and the runner processes' peak RSS.

``handoff bench`` (``cli/bench.py``) and the benchmark modules' own command lines use these; nothing here
imports the CLI.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

__all__ = [
    "BenchReport",
    "broker",
    "load_note",
    "peak_rss_mb",
    "private_broker",
    "progress",
    "unknown_clients",
    "write_throughput",
]


class _Sample(Protocol):
    def as_dict(self) -> dict[str, Any]: ...


S = TypeVar("S", bound=_Sample)


@dataclass
class BenchReport(Generic[S]):
    """A benchmark's configuration, environment and runs; a subclass says how the runs become medians."""

    config: dict[str, Any]
    environment: dict[str, Any]
    samples: list[S] = field(default_factory=list)

    def medians(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "environment": self.environment,
            "medians": self.medians(),
            "samples": [s.as_dict() for s in self.samples],
        }


def peak_rss_mb() -> float | None:
    """This process's peak resident set size (``VmHWM``; reset by ``exec``, unlike ``ru_maxrss``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    """``bootstrap`` as given, else the address of a private dev broker that is stopped at the end."""
    with private_broker(bootstrap, None) as (address, _cluster):
        yield address


@contextlib.contextmanager
def private_broker(bootstrap: str | None, security: str | None) -> Iterator[tuple[str, Any]]:
    """``(bootstrap servers, the dev broker or None)``: ``bootstrap`` as given, else a private dev broker
    (with the secured listener of ``security`` beside PLAINTEXT when given)."""
    if bootstrap:
        yield bootstrap, None
        return
    from kafka_handoff import devbroker

    print("starting a private dev broker ...", file=sys.stderr, flush=True)
    cluster = devbroker.start(nodes=1, security=security)
    try:
        print(f"broker at {cluster.bootstrap_servers}", file=sys.stderr, flush=True)
        yield cluster.bootstrap_servers, cluster
    finally:
        cluster.stop()


def progress(msg: str) -> None:
    """One progress line on stderr, with the time of day."""
    print(f"{time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def unknown_clients(clients: Iterable[str], allowed: Iterable[str], what: str = "client") -> bool:
    """Print the error naming the clients not in ``allowed`` (and the allowed ones); True when there were."""
    known = list(allowed)
    unknown = [c for c in clients if c not in known]
    if unknown:
        print(f"error: unknown {what}(s) {', '.join(unknown)} (allowed: {', '.join(known)})", file=sys.stderr)
    return bool(unknown)


def load_note(environment: Mapping[str, Any]) -> str:
    """``"<n> CPUs, load <start>-<end>; <broker> on loopback"`` for a result's ``environment``."""
    load = f"{environment['load_avg_start'][0]:.1f}-{environment['load_avg_end'][0]:.1f}"
    return f"{environment['cpus']} CPUs, load {load}; {environment['broker']} on loopback"


def write_throughput(
    out: Path, name: str, data: Mapping[str, Any], subtitle: str, *, width: int = 160, plot: bool = True
) -> None:
    """Write ``<name>.json`` (and ``<name>.png`` when ``plot``) to ``out`` and print the throughput table."""
    from rich.console import Console

    from kafka_handoff.bench import report

    json_path, png_path = out / f"{name}.json", out / f"{name}.png"
    json_path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    medians = data["medians"]
    if plot:
        try:
            report.plot_throughput(medians, png_path, subtitle)
        except ImportError as exc:
            print(f"(no plot: {exc}; install the 'bench' extra)", file=sys.stderr)
    Console(width=width).print(report.throughput_table(medians, title=subtitle))
    print(f"wrote {json_path} and {png_path}" if plot else f"wrote {json_path}", file=sys.stderr)
