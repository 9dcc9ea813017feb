"""Benchmark (not a test): the queue dashboard with its charts over 1,000,000 attempt-history rows.

    DATABASE_URL=mysql://root@127.0.0.1:3306/dbq_dashboard_bench .venv/bin/python bench/dashboard.py
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/dbq_dashboard_bench .venv/bin/python bench/dashboard.py

(Create the database first: ``CREATE DATABASE dbq_dashboard_bench``; the script migrates it.)
Fills ``django_dbqueue_queueattempt`` with 1,000,000 rows in two shapes and times the admin
dashboard of ``testapp.Ticket`` through Django's test client (the whole request: counts per
state, the charts' grouped statement, the SVG, the templates): the first view with no settled
bucket cached ("cold"), then the median of 7 (settled buckets come from Django's cache):

* **week**: four queue models, the history of the last 7 days (Ticket has half the rows:
  about 71,000 in the last day, 3,000 in the last hour);
* **hot day**: every one of the 1,000,000 rows is Ticket's, all in the last 24 hours (about
  42,000 in the last hour): the worst case for the "day" view.

Prints a Markdown table; also EXPLAINs the charts' statement.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("DATABASE_URL", "mysql://root@127.0.0.1:3306/dbq_dashboard_bench")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.cache import cache  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.urls import reverse  # noqa: E402

from django_dbqueue.admin.timeline import timeline  # noqa: E402
from django_dbqueue.models import QueueAttempt  # noqa: E402

ROWS = 1_000_000
TABLE = QueueAttempt._meta.db_table
MODELS = ("testapp.Ticket", "testapp.Job", "shop.Order", "django_dbqueue.Message")
OUTCOMES = ("succeeded",) * 17 + ("retried", "retried", "failed")


def fill(seconds_back: int, one_model: bool) -> None:
    """Insert ROWS attempts with finished_at spread evenly over the last ``seconds_back``."""
    from django.utils import timezone

    now = timezone.now()
    QueueAttempt.objects.all().delete()
    chunk = 20_000
    for start in range(0, ROWS, chunk):
        rows = []
        for i in range(start, start + chunk):
            finished = now - timezone.timedelta(seconds=(i * seconds_back / ROWS))
            claimed = finished - timezone.timedelta(milliseconds=5 + i % 400)
            rows.append(
                QueueAttempt(
                    model=MODELS[0] if one_model or i % 2 == 0 else MODELS[1 + i % 3],
                    object_id=str(i),
                    attempt=1 + (i % 20 == 19),
                    worker_id=f"host-{i % 4}:1",
                    enqueued_at=claimed,
                    due_at=claimed - timezone.timedelta(milliseconds=i % 3000),
                    claimed_at=claimed,
                    finished_at=finished,
                    outcome=OUTCOMES[i % len(OUTCOMES)],
                )
            )
        QueueAttempt.objects.bulk_create(rows, batch_size=chunk)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE TABLE {TABLE}" if connection.vendor == "mysql" else f"ANALYZE {TABLE}")


def timed(client: Client, span: str, runs: int = 7) -> tuple[float, float, int]:
    """The first view with no bucket cached (cold), then the median of ``runs`` views."""
    url = reverse("admin:testapp_ticket_dbqueue_dashboard") + f"?span={span}"
    cache.clear()
    started = time.perf_counter()
    assert client.get(url).status_code == 200
    cold = (time.perf_counter() - started) * 1000
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url)
        times.append(time.perf_counter() - started)
        assert response.status_code == 200 and b'id="dbqueue-chart-throughput"' in response.content
    return cold, statistics.median(times) * 1000, len(queries)


def timeline_ms(span: str, runs: int = 7) -> float:
    """The charts' statement alone, nothing cached."""
    times = []
    for _ in range(runs):
        cache.clear()
        started = time.perf_counter()
        timeline("testapp.Ticket", "default", span)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def explain(span: str) -> str:
    from django.db.models import Count
    from django.db.models.functions import TruncHour, TruncMinute
    from django.utils import timezone

    trunc, back = (TruncMinute, 1) if span == "hour" else (TruncHour, 24)
    qs = (
        QueueAttempt.objects.filter(
            model="testapp.Ticket", finished_at__gte=timezone.now() - timezone.timedelta(hours=back)
        )
        .annotate(bucket=trunc("finished_at"))
        .values("bucket", "outcome")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return qs.explain()


def main() -> None:
    call_command("migrate", verbosity=0)
    user, _ = User.objects.get_or_create(username="bench", defaults={"is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)
    print(f"## Dashboard with charts, {ROWS:,} history rows, {connection.vendor}\n")
    print(
        "| history shape | view | page ms, cold | page ms, median of 7 | statements | charts query, cold ms |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for name, seconds, one in (("week, 4 models", 7 * 86400, False), ("hot day, 1 model", 86400, True)):
        started = time.perf_counter()
        fill(seconds, one)
        print(f"<!-- filled {name} in {time.perf_counter() - started:.0f}s -->", file=sys.stderr)
        for span in ("hour", "day"):
            cold, page, statements = timed(client, span)
            print(f"| {name} | {span} | {cold:.0f} | {page:.0f} | {statements} | {timeline_ms(span):.0f} |")
        print(f"\nEXPLAIN ({name}, day):\n```\n{explain('day')}\n```\n", file=sys.stderr)


if __name__ == "__main__":
    main()
