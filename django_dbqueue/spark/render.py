"""Writing the report: rows collected from Spark, CSV files and the Markdown (charts: :mod:`.charts`)."""

from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from django_dbqueue.compat import UTC

from .aggregates import OUTCOMES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


Rows = list[dict[str, Any]]


class Report(Protocol):
    """What the Markdown needs of a report (``report.QueueReport`` has it; render stays below
    report in the package's import order)."""

    out: Path
    files: dict[str, Path]
    summary: list[dict[str, Any]]
    top_errors: list[dict[str, Any]]
    seconds: float


def collect_utc(df: DataFrame) -> Rows:
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


def write_csv(path: Path, rows: Rows, columns: list[str]) -> Path:
    """Rows as CSV; list values (the error samples) as JSON arrays, one cell each."""
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()})
    return path


def parse_utc(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _cell(text: Any) -> str:
    """Text inside a Markdown table cell, as code: pipes escaped, backticks made harmless."""
    return "`" + str(text).replace("|", "\\|").replace("`", "'") + "`"


def _utc_text(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _rate_basis(s: dict[str, Any]) -> str:
    if s["rate_basis"] == "full minutes":
        return f"{s['full_minutes']:,} full minute{'s' if s['full_minutes'] != 1 else ''}"
    if s["rate_basis"] == "window":
        return f"{s['window_s']:,.1f} s window (no full minute)"
    return "- (one instant)"


def _summary_tables(summary: Rows) -> list[str]:
    lines = [
        "| model | jobs | attempts | "
        + " | ".join(OUTCOMES)
        + " | attempt failure rate | job failure rate | completed / min | rate over |",
        "|---|" + "---:|" * (len(OUTCOMES) + 5) + "---|",
    ]
    for s in summary:
        counts = [s[k] for k in ("jobs", "attempts", *OUTCOMES)]
        lines.append(
            f"| {s['model']} | "
            + " | ".join(_fmt(c) for c in counts)
            + f" | {_percent(s['attempt_failure_rate'])} | {_percent(s['job_failure_rate'])} "
            f"| {_fmt(s['completed_per_minute'], 1)} | {_rate_basis(s)} |"
        )
    lines += [
        "",
        "Completed = succeeded + failed for good. Completed / min counts the full minutes between a "
        "model's first and last finishing minute; those two are partial (its work began and ended "
        "inside them) and are left out. With no full minute, it is the rate over the window from the "
        "first to the last finish.",
        "",
        "## Times (seconds)",
        "",
        "| model | wait p50 | wait p95 | wait p99 | run p50 | run p95 | run p99 "
        "| end-to-end p50 | end-to-end p95 | end-to-end p99 |",
        "|---|" + "---:|" * 9,
    ]
    for s in summary:
        times = [s[f"{p}_p{q}"] for p in ("wait_s", "run_s", "e2e_s") for q in (50, 95, 99)]
        lines.append(f"| {s['model']} | " + " | ".join(_fmt(t) for t in times) + " |")
    lines += [
        "",
        "Wait = claimed - due: the queue delay, from the later of the row's run-at when it was claimed "
        "and its enqueue time (backoff, scheduling and retries of old rows are not queue delay). "
        "Run = finished - claimed. End-to-end = finished - enqueued, for the attempts that ended "
        "their job (succeeded or failed for good).",
    ]
    for s in summary:
        if s["wait_from_enqueued"]:
            lines.append(
                f"{s['model']}: {s['wait_from_enqueued']:,} attempts have no recorded due time "
                "(older history); their wait counts from enqueue."
            )
    return lines


def _error_table(errors: Rows) -> list[str]:
    if not errors:
        return ["No errors."]
    lines = [
        "Grouped by exception and message, numbers, amounts, ids and e-mail addresses masked; "
        "samples are the most recent distinct messages of the group.",
        "",
        "| model | count | exception | message | distinct messages | last seen | samples |",
        "|---|---:|---|---|---:|---|---|",
    ]
    for e in errors:
        samples = "<br>".join(_cell(sample) for sample in e["samples"])
        lines.append(
            f"| {e['model']} | {_fmt(e['count'])} | {e['exception'] or '-'} | {_cell(e['message'])} "
            f"| {_fmt(e['distinct_messages'])} | {e['last_seen']} | {samples} |"
        )
    return lines


def markdown(path: Path, report: Report, since: datetime | None, until: datetime | None) -> Path:
    start = _utc_text(since) if since else "the beginning"
    window = f"{start} to {_utc_text(until) if until else 'now'} (UTC)"
    lines = [
        "# Queue report",
        "",
        f"Attempts finished from {window}. Generated {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC "
        f"in {report.seconds:.1f} s.",
        "",
    ]
    if not report.summary:
        lines.append("No finished attempts in this window.")
    else:
        lines += ["## Throughput and failures", "", *_summary_tables(report.summary)]
        lines += ["", "## Top errors", "", *_error_table(report.top_errors)]
    lines += ["", "## Files", ""]
    lines += [f"* `{name}`: {p.relative_to(report.out)}" for name, p in report.files.items()]
    lines += ["", "![throughput](throughput.png)", "", "![latency](latency.png)", ""]
    path.write_text("\n".join(lines))
    return path
