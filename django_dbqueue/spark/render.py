"""Writing the report: rows collected from Spark, CSV files, PNG charts and the Markdown."""

from __future__ import annotations

import csv
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .read import sql_datetime

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class Report(Protocol):
    """What the Markdown needs of a report (``report.QueueReport`` has it; render stays below
    report in the package's import order)."""

    out: Path
    files: dict[str, Path]
    summary: list[dict[str, Any]]
    top_errors: list[dict[str, Any]]
    seconds: float


def collect_utc(df: DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts, timestamps as ISO strings in UTC (formatted by Spark, not by Python)."""
    from pyspark.sql import functions as sf
    from pyspark.sql.types import TimestampType

    cols = [
        sf.date_format(f.name, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").alias(f.name)
        if isinstance(f.dataType, TimestampType)
        else sf.col(f.name)
        for f in df.schema.fields
    ]
    return [row.asDict() for row in df.select(*cols).collect()]


def write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def parse_utc(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


#: Longest time bucket of the charts' points, in minutes, and how many points a line may have.
CHART_BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440)
CHART_POINTS = 400


def chart_bucket(summary: list[dict[str, Any]]) -> int:
    if not summary:
        return 1
    first = min(parse_utc(r["first_finished"]) for r in summary)
    last = max(parse_utc(r["last_finished"]) for r in summary)
    minutes = (last - first).total_seconds() / 60
    return next((b for b in CHART_BUCKETS if minutes / b <= CHART_POINTS), CHART_BUCKETS[-1])


def charts(out: Path, per_bucket: list[dict[str, Any]], bucket: int = 1) -> tuple[Path, Path]:
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    by_model: dict[str, list[dict[str, Any]]] = {}
    for row in per_bucket:
        by_model.setdefault(row["model"], []).append(row)

    def setup(ax: Any, ylabel: str) -> None:
        locator = AutoDateLocator()
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)

    fig = Figure(figsize=(11, 6), layout="constrained")
    ax_done, ax_fail = fig.subplots(2, 1, sharex=True)
    for model, rows in sorted(by_model.items()):
        x = [parse_utc(r["minute"]) for r in rows]
        ax_done.plot(x, [r["completed"] / bucket for r in rows], label=model, linewidth=1)
        failed = [(r["failed"] + r["retried"] + r["lost"]) / bucket for r in rows]
        ax_fail.plot(x, failed, label=model, linewidth=1)
    setup(ax_done, "completed jobs / minute")
    setup(ax_fail, "failed attempts / minute")
    per = "minute" if bucket == 1 else f"{bucket}-minute bucket"
    averaged = "" if bucket == 1 else f" (mean per minute over {bucket}-minute buckets)"
    ax_done.set_title(f"Queue throughput, UTC{averaged}")
    if by_model:
        ax_done.legend(loc="upper right", fontsize="small")
    throughput = out / "throughput.png"
    fig.savefig(throughput, dpi=100)

    fig = Figure(figsize=(11, 6), layout="constrained")
    ax_wait, ax_run = fig.subplots(2, 1, sharex=True)
    for model, rows in sorted(by_model.items()):
        x = [parse_utc(r["minute"]) for r in rows]
        for ax, prefix in ((ax_wait, "wait_s"), (ax_run, "run_s")):
            (line,) = ax.plot(x, [r[f"{prefix}_p50"] for r in rows], label=f"{model} p50", linewidth=1)
            ax.plot(
                x,
                [r[f"{prefix}_p95"] for r in rows],
                label=f"{model} p95",
                linewidth=1,
                linestyle="--",
                color=line.get_color(),
            )
    setup(ax_wait, "wait (enqueued → claimed), s")
    setup(ax_run, "run (claimed → finished), s")
    ax_wait.set_title(f"Latency per {per}, UTC: p50 solid, p95 dashed")
    if by_model:
        ax_wait.legend(loc="upper right", fontsize="small")
    latency = out / "latency.png"
    fig.savefig(latency, dpi=100)
    return throughput, latency


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown(path: Path, report: Report, since: datetime | None, until: datetime | None) -> Path:
    start = sql_datetime(since) if since else "the beginning"
    window = f"{start} to {sql_datetime(until) if until else 'now'} (UTC)"
    lines = [
        "# Queue report",
        "",
        f"Attempts finished from {window}. Generated {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC "
        f"in {report.seconds:.1f} s. Times in seconds; wait = claimed - enqueued, run = finished - claimed.",
        "",
    ]
    if not report.summary:
        lines.append("No finished attempts in this window.")
    else:
        lines += [
            "| model | jobs | attempts | succeeded | failed | retried | lost | released "
            "| attempt failure rate | job failure rate | jobs/min "
            "| wait p50 | wait p95 | wait p99 | run p50 | run p95 | run p99 |",
            "|---|" + "---:|" * 16,
        ]
        for s in report.summary:
            rate = _fmt(s["attempt_failure_rate"] * 100 if s["attempt_failure_rate"] is not None else None, 1)
            job_rate = _fmt(s["job_failure_rate"] * 100 if s["job_failure_rate"] is not None else None, 1)
            lines.append(
                f"| {s['model']} | {s['jobs']} | {s['attempts']} | {s['succeeded']} | {s['failed']} | "
                f"{s['retried']} | {s['lost']} | {s['released']} | {rate} % | {job_rate} % | "
                f"{_fmt(s['completed_per_minute'], 1)} | "
                + " | ".join(_fmt(s[f"{p}_p{q}"]) for p in ("wait_s", "run_s") for q in (50, 95, 99))
                + " |"
            )
        lines += ["", "## Top errors", ""]
        if report.top_errors:
            lines += ["| model | count | last seen | message |", "|---|---:|---|---|"]
            for e in report.top_errors:
                text = str(e["message"]).replace("|", "\\|")
                lines.append(f"| {e['model']} | {e['count']} | {e['last_seen']} | `{text}` |")
        else:
            lines.append("No errors.")
    lines += ["", "## Files", ""]
    lines += [f"* `{name}`: {p.relative_to(report.out)}" for name, p in report.files.items()]
    lines += ["", "![throughput](throughput.png)", "", "![latency](latency.png)", ""]
    path.write_text("\n".join(lines))
    return path
