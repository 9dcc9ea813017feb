"""``manage.py queuereport``: throughput, latency and failure report over the attempt history."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from django_dbqueue.compat import UTC
from django_dbqueue.management.arguments import DURATION, duration, whole_number

from .queue_spark_enqueue import aware_datetime


def since_value(value: str) -> datetime:
    """``7d``, ``24h``, ``30m``, ``2w`` before now, or an ISO date-time (UTC if naive)."""
    if DURATION.match(value.strip()):
        return datetime.now(UTC) - duration(value)
    return aware_datetime(value)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def _throughput(row: dict[str, Any]) -> str:
    """Completed jobs per minute and what they were counted over (full minutes or the window)."""
    if row["rate_basis"] == "full minutes":
        return f"{row['completed_per_minute']:.1f} completed/min (over {row['full_minutes']} full minutes)"
    if row["rate_basis"] == "window":
        return f"{row['completed_per_minute']:.1f} completed/min (over a {row['window_s']:.1f} s window)"
    return "no completion rate (one instant)"


class Command(BaseCommand):
    help = (
        "Report queue throughput, wait/run time percentiles, failure rates, top errors and retries "
        "from the attempt history, with Spark: Parquet, CSV, PNG charts and a Markdown summary."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--since", type=since_value, default=None, help="Start: 7d, 24h, 30m, 2w ago, or ISO."
        )
        parser.add_argument("--until", type=since_value, default=None, help="End (exclusive); same forms.")
        parser.add_argument(
            "--model", action="append", metavar="app_label.Model", help="Only this model (repeatable)."
        )
        parser.add_argument(
            "--out", default=None, help="Output directory (default ./queuereport-<UTC time>)."
        )
        parser.add_argument("--top-errors", type=whole_number(), default=10, help="Errors listed per model.")
        parser.add_argument("--master", default="local[*]", help="Spark master URL (default local[*]).")
        parser.add_argument("--database", default="default", help="Database alias holding the history.")

    def handle(self, *args: Any, **options: Any) -> None:
        from django_dbqueue import spark as pipeline

        if options["database"] not in connections:
            raise CommandError(f"Unknown database alias {options['database']!r}.")
        out = Path(options["out"] or f"queuereport-{datetime.now(UTC):%Y%m%dT%H%M%SZ}")
        verbose = options["verbosity"] >= 1

        def say(message: str) -> None:
            if verbose:
                self.stdout.write(message)
                self.stdout.flush()

        try:
            say(f"starting Spark ({options['master']})")
            spark = pipeline.spark_session(options["master"], app_name="queuereport", log_level="ERROR")
            report = pipeline.queue_report(
                spark,
                out=out,
                since=options["since"],
                until=options["until"],
                models=options["model"],
                using=options["database"],
                top_errors=options["top_errors"],
                progress=say,
            )
        except (ImproperlyConfigured, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        except Exception as exc:
            if type(exc).__module__.startswith(("pyspark", "py4j")):
                raise CommandError(f"Spark failed: {str(exc).strip().splitlines()[0]}") from exc
            raise
        for row in report.summary:
            rate = row["attempt_failure_rate"]
            self.stdout.write(
                f"{row['model']}: {row['attempts']} attempts, {row['jobs']} jobs, "
                f"failure rate {rate * 100 if rate is not None else 0:.1f} %, {_throughput(row)}, "
                f"wait p95 {_seconds(row['wait_s_p95'])}, run p95 {_seconds(row['run_s_p95'])}, "
                f"end-to-end p95 {_seconds(row['e2e_s_p95'])}"
            )
        if not report.summary:
            self.stdout.write("no finished attempts in this window")
        self.stdout.write(f"report: {report.files['report.md']}")
