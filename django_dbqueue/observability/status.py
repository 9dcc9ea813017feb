"""The queue at a glance, for a terminal (``manage.py queuestatus``): per model the rows ready,
running and failed, the age of the oldest due row, the outcomes per minute of the last five
minutes, and the live workers.

The same bounded statements as the admin dashboard (:mod:`django_dbqueue.admin.stats`): counts
stop at a limit (then shown as ``>N``), rates come from the attempt history's timeline index.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import router
from django.db.models import Count, Max, Min

from ..backends import DbNow, aware, db_now_plus
from ..queue.history import AttemptOutcome, attempt_model, history_enabled
from ..states import QueueState
from ..tables.worker_process import WorkerProcess

#: States counted exactly up to this many rows each.
COUNT_LIMIT = 100_000
#: The window the rates are averaged over.
RATE_WINDOW = timedelta(minutes=5)


@dataclass
class ModelStatus:
    label: str
    counts: dict[str, int]
    oldest_ready: timedelta | None
    #: Outcomes per minute over the last RATE_WINDOW; None without history.
    rates: dict[str, float] | None
    workers: int


def oldest_wait(rows: Any) -> timedelta | None:
    """How long the oldest due READY row of ``rows`` has waited, on the database's clock
    (workers and whoever asks may run on other hosts); None when none is due. A MIN over the
    claim index's entries of READY rows: no table row is read."""
    due = rows.ready().order_by().aggregate(first=Min("queue_run_at"), now=Max(DbNow()))
    if due["first"] is None:
        return None
    return max(aware(due["now"]) - due["first"], timedelta(0))


def model_status(model: Any, using: str | None = None) -> ModelStatus:
    using = using or router.db_for_read(model)
    rows = model.queue_queryset(using).order_by()
    counts: dict[str, int] = {
        state: rows.filter(queue_state=state).values("pk")[: COUNT_LIMIT + 1].count()
        for state in (QueueState.READY, QueueState.RUNNING, QueueState.FAILED)
    }
    waited = oldest_wait(rows)
    oldest = timedelta(seconds=int(waited.total_seconds())) if waited is not None else None
    rates = None
    if history_enabled(model):
        done = dict(
            attempt_model()
            ._default_manager.using(using)
            .filter(model=model._meta.label, finished_at__gte=db_now_plus(-RATE_WINDOW))
            .values_list("outcome")
            .annotate(n=Count("pk"))
            .order_by()
        )
        minutes = RATE_WINDOW.total_seconds() / 60
        rates = {outcome: done.get(outcome, 0) / minutes for outcome in AttemptOutcome.values}
    alive = WorkerProcess._default_manager.using(using).alive()
    workers = sum(model._meta.label in w.split(",") for w in alive.values_list("queue_models", flat=True))
    return ModelStatus(model._meta.label, counts, oldest, rates, workers)


def _count(n: int) -> str:
    return f">{COUNT_LIMIT:,}" if n > COUNT_LIMIT else f"{n:,}"


def _rate(rates: dict[str, float] | None, *outcomes: str) -> str:
    if rates is None:
        return "-"
    return f"{sum(rates[o] for o in outcomes):.1f}"


COLUMNS = ("queue model", "ready", "running", "failed", "oldest ready", "done/min", "errors/min", "workers")


def render(statuses: list[ModelStatus], alive: list[str]) -> str:
    """A fixed-width table, one line per model, and the live workers under it."""
    lines = [
        (
            s.label,
            _count(s.counts[QueueState.READY]),
            _count(s.counts[QueueState.RUNNING]),
            _count(s.counts[QueueState.FAILED]),
            str(s.oldest_ready) if s.oldest_ready is not None else "-",
            _rate(s.rates, AttemptOutcome.SUCCEEDED),
            _rate(s.rates, AttemptOutcome.RETRIED, AttemptOutcome.FAILED, AttemptOutcome.LOST),
            str(s.workers),
        )
        for s in statuses
    ]
    widths = [max(len(row[i]) for row in [COLUMNS, *lines]) for i in range(len(COLUMNS))]

    def line(row: tuple[str, ...]) -> str:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(widths[i]) for i, cell in enumerate(row) if i]
        return "  ".join(cells).rstrip()

    text = [line(COLUMNS), *(line(row) for row in lines), ""]
    text.append(f"rates: per minute over the last {int(RATE_WINDOW.total_seconds() // 60)} minutes (history)")
    text.append(f"workers alive: {len(alive)}" + (f" ({', '.join(alive)})" if alive else ""))
    return "\n".join(text) + "\n"


def alive_workers(using: str) -> list[str]:
    table = WorkerProcess
    return list(
        table._default_manager.using(using).alive().order_by("worker_id").values_list("worker_id", flat=True)
    )
