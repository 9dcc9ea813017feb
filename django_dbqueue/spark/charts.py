"""The report's PNG charts: throughput and latency per minute (or per bucket), per model.

matplotlib's ``Figure`` directly (no pyplot: no global state, no GUI backend). Every y axis
starts at 0, so a line's height reads as its size; the first and last period of each model are
partial (its work began and ended inside them), so they are drawn as hollow markers apart
from the line instead of as a dip at each end; the legend sits outside the plots, off the
lines.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .render import parse_utc

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: Longest time bucket of the charts' points, in minutes, and how many points a line may have.
CHART_BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440)
CHART_POINTS = 400

Rows = list[dict[str, Any]]


def chart_bucket(summary: Rows) -> int:
    """Minutes per chart point: 1, or the smallest bucket that keeps a line within CHART_POINTS."""
    if not summary:
        return 1
    first = min(parse_utc(r["first_finished"]) for r in summary)
    last = max(parse_utc(r["last_finished"]) for r in summary)
    minutes = (last - first).total_seconds() / 60
    return next((b for b in CHART_BUCKETS if minutes / b <= CHART_POINTS), CHART_BUCKETS[-1])


def _by_model(rows: Rows) -> list[tuple[str, Rows]]:
    by_model: dict[str, Rows] = {}
    for row in rows:
        by_model.setdefault(row["model"], []).append(row)
    return sorted((model, sorted(rs, key=lambda r: r["minute"])) for model, rs in by_model.items())


def _number(value: float | None) -> float:
    # A period without the measure (no job ended in it: no end-to-end time) is a gap.
    return math.nan if value is None else value


def _plot(ax: Axes, rows: Rows, value: Any, color: str, **style: Any) -> None:
    """One model's series: full periods as a line, partial ones as hollow markers of its colour."""
    full = [r for r in rows if not r["partial"]]
    edges = [r for r in rows if r["partial"]]
    # Datetimes go through matplotlib's date converter; its stubs want numbers or arrays.
    x: Any = [parse_utc(r["minute"]) for r in full]
    x_edges: Any = [parse_utc(r["minute"]) for r in edges]
    ax.plot(x, [_number(value(r)) for r in full], linewidth=1, color=color, **style)
    ax.plot(
        x_edges,
        [_number(value(r)) for r in edges],
        linestyle="none",
        marker="o",
        markerfacecolor="none",
        color=color,
        label="_partial",
    )


def _setup(ax: Axes, ylabel: str, floor_top: float) -> None:
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    locator = AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    # From 0; a flat zero line still gets a visible range.
    ax.set_ylim(0, max(ax.get_ylim()[1], floor_top))


def _legend(fig: Figure, entries: list[tuple[str, dict[str, Any]]], bucket: int) -> None:
    """One legend for the figure, outside the plots (constrained layout makes room for it)."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], **style, label=label) for label, style in entries]
    hollow: dict[str, Any] = {"linestyle": "none", "marker": "o", "markerfacecolor": "none", "color": "grey"}
    period = "minute" if bucket == 1 else f"{bucket}-minute bucket"
    handles.append(Line2D([], [], **hollow, label=f"partial first/last {period} (not joined)"))
    fig.legend(handles=handles, loc="outside right upper", fontsize="small")


def throughput_figure(rows: Rows, bucket: int = 1) -> Figure:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 6), layout="constrained")
    ax_done, ax_fail = fig.subplots(2, 1, sharex=True)
    entries = []
    for n, (model, series) in enumerate(_by_model(rows)):
        color = f"C{n % 10}"  # one colour per model on every axis
        _plot(ax_done, series, lambda r: r["completed"] / bucket, color, label=model)
        _plot(ax_fail, series, lambda r: (r["failed"] + r["retried"] + r["lost"]) / bucket, color)
        entries.append((model, {"color": color}))
    _setup(ax_done, "completed jobs / minute", 1)
    _setup(ax_fail, "failed attempts / minute", 1)
    averaged = "" if bucket == 1 else f" (mean per minute over {bucket}-minute buckets)"
    ax_done.set_title(f"Queue throughput, UTC{averaged}")
    _legend(fig, entries, bucket)
    return fig


def latency_figure(rows: Rows, bucket: int = 1) -> Figure:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 8), layout="constrained")
    axes = fig.subplots(3, 1, sharex=True)
    measures = (
        ("wait_s", "wait (due → claimed), s"),
        ("run_s", "run (claimed → finished), s"),
        ("e2e_s", "end to end (enqueued → done), s"),
    )
    entries = []
    for n, (model, series) in enumerate(_by_model(rows)):
        color = f"C{n % 10}"
        for ax, (prefix, _) in zip(axes, measures, strict=True):
            _plot(ax, series, lambda r, p=prefix: r[f"{p}_p50"], color, label=f"{model} p50")
            _plot(ax, series, lambda r, p=prefix: r[f"{p}_p95"], color, linestyle="--", label=f"{model} p95")
        entries.append((model, {"color": color}))
    for ax, (_, label) in zip(axes, measures, strict=True):
        _setup(ax, label, 0.001)
    per = "minute" if bucket == 1 else f"{bucket}-minute bucket"
    axes[0].set_title(f"Latency per {per}, UTC: p50 solid, p95 dashed")
    styles = [("p50", {"color": "black"}), ("p95", {"color": "black", "linestyle": "--"})]
    _legend(fig, entries + styles, bucket)
    return fig


def charts(out: Path, rows: Rows, bucket: int = 1) -> tuple[Path, Path]:
    """``throughput.png`` and ``latency.png`` in ``out`` from per-period rows (``per_minute``'s
    columns, ``minute`` the period's start)."""
    throughput, latency = out / "throughput.png", out / "latency.png"
    throughput_figure(rows, bucket).savefig(throughput, dpi=100)
    latency_figure(rows, bucket).savefig(latency, dpi=100)
    return throughput, latency
