"""The dashboard over time: throughput, failures and latencies from the attempt history,
bucketed by the database, drawn as SVG in the page."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_dbqueue.admin import timeline as timeline_module
from django_dbqueue.admin.timeline import timeline, trunc_python
from django_dbqueue.models import QueueAttempt
from django_dbqueue.queue.history import AttemptOutcome
from tests.conftest import every_database

pytestmark = [
    pytest.mark.django_db,
    every_database("the buckets are the database's own date truncation, different SQL on each"),
]

URL = "admin:testapp_ticket_dbqueue_dashboard"


@pytest.fixture(autouse=True)
def no_cached_buckets() -> None:
    cache.clear()  # settled buckets are cached; each test's history is rolled back


def attempts(outcome: str, minutes_ago: float, n: int, wait: float = 1.0, run: float = 2.0) -> None:
    finished = timezone.now() - timedelta(minutes=minutes_ago)
    QueueAttempt.objects.bulk_create(
        QueueAttempt(
            model="testapp.Ticket",
            object_id=str(i),
            attempt=1,
            due_at=finished - timedelta(seconds=run + wait),
            claimed_at=finished - timedelta(seconds=run),
            finished_at=finished,
            outcome=outcome,
        )
        for i in range(n)
    )


def test_the_last_hour_per_minute() -> None:
    attempts(AttemptOutcome.SUCCEEDED, 0, 5, wait=1, run=2)
    attempts(AttemptOutcome.SUCCEEDED, 0, 5, wait=3, run=4)
    attempts(AttemptOutcome.FAILED, 10, 2)
    attempts(AttemptOutcome.RETRIED, 30, 3)
    attempts(AttemptOutcome.SUCCEEDED, 90, 7)  # before the hour
    QueueAttempt.objects.create(
        model="testapp.Job", object_id="1", attempt=1, finished_at=timezone.now(), outcome="succeeded"
    )
    found = timeline("testapp.Ticket", "default", "hour")
    assert len(found.buckets) == 60
    assert found.buckets[-1].start == trunc_python(timezone.now(), timedelta(minutes=1))
    assert (found.total("succeeded"), found.total("failed"), found.total("retried")) == (10, 2, 3)
    last = found.buckets[-1]
    assert last.counts == {"succeeded": 10}
    assert last.run == pytest.approx(3.0, abs=0.01) and last.wait == pytest.approx(2.0, abs=0.01)
    assert last.wait_max == pytest.approx(3.0, abs=0.01)
    assert found.buckets[0].total == 0 and found.buckets[0].run is None


def test_the_last_day_per_hour() -> None:
    attempts(AttemptOutcome.SUCCEEDED, 90, 7)
    attempts(AttemptOutcome.LOST, 60 * 23, 1)
    attempts(AttemptOutcome.SUCCEEDED, 60 * 25, 4)  # before the day
    found = timeline("testapp.Ticket", "default", "day")
    assert len(found.buckets) == 24
    assert (found.total("succeeded"), found.total("lost")) == (7, 1)


def test_a_bad_span_is_refused() -> None:
    with pytest.raises(ValueError, match="span must be one of"):
        timeline("testapp.Ticket", "default", "week")


def test_the_dashboard_draws_the_charts(admin_client: Client) -> None:
    attempts(AttemptOutcome.SUCCEEDED, 0, 4)
    attempts(AttemptOutcome.FAILED, 0, 1)
    attempts(AttemptOutcome.RETRIED, 5, 2)
    response = admin_client.get(reverse(URL))
    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('<svg class="dbqueue-chart"') == 2
    throughput = re.search(r'<svg[^>]*id="dbqueue-chart-throughput".*?</svg>', html, re.S)
    assert throughput is not None
    bars = re.findall(r'<rect [^>]*data-outcome="(\w+)"', throughput.group(0))
    # one bar segment per outcome and bucket: this minute's success and failure, the retries'
    assert sorted(bars) == ["failed", "retried", "succeeded"]
    assert "4 succeeded, 0 retried, 1 failed, 0 lost" in throughput.group(0)
    latency = re.search(r'<svg[^>]*id="dbqueue-chart-latency".*?</svg>', html, re.S)
    assert latency is not None and latency.group(0).count("<polyline") == 2
    assert 'data-outcome="succeeded">succeeded: 4<' in html
    day = admin_client.get(reverse(URL), {"span": "day"}).content.decode()
    assert "The last day, per hour" in day
    nonsense = admin_client.get(reverse(URL), {"span": "nonsense"}).content.decode()
    assert "The last hour, per minute" in nonsense


def test_a_value_in_the_svg_is_escaped(admin_client: Client) -> None:
    from django_dbqueue.admin.charts import legend

    assert "<script" not in str(legend())
    html = admin_client.get(reverse(URL)).content.decode()
    assert "<svg" in html and "<script" not in html.split('id="dbqueue-timeline"')[1].split("</div>")[0]


def test_no_charts_for_a_model_without_history(admin_client: Client, settings) -> None:
    settings.DBQUEUE_HISTORY = False
    html = admin_client.get(reverse(URL)).content.decode()
    assert "dbqueue-chart-" not in html and "dbqueue-timeline" not in html


def test_settled_buckets_are_read_once() -> None:
    attempts(AttemptOutcome.SUCCEEDED, 30, 3)
    assert timeline("testapp.Ticket", "default", "hour").total("succeeded") == 3
    attempts(AttemptOutcome.SUCCEEDED, 30, 2)  # written late into a settled bucket: not seen
    attempts(AttemptOutcome.SUCCEEDED, 0, 4)  # the current bucket is always read
    assert timeline("testapp.Ticket", "default", "hour").total("succeeded") == 3 + 4
    cache.clear()
    assert timeline("testapp.Ticket", "default", "hour").total("succeeded") == 9


def _busy_slice(hours_ago: int, n: int) -> datetime:
    """``n`` attempts (every tenth failed) spread evenly over the second slice of the hour
    ``hours_ago`` hours back, each waited 1 s and ran 2 s; that hour's start."""
    hour = trunc_python(timezone.now(), timedelta(hours=1)) - timedelta(hours=hours_ago)
    width = timedelta(hours=1) / timeline_module.DAY_SLICES
    edge, gap = hour + width, width / n
    rows = []
    for i in range(n):
        finished = edge + gap * (i + 0.5)
        rows.append(
            QueueAttempt(
                model="testapp.Ticket",
                object_id=str(i),
                attempt=1,
                due_at=finished - timedelta(seconds=3),
                claimed_at=finished - timedelta(seconds=2),
                finished_at=finished,
                outcome=AttemptOutcome.FAILED if i % 10 == 9 else AttemptOutcome.SUCCEEDED,
            )
        )
    QueueAttempt.objects.bulk_create(rows)
    return hour


