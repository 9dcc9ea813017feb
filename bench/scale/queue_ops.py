"""The queue's own operations at 10,000,000 rows beside the same on a table with nothing
finished: the claim, enqueue (one ``save()`` at a time and ``bulk_enqueue``), and the rescue of
10,000 expired leases."""

from __future__ import annotations

import re
import statistics
import time
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import connections
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from shop.models import Order

from django_dbqueue.backends import db_now_plus
from django_dbqueue.conf import settings as dbq_settings
from django_dbqueue.queue.rescue import rescue_expired
from django_dbqueue.states import QueueState

ALIASES = ("default", "empty")


def claim_ms(using: str, size: int) -> float:
    """One claim of ``size`` rows (committed), then the rows put back (not timed), so every
    claim of a run finds the same rows due."""
    started = time.perf_counter()
    rows = Order.objects.using(using).claim(limit=size, worker_id="scale-bench")
    took = time.perf_counter() - started
    assert len(rows) == size, f"{using}: claimed {len(rows)} of {size}"
    Order.objects.using(using).filter(pk__in=[r.pk for r in rows]).update(
        queue_state=QueueState.READY,
        queue_token=None,
        queue_locked_by=None,
        queue_locked_until=None,
        queue_attempts=F("queue_attempts") - 1,
    )
    return took * 1000


def claims(repeat: int) -> list[dict[str, Any]]:
    """Median ms per claim of 1 and of 100 rows, the two tables in turn each round."""
    out = []
    for size in (1, 100):
        times: dict[str, list[float]] = {using: [] for using in ALIASES}
        for using in ALIASES:
            claim_ms(using, size)  # warm-up
        for _ in range(repeat):
            for using in ALIASES:
                times[using].append(claim_ms(using, size))
        big, empty = (statistics.median(times[u]) for u in ALIASES)
        out.append({"what": f"claim({size})", "big": big, "empty": empty, "unit": "ms", "ratio": big / empty})
        print(
            f"  claim({size}): {big:.2f} ms at 10M vs {empty:.2f} ms empty ({big / empty:.2f}x)", flush=True
        )
    return out


def enqueue(saves: int, bulk: int, rounds: int = 5) -> list[dict[str, Any]]:
    """Rows per second of new orders saved one by one and of ``bulk_enqueue``, the two tables in
    turn for ``rounds`` rounds (medians); the rows are deleted afterwards."""
    rates: dict[tuple[str, str], list[float]] = {}
    first = {u: Order.objects.using(u).order_by("-pk").values_list("pk", flat=True).first() for u in ALIASES}
    for _ in range(rounds):
        for using in ALIASES:
            started = time.perf_counter()
            for i in range(saves // rounds):
                Order(customer_id=1 + i % 5000, total=Decimal("12.50")).save(using=using)
            rates.setdefault((using, "save"), []).append(saves // rounds / (time.perf_counter() - started))
            rows = [{"customer_id": 1 + i % 5000, "total": Decimal("12.50")} for i in range(bulk // rounds)]
            started = time.perf_counter()
            Order.objects.using(using).bulk_enqueue(rows)
            rates.setdefault((using, "bulk"), []).append(bulk // rounds / (time.perf_counter() - started))
    for using in ALIASES:
        Order.objects.using(using).filter(pk__gt=first[using]).delete()
    out = []
    for kind, name in (("save", "enqueue: save() of a new order"), ("bulk", "enqueue: bulk_enqueue()")):
        big, empty = (statistics.median(rates[(u, kind)]) for u in ALIASES)
        out.append({"what": name, "big": big, "empty": empty, "unit": "rows/s", "ratio": big / empty})
        print(f"  {name}: {big:,.0f} rows/s at 10M vs {empty:,.0f} empty ({big / empty:.2f}x)", flush=True)
    return out


def expire_running(using: str) -> int:
    """Expire the leases of the RUNNING orders (10,000 of 10,000,000); after an earlier run's
    rescue they are READY again with the rescue's reason: those are put back RUNNING first."""
    rows = Order.objects.using(using)
    if not rows.filter(queue_state=QueueState.RUNNING).exists():
        rows.filter(queue_last_error__startswith="lease expired").update(
            queue_state=QueueState.RUNNING, queue_token=F("pk"), queue_locked_by="web-0:100"
        )
    return rows.filter(queue_state=QueueState.RUNNING).update(
        queue_locked_until=db_now_plus(timedelta(minutes=-1))
    )


def rescue() -> list[dict[str, Any]]:
    """Time the rescue passes (``DBQUEUE_RESCUE_LIMIT`` rows each) that bring every expired
    order back, on both tables."""
    out: dict[str, dict[str, Any]] = {}
    for using in ALIASES:
        expired = expire_running(using)
        passes, started, longest = 0, time.perf_counter(), 0.0
        with CaptureQueriesContext(connections[using]) as queries:
            while True:
                one = time.perf_counter()
                done = rescue_expired(Order, using)
                longest = max(longest, time.perf_counter() - one)
                if not done:
                    break
                passes += 1
        total = time.perf_counter() - started
        # Where the time went: the statements' own time by kind and table.
        spent: dict[str, float] = {}
        for query in queries.captured_queries:
            found = re.search(r"(?:FROM|INTO|UPDATE)\s+[`\"]?(\w+)", query["sql"])
            key = f"{query['sql'].split()[0]} {found.group(1) if found else ''}".strip()
            spent[key] = spent.get(key, 0.0) + float(query["time"]) * 1000
        print(
            f"  {using}: "
            + ", ".join(f"{k} {v:.0f} ms" for k, v in sorted(spent.items(), key=lambda i: -i[1]))
        )
        out[using] = {"rows": expired, "total": total * 1000, "passes": passes, "longest": longest * 1000}
        out[using]["sql"] = spent
        print(f"  {using}: rescued {expired:,} rows in {passes} passes, {total:.2f} s", flush=True)
    big, empty = out["default"], out["empty"]
    name = (
        f"rescue of {big['rows']:,} expired leases ({big['passes']} passes of "
        f"{dbq_settings.RESCUE_LIMIT}; longest pass {big['longest']:.0f} ms at 10M, "
        f"{empty['longest']:.0f} ms empty)"
    )
    slowest = sorted(big["sql"].items(), key=lambda i: -i[1])[:3]
    name += "; at 10M the statements' time went to " + ", ".join(f"{k} ({v:,.0f} ms)" for k, v in slowest)
    return [
        {
            "what": name,
            "big": big["total"],
            "empty": empty["total"],
            "unit": "ms",
            "ratio": big["total"] / empty["total"],
        }
    ]
