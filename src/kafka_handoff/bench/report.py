"""Tables (rich) and plots (matplotlib, PNG) for the benchmark results.

matplotlib is imported inside the plotting functions (the ``bench`` extra), with the non-interactive Agg
backend, so the tables work without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

__all__ = [
    "plot_rebalance",
    "plot_throughput",
    "rebalance_table",
    "throughput_table",
]

# One colour per client family, so the charts read alike.
_COLOURS = {
    "handoff": "#1f77b4",
    "handoff-py": "#6baed6",
    "handoff-batch": "#08306b",
    "handoff-nowait": "#3182bd",
    "handoff-many": "#08306b",
    "confluent-batch": "#a50f15",
    "confluent": "#d62728",
    "confluent-tuned": "#ff9896",
    "kafka-python": "#ff7f0e",
    "aiokafka": "#2ca02c",
    "java": "#7f7f7f",
}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ============================================================================================ throughput
def throughput_table(medians: Sequence[Mapping[str, Any]], title: str = "") -> Table:
    table = Table(title=title or None, title_justify="left")
    table.add_column("client")
    table.add_column("records/s", justify="right")
    table.add_column("(min-max)", justify="right", style="dim")
    table.add_column("MB/s", justify="right")
    table.add_column("CPU s / M records", justify="right")
    table.add_column("peak RSS MB", justify="right")
    table.add_column("runs", justify="right")
    for m in medians:
        if not m.get("runs"):
            table.add_row(str(m["label"]), "failed", "", "", "", "", f"0/{m.get('failed', 0)}")
            continue
        table.add_row(
            str(m["label"]),
            f"{m['records_per_s']:,.0f}",
            f"{m['records_per_s_min']:,.0f}-{m['records_per_s_max']:,.0f}",
            f"{m['mb_per_s']:.1f}",
            f"{m['cpu_s_per_million']:.2f}",
            f"{m['peak_rss_mb']:.0f}",
            str(m["runs"]) + (f" ({m['failed']} failed)" if m.get("failed") else ""),
        )
    return table


def plot_throughput(medians: Sequence[Mapping[str, Any]], path: Path, subtitle: str = "") -> Path:
    """Three bar panels: records/s (bars: median, whiskers: min-max), CPU s per million records, peak RSS."""
    plt = _pyplot()
    rows = [m for m in medians if m.get("runs")]
    labels = [str(m["label"]).replace(" (", "\n(") for m in rows]
    colours = [_COLOURS.get(str(m["client"]), "#999999") for m in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), dpi=90)
    panels = (
        ("records/s (median, min-max)", "records_per_s", 1e3, "thousand records/s"),
        ("CPU seconds per million records", "cpu_s_per_million", 1.0, "CPU s"),
        ("peak RSS", "peak_rss_mb", 1.0, "MB"),
    )
    ys = range(len(rows))
    for ax, (title, key, scale, unit) in zip(axes, panels, strict=True):
        values = [float(m[key]) / scale for m in rows]
        if key == "records_per_s":
            lo = [
                max(0.0, v - float(m["records_per_s_min"]) / scale) for v, m in zip(values, rows, strict=True)
            ]
            hi = [
                max(0.0, float(m["records_per_s_max"]) / scale - v) for v, m in zip(values, rows, strict=True)
            ]
            ax.barh(ys, values, color=colours, xerr=[lo, hi], capsize=3, ecolor="#444444")
        else:
            ax.barh(ys, values, color=colours)
        for y, v in zip(ys, values, strict=True):
            ax.text(v, y, f" {v:,.0f}" if v >= 10 else f" {v:.2f}", va="center", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(unit, fontsize=9)
        ax.set_yticks(list(ys))
        ax.set_yticklabels(labels if ax is axes[0] else [""] * len(rows), fontsize=8)
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
        ax.margins(x=0.18)
    if subtitle:
        fig.suptitle(subtitle, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


# ============================================================================================ rebalance
def rebalance_table(results: Sequence[Mapping[str, Any]], title: str = "") -> Table:
    table = Table(title=title or None, title_justify="left")
    table.add_column("client / protocol")
    table.add_column("event")
    table.add_column("processed twice", justify="right")
    table.add_column("never processed", justify="right")
    table.add_column("unaffected: min rate vs steady", justify="right")
    table.add_column("unaffected: longest gap ms (steady)", justify="right")
    table.add_column("longest poll() ms", justify="right")
    table.add_column("join -> assigned / first record s", justify="right")
    for r in results:
        name = f"{r['label']} / {r['protocol']}"
        if r.get("error"):
            table.add_row(name, "failed", "", "", "", "", "", str(r["error"])[:60])
            continue
        for i, ev in enumerate(r["events"]):
            table.add_row(
                name if i == 0 else "",
                str(ev["event"]),
                f"{r['duplicates']:,}" if i == 0 else "",
                f"{r['missing']:,}" if i == 0 else "",
                _pct(ev.get("unaffected_min_rate_ratio")),
                _gap(ev.get("unaffected_longest_gap_ms"), ev.get("steady_longest_gap_ms")),
                "< 50" if ev.get("longest_poll_ms") is None else f"{float(ev['longest_poll_ms']):,.0f}",
                _join(r) if i == 0 else "",
            )  # fmt: skip
    return table


def _join(r: Mapping[str, Any]) -> str:
    assigned, first = r.get("join_to_assigned_s"), r.get("join_to_first_record_s")
    return " / ".join("n/a" if v is None else f"{float(v):.2f}" for v in (assigned, first))


def _pct(value: Any) -> str:
    return "n/a" if value is None else f"{100 * float(value):.0f}%"


def _gap(value: Any, steady: Any) -> str:
    if value is None:
        return "n/a"
    return f"{float(value):,.0f}" + ("" if steady is None else f" ({float(steady):,.0f})")


def plot_rebalance(results: Sequence[Mapping[str, Any]], path: Path, subtitle: str = "") -> Path:
    """One panel per scenario: each member's processed records/s over time, and the rate of the partitions
    the events did not move (dashed), with the join/leave events marked."""
    plt = _pyplot()
    ok = [r for r in results if not r.get("error")]
    n = max(1, len(ok))
    cols = 2 if n > 1 else 1
    nrows = (n + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(7 * cols, 3.0 * nrows), dpi=75, squeeze=False)
    for ax, r in zip(axes.flat, ok, strict=False):
        timeline = r["timeline"]
        t = timeline["t"]
        for member, rates in sorted(timeline["members"].items()):
            ax.plot(t, rates, label=member, linewidth=1.2)
        if timeline.get("unaffected"):
            ax.plot(t, timeline["unaffected"], label="unaffected partitions", color="black", linestyle="--",
                    linewidth=1.0)  # fmt: skip
        for ev in r["events"]:
            ax.axvline(float(ev["t"]), color="#555555", linestyle=":", linewidth=1)
            ax.text(float(ev["t"]), 0.02, f" {ev['event']}", rotation=90, va="bottom", fontsize=7,
                    color="#555555", transform=ax.get_xaxis_transform())  # fmt: skip
        ax.set_title(
            f"{r['label']} / {r['protocol']}: {r['duplicates']} twice, {r['missing']} never",
            fontsize=9,
        )
        ax.set_xlabel("seconds since the stream started (3 members stable)", fontsize=8)
        ax.set_ylabel("records/s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="upper left", ncol=3)
    for ax in list(axes.flat)[len(ok) :]:
        ax.axis("off")
    if subtitle:
        fig.suptitle(subtitle, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
