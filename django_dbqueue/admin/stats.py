"""Numbers for the queue dashboard: counts per state, age of the oldest due row, throughput.

Every statement is bounded, so the dashboard stays fast on a table of many millions of rows:
counts per state stop at ``exact_limit`` (then the planner's estimate is shown, marked "≈"),
and the "last hour" numbers come from the attempt history (indexed by ``finished_at``) or,
when a model keeps no history, from the queue table only through an index on
``(queue_state, queue_finished_at)`` once the table is big (without one they would scan every
finished row).
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from django.db import connections, router
from django.db.models import Case, Count, Min, When
from django.utils import timezone

from ..backends import DbNow, db_now_plus
from ..queue.history import AttemptOutcome, attempt_model, history_enabled
from ..states import QueueState
from ..tables.worker_process import WorkerProcess
from .pagination import plan_row_estimate, table_row_estimate
from .workflow import is_workflow, workflow_counts

#: Counts above this are estimates (as the changelist's, admin/pagination.py): each state's exact
#: count reads up to this many index entries, seven states a page (100,000 took 0.3 s of the
#: dashboard's time at 10,000,000 rows on MariaDB).
EXACT_LIMIT = 10_000
#: Tables estimated above this many rows need the finished-at index for "last hour" numbers.
SCAN_LIMIT = 200_000
FINISHED_INDEX = ("queue_state", "queue_finished_at")
#: Running rows read to tell who holds what. ``queue_locked_by`` is in no index, so each is a
#: row read: 10,000 running rows of a 10,000,000-row table took 0.97 s (MariaDB, rows not in
#: memory). Beyond this many the holders are those of the first rows read (live leases among
#: them), said so.
HOLDERS_LIMIT = 1000


def queue_stats(model: Any, using: str | None = None, exact_limit: int | None = None) -> dict[str, Any]:
    using = using or router.db_for_read(model)
    exact_limit = EXACT_LIMIT if exact_limit is None else exact_limit
    qs = model.queue_queryset(using).order_by()
    size = table_row_estimate(model, using)
    exact = {state: qs.filter(queue_state=state)[: exact_limit + 1].count() for state in QueueState.values}
    capped = [state for state, n in exact.items() if n > exact_limit]
    if len(capped) == 1 and size is not None:
        # The usual big table: one huge state (SUCCEEDED). The table's row estimate minus
        # the exact counts of the others beats the planner's guess for that one state.
        exact[capped[0]] = max(exact_limit + 1, size - sum(n for s, n in exact.items() if s != capped[0]))
    else:
        for state in capped:
            exact[state] = max(exact_limit + 1, plan_row_estimate(qs.filter(queue_state=state)) or 0)
    counts = [(state, label, exact[state], state in capped) for state, label in QueueState.choices]
    oldest = qs.ready().aggregate(oldest=Min("queue_run_at"))["oldest"]
    stats: dict[str, Any] = {
        "counts": counts,
        "total": sum(n for *_, n, _e in counts),
        "total_estimated": any(e for *_, e in counts),
        # whole seconds: "0:02:12", not "0:02:12.858200"
        "oldest_ready_age": timedelta(seconds=int((timezone.now() - oldest).total_seconds()))
        if oldest
        else None,
        "succeeded_last_hour": None,
        "failed_last_hour": None,
        "retried_last_hour": None,
        "finished_index": FINISHED_INDEX,
    }
    hour_ago = db_now_plus(timedelta(hours=-1))
    if history_enabled(model):
        # The attempt history has an index on finished_at: the last hour's outcomes are read
        # without touching the queue table.
        hour = dict(
            attempt_model()
            ._default_manager.using(using)
            .filter(model=model._meta.label, finished_at__gte=hour_ago)
            .order_by()
            .values_list("outcome")
            .annotate(n=Count("pk"))
            .values_list("outcome", "n")
        )
        stats["succeeded_last_hour"] = hour.get(AttemptOutcome.SUCCEEDED, 0)
        stats["failed_last_hour"] = hour.get(AttemptOutcome.FAILED, 0)
        stats["retried_last_hour"] = hour.get(AttemptOutcome.RETRIED, 0)
    elif size is None or size <= SCAN_LIMIT or has_index(model, using, FINISHED_INDEX):
        hour = dict(
            qs.filter(
                queue_state__in=(QueueState.SUCCEEDED, QueueState.FAILED),
                queue_finished_at__gte=hour_ago,
            )
            .values_list("queue_state")
            .annotate(n=Count("pk"))
            .values_list("queue_state", "n")
        )
        stats["succeeded_last_hour"] = hour.get(QueueState.SUCCEEDED, 0)
        stats["failed_last_hour"] = hour.get(QueueState.FAILED, 0)
    # The first running rows, each with whether its lease is live by the database's clock. The
    # lease is tested in the select list, not in WHERE: a WHERE on queue_locked_until would read
    # running rows until it found HOLDERS_LIMIT live ones, so 10,000 rows whose leases had all run
    # out (a crashed fleet, before the rescue) were all read (0.65 s at 10,000,000, MariaDB).
    running = list(
        qs.filter(queue_state=QueueState.RUNNING)
        .annotate(live=Case(When(queue_locked_until__gt=DbNow(), then=True), default=False))
        .values_list("queue_locked_by", "live")[: HOLDERS_LIMIT + 1]
    )
    stats["holders_limited"] = HOLDERS_LIMIT if len(running) > HOLDERS_LIMIT else None
    held = dict(sorted(Counter(who or "" for who, live in running[:HOLDERS_LIMIT] if live).items()))
    stats["people"] = [(who[5:], n) for who, n in held.items() if who.startswith("user:")]
    # Live workers: those the registry saw within three heartbeats that consume this model,
    # with the rows each holds, then lease holders the registry does not know (yet).
    alive = [
        w.worker_id
        for w in WorkerProcess._default_manager.using(using).alive().order_by("worker_id")
        if model._meta.label in w.queue_models.split(",")
    ]
    stats["workers"] = [(who, held.pop(who, 0)) for who in alive]
    stats["workers"] += [(who, n) for who, n in held.items() if not who.startswith("user:")]
    stats["workflows"] = workflow_counts(model, using, exact_limit) if is_workflow(model) else None
    stats["workflows_limit"] = exact_limit  # a count above it reads "more than" (it stopped there)
    return stats


def has_index(model: Any, using: str, fields: tuple[str, ...]) -> bool:
    """Whether the table has an index whose leading columns are ``fields`` (in the database,
    whether a migration or a DBA made it)."""
    columns = [model._meta.get_field(name).column for name in fields]
    connection = connections[using]
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, model._meta.db_table)
    return any(
        (c.get("index") or c.get("unique")) and list(c["columns"][: len(columns)]) == columns
        for c in constraints.values()
    )
