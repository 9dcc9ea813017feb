"""The admin at 10,000,000 orders and 10,000,000 attempt rows, through Django's test client
logged in as a superuser: the example shop's ``OrderAdmin`` as shipped (the pages of
``bench/admin_changelist.py --example``, plus search, the charts, a change page with its history
and the attempt history's own list), then bulk actions on a page of selected rows and on "select
all" over a filter. Every action's rows are put back afterwards (not timed)."""

from __future__ import annotations

import re
import statistics
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from django.contrib.auth.models import User
from django.db.models import F
from django.test import Client
from django.urls import reverse
from shop.models import Order

from bench.admin_changelist import example_pages, measure
from django_dbqueue.states import QueueState

UTC = timezone.utc  # datetime.UTC is Python 3.11+

TARGET_MS = 500
#: Rows ticked by hand: one page of the list. A POST of 1,000 ticked rows is refused by Django
#: itself (400: more than DATA_UPLOAD_MAX_NUMBER_FIELDS, 1,000 by default).
SELECTED = 100


def more_pages(rows: int) -> list[tuple[str, str]]:
    """What ``example_pages`` does not cover: search, the day's charts, a change page with
    its attempt history, and the history's own admin list."""
    orders = reverse("admin:shop_order_changelist")
    failed = (
        Order.objects.filter(queue_state=QueueState.FAILED).order_by("-pk").values_list("pk", flat=True)[0]
    )
    history = reverse("admin:django_dbqueue_queueattempt_changelist")
    today = datetime.now(UTC).date()
    days = (
        f"finished_at__range__gte_0={today - timedelta(days=10)}"
        f"&finished_at__range__lte_0={today - timedelta(days=8)}"
    )
    return [
        ("search 'Customer 3345' (customer name)", orders + "?q=Customer+3345"),
        ("dashboard, charts of the day", reverse("admin:shop_order_dbqueue_dashboard") + "?span=day"),
        (
            f"change page of failed order {failed:,} (with its history)",
            reverse("admin:shop_order_change", args=[failed]),
        ),
        ("attempt history: list", history),
        ("attempt history: outcome = failed", history + "?outcome__exact=failed"),
        ("attempt history: finished in a three-day range", history + f"?{days}"),
        (f"attempt history: search order {failed}", history + f"?q={failed}"),
    ]


def pages(client: Client, rows: int, repeat: int) -> list[dict[str, Any]]:
    out = []
    for name, url in example_pages(rows) + more_pages(rows):
        started = time.perf_counter()
        response = client.get(url)
        first = (time.perf_counter() - started) * 1000
        if response.status_code == 302 and "p=" in url:  # a deep page a small table does not have
            print(f"  {name:<60} skipped: no such page at {rows:,} rows", flush=True)
            continue
        assert response.status_code == 200, (url, response.status_code)
        # A page of many seconds is loaded twice more, not ``repeat`` times (the run stays short).
        times, queries, sql, cpu = measure(client, url, repeat if first < 5000 else 1)
        median = statistics.median(times) * 1000
        slowest = max(queries, key=lambda q: float(q["time"]), default={"sql": "", "time": 0})
        out.append(
            {
                "what": name,
                "url": url,
                "first": first,
                "median": median,
                "sql": sql * 1000,
                "cpu": cpu * 1000,
                "queries": len(queries),
                "slowest": slowest["sql"],
                "slowest_ms": float(slowest["time"]) * 1000,
            }
        )
        flag = "" if max(first, median) < TARGET_MS else "  <-- over 500 ms"
        print(
            f"  {name:<60} first {first:6.0f} ms  median {median:6.0f} ms  SQL {sql * 1000:5.0f} ms{flag}",
            flush=True,
        )
    return out


def act(client: Client, url: str, action: str, pks: list[Any], across: bool) -> tuple[float, float, int]:
    """One bulk action as the operator runs it: the confirmation page where there is one
    (always for "select all": it shows the exact count), then the action; (page ms, action ms,
    rows the confirmation page announced or the selection's size)."""
    data: dict[str, Any] = {"action": action, "_selected_action": [str(pk) for pk in pks], "index": "0"}
    shown, expected = 0.0, len(pks)
    if across:
        data["select_across"] = "1"
        started = time.perf_counter()
        page = client.post(url, data)
        shown = (time.perf_counter() - started) * 1000
        assert page.status_code == 200, page.status_code
        expected = int(re.search(r'name="dbqueue_expected" value="(\d+)"', page.content.decode()).group(1))
        data.update(dbqueue_apply="1", dbqueue_expected=str(expected))
    started = time.perf_counter()
    response = client.post(url, data)
    took = (time.perf_counter() - started) * 1000
    assert response.status_code == 302, (action, response.status_code)
    return shown, took, expected


def actions(client: Client) -> list[dict[str, Any]]:
    orders = Order.objects.all()
    url = reverse("admin:shop_order_changelist")
    failed = list(orders.filter(queue_state=QueueState.FAILED).values_list("pk", flat=True)[:SELECTED])
    ready = list(orders.filter(queue_state=QueueState.READY).values_list("pk", flat=True)[:SELECTED])
    # "Select all" over a filter: the failed orders that finished on one day (the rangefilter),
    # and the ready orders of the highest priority (6 of 0-6).
    day = (datetime.now(UTC) - timedelta(days=3)).date()
    one_day = (
        f"{url}?queue_state__exact=failed"
        f"&queue_finished_at__range__gte_0={day}&queue_finished_at__range__lte_0={day}"
    )
    top = f"{url}?queue_state__exact=ready&queue_priority__range__gte=6"
    ready_top = list(
        orders.filter(queue_state=QueueState.READY, queue_priority=6).values_list("pk", flat=True)
    )
    runs = [
        (f"retry now, {SELECTED} selected failed orders", url, "dbqueue_retry_now", failed, False),
        (f"cancel, {SELECTED} selected ready orders", url, "dbqueue_cancel", ready, False),
        (
            "retry now, select all: failed, finished on one day",
            one_day,
            "dbqueue_retry_now",
            failed[:1],
            True,
        ),
        ("cancel, select all: ready with priority 6", top, "dbqueue_cancel", ready_top[:1], True),
        (
            "retry now, select all: every failed order",
            f"{url}?queue_state__exact=failed",
            "dbqueue_retry_now",
            failed[:1],
            True,
        ),
    ]
    out = []
    for name, page, action, pks, across in runs:
        shown, took, n = act(client, page, action, pks, across)
        out.append({"what": name, "rows": n, "page": shown, "action": took})
        print(f"  {name:<60} {n:>7,} rows  confirmation {shown:6.0f} ms  action {took:6.0f} ms", flush=True)
        restore(ready + ready_top)
    return out


def restore(cancelled: list[Any]) -> None:
    """Put the actions' rows back: retried ones FAILED (only failed orders carry a traceback),
    cancelled ones READY."""
    Order.objects.filter(queue_state=QueueState.READY, queue_last_error__startswith="Traceback").update(
        queue_state=QueueState.FAILED, queue_attempts=3, queue_finished_at=F("queue_last_attempt_at")
    )
    Order.objects.filter(pk__in=cancelled, queue_state=QueueState.CANCELLED).update(
        queue_state=QueueState.READY, queue_finished_at=None
    )


def admin(rows: int, repeat: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    User.objects.filter(username="scale_bench").delete()
    client = Client()
    client.force_login(User.objects.create_superuser("scale_bench", "bench@example.com", "bench"))
    return pages(client, rows, repeat), actions(client)
