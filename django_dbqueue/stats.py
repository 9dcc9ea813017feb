"""Numbers for the queue dashboard: counts per state, age of the oldest due row, throughput."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Count, Min
from django.utils import timezone

from .query import DbNow, db_now_plus
from .states import QueueState


def queue_stats(model: Any, using: str | None = None) -> dict[str, Any]:
    """A few cheap aggregates; each uses the claim index's ``queue_state`` prefix.

    The "last hour" numbers read ``queue_finished_at`` of SUCCEEDED and FAILED rows: on a
    big table give the model ``Index(fields=["queue_state", "queue_finished_at"])`` (see
    docs/admin.md), or they scan every finished row.
    """
    qs = model.queue_queryset(using).order_by()
    per_state = dict(qs.values_list("queue_state").annotate(n=Count("pk")).values_list("queue_state", "n"))
    counts = [(state, label, per_state.get(state, 0)) for state, label in QueueState.choices]
    oldest = qs.ready().aggregate(oldest=Min("queue_run_at"))["oldest"]
    hour = dict(
        qs.filter(
            queue_state__in=(QueueState.SUCCEEDED, QueueState.FAILED),
            queue_finished_at__gte=db_now_plus(timedelta(hours=-1)),
        )
        .values_list("queue_state")
        .annotate(n=Count("pk"))
        .values_list("queue_state", "n")
    )
    holders = list(
        qs.filter(queue_state=QueueState.RUNNING, queue_locked_until__gt=DbNow())
        .values_list("queue_locked_by")
        .annotate(n=Count("pk"))
        .order_by("queue_locked_by")
    )
    return {
        "counts": counts,
        "total": sum(per_state.values()),
        "oldest_ready_age": (timezone.now() - oldest) if oldest else None,
        "succeeded_last_hour": hour.get(QueueState.SUCCEEDED, 0),
        "failed_last_hour": hour.get(QueueState.FAILED, 0),
        "workers": [(who, n) for who, n in holders if not (who or "").startswith("user:")],
        "people": [(who[5:], n) for who, n in holders if (who or "").startswith("user:")],
    }