def test_a_busy_day_is_read_from_a_bounded_sample(admin_client: Client) -> None:
    hour = _busy_slice(3, 1000)
    attempts(AttemptOutcome.RETRIED, 60 * 5, 7)  # a quiet hour: read whole, counted exactly
    with CaptureQueriesContext(connection) as queries:
        found = timeline("testapp.Ticket", "default", "day")
    busy = next(bucket for bucket in found.buckets if bucket.start == hour)
    assert found.total("retried") == 7
    if not connection.features.supports_slicing_ordering_in_compound:
        # SQLite: one grouped statement over every attempt, exact.
        assert busy.counts == {"succeeded": 900, "failed": 100} and not found.estimated
        return
    (statement,) = [q["sql"] for q in queries if "queueattempt" in q["sql"]]
    # One index range read per slice of the day, each stopping at DAY_SLICE_ROWS.
    assert statement.upper().count("UNION ALL") == 24 * timeline_module.DAY_SLICES - 1
    assert statement.upper().count("LIMIT") == 24 * timeline_module.DAY_SLICES
    assert busy.estimated and found.estimated
    assert not any(bucket.estimated for bucket in found.buckets if bucket.start != hour)
    # The first 100 of 1,000 evenly spread attempts: the rate, so the count, within 2 %.
    assert busy.total == pytest.approx(1000, rel=0.02)
    assert busy.counts["failed"] == pytest.approx(100, rel=0.05)
    assert busy.run == pytest.approx(2.0, abs=0.01) and busy.wait == pytest.approx(1.0, abs=0.01)
    html = admin_client.get(reverse(URL), {"span": "day"}).content.decode()
    assert 'id="dbqueue-timeline-estimated"' in html
    assert "each 20 minutes were sampled by their first 100 attempts" in html


def test_a_sample_never_counts_fewer_than_it_read() -> None:
    # 100 attempts in the first millisecond of a slice: a full slice, its rate unbounded but for
    # the floor of one millisecond; every row read still counts at least once.
    hour = trunc_python(timezone.now(), timedelta(hours=1)) - timedelta(hours=2)
    at = hour + timedelta(microseconds=10)
    QueueAttempt.objects.bulk_create(
        QueueAttempt(model="testapp.Ticket", object_id=str(i), attempt=1, finished_at=at, outcome="succeeded")
        for i in range(100)
    )
    found = timeline("testapp.Ticket", "default", "day")
    busy = next(bucket for bucket in found.buckets if bucket.start == hour)
    assert busy.total >= 100 and busy.run is None and busy.wait is None


def test_the_current_slice_stands_for_the_time_it_has_lasted() -> None:
    if not connection.features.supports_slicing_ordering_in_compound:
        pytest.skip("SQLite reads every attempt: nothing is estimated")
    hour = trunc_python(timezone.now(), timedelta(hours=1)) - timedelta(hours=1)
    now = hour + timedelta(minutes=5)  # the first slice has lasted five minutes of its twenty
    gap = timedelta(minutes=5) / 300
    QueueAttempt.objects.bulk_create(
        QueueAttempt(
            model="testapp.Ticket",
            object_id=str(i),
            attempt=1,
            finished_at=hour + gap * (i + 0.5),
            outcome="succeeded",
        )
        for i in range(300)
    )
    groups, estimated = timeline_module._read_sample(
        "default", "testapp.Ticket", [hour], timedelta(hours=1), now
    )[hour]
    assert estimated
    assert [outcome for outcome, *_ in groups] == ["succeeded"]
    # Not four times 300: the rest of the slice has not happened yet.
    assert groups[0][1] == pytest.approx(300, rel=0.02)
